//! The text report: the recording's summary, the attribution and the model's view, and the
//! simulator's what-if table, for people; and the cells the HTML report shares with it.
use std::fmt::Write as _;

use crate::analysis::summary::{QueueReport, Summary};
use crate::analysis::{Advice, AttributionReport, Outcome};
use crate::model::spec::GridPoint;
use crate::snapshot::Dir;

/// Below this share of frees seen the report explains where the others went.
const FREES_SEEN_NOTE_PCT: f64 = 50.0;

/// One socket's DDIO numbers as display cells: write miss, partial write
/// miss, read miss, inbound write/read, DRAM read/write, L3 misses/s.
pub fn socket_cells(s: &crate::counters::SocketMetrics) -> [String; 8] {
    let pct = |v: Option<f64>| v.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into());
    let mbs = |v: Option<f64>| v.map(|v| format!("{v:.0} MB/s")).unwrap_or_else(|| "-".into());
    [
        pct(s.write_miss_pct),
        pct(s.partial_write_miss_pct),
        pct(s.read_miss_pct),
        mbs(s.inbound_write_mbps),
        mbs(s.inbound_read_mbps),
        mbs(s.dram_read_mbps),
        mbs(s.dram_write_mbps),
        s.l3_miss_per_s.map(|v| format!("{v:.3e}")).unwrap_or_else(|| "-".into()),
    ]
}

/// Column headers of a direction's queue table (text and HTML share them).
pub fn queue_columns(dir: Dir) -> Vec<String> {
    let mut c: Vec<String> = ["queue", "packets", "pkt/s", "Mbit/s", "avg B"].iter().map(|s| s.to_string()).collect();
    if dir == Dir::Rx {
        c.extend(["polls", "batch", "full"].iter().map(|s| s.to_string()));
    }
    c.extend(dir.stage_names().iter().map(|n| format!("{n} p50/p99/max")));
    c
}

/// One queue's row, formatted once for every surface that shows it.
pub fn queue_cells(q: &QueueReport) -> Vec<String> {
    let mut c = vec![
        q.queue.to_string(),
        fmt_count(q.packets as f64),
        fmt_count(q.pps),
        format!("{:.1}", q.mbps),
        format!("{:.0}", q.avg_pkt_bytes.unwrap_or(0.0)),
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
    for n in q.dir.stage_names() {
        c.push(match q.stages.get(n) {
            Some(s) => format!(
                "{}/{}/{}",
                fmt_ns(s["p50_ns"].as_u64()),
                fmt_ns(s["p99_ns"].as_u64()),
                fmt_ns(s["max_ns"].as_u64())
            ),
            None => "-".into(),
        });
    }
    c
}

pub fn fmt_ns(v: Option<u64>) -> String {
    match v {
        None => "-".into(),
        Some(ns) if ns < 10_000 => format!("{ns}ns"),
        Some(ns) if ns < 10_000_000 => format!("{:.1}us", ns as f64 / 1e3),
        Some(ns) => format!("{:.1}ms", ns as f64 / 1e6),
    }
}

pub(crate) fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The summary as text, listing the first `top_flows` flows.
pub fn render_text(r: &Summary, top_flows: usize) -> String {
    let mut o = String::new();
    let m = &r.meta;
    let _ = writeln!(
        o,
        "ddioscope report — {}{} ({}), {:.1} s in {} intervals{}",
        m.iface,
        m.netns.as_deref().map(|n| format!(" @ netns {n}")).unwrap_or_default(),
        m.driver.as_deref().unwrap_or("unknown driver"),
        m.duration_s,
        m.intervals,
        if m.complete { "" } else { "  [INCOMPLETE: recording was cut off]" }
    );
    let _ = writeln!(
        o,
        "host {} · kernel {} · {} · LLC {} · NIC NUMA node {}",
        m.host,
        m.kernel,
        if m.cpu_model.is_empty() { "unknown CPU" } else { &m.cpu_model },
        m.llc_bytes
            .map(|b| format!("{:.2} MiB/{} ways", b as f64 / 1048576.0, m.llc_ways.unwrap_or(0)))
            .unwrap_or_else(|| "unknown".into()),
        m.numa_node.map(|n| n.to_string()).unwrap_or_else(|| "unknown".into())
    );
    let _ = writeln!(
        o,
        "queues rx {} tx {} · rings rx {} tx {} · IRQs {}",
        m.rx_queues,
        m.tx_queues,
        m.rx_ring.map(|v| v.to_string()).unwrap_or_else(|| "n/a".into()),
        m.tx_ring.map(|v| v.to_string()).unwrap_or_else(|| "n/a".into()),
        if m.irqs == 0 { "none (virtual device)".to_string() } else { m.irqs.to_string() }
    );
    let _ = writeln!(o, "hooks: {}", m.hooks.join(" "));
    if !m.hooks_missing.is_empty() {
        let _ = writeln!(o, "hooks not attached: {}", m.hooks_missing.join(" "));
    }

    for dir in [Dir::Rx, Dir::Tx] {
        let qs: Vec<_> = r.queues.iter().filter(|q| q.dir == dir).collect();
        let _ = writeln!(o, "\n{} queues", dir.as_str().to_uppercase());
        if qs.is_empty() {
            let _ = writeln!(o, "  (no traffic)");
            continue;
        }
        // Widths: queue, packets, pkt/s, Mbit/s, avg B, [polls, batch, full], stages.
        let mut widths = vec![5, 9, 9, 9, 7];
        if dir == Dir::Rx {
            widths.extend([7, 6, 5]);
        }
        widths.extend([21; crate::snapshot::NSTAGES]);
        let line = |cells: &[String]| -> String {
            cells.iter().zip(&widths).map(|(c, w)| format!(" {c:>w$}", w = *w)).collect::<String>()
        };
        let _ = writeln!(o, " {}", line(&queue_columns(dir)));
        for q in qs {
            let _ = writeln!(o, " {}", line(&queue_cells(q)));
        }
    }

    let _ = writeln!(o, "\nTop flows (by bytes)");
    if r.flows.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    for f in r.flows.iter().take(top_flows) {
        let q = match (f.rx_queue, f.tx_queue) {
            (Some(q), _) => format!("rxq {q}"),
            (_, Some(q)) => format!("txq {q}"),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "  {} {} {}:{} -> {}:{}  {}  {} pkts  {} B",
            f.dir.as_str(),
            f.proto,
            f.src,
            f.sport,
            f.dst,
            f.dport,
            q,
            fmt_count(f.packets as f64),
            fmt_count(f.bytes as f64)
        );
    }
    if r.flows.len() > top_flows {
        let _ = writeln!(o, "  … {} more (see --json)", r.flows.len() - top_flows);
    }

    let e = &r.events;
    let _ = writeln!(
        o,
        "\nEvents: {} packet records sampled (1 in {}), stage latencies on 1 in {} packets, {} lost in the ring buffer, {} in-flight states evicted, {} found stale{}",
        e.sampled,
        m.sample_every.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
        m.stage_every.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
        e.lost,
        e.state_evicted,
        e.state_stale,
        if e.queue_clamped > 0 { format!(", {} packets on queues ≥ 64 folded into queue 63", e.queue_clamped) } else { String::new() }
    );
    if let Some(p) = e.frees_seen_pct.filter(|p| *p < FREES_SEEN_NOTE_PCT) {
        let _ = writeln!(
            o,
            "  note: only {p:.0}% of tracked packets were seen freed. The kernel returns receive skbs freed on the CPU that \
             allocated them to its NAPI skb cache, which no tracepoint reports (usual when the reader runs on the softirq's \
             CPU); the free-based stages, residence and in-flight estimates cover the traced frees only"
        );
    }
    let c = &r.counters;
    let _ = writeln!(o, "\nSocket DDIO (counters: {}; platform {})", c.source, c.platform);
    let mbs = |v: Option<f64>| v.map(|v| format!("{v:.0} MB/s")).unwrap_or_else(|| "-".into());
    if c.sockets.iter().all(|s| s.write_miss_pct.is_none() && s.inbound_write_mbps.is_none() && s.dram_read_mbps.is_none()) {
        let why = match c.source.as_str() {
            "software" => format!("software events only ({} readings): this host has no uncore PMU, so no DDIO numbers", c.readings),
            _ => c.notes.first().cloned().unwrap_or_else(|| "no counters in this recording".into()),
        };
        let _ = writeln!(o, "  {why}");
        let _ = writeln!(o, "  (capture on the host with scripts/capture-counters.sh, then `ddioscope import-counters REC FILE`)");
    } else {
        for s in &c.sockets {
            let [w, pw, r, iw, ir, dr, dw, l3] = socket_cells(s);
            let _ = writeln!(
                o,
                "  socket {}: write miss {w} (partial {pw}), read miss {r}, inbound write {iw} read {ir}, DRAM read {dr} write {dw}, L3 misses/s {l3}{}",
                s.socket,
                if s.write_allocation_disabled { "  DDIO WRITE ALLOCATION DISABLED" } else { "" }
            );
        }
    }
    if let Some(p) = &c.nic_port {
        let _ = writeln!(
            o,
            "  NIC port: {}; inbound write {} read {}",
            p.note,
            mbs(p.inbound_write_mbps),
            mbs(p.inbound_read_mbps)
        );
    }
    for w in &c.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    let l = &r.l3miss;
    let _ = writeln!(o, "\nL3-miss samples ({})", l.source);
    if l.samples == 0 {
        let _ = writeln!(o, "  none recorded");
    } else {
        let _ = writeln!(
            o,
            "  {} samples: {} on live packet buffers (hand-up → miss p50 {} p99 {}), {} elsewhere, {} without address; {} charged by CPU context, {} uncharged",
            l.samples,
            l.on_packet_buffers,
            fmt_ns(l.age_p50_ns),
            fmt_ns(l.age_p99_ns),
            l.other_addr,
            l.no_addr,
            l.ctx_charged,
            l.uncharged
        );
        if l.flow_charges_lost.is_some_and(|n| n > 0) || l.queue_clamped > 0 {
            let _ = writeln!(
                o,
                "  lost to the flow view: {} charged samples whose flow the flow map lost (LRU eviction); {} charged to a queue past the probes' table, counted on its last queue",
                l.flow_charges_lost.unwrap_or(0),
                l.queue_clamped
            );
        }
        match l.throttle.as_ref() {
            Some(t) if t.throttles > 0 => {
                let _ = writeln!(
                    o,
                    "  sampler throttled by the kernel {} times, stopped {:.1} ms in all{}{}: misses then went unsampled (none lost to stops in idle time, more than that share to stops in a burst)",
                    t.throttles,
                    t.stopped_ms,
                    t.stopped_pct.map_or(String::new(), |p| format!(" ({p:.2}% of its CPU time)")),
                    if t.records_lost > 0 { format!(", approximate: {} throttle records lost", t.records_lost) } else { String::new() }
                );
            }
            Some(_) => {
                let _ = writeln!(o, "  sampler never throttled by the kernel");
            }
            None => {}
        }
        if let Some(why) = &l.throttle_unmeasured {
            let _ = writeln!(o, "  sampler throttling: {why}");
        }
        if let Some(a) = &l.age_split {
            let n = (a.within_life + a.after_life).max(1) as f64;
            let _ = writeln!(
                o,
                "  joined samples vs their packets' life (hand-up → free p99 {}): {:.1}% within it (evicted before use), {:.1}% after it (late reuse)",
                fmt_ns(Some(a.life_p99_ns)),
                100.0 * a.within_life as f64 / n,
                100.0 * a.after_life as f64 / n
            );
        }
        if l.join_sample > 1 {
            let _ = writeln!(
                o,
                "  join on 1 in {} buffer pages (--join-sample): {} samples on other pages, not looked up (charged by CPU context where it applies)",
                l.join_sample, l.out_of_subset
            );
        }
        if l.duty > 1 {
            let ms = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |v| format!("{v:.1}"));
            let _ = writeln!(
                o,
                "  attribution in windows (--miss-duty {}): sampler {} ms of every {} ms after a {} ms warm-up, at a random place, the period divided by {} inside; it ran {}{}; {} joined samples on pages last seen before their window (owner from then, age unknown)",
                l.duty,
                ms(l.window_ms),
                ms(l.cycle_ms),
                ms(l.warmup_ms),
                l.duty,
                l.sampled_ms.map_or_else(|| "? ms (not measured)".to_string(), |v| format!("{v:.1} ms")),
                l.duty_measured.map_or(String::new(), |d| format!(", 1/{d:.2} of the recording (estimates scale by that)")),
                l.before_window
            );
        }
        for q in &l.queues {
            let _ = writeln!(o, "  {} queue {}: {} by address, {} by CPU context", q.dir.as_str(), q.queue, q.addr_join, q.cpu_ctx);
        }
    }
    if l.buffer_map.capacity.is_some() {
        let (b, p) = (&l.buffer_map, &l.buffer_map.pages);
        let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        let _ = writeln!(o, "  buffer join: {}", l.buffer_join);
        let _ = writeln!(
            o,
            "  buffer-page map: {} linear and {} frag pages written; frags left out: {} past the cap, {} without a page, {} without an address layout; {} pages past the per-packet cap; entries max {} last {} of {} slots, {} taken over",
            p.linear_pages,
            p.frag_pages,
            p.frags_over_cap,
            p.frags_no_page,
            p.frags_no_layout,
            p.pages_over_cap,
            opt(b.entries_max),
            opt(b.entries_last),
            // Only the subset's sets are ever filled.
            opt(b.capacity.map(|c| c / l.join_sample.max(1))),
            p.slots_replaced
        );
        if p.copy_linear_joined + p.copy_frag_joined > 0 {
            let _ = writeln!(
                o,
                "  copy stand-in: {} joined samples drawn from linear data, {} from page frags",
                p.copy_linear_joined, p.copy_frag_joined
            );
        }
    }
    let _ = write!(o, "\nDrops: {}", r.drops.total);
    for d in &r.drops.reasons {
        let _ = write!(o, "  {}={}", d.name.clone().unwrap_or_else(|| format!("reason{}", d.reason)), d.count);
    }
    let _ = writeln!(o);
    o
}

/// The attributed misses: every queue, and the first `top_flows` flows.
pub fn render_attribution(a: &AttributionReport, top_flows: usize) -> String {
    let mut o = String::new();
    let at = &a.chosen;
    let _ = writeln!(
        o,
        "\nAttributed DDIO/L3 misses: method {}, confidence {}",
        at.method, at.confidence
    );
    for n in &at.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    let unit = if at.counts_are_samples { "samples" } else { "misses" };
    for q in &at.queues {
        let ci = q.ci_pct.map(|(lo, hi)| format!(" [{lo:.0}–{hi:.0}%]")).unwrap_or_default();
        let _ = writeln!(o, "  {} queue {:>2}: {:>12.0} {unit}  {:5.1}%{}", q.dir, q.queue, q.misses, q.share_pct, ci);
    }
    for f in at.flows.iter().take(top_flows) {
        let _ = writeln!(o, "  {} {}:{} -> {}:{}  {:.0} {unit}  {:.1}%", f.proto, f.src, f.sport, f.dst, f.dport, f.misses, f.share_pct);
    }
    if at.flows.len() > top_flows {
        let _ = writeln!(o, "  ({} more flows)", at.flows.len() - top_flows);
    }
    o
}

/// The DDIO model's view and the recommendations.
pub fn render_model(a: &Advice, o: &mut String) {
    let g = &a.geometry;
    let _ = writeln!(
        o,
        "\nDDIO model (model-only prediction): LLC {:.2} MiB, {} ways; DDIO {} ways ({}) = {:.2} MiB nominal, {:.2} MiB usable",
        g.size_bytes as f64 / 1048576.0,
        g.ways,
        g.ddio_ways,
        a.ddio_ways_note,
        a.model.ddio_capacity_bytes as f64 / 1048576.0,
        a.model.usable_ddio_bytes as f64 / 1048576.0
    );
    for n in &a.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    for q in &a.model.queues {
        let _ = writeln!(
            o,
            "  {:?} queue {}: footprint {:.0} KiB, in flight {:.0} KiB, predicted write hit {}, read hit {} → {:?}",
            q.dir,
            q.queue,
            q.footprint_bytes as f64 / 1024.0,
            q.inflight_bytes / 1024.0,
            q.predicted_write_hit_pct.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into()),
            q.predicted_read_hit_pct.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into()),
            q.verdict
        );
    }
    let _ = writeln!(o, "\nRecommendations ({}; nothing is applied)", if a.recommendations.is_empty() { "none" } else { "commands to run yourself" });
    for r in &a.recommendations {
        let _ = writeln!(o, "  [{}] {}", r.kind, r.target);
        let _ = writeln!(o, "      $ {}", r.command);
        for e in &r.evidence {
            let _ = writeln!(o, "      · {e}");
        }
        if let (Some(b), Some(af)) = (r.predicted_before, r.predicted_after) {
            let _ = writeln!(o, "      predicted {}: {b:.1} → {af:.1}", r.predicted_metric.as_deref().unwrap_or("hit %"));
        }
    }
}

/// `recommend`: the attribution (its first five flows), the model's view and the recommendations.
pub fn render_advice(a: &Advice) -> String {
    let mut o = render_attribution(&a.attribution, 5);
    render_model(a, &mut o);
    o
}

/// `report`: the summary, the attribution and the model's view, or why there is no model.
pub fn render_report(summary: &Summary, outcome: &Outcome, top_flows: usize) -> String {
    let mut o = render_text(summary, top_flows);
    match outcome {
        Outcome::Advised(a) => {
            o.push_str(&render_attribution(&a.attribution, top_flows));
            render_model(a, &mut o);
        }
        Outcome::NoModel { why, attribution } => {
            o.push_str(&render_attribution(attribution, top_flows));
            let _ = writeln!(o, "\nDDIO model: not available ({why})");
        }
    }
    o
}

/// `simulate`: the what-if grid as a table.
pub fn render_what_if(grid: &[GridPoint]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "model-only prediction (simulated, not measured)");
    let _ = writeln!(
        o,
        "{:>6} {:>5} {:>8} {:>7} {:>6} {:>11} {:>11} {:>9} {:>9} {:>9}",
        "ring", "ways", "mask", "queues", "pkt B", "footprint", "DDIO cap", "verdict", "write hit", "read hit"
    );
    let pct = |v: Option<f64>| v.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into());
    for p in grid {
        let _ = writeln!(
            o,
            "{:>6} {:>5} {:>#8x} {:>7} {:>6} {:>9.2}Mi {:>9.2}Mi {:>9} {:>9} {:>9}",
            p.ring,
            p.ddio_ways,
            p.ddio_mask,
            p.queues,
            p.pkt_bytes,
            p.footprint_bytes as f64 / 1048576.0,
            p.ddio_capacity_bytes as f64 / 1048576.0,
            p.verdict,
            pct(p.io_write_hit_pct),
            pct(p.io_read_hit_pct)
        );
    }
    o
}
