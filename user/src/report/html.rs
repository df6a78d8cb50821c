//! `ddioscope report --html`: one self-contained page (inline CSS and SVG, no script, nothing
//! fetched) with the report's tables, per-queue stage latency histograms, rates and miss ratios
//! over time, the simulator's what-if curves and recommendation cards.
//!
//! Charts are hand-written SVG: a bar chart for log2 histograms and a line chart for everything
//! else. Hover text comes from SVG `<title>` elements, so the page needs no JavaScript and opens
//! the same from a mail attachment, a CI artifact or paper.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use super::{queue_cells, queue_columns};
use crate::advise::Recommendation;
use crate::analysis::answer::{Answer, NoChange, QueueVerdict};
use crate::analysis::{AttributionReport, Outcome, Summary};
use crate::model::geometry::WaysSource;
use crate::model::spec::{GridPoint, SimSpec, Source};
use crate::recording::Recording;
use crate::snapshot::{Dir, QueueCounters, NBUCKETS};
use crate::units::{fmt_bytes, fmt_count, fmt_duration, fmt_ns, fmt_pct};

/// Ring sizes and DDIO way counts of the what-if curves.
pub const WHATIF_RINGS: [u32; 7] = [64, 128, 256, 512, 1024, 2048, 4096];
pub const WHATIF_WAYS: [u32; 6] = [1, 2, 3, 4, 5, 6];
const TOP_FLOWS: usize = 20;
/// Colour-blind-friendly (Tableau 10) series colours.
const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1", "#9c755f", "#edc948",
];

/// Everything the what-if section shows: the spec built from the recording, where each of
/// its inputs came from, and the two curves.
pub struct WhatIf {
    pub spec: SimSpec,
    /// (input, value and its source)
    pub inputs: Vec<(String, String)>,
    pub by_ring: Vec<GridPoint>,
    pub by_ways: Vec<GridPoint>,
    pub elapsed_s: f64,
}

pub fn render_html(rec: &Recording, report: &Summary, outcome: &Outcome) -> anyhow::Result<String> {
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
    whatif_section(&mut o, outcome);
    provenance_section(&mut o, report);
    queue_tables(&mut o, report);
    latency_section(&mut o, report);
    rates_section(&mut o, rec, report)?;
    counters_section(&mut o, rec, report)?;
    flows_section(&mut o, report);
    events_section(&mut o, report);
    let _ = writeln!(
        o,
        "</main>\n<footer>ddioscope {} · from {} · self-contained: no scripts, nothing loaded from the network</footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION"),
        esc(&m.file)
    );
    Ok(o)
}

/// "rx 3", as the JSON spells a queue.
fn qname(dir: impl std::fmt::Display, queue: u32) -> String {
    format!("{dir} {queue}")
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
        crate::report::text::leaking_line(a, &esc(&reason(f.dir, f.queue)), mark)
    };
    let _ = write!(
        o,
        "<dt>{}</dt><dd id=\"answer-leaking\">{leaking}</dd>",
        crate::report::text::leaking_label(a)
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
                let _ = write!(o, "<li>{why}<code>{}</code>{pred}</li>", esc(&c.command));
            }
        }
        o.push_str("</ul></dd>");
    }
    if let Some(n) = &a.no_change {
        for s in &n.next_steps {
            let _ = write!(o, "<dt>Next</dt><dd>{}</dd>", esc(s));
        }
    }
    o.push_str("</dl>\n</section>\n");
}

/// Each modelled queue's verdict with its reason.
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
         <th>ring needs</th><th>in flight</th><th>write hit</th><th>read hit</th><th class=\"l\">why</th></tr></thead><tbody>\n",
    );
    for v in verdicts {
        let _ = writeln!(
            o,
            "<tr><td class=\"l\">{}</td><td class=\"l v-{v}\">{v}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l why\">{}</td></tr>",
            qname(v.dir, v.queue),
            v.footprint_bytes.map_or_else(|| "-".into(), |b| fmt_bytes(b as f64)),
            v.inflight_bytes.map_or_else(|| "-".into(), fmt_bytes),
            fmt_pct(v.predicted_write_hit_pct),
            fmt_pct(v.predicted_read_hit_pct),
            esc(&v.reason),
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

/// HTML-escape text and attribute values (recordings carry host-supplied strings).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn header(o: &mut String, r: &Summary) {
    let m = &r.meta;
    let status = if m.complete {
        use crate::recording::meta::StoppedBy;
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

/// Points on a chart over time at most: a longer recording's intervals are summed in groups.
const MAX_POINTS: usize = crate::recording::reader::SERIES_POINTS;

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

/// Seconds since the recording started for a CLOCK_MONOTONIC timestamp.
fn rel_s(t_ns: u64, start_ns: Option<u64>) -> Option<f64> {
    start_ns
        .filter(|s| t_ns >= *s)
        .map(|s| (t_ns - s) as f64 / 1e9)
}

fn rates_section(o: &mut String, rec: &Recording, r: &Summary) -> anyhow::Result<()> {
    let _ = writeln!(o, "<section id=\"rates\">\n<h2>Packet rates over time</h2>");
    let start_ns = rec.meta.start_ns;
    let groups = rec.interval_groups(None)?;
    // Group ends in seconds: from the BPF clock when the start is known, else summed durations.
    let mut acc = 0.0;
    let xs: Vec<f64> = groups
        .iter()
        .map(|g| {
            acc += g.dur_ns as f64 / 1e9;
            rel_s(g.t_ns, start_ns).unwrap_or(acc)
        })
        .collect();
    let per = groups.first().map_or(1, |g| g.last - g.first + 1);
    let mut any = false;
    o.push_str("<div class=\"grid two\">\n");
    for dir in [Dir::Rx, Dir::Tx] {
        let queues: Vec<u32> = r
            .queues
            .iter()
            .filter(|q| q.dir == dir && q.packets > 0)
            .map(|q| q.queue)
            .collect();
        if queues.is_empty() || groups.is_empty() {
            continue;
        }
        any = true;
        let series: Vec<Series> = queues
            .iter()
            .enumerate()
            .map(|(i, &qn)| Series {
                name: format!("{} q{qn}", dir.as_str()),
                color: PALETTE[i % PALETTE.len()],
                dashed: false,
                points: groups
                    .iter()
                    .zip(&xs)
                    .map(|(g, &x)| {
                        let pk = g.queue(dir, qn).map_or(0, |q| q.packets);
                        (g.dur_ns > 0).then(|| (x, pk as f64 / (g.dur_ns as f64 / 1e9)))
                    })
                    .collect(),
            })
            .collect();
        let ymax = series
            .iter()
            .flat_map(|s| s.points.iter().flatten().map(|p| p.1))
            .fold(0.0, f64::max);
        let xmax = xs.iter().copied().fold(0.0, f64::max);
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
    Ok(())
}

/// (seconds since start, write miss %, read miss %) per counter interval.
pub type MissPoints = Vec<(f64, Option<f64>, Option<f64>)>;

/// Write and read miss % per socket over time from the counter readings of the report's
/// source, at most `MAX_POINTS` points. Returns (socket, [(t_s, write_miss, read_miss)]).
pub fn miss_series(rec: &Recording, source: &str) -> anyhow::Result<BTreeMap<u32, MissPoints>> {
    let start_ns = rec.meta.start_ns;
    let mut out: BTreeMap<u32, MissPoints> = BTreeMap::new();
    for p in rec.counter_series(source, MAX_POINTS)? {
        let Some(t) = rel_s(p.t_ns, start_ns) else {
            continue;
        };
        // Miss % is a ratio and does not depend on the duration; bandwidths would.
        for s in crate::counters::socket_metrics(&p.readings, p.dur_s.max(1e-3)) {
            out.entry(s.socket)
                .or_default()
                .push((t, s.write_miss_pct, s.read_miss_pct));
        }
    }
    Ok(out)
}

fn counters_section(o: &mut String, rec: &Recording, r: &Summary) -> anyhow::Result<()> {
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
            for cell in super::socket_cells(s) {
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
        let per = miss_series(rec, &c.source)?;
        let mut series = Vec::new();
        for (i, (sock, pts)) in per.iter().enumerate() {
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
    Ok(())
}

/// The what-if curves of the recording's one model computation (the same [`ModelRun`] the
/// per-queue verdicts and the recommendations came from), with the model's inputs and what
/// was measured of them. Err is the reason nothing can be modelled (shown as such).
pub fn what_if_for(outcome: &Outcome) -> Result<WhatIf, String> {
    let a = match outcome {
        Outcome::Advised(a) => a,
        Outcome::NoModel { why, .. } => {
            return Err(format!("the DDIO model is not available: {why}"))
        }
    };
    let spec = a.run.spec().cloned().ok_or_else(|| {
        "no RX traffic in this recording, so there is nothing to model".to_string()
    })?;
    let t0 = Instant::now();
    let (by_ring, by_ways) = a.run.what_if(&WHATIF_RINGS, &WHATIF_WAYS);
    let g = &spec.geometry;
    let mut inputs: Vec<(String, String)> = vec![(
        "LLC".into(),
        format!(
            "{:.2} MiB, {} ways, {} sets{} — from the recording host's sysfs",
            g.size_bytes as f64 / 1048576.0,
            g.ways,
            g.sets,
            g.slices
                .map(|s| format!(", {s} slices"))
                .unwrap_or_default(),
        ),
    )];
    inputs.push((
        "DDIO ways".into(),
        format!(
            "{} — {}",
            g.ddio_ways,
            match g.ddio_ways_source {
                WaysSource::Measured => "read from MSR 0xC8B",
                WaysSource::Override => "set explicitly",
                WaysSource::Assumed =>
                    "assumed (power-on default; the recording does not carry MSR 0xC8B)",
            }
        ),
    ));
    for i in a
        .model_inputs
        .iter()
        .filter(|i| !matches!(i.name.as_str(), "ddio_ways" | "llc"))
    {
        let src = match i.source {
            Source::Measured => "measured",
            Source::Assumed => "assumed",
        };
        inputs.push((i.name.clone(), format!("{} — {src}", i.value)));
    }
    inputs.push((
        "Calibration".into(),
        crate::report::text::calibration_words(a.calibration.as_ref()),
    ));
    Ok(WhatIf {
        spec,
        inputs,
        by_ring,
        by_ways,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}

fn whatif_section(o: &mut String, outcome: &Outcome) {
    let _ = writeln!(
        o,
        "<section id=\"whatif\">\n<h2>What-if: DDIO hit rate vs ring size and DDIO ways <span class=\"badge model\">model-only prediction</span></h2>\n\
         <p class=\"note\">Simulated by ddioscope's LLC model from the workload this recording observed — not measured. \
         <b>I/O write hit</b>: NIC writes that found or allocated their line in the LLC; <b>CPU read hit</b>: the copy found the packet still cached \
         (DDIO's benefit). Validation against published measurements: docs/model.md.</p>"
    );
    let wi = match what_if_for(outcome) {
        Ok(w) => w,
        Err(why) => {
            let _ = writeln!(
                o,
                "<p class=\"note\" id=\"whatif-absent\">No prediction: {}.</p>\n</section>",
                esc(&why)
            );
            return;
        }
    };
    o.push_str("<details open><summary>Model inputs</summary><dl class=\"meta\">");
    for (k, v) in &wi.inputs {
        let _ = write!(o, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
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
            format!(
                "Hit rate vs RX ring size ({} DDIO ways)",
                wi.spec.geometry.ddio_ways
            ),
            &wi.by_ring,
            "RX descriptors per queue",
            wi.by_ring.iter().position(|p| p.ring == wi.spec.ring),
        ),
        (
            "whatif-ways",
            format!("Hit rate vs DDIO ways (ring {})", wi.spec.ring),
            &wi.by_ways,
            "DDIO (IIO LLC) ways",
            wi.by_ways
                .iter()
                .position(|p| p.ddio_ways == wi.spec.geometry.ddio_ways),
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
            if p.ring == wi.spec.ring && p.ddio_ways == wi.spec.geometry.ddio_ways { " class=\"cur\" title=\"recorded configuration\"" } else { "" },
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
            let _ = writeln!(o, "<p>Next: <code>{}</code></p>", esc(s));
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
        o.push_str("<h3>Drops by kernel reason</h3>\n<table class=\"num\"><thead><tr><th class=\"l\">reason</th><th>count</th></tr></thead><tbody>\n");
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

// ---- SVG charts -------------------------------------------------------------------------

struct Series {
    name: String,
    color: &'static str,
    dashed: bool,
    /// None breaks the line (no value in that interval).
    points: Vec<Option<(f64, f64)>>,
}

struct Axis {
    min: f64,
    max: f64,
    ticks: Vec<(f64, String)>,
    label: String,
}

/// A 1/2/2.5/5 × 10^k step giving about `n` ticks up to `max`.
fn nice_step(max: f64, n: usize) -> f64 {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn linear_axis(max: f64, label: &str, fmt: impl Fn(f64) -> String) -> Axis {
    let step = nice_step(max, 5);
    let top = ((if max > 0.0 { max } else { 1.0 }) / step).ceil().max(1.0) * step;
    let n = (top / step).round() as usize;
    Axis {
        min: 0.0,
        max: top,
        ticks: (0..=n)
            .map(|i| (i as f64 * step, fmt(i as f64 * step)))
            .collect(),
        label: label.into(),
    }
}

/// Seconds from 0 to the last point exactly (a rounded-up end would look like missing data).
fn time_axis(max_s: f64) -> Axis {
    let max = if max_s.is_finite() && max_s > 0.0 {
        max_s
    } else {
        1.0
    };
    let step = nice_step(max, 6);
    let n = (max / step + 1e-9).floor() as usize;
    let fmt = |v: f64| {
        if step < 1.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.0}")
        }
    };
    Axis {
        min: 0.0,
        max,
        ticks: (0..=n)
            .map(|i| (i as f64 * step, fmt(i as f64 * step)))
            .collect(),
        label: "seconds since start".into(),
    }
}

fn count_axis(max: f64, label: &str) -> Axis {
    linear_axis(max, label, fmt_count)
}

fn legend(series: &[Series]) -> String {
    let mut o = String::from("<div class=\"legend\">");
    for s in series {
        let _ = write!(
            o,
            "<span><i style=\"border-top:3px {} {}\"></i>{}</span>",
            if s.dashed { "dashed" } else { "solid" },
            s.color,
            esc(&s.name)
        );
    }
    o.push_str("</div>");
    o
}

fn line_chart(aria: &str, x: &Axis, y: &Axis, series: &[Series], mark_x: Option<f64>) -> String {
    const W: f64 = 640.0;
    const H: f64 = 240.0;
    const L: f64 = 56.0;
    const R: f64 = 14.0;
    const T: f64 = 10.0;
    const B: f64 = 40.0;
    let xspan = (x.max - x.min).max(1e-12);
    let yspan = (y.max - y.min).max(1e-12);
    let px = |v: f64| L + (v - x.min) / xspan * (W - L - R);
    let py = |v: f64| H - B - (v.clamp(y.min, y.max) - y.min) / yspan * (H - T - B);
    let mut o = format!(
        "<svg class=\"chart line\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\">",
        esc(aria)
    );
    for (v, label) in &y.ticks {
        let yy = py(*v);
        let _ = write!(
            o,
            "<line class=\"grid\" x1=\"{L}\" x2=\"{:.1}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - R,
            L - 5.0,
            yy + 3.5,
            esc(label)
        );
    }
    for (v, label) in &x.ticks {
        let xx = px(*v);
        let _ = write!(
            o,
            "<line class=\"axis\" x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"tick\" x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            H - B,
            H - B + 4.0,
            H - B + 15.0,
            esc(label)
        );
    }
    let _ = write!(
        o,
        "<line class=\"axis\" x1=\"{L}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text class=\"label\" transform=\"translate(13 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        W - R,
        H - B,
        H - B,
        (L + W - R) / 2.0,
        H - 6.0,
        esc(&x.label),
        (T + H - B) / 2.0,
        esc(&y.label)
    );
    if let Some(mx) = mark_x {
        let xx = px(mx);
        let _ = write!(o, "<line class=\"mark\" x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{T}\" y2=\"{:.1}\"><title>recorded configuration</title></line>", H - B);
    }
    for s in series {
        let dash = if s.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        // Split into runs of consecutive values: a missing interval is a gap, not a zero.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for p in &s.points {
            match p {
                Some(p) => {
                    if let Some(run) = runs.last_mut() {
                        run.push(*p);
                    }
                }
                None => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|r| r.len() > 1) {
            let pts: Vec<String> = run
                .iter()
                .map(|(a, b)| format!("{:.1},{:.1}", px(*a), py(*b)))
                .collect();
            let _ = write!(
                o,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"{dash} points=\"{}\"><title>{}</title></polyline>",
                s.color,
                pts.join(" "),
                esc(&s.name)
            );
        }
        // Markers where they stay readable, and always for isolated points (a run of one).
        let few = s.points.len() <= 40;
        for run in &runs {
            if !(few || run.len() == 1) {
                continue;
            }
            for (a, b) in run {
                let _ = write!(
                    o,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.6\" fill=\"{}\"><title>{}: {}</title></circle>",
                    px(*a),
                    py(*b),
                    s.color,
                    esc(&s.name),
                    if b.abs() >= 1000.0 { fmt_count(*b) } else { format!("{b:.1}") }
                );
            }
        }
    }
    o.push_str("</svg>");
    o
}

/// Bar chart of a log2 latency histogram, bucket b = [2^b, 2^(b+1)) ns.
fn hist_chart(hist: &[u64], p50: Option<u64>, p99: Option<u64>, aria: &str) -> String {
    const W: f64 = 300.0;
    const H: f64 = 120.0;
    const L: f64 = 32.0;
    const R: f64 = 6.0;
    const T: f64 = 14.0;
    const B: f64 = 22.0;
    const MIN_BUCKETS: usize = 6;
    let nz: Vec<usize> = hist
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(b, _)| b)
        .collect();
    let (Some(&first), Some(&last)) = (nz.first(), nz.last()) else {
        return String::new();
    };
    let top_bucket = hist.len().min(NBUCKETS).saturating_sub(1);
    let (mut lo, mut hi) = (first, last.min(top_bucket));
    // Keep a few empty buckets around narrow distributions so their position reads on the axis.
    while hi - lo + 1 < MIN_BUCKETS && (lo > 0 || hi < top_bucket) {
        lo = lo.saturating_sub(1);
        if hi - lo + 1 < MIN_BUCKETS && hi < top_bucket {
            hi += 1;
        }
    }
    let n = hi - lo + 1;
    let total: u64 = hist.iter().sum();
    let maxc = hist[lo..=hi].iter().copied().max().unwrap_or(1).max(1);
    let bw = (W - L - R) / n as f64;
    let ph = H - T - B;
    let mut o = format!(
        "<svg class=\"chart hist\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\">",
        esc(aria)
    );
    let _ = write!(
        o,
        "<line class=\"grid\" x1=\"{L}\" x2=\"{:.1}\" y1=\"{T}\" y2=\"{T}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}%</text>\
         <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>",
        W - R,
        L - 3.0,
        T + 3.5,
        maxc as f64 / total.max(1) as f64 * 100.0,
        L - 3.0,
        H - B + 3.5
    );
    let bucket_lo = |b: usize| if b == 0 { 0.0 } else { (1u64 << b) as f64 };
    for (b, &c) in hist.iter().enumerate().take(hi + 1).skip(lo) {
        let x = L + (b - lo) as f64 * bw;
        if c > 0 {
            let h = (c as f64 / maxc as f64 * ph).max(1.0);
            let _ = write!(
                o,
                "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>[{}, {}): {} packets ({:.1}%)</title></rect>",
                x + 0.5,
                H - B - h,
                (bw - 1.0).max(0.5),
                fmt_duration(bucket_lo(b)),
                fmt_duration((1u64 << (b + 1)) as f64),
                c,
                c as f64 / total.max(1) as f64 * 100.0
            );
        }
    }
    let every = n.div_ceil(5).max(1);
    for b in (lo..=hi + 1).step_by(every) {
        let x = L + (b - lo) as f64 * bw;
        // A label centred on the right edge would be clipped by the viewBox.
        let anchor = if x > W - R - 12.0 { "end" } else { "middle" };
        let _ = write!(
            o,
            "<line class=\"axis\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
            H - B,
            H - B + 3.0,
            x.min(W - 1.0),
            H - B + 13.0,
            fmt_duration(bucket_lo(b))
        );
    }
    let _ = write!(
        o,
        "<line class=\"axis\" x1=\"{L}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
        W - R,
        H - B,
        H - B
    );
    // Percentile markers at their log2 position inside the bucket range. Labels are centred
    // on their lines, pushed apart when the lines are close and kept inside the chart.
    const LABEL_W: f64 = 19.0;
    let xpos = |v: u64| {
        let pos = if v < 2 {
            v as f64 / 2.0
        } else {
            (v as f64).log2()
        };
        (L + (pos - lo as f64) * bw).clamp(L, W - R)
    };
    let (x50, x99) = (p50.map(xpos), p99.map(xpos));
    let (mut c50, mut c99) = (x50.unwrap_or(L), x99.unwrap_or(W - R));
    if x50.is_some() && x99.is_some() && c99 - c50 < LABEL_W {
        let mid = (c50 + c99) / 2.0;
        c50 = mid - LABEL_W / 2.0;
        c99 = mid + LABEL_W / 2.0;
    }
    let shift = (W - LABEL_W / 2.0 - c99).min(0.0) + (L + LABEL_W / 2.0 - c50).max(0.0);
    for (name, v, x, c) in [
        ("p50", p50, x50, c50 + shift),
        ("p99", p99, x99, c99 + shift),
    ] {
        let (Some(v), Some(x)) = (v, x) else { continue };
        let c = c.clamp(LABEL_W / 2.0, W - LABEL_W / 2.0);
        let _ = write!(
            o,
            "<line class=\"pct\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"><title>{name} {}</title></line><text class=\"pctl\" x=\"{c:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{name}</text>",
            T - 2.0,
            H - B,
            fmt_duration(v as f64),
            T - 4.0,
        );
    }
    o.push_str("</svg>");
    o
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
