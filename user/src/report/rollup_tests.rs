//! Rollups against raw intervals: a recording made for it (2.5 hours of 5 s intervals, every
//! per-interval table filled, a minute and an hour left open at the end) reads and reports the
//! same through its per-minute and per-hour rollups as from its raw intervals, over the whole
//! run and windows whose ends fall inside minutes; built later (`backfill`) they are the same
//! rows the recorder wrote; once raw intervals are dropped the whole run still reads; and the
//! recorder's key-clustered tables read as the older rowid layout of the same rows did.
use std::path::{Path, PathBuf};

use crate::analysis;
use crate::recording::reader::{Recording, Rollups};
use crate::recording::window::TimeSpec;
use crate::recording::writer::{CounterRow, Writer};
use crate::report::json::FullReport;
use crate::report::text::{render_report, TextOptions};
use crate::snapshot::{
    BufMapCounters, Dir, MissSnapshot, QueueCounters, SamplerThrottle, Snapshot, NAPI_BUCKETS,
    NBUCKETS,
};

const DUR_NS: u64 = 5_000_000_000;
const INTERVALS: u64 = 1800;
/// Not on a minute: the first and last minutes are partial.
const START_NS: u64 = 7_237_000_000_000 + 17_000_000_000;

fn snapshot(i: u64) -> Snapshot {
    let v = |m: u64| (i * 7919 + m * 104_729) % 1000;
    let mut queues = Vec::new();
    for (dir, q) in [(Dir::Rx, 0), (Dir::Rx, 1), (Dir::Tx, 0)] {
        let mut c = QueueCounters::new(dir, q);
        c.packets = v(q as u64 + 1) * 100 + 1;
        c.bytes = c.packets * 1448;
        c.napi_polls = v(3) + 1;
        c.napi_work = c.packets;
        c.napi_budget_exhausted = v(4) % 7;
        c.drops = v(5) % 3;
        c.handups = v(6) % 50;
        c.frees = c.handups / 2;
        c.unended = c.handups - c.frees;
        let life = dir.lifetime_stage();
        // Some intervals time nothing (as between detail windows).
        if !i.is_multiple_of(3) {
            for st in [0, life] {
                c.stage_count[st] = v(7 + st as u64) % 40 + 1;
                c.stage_sum_ns[st] = c.stage_count[st] * (2000 + v(11) * 13);
                c.stage_max_ns[st] = 4000 + v(12) * 29;
                c.stage_hist[st][(10 + v(13) % 8) as usize] = c.stage_count[st];
            }
        }
        // NAPI polls are the RX queues' (the table has no direction).
        if dir == Dir::Rx {
            c.napi_work_hist[(v(14) % NAPI_BUCKETS as u64) as usize] = c.napi_polls;
        }
        queues.push(c);
    }
    let mut age_hist = vec![0; NBUCKETS];
    age_hist[(v(15) % NBUCKETS as u64) as usize] = v(16) % 9;
    Snapshot {
        index: i,
        t_ns: START_NS + (i + 1) * DUR_NS,
        dur_ns: DUR_NS,
        queues,
        detail_ns: Some(DUR_NS / 32 + v(17)),
        misses: Some(MissSnapshot {
            samples: v(18) % 20,
            on_packet_buffers: v(19) % 10,
            other_addr: 1,
            no_addr: 2,
            ctx_charged: 3,
            uncharged: v(20) % 4,
            no_flow: Some(v(21) % 2),
            sampled_ns: Some(DUR_NS / 2),
            // The throttle log is missing from one interval: its sums then stand for none.
            throttle: (i != 77).then_some(SamplerThrottle {
                throttles: v(22) % 3,
                throttled_ns: 1000,
                records_lost: 0,
            }),
            age_hist,
            queues: vec![(Dir::Rx, 0, v(23) % 5, v(24) % 5)],
            buf: BufMapCounters {
                linear_pages: v(25),
                frag_pages: v(26),
                // Read on some intervals only: the last one read is reported.
                entries: i.is_multiple_of(7).then_some(v(27)),
                ..Default::default()
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn counters(i: u64) -> Vec<CounterRow> {
    // Whole numbers, so a sum is exact in any order.
    [
        ("cha", "UNC_CHA_TOR_INSERTS.IO_ITOM"),
        ("imc", "UNC_M_CAS_COUNT.RD"),
    ]
    .into_iter()
    .filter(|_| i % 4 != 1)
    .map(|(pmu, event)| CounterRow {
        t_ns: START_NS + (i + 1) * DUR_NS,
        socket: 0,
        pmu: pmu.into(),
        event: event.into(),
        value: ((i * 31) % 977) as f64,
        raw: (i * 31) % 977,
        enabled_ns: DUR_NS,
        running_ns: DUR_NS,
        source: "live".into(),
    })
    .collect()
}

/// The recording, written as the recorder writes one (interval, then its counters); its last
/// minute and hour left open (cut off) unless `close`.
fn made(dir: &Path, close: bool) -> PathBuf {
    let path = dir.join("made.ddio");
    let fixture = rusqlite::Connection::open(crate::recording::reader::fixture::FIXTURE).unwrap();
    let mut w = Writer::create(&path, false).unwrap();
    let mut st = fixture.prepare("SELECT key, value FROM meta").unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .unwrap();
    for r in rows {
        let (k, v) = r.unwrap();
        let v = match k.as_str() {
            "start_ns" => START_NS.to_string(),
            "end_ns" => (START_NS + (INTERVALS + 1) * DUR_NS).to_string(),
            "interval_ms" => (DUR_NS / 1_000_000).to_string(),
            _ => v,
        };
        w.set_meta(&k, &v).unwrap();
    }
    for i in 0..INTERVALS {
        w.write_snapshot(&snapshot(i)).unwrap();
        w.write_counters(i, &counters(i)).unwrap();
    }
    if close {
        w.close_rollups().unwrap();
    }
    drop(w);
    path
}

/// Everything a report reads from a recording, and the text and JSON reports.
fn readout(rec: &Recording) -> Vec<String> {
    let s = analysis::summary::build(rec).expect("summary");
    let o = analysis::advise_or_explain(rec, &s, Default::default()).expect("outcome");
    vec![
        format!("{:?}", rec.window),
        format!("{:?}", rec.queue_totals().unwrap()),
        format!("{:?}", rec.peak_inflight().unwrap()),
        format!("{:?}", rec.event_totals().unwrap()),
        format!("{:?}", rec.detail_ns().unwrap()),
        format!("{:?}", rec.miss_totals().unwrap()),
        format!("{:?}", rec.counter_totals("live").unwrap()),
        format!("{:?}", rec.unreadable_counter_rows("live").unwrap()),
        format!("{:?}", rec.interval_groups(Some("live")).unwrap()),
        render_report(&s, &o, &TextOptions::default()),
        FullReport::new(&s, &o).to_json().unwrap(),
    ]
}

fn compare(path: &Path, windows: &[(Option<f64>, Option<f64>)]) {
    for &(from, to) in windows {
        let mut spans = Recording::open(path).unwrap();
        let mut raw = Recording::open_with(path, Rollups::Ignore).unwrap();
        for r in [&mut spans, &mut raw] {
            r.set_window(from.map(TimeSpec::Offset), to.map(TimeSpec::Offset))
                .unwrap();
        }
        let (a, b) = (readout(&spans), readout(&raw));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x, y, "window {from:?}..{to:?}");
        }
    }
}

const WINDOWS: &[(Option<f64>, Option<f64>)] = &[
    (None, None),
    (Some(1234.0), Some(7777.0)),
    (Some(3.0), Some(3700.0)),
    (Some(600.0), Some(660.0)),
    (Some(8000.0), None),
];

#[test]
fn rollups_read_as_the_raw_intervals_do() {
    let d = tempfile::tempdir().unwrap();
    let path = made(d.path(), false);
    let c = rusqlite::Connection::open(&path).unwrap();
    let n = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
    // 2.5 h from 17 s past a minute: 150 closed minutes and 2 closed hours, the last of each open.
    assert_eq!(
        (
            n("SELECT COUNT(*) FROM rollup_spans WHERE level = 1"),
            n("SELECT COUNT(*) FROM rollup_spans WHERE level = 2")
        ),
        (150, 2)
    );
    compare(&path, WINDOWS);
}

#[test]
fn rollups_built_later_are_the_recorders() {
    let d = tempfile::tempdir().unwrap();
    let path = made(d.path(), true);
    let tables = [
        "rollup_spans",
        "rollup_queues",
        "rollup_stage_stats",
        "rollup_napi_hist",
        "rollup_miss",
        "rollup_buf_map",
        "rollup_miss_queues",
        "rollup_miss_age_hist",
        "rollup_counters",
        "rollup_counter_spans",
    ];
    let dump = |p: &Path| -> Vec<String> {
        let c = rusqlite::Connection::open(p).unwrap();
        let mut out = Vec::new();
        for t in tables {
            let mut st = c
                .prepare(&format!("SELECT * FROM {t} ORDER BY 1, 2"))
                .unwrap();
            let ncol = st.column_count();
            let mut rows = st.query([]).unwrap();
            while let Some(r) = rows.next().unwrap() {
                let cells: Vec<String> = (0..ncol)
                    .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                    .collect();
                out.push(format!("{t}: {}", cells.join(",")));
            }
        }
        out
    };
    let recorded = dump(&path);
    assert!(recorded.len() > 1000, "{}", recorded.len());
    // As an older recorder left it: no rollups; built again in one pass.
    let drop_all: String = tables.iter().map(|t| format!("DROP TABLE {t};")).collect();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&drop_all)
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    crate::recording::rollup::backfill_for_test(&conn, true).unwrap();
    drop(conn);
    assert_eq!(dump(&path), recorded);
    compare(&path, &WINDOWS[..2]);
}

#[test]
fn dropped_raw_intervals_leave_the_run_reportable_by_the_minute() {
    let d = tempfile::tempdir().unwrap();
    let path = made(d.path(), true);
    let whole = |rec: &Recording| {
        let q = rec.queue_totals().unwrap();
        (rec.window.intervals, rec.window.dur_ns, format!("{q:?}"))
    };
    let before = whole(&Recording::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    // Every raw interval of the first 100 minutes, as `--keep` drops them.
    let x: i64 = conn
        .query_row(
            "SELECT last FROM rollup_spans WHERE level = 1 ORDER BY interval LIMIT 1 OFFSET 99",
            [],
            |r| r.get(0),
        )
        .unwrap();
    crate::recording::rollup::drop_raw_upto(&conn, x).unwrap();
    let raw_left: i64 = conn
        .query_row("SELECT COUNT(*) FROM queue_intervals", [], |r| r.get(0))
        .unwrap();
    assert!(raw_left > 0 && raw_left < (INTERVALS * 3) as i64 / 2);
    drop(conn);
    let rec = Recording::open(&path).unwrap();
    assert_eq!(whole(&rec), before);
    // The report still runs, its series by the minute.
    let g = rec.interval_groups(Some("live")).unwrap();
    assert!(g.len() > 100 && g.iter().all(|g| !g.queues.is_empty()));
    analysis::summary::build(&rec).expect("summary");
}

/// The same recording in the schema ddioscope wrote before its per-interval tables were
/// clustered by their keys (`WITHOUT ROWID`): every row copied into tables with a rowid and a
/// separate key index, as an older recorder laid them out.
fn in_the_rowid_schema(compact: &Path, dir: &Path) -> PathBuf {
    let old = dir.join("rowid.ddio");
    let c = rusqlite::Connection::open(&old).unwrap();
    c.execute_batch(&format!(
        "PRAGMA application_id = {}; PRAGMA user_version = {};",
        crate::recording::APPLICATION_ID,
        crate::recording::SCHEMA_VERSION
    ))
    .unwrap();
    c.execute_batch(&crate::recording::SCHEMA.replace(" WITHOUT ROWID", ""))
        .unwrap();
    c.execute_batch(&crate::recording::rollup::SCHEMA.replace(" WITHOUT ROWID", ""))
        .unwrap();
    c.execute("ATTACH ?1 AS n", [compact.to_str().unwrap()])
        .unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM n.sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for t in &tables {
        c.execute_batch(&format!("INSERT INTO main.{t} SELECT * FROM n.{t}"))
            .unwrap();
    }
    c.execute_batch("DETACH n").unwrap();
    old
}

#[test]
fn the_key_clustered_schema_reads_as_the_rowid_one_did() {
    let d = tempfile::tempdir().unwrap();
    let path = made(d.path(), true);
    let old = in_the_rowid_schema(&path, d.path());
    let c = rusqlite::Connection::open(&path).unwrap();
    let o = rusqlite::Connection::open(&old).unwrap();
    let n = |c: &rusqlite::Connection, sql: &str| -> i64 {
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    };
    // The recorder's keyed per-interval tables carry no second copy of their keys.
    for t in [
        "queue_intervals",
        "stage_stats",
        "size_hist",
        "miss_queues",
        "miss_age_hist",
    ] {
        let idx =
            format!("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = '{t}'");
        assert_eq!((n(&c, &idx), n(&o, &idx)), (0, 1), "{t}");
        let rows = format!("SELECT COUNT(*) FROM {t}");
        assert_eq!(n(&c, &rows), n(&o, &rows), "{t}");
    }
    assert!(n(&c, "PRAGMA page_count") < n(&o, "PRAGMA page_count"));
    drop((c, o));
    let compact = every_readout(&path);
    // The reports name their file: the old layout is read under the same name.
    std::fs::rename(&old, &path).unwrap();
    let rowid = every_readout(&path);
    assert_eq!(compact.len(), rowid.len());
    for (x, y) in compact.iter().zip(&rowid) {
        assert_eq!(x, y);
    }
}

/// Everything a report reads, over every test window, from rollups and from raw intervals.
fn every_readout(p: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for &(from, to) in WINDOWS {
        for how in [Rollups::Use, Rollups::Ignore] {
            let mut r = Recording::open_with(p, how).unwrap();
            r.set_window(from.map(TimeSpec::Offset), to.map(TimeSpec::Offset))
                .unwrap();
            out.extend(readout(&r));
        }
    }
    out
}

/// The same recording as schema 1 wrote it: a row per histogram bucket in `stage_hist`,
/// `napi_hist` and `rollup_stage_hist`, no packed columns.
fn in_schema_1(packed: &Path, dir: &Path) -> PathBuf {
    let old = dir.join("schema1.ddio");
    let c = rusqlite::Connection::open(&old).unwrap();
    c.execute_batch(&format!(
        "PRAGMA application_id = {}; PRAGMA user_version = 1;",
        crate::recording::APPLICATION_ID
    ))
    .unwrap();
    let schema = crate::recording::SCHEMA
        .replace(", napi_hist BLOB,", ",")
        .replace(", hist BLOB,", ",");
    assert!(!schema.contains("BLOB"));
    c.execute_batch(&schema).unwrap();
    c.execute_batch(
        "CREATE TABLE stage_hist (
            interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL, stage TEXT NOT NULL,
            bucket INTEGER NOT NULL, count INTEGER NOT NULL,
            PRIMARY KEY (interval, dir, queue, stage, bucket)) WITHOUT ROWID;
         CREATE TABLE napi_hist (
            interval INTEGER NOT NULL, queue INTEGER NOT NULL, bucket INTEGER NOT NULL, count INTEGER NOT NULL,
            PRIMARY KEY (interval, queue, bucket)) WITHOUT ROWID;",
    )
    .unwrap();
    c.execute_batch(&crate::recording::rollup::SCHEMA.replace(", hist BLOB,", ","))
        .unwrap();
    c.execute_batch(crate::recording::rollup::ROW_HIST_SCHEMA)
        .unwrap();
    crate::recording::packed::register(&c).unwrap();
    c.execute("ATTACH ?1 AS n", [packed.to_str().unwrap()])
        .unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM n.sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for t in &tables {
        let cols: Vec<String> = c
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{t}', 'main')"
            ))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let cols = cols.join(",");
        c.execute_batch(&format!(
            "INSERT INTO main.{t} ({cols}) SELECT {cols} FROM n.{t}"
        ))
        .unwrap();
    }
    c.execute_batch(
        "INSERT INTO stage_hist SELECT s.interval, s.dir, s.queue, s.stage, h.bucket, h.count
           FROM n.stage_stats s, hist_buckets(s.hist) h;
         INSERT INTO napi_hist SELECT q.interval, q.queue, h.bucket, h.count
           FROM n.queue_intervals q, hist_buckets(q.napi_hist) h;
         INSERT INTO rollup_stage_hist SELECT s.level, s.interval, s.dir, s.queue, s.stage, h.bucket, h.count
           FROM n.rollup_stage_stats s, hist_buckets(s.hist) h;
         DETACH n;",
    )
    .unwrap();
    old
}

/// A recording written before the histograms were packed reads as the packed one does,
/// from rollups and raw intervals; the packed one is the smaller.
#[test]
fn a_schema_1_recording_reads_as_the_packed_one() {
    let d = tempfile::tempdir().unwrap();
    let path = made(d.path(), true);
    let old = in_schema_1(&path, d.path());
    let n = |p: &Path, sql: &str| -> i64 {
        rusqlite::Connection::open(p)
            .unwrap()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    };
    let buckets = n(&old, "SELECT COUNT(*) FROM stage_hist");
    assert!(buckets > 1000 && n(&old, "SELECT COUNT(*) FROM napi_hist") > 1000);
    assert!(n(&old, "SELECT COUNT(*) FROM rollup_stage_hist") > 100);
    assert!(n(&path, "PRAGMA page_count") < n(&old, "PRAGMA page_count"));
    let packed = every_readout(&path);
    std::fs::rename(&old, &path).unwrap();
    let unpacked = every_readout(&path);
    assert_eq!(packed.len(), unpacked.len());
    for (x, y) in packed.iter().zip(&unpacked) {
        assert_eq!(x, y);
    }
}

/// The same intervals written into three files, as `record --rotate` splits a run (each
/// file closed, its own meta and rollups, the splits inside a minute and an hour), read as
/// one: everything a report reads and the JSON report equal the one file's.
#[test]
fn rotated_files_read_as_one_read_as_the_one_file() {
    let d = tempfile::tempdir().unwrap();
    let one = made(d.path(), true);
    let meta: Vec<(String, String)> = {
        let c = rusqlite::Connection::open(&one).unwrap();
        let mut st = c.prepare("SELECT key, value FROM meta").unwrap();
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    };
    let mut files = Vec::new();
    for (k, (a, b)) in [(0, 700), (700, 1333), (1333, INTERVALS)]
        .into_iter()
        .enumerate()
    {
        let path = d.path().join(format!("part{k}.ddio"));
        let mut w = Writer::create(&path, false).unwrap();
        for (key, v) in &meta {
            let v = match key.as_str() {
                "start_ns" => (START_NS + a * DUR_NS).to_string(),
                "end_ns" => (START_NS + b * DUR_NS).to_string(),
                // One boot: the wall clock moves with the BPF clock.
                "start_unix_ms" => (v.parse::<u64>().unwrap() + a * DUR_NS / 1_000_000).to_string(),
                _ => v.clone(),
            };
            w.set_meta(key, &v).unwrap();
        }
        for i in a..b {
            w.write_snapshot(&snapshot(i)).unwrap();
            w.write_counters(i, &counters(i)).unwrap();
        }
        w.close_rollups().unwrap();
        drop(w);
        files.push(path);
    }
    // Given out of order: they are read by time.
    files.swap(0, 2);
    let whole = Recording::open(&one).unwrap();
    let parts = Recording::open_many(&files).unwrap();
    assert_eq!(parts.parts.len(), 3);
    let (a, b) = (readout(&whole), readout(&parts));
    // All but the text report, which names the file.
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if i == a.len() - 2 {
            continue;
        }
        let y = y.replace("part0.ddio", "made.ddio");
        assert_eq!(x, &y, "readout {i}");
    }
    // A window across a split reads the same too.
    let (mut w1, mut w2) = (whole, parts);
    for r in [&mut w1, &mut w2] {
        r.set_window(
            Some(TimeSpec::Offset(3000.0)),
            Some(TimeSpec::Offset(7000.0)),
        )
        .unwrap();
    }
    assert_eq!(readout(&w1)[..9], readout(&w2)[..9]);
}
