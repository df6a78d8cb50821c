//! Attribution of LLC misses to NIC queues and flows: the evidence types the recorder fills, the four estimators (address join, CPU context, regression, model prior), and the chooser that reports the strongest one the data supports.
//!
//! Everything here is pure computation on counts; the kernel side (PEBS address join map,
//! CPU-context counting) and the CLI/report wiring live elsewhere.
//!
//! Shares are shares of the misses charged to network queues (packet buffers); misses on
//! other memory (background) are reported in `notes`, never spread over the queues.

use serde::{Deserialize, Serialize};

pub mod nnls;
pub mod prior;
pub mod regression;
pub mod sampled;

#[cfg(test)]
mod groundtruth;

pub use prior::model_prior;
pub use regression::regression;
pub use sampled::{address_join, cpu_context};

/// How an attribution was obtained, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    AddressJoin,
    CpuContext,
    Regression,
    ModelPrior,
    None,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::AddressJoin => "address_join",
            Method::CpuContext => "cpu_context",
            Method::Regression => "regression",
            Method::ModelPrior => "model_prior",
            Method::None => "none",
        }
    }
}

/// As in JSON: `address_join`, `cpu_context`, …
impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    High,
    Medium,
    Low,
    /// Not enough (or contradictory) evidence: no numbers are given.
    Insufficient,
}

impl Confidence {
    /// One step weaker (used when a method is indirect).
    pub fn weaker(self) -> Confidence {
        match self {
            Confidence::High => Confidence::Medium,
            Confidence::Medium | Confidence::Low => Confidence::Low,
            Confidence::Insufficient => Confidence::Insufficient,
        }
    }
}

/// As in JSON: `high`, `medium`, `low`, `insufficient`.
impl std::fmt::Display for Confidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
            Confidence::Insufficient => "insufficient",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueShare {
    /// "rx" | "tx"
    pub dir: String,
    pub queue: u32,
    /// Estimated misses over the recording; for software stand-in samples,
    /// the sample count itself (their period is not in misses).
    pub misses: f64,
    /// Percent of the misses charged to network queues.
    pub share_pct: f64,
    /// 95% interval of `share_pct`, when the method gives one.
    pub ci_pct: Option<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowShare {
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    /// As `QueueShare::misses`.
    pub misses: f64,
    pub share_pct: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    pub method: Method,
    pub confidence: Confidence,
    pub queues: Vec<QueueShare>,
    #[serde(serialize_with = "crate::report::json::deferred_field")]
    pub flows: Vec<FlowShare>,
    pub notes: Vec<String>,
    /// The `misses` numbers are sample counts of a software stand-in, not misses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counts_are_samples: bool,
}

impl Attribution {
    fn with_notes(mut self, notes: Vec<String>) -> Self {
        self.notes = notes;
        self
    }

    /// A result without numbers, with the reason.
    pub fn insufficient(method: Method, why: impl Into<String>) -> Self {
        Attribution {
            method,
            confidence: Confidence::Insufficient,
            queues: Vec::new(),
            flows: Vec::new(),
            notes: vec![why.into()],
            counts_are_samples: false,
        }
    }
}

/// A flow's 5-tuple, as the probes key flows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowId {
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
}

/// A NIC queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QueueId {
    /// "rx" | "tx"
    pub dir: String,
    pub queue: u32,
}

impl QueueId {
    pub fn rx(queue: u32) -> Self {
        QueueId {
            dir: "rx".into(),
            queue,
        }
    }
    pub fn tx(queue: u32) -> Self {
        QueueId {
            dir: "tx".into(),
            queue,
        }
    }
}

/// Sampled miss counts keyed by queue / flow: from the kernel address join (PEBS data address
/// found in the live packet-buffer map) or from CPU context (sample charged to the NAPI poll
/// or socket copy running on that CPU).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampledCounts {
    /// Events per sample (perf `sample_period`); 0 = unknown.
    pub period: u64,
    /// The samples come from a software stand-in (cpu-clock, the copy-address
    /// cpu-clock, page faults), whose period counts ns of CPU time or page
    /// faults, not L3 misses: counts are then reported as samples, unscaled.
    #[serde(default)]
    pub stand_in: bool,
    pub queues: Vec<(QueueId, u64)>,
    pub flows: Vec<(FlowId, u64)>,
    /// Samples not charged to a queue: address outside packet buffers (join) or no network
    /// work on the CPU (context). Not spread over queues.
    pub other_samples: u64,
    /// Address join: the buffer map held 1 in this many pages (chosen by address), so each
    /// joined sample stands for this many; 0 or 1: every page.
    #[serde(default)]
    pub join_sample: u64,
    /// Attribution ran in windows over 1/this much of the time (`record --miss-duty`, as
    /// measured by the recorder), the sampler at `period` inside them: each sample stands for
    /// period × duty misses over the recording. 0 or 1: always on.
    #[serde(default)]
    pub duty: f64,
    /// Joined samples on pages last kept before their window: owner from an earlier window,
    /// age unknown (not in `age_hist`).
    #[serde(default)]
    pub before_window: u64,
    /// Histogram of miss time after hand-up to the stack, as (bucket upper bound ns, samples);
    /// empty when not recorded.
    pub age_hist: Vec<(u64, u64)>,
}

/// One queue's features over one interval (what the eBPF probes measure).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueFeatures {
    pub queue: QueueId,
    /// Bytes DMA'd by the NIC (RX) or read by it (TX) in the interval.
    pub inbound_bytes: f64,
    /// Mean bytes handed to the NIC or stack and not yet freed (Little: byte rate × residence).
    pub inflight_bytes: Option<f64>,
    /// Ring footprint: descriptors × line-rounded mean packet + completion lines.
    pub footprint_bytes: Option<f64>,
}

/// Socket-level miss deltas over one interval (uncore counters); absent counters are None.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketMisses {
    /// DDIO write misses (CHA TOR ItoM misses).
    pub io_write: Option<f64>,
    /// I/O read misses (PCIRdCur misses).
    pub io_read: Option<f64>,
    /// Core L3 load misses.
    pub l3: Option<f64>,
    /// Inbound DMA write bytes of the socket's other PCIe stacks (uncore IIO, all stacks but
    /// the NIC's). Taken as the driver of the I/O write misses no queue causes (other devices'
    /// DMA); None when not measured (the background is then taken as steady in time).
    #[serde(default)]
    pub other_io_write_bytes: Option<f64>,
    /// The same for inbound DMA reads (I/O read misses).
    #[serde(default)]
    pub other_io_read_bytes: Option<f64>,
}

/// One regression interval: its length, per-queue features and socket miss deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub duration_ns: u64,
    pub queues: Vec<QueueFeatures>,
    pub socket: SocketMisses,
}

/// Input of the regression method.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RegressionInput {
    pub intervals: Vec<Interval>,
    /// Per-flow bytes over the recording, used to split a queue's misses over its flows.
    pub flow_bytes: Vec<(FlowId, QueueId, f64)>,
}

/// Model predictions (e.g. `simulate` on the recorded workload) and the measured total.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelPrediction {
    pub queues: Vec<(QueueId, f64)>,
    pub flows: Vec<(FlowId, f64)>,
    /// Socket misses measured over the same window (sum of the miss counters the model
    /// predicts); None on hosts without counters.
    pub measured_total: Option<f64>,
}

/// Whatever evidence a recording holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub address_join: Option<SampledCounts>,
    pub cpu_context: Option<SampledCounts>,
    pub regression: Option<RegressionInput>,
    pub model: Option<ModelPrediction>,
}

/// Every method's result, strongest first (missing evidence → Insufficient with a note).
pub fn attribute_all(ev: &Evidence) -> Vec<Attribution> {
    let none = |m: Method, what: &str| {
        Attribution::insufficient(m, format!("no {what} in this recording"))
    };
    vec![
        ev.address_join.as_ref().map_or_else(
            || none(Method::AddressJoin, "address-join samples"),
            address_join,
        ),
        ev.cpu_context.as_ref().map_or_else(
            || none(Method::CpuContext, "CPU-context samples"),
            cpu_context,
        ),
        ev.regression.as_ref().map_or_else(
            || none(Method::Regression, "per-interval counters"),
            regression,
        ),
        ev.model
            .as_ref()
            .map_or_else(|| none(Method::ModelPrior, "model prediction"), model_prior),
    ]
}

/// The strongest method the evidence supports; the notes say why stronger ones were not used.
pub fn attribute(ev: &Evidence) -> Attribution {
    let all = attribute_all(ev);
    let mut skipped = Vec::new();
    for a in all {
        if a.confidence != Confidence::Insufficient {
            let mut a = a;
            a.notes.extend(skipped);
            return a;
        }
        skipped.push(format!(
            "{} not used: {}",
            a.method.as_str(),
            a.notes.join("; ")
        ));
    }
    Attribution::insufficient(Method::None, String::new()).with_notes(skipped)
}

/// Sum duplicate keys and sort by key, so output is deterministic whatever the input order.
pub(crate) fn merge<K: Ord + Clone>(v: &[(K, f64)]) -> Vec<(K, f64)> {
    let mut m: std::collections::BTreeMap<K, f64> = std::collections::BTreeMap::new();
    for (k, x) in v {
        *m.entry(k.clone()).or_default() += x;
    }
    m.into_iter().collect()
}

pub(crate) fn flow_share(f: &FlowId, misses: f64, total: f64) -> FlowShare {
    FlowShare {
        proto: f.proto.clone(),
        src: f.src.clone(),
        sport: f.sport,
        dst: f.dst.clone(),
        dport: f.dport,
        misses,
        share_pct: if total > 0.0 {
            100.0 * misses / total
        } else {
            0.0
        },
    }
}

/// Flows ordered by misses, largest first (ties by key for determinism).
pub(crate) fn sort_flows(v: &mut [FlowShare]) {
    v.sort_by(|a, b| {
        b.misses.total_cmp(&a.misses).then_with(|| {
            (&a.proto, &a.src, a.sport, &a.dst, a.dport)
                .cmp(&(&b.proto, &b.src, b.sport, &b.dst, b.dport))
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(period: u64, q: &[u64], other: u64) -> SampledCounts {
        SampledCounts {
            period,
            stand_in: false,
            queues: q
                .iter()
                .enumerate()
                .map(|(i, n)| (QueueId::rx(i as u32), *n))
                .collect(),
            flows: Vec::new(),
            other_samples: other,
            join_sample: 1,
            duty: 1.0,
            before_window: 0,
            age_hist: Vec::new(),
        }
    }

    #[test]
    fn chooser_takes_strongest_supported() {
        let model = ModelPrediction {
            queues: vec![(QueueId::rx(0), 3.0), (QueueId::rx(1), 1.0)],
            flows: Vec::new(),
            measured_total: Some(400.0),
        };
        let ev = Evidence {
            address_join: Some(counts(1000, &[3, 1], 0)),
            cpu_context: None,
            regression: None,
            model: Some(model.clone()),
        };
        let a = attribute(&ev);
        assert_eq!(
            a.method,
            Method::ModelPrior,
            "4 samples are not evidence: {a:?}"
        );
        assert!(a.notes.iter().any(|n| n.contains("address_join not used")));
        assert!(a.notes.iter().any(|n| n.contains("model-only")));
        let ev = Evidence {
            address_join: Some(counts(1000, &[3000, 1000], 50)),
            model: Some(model),
            ..Default::default()
        };
        let a = attribute(&ev);
        assert_eq!(a.method, Method::AddressJoin);
        assert_eq!(a.confidence, Confidence::High);
        let all = attribute_all(&ev);
        assert_eq!(
            all.iter().map(|a| a.method).collect::<Vec<_>>(),
            vec![
                Method::AddressJoin,
                Method::CpuContext,
                Method::Regression,
                Method::ModelPrior
            ]
        );
        let js = serde_json::to_string(&all).unwrap_or_default();
        assert!(
            js.contains("\"method\":\"address_join\"")
                && js.contains("\"confidence\":\"insufficient\"")
        );
    }

    #[test]
    fn nothing_gives_none() {
        let a = attribute(&Evidence::default());
        assert_eq!(
            (a.method, a.confidence),
            (Method::None, Confidence::Insufficient)
        );
        assert!(a.queues.is_empty());
        assert_eq!(a.notes.len(), 4);
        let ev = Evidence {
            address_join: Some(counts(0, &[], 0)),
            ..Default::default()
        };
        assert_eq!(attribute(&ev).method, Method::None);
    }
}
