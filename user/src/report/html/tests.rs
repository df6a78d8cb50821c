//! Tests of the HTML report: a synthetic recording written through the recorder's writer, and
//! a real one recorded on the namespace testbed (tests/fixtures/recordings/).
use std::path::{Path, PathBuf};

use super::*;
use crate::analysis::charts::{miss_series, what_if, WHATIF_RINGS, WHATIF_WAYS};
use crate::recording::writer::CounterRow;
use crate::recording::Recording;
use crate::report::svg::{esc, hist_chart};
use crate::snapshot::NBUCKETS;

use crate::recording::reader::fixture::{
    counter_row, synthetic_recording, synthetic_with_dram_reads,
};

fn tor(iv: u64, event: &str, value: f64) -> (u64, CounterRow) {
    counter_row(iv, "cha", event, value, "imported")
}

/// Five 100 ms intervals, two RX queues and one TX queue, optionally LLC info and TOR
/// counters, written through the recorder's own writer (`rx` false: no RX traffic).
fn synthetic_file(llc: bool, counters: bool, rx: bool) -> (tempfile::TempDir, PathBuf) {
    let mut rows = Vec::new();
    if counters {
        for iv in 0..5 {
            rows.push(tor(iv, "UNC_CHA_TOR_INSERTS.IO_ITOM", 100_000.0));
            rows.push(tor(
                iv,
                "UNC_CHA_TOR_INSERTS.IO_HIT_ITOM",
                100_000.0 - 10_000.0 * iv as f64,
            ));
            rows.push(tor(
                iv,
                "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM",
                10_000.0 * iv as f64,
            ));
        }
    }
    synthetic_recording(llc, rx, rows)
}

/// The page for a recording, with the report's own summary and outcome.
fn page(path: &Path) -> (Recording, crate::analysis::Summary, String) {
    let rec = Recording::open(path).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    let outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let charts = crate::analysis::charts(&rec, &r, &outcome).unwrap();
    let h = render_html(&r, &outcome, &charts);
    (rec, r, h)
}

/// No network fetches: the only URLs allowed are xmlns namespace names.
fn assert_self_contained(html: &str) {
    let mut rest = html;
    while let Some(i) = rest.find("http") {
        let before = &rest[..i];
        let after = &rest[i..];
        let is_url = after.starts_with("http://") || after.starts_with("https://");
        assert!(
            !is_url || before.ends_with("xmlns=\"") || before.ends_with("xmlns:xlink=\""),
            "URL in page: {}",
            &after[..after.len().min(80)]
        );
        rest = &after[4..];
    }
    assert!(!html.contains("<script"), "the page needs no script");
    assert!(!html.contains("<link") && !html.contains("@import") && !html.contains("url("));
}

fn count(h: &str, pat: &str) -> usize {
    h.matches(pat).count()
}

#[test]
fn renders_every_section_with_charts() {
    let (_dir, path) = synthetic_file(true, true, true);
    let (_rec, r, h) = page(&path);
    assert!(h.starts_with("<!DOCTYPE html>") && h.trim_end().ends_with("</html>"));
    assert_self_contained(&h);
    for id in [
        "summary",
        "answer",
        "verdicts",
        "verdicts-table",
        "attribution",
        "evidence",
        "tiers",
        "queues",
        "latency",
        "rates",
        "rates-rx",
        "rates-tx",
        "counters",
        "miss-over-time",
        "whatif",
        "whatif-ring",
        "whatif-ways",
        "recommendations",
        "flows",
        "events",
    ] {
        assert!(h.contains(&format!("id=\"{id}\"")), "missing {id}");
    }
    // The answer comes before the evidence.
    assert!(
        h.find("id=\"answer\"") < h.find("id=\"evidence\"")
            && h.find("id=\"verdicts\"") < h.find("id=\"queues\"")
    );
    // 3 queues x 3 stages with data, 2 rate charts, 1 miss chart, 2 what-if curves.
    assert_eq!(count(&h, "<svg"), 9 + 2 + 1 + 2);
    assert_eq!(count(&h, "<svg"), count(&h, "</svg>"));
    assert_eq!(count(&h, "class=\"card hist\""), 9);
    assert!(h.contains("id=\"lat-rx-1-stack_to_copy\""));
    assert!(
        !h.contains("lat-rx-0-driver_to_free"),
        "a stage without data gets no chart"
    );
    assert!(h.contains("<polyline"));
    assert!(h.contains("model-only prediction"));
    // Escaped host-supplied strings, IPv6 endpoints bracketed.
    assert!(h.contains("eth&lt;1&gt;") && !h.contains("eth<1>"));
    assert!(h.contains("[fd77::1]:40000"));
    // Per-queue table: the same cells as the text report's, durations in one style.
    let q = r.queues.iter().find(|q| q.packets > 0).unwrap();
    for c in crate::report::queue_cells(q, true) {
        assert!(h.contains(&format!("<td>{}</td>", esc(&c))), "{c}");
    }
    assert!(h.contains(&fmt_count(q.packets_per_s)));
    assert!(h.contains("µs") && !h.contains("0us<"));
    std::fs::write(
        std::env::temp_dir().join("ddioscope-html-synthetic.html"),
        &h,
    )
    .unwrap();
}

#[test]
fn miss_ratios_per_interval_follow_the_counters() {
    let (_dir, path) = synthetic_file(true, true, true);
    let rec = Recording::open(&path).unwrap();
    let s = miss_series(&rec, "imported").unwrap();
    let pts = &s[&0];
    assert_eq!(pts.len(), 5);
    for (i, (t, w, rd)) in pts.iter().enumerate() {
        assert!((t - 0.1 * (i + 1) as f64).abs() < 1e-9);
        assert!((w.unwrap() - 10.0 * i as f64).abs() < 1e-9, "{w:?}");
        assert!(rd.is_none(), "no PCIRdCur counts, no read ratio");
    }
}

#[test]
fn says_why_when_counters_and_llc_are_missing() {
    let (_dir, path) = synthetic_file(false, false, true);
    let (_rec, _r, h) = page(&path);
    assert_self_contained(&h);
    assert!(h.contains("id=\"counters-absent\""));
    assert!(h.contains("no counters in this recording") && h.contains("capture-counters.sh"));
    assert!(!h.contains("id=\"miss-over-time\""));
    // No geometry, no model: no curves for an invented LLC either.
    assert!(
        h.contains("id=\"whatif-absent\"")
            && h.contains("the DDIO model is not available")
            && !h.contains("id=\"whatif-ring\"")
    );
    // No geometry, no model: the answer says so, and there are no verdicts.
    assert!(h.contains("the DDIO model could not run") && h.contains("No verdicts"));
}

#[test]
fn what_if_uses_the_observed_workload() {
    let (_dir, path) = synthetic_file(true, false, true);
    let rec = Recording::open(&path).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    let outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let w = what_if(&outcome).unwrap();
    assert_eq!(w.spec.queues, 2);
    assert_eq!(w.spec.pkt_bytes, 1514);
    assert_eq!(w.spec.geometry.size_bytes, 8 << 20);
    assert_eq!(w.spec.consumer, crate::model::spec::Consumer::Copy);
    let rx_pk: u64 = r
        .queues
        .iter()
        .filter(|q| q.dir == Dir::Rx)
        .map(|q| q.packets)
        .sum();
    assert!((w.spec.pps - rx_pk as f64 / r.meta.duration_s).abs() < 1e-6);
    assert_eq!(
        w.by_ring.iter().map(|p| p.ring).collect::<Vec<_>>(),
        WHATIF_RINGS.to_vec()
    );
    assert_eq!(
        w.by_ways.iter().map(|p| p.ddio_ways).collect::<Vec<_>>(),
        WHATIF_WAYS.to_vec()
    );
    // More ring, less DDIO hit; more ways, more hit (monotone up to sampling noise).
    let hit = |p: &GridPoint| p.io_write_hit_pct.unwrap_or(0.0);
    assert!(hit(&w.by_ring[0]) >= hit(&w.by_ring[6]));
    assert!(hit(&w.by_ways[5]) >= hit(&w.by_ways[0]));
    println!(
        "what-if: {:.2} s for {} points",
        w.elapsed_s,
        w.by_ring.len() + w.by_ways.len()
    );

    let (_dir2, none) = synthetic_file(true, false, false);
    let rec = Recording::open(&none).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    assert!(
        what_if(&crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap())
            .is_err()
    );
    let (_rec, _r, h) = page(&none);
    assert!(h.contains("id=\"whatif-absent\""));
    // Nothing to size, and the page says so rather than "nothing to change".
    assert!(h.contains("no RX traffic in the window"));
}

#[test]
fn recommendation_cards_and_the_answer_agree() {
    let (_dir, path) = synthetic_file(true, false, true);
    let rec = Recording::open(&path).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    let mut outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let crate::analysis::Outcome::Advised(a) = &mut outcome else {
        panic!("geometry")
    };
    a.recommendations = vec![Recommendation {
        kind: crate::advise::Kind::RingSize,
        target: "rx queues of <eth1>".into(),
        command: "ethtool -G eth1 rx 512".into(),
        reason: None,
        evidence: vec!["ring footprint 12 MiB > usable DDIO 4 MiB".into()],
        predicted_metric: Some("io_write_hit_pct".into()),
        predicted_before: Some(61.0),
        predicted_after: Some(98.5),
    }];
    a.no_change = None;
    let h = render_html(
        &r,
        &outcome,
        &crate::analysis::charts(&rec, &r, &outcome).unwrap(),
    );
    assert!(h.contains("class=\"card rec\""));
    assert!(h.contains("&lt;eth1&gt;"));
    let answer = &h[h.find("id=\"answer\"").unwrap()..h.find("id=\"verdicts\"").unwrap()];
    assert!(
        answer.contains(&code("ethtool -G eth1 rx 512")) && answer.contains("61.0% → 98.5%"),
        "{answer}"
    );
    assert!(!h.contains("No recommendations"));
}

#[test]
fn histogram_chart_labels_and_markers() {
    let mut hgram = [0u64; NBUCKETS];
    hgram[10] = 90; // [1.0µs, 2.0µs)
    hgram[20] = 10; // [1.0ms, 2.1ms)
    let svg = hist_chart(&hgram, Some(1500), Some(1_500_000), "t");
    assert_eq!(count(&svg, "<rect"), 2);
    assert!(svg.contains("1.02 µs") && svg.contains("ms"));
    assert!(svg.contains(">p50<") && svg.contains(">p99<"));
    assert!(hist_chart(&[0; NBUCKETS], None, None, "t").is_empty());
    assert_eq!(fmt_duration(512.0), "512 ns");
    assert_eq!(fmt_duration(4096.0), "4.10 µs");
}

/// A real recording made on the testbed (see tests/fixtures/recordings/README.md): every
/// section, and the verdicts and attribution as the JSON gives them.
#[test]
fn renders_a_testbed_recording() {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/recordings/veth-tcp.ddio");
    let (rec, r, h) = page(&p);
    assert_self_contained(&h);
    let rx: Vec<_> = r
        .queues
        .iter()
        .filter(|q| q.dir == Dir::Rx && q.packets > 0)
        .collect();
    assert!(!rx.is_empty());
    let stage_charts: usize = r.queues.iter().map(|q| q.stages.len()).sum();
    assert_eq!(count(&h, "class=\"card hist\""), stage_charts);
    assert!(count(&h, "<svg") >= stage_charts + 2 + 2);
    for id in [
        "id=\"rates-rx\"",
        "id=\"whatif-ring\"",
        "id=\"whatif-ways\"",
        "id=\"counters-absent\"",
    ] {
        assert!(h.contains(id), "missing {id}");
    }
    for q in &rx {
        assert!(h.contains(&format!("id=\"lat-rx-{}-driver_to_stack\"", q.queue)));
    }
    // AMD: no suggestion of a script that refuses it; the reason once.
    assert!(!h.contains("capture-counters.sh") && h.contains("no DDIO on this CPU; model only"));
    let outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let crate::analysis::Outcome::Advised(a) = &outcome else {
        panic!("geometry")
    };
    // The recommendation cards, or why there are none.
    assert_eq!(
        h.contains("id=\"no-recommendations\""),
        a.recommendations.is_empty()
    );
    assert_eq!(count(&h, "class=\"card rec\""), a.recommendations.len());
    let verdicts = &h[h.find("id=\"verdicts-table\"").unwrap()..];
    for v in &a.verdicts {
        assert!(verdicts.contains(&format!(
            "<td class=\"l\">{} {}</td><td class=\"l v-{}\">{}</td>",
            v.dir, v.queue, v.verdict, v.verdict
        )));
        assert!(verdicts.contains(&esc(&v.reason)));
    }
    let attribution =
        &h[h.find("id=\"attribution\"").unwrap()..h.find("id=\"recommendations\"").unwrap()];
    assert!(
        attribution.contains("predicted misses/s")
            && attribution.contains("model_prior, low confidence")
    );
    for q in &a.attribution.chosen.queues {
        assert!(
            attribution.contains(&format!(
                "{} {}</td><td>{:.1}%",
                q.dir, q.queue, q.share_pct
            )),
            "{q:?}"
        );
    }
}

/// With DDIO counters in the recording the model is fitted to them: the report shows the
/// measured, uncalibrated and calibrated write hit and the residual, the calibrated model is
/// at least as close to the measurement, and every prediction (what-if included) uses it.
#[test]
fn counters_calibrate_the_model_the_report_uses() {
    let (_dir, path) = synthetic_file(true, true, true);
    let rec = Recording::open(&path).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    let outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let crate::analysis::Outcome::Advised(a) = &outcome else {
        panic!("no model")
    };
    let c = a
        .calibration
        .as_ref()
        .expect("calibrated from the imported counters");
    let (m, u, k) = (
        c.measured_write_hit_pct.unwrap(),
        c.uncalibrated_write_hit_pct.unwrap(),
        c.calibrated_write_hit_pct.unwrap(),
    );
    println!("measured {m:.1}, uncalibrated {u:.1}, calibrated {k:.1}");
    assert!(
        (k - m).abs() <= (u - m).abs() + 0.5,
        "calibration moved away: {m} {u} {k}"
    );
    assert!((c.residual_write_pct.unwrap() - (k - m)).abs() < 1e-9);
    let w = what_if(&outcome).unwrap();
    let cur = w.by_ring.iter().find(|p| p.ring == w.spec.ring).unwrap();
    assert_eq!(
        cur.io_write_hit_pct,
        Some(k),
        "the what-if is the calibrated model"
    );
    let text = crate::report::text::render_report(&r, &outcome, &Default::default());
    assert!(
        text.contains("calibration   to the imported counters"),
        "{text}"
    );
    let h = render_html(
        &r,
        &outcome,
        &crate::analysis::charts(&rec, &r, &outcome).unwrap(),
    );
    assert!(h.contains("to the imported counters: write hit measured"));
}

/// Memory-controller counters alone calibrate the model too: reads far beyond what the network
/// can cause are another tenant's, fitted as a background load that lowers the predicted write
/// hits; reads below the network's add none and leave a positive residual. The report says
/// which.
#[test]
fn memory_controller_reads_alone_calibrate_the_model() {
    let calibration = |read_gbps: f64| {
        let (_dir, path) = synthetic_with_dram_reads(read_gbps, "imported");
        let rec = Recording::open(&path).unwrap();
        let r = crate::analysis::summary::build(&rec).unwrap();
        let outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
        let crate::analysis::Outcome::Advised(a) = &outcome else {
            panic!("no model")
        };
        let text = crate::report::text::render_report(&r, &outcome, &Default::default());
        (
            a.calibration.clone().expect("calibrated from the IMC"),
            text,
        )
    };
    let (busy, text) = calibration(10.0);
    println!("{busy:?}");
    assert_eq!(busy.measured_dram_read_gbps, Some(10.0));
    assert_eq!(
        busy.background_fit,
        crate::advise::BackgroundFit::DramExcess
    );
    assert!(busy.params.bg_lines_per_sec > 0.0);
    assert!(
        busy.calibrated_write_hit_pct.unwrap() < busy.uncalibrated_write_hit_pct.unwrap(),
        "{busy:?}"
    );
    assert!(text.contains("DRAM reads measured 10.00 GB/s"), "{text}");
    assert!(text.contains("fitted as a background load"), "{text}");
    let (quiet, text) = calibration(0.0);
    println!("{quiet:?}");
    assert_eq!(quiet.background_fit, crate::advise::BackgroundFit::Spec);
    assert_eq!(quiet.params.bg_lines_per_sec, 0.0);
    assert!(quiet.residual_dram_read_gbps.unwrap() > 0.0, "{quiet:?}");
    assert!(!text.contains("background load"), "{text}");
}

/// The page is drawn from what `analysis` computed: with the recording closed and its file
/// gone, it renders the same.
#[test]
fn renders_with_no_recording_open() {
    let (dir, path) = synthetic_file(true, true, true);
    let rec = Recording::open(&path).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    let outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let charts = crate::analysis::charts(&rec, &r, &outcome).unwrap();
    let before = render_html(&r, &outcome, &charts);
    drop(rec);
    drop(dir);
    assert!(!path.exists());
    let after = render_html(&r, &outcome, &charts);
    // The what-if's run time is the one thing measured, not recorded.
    let strip = |h: &str| {
        h.lines()
            .filter(|l| !l.contains("Run time"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&before), strip(&after));
    assert!(after.contains("id=\"miss-over-time\"") && after.contains("id=\"rates-rx\""));
}

/// Commands in the answer are in code font, each word kept whole (a narrow screen breaks
/// between words, never inside a flag); the sentence around them stays text.
#[test]
fn commands_in_the_answer_are_code_kept_whole() {
    let c = code("ddioscope recommend r.ddio --llc-mib 24.75");
    assert_eq!(
        c,
        "<code class=\"cmd\"><span class=\"w\">ddioscope</span> <span class=\"w\">recommend</span> \
         <span class=\"w\">r.ddio</span> <span class=\"w\">--llc-mib</span> <span class=\"w\">24.75</span></code>"
    );
    assert!(CSS.contains("code.cmd .w{white-space:nowrap}"));
    let s = with_commands(
        "capture DDIO counters to measure the misses: scripts/capture-counters.sh, then ddioscope import-counters",
    );
    assert_eq!(
        s,
        format!(
            "capture DDIO counters to measure the misses: {}, then {}",
            code("scripts/capture-counters.sh"),
            code("ddioscope import-counters")
        )
    );
    assert_eq!(
        with_commands("record while <it> runs"),
        "record while &lt;it&gt; runs"
    );

    // The page: a Next line's command and each Change command in code.
    let (_dir, path) = synthetic_file(true, false, true);
    let rec = Recording::open(&path).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    let mut outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let crate::analysis::Outcome::Advised(a) = &mut outcome else {
        panic!("geometry")
    };
    a.recommendations.clear();
    a.no_change = Some(crate::analysis::answer::NoChange {
        reasons: vec!["every queue fits".into()],
        next_steps: vec!["see the model's hit rate at other ring sizes: ddioscope simulate r.ddio --ring 256,512".into()],
    });
    let h = render_html(
        &r,
        &outcome,
        &crate::analysis::charts(&rec, &r, &outcome).unwrap(),
    );
    let answer = &h[h.find("id=\"answer\"").unwrap()..h.find("id=\"verdicts\"").unwrap()];
    assert!(
        answer.contains(&format!(
            "<dt>Next</dt><dd>see the model&#39;s hit rate at other ring sizes: {}</dd>",
            code("ddioscope simulate r.ddio --ring 256,512")
        )),
        "{answer}"
    );
}

/// A reason several queues share is given once, for all their rows.
#[test]
fn verdict_reasons_are_given_once_per_run_of_rows() {
    let (_dir, path) = synthetic_file(true, false, true);
    let (_rec, _r, h) = page(&path);
    let rec = Recording::open(&path).unwrap();
    let r = crate::analysis::summary::build(&rec).unwrap();
    let outcome = crate::analysis::advise_or_explain(&rec, &r, Default::default()).unwrap();
    let crate::analysis::Outcome::Advised(a) = &outcome else {
        panic!("geometry")
    };
    let table = &h[h.find("id=\"verdicts-table\"").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    let runs = a
        .verdicts
        .iter()
        .enumerate()
        .filter(|(i, v)| *i == 0 || a.verdicts[i - 1].reason != v.reason)
        .count();
    assert!(
        a.verdicts.len() > runs,
        "the synthetic queues share a reason"
    );
    assert_eq!(count(table, "class=\"l why\""), runs, "{table}");
    for v in &a.verdicts {
        assert_eq!(count(table, &format!(">{}</td>", esc(&v.reason))), {
            let mut n = 0;
            for (i, w) in a.verdicts.iter().enumerate() {
                if w.reason == v.reason && (i == 0 || a.verdicts[i - 1].reason != w.reason) {
                    n += 1;
                }
            }
            n
        });
    }
}
