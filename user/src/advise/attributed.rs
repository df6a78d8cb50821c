//! The rules that need the attribution: flow steering by the measured shares, and the
//! order of the recommendations by the misses their queue carries.
use super::{steer_flow, AttributedFlow, HostObservation, ModelRun, Recommendation};
use crate::attribution::{Attribution, Confidence, Method, QueueShare};

/// [`steer_flow`] on the attribution's RX queue shares and flows.
pub fn steer_attributed_flow(
    obs: &HostObservation,
    run: &ModelRun,
    a: &Attribution,
    flows: &[AttributedFlow],
) -> Option<Recommendation> {
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
    steer_flow(obs, run, &rx_shares, flows, &attribution_label(a))
}

/// "method, confidence" for evidence lines, and whether the counts are a stand-in's samples.
fn attribution_label(a: &Attribution) -> String {
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
pub fn order_by_attributed_misses(
    recs: &mut [Recommendation],
    a: &Attribution,
    flows: &[AttributedFlow],
) {
    if a.confidence == Confidence::Insufficient || a.queues.is_empty() {
        return;
    }
    let how = attribution_label(a);
    let share_of = |target: &str| -> Option<&QueueShare> {
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
        use crate::advise::{AttributedFlow, Kind, Recommendation};
        use crate::attribution::{Attribution, Confidence, Method, QueueShare};
        let rec = |target: &str| Recommendation {
            kind: Kind::RingSize,
            target: target.into(),
            command: String::new(),
            reason: None,
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
        super::order_by_attributed_misses(&mut recs, &a, &flows);
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
