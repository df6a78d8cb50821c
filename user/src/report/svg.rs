//! The HTML report's charts as inline SVG: a bar chart for log2 latency histograms and a line
//! chart for everything else. Hover text comes from SVG `<title>` elements, so the charts need
//! no JavaScript and read the same from a mail attachment, a CI artifact or paper.
use std::fmt::Write as _;

use crate::snapshot::NBUCKETS;
use crate::units::{fmt_count, fmt_duration};

/// Colour-blind-friendly (Tableau 10) series colours.
pub const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1", "#9c755f", "#edc948",
];

/// HTML-escape text and attribute values (recordings carry host-supplied strings).
pub fn esc(s: &str) -> String {
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

pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub dashed: bool,
    /// None breaks the line (no value in that interval).
    pub points: Vec<Option<(f64, f64)>>,
}

pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub ticks: Vec<(f64, String)>,
    pub label: String,
}

/// A 1/2/2.5/5 × 10^k step giving about `n` ticks up to `max`.
pub fn nice_step(max: f64, n: usize) -> f64 {
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

pub fn linear_axis(max: f64, label: &str, fmt: impl Fn(f64) -> String) -> Axis {
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
pub fn time_axis(max_s: f64) -> Axis {
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

pub fn count_axis(max: f64, label: &str) -> Axis {
    linear_axis(max, label, fmt_count)
}

pub fn legend(series: &[Series]) -> String {
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

pub fn line_chart(
    aria: &str,
    x: &Axis,
    y: &Axis,
    series: &[Series],
    mark_x: Option<f64>,
) -> String {
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
pub fn hist_chart(hist: &[u64], p50: Option<u64>, p99: Option<u64>, aria: &str) -> String {
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
