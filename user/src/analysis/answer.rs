//! The answer a report leads with: which queues and flows leak, how sure ddioscope is and
//! from which evidence, and what to change with its predicted effect (the verdicts and the
//! reasons for no change come from `verdict`).
use serde::Serialize;

use super::advice::{Advice, Outcome};
use super::evidence::AttributionReport;
use super::summary::Summary;
pub use super::verdict::{no_change, verdicts, NoChange, QueueVerdict, VerdictKind};
use crate::advise::Kind;
use crate::attribution::{Confidence, Method};
use crate::snapshot::Dir;
/// A queue that leaks, with its share of the attributed misses.
#[derive(Debug, Clone, Serialize)]
pub struct LeakingQueue {
    pub dir: Dir,
    pub queue: u32,
    pub verdict: VerdictKind,
    pub share_pct: Option<f64>,
    /// Its predicted share is within the model's run-to-run spread of the queue before it:
    /// tied, not ranked below it.
    pub tied: bool,
}

/// A flow with a large share of the attributed misses.
#[derive(Debug, Clone, Serialize)]
pub struct TopFlow {
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    pub share_pct: f64,
    /// As for queues: within the model's spread of the flow before it.
    pub tied: bool,
}

/// A change to make, as `recommend` gives it.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub kind: Kind,
    pub target: String,
    pub command: String,
    /// What it is for when it is not the cache: said before the command.
    pub reason: Option<String>,
    pub predicted_metric: Option<String>,
    pub predicted_before: Option<f64>,
    pub predicted_after: Option<f64>,
}

/// The answer, first in every report.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// What the answer says first when DDIO was not measured: the host has none (and which
    /// Intel LLC the predictions are for, and why that one), or it has no counters. None:
    /// DDIO counters measured this recording.
    pub ddio: Option<String>,
    /// Queues the model calls leaky or at risk, the most-missed first.
    pub leaking: Vec<LeakingQueue>,
    /// Queues with no verdict.
    pub unknown: usize,
    /// The flows with the most attributed misses, up to three.
    pub top_flows: Vec<TopFlow>,
    pub method: Method,
    pub confidence: Confidence,
    /// What the answer rests on, in words.
    pub evidence: String,
    /// What to change, most-missed queue first, with the predicted effect.
    pub changes: Vec<Change>,
    /// Why there is nothing to change (None: there is something).
    pub no_change: Option<NoChange>,
    /// Why there is no model, when there is none.
    pub model_unavailable: Option<String>,
}

/// Flows listed in the answer at most.
const ANSWER_FLOWS: usize = 3;

fn evidence_words(method: Method, stand_in: bool, summary: &Summary) -> String {
    match method {
        Method::AddressJoin if stand_in => "L3-miss stand-in samples joined to packet-buffer addresses: the method measured, not the misses".into(),
        Method::AddressJoin => "measured: L3-miss samples joined to packet-buffer addresses".into(),
        Method::CpuContext if stand_in => "stand-in samples charged to the queue each CPU was serving: not measured misses".into(),
        Method::CpuContext => "measured: L3-miss samples charged to the queue each CPU was serving".into(),
        Method::Regression => "measured: per-interval DDIO counters regressed on each queue's traffic".into(),
        Method::ModelPrior => match &summary.counters.absent_why {
            Some(why) => format!("predicted by the DDIO model, not measured: {why}"),
            None => "predicted by the DDIO model and scaled to the measured socket misses".into(),
        },
        Method::None => "no attribution: the recording holds no evidence any method can use".into(),
    }
}

/// What is said first when DDIO was not measured, and what the predictions are for.
fn ddio_words(summary: &Summary, advice: Option<&Advice>) -> Option<String> {
    let c = &summary.counters;
    let why = c.absent_why.as_deref().unwrap_or(match advice {
        Some(a) if a.ddio_absent => "its CPU has no DDIO",
        _ => "no DDIO counters",
    });
    match advice {
        Some(a) if a.ddio_absent => Some(format!(
            "none on this host ({why}): what follows is a prediction of what an Intel LLC would do with this traffic; the LLC modelled is {}",
            a.llc_origin
        )),
        Some(a) if c.absent_why.is_some() && c.sockets.iter().all(|s| s.write_miss_pct.is_none()) => Some(format!(
            "not measured on this host ({why}): what follows is the model's prediction for {}",
            a.llc_origin
        )),
        None if c.cpu_has_ddio == Some(false) => Some(format!("none on this host ({why})")),
        _ => None,
    }
}

/// The answer for a report.
pub fn answer(summary: &Summary, outcome: &Outcome) -> Answer {
    match outcome {
        Outcome::Advised(a) => build(summary, &a.attribution, Some(a.as_ref()), None),
        Outcome::NoModel { why, attribution } => {
            build(summary, attribution, None, Some(why.clone()))
        }
    }
}

/// The answer of `advise` alone (`recommend`).
pub fn answer_for_advice(summary: &Summary, a: &Advice) -> Answer {
    build(summary, &a.attribution, Some(a), None)
}

fn build(
    summary: &Summary,
    attribution: &AttributionReport,
    advice: Option<&Advice>,
    model_unavailable: Option<String>,
) -> Answer {
    let at = &attribution.chosen;
    let share = |d: Dir, q: u32| {
        at.queues
            .iter()
            .find(|s| s.dir == d.as_str() && s.queue == q)
            .map(|s| s.share_pct)
    };
    let mut leaking: Vec<LeakingQueue> = advice
        .map(|a| {
            a.verdicts
                .iter()
                .filter(|v| v.verdict.leaks())
                .map(|v| LeakingQueue {
                    dir: v.dir,
                    queue: v.queue,
                    verdict: v.verdict,
                    share_pct: share(v.dir, v.queue),
                    tied: false,
                })
                .collect()
        })
        .unwrap_or_default();
    leaking.sort_by(|a, b| {
        b.share_pct
            .unwrap_or(-1.0)
            .total_cmp(&a.share_pct.unwrap_or(-1.0))
            .then(b.verdict.cmp(&a.verdict))
            .then(a.dir.cmp(&b.dir))
            .then(a.queue.cmp(&b.queue))
    });
    // Predicted shares closer than the model's own spread are ties, not a ranking.
    let tie = advice
        .and_then(|a| a.spread)
        .filter(|_| at.method == Method::ModelPrior)
        .map(|s| s.share_pp);
    let tied = |prev: Option<f64>, cur: Option<f64>| match (tie, prev, cur) {
        (Some(t), Some(p), Some(c)) => (p - c).abs() <= t,
        _ => false,
    };
    for i in 1..leaking.len() {
        leaking[i].tied = tied(leaking[i - 1].share_pct, leaking[i].share_pct);
    }
    let mut top_flows: Vec<TopFlow> = at
        .flows
        .iter()
        .filter(|f| f.share_pct > 0.0)
        .take(ANSWER_FLOWS)
        .map(|f| TopFlow {
            proto: f.proto.clone(),
            src: f.src.clone(),
            sport: f.sport,
            dst: f.dst.clone(),
            dport: f.dport,
            share_pct: f.share_pct,
            tied: false,
        })
        .collect();
    for i in 1..top_flows.len() {
        top_flows[i].tied = tied(
            Some(top_flows[i - 1].share_pct),
            Some(top_flows[i].share_pct),
        );
    }
    let changes: Vec<Change> = advice
        .map(|a| {
            a.recommendations
                .iter()
                .map(|r| Change {
                    kind: r.kind,
                    target: r.target.clone(),
                    command: r.command.clone(),
                    reason: r.reason.clone(),
                    predicted_metric: r.predicted_metric.clone(),
                    predicted_before: r.predicted_before,
                    predicted_after: r.predicted_after,
                })
                .collect()
        })
        .unwrap_or_default();
    let no_change = match advice {
        Some(a) if changes.is_empty() => a.no_change.clone(),
        Some(_) => None,
        None => Some(NoChange {
            reasons: vec![format!(
                "the DDIO model could not run: {}",
                model_unavailable.clone().unwrap_or_default()
            )],
            next_steps: vec!["give the LLC to model: --llc-mib MIB --llc-ways N".into()],
        }),
    };
    Answer {
        ddio: ddio_words(summary, advice),
        leaking,
        unknown: advice.map_or(0, |a| {
            a.verdicts
                .iter()
                .filter(|v| v.verdict == VerdictKind::Unknown)
                .count()
        }),
        top_flows,
        method: at.method,
        confidence: at.confidence,
        evidence: evidence_words(at.method, attribution.stand_in, summary),
        changes,
        no_change,
        model_unavailable,
    }
}
