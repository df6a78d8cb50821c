//! The advice for a recording: the model's view of each queue, and the recommendations
//! with the attributed misses behind them, most-missed queue first.
use anyhow::Result;
use serde::Serialize;

use super::evidence::{attribution, AttributionReport};
use super::geometry::GeometryOverrides;
use super::observation::observation;
use super::summary::Summary;
use super::verdict::{NoChange, QueueVerdict};
use crate::advise::{self, CalibrationReport, ModelRun, ModelView, Recommendation, Spread};
use crate::model::analytic::Dir as MDir;
use crate::model::geometry::{LlcGeometry, WaysSource};
use crate::model::spec::Input;
use crate::recording::Recording;
use crate::snapshot::Dir;

/// A calibration residual beyond this (points) is said in the notes.
pub const CALIBRATION_RESIDUAL_NOTE_PP: f64 = 10.0;

/// What `recommend` prints and the report embeds.
#[derive(Debug, Serialize)]
pub struct Advice {
    pub attribution: AttributionReport,
    /// Each modelled queue's verdict with its reason.
    pub verdicts: Vec<QueueVerdict>,
    pub model: ModelView,
    pub geometry: LlcGeometry,
    /// "measured" when MSR 0xC8B was read at record time; "assumed" otherwise.
    pub ddio_ways_note: String,
    /// Where the modelled LLC comes from: the recording, the command line, or the named
    /// Intel stand-in for a host without DDIO and why it was picked.
    pub llc_origin: String,
    /// The recording host has no DDIO: every prediction is for `llc_origin`'s LLC.
    #[serde(skip)]
    pub ddio_absent: bool,
    /// What the model had to assume about this recording, in plain words.
    pub notes: Vec<String>,
    pub recommendations: Vec<Recommendation>,
    /// Why there are no recommendations, and what to do next (absent when there are some).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_change: Option<NoChange>,
    /// The model's workload inputs, each measured or assumed.
    pub model_inputs: Vec<Input>,
    /// The model fitted to the recording's DDIO counters (absent without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationReport>,
    /// How far the model's predictions move between two runs of the same workload:
    /// differences below it are ties.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// The computation every prediction above came from; the HTML what-if asks it too.
    #[serde(skip)]
    pub run: ModelRun,
}

/// The model's view, the attribution and the recommendations for a recording; `summary`
/// is the recording's, built once.
pub fn advise(rec: &Recording, summary: &Summary, o: GeometryOverrides) -> Result<Advice> {
    let obs = observation(rec, summary, o)?;
    let note = match obs.geometry.ddio_ways_source {
        WaysSource::Measured => "measured: MSR 0xC8B read at record time".to_string(),
        WaysSource::Assumed if super::geometry::stand_in(rec, o).is_some() => {
            "the stand-in's: this host has no DDIO".to_string()
        }
        WaysSource::Assumed => "assumed: MSR 0xC8B was not readable at record time".to_string(),
        WaysSource::Override => "given on the command line".to_string(),
    };
    let run = ModelRun::new(&obs);
    let attribution = attribution(rec, summary, Some((&obs, &run)))?;
    let mut recommendations = advise::recommend(&obs, &run);
    let flows = attributed_flows(rec, &attribution.chosen)?;
    advise::order_by_attributed_misses(&mut recommendations, &attribution.chosen, &flows);
    if let Some(r) = advise::steer_attributed_flow(&obs, &run, &attribution.chosen, &flows) {
        recommendations.insert(0, r);
    }
    let model = advise::model_view(&obs, &run);
    let iface = rec.iface();
    let llc_origin = super::geometry::origin(rec, o);
    let mut notes = vec![format!("the modelled LLC: {llc_origin}")];
    if obs
        .queues
        .iter()
        .filter(|q| q.dir == MDir::Rx)
        .all(|q| q.ring_entries.is_none())
    {
        notes.push(format!(
            "{} reports no ring size: the model assumes {} descriptors per RX queue, and makes no ring-size recommendation",
            iface.driver.as_deref().unwrap_or("the driver"),
            advise::ASSUMED_RING
        ));
    }
    if let Some(res) = run
        .calibration
        .as_ref()
        .and_then(|c| c.residual_write_pct)
        .filter(|r| r.abs() > CALIBRATION_RESIDUAL_NOTE_PP)
    {
        notes.push(format!(
            "calibrated to this host's counters the model still differs from them by {res:+.1} points of write hit rate: \
             its predictions here are uncertain, and the measured counters are the better guide"
        ));
    }
    let spread = run.spread();
    if let Some(sp) = &spread {
        notes.push(format!(
            "the model's own run-to-run spread (the same workload simulated with another seed): {:.1} points of write hit rate, {:.1} points of share of the misses; queues and flows closer than that are tied",
            sp.hit_pp, sp.share_pp
        ));
    }
    let verdicts = super::verdict::verdicts(&obs, &model, iface.driver.as_deref());
    let no_change = recommendations.is_empty().then(|| {
        super::verdict::no_change(
            &obs,
            &verdicts,
            &rec.path.display().to_string(),
            iface.driver.as_deref(),
            o,
        )
    });
    Ok(Advice {
        attribution,
        verdicts,
        model,
        geometry: obs.geometry.clone(),
        ddio_ways_note: note,
        llc_origin,
        ddio_absent: obs.device.no_ddio,
        notes,
        recommendations,
        no_change,
        model_inputs: run.inputs(),
        calibration: run.calibration.clone(),
        spread,
        run,
    })
}

/// What `report` shows beyond the summary: the advice, or why the model could not run
/// (no LLC geometry) and the attribution the measured methods give without its prior.
pub enum Outcome {
    Advised(Box<Advice>),
    NoModel {
        why: String,
        attribution: AttributionReport,
    },
}

/// `advise`, for a report, which prints whatever it can: without an LLC geometry, the
/// attribution and why there is no model. A recording that cannot be read is an error.
pub fn advise_or_explain(
    rec: &Recording,
    summary: &Summary,
    o: GeometryOverrides,
) -> Result<Outcome> {
    match super::geometry::geometry(rec, o) {
        Ok(_) => Ok(Outcome::Advised(Box::new(advise(rec, summary, o)?))),
        Err(e) if o.any() => Err(e),
        Err(e) => {
            let why = format!("{e:#}");
            let mut attribution = attribution(rec, summary, None)?;
            let prior = crate::attribution::Method::ModelPrior.as_str();
            attribution.not_used.retain(|n| !n.starts_with(prior));
            attribution
                .not_used
                .push(format!("{prior}: the DDIO model is not available: {why}"));
            Ok(Outcome::NoModel { why, attribution })
        }
    }
}

/// The attributed flows received on the traced device, each on the RX queue the probes saw it
/// on, with its rates over the recording.
fn attributed_flows(
    rec: &Recording,
    a: &crate::attribution::Attribution,
) -> Result<Vec<advise::AttributedFlow>> {
    let dur = rec.duration_s().max(1e-9);
    let recorded = rec.flows()?;
    Ok(a.flows
        .iter()
        .filter_map(|f| {
            let seen = recorded.iter().find(|c| {
                c.key.dir == Dir::Rx
                    && (
                        c.key.proto.as_str(),
                        c.key.src.as_str(),
                        c.key.sport,
                        c.key.dst.as_str(),
                        c.key.dport,
                    ) == (
                        f.proto.as_str(),
                        f.src.as_str(),
                        f.sport,
                        f.dst.as_str(),
                        f.dport,
                    )
            })?;
            Some(advise::AttributedFlow {
                proto: f.proto.clone(),
                src: f.src.clone(),
                sport: f.sport,
                dst: f.dst.clone(),
                dport: f.dport,
                queue: seen.queue,
                share_pct: f.share_pct,
                bytes_per_s: seen.bytes as f64 / dur,
                pkts_per_s: seen.packets as f64 / dur,
            })
        })
        .collect())
}
