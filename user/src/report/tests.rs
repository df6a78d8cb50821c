//! Older and windowed recordings, through the summary to the text report.
use crate::recording::reader::fixture::fixture_altered;
use crate::recording::Recording;
use crate::snapshot::MissSnapshot;

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
    let m: Vec<&MissSnapshot> = r.snapshots.iter().filter_map(|s| s.misses.as_ref()).collect();
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].samples, m[0].on_packet_buffers, m[0].out_of_subset), (7, 3, 0));
    // Nor the flow-loss counts: unknown, so no loss is claimed either way.
    assert_eq!((m[0].no_flow, m[0].queue_clamped), (None, 0));
    assert_eq!(crate::analysis::summary::build(&r).l3miss.flow_charges_lost, None);
    // Nor the sampler's throttling: not measured, and the report claims nothing.
    assert_eq!(m[0].throttle, None);
    assert!(crate::analysis::summary::build(&r).l3miss.throttle.is_none());
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
    let t = crate::analysis::summary::build(&r).l3miss.throttle.expect("measured");
    assert_eq!((t.throttles, t.records_lost), (6, 0));
    assert!((t.stopped_ms - 80.0).abs() < 1e-9);
    let want = 100.0 * 0.080 / (2.0 * r.duration_s());
    assert!((t.stopped_pct.expect("cpus known") - want).abs() < 1e-9, "{t:?} vs {want}");
    let text = crate::report::render_text(&crate::analysis::summary::build(&r), 10);
    assert!(text.contains("sampler throttled by the kernel 6 times, stopped 80.0 ms"), "{text}");

    let (_dir2, path) = fixture_altered(&format!(
        "{table}
         INSERT INTO miss_intervals(interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged,
                                    throttles,throttled_ns,throttle_records_lost)
         SELECT idx, 10, 0, 0, 10, 10, 0, CASE WHEN idx = (SELECT MIN(idx) FROM intervals) THEN 3 END, 40000000, 0
         FROM intervals ORDER BY idx LIMIT 2;"
    ));
    let r = Recording::open(&path).expect("opens");
    assert!(crate::analysis::summary::build(&r).l3miss.throttle.is_none());
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
    let l = crate::analysis::summary::build(&r).l3miss;
    assert_eq!((l.duty, l.before_window, l.window_ms, l.cycle_ms), (16, 4, Some(62.5), Some(1000.0)));
    // The two intervals sampled 1/20 of their time each (not the nominal 1/16).
    let span: u64 = r.snapshots.iter().take(2).map(|s| s.dur_ns).sum();
    assert!((l.duty_measured.expect("measured") - 20.0).abs() < 0.01, "{:?}", l.duty_measured);
    let sampled_s = l.sampled_ms.expect("measured") / 1e3;
    assert!((sampled_s - span as f64 / 20.0 / 1e9).abs() < 1e-6);
    let want = 100.0 * 0.002 / (2.0 * sampled_s);
    assert!((l.throttle.expect("measured").stopped_pct.expect("cpus known") - want).abs() < 1e-6);
    let text = crate::report::render_text(&crate::analysis::summary::build(&r), 10);
    assert!(
        text.contains("attribution in windows (--miss-duty 16): sampler 62.5 ms of every 1000.0 ms after a 10.0 ms warm-up")
            && text.contains("1/20.00 of the recording")
            && text.contains("4 joined samples on pages last seen before their window"),
        "{text}"
    );
}
