//! `ddioscope diff`'s output: text for people (what changed first, then the effects, then
//! the predictions beside what AFTER shows), one JSON object (docs/diff.schema.json), and
//! a self-contained HTML page with the same tables.
use std::fmt::Write as _;

use serde::Serialize;

use crate::analysis::diff::{Delta, Diff, Prediction};

/// The JSON layout's version (raised when a key changes meaning or goes away).
pub const DIFF_SCHEMA_VERSION: u32 = 1;

#[derive(Serialize)]
struct DiffJson<'a> {
    schema_version: u32,
    ddioscope_version: &'static str,
    #[serde(flatten)]
    diff: &'a Diff,
}

pub fn to_json(d: &Diff) -> serde_json::Result<String> {
    super::json::to_json(&DiffJson {
        schema_version: DIFF_SCHEMA_VERSION,
        ddioscope_version: env!("CARGO_PKG_VERSION"),
        diff: d,
    })
}

/// A value in the metric's unit, short.
fn val(metric: &str, v: Option<f64>) -> String {
    let Some(v) = v else { return "-".into() };
    if metric.ends_with("_ns") {
        crate::units::fmt_duration(v)
    } else if metric.ends_with("_pct") {
        format!("{v:.1}%")
    } else if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn signed(metric: &str, v: f64) -> String {
    let s = val(metric, Some(v.abs()));
    format!("{}{s}", if v < 0.0 { "-" } else { "+" })
}

/// "+12.3 ± 4.0 (+8%) effect" — or "noise", or why it cannot be told.
fn delta_cell(d: &Delta) -> String {
    let Some(x) = d.delta else {
        return "-".into();
    };
    let pct = d
        .delta_pct
        .map(|p| format!(" ({p:+.0}%)"))
        .unwrap_or_default();
    let ci = d
        .ci95
        .filter(|_| d.basis != "exact")
        .map(|c| format!(" ± {}", val(&d.metric, Some(c))))
        .unwrap_or_default();
    let verdict = match (d.basis, d.effect) {
        ("exact", _) if x != 0.0 => " changed",
        ("exact", _) => "",
        ("none", _) => " (too few steps to tell)",
        (_, true) => " effect",
        (_, false) => " noise",
    };
    format!("{}{ci}{pct}{verdict}", signed(&d.metric, x))
}

fn table(o: &mut String, rows: &[Vec<String>]) {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let w: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = w[i])
                } else {
                    format!("{c:>w$}", w = w[i])
                }
            })
            .collect();
        let _ = writeln!(o, "  {}", line.join("  ").trim_end());
    }
}

fn delta_rows(head: &str, ds: &[Delta]) -> Vec<Vec<String>> {
    ds.iter()
        .map(|d| {
            vec![
                format!("{head}{}", d.metric),
                val(&d.metric, d.before),
                val(&d.metric, d.after),
                delta_cell(d),
            ]
        })
        .collect()
}

fn prediction_rows(ps: &[Prediction]) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "prediction".into(),
        "metric".into(),
        "before".into(),
        "predicted".into(),
        "after".into(),
        "error".into(),
        "came true".into(),
    ]];
    for p in ps {
        rows.push(vec![
            p.what.clone(),
            p.metric.clone(),
            val(&p.metric, p.predicted_before),
            val(&p.metric, p.predicted_after),
            val(&p.metric, p.after),
            p.error
                .map(|e| {
                    if p.metric.ends_with("_pct") {
                        format!("{e:+.1} pp")
                    } else {
                        signed(&p.metric, e)
                    }
                })
                .unwrap_or_else(|| "-".into()),
            match p.came_true {
                Some(true) => "yes".into(),
                Some(false) => "no".into(),
                None => "-".into(),
            },
        ]);
    }
    rows
}

pub fn render_text(d: &Diff) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ddioscope diff: {} · BEFORE {} ({:.1} s, {} steps) → AFTER {} ({:.1} s, {} steps) · steps of {} s",
        d.before.iface,
        d.before.file,
        d.before.duration_s,
        d.before.steps,
        d.after.file,
        d.after.duration_s,
        d.after.steps,
        d.step_s
    );
    if let Some(f) = &d.filter {
        let _ = writeln!(o, "filter: {f}");
    }
    let _ = writeln!(o, "\nConfiguration");
    let changed: Vec<_> = d.config.iter().filter(|c| c.changed).collect();
    if changed.is_empty() {
        let _ = writeln!(
            o,
            "  unchanged ({})",
            d.config
                .iter()
                .map(|c| c.what.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    } else {
        for c in &changed {
            let _ = writeln!(o, "  {}: {} → {}", c.what, c.before, c.after);
        }
        let same: Vec<&str> = d
            .config
            .iter()
            .filter(|c| !c.changed)
            .map(|c| c.what.as_str())
            .collect();
        let _ = writeln!(o, "  unchanged: {}", same.join(", "));
    }
    let _ = writeln!(o, "\nTraffic");
    let mut rows = vec![vec![
        "".into(),
        "before".into(),
        "after".into(),
        "delta (95 %)".into(),
    ]];
    rows.extend(delta_rows("", &d.traffic));
    table(&mut o, &rows);
    if !d.flows_only_before.is_empty() {
        let _ = writeln!(o, "  flows gone: {}", d.flows_only_before.join("; "));
    }
    if !d.flows_only_after.is_empty() {
        let _ = writeln!(o, "  flows new: {}", d.flows_only_after.join("; "));
    }
    let _ = writeln!(o, "\nPer queue");
    let mut rows = vec![vec![
        "".into(),
        "before".into(),
        "after".into(),
        "delta (95 %)".into(),
    ]];
    for q in &d.queues {
        rows.extend(delta_rows(&format!("{} {} ", q.dir, q.queue), &q.deltas));
    }
    table(&mut o, &rows);
    if !d.flows.is_empty() {
        let _ = writeln!(o, "\nPer flow");
        let mut rows = vec![vec![
            "".into(),
            "before".into(),
            "after".into(),
            "delta (95 %)".into(),
        ]];
        for f in &d.flows {
            rows.extend(delta_rows(&format!("{} {} ", f.dir, f.flow), &f.deltas));
        }
        table(&mut o, &rows);
    }
    if !d.drops.is_empty() {
        let _ = writeln!(o, "\nDrops by kernel reason (whole device)");
        let mut rows = vec![vec![
            "".into(),
            "before".into(),
            "after".into(),
            "delta (95 %)".into(),
        ]];
        rows.extend(delta_rows("", &d.drops));
        table(&mut o, &rows);
    }
    let _ = writeln!(o, "\nSocket DDIO counters");
    match &d.counters_absent {
        Some(why) => {
            let _ = writeln!(o, "  {why}");
        }
        None => {
            let mut rows = vec![vec![
                "".into(),
                "before".into(),
                "after".into(),
                "delta (95 %)".into(),
            ]];
            for s in &d.sockets {
                rows.extend(delta_rows(&format!("socket {} ", s.socket), &s.deltas));
            }
            table(&mut o, &rows);
        }
    }
    let _ = writeln!(o, "\nPredicted vs after");
    if d.predictions.is_empty() {
        let _ = writeln!(
            o,
            "  none: BEFORE's model made no prediction for this change"
        );
    } else {
        table(&mut o, &prediction_rows(&d.predictions));
        for p in &d.predictions {
            let _ = writeln!(o, "  {}: {}", p.what, p.after_source);
            if let Some(c) = &p.command {
                let _ = writeln!(o, "    $ {}", c.replace('\n', "\n    $ "));
            }
            if p.kind == "recommendation" {
                let _ = writeln!(o, "    applied: {}", p.applied);
            }
            let _ = writeln!(o, "    {}", p.note);
        }
    }
    let _ = writeln!(o);
    for n in &d.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html_table(o: &mut String, rows: &[Vec<String>], effects: &[bool]) {
    let _ = writeln!(o, "<table>");
    for (i, r) in rows.iter().enumerate() {
        let (open, close) = if i == 0 {
            ("<th>", "</th>")
        } else {
            ("<td>", "</td>")
        };
        let class = if i > 0 && effects.get(i - 1).copied().unwrap_or(false) {
            " class=\"effect\""
        } else {
            ""
        };
        let cells: String = r
            .iter()
            .map(|c| format!("{open}{}{close}", esc(c)))
            .collect();
        let _ = writeln!(o, "<tr{class}>{cells}</tr>");
    }
    let _ = writeln!(o, "</table>");
}

pub fn render_html(d: &Diff) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>ddioscope diff — {}</title>\n<style>\
         body{{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;margin:.5em 0 1.5em}}\
         td,th{{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}}td:first-child,th:first-child{{text-align:left}}\
         tr.effect td{{background:#fff4d6}}.note{{color:#555}}code{{background:#f3f3f3;padding:1px 4px}}\
         </style>\n</head>\n<body>",
        esc(&d.before.iface)
    );
    let _ = writeln!(
        o,
        "<h1>ddioscope diff — {}</h1>\n<p>BEFORE <code>{}</code> ({:.1} s, {} steps) → AFTER <code>{}</code> ({:.1} s, {} steps); steps of {} s. Highlighted rows: an effect (the 95 % interval excludes zero).</p>",
        esc(&d.before.iface),
        esc(&d.before.file),
        d.before.duration_s,
        d.before.steps,
        esc(&d.after.file),
        d.after.duration_s,
        d.after.steps,
        d.step_s
    );
    if let Some(f) = &d.filter {
        let _ = writeln!(o, "<p class=\"note\">filter: {}</p>", esc(f));
    }
    let _ = writeln!(o, "<h2 id=\"config\">Configuration</h2>");
    let mut rows = vec![vec!["setting".into(), "before".into(), "after".into()]];
    let mut eff = Vec::new();
    for c in &d.config {
        rows.push(vec![c.what.clone(), c.before.clone(), c.after.clone()]);
        eff.push(c.changed);
    }
    html_table(&mut o, &rows, &eff);
    let head = || {
        vec![
            "".to_string(),
            "before".into(),
            "after".into(),
            "delta (95 %)".into(),
        ]
    };
    let section = |o: &mut String, id: &str, title: &str, groups: Vec<(String, &[Delta])>| {
        let _ = writeln!(o, "<h2 id=\"{id}\">{title}</h2>");
        let mut rows = vec![head()];
        let mut eff = Vec::new();
        for (h, ds) in groups {
            rows.extend(delta_rows(&h, ds));
            eff.extend(
                ds.iter()
                    .map(|d| d.effect || (d.basis == "exact" && d.delta.is_some_and(|x| x != 0.0))),
            );
        }
        html_table(o, &rows, &eff);
    };
    section(
        &mut o,
        "traffic",
        "Traffic",
        vec![(String::new(), &d.traffic[..])],
    );
    section(
        &mut o,
        "queues",
        "Per queue",
        d.queues
            .iter()
            .map(|q| (format!("{} {} ", q.dir, q.queue), &q.deltas[..]))
            .collect(),
    );
    if !d.flows.is_empty() {
        section(
            &mut o,
            "flows",
            "Per flow",
            d.flows
                .iter()
                .map(|f| (format!("{} {} ", f.dir, f.flow), &f.deltas[..]))
                .collect(),
        );
    }
    if !d.drops.is_empty() {
        section(
            &mut o,
            "drops",
            "Drops by kernel reason",
            vec![(String::new(), &d.drops[..])],
        );
    }
    match &d.counters_absent {
        Some(why) => {
            let _ = writeln!(
                o,
                "<h2 id=\"counters\">Socket DDIO counters</h2>\n<p class=\"note\">{}</p>",
                esc(why)
            );
        }
        None => section(
            &mut o,
            "counters",
            "Socket DDIO counters",
            d.sockets
                .iter()
                .map(|s| (format!("socket {} ", s.socket), &s.deltas[..]))
                .collect(),
        ),
    }
    let _ = writeln!(o, "<h2 id=\"predictions\">Predicted vs after</h2>");
    if d.predictions.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"note\">BEFORE's model made no prediction for this change.</p>"
        );
    } else {
        let rows = prediction_rows(&d.predictions);
        let eff: Vec<bool> = d
            .predictions
            .iter()
            .map(|p| p.came_true == Some(false))
            .collect();
        html_table(&mut o, &rows, &eff);
        let _ = writeln!(o, "<ul>");
        for p in &d.predictions {
            let _ = writeln!(
                o,
                "<li><b>{}</b>: {}{}{}. {}</li>",
                esc(&p.what),
                esc(&p.after_source),
                p.command
                    .as_ref()
                    .map(|c| format!("; <code>{}</code>", esc(c)))
                    .unwrap_or_default(),
                if p.kind == "recommendation" {
                    format!("; applied: {}", esc(&p.applied))
                } else {
                    String::new()
                },
                esc(&p.note)
            );
        }
        let _ = writeln!(o, "</ul>");
    }
    for n in &d.notes {
        let _ = writeln!(o, "<p class=\"note\">note: {}</p>", esc(n));
    }
    let _ = writeln!(o, "</body>\n</html>");
    o
}
