//! The verdict vocabulary and the one rule that turns the model's analysis of a queue into
//! what every surface says about it (`report`, `recommend`, `top`, `serve`, JSON, HTML).
use serde::{Deserialize, Serialize};

use crate::model::analytic::{Dir, Verdict};

/// Fewer packets than this on a queue in what was analysed: no verdict and no predicted hit
/// rate. A few dozen packets say nothing about how its ring sits in the cache, and the
/// simulator gives such a queue a confident 0 %.
pub const MIN_PACKETS_FOR_VERDICT: u64 = 1000;

/// A queue's verdict: the model's three, or unknown when it has nothing to go on. One
/// spelling everywhere: `fits`, `at_risk`, `leaky`, `unknown` (JSON, Prometheus labels,
/// text, HTML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    Fits,
    AtRisk,
    Leaky,
    Unknown,
}

impl VerdictKind {
    pub const ALL: [VerdictKind; 4] = [
        VerdictKind::Fits,
        VerdictKind::AtRisk,
        VerdictKind::Leaky,
        VerdictKind::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Fits => "fits",
            VerdictKind::AtRisk => "at_risk",
            VerdictKind::Leaky => "leaky",
            VerdictKind::Unknown => "unknown",
        }
    }

    /// Leaky or at risk: DMA writes that do not stay in the LLC.
    pub fn leaks(self) -> bool {
        matches!(self, VerdictKind::Leaky | VerdictKind::AtRisk)
    }
}

impl std::fmt::Display for VerdictKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl From<Verdict> for VerdictKind {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Fits => VerdictKind::Fits,
            Verdict::AtRisk => VerdictKind::AtRisk,
            Verdict::Leaky => VerdictKind::Leaky,
        }
    }
}

/// A queue's verdict from the analytic model's: unknown when it carried too little traffic
/// (`packets`: None when only rates are known, as in the published cases), or when it is a
/// TX queue whose ring the driver does not report and for which the model predicts nothing
/// (its footprint would rest on an assumed ring alone).
pub fn queue_verdict(
    model: Verdict,
    dir: Dir,
    packets: Option<u64>,
    ring_known: bool,
    predicted: bool,
) -> VerdictKind {
    if packets.is_some_and(|p| p < MIN_PACKETS_FOR_VERDICT) {
        return VerdictKind::Unknown;
    }
    if dir == Dir::Tx && !ring_known && !predicted {
        return VerdictKind::Unknown;
    }
    model.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_little_traffic_or_an_unknown_tx_ring_gets_no_verdict() {
        let v = |d, p, ring, pred| queue_verdict(Verdict::Leaky, d, p, ring, pred);
        assert_eq!(v(Dir::Rx, Some(14), true, true), VerdictKind::Unknown);
        assert_eq!(v(Dir::Rx, Some(1000), false, false), VerdictKind::Leaky);
        assert_eq!(v(Dir::Rx, None, false, false), VerdictKind::Leaky);
        assert_eq!(v(Dir::Tx, Some(5000), false, false), VerdictKind::Unknown);
        assert_eq!(v(Dir::Tx, Some(5000), true, false), VerdictKind::Leaky);
        let spelt: Vec<String> = VerdictKind::ALL
            .iter()
            .map(|k| {
                serde_json::to_value(k)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            spelt,
            VerdictKind::ALL.map(|k| k.as_str().to_string()).to_vec()
        );
    }
}
