//! The advice for a recording: the model's view of each queue, and the recommendations
//! with the attributed misses behind them, most-missed queue first.
use anyhow::Result;
use serde::Serialize;

use super::evidence::{attribution, AttributionReport};
use super::geometry::GeometryOverrides;
use super::observation::observation;
use super::summary::Summary;
use super::verdict::{NoChange, QueueVerdict};
use crate::advise::{
    self, CalibrationReport, HostObservation, ModelRun, ModelView, Recommendation,
};
use crate::model::analytic::Dir as MDir;
use crate::model::geometry::{LlcGeometry, WaysSource};
use crate::model::spec::Input;
use crate::recording::Recording;
use crate::snapshot::Dir;

/// A calibration residual beyond this (points) is said in the notes.
pub const CALIBRATION_RESIDUAL_NOTE_PP: f64 = 10.0;

/// Fewer packets than this on a queue: no predicted hit rate for it.
pub const MIN_PACKETS_FOR_PREDICTION: f64 = 1000.0;

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
        WaysSource::Assumed => "assumed: MSR 0xC8B was not readable at record time".to_string(),
        WaysSource::Override => "given on the command line".to_string(),
    };
    let run = ModelRun::new(&obs);
    let attribution = attribution(rec, summary, Some((&obs, &run)))?;
    let mut recommendations = advise::recommend(&obs, &run);
    let iface = rec.iface();
    for r in recommendations
        .iter_mut()
        .filter(|r| r.kind == "spread_load")
    {
        // Spread over every configured queue, not only the ones that saw traffic.
        if iface.rx_queues > 0 {
            r.command = format!("ethtool -X {} equal {}", iface.name, iface.rx_queues);
        }
        if iface.driver.as_deref() == Some("veth") {
            r.evidence.push(
                "veth has no RSS indirection table: spread flows by the sender's TX queue (XPS) instead".to_string(),
            );
        }
    }
    let flows = attributed_flows(rec, &attribution.chosen)?;
    target_with_attribution(&mut recommendations, &attribution.chosen, &flows);
    if let Some(r) = steer_attributed_flow(
        &obs,
        &run,
        iface.driver.as_deref() == Some("veth"),
        &attribution.chosen,
        &flows,
    ) {
        recommendations.insert(0, r);
    }
    let mut model = advise::model_view(&obs, &run);
    // A queue that carried a handful of packets gives the simulator nothing to
    // measure: no predicted hit rate rather than a confident 0 %.
    let dur = rec.duration_s().max(1e-9);
    for q in &mut model.queues {
        let carried = obs
            .queues
            .iter()
            .find(|o| o.dir == q.dir && o.queue == q.queue)
            .map_or(0.0, |o| o.pkts_per_s * dur);
        if carried < MIN_PACKETS_FOR_PREDICTION {
            q.predicted_write_hit_pct = None;
            q.predicted_read_hit_pct = None;
            q.predicted_cpu_read_miss_pct = None;
            q.predicted_dram_read_gbps = None;
            q.predicted_dram_write_gbps = None;
        }
    }
    let mut notes = Vec::new();
    if summary.counters.cpu_has_ddio == Some(false) {
        notes.push(
            "the recording host has no DDIO: the model shows what an Intel LLC of the recorded size and ways would do with this traffic"
                .to_string(),
        );
    }
    if obs
        .queues
        .iter()
        .filter(|q| q.dir == MDir::Rx)
        .all(|q| q.ring_entries.is_none())
    {
        notes.push(format!(
            "{} reports no ring size: the model assumes 1024 descriptors per RX queue, and makes no ring-size recommendation",
            iface.driver.as_deref().unwrap_or("the driver")
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
    let verdicts = super::verdict::verdicts(&obs, &model, iface.driver.as_deref());
    let no_change = recommendations.is_empty().then(|| {
        let no_ddio = summary.counters.cpu_has_ddio == Some(false);
        super::verdict::no_change(
            &obs,
            &verdicts,
            &rec.path.display().to_string(),
            iface.driver.as_deref(),
            no_ddio,
        )
    });
    Ok(Advice {
        attribution,
        verdicts,
        model,
        geometry: obs.geometry.clone(),
        ddio_ways_note: note,
        notes,
        recommendations,
        no_change,
        model_inputs: run.inputs(),
        calibration: run.calibration.clone(),
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

/// `advise::steer_flow` on the attribution's RX queue shares and flows.
fn steer_attributed_flow(
    obs: &HostObservation,
    run: &ModelRun,
    veth: bool,
    a: &crate::attribution::Attribution,
    flows: &[advise::AttributedFlow],
) -> Option<Recommendation> {
    use crate::attribution::{Confidence, Method};
    // Measured shares only: steering by the model prior would be the model agreeing with itself.
    if a.confidence == Confidence::Insufficient
        || !matches!(
            a.method,
            Method::AddressJoin | Method::CpuContext | Method::Regression
        )
    {
        return None;
    }
    let rx_shares: Vec<(u32, f64)> = a
        .queues
        .iter()
        .filter(|q| q.dir == "rx")
        .map(|q| (q.queue, q.share_pct))
        .collect();
    let mut r = advise::steer_flow(obs, run, &rx_shares, flows, &attribution_label(a))?;
    if veth {
        r.evidence.push("veth has no ntuple filters: send the flow from another TX queue of the sender (XPS) instead".into());
    } else {
        r.evidence.push(format!(
            "ntuple filters must be on: ethtool -K {} ntuple on",
            obs.iface
        ));
    }
    Some(r)
}

/// "method, confidence" for evidence lines, and whether the counts are a stand-in's samples.
fn attribution_label(a: &crate::attribution::Attribution) -> String {
    format!(
        "{}, {} confidence{}",
        a.method,
        a.confidence,
        if a.counts_are_samples {
            "; software stand-in samples, not measured misses"
        } else {
            ""
        }
    )
}

/// Put the attributed misses behind each recommendation that names a queue, and
/// order the recommendations by the share of misses their queue carries, so the
/// queues that matter come first.
fn target_with_attribution(
    recs: &mut [Recommendation],
    a: &crate::attribution::Attribution,
    flows: &[advise::AttributedFlow],
) {
    use crate::attribution::Confidence;
    if a.confidence == Confidence::Insufficient || a.queues.is_empty() {
        return;
    }
    let how = attribution_label(a);
    let share_of = |target: &str| -> Option<&crate::attribution::QueueShare> {
        a.queues.iter().find(|q| {
            let name = format!("{}{}", q.dir, q.queue);
            target
                .split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w == name)
        })
    };
    for r in recs.iter_mut() {
        if let Some(q) = share_of(&r.target) {
            r.evidence.push(format!(
                "{}{} carries {:.1}% of the attributed misses ({how})",
                q.dir, q.queue, q.share_pct
            ));
            // The queue's own top flow (flows are known by RX queue).
            let top = flows
                .iter()
                .filter(|f| q.dir == "rx" && f.queue == q.queue)
                .max_by(|x, y| x.share_pct.total_cmp(&y.share_pct));
            if let Some(top) = top {
                r.evidence.push(format!(
                    "its top flow by attributed misses: {} {}:{} -> {}:{} ({:.1}%)",
                    top.proto, top.src, top.sport, top.dst, top.dport, top.share_pct
                ));
            }
        }
    }
    recs.sort_by(|x, y| {
        let s = |r: &Recommendation| share_of(&r.target).map_or(-1.0, |q| q.share_pct);
        s(y).total_cmp(&s(x))
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn recommendations_follow_the_attributed_misses() {
        use crate::advise::{AttributedFlow, Recommendation};
        use crate::attribution::{Attribution, Confidence, Method, QueueShare};
        let rec = |target: &str| Recommendation {
            kind: "ring_size".into(),
            target: target.into(),
            command: String::new(),
            evidence: Vec::new(),
            predicted_metric: None,
            predicted_before: None,
            predicted_after: None,
        };
        let share = |queue, share_pct| QueueShare {
            dir: "rx".into(),
            queue,
            misses: share_pct * 10.0,
            share_pct,
            ci_pct: None,
        };
        let a = Attribution {
            method: Method::AddressJoin,
            confidence: Confidence::High,
            queues: vec![share(0, 30.0), share(1, 70.0)],
            flows: Vec::new(),
            notes: Vec::new(),
            counts_are_samples: false,
        };
        let flow = |sport, queue, share_pct| AttributedFlow {
            proto: "udp".into(),
            src: "10.0.0.1".into(),
            sport,
            dst: "10.0.0.2".into(),
            dport: 9,
            queue,
            share_pct,
            bytes_per_s: 1e6,
            pkts_per_s: 1e3,
        };
        // The overall top flow is on rx1; rx0's own top flow is the smaller one on rx0.
        let flows = [
            flow(1000, 1, 60.0),
            flow(2000, 0, 20.0),
            flow(3000, 0, 10.0),
        ];
        let mut recs = vec![rec("ens2 rx0"), rec("ens2"), rec("ens2 rx1")];
        super::target_with_attribution(&mut recs, &a, &flows);
        // The queue with the most attributed misses first; a target naming no queue last.
        assert_eq!(
            recs.iter().map(|r| r.target.as_str()).collect::<Vec<_>>(),
            ["ens2 rx1", "ens2 rx0", "ens2"]
        );
        assert!(
            recs[0].evidence[0].contains("rx1 carries 70.0%"),
            "{:?}",
            recs[0].evidence
        );
        assert!(
            recs[0].evidence[1].contains(":1000 ") && recs[1].evidence[1].contains(":2000 "),
            "{:?}",
            recs
        );
        assert!(recs[2].evidence.is_empty());
    }
}
