//! `report --json`: one object for tools, the summary's keys with the model's view, the
//! recommendations and the attribution beside them.
use serde::Serialize;

use crate::advise::{ModelView, Recommendation};
use crate::analysis::{AttributionReport, Outcome, Summary};
use crate::model::geometry::LlcGeometry;

#[derive(Serialize)]
pub struct FullReport<'a> {
    #[serde(flatten)]
    pub summary: &'a Summary,
    pub model: ModelSection<'a>,
    pub recommendations: &'a [Recommendation],
    pub attribution: &'a AttributionReport,
}

/// The model's view with the geometry it ran on, or why it could not run.
#[derive(Serialize)]
#[serde(untagged)]
pub enum ModelSection<'a> {
    View {
        #[serde(flatten)]
        view: &'a ModelView,
        geometry: &'a LlcGeometry,
        /// Where the DDIO way count came from, in words.
        ddio_ways_note: &'a str,
        notes: &'a [String],
    },
    Unavailable {
        error: &'a str,
    },
}

impl<'a> FullReport<'a> {
    pub fn new(summary: &'a Summary, outcome: &'a Outcome) -> FullReport<'a> {
        match outcome {
            Outcome::Advised(a) => FullReport {
                summary,
                model: ModelSection::View { view: &a.model, geometry: &a.geometry, ddio_ways_note: &a.ddio_ways_note, notes: &a.notes },
                recommendations: &a.recommendations,
                attribution: &a.attribution,
            },
            Outcome::NoModel { why, attribution } => {
                FullReport { summary, model: ModelSection::Unavailable { error: why }, recommendations: &[], attribution }
            }
        }
    }

    /// Pretty JSON, its keys in sorted order as `report --json` has always printed them.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&serde_json::to_value(self)?)
    }
}
