//! The reports on the fixture recording and on recordings built from it in SQL: older and
//! windowed schemas, and what every report must say plainly (the answer first, verdicts with
//! reasons, where each number comes from, the JSON a tool reads).
use std::path::Path;

use crate::analysis::{self, GeometryOverrides, Outcome, Summary, VerdictKind};
use crate::model::geometry::LlcGeometry;
use crate::recording::reader::fixture::{fixture_altered, FIXTURE};
use crate::recording::Recording;
use crate::report::text::{render_advice, render_evidence, render_report, TextOptions};
use crate::report::text::{Out, DEFAULT_WIDTH};

/// The evidence section of the text report, its wrapped lines joined: what it says, not
/// where it breaks lines.
fn evidence_text(r: &Summary) -> String {
    let mut o = Out::new(DEFAULT_WIDTH);
    render_evidence(&mut o, r, &TextOptions::default());
    flat(&o)
}

/// Text with every run of whitespace as one space.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The recording, its summary and the report's outcome (the model runs).
fn reported(path: &Path) -> (Recording, Summary, Outcome) {
    let rec = Recording::open(path).expect("opens");
    let s = analysis::summary::build(&rec).expect("summary");
    let o = analysis::advise_or_explain(&rec, &s, Default::default()).expect("outcome");
    (rec, s, o)
}

/// An Intel host with a NIC that reports its rings: the fixture's traffic, its metadata
/// changed in SQL.
const INTEL_NIC: &str = "
    UPDATE meta SET value = json_set(value, '$.cpu_vendor', 'GenuineIntel', '$.cpu_model', 'Intel(R) Xeon(R) Gold 6140')
        WHERE key = 'host';
    UPDATE meta SET value = json_set(value, '$.rx_ring', 4096, '$.tx_ring', 4096, '$.rx_ring_max', 8192, '$.rss_table', 128, '$.driver', 'ice') WHERE key = 'iface';
    DELETE FROM meta WHERE key IN ('platform', 'platform_detection', 'counters_notes');";

/// Two RX queues of equal load: nothing for the recommendation engine to spread.
const BALANCED: &str = "DELETE FROM queue_intervals WHERE dir = 'rx' AND queue IN (0, 1);
    DELETE FROM stage_stats WHERE dir = 'rx' AND queue IN (0, 1);";

/// Miss samples recorded before page sampling (no out_of_subset column) read with none out.
#[test]
fn miss_table_without_out_of_subset_reads() {
    let (_dir, path) = fixture_altered(
        "DROP TABLE IF EXISTS miss_intervals;
         CREATE TABLE miss_intervals (
            interval INTEGER PRIMARY KEY, samples INTEGER NOT NULL, on_packet_buffers INTEGER NOT NULL,
            other_addr INTEGER NOT NULL, no_addr INTEGER NOT NULL, ctx_charged INTEGER NOT NULL, uncharged INTEGER NOT NULL);
         INSERT INTO miss_intervals SELECT MIN(idx), 7, 3, 2, 2, 4, 0 FROM intervals;",
    );
    let r = Recording::open(&path).expect("opens");
    let t = r.miss_totals().expect("reads").expect("one interval");
    assert_eq!(t.intervals, 1);
    let m = &t.totals;
    assert_eq!((m.samples, m.on_packet_buffers, m.out_of_subset), (7, 3, 0));
    // Nor the flow-loss counts: unknown, so no loss is claimed either way.
    assert_eq!((m.no_flow, m.queue_clamped), (None, 0));
    let s = analysis::summary::build(&r).unwrap();
    assert_eq!(s.l3miss.flow_charges_lost, None);
    // Nor the sampler's throttling: not measured, and the report claims nothing.
    assert_eq!(m.throttle, None);
    assert!(s.l3miss.throttle.is_none());
}

/// Throttle rows sum over the intervals and are set against the sampler's CPU time; one
/// interval that could not read them makes the total unknown.
#[test]
fn sampler_throttling_sums_over_intervals() {
    let table = "DROP TABLE miss_intervals;
         CREATE TABLE miss_intervals (
            interval INTEGER PRIMARY KEY, samples INTEGER NOT NULL, on_packet_buffers INTEGER NOT NULL,
            other_addr INTEGER NOT NULL, no_addr INTEGER NOT NULL, ctx_charged INTEGER NOT NULL, uncharged INTEGER NOT NULL,
            throttles INTEGER, throttled_ns INTEGER, throttle_records_lost INTEGER);
         INSERT OR REPLACE INTO meta(key, value) VALUES ('miss_sampler_cpus', '2');";
    let (_dir, path) = fixture_altered(&format!(
        "{table}
         INSERT INTO miss_intervals(interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged,
                                    throttles,throttled_ns,throttle_records_lost)
         SELECT idx, 10, 0, 0, 10, 10, 0, 3, 40000000, 0 FROM intervals ORDER BY idx LIMIT 2;"
    ));
    let r = Recording::open(&path).expect("opens");
    let s = analysis::summary::build(&r).unwrap();
    let t = s.l3miss.throttle.as_ref().expect("measured");
    assert_eq!((t.throttles, t.records_lost), (6, 0));
    assert!((t.stopped_ms - 80.0).abs() < 1e-9);
    let want = 100.0 * 0.080 / (2.0 * r.duration_s());
    assert!(
        (t.stopped_pct.expect("cpus known") - want).abs() < 1e-9,
        "{t:?} vs {want}"
    );
    let text = evidence_text(&s);
    assert!(
        text.contains("sampler throttled by the kernel 6 times, stopped 80.0 ms"),
        "{text}"
    );

    let (_dir2, path) = fixture_altered(&format!(
        "{table}
         INSERT INTO miss_intervals(interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged,
                                    throttles,throttled_ns,throttle_records_lost)
         SELECT idx, 10, 0, 0, 10, 10, 0, CASE WHEN idx = (SELECT MIN(idx) FROM intervals) THEN 3 END, 40000000, 0
         FROM intervals ORDER BY idx LIMIT 2;"
    ));
    let r = Recording::open(&path).expect("opens");
    assert!(analysis::summary::build(&r)
        .unwrap()
        .l3miss
        .throttle
        .is_none());
}

/// A recording made in attribution windows: the joins from before their window are summed,
/// the windows are described, the sampler's measured time sets the duty the estimates scale
/// by, and the throttled share is of that time.
#[test]
fn windowed_recordings_report_their_windows() {
    let (_dir, path) = fixture_altered(
        "DROP TABLE miss_intervals;
         CREATE TABLE miss_intervals (
            interval INTEGER PRIMARY KEY, samples INTEGER NOT NULL, on_packet_buffers INTEGER NOT NULL,
            other_addr INTEGER NOT NULL, no_addr INTEGER NOT NULL, ctx_charged INTEGER NOT NULL, uncharged INTEGER NOT NULL,
            throttles INTEGER, throttled_ns INTEGER, throttle_records_lost INTEGER, before_window INTEGER NOT NULL DEFAULT 0,
            sampled_ns INTEGER);
         INSERT OR REPLACE INTO meta(key, value) VALUES ('miss_sampler_cpus', '2'), ('miss_duty', '16'),
            ('miss_cycle_ms', '1000'), ('miss_window_ms', '62.500'), ('miss_warmup_ms', '10.000');
         INSERT INTO miss_intervals(interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged,
                                    throttles,throttled_ns,throttle_records_lost,before_window,sampled_ns)
         SELECT idx, 10, 4, 0, 6, 6, 0, 1, 1000000, 0, 2, dur_ns / 20 FROM intervals ORDER BY idx LIMIT 2;",
    );
    let r = Recording::open(&path).expect("opens");
    let s = analysis::summary::build(&r).unwrap();
    let l = &s.l3miss;
    assert_eq!(
        (l.duty, l.before_window, l.window_ms, l.cycle_ms),
        (16, 4, Some(62.5), Some(1000.0))
    );
    // The two intervals sampled 1/20 of their time each (not the nominal 1/16).
    let c = rusqlite::Connection::open(&path).unwrap();
    let span: i64 = c
        .query_row(
            "SELECT SUM(dur_ns) FROM (SELECT dur_ns FROM intervals ORDER BY idx LIMIT 2)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        (l.duty_measured.expect("measured") - 20.0).abs() < 0.01,
        "{:?}",
        l.duty_measured
    );
    let sampled_s = l.sampled_ms.expect("measured") / 1e3;
    assert!((sampled_s - span as f64 / 20.0 / 1e9).abs() < 1e-6);
    let want = 100.0 * 0.002 / (2.0 * sampled_s);
    assert!(
        (l.throttle
            .as_ref()
            .expect("measured")
            .stopped_pct
            .expect("cpus known")
            - want)
            .abs()
            < 1e-6
    );
    let text = evidence_text(&s);
    assert!(
        text.contains("attribution in windows, --duty 16: sampler 62.5 ms of every 1.00 s after a 10.0 ms warm-up")
            && text.contains("1/20.00 of the recording")
            && text.contains("4 joined samples on pages last seen before their window"),
        "{text}"
    );
}

/// Depth of parentheses on a line: a plain report never nests them.
fn paren_depth(line: &str) -> i32 {
    let (mut d, mut max) = (0, 0);
    for c in line.chars() {
        match c {
            '(' => {
                d += 1;
                max = max.max(d);
            }
            ')' => d -= 1,
            _ => {}
        }
    }
    max
}

/// The rules every text report keeps: the default width, no nested parentheses, no line said
/// twice in a row, one duration style.
fn assert_hygiene(text: &str) {
    assert_hygiene_at(text, DEFAULT_WIDTH)
}

fn assert_hygiene_at(text: &str, width: usize) {
    let mut prev = "";
    for line in text.lines() {
        assert!(
            line.chars().count() <= width,
            "{} columns: {line}",
            line.chars().count()
        );
        assert!(paren_depth(line) <= 1, "nested parentheses: {line}");
        assert!(line.trim().is_empty() || line != prev, "said twice: {line}");
        // Durations come from units::fmt_duration: "14.5 µs", never "14.5us" or "7242.0us".
        assert!(!has_ascii_micro(line), "duration style: {line}");
        prev = line;
    }
}

/// A number directly followed by "us" or "ns" with no space: the old duration styles.
fn has_ascii_micro(line: &str) -> bool {
    let b = line.as_bytes();
    b.windows(3)
        .any(|w| w[0].is_ascii_digit() && (w[1..] == *b"us" || w[1..] == *b"ns"))
}

/// On a host without DDIO and a driver without rings (the fixture: AMD, veth) the report
/// leads with the answer and says plainly what it rests on.
#[test]
fn the_answer_comes_first_and_says_what_it_rests_on() {
    let (_rec, s, outcome) = reported(Path::new(FIXTURE));
    let raw = render_report(&s, &outcome, &TextOptions::default());
    assert_hygiene(&raw);
    let text = flat(&raw);
    let at = |needle: &str| {
        raw.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in\n{raw}"))
    };
    // The answer, then the verdicts, then the evidence.
    assert!(
        at("\nAnswer\n") < at("\nPer-queue verdicts")
            && at("\nPer-queue verdicts") < at("\nEvidence\n"),
        "{raw}"
    );
    assert!(at("\nEvidence\n") < at("\nRX queues"), "{raw}");
    // Enum values as the JSON spells them.
    assert!(
        !text.contains("Leaky") && !text.contains("Rx queue") && !text.contains("AtRisk"),
        "{raw}"
    );
    // No DDIO here: said, and no suggestion of a script that refuses this CPU.
    assert!(text.contains("no DDIO on this CPU; model only"), "{raw}");
    // The platform's reason is said once in the counters section, not in its heading too.
    let counters = &raw[at("\nSocket DDIO counters")..at("\nL3-miss samples")];
    assert_eq!(
        counters.matches("no DDIO uncore events").count(),
        1,
        "{counters}"
    );
    assert!(!text.contains("capture-counters.sh"), "{raw}");
    // Model-prior attribution: shares and predicted misses per second, and no note about a
    // measured total when nothing was measured.
    assert!(
        text.contains("predicted misses/s") && text.contains("of the predicted misses"),
        "{raw}"
    );
    assert!(!text.contains("measured total includes"), "{raw}");
    // The answer's changes are the recommendations, each with its predicted effect.
    let Outcome::Advised(a) = &outcome else {
        panic!("the fixture has a geometry")
    };
    for r in &a.recommendations {
        assert!(text.contains(&format!("Change {}", r.command)), "{raw}");
    }
    // A drops column, the in-flight states explained in one line.
    assert!(
        raw.lines()
            .any(|l| l.contains("queue") && l.contains("drops") && l.contains("pkt/s")),
        "{raw}"
    );
    assert!(
        text.contains("in-flight states evicted") && text.contains("took the state's slot"),
        "{raw}"
    );
    // Where each number comes from: an old recording counted everything, all the time.
    assert!(
        text.contains("exact: every packet") && text.contains("exact: every skb counted"),
        "{raw}"
    );
    assert!(text.contains("timed all the time"), "{raw}");
    // Every verdict has its reason.
    assert!(!a.verdicts.is_empty() && a.verdicts.iter().all(|v| !v.reason.is_empty()));
    // TX queues on a device with no rings and no prediction: unknown, not leaky.
    for v in a
        .verdicts
        .iter()
        .filter(|v| v.dir == crate::snapshot::Dir::Tx)
    {
        assert_eq!(v.verdict, VerdictKind::Unknown, "{v:?}");
        assert!(
            v.reason.contains("no TX ring size") || v.reason.contains("too little traffic"),
            "{v:?}"
        );
    }
    // An RX verdict names the socket's rings together, the cause of "leaky" when one ring fits.
    let rx = a
        .verdicts
        .iter()
        .find(|v| v.dir == crate::snapshot::Dir::Rx)
        .expect("rx verdicts");
    assert!(
        rx.reason.contains("the socket's RX rings together need"),
        "{}",
        rx.reason
    );
}

/// No recommendation: the report says why, and what to do next.
#[test]
fn empty_recommendations_are_explained() {
    let (_dir, path) = fixture_altered(BALANCED);
    let (_rec, s, outcome) = reported(&path);
    let Outcome::Advised(a) = &outcome else {
        panic!("the fixture has a geometry")
    };
    assert!(a.recommendations.is_empty(), "{:?}", a.recommendations);
    let n = a
        .no_change
        .as_ref()
        .expect("no recommendations, so a reason");
    assert!(n.reasons.iter().any(|r| r.contains("has no DDIO")), "{n:?}");
    assert!(
        n.reasons
            .iter()
            .any(|r| r.contains("veth reports no RX ring size")),
        "{n:?}"
    );
    assert!(
        n.next_steps
            .iter()
            .any(|s| s.contains("ddioscope simulate"))
            && n.next_steps.iter().any(|s| s.contains("--llc-mib")),
        "{n:?}"
    );
    let raw = render_report(&s, &outcome, &TextOptions::default());
    assert_hygiene(&raw);
    let text = flat(&raw);
    assert!(
        text.contains("Change nothing to run: this CPU has no DDIO"),
        "{raw}"
    );
    assert!(
        text.contains("none: veth reports no RX ring size")
            && text.contains("next: see the model's hit rate"),
        "{raw}"
    );
}

/// A host without DDIO: the answer says so first, names the Intel LLC it predicts for and why
/// that one, calls the queues "would leak", gives a queue with a handful of packets no
/// verdict, and never suggests the command just run.
#[test]
fn no_ddio_is_said_first_and_next_does_not_loop() {
    let (_dir, path) = fixture_altered(BALANCED);
    let (rec, s, outcome) = reported(&path);
    let Outcome::Advised(a) = &outcome else {
        panic!("the fixture has a geometry")
    };
    let raw = render_advice(&s, a, 100);
    let answer = &raw[raw.find("\nAnswer\n").unwrap() + 8..];
    let first = answer.lines().next().unwrap();
    assert!(first.starts_with("  DDIO      none on this host"), "{raw}");
    let text = flat(&raw);
    assert!(
        text.contains("preset skx6140, Xeon Gold 6140 (Skylake-SP): 24.75 MiB LLC, 11 ways, 2 DDIO ways; picked as"),
        "{raw}"
    );
    assert!(!text.contains("Leaking "), "{raw}");
    assert_eq!(
        a.geometry.size_bytes,
        LlcGeometry::skx_gold_6140().size_bytes
    );
    for v in &a.verdicts {
        if v.reason.contains("too little traffic") {
            assert_eq!(v.verdict, VerdictKind::Unknown);
            assert_eq!(v.predicted_write_hit_pct, None);
        }
    }
    // The model flags given: the next steps do not suggest them again.
    let o = GeometryOverrides {
        llc_mib: Some(24.75),
        llc_ways: Some(11),
        ddio_ways: Some(2),
    };
    let Outcome::Advised(b) = crate::analysis::advise_or_explain(&rec, &s, o).unwrap() else {
        panic!("geometry")
    };
    let n = b.no_change.expect("no change");
    assert!(
        n.next_steps
            .iter()
            .all(|x| !x.contains("--llc-mib") && !x.contains("ddioscope recommend")),
        "{n:?}"
    );
    assert!(
        b.llc_origin
            .starts_with("--llc-mib/--llc-ways on the command line"),
        "{}",
        b.llc_origin
    );
}

/// `recommend` leads with the same answer and gives the attribution one line.
#[test]
fn recommend_does_not_repeat_the_attribution() {
    let (_rec, s, outcome) = reported(Path::new(FIXTURE));
    let Outcome::Advised(a) = &outcome else {
        panic!("the fixture has a geometry")
    };
    let raw = render_advice(&s, a, DEFAULT_WIDTH);
    assert_hygiene(&raw);
    let text = flat(&raw);
    assert!(
        raw.contains("\nAnswer\n") && text.contains("Attribution: model_prior, low confidence"),
        "{raw}"
    );
    assert!(
        !text.contains("95% interval") && !text.contains("predicted misses/s"),
        "{text}"
    );
    assert_eq!(text.matches("not available").count(), 0, "{text}");
}

/// On an Intel host whose NIC reports its rings, the counters' next step is the capture
/// script, and the answer's changes are the recommendations.
#[test]
fn intel_hosts_are_pointed_at_the_counters() {
    let (_dir, path) = fixture_altered(INTEL_NIC);
    let (_rec, s, outcome) = reported(&path);
    assert_eq!(s.counters.cpu_has_ddio, None);
    assert!(
        s.counters
            .next_step
            .as_deref()
            .is_some_and(|n| n.contains("capture-counters.sh")),
        "{:?}",
        s.counters
    );
    let raw = render_report(&s, &outcome, &TextOptions::default());
    assert_hygiene(&raw);
    let text = flat(&raw);
    assert!(!text.contains("no DDIO on this CPU"), "{text}");
    let Outcome::Advised(a) = &outcome else {
        panic!("geometry")
    };
    let answer = analysis::answer(&s, &outcome);
    assert_eq!(
        answer
            .changes
            .iter()
            .map(|c| c.command.as_str())
            .collect::<Vec<_>>(),
        a.recommendations
            .iter()
            .map(|r| r.command.as_str())
            .collect::<Vec<_>>()
    );
    assert_eq!(answer.no_change.is_some(), a.recommendations.is_empty());
    for c in &answer.changes {
        assert!(
            text.contains(c.command.lines().next().unwrap_or_default()),
            "{text}"
        );
    }
    // Rings known: no queue is unknown for want of one (only for too little traffic).
    assert!(
        a.verdicts
            .iter()
            .all(|v| v.verdict != VerdictKind::Unknown || v.reason.contains("too little traffic")),
        "{:?}",
        a.verdicts
    );
    assert!(a.verdicts.iter().all(|v| !v.ring_assumed));
}

/// A queue that carried nothing is listed, not left out: queue 0 here.
#[test]
fn idle_queues_are_shown() {
    let (_dir, path) = fixture_altered(
        "DELETE FROM queue_intervals WHERE queue = 0; DELETE FROM stage_stats WHERE queue = 0;
         DELETE FROM stage_hist WHERE queue = 0; DELETE FROM napi_hist WHERE queue = 0;",
    );
    let r = Recording::open(&path).unwrap();
    let s = analysis::summary::build(&r).unwrap();
    for dir in [crate::snapshot::Dir::Rx, crate::snapshot::Dir::Tx] {
        let q0 = s
            .queues
            .iter()
            .find(|q| q.dir == dir && q.queue == 0)
            .expect("queue 0 listed");
        assert_eq!(q0.packets, 0);
    }
    let mut raw = Out::new(DEFAULT_WIDTH);
    render_evidence(&mut raw, &s, &TextOptions::default());
    assert!(
        raw.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["0", "idle"]),
        "{}",
        raw.as_str()
    );
}

/// A `--detail counts` recording attached no detail hook: its hooks line says so and why,
/// in the text and on the page, rather than standing empty.
#[test]
fn a_counts_recording_says_why_it_lists_no_detail_hook() {
    let (_dir, path) = fixture_altered(
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('detail', 'counts'), ('hooks', '[]');",
    );
    let (rec, s, outcome) = reported(&path);
    assert!(s.meta.hooks.is_empty());
    let text = evidence_text(&s);
    assert!(
        text.contains("hooks no detail hook: recorded with --detail counts"),
        "{text}"
    );
    let charts = analysis::charts::charts(&rec, &s, &outcome).expect("charts");
    let page = crate::report::html::render_html(&s, &outcome, &charts);
    assert!(
        page.contains("no detail hook: recorded with --detail counts"),
        "the page lists no hook and says why"
    );
}

/// A recording from the tiered recorder says which tier each number came from: counts exact
/// at tcx, flows estimated from sampled skbs with their error, stages timed in windows.
#[test]
fn every_number_says_where_it_came_from() {
    let (_dir, path) = fixture_altered(
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('rx_counts', 'tcx'), ('detail', 'windows'),
            ('flow_sample_bytes', '65536'), ('window_ms', '62.5'), ('window_cycle_ms', '1000.0'), ('stage_every', '4');
         ALTER TABLE intervals ADD COLUMN detail_ns INTEGER;
         UPDATE intervals SET detail_ns = 12500000;
         ALTER TABLE flows ADD COLUMN samples INTEGER; ALTER TABLE flows ADD COLUMN bytes_var INTEGER;
         UPDATE flows SET samples = MAX(1, bytes / 65536), bytes_var = bytes * 65536;",
    );
    let r = Recording::open(&path).unwrap();
    let s = analysis::summary::build(&r).unwrap();
    let t = &s.tiers;
    assert_eq!(
        (t.counts.kind, t.flows.kind, t.stages.kind),
        ("exact", "estimated", "windowed")
    );
    assert!(
        t.counts.text.contains("tier 0") && t.counts.text.contains("tcx"),
        "{}",
        t.counts.text
    );
    assert!(
        t.flows.text.contains("probability d/65536") && t.flows.every == Some(65536),
        "{}",
        t.flows.text
    );
    assert!(
        t.stages.text.contains("in windows of 62.5 ms every 1.00 s")
            && t.stages.text.contains("1 in 4 packets"),
        "{}",
        t.stages.text
    );
    // 15 intervals × 12.5 ms of detail.
    assert!(
        t.stages.text.contains("188 ms of 3.00 s"),
        "{}",
        t.stages.text
    );
    let big = s.flows.iter().max_by_key(|f| f.bytes).unwrap();
    let err = 100.0 * big.bytes_error.expect("estimated") as f64 / big.bytes as f64;
    assert!(err > 0.0 && big.samples.is_some(), "{big:?}");
    let text = evidence_text(&s);
    assert!(
        text.contains("±95%") && text.contains(&format!("±{err:.1}%")),
        "{text}"
    );
}

/// `report --from/--to`: the window's numbers, and the report says which part it covers.
#[test]
fn a_window_reports_its_part() {
    use crate::recording::window::TimeSpec;
    let mut r = Recording::open(Path::new(FIXTURE)).unwrap();
    let whole = analysis::summary::build(&r).unwrap();
    r.set_window(Some(TimeSpec::Offset(1.0)), Some(TimeSpec::Offset(2.0)))
        .unwrap();
    let part = analysis::summary::build(&r).unwrap();
    assert!(
        !part.window.whole && part.meta.intervals == 5,
        "{:?}",
        part.window
    );
    let rx = |s: &Summary| {
        s.queues
            .iter()
            .filter(|q| q.dir == crate::snapshot::Dir::Rx)
            .map(|q| q.packets)
            .sum::<u64>()
    };
    assert!(rx(&part) > 0 && rx(&part) < rx(&whole));
    let mut o = Out::new(DEFAULT_WIDTH);
    crate::report::text::render_evidence(&mut o, &part, &TextOptions::default());
    let outcome = analysis::advise_or_explain(&r, &part, Default::default()).unwrap();
    let text = flat(&render_report(&part, &outcome, &TextOptions::default()));
    assert!(
        text.contains("window: 1.00 s to 2.00 s from the start"),
        "{text}"
    );
}

/// The JSON a tool reads: versions, rounded floats, units as suffixes, and the answer
/// agreeing with the recommendations and verdicts beside it.
#[test]
fn json_for_tools() {
    let (_dir, path) = fixture_altered(INTEL_NIC);
    let (_rec, s, outcome) = reported(&path);
    let text = crate::report::json::FullReport::new(&s, &outcome)
        .to_json()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema_version"], crate::report::json::SCHEMA_VERSION);
    assert_eq!(v["ddioscope_version"], env!("CARGO_PKG_VERSION"));
    fn walk(v: &serde_json::Value, path: &str, f: &mut dyn FnMut(&str, &serde_json::Value)) {
        f(path, v);
        match v {
            serde_json::Value::Object(o) => o
                .iter()
                .for_each(|(k, x)| walk(x, &format!("{path}.{k}"), f)),
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, &format!("{path}[]"), f)),
            _ => {}
        }
    }
    walk(&v, "", &mut |path, x| {
        let key = path.rsplit('.').next().unwrap_or_default();
        // Units are lower-case suffixes: no MBps next to mbps.
        assert!(
            !key.chars().any(|c| c.is_ascii_uppercase()) || key.contains(':'),
            "{path}"
        );
        assert!(!key.ends_with("mbps") && key != "pps", "{path}");
        if let Some(f) = x.as_f64().filter(|_| x.is_f64()) {
            if f.fract() != 0.0 {
                let digits = format!("{:e}", f.abs())
                    .split('e')
                    .next()
                    .unwrap()
                    .replace('.', "")
                    .len();
                assert!(digits <= 4, "{path} = {f}: more digits than it can mean");
            }
        }
    });
    let q = &v["queues"][0];
    assert!(
        q.get("packets_per_s").is_some() && q.get("mbit_per_s").is_some(),
        "{q}"
    );
    let changes: Vec<&str> = v["answer"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    let recs: Vec<&str> = v["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    assert_eq!(changes, recs);
    let leaking: Vec<(String, u64)> = v["answer"]["leaking"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["dir"].as_str().unwrap().to_string(),
                l["queue"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<(String, u64)> = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| matches!(x["verdict"].as_str(), Some("leaky" | "at_risk")))
        .map(|x| {
            (
                x["dir"].as_str().unwrap().to_string(),
                x["queue"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut got = leaking.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(v["answer"]["method"], v["attribution"]["method"]);
    assert_eq!(v["answer"]["confidence"], v["attribution"]["confidence"]);
}

/// The leaking queues in one line: one verdict said once, mixed verdicts said per queue, and
/// the reason is the most-missed queue's.
#[test]
fn leaking_queues_say_their_verdicts() {
    use crate::analysis::answer::{Answer, LeakingQueue};
    use crate::snapshot::Dir;
    let q = |queue, verdict| LeakingQueue {
        dir: Dir::Rx,
        queue,
        verdict,
        share_pct: None,
        tied: false,
    };
    let mut a = Answer {
        ddio: None,
        leaking: vec![q(1, VerdictKind::Leaky), q(0, VerdictKind::Leaky)],
        unknown: 0,
        top_flows: Vec::new(),
        method: crate::attribution::Method::ModelPrior,
        confidence: crate::attribution::Confidence::Low,
        evidence: String::new(),
        changes: Vec::new(),
        no_change: None,
        model_unavailable: None,
    };
    let name = |d: Dir, n: u32| format!("{d} {n}");
    assert_eq!(
        crate::report::words::leaking_line(&a, "WHY", name),
        "rx 1, rx 0: leaky, WHY"
    );
    a.leaking.push(q(2, VerdictKind::AtRisk));
    assert_eq!(
        crate::report::words::leaking_line(&a, "WHY", name),
        "rx 1 leaky, rx 0 leaky, rx 2 at_risk; rx 1: WHY"
    );
    // Within the model's spread: tied, not ranked.
    a.leaking.truncate(2);
    a.leaking[1].tied = true;
    assert_eq!(
        crate::report::words::leaking_line(&a, "WHY", name),
        "rx 1 = rx 0 (= tied: closer than the model's run-to-run spread): leaky, WHY"
    );
}

/// One computation, one answer: the per-queue predictions, the what-if rows at the recorded
/// ring and ways (both curves), `simulate FILE`'s point and the recommendations' "before"
/// are the same simulation, and the what-if footprint is the per-queue view's socket total.
#[test]
fn per_queue_what_if_and_recommendations_give_one_answer() {
    for (name, sql) in [
        ("as recorded", ""),
        ("an Intel NIC with 4096-entry rings", INTEL_NIC),
    ] {
        let (_dir, path) = fixture_altered(sql);
        let (_rec, s, o) = reported(&path);
        let Outcome::Advised(a) = &o else {
            panic!("{name}: no model")
        };
        let spec = a.run.spec().expect("RX traffic").clone();
        let (by_ring, by_ways) = a.run.what_if(
            &crate::analysis::charts::WHATIF_RINGS,
            &crate::analysis::charts::WHATIF_WAYS,
        );
        let at = |pts: &[crate::model::spec::GridPoint]| {
            pts.iter()
                .find(|p| p.ring == spec.ring && p.ddio_ways == spec.geometry.ddio_ways)
                .cloned()
                .expect("the recorded point")
        };
        let point = at(&by_ring);
        assert_eq!(point, at(&by_ways), "{name}");
        assert_eq!(
            vec![point.clone()],
            a.run.grid(&[], &[]),
            "{name}: simulate FILE"
        );
        assert_eq!(
            point.footprint_bytes, a.model.socket.rx_footprint_bytes,
            "{name}"
        );
        // The per-queue write hits, weighted by each queue's packets, are the point's total.
        let (mut sum, mut n) = (0.0, 0.0);
        for q in a
            .model
            .queues
            .iter()
            .filter(|q| q.predicted_write_hit_pct.is_some())
        {
            let pk = s
                .totals
                .iter()
                .find(|t| {
                    (t.dir == crate::snapshot::Dir::Rx)
                        == (q.dir == crate::model::analytic::Dir::Rx)
                        && t.queue == q.queue
                })
                .map_or(0, |t| t.packets) as f64;
            sum += pk * q.predicted_write_hit_pct.unwrap_or(0.0);
            n += pk;
        }
        let total = point.io_write_hit_pct.expect("write hit");
        assert!(
            n > 0.0 && (sum / n - total).abs() < 0.3,
            "{name}: per-queue {:.2} vs what-if {total:.2}",
            sum / n
        );
        let mut compared = 0;
        for r in &a.recommendations {
            let metric = r.predicted_metric.as_deref().unwrap_or("");
            let want = match r.kind.as_str() {
                "ring_size" => point.io_write_hit_pct,
                "spread_load" if metric.starts_with("cpu_read") => point.cpu_read_hit_pct,
                _ => continue,
            };
            assert_eq!(
                r.predicted_before,
                want.map(|v| (v * 10.0).round() / 10.0),
                "{name}: {} before",
                r.kind
            );
            compared += 1;
        }
        assert!(
            sql.is_empty() || compared > 0,
            "{name}: no recommendation to compare: {:?}",
            a.recommendations
        );
    }
}

/// Every line of `report` and `recommend` fits the width asked for (the terminal's), not a
/// fixed 120 columns, and says the same words at any width.
#[test]
fn text_fits_the_width_it_is_given() {
    let (_rec, s, outcome) = reported(Path::new(FIXTURE));
    let Outcome::Advised(a) = &outcome else {
        panic!("the fixture has a geometry")
    };
    for width in [80, 100, 132] {
        let opt = TextOptions {
            width,
            ..Default::default()
        };
        let report = render_report(&s, &outcome, &opt);
        assert_hygiene_at(&report, width);
        assert_hygiene_at(&render_advice(&s, a, width), width);
        // Wrapping moves words, never drops them.
        assert_eq!(
            flat(&report),
            flat(&render_report(
                &s,
                &outcome,
                &TextOptions {
                    width: 400,
                    ..Default::default()
                }
            ))
            .replace(" \\ ", " "),
        );
    }
}

/// Renderers format what `analysis` built: no renderer module names the model or the
/// recording (the HTML page's series and what-if curves come from `analysis::charts`).
#[test]
fn renderers_reach_neither_the_model_nor_the_recording() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/report");
    let mut files = vec![dir.clone()];
    let mut checked = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                files.push(e.path());
            }
            continue;
        }
        // Tests open recordings to build what they render.
        if p.file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with("tests.rs"))
            || p.extension().is_none_or(|x| x != "rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            for banned in ["crate::model", "crate::recording", "Recording", "ModelRun"] {
                assert!(
                    !l.contains(banned),
                    "{}:{}: a renderer names {banned}: {line}",
                    p.display(),
                    n + 1
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 6, "{checked} renderer files");
}
