//! The text report for people: the answer first (what leaks, how sure, what to change), each
//! queue's verdict with its reason, then the evidence (where each number comes from, the
//! queue and stage tables, flows, events, counters, L3-miss samples, drops) and the
//! attribution. Lines fit the width the caller gives (the terminal's) unless `--wide` asks
//! for every stage in the queue rows, or a table or a single word is wider than it.
use std::fmt::Write as _;
use std::ops::{Deref, DerefMut};

use super::words::{
    calibration_words, leaking_label, leaking_line, life_stage, qname, queue_cells,
};
use super::words::{dram_words, queue_columns, socket_cells};
use crate::analysis::answer::{Answer, NoChange, QueueVerdict};
use crate::analysis::summary::{QueueReport, Summary};
use crate::analysis::StoppedBy;
use crate::analysis::{Advice, AttributionReport, GridPoint, Input, InputSource, Outcome};
use crate::attribution::Method;
use crate::snapshot::Dir;
use crate::units::{fmt_bytes, fmt_count, fmt_duration, fmt_ns, fmt_pct};

/// Below this share of frees seen the report explains where the others went.
const FREES_SEEN_NOTE_PCT: f64 = 50.0;
/// The width text is laid out for when the caller knows no terminal's.
pub const DEFAULT_WIDTH: usize = 100;
/// Narrower than this, wrapping would leave a word or two a line: text is laid out this wide.
pub const MIN_WIDTH: usize = 40;

/// How the text report is laid out.
#[derive(Debug, Clone, Copy)]
pub struct TextOptions {
    /// Flows listed.
    pub top_flows: usize,
    /// Every stage's p50/p99/max in the queue rows (wider than `width`).
    pub wide: bool,
    /// Columns every line fits (at least `MIN_WIDTH`).
    pub width: usize,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            top_flows: 10,
            wide: false,
            width: DEFAULT_WIDTH,
        }
    }
}

/// Text being laid out `width` columns wide: `wrapped` and `table` read the width from it.
pub struct Out {
    text: String,
    width: usize,
}

impl Out {
    pub fn new(width: usize) -> Out {
        Out {
            text: String::new(),
            width: width.max(MIN_WIDTH),
        }
    }

    pub fn into_string(self) -> String {
        self.text
    }
}

impl std::fmt::Write for Out {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.text.push_str(s);
        Ok(())
    }
}

impl Deref for Out {
    type Target = String;
    fn deref(&self) -> &String {
        &self.text
    }
}

impl DerefMut for Out {
    fn deref_mut(&mut self) -> &mut String {
        &mut self.text
    }
}

/// A table: a header row and rows, right-aligned but for the `left` columns, each column as
/// wide as its widest cell, two spaces apart, or one when two would not fit the width.
fn table(o: &mut Out, indent: usize, header: &[String], rows: &[Vec<String>], left: &[usize]) {
    let n = header.len();
    let mut w = vec![0usize; n];
    for r in std::iter::once(header).chain(rows.iter().map(|r| r.as_slice())) {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let cells: usize = indent + w.iter().sum::<usize>();
    let gap = if cells + 2 * n.saturating_sub(1) <= o.width {
        "  "
    } else {
        " "
    };
    for r in std::iter::once(header).chain(rows.iter().map(|r| r.as_slice())) {
        let mut line = " ".repeat(indent);
        for (i, c) in r.iter().enumerate().take(n) {
            let pad = w[i].saturating_sub(c.chars().count());
            if i > 0 {
                line.push_str(gap);
            }
            if left.contains(&i) {
                line.push_str(c);
                if i + 1 < r.len() {
                    line.push_str(&" ".repeat(pad));
                }
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(c);
            }
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
}

/// `text` after `head`, wrapped at the width with continuation lines indented to where the
/// text starts (a `head` may begin with blank lines).
fn wrapped(o: &mut Out, head: &str, text: &str) {
    fill(o, head, text, "");
}

/// A command to paste, after `head`: broken only between words, each line but the last
/// ending in ` \` so that the shell reads the lines as one command.
fn command(o: &mut Out, head: &str, cmd: &str) {
    fill(o, head, cmd, " \\");
}

/// The words of `text` after `head`, as many a line as fit the width with `cont` (the
/// continuation mark) after them.
fn fill(o: &mut Out, head: &str, text: &str, cont: &str) {
    let indent = head.rsplit('\n').next().unwrap_or(head).chars().count();
    let room = o.width.saturating_sub(cont.chars().count());
    let mut line = head.to_string();
    let mut len = indent;
    let mut first = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let wl = word.chars().count();
        if !first && len + 1 + wl > room {
            let _ = writeln!(o, "{}{cont}", line.trim_end());
            line = " ".repeat(indent);
            len = indent;
            first = true;
        }
        if !first {
            line.push(' ');
            len += 1;
        }
        line.push_str(word);
        len += wl;
        first = false;
    }
    let _ = writeln!(o, "{}", line.trim_end());
}

/// Each queue's flow overflow bucket, where one holds anything: what the flows above miss.
fn overflow_lines(o: &mut Out, buckets: &[crate::probe::qcount::FlowOverflow]) {
    for b in buckets.iter().filter(|b| b.packets > 0) {
        wrapped(
            o,
            &format!("  overflow {}: ", qname(b.dir.as_str(), b.queue)),
            &format!(
                "{} packets, {} in no flow above: the BPF flow table was full when they came",
                fmt_count(b.packets as f64),
                fmt_bytes(b.bytes as f64)
            ),
        );
    }
    let unparsed: u64 = buckets.iter().map(|b| b.unparsed).sum();
    if unparsed > 0 {
        let _ = writeln!(
            o,
            "  and {} sampled packets of no TCP/UDP flow",
            fmt_count(unparsed as f64)
        );
    }
}

/// Runs of queue numbers as "1", "1–3".
fn runs(qs: &[u32]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < qs.len() {
        let mut j = i;
        while j + 1 < qs.len() && qs[j + 1] == qs[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            qs[i].to_string()
        } else {
            format!("{}–{}", qs[i], qs[j])
        });
        i = j + 1;
    }
    out
}

fn predicted(metric: Option<&str>, before: Option<f64>, after: Option<f64>) -> String {
    match (before, after) {
        (Some(b), Some(a)) => format!(
            "; predicted {}: {b:.1}% → {a:.1}%",
            metric.unwrap_or("hit rate")
        ),
        (None, Some(a)) => format!("; predicted {}: {a:.1}%", metric.unwrap_or("hit rate")),
        _ => String::new(),
    }
}

/// "COMMAND; predicted …", with the reason first when the change is not for the cache.
pub fn change_line(c: &crate::analysis::answer::Change) -> String {
    let cmd = if c.command.is_empty() {
        format!(
            "{} {}: no single command, see its evidence",
            c.kind, c.target
        )
    } else {
        c.command.replace('\n', "; ")
    };
    let pred = predicted(
        c.predicted_metric.as_deref(),
        c.predicted_before,
        c.predicted_after,
    );
    match &c.reason {
        Some(r) => format!("for {r}: {cmd}"),
        None => format!("{cmd}{pred}"),
    }
}

/// The answer block every report and `recommend` lead with.
pub fn render_answer(o: &mut Out, a: &Answer, verdicts: &[QueueVerdict]) {
    let _ = writeln!(o, "Answer");
    if let Some(d) = &a.ddio {
        wrapped(o, "  DDIO      ", d);
    }
    // The labels are ten wide; "Would leak" fills it, so it gets its own space.
    let label = match leaking_label(a) {
        l if l.len() >= 10 => format!("  {l} "),
        l => format!("  {l:<10}"),
    };
    let label = label.as_str();
    let reason_of = |d: Dir, q: u32| {
        verdicts
            .iter()
            .find(|v| v.dir == d && v.queue == q)
            .map(|v| v.reason.clone())
    };
    if let Some(why) = &a.model_unavailable {
        wrapped(
            o,
            label,
            &format!("unknown: the DDIO model could not run: {why}"),
        );
    } else if a.leaking.is_empty() {
        let what = if a.unknown > 0 {
            format!("none known; {} queues have no verdict", a.unknown)
        } else {
            "none: every modelled queue fits".into()
        };
        wrapped(o, label, &what);
    } else {
        let first = &a.leaking[0];
        let why = reason_of(first.dir, first.queue).unwrap_or_default();
        wrapped(o, label, &leaking_line(a, &why, qname));
    }
    let shares: Vec<String> = a
        .leaking
        .iter()
        .filter_map(|l| {
            l.share_pct
                .map(|s| format!("{} {s:.1}%", qname(l.dir, l.queue)))
        })
        .collect();
    if !shares.is_empty() {
        let of = if a.method == Method::ModelPrior {
            "of the predicted misses"
        } else {
            "of the attributed misses"
        };
        wrapped(o, "  Misses    ", &format!("{} {of}", shares.join(", ")));
    }
    if !a.top_flows.is_empty() {
        let f: Vec<String> = a
            .top_flows
            .iter()
            .map(|f| {
                format!(
                    "{}{} {}:{} -> {}:{} {:.1}%",
                    if f.tied { "= " } else { "" },
                    f.proto,
                    f.src,
                    f.sport,
                    f.dst,
                    f.dport,
                    f.share_pct
                )
            })
            .collect();
        let tied = if a.top_flows.iter().any(|f| f.tied) {
            " (= tied with the flow before: closer than the model's run-to-run spread)"
        } else {
            ""
        };
        wrapped(o, "  Flows     ", &format!("{}{tied}", f.join("; ")));
    }
    wrapped(
        o,
        "  How sure  ",
        &format!("{} confidence: {}", a.confidence, a.evidence),
    );
    if a.changes.is_empty() {
        let why = a
            .no_change
            .as_ref()
            .map_or_else(String::new, |n| n.reasons.join("; "));
        wrapped(o, "  Change    ", &format!("nothing to run: {why}"));
    }
    for c in &a.changes {
        wrapped(o, "  Change    ", &change_line(c));
    }
    if let Some(NoChange { next_steps, .. }) = &a.no_change {
        for n in next_steps {
            wrapped(o, "  Next      ", n);
        }
    }
}

/// Each queue's verdict: a table, then the reasons, each once for the queues it covers.
pub fn render_verdicts(o: &mut Out, verdicts: &[QueueVerdict]) {
    let _ = writeln!(o, "\nPer-queue verdicts · model-only prediction");
    if verdicts.is_empty() {
        let _ = writeln!(o, "  none: no queue carried traffic");
        return;
    }
    let rows: Vec<Vec<String>> = verdicts
        .iter()
        .map(|v| {
            vec![
                qname(v.dir, v.queue),
                v.verdict.to_string(),
                v.footprint_bytes
                    .map_or_else(|| "-".into(), |b| fmt_bytes(b as f64)),
                v.inflight_bytes.map_or_else(|| "-".into(), fmt_bytes),
                fmt_pct(v.predicted_write_hit_pct),
                fmt_pct(v.predicted_read_hit_pct),
                fmt_gbps(v.predicted_dram_read_gbps),
                fmt_gbps(v.predicted_dram_write_gbps),
            ]
        })
        .collect();
    // The copy's read miss is 100 % less its read hit: the JSON has it, the table does not.
    let header: Vec<String> = [
        "queue",
        "verdict",
        "ring needs",
        "in flight",
        "write hit",
        "read hit",
        "DRAM rd",
        "DRAM wr",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    table(o, 2, &header, &rows, &[0, 1]);
    if verdicts
        .iter()
        .any(|v| v.predicted_dram_read_gbps.is_some())
    {
        wrapped(
            o,
            "  DRAM: ",
            "the GB/s of memory reads and writes each queue's packets cause, predicted",
        );
    }
    let mut reasons: Vec<(&str, Vec<&QueueVerdict>)> = Vec::new();
    for v in verdicts {
        match reasons.iter_mut().find(|(r, _)| *r == v.reason) {
            Some((_, qs)) => qs.push(v),
            None => reasons.push((&v.reason, vec![v])),
        }
    }
    for (reason, qs) in reasons {
        let mut names = Vec::new();
        for dir in [Dir::Rx, Dir::Tx] {
            let nums: Vec<u32> = qs
                .iter()
                .filter(|v| v.dir == dir)
                .map(|v| v.queue)
                .collect();
            if !nums.is_empty() {
                names.push(format!("{dir} {}", runs(&nums).join(", ")));
            }
        }
        wrapped(o, "  why: ", &format!("{}: {reason}", names.join(", ")));
    }
}

/// Where each kind of number comes from.
fn render_provenance(o: &mut Out, r: &Summary) {
    let t = &r.tiers;
    wrapped(o, "  counts    ", &t.counts.text);
    wrapped(o, "  flows     ", &t.flows.text);
    wrapped(o, "  stages    ", &t.stages.text);
    wrapped(o, "  records   ", &t.records.text);
}

fn render_header(o: &mut Out, r: &Summary) {
    let m = &r.meta;
    let line = format!(
        // How it ended comes before its length: on the first line at any width.
        "{}{}, {}{} · {} in {} intervals{}",
        m.iface,
        m.netns
            .as_deref()
            .map(|n| format!(" @ netns {n}"))
            .unwrap_or_default(),
        m.driver.as_deref().unwrap_or("unknown driver"),
        match (m.complete, m.stopped_by) {
            (false, _) => " · INCOMPLETE: the recording was cut off".to_string(),
            // Ended early by something other than the user: say what.
            (
                true,
                Some(
                    s @ (StoppedBy::DeviceRemoved
                    | StoppedBy::DeviceMoved
                    | StoppedBy::NetnsDeleted
                    | StoppedBy::DiskFull),
                ),
            ) => {
                format!(" · {}", s.describe())
            }
            (true, _) => String::new(),
        },
        fmt_duration(m.duration_s * 1e9),
        m.intervals,
        m.interval_ms
            .map(|v| format!(" of {v} ms"))
            .unwrap_or_default(),
    );
    wrapped(o, "ddioscope report: ", &line);
    let w = &r.window;
    if !w.whole {
        wrapped(
            o,
            "window: ",
            &format!(
                "{} to {} from the start, intervals {} to {}; flows and drop reasons are whole-run tables: listed are the flows active in the window, with their counts over the whole run",
                fmt_duration(w.from_s * 1e9),
                fmt_duration(w.to_s * 1e9),
                w.first,
                w.last
            ),
        );
    }
}

/// The queue tables, the stage latencies, flows, events, counters, L3-miss samples and drops.
pub fn render_evidence(o: &mut Out, r: &Summary, opt: &TextOptions) {
    render_host(o, r);
    render_queue_tables(o, r, opt);
    if !opt.wide {
        // The wide queue table carries the stages in its own columns.
        render_stage_latencies(o, r);
    }
    render_flows(o, r, opt);
    render_events(o, r);
    render_counters(o, r);
    render_misses(o, r);
    render_drops(o, r);
}

/// The host, the device, where the numbers come from and which hooks ran: what a reader
/// needs before trusting any table below.
fn render_host(o: &mut Out, r: &Summary) {
    let m = &r.meta;
    let _ = writeln!(o, "\nEvidence");
    wrapped(
        o,
        "  host      ",
        &format!(
            "{} · kernel {} · {} · LLC {} · NIC NUMA node {}",
            m.host,
            m.kernel,
            if m.cpu_model.is_empty() {
                "unknown CPU"
            } else {
                &m.cpu_model
            },
            m.llc_bytes
                .map(|b| format!("{}, {} ways", fmt_bytes(b as f64), m.llc_ways.unwrap_or(0)))
                .unwrap_or_else(|| "unknown".into()),
            m.numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "unknown".into())
        ),
    );
    wrapped(
        o,
        "  device    ",
        &format!(
            "{} RX and {} TX queues · rings RX {}, TX {} · {}",
            m.rx_queues,
            m.tx_queues,
            m.rx_ring
                .map(|v| v.to_string())
                .unwrap_or_else(|| "unknown".into()),
            m.tx_ring
                .map(|v| v.to_string())
                .unwrap_or_else(|| "unknown".into()),
            if m.irqs == 0 {
                "no IRQs: a virtual device".to_string()
            } else {
                format!("{} IRQs", m.irqs)
            }
        ),
    );
    render_provenance(o, r);
    wrapped(o, "  hooks     ", &super::words::detail_hooks_words(r));
    if !m.hooks_missing.is_empty() {
        wrapped(o, "  not attached ", &m.hooks_missing.join(" "));
    }
}

/// One table per direction, a row per queue, runs of idle queues folded into one row.
fn render_queue_tables(o: &mut Out, r: &Summary, opt: &TextOptions) {
    for dir in [Dir::Rx, Dir::Tx] {
        let qs: Vec<&QueueReport> = r.queues.iter().filter(|q| q.dir == dir).collect();
        let _ = writeln!(
            o,
            "\n{} queues · {}",
            dir.as_str().to_uppercase(),
            r.tiers.counts.kind
        );
        if qs.is_empty() {
            let _ = writeln!(o, "  none");
            continue;
        }
        let header = queue_columns(dir, opt.wide);
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut idle: Vec<u32> = Vec::new();
        let flush = |idle: &mut Vec<u32>, rows: &mut Vec<Vec<String>>| {
            for run in runs(idle) {
                rows.push(vec![run, "idle".into()]);
            }
            idle.clear();
        };
        for q in qs {
            if q.packets == 0 && q.napi.is_none() && q.drops == 0 {
                idle.push(q.queue);
                continue;
            }
            flush(&mut idle, &mut rows);
            rows.push(queue_cells(q, opt.wide));
        }
        flush(&mut idle, &mut rows);
        table(o, 2, &header, &rows, &[]);
        let _ = writeln!(
            o,
            "  life: {}, the stage a packet buffer lives through",
            life_stage(dir)
        );
    }
}

/// Each queue's stages as rows (the narrow layout's stand-in for the wide columns).
fn render_stage_latencies(o: &mut Out, r: &Summary) {
    for dir in [Dir::Rx, Dir::Tx] {
        let mut rows = Vec::new();
        for q in r.queues.iter().filter(|q| q.dir == dir) {
            for name in dir.stage_names() {
                if let Some(s) = q.stage(name) {
                    rows.push(vec![
                        q.queue.to_string(),
                        name.to_string(),
                        s.count.to_string(),
                        fmt_ns(s.p50_ns),
                        fmt_ns(s.p99_ns),
                        fmt_ns(Some(s.max_ns)),
                    ]);
                }
            }
        }
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            o,
            "\n{} stage latencies · {}",
            dir.as_str().to_uppercase(),
            r.tiers.stages.kind
        );
        let header: Vec<String> = ["queue", "stage", "timed", "p50", "p99", "max"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        table(o, 2, &header, &rows, &[1]);
    }
}

/// The top flows by bytes, with their error bounds when they are estimated.
fn render_flows(o: &mut Out, r: &Summary, opt: &TextOptions) {
    let _ = writeln!(
        o,
        "\nFlows, top {} by bytes · {}",
        opt.top_flows.min(r.flows.len()),
        if r.tiers.flows.kind == "exact" {
            "exact"
        } else {
            "estimated, ± at 95%"
        }
    );
    if r.flows.is_empty() {
        let _ = writeln!(o, "  none");
    } else {
        let estimated = r.tiers.flows.kind != "exact";
        let rows: Vec<Vec<String>> = r
            .flows
            .iter()
            .take(opt.top_flows)
            .map(|f| {
                let q = match (f.rx_queue, f.tx_queue) {
                    (Some(q), _) => qname("rx", q),
                    (_, Some(q)) => qname("tx", q),
                    _ => "-".into(),
                };
                let mut row = vec![
                    f.dir.to_string(),
                    f.proto.clone(),
                    format!("{}:{} -> {}:{}", f.src, f.sport, f.dst, f.dport),
                    q,
                    fmt_count(f.packets as f64),
                    fmt_bytes(f.bytes as f64),
                ];
                if estimated {
                    row.push(match (&f.source, f.bytes_error) {
                        (Some(src), _) => src.clone(),
                        (None, None) => "-".into(),
                        (None, Some(e)) => {
                            format!("±{:.1}%", 100.0 * e as f64 / f.bytes.max(1) as f64)
                        }
                    });
                    row.push(f.samples.map_or_else(|| "-".into(), |s| s.to_string()));
                }
                row
            })
            .collect();
        let mut header: Vec<String> = ["dir", "proto", "endpoints", "queue", "packets", "bytes"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if estimated {
            header.extend(["±95%".to_string(), "skbs".to_string()]);
        }
        table(o, 2, &header, &rows, &[0, 1, 2, 3]);
        if r.flows.len() > opt.top_flows {
            let _ = writeln!(
                o,
                "  and {} more: see --json",
                r.flows.len() - opt.top_flows
            );
        }
    }
    overflow_lines(o, &r.flow_overflow);
}

/// How many packet records arrived and how many in-flight states ended unseen: what
/// bounds the stage and life figures.
fn render_events(o: &mut Out, r: &Summary) {
    let m = &r.meta;
    let e = &r.events;
    let _ = writeln!(
        o,
        "\nPacket records and in-flight states · {}",
        r.tiers.records.kind
    );
    wrapped(
        o,
        "  ",
        &format!(
            "{} packet records sent{}, {} lost in the ring buffer{}",
            e.sampled,
            m.sample_every
                .map(|v| format!(", 1 in {v} packets"))
                .unwrap_or_default(),
            e.lost,
            if e.queue_clamped > 0 {
                format!(
                    "; {} packets on queues past 63 counted on queue 63",
                    e.queue_clamped
                )
            } else {
                String::new()
            }
        ),
    );
    wrapped(
        o,
        "  ",
        &format!(
            "{} in-flight states evicted, {} found stale, {} still in flight when their window ended: packets timed to a point \
             and then lost; evicted when a newer packet took the state's slot before the free, stale when the free went unseen \
             because GRO merged or coalesced the skb, in flight when the hooks went off before the free (a stage longer than a \
             window's drain is timed only in lives that began early in the window)",
            e.state_evicted,
            e.state_stale,
            e.lives_unended.saturating_sub(e.state_evicted + e.state_stale)
        ),
    );
    if let Some(p) = e.frees_seen_pct.filter(|p| *p < FREES_SEEN_NOTE_PCT) {
        wrapped(
            o,
            "  note: ",
            &format!(
                "only {p:.0}% of tracked packets were seen freed. The kernel returns receive skbs freed on the CPU that allocated them \
                 to its NAPI skb cache, which no tracepoint reports, as usual when the reader runs on the softirq's CPU; the free-based \
                 stages, residence and in-flight estimates cover the traced frees only"
            ),
        );
    }
}

/// The drop total and its reasons on one line.
fn render_drops(o: &mut Out, r: &Summary) {
    let mut drops = r.drops.total.to_string();
    for d in &r.drops.reasons {
        let _ = write!(
            drops,
            "  {}={}",
            d.name
                .clone()
                .unwrap_or_else(|| format!("reason{}", d.reason)),
            d.count
        );
    }
    if !r.drops.reasons.is_empty() && r.meta.drop_counts.as_deref() == Some("windows") {
        drops.push_str(
            " (the reasons as counted in the detail windows; the total is estimated from them)",
        );
    }
    wrapped(o, "\nDrops: ", &drops);
}

fn render_counters(o: &mut Out, r: &Summary) {
    let c = &r.counters;
    // The platform line says why there is no DDIO when there is none: said once, below.
    match &c.absent_why {
        Some(_) => {
            let _ = writeln!(o, "\nSocket DDIO counters · {}", c.source);
        }
        None => {
            let _ = writeln!(
                o,
                "\nSocket DDIO counters · {}, platform {}",
                c.source, c.platform
            );
        }
    }
    let mbs = |v: Option<f64>| {
        v.map(|v| format!("{v:.0} MB/s"))
            .unwrap_or_else(|| "-".into())
    };
    match &c.absent_why {
        Some(why) => {
            wrapped(o, "  ", why);
            if let Some(next) = &c.next_step {
                wrapped(o, "  next: ", next);
            }
        }
        None => {
            for s in &c.sockets {
                let [w, pw, rd, iw, ir, dr, dw, l3] = socket_cells(s);
                wrapped(
                    o,
                    "  ",
                    &format!(
                        "socket {}: write miss {w}, partial {pw}; read miss {rd}; inbound write {iw}, read {ir}; DRAM read {dr}, write {dw}; L3 misses/s {l3}{}",
                        s.socket,
                        if s.write_allocation_disabled { "; DDIO WRITE ALLOCATION DISABLED" } else { "" }
                    ),
                );
            }
        }
    }
    if let Some(p) = &c.nic_port {
        wrapped(
            o,
            "  NIC port: ",
            &format!(
                "{}; inbound write {}, read {}",
                p.note,
                mbs(p.inbound_write_mbps),
                mbs(p.inbound_read_mbps)
            ),
        );
    }
    for st in &c.stacks {
        wrapped(
            o,
            "  ",
            &format!(
                "socket {} {}{}: inbound write {}, read {}{}",
                st.socket,
                st.stack,
                if st.nic { " (NIC)" } else { "" },
                mbs(st.inbound_write_mbps),
                mbs(st.inbound_read_mbps),
                st.perf_metrics
                    .as_ref()
                    .map_or(String::new(), |(w, r)| format!(" (perf stat -M {w},{r})"))
            ),
        );
    }
    for w in &c.warnings {
        wrapped(o, "  warning: ", w);
    }
}

fn render_misses(o: &mut Out, r: &Summary) {
    let l = &r.l3miss;
    let _ = writeln!(o, "\nL3-miss samples");
    wrapped(o, "  source: ", &l.source);
    if l.samples == 0 {
        let _ = writeln!(o, "  none recorded");
    } else {
        wrapped(
            o,
            "  ",
            &format!(
                "{} samples: {} on live packet buffers, hand-up to miss p50 {} p99 {}; {} elsewhere, {} without address; {} charged by CPU context, {} uncharged",
                l.samples,
                l.on_packet_buffers,
                fmt_ns(l.age_p50_ns),
                fmt_ns(l.age_p99_ns),
                l.other_addr,
                l.no_addr,
                l.ctx_charged,
                l.uncharged
            ),
        );
        if l.flow_charges_lost.is_some_and(|n| n > 0) || l.queue_clamped > 0 {
            wrapped(
                o,
                "  ",
                &format!(
                    "lost to the flow view: {} charged samples whose flow the flow map lost to LRU eviction; {} charged to a queue past the probes' table, counted on its last queue",
                    l.flow_charges_lost.unwrap_or(0),
                    l.queue_clamped
                ),
            );
        }
        match l.throttle.as_ref() {
            Some(t) if t.throttles > 0 => wrapped(
                o,
                "  ",
                &format!(
                    "sampler throttled by the kernel {} times, stopped {} in all{}{}: misses then went unsampled, none lost to stops in idle time, more than that share to stops in a burst",
                    t.throttles,
                    fmt_duration(t.stopped_ms * 1e6),
                    t.stopped_pct.map_or(String::new(), |p| format!(", {p:.2}% of its CPU time")),
                    if t.records_lost > 0 { format!("; approximate: {} throttle records lost", t.records_lost) } else { String::new() }
                ),
            ),
            Some(_) => {
                let _ = writeln!(o, "  sampler never throttled by the kernel");
            }
            None => {}
        }
        if let Some(why) = &l.throttle_unmeasured {
            wrapped(o, "  sampler throttling: ", why);
        }
        if let Some(a) = &l.age_split {
            let n = (a.within_life + a.after_life).max(1) as f64;
            wrapped(
                o,
                "  ",
                &format!(
                    "joined samples against their packets' life, hand-up to free p99 {}: {:.1}% within it, evicted before use; {:.1}% after it, late reuse",
                    fmt_ns(Some(a.life_p99_ns)),
                    100.0 * a.within_life as f64 / n,
                    100.0 * a.after_life as f64 / n
                ),
            );
        }
        if l.join_sample > 1 {
            wrapped(
                o,
                "  ",
                &format!(
                    "join on 1 in {} buffer pages, --join-sample: {} samples on other pages, not looked up, charged by CPU context where it applies",
                    l.join_sample, l.out_of_subset
                ),
            );
        }
        if l.duty > 1 {
            let ms = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |v| fmt_duration(v * 1e6));
            wrapped(
                o,
                "  ",
                &format!(
                    "attribution in windows, --duty {}: sampler {} of every {} after a {} warm-up, at a random place, the period divided by {} inside; it ran {}{}; {} joined samples on pages last seen before their window: owner from then, age unknown",
                    l.duty,
                    ms(l.window_ms),
                    ms(l.cycle_ms),
                    ms(l.warmup_ms),
                    l.duty,
                    l.sampled_ms.map_or_else(|| "for an unmeasured time".to_string(), |v| fmt_duration(v * 1e6)),
                    l.duty_measured.map_or(String::new(), |d| format!(", 1/{d:.2} of the recording: estimates scale by that")),
                    l.before_window
                ),
            );
        }
        for q in &l.queues {
            let _ = writeln!(
                o,
                "  {}: {} by address, {} by CPU context",
                qname(q.dir, q.queue),
                q.addr_join,
                q.cpu_ctx
            );
        }
    }
    if l.buffer_map.capacity.is_some() {
        let (b, p) = (&l.buffer_map, &l.buffer_map.pages);
        let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        wrapped(o, "  buffer join: ", &l.buffer_join);
        wrapped(
            o,
            "  buffer-page map: ",
            &format!(
                "{} linear and {} frag pages written; frags left out: {} past the cap, {} without a page, {} without an address layout; {} pages past the per-packet cap; entries max {} last {} of {} slots, {} taken over",
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
            ),
        );
        if p.copy_linear_joined + p.copy_frag_joined > 0 {
            wrapped(
                o,
                "  copy stand-in: ",
                &format!(
                    "{} joined samples drawn from linear data, {} from page frags",
                    p.copy_linear_joined, p.copy_frag_joined
                ),
            );
        }
    }
}

/// What the attribution's numbers are, for its column header and the answer.
fn attribution_unit(a: &AttributionReport) -> &'static str {
    let at = &a.chosen;
    if at.counts_are_samples {
        "samples"
    } else if at.method == Method::ModelPrior {
        "predicted misses/s"
    } else {
        "misses/s"
    }
}

/// The attributed misses: every queue, and the first `top_flows` flows.
pub fn render_attribution(o: &mut Out, a: &AttributionReport, duration_s: f64, top_flows: usize) {
    let at = &a.chosen;
    let _ = writeln!(
        o,
        "\nAttribution · {}, {} confidence",
        at.method, at.confidence
    );
    let unit = attribution_unit(a);
    let per = |m: f64| {
        if at.counts_are_samples {
            format!("{m:.0}")
        } else {
            fmt_count(m / duration_s.max(1e-9))
        }
    };
    if !at.queues.is_empty() {
        let rows: Vec<Vec<String>> = at
            .queues
            .iter()
            .map(|q| {
                vec![
                    qname(&q.dir, q.queue),
                    format!("{:.1}%", q.share_pct),
                    q.ci_pct
                        .map_or_else(String::new, |(lo, hi)| format!("{lo:.0}–{hi:.0}%")),
                    per(q.misses),
                ]
            })
            .collect();
        let header: Vec<String> = ["queue", "share", "95% interval", unit]
            .iter()
            .map(|s| s.to_string())
            .collect();
        table(o, 2, &header, &rows, &[0]);
    }
    if !at.flows.is_empty() {
        let rows: Vec<Vec<String>> = at
            .flows
            .iter()
            .take(top_flows)
            .map(|f| {
                vec![
                    format!("{} {}:{} -> {}:{}", f.proto, f.src, f.sport, f.dst, f.dport),
                    format!("{:.1}%", f.share_pct),
                    per(f.misses),
                ]
            })
            .collect();
        let header: Vec<String> = ["flow", "share", unit]
            .iter()
            .map(|s| s.to_string())
            .collect();
        table(o, 2, &header, &rows, &[0]);
        if at.flows.len() > top_flows {
            let _ = writeln!(o, "  and {} more flows", at.flows.len() - top_flows);
        }
    }
    for n in &at.notes {
        wrapped(o, "  note: ", n);
    }
    if !a.not_used.is_empty() {
        wrapped(o, "  not available: ", &a.not_used.join("; "));
    }
}

/// The DDIO model's capacity line and its notes.
fn render_model_notes(o: &mut Out, a: &Advice) {
    let g = &a.geometry;
    let _ = writeln!(o, "\nDDIO model · model-only prediction");
    wrapped(
        o,
        "  ",
        &format!(
            "LLC {}, {} ways; DDIO {} ways, {}: {} nominal, {} usable",
            fmt_bytes(g.size_bytes as f64),
            g.ways,
            g.ddio_ways,
            a.ddio_ways_note,
            fmt_bytes(a.model.ddio_capacity_bytes as f64),
            fmt_bytes(a.model.usable_ddio_bytes as f64)
        ),
    );
    for (head, text) in model_input_lines(&a.model_inputs, a.calibration.as_ref()) {
        wrapped(o, &format!("  {head}"), &text);
    }
    if let Some(line) = dram_words(&a.model) {
        wrapped(o, "  DRAM          ", &line);
    }
    for n in &a.notes {
        wrapped(o, "  note: ", n);
    }
}

/// The recommendations with their evidence, or why there are none.
fn render_recommendations(o: &mut Out, a: &Advice) {
    let _ = writeln!(
        o,
        "\nRecommendations · commands to run yourself; nothing is applied"
    );
    if a.recommendations.is_empty() {
        if let Some(n) = &a.no_change {
            for r in &n.reasons {
                wrapped(o, "  none: ", r);
            }
            for s in &n.next_steps {
                wrapped(o, "  next: ", s);
            }
        }
    }
    for r in &a.recommendations {
        wrapped(o, &format!("  [{}] ", r.kind), &r.target);
        if let Some(why) = &r.reason {
            wrapped(o, "      for ", why);
        }
        for line in r.command.lines() {
            command(o, "      $ ", line);
        }
        for e in &r.evidence {
            wrapped(o, "      · ", e);
        }
        if let (Some(b), Some(af)) = (r.predicted_before, r.predicted_after) {
            let _ = writeln!(
                o,
                "      predicted {}: {b:.1} → {af:.1}",
                r.predicted_metric.as_deref().unwrap_or("hit %")
            );
        }
    }
}

/// `recommend`: the answer, the verdicts, the model and the recommendations; the attribution
/// as one line (`report` shows all of it).
pub fn render_advice(summary: &Summary, a: &Advice, width: usize) -> String {
    let mut o = Out::new(width);
    render_header(&mut o, summary);
    let _ = writeln!(o);
    render_answer(
        &mut o,
        &crate::analysis::answer::answer_for_advice(summary, a),
        &a.verdicts,
    );
    render_verdicts(&mut o, &a.verdicts);
    render_model_notes(&mut o, a);
    render_recommendations(&mut o, a);
    let at = &a.attribution.chosen;
    let shares: Vec<String> = at
        .queues
        .iter()
        .filter(|q| q.share_pct > 0.0)
        .map(|q| format!("{} {:.1}%", qname(&q.dir, q.queue), q.share_pct))
        .collect();
    wrapped(
        &mut o,
        "\nAttribution: ",
        &format!(
            "{}, {} confidence{}; `ddioscope report` shows every queue, flow and note",
            at.method,
            at.confidence,
            if shares.is_empty() {
                String::new()
            } else {
                format!(": {}", shares.join(", "))
            }
        ),
    );
    o.into_string()
}

/// `report`: the answer, the verdicts, the evidence, the attribution and the model, or why
/// there is no model.
pub fn render_report(summary: &Summary, outcome: &Outcome, opt: &TextOptions) -> String {
    let mut o = Out::new(opt.width);
    render_header(&mut o, summary);
    if let Some(ex) = &summary.filter {
        wrapped(&mut o, "", &ex.line());
        for n in &ex.notes {
            wrapped(&mut o, "  note: ", n);
        }
    }
    let _ = writeln!(o);
    let answer = crate::analysis::answer::answer(summary, outcome);
    match outcome {
        Outcome::Advised(a) => {
            render_answer(&mut o, &answer, &a.verdicts);
            render_verdicts(&mut o, &a.verdicts);
            render_evidence(&mut o, summary, opt);
            render_attribution(
                &mut o,
                &a.attribution,
                summary.meta.duration_s,
                opt.top_flows,
            );
            render_model_notes(&mut o, a);
            render_recommendations(&mut o, a);
        }
        Outcome::NoModel { why, attribution } => {
            render_answer(&mut o, &answer, &[]);
            render_evidence(&mut o, summary, opt);
            render_attribution(&mut o, attribution, summary.meta.duration_s, opt.top_flows);
            wrapped(&mut o, "\nDDIO model: ", &format!("not available: {why}"));
        }
    }
    o.into_string()
}

/// `simulate`: the what-if grid as a table.
pub fn render_what_if(grid: &[GridPoint], width: usize) -> String {
    let mut o = Out::new(width);
    let _ = writeln!(o, "model-only prediction: simulated, not measured");
    let header: Vec<String> = [
        "ring",
        "ways",
        "mask",
        "q",
        "pkt B",
        "footprint",
        "DDIO cap",
        "verdict",
        "wr hit",
        "CPU hit",
        "NIC hit",
        "DRAM rd",
        "DRAM wr",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rows: Vec<Vec<String>> = grid
        .iter()
        .map(|p| {
            vec![
                p.ring.to_string(),
                p.ddio_ways.to_string(),
                format!("{:#x}", p.ddio_mask),
                p.queues.to_string(),
                p.pkt_bytes.to_string(),
                fmt_bytes(p.footprint_bytes as f64),
                fmt_bytes(p.ddio_capacity_bytes as f64),
                p.verdict.to_string(),
                fmt_pct(p.io_write_hit_pct),
                fmt_pct(p.cpu_read_hit_pct),
                fmt_pct(p.io_read_hit_pct),
                fmt_gbps(p.dram_read_gbps),
                fmt_gbps(p.dram_write_gbps),
            ]
        })
        .collect();
    table(&mut o, 0, &header, &rows, &[]);
    // The headers are short so that thirteen columns fit a terminal: the legend says them whole.
    wrapped(
        &mut o,
        "",
        "q: RX queues; wr hit: the NIC's DMA writes that find their line in the LLC; CPU hit and \
         NIC hit: the CPU's reads of the packets and the NIC's reads (TX) that hit the LLC; DRAM \
         rd and wr: the GB/s of memory reads and writes the packets cause",
    );
    o.into_string()
}

/// A modelled bandwidth in GB/s, "-" where there is none.
fn fmt_gbps(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// A synthetic spec's inputs: the keys given, and every other input with its default, so
/// the output says which numbers the user chose and which the model assumed.
pub fn render_spec_inputs(spec: &crate::analysis::SimSpec, given: &[String]) -> String {
    let inputs = spec.inputs();
    let pick = |g: bool| {
        inputs
            .iter()
            .filter(|i| given.iter().any(|k| k == &i.name) == g)
            .map(|i| format!("{} {}", i.name, i.value))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut o = String::new();
    let _ = writeln!(o, "model inputs  given: {}", pick(true));
    let _ = writeln!(o, "              assumed: {}", pick(false));
    if let Some(rule) = spec.layout_rule() {
        let _ = writeln!(o, "buffer layout {rule}");
    }
    o
}

/// The model's inputs, measured ones first, and its calibration, as (head, text) lines.
fn model_input_lines(
    inputs: &[Input],
    cal: Option<&crate::advise::CalibrationReport>,
) -> [(&'static str, String); 3] {
    let list = |src: InputSource| {
        inputs
            .iter()
            .filter(|i| i.source == src)
            .map(|i| format!("{} {}", i.name, i.value))
            .collect::<Vec<_>>()
            .join(", ")
    };
    [
        (
            "model inputs  ",
            format!("measured: {}", list(InputSource::Measured)),
        ),
        (
            "              ",
            format!("assumed: {}", list(InputSource::Assumed)),
        ),
        ("calibration   ", calibration_words(cal)),
    ]
}

/// The model's inputs, measured ones first, and its calibration: what a prediction rests on
/// (`simulate` prints them above its grid).
pub fn render_model_inputs(
    inputs: &[Input],
    cal: Option<&crate::advise::CalibrationReport>,
    width: usize,
) -> String {
    let mut o = Out::new(width);
    for (head, text) in model_input_lines(inputs, cal) {
        wrapped(&mut o, head, &text);
    }
    o.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command too long for the line is broken between words, each line but the last
    /// ending in ` \\`: pasted, the shell reads one command.
    #[test]
    fn long_commands_break_between_words_and_paste_as_one() {
        let cmd = "ip netns exec ddio-htmlfx-rcv ethtool -X ddrcv equal 4 hfunc toeplitz";
        let mut o = Out::new(MIN_WIDTH);
        command(&mut o, "      $ ", cmd);
        let lines: Vec<&str> = o.lines().collect();
        assert!(lines.len() > 1, "{lines:?}");
        assert!(
            lines.iter().all(|l| l.chars().count() <= MIN_WIDTH),
            "{lines:?}"
        );
        assert!(lines[..lines.len() - 1].iter().all(|l| l.ends_with(" \\")));
        let words: Vec<&str> = lines
            .iter()
            .flat_map(|l| l.split_whitespace())
            .filter(|w| !matches!(*w, "$" | "\\"))
            .collect();
        assert_eq!(words.join(" "), cmd);
        // The width never goes below MIN_WIDTH.
        assert_eq!(Out::new(10).width, MIN_WIDTH);
    }

    /// A table wider than the line closes up to one space between its columns.
    #[test]
    fn tables_close_up_before_they_overflow() {
        let header: Vec<String> = ["queue", "packets", "pkt/s", "Mbit/s", "avg B", "drops"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let rows = vec![["0", "627.8k", "209.3k", "2530.9", "1512", "3082"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()];
        let widest = |width| {
            let mut o = Out::new(width);
            table(&mut o, 2, &header, &rows, &[]);
            o.lines().map(|l| l.chars().count()).max().unwrap_or(0)
        };
        // Cells 5+7+6+6+5+5 = 34, indent 2: 46 with two spaces, 41 with one.
        assert_eq!(widest(100), 46);
        assert_eq!(widest(MIN_WIDTH + 4), 41);
    }
}
