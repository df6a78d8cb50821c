//! The words and cells more than one renderer prints (the text report, the HTML page,
//! `top`): a queue's table row, a socket's DDIO numbers, the answer's leaking line and the
//! model's calibration sentence, so every surface says them the same way.
use std::fmt::Write as _;

use crate::analysis::answer::Answer;
use crate::analysis::summary::{QueueReport, Summary};
use crate::snapshot::Dir;
use crate::units::{fmt_count, fmt_ns, fmt_pct};

/// Why a recording lists no detail hook (tier 0's are on the counts line); None when it
/// lists some.
pub fn no_detail_hooks(r: &Summary) -> Option<&'static str> {
    if !r.meta.hooks.is_empty() {
        None
    } else if r.tiers.stages.kind == "absent" {
        Some("no detail hook: recorded with --detail counts (tier 0's are on the counts line)")
    } else {
        Some("no detail hook attached")
    }
}

/// The detail hooks that ran, or why none did.
pub fn detail_hooks_words(r: &Summary) -> String {
    no_detail_hooks(r).map_or_else(|| r.meta.hooks.join(" "), str::to_string)
}

/// "rx 3", as the JSON spells a queue.
pub fn qname(dir: impl std::fmt::Display, queue: u32) -> String {
    format!("{dir} {queue}")
}

/// One socket's DDIO numbers as display cells: write miss, partial write
/// miss, read miss, inbound write/read, DRAM read/write, L3 misses/s.
pub fn socket_cells(s: &crate::counters::SocketMetrics) -> [String; 8] {
    let mbs = |v: Option<f64>| {
        v.map(|v| format!("{v:.0} MB/s"))
            .unwrap_or_else(|| "-".into())
    };
    [
        fmt_pct(s.write_miss_pct),
        fmt_pct(s.partial_write_miss_pct),
        fmt_pct(s.read_miss_pct),
        mbs(s.inbound_write_mbps),
        mbs(s.inbound_read_mbps),
        mbs(s.dram_read_mbps),
        mbs(s.dram_write_mbps),
        s.l3_miss_per_s
            .map(|v| format!("{v:.3e}"))
            .unwrap_or_else(|| "-".into()),
    ]
}

/// The stage that spans a packet buffer's life, by direction.
pub fn life_stage(dir: Dir) -> &'static str {
    dir.stage_names()[dir.lifetime_stage()]
}

/// Column headers of a direction's queue table (text and HTML share them); `wide` adds
/// every stage's p50/p99/max.
pub fn queue_columns(dir: Dir, wide: bool) -> Vec<String> {
    let mut c: Vec<String> = ["queue", "packets", "pkt/s", "Mbit/s", "avg B", "drops"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if dir == Dir::Rx {
        c.extend(["polls", "batch", "full"].iter().map(|s| s.to_string()));
    }
    if wide {
        c.extend(dir.stage_names().iter().map(|n| format!("{n} p50/p99/max")));
    } else {
        c.extend(["life p50", "life p99"].iter().map(|s| s.to_string()));
    }
    c
}

/// One queue's row, formatted once for every surface that shows it.
pub fn queue_cells(q: &QueueReport, wide: bool) -> Vec<String> {
    let mut c = vec![
        q.queue.to_string(),
        fmt_count(q.packets as f64),
        fmt_count(q.packets_per_s),
        format!("{:.1}", q.mbit_per_s),
        q.avg_pkt_bytes
            .map_or_else(|| "-".into(), |v| format!("{v:.0}")),
        q.drops.to_string(),
    ];
    if q.dir == Dir::Rx {
        match &q.napi {
            Some(n) => c.extend([
                fmt_count(n.polls as f64),
                format!("{:.1}", n.avg_work.unwrap_or(0.0)),
                n.budget_exhausted.to_string(),
            ]),
            None => c.extend(["-".to_string(), "-".to_string(), "-".to_string()]),
        }
    }
    if wide {
        for n in q.dir.stage_names() {
            c.push(match q.stage(n) {
                Some(s) => format!(
                    "{}/{}/{}",
                    fmt_ns(s.p50_ns),
                    fmt_ns(s.p99_ns),
                    fmt_ns(Some(s.max_ns))
                ),
                None => "-".into(),
            });
        }
    } else {
        let life = q.stage(life_stage(q.dir));
        c.push(fmt_ns(life.and_then(|s| s.p50_ns)));
        c.push(fmt_ns(life.and_then(|s| s.p99_ns)));
    }
    c
}

/// "rx 3, rx 0: leaky, REASON" when the leaking queues share a verdict; "rx 3 leaky, rx 0
/// at_risk; rx 3: REASON" when they do not. The reason is the most-missed queue's; `name`
/// writes a queue (the HTML marks it up).
pub fn leaking_line(a: &Answer, why: &str, name: impl Fn(Dir, u32) -> String) -> String {
    let first = &a.leaking[0];
    // Tied queues (within the model's spread) are joined by "=", not ranked by ",".
    let join = |parts: Vec<String>| {
        let mut out = String::new();
        for (l, p) in a.leaking.iter().zip(parts) {
            if !out.is_empty() {
                out.push_str(if l.tied { " = " } else { ", " });
            }
            out.push_str(&p);
        }
        out
    };
    let ties = if a.leaking.iter().any(|l| l.tied) {
        " (= tied: closer than the model's run-to-run spread)"
    } else {
        ""
    };
    if a.leaking.iter().all(|l| l.verdict == first.verdict) {
        let names: Vec<String> = a.leaking.iter().map(|l| name(l.dir, l.queue)).collect();
        format!("{}{ties}: {}, {why}", join(names), first.verdict)
    } else {
        let names: Vec<String> = a
            .leaking
            .iter()
            .map(|l| format!("{} {}", name(l.dir, l.queue), l.verdict))
            .collect();
        format!(
            "{}{ties}; {}: {why}",
            join(names),
            qname(first.dir, first.queue)
        )
    }
}

/// The label the leaking queues get: on a host without measured DDIO they are a prediction.
pub fn leaking_label(a: &Answer) -> &'static str {
    if a.ddio.is_some() {
        "Would leak"
    } else {
        "Leaking"
    }
}

/// The model's calibration in one sentence, for the text report, `simulate` and the HTML page.
pub fn calibration_words(cal: Option<&crate::advise::CalibrationReport>) -> String {
    use crate::advise::BackgroundFit;
    let Some(c) = cal else {
        return "none: no DDIO or memory-controller counters in the recording to fit the model to"
            .to_string();
    };
    let pct = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}%"));
    let mut s = format!("to the {} counters", c.source);
    if c.measured_write_hit_pct.is_some() {
        let _ = write!(
            s,
            ": write hit measured {}, uncalibrated {}, calibrated {} (residual {})",
            pct(c.measured_write_hit_pct),
            pct(c.uncalibrated_write_hit_pct),
            pct(c.calibrated_write_hit_pct),
            c.residual_write_pct
                .map_or_else(|| "-".to_string(), |v| format!("{v:+.1} pp")),
        );
    }
    if let (Some(m), Some(k)) = (c.measured_read_hit_pct, c.calibrated_read_hit_pct) {
        let _ = write!(s, "; NIC read hit measured {m:.1}%, calibrated {k:.1}%");
    }
    if let (Some(m), Some(n)) = (
        c.measured_dram_read_gbps,
        c.calibrated_network_dram_read_gbps,
    ) {
        let _ = write!(
            s,
            "; DRAM reads measured {m:.2} GB/s (every source), calibrated {n:.2} the network's + {:.2} the background's (residual {:+.2} GB/s)",
            c.calibrated_background_dram_read_gbps,
            c.residual_dram_read_gbps.unwrap_or(0.0),
        );
    }
    let lines = c.params.bg_lines_per_sec / 1e6;
    s.push_str(&match c.background_fit {
        BackgroundFit::Spec => String::new(),
        BackgroundFit::WriteHits => {
            format!("; a background load of {lines:.0} M lines/s fitted to the write hits")
        }
        BackgroundFit::WriteHitsBoundByDram => format!(
            "; the background load the write hits ask for is more than the memory controllers read: cut to {lines:.0} M lines/s, the rest of the write misses unexplained"
        ),
        BackgroundFit::DramExcess => format!(
            "; the reads beyond the network's fitted as a background load of {lines:.0} M lines/s"
        ),
    });
    s
}

/// The socket's predicted DRAM traffic and copy read miss, beside what the memory
/// controllers counted when the recording has them; None without a prediction.
pub fn dram_words(m: &crate::advise::ModelView) -> Option<String> {
    let (r, w) = (m.predicted_dram_read_gbps?, m.predicted_dram_write_gbps?);
    let mut s = format!("the network's, predicted: read {r:.2} GB/s, write {w:.2} GB/s");
    if let Some(x) = m.predicted_cpu_read_miss_pct {
        let _ = write!(s, "; the copy's LLC read miss {x:.1}%");
    }
    match (m.measured_dram_read_gbps, m.measured_dram_write_gbps) {
        (Some(mr), Some(mw)) => {
            let _ = write!(
                s,
                "; memory controllers measured read {mr:.2} GB/s, write {mw:.2} GB/s (all traffic)"
            );
        }
        _ => s.push_str("; no memory-controller counters in the recording to set beside it"),
    }
    Some(s)
}
