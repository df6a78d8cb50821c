//! `ddioscope report --html`: one self-contained page (inline CSS and SVG, no script, nothing
//! fetched) with the report's tables, per-queue stage latency histograms, rates and miss ratios
//! over time, the simulator's what-if curves and recommendation cards.
//!
//! The page draws what `analysis` computed (the summary, the outcome and the charts' series);
//! it reads no recording and runs no model. The charts come from `svg`.
use std::fmt::Write as _;

use super::svg::{
    count_axis, esc, hist_chart, legend, line_chart, time_axis, Axis, Series, PALETTE,
};
use super::words::socket_cells;
use super::words::{
    calibration_words, dram_words, leaking_line, qname, queue_cells, queue_columns,
};
use crate::advise::Recommendation;
use crate::analysis::answer::{Answer, NoChange, QueueVerdict};
use crate::analysis::charts::{Charts, QueueRates};
use crate::analysis::{AttributionReport, GridPoint, Outcome, StoppedBy, Summary};
use crate::snapshot::{Dir, QueueCounters};
use crate::units::{fmt_bytes, fmt_count, fmt_duration, fmt_ns, fmt_pct};

const TOP_FLOWS: usize = 20;

/// The page for `report`'s summary and outcome, with the series and what-if curves
/// `analysis::charts` computed for them.
pub fn render_html(report: &Summary, outcome: &Outcome, charts: &Charts) -> String {
    let mut o = String::with_capacity(256 * 1024);
    let m = &report.meta;
    let answer = crate::analysis::answer::answer(report, outcome);
    let (verdicts, attribution, recs, no_change): (
        &[QueueVerdict],
        &AttributionReport,
        &[Recommendation],
        Option<&NoChange>,
    ) = match outcome {
        Outcome::Advised(a) => (
            &a.verdicts,
            &a.attribution,
            &a.recommendations,
            answer.no_change.as_ref(),
        ),
        Outcome::NoModel { attribution, .. } => (&[], attribution, &[], answer.no_change.as_ref()),
    };
    let _ = writeln!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>ddioscope report — {}</title>\n<style>{CSS}</style>\n</head>\n<body>",
        esc(&m.iface)
    );
    header(&mut o, report);
    if let Some(ex) = &report.filter {
        let _ = writeln!(o, "<p class=\"note\" id=\"filter\">{}</p>", esc(&ex.line()));
        for n in &ex.notes {
            let _ = writeln!(o, "<p class=\"note\">note: {}</p>", esc(n));
        }
    }
    let _ = writeln!(
        o,
        "<nav><a href=\"#answer\">Answer</a><a href=\"#verdicts\">Verdicts</a><a href=\"#attribution\">Attribution</a>\
         <a href=\"#recommendations\">Recommendations</a><a href=\"#whatif\">What-if</a><a href=\"#evidence\">Evidence</a>\
         <a href=\"#queues\">Queues</a><a href=\"#latency\">Latency</a><a href=\"#rates\">Rates</a><a href=\"#counters\">Counters</a>\
         <a href=\"#flows\">Flows</a><a href=\"#events\">Events</a></nav>\n<main>"
    );
    answer_section(&mut o, &answer, verdicts);
    verdicts_section(&mut o, verdicts);
    attribution_section(&mut o, attribution, report.meta.duration_s);
    recommendations_section(&mut o, recs, no_change);
    whatif_section(&mut o, charts);
    provenance_section(&mut o, report);
    queue_tables(&mut o, report);
    latency_section(&mut o, report);
    rates_section(&mut o, charts, report);
    counters_section(&mut o, charts, report);
    flows_section(&mut o, report);
    events_section(&mut o, report);
    let _ = writeln!(
        o,
        "</main>\n<footer>ddioscope {} · from {} · self-contained: no scripts, nothing loaded from the network</footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION"),
        esc(&m.file)
    );
    o
}

/// Words that begin a command in the answer's and the recommendations' sentences.
const COMMAND_WORDS: [&str; 8] = [
    "ddioscope",
    "ethtool",
    "ip",
    "sudo",
    "echo",
    "sysctl",
    "taskset",
    "wrmsr",
];

/// A command in code font, broken only between its words: each word is kept whole, so a
/// narrow screen never splits a flag at its hyphen (`--llc-` / `mib`).
fn code(cmd: &str) -> String {
    cmd.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let words: Vec<String> = line
                .split_whitespace()
                .map(|w| format!("<span class=\"w\">{}</span>", esc(w)))
                .collect();
            format!("<code class=\"cmd\">{}</code>", words.join(" "))
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

/// A sentence with the commands in it in code font: a command starts at a command word (or
/// a script path, or a flag) and runs to a word that ends the clause (`,` or `;`) or to the
/// end.
fn with_commands(text: &str) -> String {
    let starts =
        |w: &str| COMMAND_WORDS.contains(&w) || w.starts_with("scripts/") || w.starts_with("--");
    let words: Vec<&str> = text.split(' ').collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if !starts(words[i]) {
            out.push(esc(words[i]));
            i += 1;
            continue;
        }
        let mut j = i;
        while j + 1 < words.len() && !words[j].ends_with([',', ';']) {
            j += 1;
        }
        let mut cmd = words[i..=j].join(" ");
        let tail = match cmd.pop() {
            Some(c @ (',' | ';')) => c.to_string(),
            Some(c) => {
                cmd.push(c);
                String::new()
            }
            None => String::new(),
        };
        out.push(format!("{}{tail}", code(&cmd)));
        i = j + 1;
    }
    out.join(" ")
}

/// The answer first: what leaks, how sure, what to change (the same words as the text report).
fn answer_section(o: &mut String, a: &Answer, verdicts: &[QueueVerdict]) {
    let _ = writeln!(
        o,
        "<section id=\"answer\">\n<h2>Answer</h2>\n<dl class=\"meta answer\">"
    );
    if let Some(d) = &a.ddio {
        let _ = write!(o, "<dt>DDIO</dt><dd id=\"answer-ddio\">{}</dd>", esc(d));
    }
    let reason = |d: Dir, q: u32| {
        verdicts
            .iter()
            .find(|v| v.dir == d && v.queue == q)
            .map(|v| v.reason.clone())
            .unwrap_or_default()
    };
    let leaking = if let Some(why) = &a.model_unavailable {
        format!("unknown: the DDIO model could not run: {}", esc(why))
    } else if a.leaking.is_empty() {
        if a.unknown > 0 {
            format!("none known; {} queues have no verdict", a.unknown)
        } else {
            "none: every modelled queue fits".into()
        }
    } else {
        let f = &a.leaking[0];
        // The text report's words, each queue marked for tools and tests.
        let mark =
            |d: Dir, q: u32| format!("<b class=\"leak\" data-queue=\"{0}\">{0}</b>", qname(d, q));
        leaking_line(a, &esc(&reason(f.dir, f.queue)), mark)
    };
    let _ = write!(
        o,
        "<dt>{}</dt><dd id=\"answer-leaking\">{leaking}</dd>",
        super::words::leaking_label(a)
    );
    let shares: Vec<String> = a
        .leaking
        .iter()
        .filter_map(|l| {
            l.share_pct
                .map(|s| format!("{} {s:.1}%", qname(l.dir, l.queue)))
        })
        .collect();
    if !shares.is_empty() {
        let of = if a.method == crate::attribution::Method::ModelPrior {
            "of the predicted misses"
        } else {
            "of the attributed misses"
        };
        let _ = write!(o, "<dt>Misses</dt><dd>{} {of}</dd>", shares.join(", "));
    }
    if !a.top_flows.is_empty() {
        let f: Vec<String> = a
            .top_flows
            .iter()
            .map(|f| {
                esc(&format!(
                    "{} {}:{} -> {}:{} {:.1}%",
                    f.proto, f.src, f.sport, f.dst, f.dport, f.share_pct
                ))
            })
            .collect();
        let _ = write!(o, "<dt>Flows</dt><dd>{}</dd>", f.join("; "));
    }
    let _ = write!(
        o,
        "<dt>How sure</dt><dd id=\"answer-confidence\"><b data-method=\"{m}\" data-confidence=\"{c}\">{c} confidence, {m}</b>: {}</dd>",
        esc(&a.evidence),
        m = a.method,
        c = a.confidence
    );
    if a.changes.is_empty() {
        let why = a
            .no_change
            .as_ref()
            .map_or_else(String::new, |n| n.reasons.join("; "));
        let _ = write!(
            o,
            "<dt>Change</dt><dd id=\"answer-change\">nothing to run: {}</dd>",
            esc(&why)
        );
    } else {
        o.push_str("<dt>Change</dt><dd id=\"answer-change\"><ul>");
        for c in &a.changes {
            let pred = match (c.predicted_before, c.predicted_after) {
                (Some(b), Some(af)) => format!(
                    " <span class=\"pred\">predicted {}: {b:.1}% → {af:.1}%</span>",
                    esc(c.predicted_metric.as_deref().unwrap_or("hit rate"))
                ),
                _ => String::new(),
            };
            let why = c
                .reason
                .as_ref()
                .map(|r| format!("for {}: ", esc(r)))
                .unwrap_or_default();
            let pred = if c.reason.is_some() {
                String::new()
            } else {
                pred
            };
            if c.command.is_empty() {
                let _ = write!(
                    o,
                    "<li>{why}{} {}: no single command, see its evidence{pred}</li>",
                    c.kind,
                    esc(&c.target)
                );
            } else {
                let _ = write!(o, "<li>{why}{}{pred}</li>", code(&c.command));
            }
        }
        o.push_str("</ul></dd>");
    }
    if let Some(n) = &a.no_change {
        for s in &n.next_steps {
            let _ = write!(o, "<dt>Next</dt><dd>{}</dd>", with_commands(s));
        }
    }
    o.push_str("</dl>\n</section>\n");
}

/// Each modelled queue's verdict, with its reason once for each run of rows that share it.
fn verdicts_section(o: &mut String, verdicts: &[QueueVerdict]) {
    let _ = writeln!(
        o,
        "<section id=\"verdicts\">\n<h2>Per-queue verdicts <span class=\"badge model\">model-only prediction</span></h2>"
    );
    if verdicts.is_empty() {
        let _ = writeln!(o, "<p class=\"note\">No verdicts: the DDIO model did not run on this recording.</p>\n</section>");
        return;
    }
    o.push_str(
        "<div class=\"scroll\"><table class=\"num\" id=\"verdicts-table\"><thead><tr><th class=\"l\">queue</th><th class=\"l\">verdict</th>\
         <th>ring needs</th><th>in flight</th><th>write hit</th><th>read hit</th><th>copy read miss</th><th>DRAM read GB/s</th><th>DRAM write GB/s</th><th class=\"l\">why</th></tr></thead><tbody>\n",
    );
    for (i, v) in verdicts.iter().enumerate() {
        let why = if i > 0 && verdicts[i - 1].reason == v.reason {
            String::new()
        } else {
            let rows = verdicts[i..]
                .iter()
                .take_while(|w| w.reason == v.reason)
                .count();
            format!(
                "<td class=\"l why\" rowspan=\"{rows}\">{}</td>",
                esc(&v.reason)
            )
        };
        let _ = writeln!(
            o,
            "<tr><td class=\"l\">{}</td><td class=\"l v-{v}\">{v}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{why}</tr>",
            qname(v.dir, v.queue),
            v.footprint_bytes.map_or_else(|| "-".into(), |b| fmt_bytes(b as f64)),
            v.inflight_bytes.map_or_else(|| "-".into(), fmt_bytes),
            fmt_pct(v.predicted_write_hit_pct),
            fmt_pct(v.predicted_read_hit_pct),
            fmt_pct(v.predicted_cpu_read_miss_pct),
            v.predicted_dram_read_gbps.map_or_else(|| "-".into(), |g| format!("{g:.2}")),
            v.predicted_dram_write_gbps.map_or_else(|| "-".into(), |g| format!("{g:.2}")),
            v = v.verdict,
        );
    }
    o.push_str("</tbody></table></div>\n</section>\n");
}

/// The attributed misses per queue and flow, with the notes that qualify them.
fn attribution_section(o: &mut String, a: &AttributionReport, duration_s: f64) {
    let at = &a.chosen;
    let _ = writeln!(
        o,
        "<section id=\"attribution\">\n<h2>Attribution <span class=\"badge{}\">{}, {} confidence</span></h2>",
        if at.method == crate::attribution::Method::ModelPrior { " model" } else { "" },
        at.method,
        at.confidence
    );
    let unit = if at.counts_are_samples {
        "samples"
    } else if at.method == crate::attribution::Method::ModelPrior {
        "predicted misses/s"
    } else {
        "misses/s"
    };
    let per = |m: f64| {
        if at.counts_are_samples {
            format!("{m:.0}")
        } else {
            fmt_count(m / duration_s.max(1e-9))
        }
    };
    if at.queues.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"note\">No shares: no method has evidence enough.</p>"
        );
    } else {
        let _ = writeln!(
            o,
            "<table class=\"num\" id=\"attribution-queues\"><thead><tr><th class=\"l\">queue</th><th>share</th><th>95% interval</th><th>{unit}</th></tr></thead><tbody>"
        );
        for q in &at.queues {
            let _ = writeln!(
                o,
                "<tr><td class=\"l\">{}</td><td>{:.1}%</td><td>{}</td><td>{}</td></tr>",
                qname(&q.dir, q.queue),
                q.share_pct,
                q.ci_pct
                    .map_or_else(String::new, |(lo, hi)| format!("{lo:.0}–{hi:.0}%")),
                per(q.misses)
            );
        }
        o.push_str("</tbody></table>\n");
    }
    if !at.flows.is_empty() {
        let _ = writeln!(
            o,
            "<table class=\"num\" id=\"attribution-flows\"><thead><tr><th class=\"l\">flow</th><th>share</th><th>{unit}</th></tr></thead><tbody>"
        );
        for f in at.flows.iter().take(TOP_FLOWS) {
            let _ = writeln!(
                o,
                "<tr><td class=\"l\">{}</td><td>{:.1}%</td><td>{}</td></tr>",
                esc(&format!(
                    "{} {}:{} -> {}:{}",
                    f.proto, f.src, f.sport, f.dst, f.dport
                )),
                f.share_pct,
                per(f.misses)
            );
        }
        o.push_str("</tbody></table>\n");
    }
    for n in &at.notes {
        let _ = writeln!(o, "<p class=\"note\">{}</p>", esc(n));
    }
    if !a.not_used.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"note\">Not available: {}</p>",
            esc(&a.not_used.join("; "))
        );
    }
    o.push_str("</section>\n");
}

/// Where each kind of number comes from.
fn provenance_section(o: &mut String, r: &Summary) {
    let t = &r.tiers;
    let _ = writeln!(o, "<section id=\"evidence\">\n<h2>Evidence: where the numbers come from</h2>\n<dl class=\"meta\" id=\"tiers\">");
    for (k, p) in [
        ("Counts", &t.counts),
        ("Flows", &t.flows),
        ("Stages", &t.stages),
        ("Records", &t.records),
    ] {
        let _ = write!(
            o,
            "<dt>{k}</dt><dd data-kind=\"{}\">{}</dd>",
            p.kind,
            esc(&p.text)
        );
    }
    o.push_str("</dl>\n");
    host_details(o, r);
    o.push_str("</section>\n");
}

fn header(o: &mut String, r: &Summary) {
    let m = &r.meta;
    let status = if m.complete {
        match m.stopped_by {
            Some(
                s @ (StoppedBy::DeviceRemoved
                | StoppedBy::DeviceMoved
                | StoppedBy::NetnsDeleted
                | StoppedBy::DiskFull),
            ) => {
                format!("<span class=\"badge ok\">complete</span> {}", s.describe())
            }
            _ => "<span class=\"badge ok\">complete</span>".to_string(),
        }
    } else {
        "<span class=\"badge bad\">INCOMPLETE: the recording was cut off; numbers cover the intervals written before that</span>".to_string()
    };
    let w = &r.window;
    let window = if w.whole {
        String::new()
    } else {
        format!(
            " · <span class=\"badge\" id=\"window\">window {} to {} from the start</span>",
            fmt_duration(w.from_s * 1e9),
            fmt_duration(w.to_s * 1e9)
        )
    };
    let _ = writeln!(
        o,
        "<header id=\"summary\">\n<h1>ddioscope report — {}{}</h1>\n<p class=\"sub\">{} · {} · {} in {} intervals{}{window}</p>\n</header>",
        esc(&m.iface),
        m.netns.as_deref().map(|n| format!(" <small>@ netns {}</small>", esc(n))).unwrap_or_default(),
        esc(m.driver.as_deref().unwrap_or("unknown driver")),
        status,
        fmt_duration(m.duration_s * 1e9),
        m.intervals,
        m.interval_ms.map(|v| format!(" of {v} ms")).unwrap_or_default(),
    );
}

/// The host, the device and the hooks: the recording's metadata, with the evidence.
fn host_details(o: &mut String, r: &Summary) {
    let m = &r.meta;
    let _ = write!(o, "<dl class=\"meta\" id=\"host\">");
    let llc = m
        .llc_bytes
        .map(|b| format!("{}, {} ways", fmt_bytes(b as f64), m.llc_ways.unwrap_or(0)))
        .unwrap_or_else(|| "unknown".into());
    let rows: [(&str, String); 8] = [
        ("Interface", format!("{}, ifindex {}", m.iface, m.ifindex)),
        (
            "Namespace",
            m.netns.clone().unwrap_or_else(|| "the initial one".into()),
        ),
        (
            "Driver",
            m.driver.clone().unwrap_or_else(|| "unknown".into()),
        ),
        (
            "Queues",
            format!(
                "rx {} · tx {} · rings rx {} tx {} · {} · NIC NUMA node {}",
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
                },
                m.numa_node
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "unknown".into())
            ),
        ),
        ("Host", m.host.clone()),
        ("Kernel", m.kernel.clone()),
        (
            "CPU",
            if m.cpu_model.is_empty() {
                "unknown".into()
            } else {
                m.cpu_model.clone()
            },
        ),
        ("LLC", llc),
    ];
    for (k, v) in rows {
        let _ = write!(o, "<dt>{k}</dt><dd>{}</dd>", esc(&v));
    }
    let _ = write!(o, "<dt>Hooks</dt><dd class=\"chips\">");
    if let Some(why) = super::words::no_detail_hooks(r) {
        let _ = write!(o, "{}", esc(why));
    }
    for h in &m.hooks {
        let _ = write!(o, "<span class=\"chip\">{}</span>", esc(h));
    }
    for h in &m.hooks_missing {
        let _ = write!(
            o,
            "<span class=\"chip missing\" title=\"not attached\">{} ✗</span>",
            esc(h)
        );
    }
    let _ = writeln!(o, "</dd></dl>");
}

fn queue_tables(o: &mut String, r: &Summary) {
    let _ = writeln!(
        o,
        "<section id=\"queues\">\n<h2>Per-queue packets, rates and stage latencies</h2>"
    );
    let _ = writeln!(
        o,
        "<p class=\"note\">Counts: {}. Stages: {}.</p>",
        esc(&r.tiers.counts.text),
        esc(&r.tiers.stages.text)
    );
    for dir in [Dir::Rx, Dir::Tx] {
        let qs: Vec<_> = r.queues.iter().filter(|q| q.dir == dir).collect();
        let _ = writeln!(o, "<h3>{} queues</h3>", dir.as_str().to_uppercase());
        if qs.is_empty() {
            let _ = writeln!(o, "<p class=\"note\">None.</p>");
            continue;
        }
        let _ = write!(
            o,
            "<div class=\"scroll\"><table class=\"num\" id=\"queues-{}\"><thead><tr>",
            dir.as_str()
        );
        for c in queue_columns(dir, true) {
            // "driver_to_stack p50/p99/max" → name over a small unit line.
            match c.split_once(' ') {
                Some((name, unit)) if unit == "p50/p99/max" => {
                    let _ = write!(o, "<th>{}<br><small>{unit}</small></th>", esc(name));
                }
                _ => {
                    let _ = write!(o, "<th>{}</th>", esc(&c));
                }
            }
        }
        let _ = writeln!(o, "</tr></thead><tbody>");
        for q in qs {
            o.push_str(if q.packets == 0 {
                "<tr class=\"idle\">"
            } else {
                "<tr>"
            });
            for c in queue_cells(q, true) {
                let _ = write!(o, "<td>{}</td>", esc(&c));
            }
            o.push_str("</tr>\n");
        }
        o.push_str("</tbody></table></div>\n");
    }
    o.push_str("</section>\n");
}

/// The same queues the report lists (traffic or NAPI activity), with their histograms.
fn active_totals(r: &Summary) -> Vec<&QueueCounters> {
    r.totals
        .iter()
        .filter(|q| q.packets > 0 || q.napi_polls > 0)
        .collect()
}

fn latency_section(o: &mut String, r: &Summary) {
    let _ = writeln!(
        o,
        "<section id=\"latency\">\n<h2>Stage latency distributions</h2>\n<p class=\"note\">Log2 histograms of each \
         packet stage per queue (bucket [2<sup>b</sup>, 2<sup>b+1</sup>) ns); bar height is the share of the stage's \
         packets; dashed lines mark p50 and p99. Stages are described in docs/report.md.</p>"
    );
    let totals = active_totals(r);
    let mut charts = 0;
    for dir in [Dir::Rx, Dir::Tx] {
        let qs: Vec<&QueueCounters> = totals
            .iter()
            .copied()
            .filter(|q| q.dir == dir && q.stage_count.iter().any(|&c| c > 0))
            .collect();
        if qs.is_empty() {
            continue;
        }
        let _ = writeln!(
            o,
            "<h3>{}</h3>\n<div class=\"grid\">",
            dir.as_str().to_uppercase()
        );
        for q in qs {
            let qr = r
                .queues
                .iter()
                .find(|x| x.dir == q.dir && x.queue == q.queue);
            for (s, name) in dir.stage_names().iter().enumerate() {
                if q.stage_count[s] == 0 {
                    continue;
                }
                let st = qr.and_then(|x| x.stages.get(*name));
                let p50 = st.and_then(|v| v.p50_ns);
                let p99 = st.and_then(|v| v.p99_ns);
                let label = format!("{} q{} {}", dir.as_str(), q.queue, name);
                let _ = writeln!(
                    o,
                    "<figure class=\"card hist\" id=\"lat-{}-{}-{}\"><figcaption><b>{} q{}</b> {}<br><small>n={} · p50 {} · p99 {} · max {}</small></figcaption>{}</figure>",
                    dir.as_str(),
                    q.queue,
                    name,
                    dir.as_str(),
                    q.queue,
                    name,
                    fmt_count(q.stage_count[s] as f64),
                    fmt_ns(p50),
                    fmt_ns(p99),
                    fmt_ns(Some(q.stage_max_ns[s])),
                    hist_chart(&q.stage_hist[s], p50, p99, &label)
                );
                charts += 1;
            }
        }
        o.push_str("</div>\n");
    }
    if charts == 0 {
        let _ = writeln!(o, "<p class=\"note\">No stage latencies: no packet completed a traced stage in this recording.</p>");
    }
    o.push_str("</section>\n");
}

fn rates_section(o: &mut String, charts: &Charts, r: &Summary) {
    let _ = writeln!(o, "<section id=\"rates\">\n<h2>Packet rates over time</h2>");
    let per = charts.intervals_per_point;
    let mut any = false;
    o.push_str("<div class=\"grid two\">\n");
    for dir in [Dir::Rx, Dir::Tx] {
        let queues: Vec<&QueueRates> = charts.rates.iter().filter(|q| q.dir == dir).collect();
        if queues.is_empty() {
            continue;
        }
        any = true;
        let series: Vec<Series> = queues
            .iter()
            .enumerate()
            .map(|(i, q)| Series {
                name: format!("{} q{}", dir.as_str(), q.queue),
                color: PALETTE[i % PALETTE.len()],
                dashed: false,
                points: q.points.clone(),
            })
            .collect();
        let ymax = series
            .iter()
            .flat_map(|s| s.points.iter().flatten().map(|p| p.1))
            .fold(0.0, f64::max);
        let xmax = series
            .iter()
            .flat_map(|s| s.points.iter().flatten().map(|p| p.0))
            .fold(0.0, f64::max);
        let x = time_axis(xmax);
        let y = count_axis(ymax, "packets/s");
        let _ = writeln!(
            o,
            "<figure class=\"card\" id=\"rates-{}\"><figcaption><b>{} packets/s per queue</b>, per {}</figcaption>{}{}</figure>",
            dir.as_str(),
            dir.as_str().to_uppercase(),
            match r.meta.interval_ms {
                Some(ms) if per > 1 => format!("{} of {per} intervals of {ms} ms", fmt_duration((per * ms) as f64 * 1e6)),
                Some(ms) => format!("{ms} ms interval"),
                None => "interval".into(),
            },
            line_chart(&format!("{} packets per second per queue over time", dir.as_str()), &x, &y, &series, None),
            legend(&series)
        );
    }
    o.push_str("</div>\n");
    if !any {
        let _ = writeln!(o, "<p class=\"note\">No traffic was recorded.</p>");
    }
    o.push_str("</section>\n");
}

fn counters_section(o: &mut String, charts: &Charts, r: &Summary) {
    let c = &r.counters;
    let _ = writeln!(
        o,
        "<section id=\"counters\">\n<h2>Socket DDIO counters</h2>\n<p class=\"sub\">source: <b>{}</b> · platform {} · {} readings</p>",
        esc(&c.source),
        esc(&c.platform),
        c.readings
    );
    if let Some(why) = &c.absent_why {
        // Same words as the text report: why there are no DDIO numbers, and how to get them
        // where this host can.
        let _ = writeln!(
            o,
            "<p class=\"note\" id=\"counters-absent\">No miss ratios over time: {}.{}</p>",
            esc(why),
            c.next_step
                .as_ref()
                .map_or(String::new(), |n| format!("<br>Next: {}.", esc(n)))
        );
        for n in c.notes.iter().skip(1) {
            let _ = writeln!(o, "<p class=\"note\">{}</p>", esc(n));
        }
    } else {
        let _ = writeln!(
            o,
            "<table class=\"num\"><thead><tr><th>socket</th><th>write miss</th><th>partial write miss</th><th>read miss</th>\
             <th>inbound write MB/s</th><th>inbound read MB/s</th><th>DRAM read MB/s</th><th>DRAM write MB/s</th><th>L3 misses/s</th><th></th></tr></thead><tbody>"
        );
        for s in &c.sockets {
            let _ = write!(o, "<tr><td>{}</td>", s.socket);
            for cell in socket_cells(s) {
                let _ = write!(o, "<td>{}</td>", esc(&cell));
            }
            let _ = writeln!(
                o,
                "<td>{}</td></tr>",
                if s.write_allocation_disabled {
                    "<b class=\"bad\">DDIO write allocation disabled</b>"
                } else {
                    ""
                }
            );
        }
        o.push_str("</tbody></table>\n");
        let mut series = Vec::new();
        for (i, (sock, pts)) in charts.misses.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            series.push(Series {
                name: format!("socket {sock} write miss %"),
                color,
                dashed: false,
                points: pts.iter().map(|(t, w, _)| w.map(|w| (*t, w))).collect(),
            });
            series.push(Series {
                name: format!("socket {sock} read miss %"),
                color,
                dashed: true,
                points: pts.iter().map(|(t, _, rd)| rd.map(|rd| (*t, rd))).collect(),
            });
        }
        series.retain(|s| s.points.iter().any(Option::is_some));
        if series.is_empty() {
            let _ = writeln!(
                o,
                "<p class=\"note\" id=\"counters-absent\">No miss ratios over time: no single interval has enough TOR inserts \
                 (at least 1000) for a ratio; the totals above cover the whole run.</p>"
            );
        } else {
            let xmax = series
                .iter()
                .flat_map(|s| s.points.iter().flatten().map(|p| p.0))
                .fold(0.0, f64::max);
            let y = Axis {
                min: 0.0,
                max: 100.0,
                ticks: (0..=4)
                    .map(|i| (i as f64 * 25.0, format!("{}%", i * 25)))
                    .collect(),
                label: "miss %".into(),
            };
            let _ = writeln!(
                o,
                "<figure class=\"card wide\" id=\"miss-over-time\"><figcaption><b>DDIO miss ratios per interval</b> — solid: inbound \
                 full-line writes (ItoM) that missed the LLC; dashed: inbound reads (PCIRdCur) that missed</figcaption>{}{}</figure>",
                line_chart("miss ratios over time", &time_axis(xmax), &y, &series, None),
                legend(&series)
            );
        }
    }
    for w in &c.warnings {
        let _ = writeln!(o, "<p class=\"warn\">warning: {}</p>", esc(w));
    }
    o.push_str("</section>\n");
}

/// The what-if curves of the recording's one model computation, with the model's inputs and
/// what was measured of them, or why there are none.
fn whatif_section(o: &mut String, charts: &Charts) {
    let _ = writeln!(
        o,
        "<section id=\"whatif\">\n<h2>What-if: DDIO hit rate vs ring size and DDIO ways <span class=\"badge model\">model-only prediction</span></h2>\n\
         <p class=\"note\">Simulated by ddioscope's LLC model from the workload this recording observed — not measured. \
         <b>I/O write hit</b>: NIC writes that found or allocated their line in the LLC; <b>CPU read hit</b>: the copy found the packet still cached \
         (DDIO's benefit). Validation against published measurements: docs/model.md.</p>"
    );
    let wi = match &charts.what_if {
        Ok(w) => w,
        Err(why) => {
            let _ = writeln!(
                o,
                "<p class=\"note\" id=\"whatif-absent\">No prediction: {}.</p>\n</section>",
                esc(why)
            );
            return;
        }
    };
    o.push_str("<details open><summary>Model inputs</summary><dl class=\"meta\">");
    for (k, v) in &wi.inputs {
        let _ = write!(o, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
    }
    let _ = write!(
        o,
        "<dt>Calibration</dt><dd>{}</dd>",
        esc(&calibration_words(wi.calibration.as_ref()))
    );
    if let Some(d) = dram_words(&wi.model) {
        let _ = write!(o, "<dt>DRAM traffic</dt><dd>{}</dd>", esc(&d));
    }
    let _ = writeln!(
        o,
        "<dt>Run time</dt><dd>{:.1} s for {} points</dd></dl></details>",
        wi.elapsed_s,
        wi.by_ring.len() + wi.by_ways.len()
    );
    o.push_str("<div class=\"grid two\">\n");
    let curves = |pts: &[GridPoint]| -> Vec<Series> {
        let mut v = vec![
            Series {
                name: "I/O write hit %".into(),
                color: PALETTE[0],
                dashed: false,
                points: pts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p.io_write_hit_pct.map(|h| (i as f64, h)))
                    .collect(),
            },
            Series {
                name: "CPU read hit %".into(),
                color: PALETTE[1],
                dashed: false,
                points: pts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p.cpu_read_hit_pct.map(|h| (i as f64, h)))
                    .collect(),
            },
            Series {
                name: "NIC read hit %".into(),
                color: PALETTE[2],
                dashed: true,
                points: pts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p.io_read_hit_pct.map(|h| (i as f64, h)))
                    .collect(),
            },
        ];
        v.retain(|s| s.points.iter().any(Option::is_some));
        v
    };
    let pct_axis = || Axis {
        min: 0.0,
        max: 100.0,
        ticks: (0..=4)
            .map(|i| (i as f64 * 25.0, format!("{}%", i * 25)))
            .collect(),
        label: "hit rate".into(),
    };
    for (id, title, pts, xlabel, cur) in [
        (
            "whatif-ring",
            format!("Hit rate vs RX ring size ({} DDIO ways)", wi.ddio_ways),
            &wi.by_ring,
            "RX descriptors per queue",
            wi.by_ring.iter().position(|p| p.ring == wi.ring),
        ),
        (
            "whatif-ways",
            format!("Hit rate vs DDIO ways (ring {})", wi.ring),
            &wi.by_ways,
            "DDIO (IIO LLC) ways",
            wi.by_ways.iter().position(|p| p.ddio_ways == wi.ddio_ways),
        ),
    ] {
        let x = Axis {
            min: -0.3,
            max: pts.len().saturating_sub(1) as f64 + 0.3,
            ticks: pts
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    (
                        i as f64,
                        if id == "whatif-ring" {
                            p.ring.to_string()
                        } else {
                            p.ddio_ways.to_string()
                        },
                    )
                })
                .collect(),
            label: xlabel.into(),
        };
        let series = curves(pts);
        let _ = writeln!(
            o,
            "<figure class=\"card\" id=\"{id}\"><figcaption><b>{}</b> <small>(dotted line: the recorded configuration)</small></figcaption>{}{}</figure>",
            esc(&title),
            line_chart(&title, &x, &pct_axis(), &series, cur.map(|c| c as f64)),
            legend(&series)
        );
    }
    o.push_str("</div>\n");
    let _ = writeln!(
        o,
        "<div class=\"scroll\"><table class=\"num small\"><thead><tr><th>ring</th><th>DDIO ways</th><th>ring footprint</th><th>DDIO capacity</th>\
         <th>verdict</th><th>I/O write hit</th><th>CPU read hit</th><th>drops</th></tr></thead><tbody>"
    );
    let pct = |v: Option<f64>| v.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into());
    for p in wi.by_ring.iter().chain(wi.by_ways.iter()) {
        let _ = writeln!(
            o,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"v-{v}\">{v}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if p.ring == wi.ring && p.ddio_ways == wi.ddio_ways { " class=\"cur\" title=\"recorded configuration\"" } else { "" },
            p.ring,
            p.ddio_ways,
            fmt_bytes(p.footprint_bytes as f64),
            fmt_bytes(p.ddio_capacity_bytes as f64),
            pct(p.io_write_hit_pct),
            pct(p.cpu_read_hit_pct),
            p.drops,
            v = p.verdict.as_str(),
        );
    }
    o.push_str("</tbody></table></div>\n</section>\n");
}

fn recommendations_section(o: &mut String, recs: &[Recommendation], no_change: Option<&NoChange>) {
    let _ = writeln!(
        o,
        "<section id=\"recommendations\">\n<h2>Recommendations</h2>"
    );
    if recs.is_empty() {
        let _ = writeln!(
            o,
            "<div class=\"note\" id=\"no-recommendations\"><p>No recommendations:</p><ul>"
        );
        for r in no_change.map(|n| n.reasons.as_slice()).unwrap_or_default() {
            let _ = writeln!(o, "<li>{}</li>", esc(r));
        }
        o.push_str("</ul>");
        for s in no_change
            .map(|n| n.next_steps.as_slice())
            .unwrap_or_default()
        {
            let _ = writeln!(o, "<p>Next: {}</p>", with_commands(s));
        }
        o.push_str("</div>\n");
    } else {
        o.push_str("<div class=\"grid two\">\n");
        for r in recs {
            let _ = write!(
                o,
                "<article class=\"card rec\"><h3><span class=\"chip\">{}</span> {}</h3>",
                esc(r.kind.as_str()),
                esc(&r.target)
            );
            if !r.command.is_empty() {
                let _ = write!(o, "<pre><code>{}</code></pre><p class=\"note\">Printed for the operator; ddioscope never runs it.</p>", esc(&r.command));
            }
            if !r.evidence.is_empty() {
                o.push_str("<ul>");
                for e in &r.evidence {
                    let _ = write!(o, "<li>{}</li>", esc(e));
                }
                o.push_str("</ul>");
            }
            if r.predicted_before.is_some() || r.predicted_after.is_some() {
                let f = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "?".into());
                let _ = write!(
                    o,
                    "<p class=\"pred\">predicted {}: <b>{}</b> → <b>{}</b> <span class=\"badge model\">model-only</span></p>",
                    esc(r.predicted_metric.as_deref().unwrap_or("metric")),
                    f(r.predicted_before),
                    f(r.predicted_after)
                );
            }
            o.push_str("</article>\n");
        }
        o.push_str("</div>\n");
    }
    o.push_str("</section>\n");
}

fn flows_section(o: &mut String, r: &Summary) {
    let _ = writeln!(
        o,
        "<section id=\"flows\">\n<h2>Top flows by bytes</h2>\n<p class=\"note\">{}</p>",
        esc(&r.tiers.flows.text)
    );
    if r.flows.is_empty() {
        let _ = writeln!(o, "<p class=\"note\">No flows.</p>\n</section>");
        return;
    }
    o.push_str(
        "<div class=\"scroll\"><table class=\"num\"><thead><tr><th>dir</th><th>proto</th><th class=\"l\">source</th><th class=\"l\">destination</th>\
         <th>queue</th><th>packets</th><th>bytes</th><th>payload bytes</th><th>±95%</th><th>skbs sampled</th></tr></thead><tbody>\n",
    );
    let ep = |a: &str, p: u16| {
        if a.contains(':') {
            format!("[{a}]:{p}")
        } else {
            format!("{a}:{p}")
        }
    };
    for f in r.flows.iter().take(TOP_FLOWS) {
        let q = match (f.rx_queue, f.tx_queue) {
            (Some(q), _) => qname("rx", q),
            (_, Some(q)) => qname("tx", q),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.dir.as_str(),
            esc(&f.proto),
            esc(&ep(&f.src, f.sport)),
            esc(&ep(&f.dst, f.dport)),
            q,
            fmt_count(f.packets as f64),
            fmt_bytes(f.bytes as f64),
            fmt_bytes(f.payload_bytes as f64),
            match (&f.source, f.bytes_error) {
                (Some(src), _) => format!("exact ({src})"),
                (None, None) => "exact".into(),
                (None, Some(e)) => format!("±{:.1}%", 100.0 * e as f64 / f.bytes.max(1) as f64),
            },
            f.samples.map_or_else(|| "-".into(), |n| n.to_string())
        );
    }
    o.push_str("</tbody></table></div>\n");
    if r.flows.len() > TOP_FLOWS {
        let _ = writeln!(
            o,
            "<p class=\"note\">And {} more flows: see <code>ddioscope report --json</code>.</p>",
            r.flows.len() - TOP_FLOWS
        );
    }
    o.push_str("</section>\n");
}

fn events_section(o: &mut String, r: &Summary) {
    let e = &r.events;
    let _ = writeln!(
        o,
        "<section id=\"events\">\n<h2>Events and drops</h2>\n<table class=\"num kv\"><tbody>\
         <tr><th>packet records sent, 1 in {} packets</th><td>{}</td></tr>\
         <tr><th>received by ddioscope</th><td>{}</td></tr>\
         <tr><th>lost in the ring buffer</th><td{}>{}</td></tr>\
         <tr><th>in-flight states evicted</th><td>{}</td></tr>\
         <tr><th>in-flight states found stale</th><td>{}</td></tr>\
         <tr><th>lives in flight when their window ended</th><td>{}</td></tr>\
         <tr><th>packets on queues past 63, counted on queue 63</th><td>{}</td></tr>\
         <tr><th>drops, kfree_skb</th><td>{}</td></tr></tbody></table>\n\
         <p class=\"note\">In-flight states are packets timed to a point and then lost: evicted when a newer packet took the \
         state's slot before the free, stale when the free went unseen because GRO merged or coalesced the skb, in flight \
         when the hooks went off before the free (a stage longer than a window's drain is timed only in lives that began early \
         in the window).</p>",
        r.meta.sample_every.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
        e.sampled,
        e.received,
        if e.lost > 0 { " class=\"bad\"" } else { "" },
        e.lost,
        e.state_evicted,
        e.state_stale,
        e.lives_unended.saturating_sub(e.state_evicted + e.state_stale),
        e.queue_clamped,
        r.drops.total
    );
    if !r.drops.reasons.is_empty() {
        o.push_str(if r.meta.drop_counts.as_deref() == Some("windows") {
            "<h3>Drops by kernel reason</h3>\n<p class=\"note\">As counted in the detail windows; the total is estimated from them.</p>\n"
        } else {
            "<h3>Drops by kernel reason</h3>\n"
        });
        o.push_str("<table class=\"num\"><thead><tr><th class=\"l\">reason</th><th>count</th></tr></thead><tbody>\n");
        for d in &r.drops.reasons {
            let _ = writeln!(
                o,
                "<tr><td class=\"l\">{}</td><td>{}</td></tr>",
                esc(&d
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("reason {}", d.reason))),
                d.count
            );
        }
        o.push_str("</tbody></table>\n");
    }
    o.push_str("</section>\n");
}

const CSS: &str = r#"
:root{--fg:#1f2328;--muted:#5b6470;--line:#d8dee4;--bg:#fff;--card:#f8f9fb;--accent:#4e79a7;--bad:#c0392b;--ok:#2e7d32}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
header,main,nav,footer{max-width:1280px;margin:0 auto;padding:0 20px}
header{padding-top:18px}
h1{font-size:22px;margin:0 0 4px}h1 small{font-weight:400;color:var(--muted)}
h2{font-size:18px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:16px 0 6px}
.sub{color:var(--muted);margin:0 0 10px}
nav{position:sticky;top:0;background:rgba(255,255,255,.95);border-bottom:1px solid var(--line);padding-top:6px;padding-bottom:6px;z-index:1}
nav a{color:var(--accent);text-decoration:none;margin-right:16px;font-size:13px}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0}
dl.meta dt{color:var(--muted)}dl.meta dd{margin:0}
.chips{display:flex;flex-wrap:wrap;gap:4px}
.chip{display:inline-block;background:#eef2f7;border:1px solid var(--line);border-radius:10px;padding:0 7px;font-size:12px}
.chip.missing{background:#fdecea;border-color:#f5c6c0}
.badge{display:inline-block;border-radius:4px;padding:0 6px;font-size:12px;font-weight:600;vertical-align:middle}
.badge.ok{background:#e8f5e9;color:var(--ok)}.badge.bad{background:#fdecea;color:var(--bad)}
.badge.model{background:#fff4e5;color:#8a5300;border:1px solid #f3d19e}
.note{color:var(--muted);margin:6px 0}.warn{color:#8a5300;background:#fff4e5;padding:4px 8px;border-radius:4px}
.bad{color:var(--bad)}
table{border-collapse:collapse;margin:6px 0}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
th{font-weight:600;background:#f3f5f8;font-size:12px}
table.num td,table.num th{text-align:right}table.num .l{text-align:left}
table.kv th{text-align:left;background:none;font-weight:400;color:var(--muted)}
table.small{font-size:12px}
#queues table{font-size:13px}
tr.cur td{font-weight:600}
td.v-fits{color:var(--ok)}td.v-at_risk{color:#8a5300}td.v-leaky{color:var(--bad)}td.v-unknown{color:var(--muted)}
td.why{white-space:normal;min-width:320px;color:var(--muted)}tr.idle td{color:var(--muted)}
#answer dl.answer{font-size:15px}#answer dt{font-weight:600;color:var(--fg)}#answer ul{margin:0;padding-left:18px}
.scroll{overflow-x:auto}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:10px}
.grid.two{grid-template-columns:repeat(auto-fill,minmax(480px,1fr))}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 10px;margin:0}
.card.wide{margin:8px 0}
figcaption{font-size:13px;margin-bottom:4px}figcaption small{color:var(--muted)}
svg.chart{width:100%;height:auto;display:block}
svg text{font-family:inherit}
svg .tick{font-size:9.5px;fill:var(--muted)}svg .label{font-size:10.5px;fill:var(--muted)}
svg.line .tick{font-size:11px}svg.line .label{font-size:12px}
svg .grid{stroke:#e6e9ed;stroke-width:1}svg .axis{stroke:#9aa3ad;stroke-width:1}
svg .bar{fill:var(--accent)}svg .pct{stroke:var(--bad);stroke-width:1;stroke-dasharray:3 2}
svg .pctl{font-size:9px;fill:var(--bad)}svg .mark{stroke:#333;stroke-width:1;stroke-dasharray:2 3}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin-top:4px}
.legend i{display:inline-block;width:20px;height:0;margin-right:5px;vertical-align:middle}
.rec h3{margin-top:0}.rec pre{background:#fff;border:1px solid var(--line);padding:6px;overflow-x:auto}
.pred b{font-size:15px}
details summary{cursor:pointer;color:var(--muted)}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
code.cmd{background:#f3f5f8;border-radius:3px;padding:0 3px}code.cmd .w{white-space:nowrap}
footer{color:var(--muted);font-size:12px;padding-top:24px;padding-bottom:24px}
@media print{
  body{font-size:10pt}nav{display:none}
  header,main,footer{max-width:none;padding:0}
  h2{break-after:avoid}.card,table,figure{break-inside:avoid}
  .grid{grid-template-columns:repeat(3,1fr)}.grid.two{grid-template-columns:repeat(2,1fr)}
  .scroll{overflow:visible}details>summary{display:none}
  a{color:inherit;text-decoration:none}
}
"#;

#[cfg(test)]
mod tests;
