//! Estimators from sampled miss counts: address join (PEBS data address found in the packet-buffer map) and CPU context (sample charged to the network work running on the CPU), with Wilson intervals as the confidence measure.

use super::{
    flow_share, merge, sort_flows, Attribution, Confidence, Method, QueueShare, SampledCounts,
};

/// Below this many samples on packet buffers no share is reported: a handful of samples
/// says which queue was hot by luck as often as by cause.
pub const MIN_SAMPLES: u64 = 30;

/// Confidence from the widest 95% share interval (half-width, percentage points).
const HIGH_HALF_WIDTH_PP: f64 = 2.5;
const MEDIUM_HALF_WIDTH_PP: f64 = 6.0;

/// 95% two-sided normal quantile.
pub(crate) const Z95: f64 = 1.959_964;

/// Wilson score interval for k successes in n trials, as fractions.
pub fn wilson(k: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k.min(n) as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = z / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Address join: the PEBS sample's data address was looked up in the live packet-buffer map.
pub fn address_join(c: &SampledCounts) -> Attribution {
    estimate(c, Method::AddressJoin)
}

/// CPU context: samples charged to the NAPI poll / socket copy running on the sampled CPU.
/// Same estimator, one confidence step weaker: context is a proxy for ownership (a copy on
/// the CPU can miss on another queue's line, softirq can interleave).
pub fn cpu_context(c: &SampledCounts) -> Attribution {
    estimate(c, Method::CpuContext)
}

fn estimate(c: &SampledCounts, method: Method) -> Attribution {
    // Only L3-miss samples scale to misses; stand-in counts are used as they are.
    if c.period == 0 && !c.stand_in {
        return Attribution::insufficient(method, "sampling period unknown (0)");
    }
    // A join on 1 in N pages (chosen by address hash, so by nothing a queue or flow could
    // correlate with) sees 1 in N of the packet-buffer samples: the shares are those of the
    // sampled pages, and each joined sample stands for N.
    let pages = if method == Method::AddressJoin {
        c.join_sample.max(1)
    } else {
        1
    };
    let queues = merge(
        &c.queues
            .iter()
            .map(|(q, n)| (q.clone(), *n as f64))
            .collect::<Vec<_>>(),
    );
    let n: u64 = c.queues.iter().map(|(_, k)| *k).sum();
    let total_samples = n + c.other_samples;
    if n < MIN_SAMPLES {
        let sampled = if pages > 1 {
            format!(", join on 1 in {pages} buffer pages")
        } else {
            String::new()
        };
        let mut a = Attribution::insufficient(
            method,
            format!("{n} samples on packet buffers (of {total_samples}{sampled}); at least {MIN_SAMPLES} needed"),
        );
        if total_samples >= MIN_SAMPLES {
            a.notes.push(format!(
                "{:.1}% of sampled misses are outside network buffers: packet buffers are not where this socket misses",
                100.0 * c.other_samples as f64 / total_samples as f64
            ));
        }
        return a;
    }
    // Misses per sample. A stand-in's period is ns of CPU time or page faults:
    // multiplying by it would print numbers that look like misses and are not.
    let duty = c.duty.max(1.0);
    let scale = if c.stand_in {
        1.0
    } else {
        c.period as f64 * pages as f64 * duty
    };
    let mut worst_half = 0.0f64;
    let qs: Vec<QueueShare> = queues
        .iter()
        .map(|(q, k)| {
            let k = *k as u64;
            let (lo, hi) = wilson(k, n, Z95);
            worst_half = worst_half.max(50.0 * (hi - lo));
            QueueShare {
                dir: q.dir.clone(),
                queue: q.queue,
                misses: k as f64 * scale,
                share_pct: 100.0 * k as f64 / n as f64,
                ci_pct: Some((100.0 * lo, 100.0 * hi)),
            }
        })
        .collect();
    let total_misses = n as f64 * scale;
    let mut flows: Vec<_> = merge(
        &c.flows
            .iter()
            .map(|(f, k)| (f.clone(), *k as f64))
            .collect::<Vec<_>>(),
    )
    .iter()
    .map(|(f, k)| flow_share(f, k * scale, total_misses))
    .collect();
    sort_flows(&mut flows);

    let mut confidence = if worst_half <= HIGH_HALF_WIDTH_PP {
        Confidence::High
    } else if worst_half <= MEDIUM_HALF_WIDTH_PP {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    let counted = counted_note(c, n, total_misses, duty, pages);
    let mut notes = vec![format!(
        "{counted}; widest 95% share interval ±{worst_half:.1} pp"
    )];
    if method == Method::CpuContext {
        confidence = confidence.weaker();
        notes.push("charged to the network work running on the CPU at the sample (not the address): a proxy".into());
    }
    confidence = qualify(c, method, n, scale, confidence, &mut notes);
    Attribution {
        method,
        confidence,
        queues: qs,
        flows,
        notes,
        counts_are_samples: c.stand_in,
    }
}

/// What the samples count and how they scale to misses: the period, the windows' duty and
/// the page subset of the join, each with the error the intervals leave out.
fn counted_note(c: &SampledCounts, n: u64, total_misses: f64, duty: f64, pages: u64) -> String {
    let windows = duty > 1.0;
    let counted = if c.stand_in {
        format!("{n} samples on packet buffers (stand-in; not scaled to misses)")
    } else if windows {
        format!(
            "{n} samples on packet buffers × period {} × {duty:.2} ≈ {total_misses:.3e} misses",
            c.period
        )
    } else {
        format!(
            "{n} samples on packet buffers × period {} ≈ {total_misses:.3e} misses",
            c.period
        )
    };
    let counted = if windows {
        format!(
            "{counted}; sampled in windows over 1/{duty:.2} of the time (period {} inside them): the miss counts extrapolate from the windows, off by as much as the load varies between them (the shares far less), an error the intervals leave out",
            c.period
        )
    } else {
        counted
    };
    let counted = if pages > 1 {
        let scaled = if c.stand_in {
            "not scaled"
        } else {
            "scaled by it"
        };
        format!(
            "{counted}; join on 1 in {pages} buffer pages, chosen by address ({scaled}); a queue whose buffers are few recurring pages is seen through a fixed part of them, an error the intervals leave out"
        )
    } else {
        counted
    };
    counted
}

/// The notes on what the shares leave out (samples off the packet buffers, without a flow
/// key, on owners kept from an earlier window), and the confidence those last lower.
fn qualify(
    c: &SampledCounts,
    method: Method,
    n: u64,
    scale: f64,
    mut confidence: Confidence,
    notes: &mut Vec<String>,
) -> Confidence {
    let total_samples = n + c.other_samples;
    if c.other_samples > 0 {
        let what = if method == Method::AddressJoin {
            "outside packet buffers"
        } else {
            "with no network work on the CPU"
        };
        let size = if c.stand_in {
            format!("{} samples", c.other_samples)
        } else {
            format!("≈ {:.3e} misses", c.other_samples as f64 * scale)
        };
        notes.push(format!(
            "{:.1}% of samples {what} ({size}), not included in the shares",
            100.0 * c.other_samples as f64 / total_samples as f64
        ));
    }
    let flow_samples: u64 = c.flows.iter().map(|(_, k)| *k).sum();
    if !c.flows.is_empty() && flow_samples < n {
        notes.push(format!(
            "{:.1}% of packet-buffer samples had no flow key",
            100.0 * (n - flow_samples) as f64 / n as f64
        ));
    }
    if let Some(med) = median_bucket(&c.age_hist) {
        notes.push(format!(
            "median miss ≤ {:.1} µs after hand-up",
            med as f64 / 1e3
        ));
    }
    if method == Method::AddressJoin && c.before_window > 0 {
        let pct = 100.0 * c.before_window as f64 / n as f64;
        notes.push(format!("{pct:.1}% of joined samples were on pages last seen before their window: charged to that owner, age unknown"));
        // Readers that lag past the window's warm-up read buffers whose owner the map kept
        // from an earlier window: a page the driver has since given another queue is charged
        // to the old one. The intervals cannot show that error, so the confidence says it.
        let steps = (pct > STALE_OWNER_PCT) as u32 + (pct > 3.0 * STALE_OWNER_PCT) as u32;
        if steps > 0 {
            for _ in 0..steps {
                confidence = confidence.weaker();
            }
            notes.push(format!(
                "confidence lowered: {pct:.1}% of the joined samples (over {STALE_OWNER_PCT:.0}%) rest on an owner kept from an earlier window, \
                 as when readers lag the driver by more than the window's warm-up; `record --detail full` joins every packet without windows"
            ));
        }
    }
    confidence
}

/// Share of joined samples on owners kept from an earlier window (%) beyond which each step
/// (this, three times this) lowers the confidence once.
pub const STALE_OWNER_PCT: f64 = 10.0;

/// Upper bound of the bucket holding the median sample.
fn median_bucket(h: &[(u64, u64)]) -> Option<u64> {
    let mut h = h.to_vec();
    h.sort_unstable();
    let tot: u64 = h.iter().map(|b| b.1).sum();
    if tot == 0 {
        return None;
    }
    let mut acc = 0;
    for (le, n) in h {
        acc += n;
        if 2 * acc >= tot {
            return Some(le);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::{FlowId, QueueId};
    use super::*;

    #[test]
    fn wilson_known_values() {
        // k=0,n=10: upper bound ≈ 0.2775 (standard table value).
        let (lo, hi) = wilson(0, 10, Z95);
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-3, "{hi}");
        // k=50,n=100: 0.4038..0.5962.
        let (lo, hi) = wilson(50, 100, Z95);
        assert!((lo - 0.4038).abs() < 1e-3 && (hi - 0.5962).abs() < 1e-3);
    }

    #[test]
    fn shares_misses_and_confidence() {
        let f = |p: u16| FlowId {
            proto: "tcp".into(),
            src: "10.0.0.1".into(),
            sport: p,
            dst: "10.0.0.2".into(),
            dport: 5201,
        };
        let c = SampledCounts {
            period: 1000,
            stand_in: false,
            queues: vec![
                (QueueId::rx(1), 1500),
                (QueueId::rx(0), 4500),
                (QueueId::rx(1), 0),
            ],
            flows: vec![(f(1), 4000), (f(2), 1900)],
            other_samples: 2000,
            join_sample: 1,
            duty: 1.0,
            before_window: 0,
            age_hist: vec![(1000, 10), (10_000, 100), (100_000, 5)],
        };
        let a = address_join(&c);
        assert_eq!(
            (a.method, a.confidence),
            (Method::AddressJoin, Confidence::High)
        );
        assert_eq!(a.queues.len(), 2);
        assert_eq!(
            (a.queues[0].queue, a.queues[0].misses, a.queues[0].share_pct),
            (0, 4.5e6, 75.0)
        );
        let (lo, hi) = a.queues[0].ci_pct.unwrap_or((0.0, 0.0));
        assert!(lo < 75.0 && hi > 75.0 && hi - lo < 3.0);
        assert_eq!(a.flows[0].sport, 1);
        assert!(a
            .notes
            .iter()
            .any(|n| n.contains("25.0% of samples outside")));
        assert!(a.notes.iter().any(|n| n.contains("no flow key")));
        assert!(a.notes.iter().any(|n| n.contains("10.0 µs")));
        let b = cpu_context(&c);
        assert_eq!(
            (b.method, b.confidence),
            (Method::CpuContext, Confidence::Medium)
        );
        // 200 samples: ±6.5 pp → low.
        let c2 = SampledCounts {
            period: 1000,
            queues: vec![(QueueId::rx(0), 100), (QueueId::rx(1), 100)],
            ..Default::default()
        };
        assert_eq!(address_join(&c2).confidence, Confidence::Low);
    }

    #[test]
    fn stand_in_samples_stay_samples() {
        // cpu-clock every 50 µs: the period is ns of CPU time, not misses.
        let f = |p: u16| FlowId {
            proto: "tcp".into(),
            src: "10.0.0.1".into(),
            sport: p,
            dst: "10.0.0.2".into(),
            dport: 5201,
        };
        let pebs = SampledCounts {
            period: 50_000,
            stand_in: false,
            queues: vec![(QueueId::rx(0), 3600), (QueueId::rx(1), 1130)],
            flows: vec![(f(1), 3600), (f(2), 1130)],
            other_samples: 270,
            join_sample: 1,
            duty: 1.0,
            before_window: 0,
            age_hist: Vec::new(),
        };
        let standin = SampledCounts {
            stand_in: true,
            ..pebs.clone()
        };
        for method in [address_join, cpu_context] {
            let (p, s) = (method(&pebs), method(&standin));
            assert_eq!(p.queues[0].misses, 3600.0 * 50_000.0);
            assert!(
                p.notes[0]
                    .starts_with("4730 samples on packet buffers × period 50000 ≈ 2.365e8 misses"),
                "{}",
                p.notes[0]
            );
            assert!(
                p.notes.iter().any(|n| n.contains("(≈ 1.350e7 misses)")),
                "{:?}",
                p.notes
            );

            assert_eq!(
                s.queues.iter().map(|q| q.misses).collect::<Vec<_>>(),
                vec![3600.0, 1130.0]
            );
            assert_eq!(
                s.flows.iter().map(|f| f.misses).collect::<Vec<_>>(),
                vec![3600.0, 1130.0]
            );
            assert!(
                s.notes[0]
                    .starts_with("4730 samples on packet buffers (stand-in; not scaled to misses)"),
                "{}",
                s.notes[0]
            );
            assert!(
                s.notes
                    .iter()
                    .all(|n| !n.contains("period") && !n.contains("≈")),
                "{:?}",
                s.notes
            );
            assert!(
                s.notes
                    .iter()
                    .any(|n| n.contains("5.4% of samples") && n.contains("(270 samples)")),
                "{:?}",
                s.notes
            );
            // Shares and confidence do not depend on the scale.
            assert_eq!(
                (s.confidence, s.queues[0].share_pct, s.queues[0].ci_pct),
                (p.confidence, p.queues[0].share_pct, p.queues[0].ci_pct)
            );
            assert_eq!(s.flows[0].share_pct, p.flows[0].share_pct);
        }
        // A stand-in needs no period: its counts are not scaled.
        let unknown = SampledCounts {
            period: 0,
            ..standin
        };
        assert_ne!(address_join(&unknown).confidence, Confidence::Insufficient);
    }

    #[test]
    fn windowed_samples_scale_by_the_duty_for_both_methods() {
        let all = SampledCounts {
            period: 2000,
            queues: vec![(QueueId::rx(0), 900), (QueueId::rx(1), 300)],
            other_samples: 100,
            before_window: 60,
            ..Default::default()
        };
        // The same samples at period 125 in windows of 1/16 stand for as many misses as at
        // period 2000 always on; shares are the samples' own.
        let windowed = SampledCounts {
            period: 125,
            duty: 16.0,
            ..all.clone()
        };
        for f in [address_join, cpu_context] {
            let (a, w) = (f(&all), f(&windowed));
            assert_eq!(w.queues[0].misses, a.queues[0].misses);
            assert_eq!(
                (w.queues[0].share_pct, w.confidence),
                (a.queues[0].share_pct, a.confidence)
            );
            assert!(
                w.notes[0].contains("× period 125 × 16.00 ≈")
                    && w.notes[0].contains("windows over 1/16.00"),
                "{}",
                w.notes[0]
            );
            assert!(
                a.notes.iter().all(|n| !n.contains("windows")),
                "{:?}",
                a.notes
            );
        }
        // Joined samples on pages from an earlier window are said, for the join only.
        let j = address_join(&windowed);
        assert!(
            j.notes.iter().any(|n| n
                .starts_with("5.0% of joined samples were on pages last seen before their window")),
            "{:?}",
            j.notes
        );
        assert!(cpu_context(&windowed)
            .notes
            .iter()
            .all(|n| !n.contains("before their window")));
        assert!(
            j.notes.iter().all(|n| !n.contains("confidence lowered")),
            "{:?}",
            j.notes
        );
        // Many samples on owners from an earlier window (readers lagging the warm-up): the
        // same shares, a weaker confidence, one step per threshold, and the reason said.
        let stale = |k: u64| {
            address_join(&SampledCounts {
                before_window: k,
                ..windowed.clone()
            })
        };
        let (fresh, some, most) = (stale(0), stale(240), stale(480));
        assert_eq!(some.queues[0].share_pct, fresh.queues[0].share_pct);
        assert_ne!(some.confidence, fresh.confidence);
        assert_eq!(some.confidence, fresh.confidence.weaker());
        assert_eq!(most.confidence, fresh.confidence.weaker().weaker());
        assert!(
            some.notes
                .iter()
                .any(|n| n.starts_with("confidence lowered: 20.0% of the joined samples")),
            "{:?}",
            some.notes
        );
    }

    #[test]
    fn page_sampled_join_scales_misses_not_shares() {
        let all = SampledCounts {
            period: 2000,
            queues: vec![(QueueId::rx(0), 900), (QueueId::rx(1), 300)],
            other_samples: 100,
            ..Default::default()
        };
        let quarter = SampledCounts {
            join_sample: 4,
            ..all.clone()
        };
        let (a, q) = (address_join(&all), address_join(&quarter));
        // Each joined sample stands for 4 when the map held 1 page in 4; shares and their
        // intervals rest on the samples themselves.
        assert_eq!(q.queues[0].misses, 4.0 * a.queues[0].misses);
        assert_eq!(
            (q.queues[0].share_pct, q.queues[0].ci_pct, q.confidence),
            (a.queues[0].share_pct, a.queues[0].ci_pct, a.confidence)
        );
        assert!(
            q.notes[0].contains("join on 1 in 4 buffer pages, chosen by address (scaled by it)"),
            "{}",
            q.notes[0]
        );
        assert!(
            a.notes.iter().all(|n| !n.contains("buffer pages,")),
            "{:?}",
            a.notes
        );
        // CPU context does not go through the map: unscaled whatever the join did.
        assert_eq!(
            cpu_context(&quarter).queues[0].misses,
            cpu_context(&all).queues[0].misses
        );
        // A stand-in stays in samples, and says the join was sampled.
        let s = address_join(&SampledCounts {
            stand_in: true,
            ..quarter
        });
        assert_eq!(s.queues[0].misses, 900.0);
        assert!(
            s.notes[0].contains("1 in 4 buffer pages") && s.notes[0].contains("not scaled"),
            "{}",
            s.notes[0]
        );
    }

    #[test]
    fn no_or_few_samples_are_insufficient() {
        let empty = SampledCounts {
            period: 200,
            ..Default::default()
        };
        let a = address_join(&empty);
        assert_eq!(a.confidence, Confidence::Insufficient);
        assert!(a.queues.is_empty() && a.flows.is_empty());
        let few = SampledCounts {
            period: 200,
            queues: vec![(QueueId::rx(0), 20), (QueueId::rx(1), 5)],
            other_samples: 5000,
            ..Default::default()
        };
        let a = address_join(&few);
        assert_eq!(a.confidence, Confidence::Insufficient);
        assert!(
            a.notes
                .iter()
                .any(|n| n.contains("outside network buffers")),
            "{:?}",
            a.notes
        );
        let nop = SampledCounts {
            period: 0,
            queues: vec![(QueueId::rx(0), 2000)],
            ..Default::default()
        };
        assert_eq!(cpu_context(&nop).confidence, Confidence::Insufficient);
    }
}
