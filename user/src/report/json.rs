//! `report --json` and `recommend --json`: one object for tools, with a schema version and the
//! tool's version, floats rounded to what they can mean, every unit spelled as a suffix
//! (`_ns`, `_ms`, `_s`, `_bytes`, `_pct`, `_per_s`, `_mbit_per_s`, `_mbyte_per_s`). The
//! schema is docs/report.schema.json, described in docs/report.md.
use serde::Serialize;

use crate::advise::{CalibrationReport, ModelView, Recommendation};
use crate::analysis::answer::{answer, answer_for_advice, Answer, QueueVerdict};
use crate::analysis::{Advice, AttributionReport, Input, LlcGeometry, Outcome, Summary};

/// The JSON layout's version: a tool checks it before reading. Raised when a key changes
/// meaning or goes away; new keys do not raise it.
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Serialize)]
pub struct FullReport<'a> {
    pub schema_version: u32,
    pub ddioscope_version: &'static str,
    /// The answer first: what leaks, how sure, what to change.
    pub answer: Answer,
    /// Each modelled queue's verdict with its reason (empty without a model).
    pub verdicts: &'a [QueueVerdict],
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
        model_inputs: &'a [Input],
        #[serde(skip_serializing_if = "Option::is_none")]
        calibration: Option<&'a CalibrationReport>,
    },
    Unavailable {
        error: &'a str,
    },
}

impl<'a> FullReport<'a> {
    pub fn new(summary: &'a Summary, outcome: &'a Outcome) -> FullReport<'a> {
        let answer = answer(summary, outcome);
        match outcome {
            Outcome::Advised(a) => FullReport {
                schema_version: SCHEMA_VERSION,
                ddioscope_version: env!("CARGO_PKG_VERSION"),
                answer,
                verdicts: &a.verdicts,
                summary,
                model: ModelSection::View {
                    view: &a.model,
                    geometry: &a.geometry,
                    ddio_ways_note: &a.ddio_ways_note,
                    notes: &a.notes,
                    model_inputs: &a.model_inputs,
                    calibration: a.calibration.as_ref(),
                },
                recommendations: &a.recommendations,
                attribution: &a.attribution,
            },
            Outcome::NoModel { why, attribution } => FullReport {
                schema_version: SCHEMA_VERSION,
                ddioscope_version: env!("CARGO_PKG_VERSION"),
                answer,
                verdicts: &[],
                summary,
                model: ModelSection::Unavailable { error: why },
                recommendations: &[],
                attribution,
            },
        }
    }

    /// Pretty JSON, keys in sorted order, floats rounded.
    pub fn to_json(&self) -> serde_json::Result<String> {
        to_json(self)
    }
}

/// `recommend --json`: the advice with the answer and the versions.
#[derive(Serialize)]
struct AdviceJson<'a> {
    schema_version: u32,
    ddioscope_version: &'static str,
    answer: Answer,
    #[serde(flatten)]
    advice: &'a Advice,
}

pub fn advice_json(summary: &Summary, a: &Advice) -> serde_json::Result<String> {
    to_json(&AdviceJson {
        schema_version: SCHEMA_VERSION,
        ddioscope_version: env!("CARGO_PKG_VERSION"),
        answer: answer_for_advice(summary, a),
        advice: a,
    })
}

/// Significant digits a float keeps: measured rates, shares and times are good to a few
/// parts in a thousand at best; more digits would be noise.
const SIGNIFICANT: i32 = 4;

/// `x` to `SIGNIFICANT` significant digits; whole numbers (counts carried as floats) as they are.
pub fn round_meaningful(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 || (x.fract() == 0.0 && x.abs() < 9.0e15) {
        return x;
    }
    let scale = 10f64.powi(SIGNIFICANT - 1 - x.abs().log10().floor() as i32);
    let r = (x * scale).round() / scale;
    // Decimal scales are not exact in binary: print the shortest float that rounds there.
    format!("{r:.*e}", (SIGNIFICANT - 1) as usize)
        .parse()
        .unwrap_or(r)
}

fn round_floats(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(r) = n
                .as_f64()
                .map(round_meaningful)
                .and_then(serde_json::Number::from_f64)
            {
                *n = r;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(round_floats),
        serde_json::Value::Object(o) => o.values_mut().for_each(round_floats),
        _ => {}
    }
}

thread_local! {
    /// The long arrays of the report being written (each element as pretty JSON), while
    /// `to_json` builds its tree without them.
    static DEFERRED: std::cell::RefCell<Option<Vec<Vec<String>>>> = const { std::cell::RefCell::new(None) };
}

/// Where deferred array n goes in the tree: a string no serialized value holds (a NUL).
fn mark(n: usize) -> String {
    format!("\u{0}deferred {n}")
}

/// A long array field (a recording's flows: 25,000 of them took over 100 MB as tree nodes).
/// Inside `to_json` each element is written out at once and the tree holds a mark in the
/// array's place; elsewhere it serializes as it is.
pub fn deferred_field<T: Serialize, S: serde::Serializer>(
    items: &[T],
    s: S,
) -> Result<S::Ok, S::Error> {
    let deferred = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        let out = d.as_mut()?;
        Some(
            items
                .iter()
                .map(pretty)
                .collect::<serde_json::Result<Vec<String>>>()
                .map(|v| {
                    out.push(v);
                    out.len() - 1
                }),
        )
    });
    match deferred {
        None => items.serialize(s),
        Some(Ok(n)) => s.serialize_str(&mark(n)),
        Some(Err(e)) => Err(serde::ser::Error::custom(e)),
    }
}

/// One value as pretty JSON, floats rounded.
fn pretty<T: Serialize>(v: &T) -> serde_json::Result<String> {
    let mut value = serde_json::to_value(v)?;
    round_floats(&mut value);
    serde_json::to_string_pretty(&value)
}

pub fn to_json<T: Serialize>(v: &T) -> serde_json::Result<String> {
    DEFERRED.with(|d| *d.borrow_mut() = Some(Vec::new()));
    let tree = pretty(v);
    let arrays = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
    let mut out = tree?;
    for (n, items) in arrays.iter().enumerate() {
        out = splice(&out, &serde_json::to_string(&mark(n))?, items);
    }
    Ok(out)
}

/// `tree` with the mark replaced by the array of `items`, indented as the tree's pretty
/// printer would have put it.
fn splice(tree: &str, mark: &str, items: &[String]) -> String {
    let Some(at) = tree.find(mark) else {
        return tree.to_string();
    };
    let indent = tree[..at]
        .rsplit('\n')
        .next()
        .map_or(0, |l| l.len() - l.trim_start().len());
    let pad = " ".repeat(indent + 2);
    let mut out = String::with_capacity(
        tree.len() + items.iter().map(|f| f.len() + 8 * pad.len()).sum::<usize>(),
    );
    out.push_str(&tree[..at]);
    if items.is_empty() {
        out.push_str("[]");
    } else {
        out.push_str("[\n");
        for (i, f) in items.iter().enumerate() {
            for (j, line) in f.lines().enumerate() {
                if j > 0 {
                    out.push('\n');
                }
                out.push_str(&pad);
                out.push_str(line);
            }
            out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
        }
        out.push_str(&pad[2..]);
        out.push(']');
    }
    out.push_str(&tree[at + mark.len()..]);
    out
}

#[cfg(test)]
mod tests {
    use super::{deferred_field, pretty, round_meaningful, to_json};
    use serde::Serialize;

    #[derive(Serialize, Clone)]
    struct Item {
        name: String,
        share_pct: f64,
        inner: Vec<u32>,
    }

    #[derive(Serialize)]
    struct Doc {
        zeta: u32,
        #[serde(serialize_with = "deferred_field")]
        items: Vec<Item>,
        nested: Nested,
        #[serde(serialize_with = "deferred_field")]
        none: Vec<Item>,
    }

    #[derive(Serialize)]
    struct Nested {
        #[serde(serialize_with = "deferred_field")]
        deep: Vec<Item>,
        alpha: f64,
    }

    /// The same document with plain arrays: what one JSON tree printed.
    #[derive(Serialize)]
    struct Plain {
        zeta: u32,
        items: Vec<Item>,
        nested: PlainNested,
        none: Vec<Item>,
    }

    #[derive(Serialize)]
    struct PlainNested {
        deep: Vec<Item>,
        alpha: f64,
    }

    #[test]
    fn long_arrays_written_element_by_element_print_as_one_tree_would() {
        let items: Vec<Item> = (0..3)
            .map(|i| Item {
                name: format!("f{i}"),
                share_pct: 12.345_678 * i as f64,
                inner: vec![i, 7],
            })
            .collect();
        let deep = vec![Item {
            name: "d".into(),
            share_pct: 0.000_123_456,
            inner: vec![],
        }];
        let doc = Doc {
            zeta: 1,
            items: items.clone(),
            nested: Nested {
                deep: deep.clone(),
                alpha: 2.718_281_9_f64.sqrt(),
            },
            none: vec![],
        };
        let plain = Plain {
            zeta: 1,
            items,
            nested: PlainNested {
                deep,
                alpha: 2.718_281_9_f64.sqrt(),
            },
            none: vec![],
        };
        let out = to_json(&doc).expect("serializes");
        assert_eq!(out, pretty(&plain).expect("serializes"));
        assert!(
            out.contains("\"share_pct\": 12.35") && !out.contains("deferred"),
            "{out}"
        );
        // Outside to_json the arrays serialize as they are.
        assert_eq!(
            serde_json::to_value(&doc).expect("serializes")["items"][1]["name"],
            "f1"
        );
    }

    #[test]
    fn floats_keep_four_significant_digits() {
        assert_eq!(round_meaningful(52_134.567), 52_130.0);
        assert_eq!(round_meaningful(630.5123), 630.5);
        assert_eq!(round_meaningful(18.812_345), 18.81);
        assert_eq!(round_meaningful(0.000_123_456), 0.000_123_5);
        assert_eq!(round_meaningful(-4.567_89), -4.568);
        // Counts carried as floats stay exact.
        assert_eq!(round_meaningful(1_234_567.0), 1_234_567.0);
        assert_eq!(round_meaningful(0.0), 0.0);
        assert!(round_meaningful(f64::INFINITY).is_infinite());
    }
}
