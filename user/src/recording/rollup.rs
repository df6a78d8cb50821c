//! Rollups: every per-interval table a report reads, summed per minute and per hour of the
//! BPF clock, so a report over a day or a week reads a few thousand rows rather than
//! millions. A span (one minute's or one hour's intervals) is rolled up once it is closed:
//! by the recorder, in the transaction of the first interval after it, or in one pass over an
//! older recording (`backfill`). Every rolled-up column is a sum, a maximum or a minimum of
//! its rows, so a report that reads spans where they cover its window exactly and raw
//! intervals at its edges (`cover`) gets the same numbers as one that reads every interval.
//! Raw intervals may then be dropped (`prune`, `record --keep`/`--max-size`); spans are kept.
use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension};

use super::reader::Columns;

/// Span levels: 1 a minute, 2 an hour. An interval belongs to the span of its middle
/// (`t_ns - dur_ns / 2`, as windows choose intervals); an hour is a union of minutes.
pub const MINUTE: i64 = 1;
pub const HOUR: i64 = 2;
pub const MINUTE_NS: u64 = 60_000_000_000;
pub const HOUR_NS: u64 = 3_600_000_000_000;

/// The span number of an interval at a level.
pub fn bucket(level: i64, t_ns: u64, dur_ns: u64) -> u64 {
    let mid = t_ns.saturating_sub(dur_ns / 2);
    if level == HOUR {
        mid / HOUR_NS
    } else {
        mid / MINUTE_NS
    }
}

/// The rollup tables (`interval` is a span's first interval), clustered by their keys
/// (`WITHOUT ROWID`: a key stored once, not again in an index). Created with every new
/// recording, and by `backfill` in an older one. The counters index lets a span's readings
/// and the ones `prune` drops be found without a scan of the whole table.
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS rollup_spans (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, bucket INTEGER NOT NULL, last INTEGER NOT NULL,
    n INTEGER NOT NULL, start_ns INTEGER NOT NULL, t_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
    sampled INTEGER NOT NULL, lost INTEGER NOT NULL, received INTEGER NOT NULL, state_evicted INTEGER NOT NULL,
    queue_clamped INTEGER NOT NULL, state_stale INTEGER NOT NULL, detail_ns INTEGER, detail_n INTEGER NOT NULL,
    mid_lo INTEGER NOT NULL, mid_hi INTEGER NOT NULL, raw INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (level, interval)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_queues (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL,
    packets INTEGER, bytes INTEGER, napi_polls INTEGER, napi_work INTEGER, napi_budget_exhausted INTEGER,
    copies INTEGER, frees INTEGER, drops INTEGER, handups INTEGER, unended INTEGER, peak_inflight INTEGER,
    PRIMARY KEY (level, interval, dir, queue)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_stage_stats (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL, stage TEXT NOT NULL,
    count INTEGER, sum_ns INTEGER, max_ns INTEGER, hist BLOB, PRIMARY KEY (level, interval, dir, queue, stage)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_napi_hist (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, queue INTEGER NOT NULL, bucket INTEGER NOT NULL, count INTEGER,
    PRIMARY KEY (level, interval, queue, bucket)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_miss (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, n INTEGER, samples INTEGER, on_packet_buffers INTEGER,
    other_addr INTEGER, no_addr INTEGER, ctx_charged INTEGER, uncharged INTEGER, out_of_subset INTEGER,
    no_flow INTEGER, no_flow_n INTEGER, queue_clamped INTEGER, throttles INTEGER, throttles_n INTEGER,
    throttled_ns INTEGER, throttled_ns_n INTEGER, throttle_records_lost INTEGER, throttle_records_lost_n INTEGER,
    before_window INTEGER, sampled_ns INTEGER, sampled_ns_n INTEGER, span_ns INTEGER,
    PRIMARY KEY (level, interval)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_buf_map (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, linear_pages INTEGER, frag_pages INTEGER,
    frags_over_cap INTEGER, frags_no_page INTEGER, frags_no_layout INTEGER, copy_linear_joined INTEGER,
    copy_frag_joined INTEGER, slots_replaced INTEGER, pages_over_cap INTEGER, entries_max INTEGER,
    entries_last INTEGER, entries_at INTEGER, PRIMARY KEY (level, interval)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_miss_queues (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL,
    addr_join INTEGER, cpu_ctx INTEGER, PRIMARY KEY (level, interval, dir, queue)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_miss_age_hist (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, bucket INTEGER NOT NULL, count INTEGER,
    PRIMARY KEY (level, interval, bucket)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_counters (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, source TEXT NOT NULL, socket INTEGER NOT NULL,
    pmu TEXT NOT NULL, event TEXT NOT NULL, value REAL, raw INTEGER, enabled_ns INTEGER, running_ns INTEGER,
    t_ns INTEGER, rows INTEGER, PRIMARY KEY (level, interval, source, socket, pmu, event)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_counter_spans (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, source TEXT NOT NULL, dur_ns INTEGER, unreadable INTEGER,
    PRIMARY KEY (level, interval, source)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS counters_by_interval ON counters(interval);
"#;

/// The stage histograms' rollup as a schema-1 recording (one row per bucket, no packed
/// `hist`) has it: created beside `SCHEMA` when such a recording is rolled up.
pub const ROW_HIST_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS rollup_stage_hist (
    level INTEGER NOT NULL, interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL, stage TEXT NOT NULL,
    bucket INTEGER NOT NULL, count INTEGER, PRIMARY KEY (level, interval, dir, queue, stage, bucket)) WITHOUT ROWID;
"#;

/// How a column of a span merges its rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Merge {
    Sum,
    Max,
    Min,
    /// The value of the row with the highest `at` column that is not NULL.
    Last(&'static str),
    /// Packed histograms (`packed`), summed bucket by bucket.
    Hist,
}

/// One column of a rolled-up table: its name, the SQL that reads it from a raw row (alias
/// `r`), and how spans merge it.
pub struct Col {
    pub name: &'static str,
    pub raw: String,
    pub merge: Merge,
}

/// A per-interval table and its rollup: keys it is grouped by, then its columns. `raw_where`
/// narrows which raw rows are rolled up (counters: the readable rows of the live sources).
pub struct Rolled {
    pub raw: &'static str,
    pub rollup: &'static str,
    pub iv: &'static str,
    pub keys: &'static [&'static str],
    pub cols: Vec<Col>,
    pub raw_where: &'static str,
    /// Rolled up by its own rows; not so for a view over another rollup's packed column
    /// (`rollup_stage_hist` over `rollup_stage_stats.hist`), which is only read.
    pub rolls: bool,
}

/// Which rows of a table a part of a window reads: raw intervals `lo..=hi`, or the spans of
/// a level whose first interval is in `lo..=hi` (they tile it exactly).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Piece {
    pub level: i64,
    pub lo: i64,
    pub hi: i64,
}

/// Counter rows a report can read (the reader's `COUNTER_ROW_READABLE`, on alias `r`), of
/// the sources counted by recording interval. Imported captures keep their own interval
/// numbers and are replaced whole by the next import: they are not rolled up.
pub const COUNTER_ROLLED: &str = "r.source <> 'imported' AND typeof(r.interval) = 'integer' AND typeof(r.t_ns) = 'integer' AND r.t_ns >= 0
     AND typeof(r.raw) = 'integer' AND r.raw >= 0 AND typeof(r.enabled_ns) = 'integer' AND r.enabled_ns >= 0
     AND typeof(r.running_ns) = 'integer' AND r.running_ns >= 0 AND typeof(r.socket) = 'integer'
     AND r.socket BETWEEN 0 AND 4294967295 AND typeof(r.value) IN ('integer', 'real')
     AND typeof(r.pmu) = 'text' AND typeof(r.event) = 'text'";

fn col(name: &'static str, raw: impl Into<String>, merge: Merge) -> Col {
    Col {
        name,
        raw: raw.into(),
        merge,
    }
}

fn sums(names: &[&'static str]) -> Vec<Col> {
    names
        .iter()
        .map(|n| col(n, format!("r.{n}"), Merge::Sum))
        .collect()
}

/// Packets in flight in one interval by Little's law: its packet rate times the mean of its
/// lifetime stage, rounded up. The reader computes the same in f64 (`inflight`), in the same
/// order of operations, so a span's maximum is the maximum of its intervals'.
fn peak_sql() -> String {
    use crate::snapshot::Dir;
    let life = |d: Dir| d.stage_names()[d.lifetime_stage()];
    let x = "CAST(r.packets AS REAL) / (CAST(i.dur_ns AS REAL) / 1e9) * (CAST(s.sum_ns AS REAL) / CAST(s.count AS REAL)) / 1e9";
    format!(
        "(SELECT CAST(x AS INTEGER) + (x > CAST(x AS INTEGER)) FROM (SELECT {x} AS x FROM stage_stats s, intervals i
          WHERE s.interval = r.interval AND s.dir = r.dir AND s.queue = r.queue
            AND s.stage = (CASE r.dir WHEN 'tx' THEN '{}' ELSE '{}' END) AND s.count > 0
            AND i.idx = r.interval AND i.dur_ns > 0))",
        life(Dir::Tx),
        life(Dir::Rx)
    )
}

/// Little's law for one interval, as `peak_sql` computes it.
pub fn inflight(packets: u64, dur_ns: u64, count: u64, sum_ns: u64) -> u64 {
    (packets as f64 / (dur_ns as f64 / 1e9) * (sum_ns as f64 / count as f64) / 1e9).ceil() as u64
}

/// A sum of an optional column, and how many of its rows had a value (`name` is NULL for
/// a span where none did, and the count tells a reader which).
fn sum_and_count(name: &'static str, n: &'static str, raw: &str) -> [Col; 2] {
    [
        col(name, raw.to_string(), Merge::Sum),
        col(n, format!("({raw} IS NOT NULL)"), Merge::Sum),
    ]
}

/// A per-interval table keyed by `interval` and `keys`, rolled up whole.
fn rolled(
    raw: &'static str,
    rollup: &'static str,
    keys: &'static [&'static str],
    cols: Vec<Col>,
) -> Rolled {
    Rolled {
        raw,
        rollup,
        iv: "interval",
        keys,
        cols,
        raw_where: "",
        rolls: true,
    }
}

/// `rollup_spans`: each span's intervals, their time and the event counters.
fn span_cols(c: &Columns) -> Vec<Col> {
    let mut spans = vec![
        col("last", "r.idx", Merge::Max),
        col("n", "1", Merge::Sum),
        col("start_ns", "r.t_ns - r.dur_ns", Merge::Min),
        col("t_ns", "r.t_ns", Merge::Max),
        col("dur_ns", "r.dur_ns", Merge::Sum),
    ];
    spans.extend(sums(&[
        "sampled",
        "lost",
        "received",
        "state_evicted",
        "queue_clamped",
    ]));
    spans.push(col("state_stale", c.stale, Merge::Sum));
    spans.extend(sum_and_count("detail_ns", "detail_n", c.detail_ns));
    spans.extend([
        col("mid_lo", "r.t_ns - r.dur_ns / 2", Merge::Min),
        col("mid_hi", "r.t_ns - r.dur_ns / 2", Merge::Max),
    ]);
    spans
}

/// `rollup_queues`: per queue counts, and the peak packets in flight.
fn queue_cols(c: &Columns) -> Vec<Col> {
    let mut queues = sums(&[
        "packets",
        "bytes",
        "napi_polls",
        "napi_work",
        "napi_budget_exhausted",
        "copies",
        "frees",
        "drops",
    ]);
    queues.extend([
        col("handups", c.handups, Merge::Sum),
        col("unended", c.unended, Merge::Sum),
        col("peak_inflight", peak_sql(), Merge::Max),
    ]);
    queues
}

/// `rollup_miss`: the L3-miss sampler's totals, its optional columns with their counts.
fn miss_cols(c: &Columns) -> Vec<Col> {
    let mut th = c.throttle.split(',');
    let (th, tns, tl) = (
        th.next().unwrap_or("NULL"),
        th.next().unwrap_or("NULL"),
        th.next().unwrap_or("NULL"),
    );
    let mut miss = vec![col("n", "1", Merge::Sum)];
    miss.extend(sums(&[
        "samples",
        "on_packet_buffers",
        "other_addr",
        "no_addr",
        "ctx_charged",
        "uncharged",
    ]));
    miss.push(col("out_of_subset", c.out_of_subset, Merge::Sum));
    miss.extend(sum_and_count("no_flow", "no_flow_n", c.no_flow));
    miss.push(col("queue_clamped", c.miss_queue_clamped, Merge::Sum));
    miss.extend(sum_and_count("throttles", "throttles_n", th));
    miss.extend(sum_and_count("throttled_ns", "throttled_ns_n", tns));
    miss.extend(sum_and_count(
        "throttle_records_lost",
        "throttle_records_lost_n",
        tl,
    ));
    miss.push(col("before_window", c.before_window, Merge::Sum));
    miss.extend(sum_and_count("sampled_ns", "sampled_ns_n", c.sampled_ns));
    miss.push(col(
        "span_ns",
        "(SELECT dur_ns FROM intervals WHERE idx = r.interval)",
        Merge::Sum,
    ));
    miss
}

/// `rollup_buf_map`: the buffer map's counts, and its size at the end of each span.
fn buf_map_cols(c: &Columns) -> Vec<Col> {
    let mut buf = sums(&[
        "linear_pages",
        "frag_pages",
        "frags_over_cap",
        "frags_no_page",
        "frags_no_layout",
        "copy_linear_joined",
        "copy_frag_joined",
    ]);
    buf.extend([
        col("slots_replaced", c.slots_replaced, Merge::Sum),
        col("pages_over_cap", c.pages_over_cap, Merge::Sum),
        col("entries_max", "r.entries", Merge::Max),
        col("entries_last", "r.entries", Merge::Last("entries_at")),
        col(
            "entries_at",
            "CASE WHEN r.entries IS NOT NULL THEN r.interval END",
            Merge::Max,
        ),
    ]);
    buf
}

/// Every rolled-up table, its raw columns as this recording has them.
pub(super) fn tables(c: &Columns) -> Vec<Rolled> {
    let mut counters = sums(&["value", "raw", "enabled_ns", "running_ns"]);
    counters.extend([
        col("t_ns", "r.t_ns", Merge::Max),
        col("rows", "1", Merge::Sum),
    ]);
    let mut stage_cols = vec![
        col("count", "r.count", Merge::Sum),
        col("sum_ns", "r.sum_ns", Merge::Sum),
        col("max_ns", "r.max_ns", Merge::Max),
    ];
    // Packed raw histograms roll up packed, read back as rows through a view.
    if c.hist_packed {
        stage_cols.push(col("hist", "r.hist", Merge::Hist));
    }
    let mut out = vec![
        Rolled {
            iv: "idx",
            ..rolled("intervals", "rollup_spans", &[], span_cols(c))
        },
        rolled(
            "queue_intervals",
            "rollup_queues",
            &["dir", "queue"],
            queue_cols(c),
        ),
        rolled(
            "stage_stats",
            "rollup_stage_stats",
            &["dir", "queue", "stage"],
            stage_cols,
        ),
        Rolled {
            rolls: !c.hist_packed,
            ..rolled(
                "stage_hist",
                "rollup_stage_hist",
                &["dir", "queue", "stage", "bucket"],
                sums(&["count"]),
            )
        },
        rolled(
            "napi_hist",
            "rollup_napi_hist",
            &["queue", "bucket"],
            sums(&["count"]),
        ),
        Rolled {
            raw_where: COUNTER_ROLLED,
            ..rolled(
                "counters",
                "rollup_counters",
                &["source", "socket", "pmu", "event"],
                counters,
            )
        },
    ];
    if c.miss {
        out.extend([
            rolled("miss_intervals", "rollup_miss", &[], miss_cols(c)),
            rolled(
                "miss_queues",
                "rollup_miss_queues",
                &["dir", "queue"],
                sums(&["addr_join", "cpu_ctx"]),
            ),
            rolled(
                "miss_age_hist",
                "rollup_miss_age_hist",
                &["bucket"],
                sums(&["count"]),
            ),
        ]);
    }
    if c.buf_map {
        out.push(rolled(
            "buf_map_intervals",
            "rollup_buf_map",
            &[],
            buf_map_cols(c),
        ));
    }
    out
}

impl Rolled {
    /// `interval, keys…, columns…` of the rows in `p`, by the same names whether raw or
    /// rolled up. `hint` goes after a raw table's name (`NOT INDEXED` for a long scan).
    pub fn select(&self, p: Piece, hint: &str) -> String {
        let keys: String = self.keys.iter().map(|k| format!(", {k}")).collect();
        if p.level == 0 {
            let cols: String = self
                .cols
                .iter()
                .map(|c| format!(", {} AS {}", c.raw, c.name))
                .collect();
            let extra = if self.raw_where.is_empty() {
                String::new()
            } else {
                format!(" AND {}", self.raw_where)
            };
            format!(
                "SELECT r.{iv} AS interval{keys}{cols} FROM {} AS r {hint} WHERE r.{iv} BETWEEN {} AND {}{extra}",
                self.raw,
                p.lo,
                p.hi,
                iv = self.iv
            )
        } else {
            let cols: String = self.cols.iter().map(|c| format!(", {}", c.name)).collect();
            format!(
                "SELECT interval{keys}{cols} FROM {} WHERE level = {} AND interval BETWEEN {} AND {}",
                self.rollup, p.level, p.lo, p.hi
            )
        }
    }

    /// The rows of every piece, as one source (see `select`).
    pub fn source(&self, pieces: &[Piece], hint: &str) -> String {
        let parts: Vec<String> = pieces.iter().map(|p| self.select(*p, hint)).collect();
        if parts.is_empty() {
            // No rows: the raw table's empty range.
            self.select(
                Piece {
                    level: 0,
                    lo: 1,
                    hi: 0,
                },
                "",
            )
        } else {
            parts.join(" UNION ALL ")
        }
    }

    /// The merge of column `c` over `src` (aliased `x`), per the keys when `keyed`.
    pub fn merge(&self, c: &Col, src: &str) -> String {
        match c.merge {
            Merge::Sum => format!("SUM({})", c.name),
            Merge::Max => format!("MAX({})", c.name),
            Merge::Min => format!("MIN({})", c.name),
            Merge::Hist => format!("hist_sum({})", c.name),
            Merge::Last(at) => {
                let keyed: String = self
                    .keys
                    .iter()
                    .map(|k| format!(" AND y.{k} IS x.{k}"))
                    .collect();
                format!(
                    "(SELECT y.{n} FROM ({src}) AS y WHERE y.{at} IS NOT NULL{keyed} ORDER BY y.{at} DESC LIMIT 1)",
                    n = c.name
                )
            }
        }
    }

    /// Rolls the rows of `from` up into span `first` at `level`.
    fn roll(
        &self,
        conn: &Connection,
        level: i64,
        first: i64,
        from: Piece,
        bucket: Option<u64>,
    ) -> rusqlite::Result<()> {
        let src = self.select(from, "");
        let keys = self.keys.join(", ");
        let names: Vec<&str> = self.cols.iter().map(|c| c.name).collect();
        let merges: Vec<String> = self.cols.iter().map(|c| self.merge(c, &src)).collect();
        let (bcol, bval) = match bucket {
            Some(b) => (", bucket", format!(", {b}")),
            None => ("", String::new()),
        };
        let kcols = if keys.is_empty() {
            String::new()
        } else {
            format!(", {keys}")
        };
        let group = if keys.is_empty() {
            "HAVING COUNT(*) > 0".to_string()
        } else {
            format!("GROUP BY {keys}")
        };
        conn.execute(
            &format!(
                "INSERT INTO {} (level, interval{bcol}{kcols}, {}) SELECT {level}, {first}{bval}{kcols}, {} FROM ({src}) AS x {group}",
                self.rollup,
                names.join(", "),
                merges.join(", ")
            ),
            [],
        )?;
        Ok(())
    }
}

/// The per-source time and unreadable rows of a span's counters: the length of the
/// intervals that have readable readings of the source, and how many rows are unreadable.
fn roll_counter_spans(
    conn: &Connection,
    level: i64,
    first: i64,
    from: Piece,
) -> rusqlite::Result<()> {
    let sql = if from.level == 0 {
        format!(
            "INSERT INTO rollup_counter_spans (level, interval, source, dur_ns, unreadable)
             SELECT {level}, {first}, source, SUM(d), SUM(bad) FROM (
               SELECT r.source AS source, r.interval AS interval,
                      CASE WHEN MAX({COUNTER_ROLLED}) THEN (SELECT dur_ns FROM intervals WHERE idx = r.interval) END AS d,
                      SUM(NOT ({COUNTER_ROLLED})) AS bad
               FROM counters AS r WHERE r.interval BETWEEN {} AND {} AND r.source <> 'imported'
               GROUP BY r.source, r.interval)
             GROUP BY source",
            from.lo, from.hi
        )
    } else {
        format!(
            "INSERT INTO rollup_counter_spans (level, interval, source, dur_ns, unreadable)
             SELECT {level}, {first}, source, SUM(dur_ns), SUM(unreadable) FROM rollup_counter_spans
             WHERE level = {} AND interval BETWEEN {} AND {} GROUP BY source",
            from.level, from.lo, from.hi
        )
    };
    conn.execute(&sql, [])?;
    Ok(())
}

/// Rolls up span `first..=last` at `level` (a minute from raw intervals, an hour from its
/// minutes) into every rollup table.
pub fn roll_span(
    conn: &Connection,
    tables: &[Rolled],
    level: i64,
    first: u64,
    last: u64,
    bucket: u64,
) -> rusqlite::Result<()> {
    let from = Piece {
        level: level - 1,
        lo: first as i64,
        hi: last as i64,
    };
    for t in tables.iter().filter(|t| t.rolls) {
        let b = (t.rollup == "rollup_spans").then_some(bucket);
        t.roll(conn, level, first as i64, from, b)?;
    }
    roll_counter_spans(conn, level, first as i64, from)
}

/// The spans being filled as intervals arrive: each level's bucket and first interval, and
/// the last interval seen. An interval of a new bucket closes the span before it.
#[derive(Debug, Default, Clone)]
pub struct OpenSpans {
    open: [Option<(u64, u64)>; 2],
    last: Option<u64>,
}

impl OpenSpans {
    /// Interval `idx` (of middle bucket per level): rolls up the spans it closes.
    pub fn add(
        &mut self,
        conn: &Connection,
        tables: &[Rolled],
        idx: u64,
        t_ns: u64,
        dur_ns: u64,
    ) -> rusqlite::Result<bool> {
        let mut closed = false;
        for (slot, level) in [(0, MINUTE), (1, HOUR)] {
            let b = bucket(level, t_ns, dur_ns);
            match self.open[slot] {
                Some((ob, first)) if ob != b => {
                    if let Some(last) = self.last {
                        roll_span(conn, tables, level, first, last, ob)?;
                        closed = true;
                    }
                    self.open[slot] = Some((b, idx));
                }
                None => self.open[slot] = Some((b, idx)),
                _ => {}
            }
        }
        self.last = Some(idx);
        Ok(closed)
    }

    /// The recording has ended: its open spans are whole.
    pub fn close(&mut self, conn: &Connection, tables: &[Rolled]) -> rusqlite::Result<()> {
        if let Some(last) = self.last {
            for (slot, level) in [(0, MINUTE), (1, HOUR)] {
                if let Some((b, first)) = self.open[slot].take() {
                    roll_span(conn, tables, level, first, last, b)?;
                }
            }
        }
        self.last = None;
        Ok(())
    }
}

/// Whether the recording has rollups.
pub fn present(conn: &Connection) -> bool {
    super::reader::has_table(conn, "rollup_spans")
}

/// Rolls up a recording that has none, in one transaction (all of it or nothing), calling
/// `progress` with the intervals done and the total now and then. `whole`: the recording is
/// complete, so its last span is closed too.
pub(super) fn backfill(
    conn: &Connection,
    cols: &Columns,
    whole: bool,
    mut progress: impl FnMut(u64, u64),
) -> rusqlite::Result<()> {
    let tables = tables(cols);
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let done = (|| {
        conn.execute_batch(SCHEMA)?;
        if cols.hist_packed {
            // The packed rollup's view, now that its table is there.
            super::packed::install(conn)?;
        } else {
            conn.execute_batch(ROW_HIST_SCHEMA)?;
        }
        let total: i64 = conn.query_row("SELECT COUNT(*) FROM intervals", [], |r| r.get(0))?;
        let mut open = OpenSpans::default();
        let mut st = conn.prepare("SELECT idx, t_ns, dur_ns FROM intervals ORDER BY idx")?;
        let mut rows = st.query([])?;
        let mut n = 0u64;
        while let Some(r) = rows.next()? {
            let (idx, t, d): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            open.add(
                conn,
                &tables,
                idx.max(0) as u64,
                t.max(0) as u64,
                d.max(0) as u64,
            )?;
            n += 1;
            if n.is_multiple_of(100_000) {
                progress(n, total.max(0) as u64);
            }
        }
        drop(rows);
        drop(st);
        if whole {
            open.close(conn, &tables)?;
        }
        progress(n, total.max(0) as u64);
        Ok(())
    })();
    match done {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// The pieces that read `a..=b` with the coarsest spans that fit in it (up to `max_level`),
/// and raw intervals where none does.
pub fn cover(conn: &Connection, a: i64, b: i64, max_level: i64) -> rusqlite::Result<Vec<Piece>> {
    if a > b {
        return Ok(Vec::new());
    }
    let mut chosen: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    if max_level >= MINUTE {
        let mut st = conn.prepare_cached(
            "SELECT level, interval, last FROM rollup_spans WHERE level BETWEEN 1 AND ?1
             AND interval >= ?2 AND last <= ?3 ORDER BY level DESC, interval",
        )?;
        let mut rows = st.query(params![max_level, a, b])?;
        while let Some(r) = rows.next()? {
            let (level, lo, hi): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            // Inside a coarser span already chosen (spans of one level never overlap).
            let inside = chosen
                .range(..=lo)
                .next_back()
                .is_some_and(|(_, (h, _))| *h >= lo);
            if !inside {
                chosen.insert(lo, (hi, level));
            }
        }
    }
    let mut pieces: Vec<Piece> = Vec::new();
    let mut next = a;
    let gap_has_rows = |lo: i64, hi: i64| -> rusqlite::Result<bool> {
        conn.query_row(
            "SELECT 1 FROM intervals WHERE idx BETWEEN ?1 AND ?2 LIMIT 1",
            params![lo, hi],
            |_| Ok(()),
        )
        .optional()
        .map(|o| o.is_some())
    };
    for (lo, (hi, level)) in chosen {
        if lo > next && gap_has_rows(next, lo - 1)? {
            pieces.push(Piece {
                level: 0,
                lo: next,
                hi: lo - 1,
            });
        }
        match pieces.last_mut() {
            Some(p) if p.level == level => p.hi = hi,
            _ => pieces.push(Piece { level, lo, hi }),
        }
        next = hi + 1;
    }
    if next <= b {
        pieces.push(Piece {
            level: 0,
            lo: next,
            hi: b,
        });
    }
    Ok(pieces)
}

/// Drops the raw rows of every minute span whose raw intervals are still there and which
/// `choose` takes (given its end on the BPF clock), oldest first; its rollups stay. Returns
/// the minutes dropped. Only closed spans are candidates: a span exists once it is closed.
pub fn prune(conn: &Connection, mut choose: impl FnMut(u64) -> bool) -> rusqlite::Result<u64> {
    let spans: Vec<(i64, i64, i64)> = {
        let mut st = conn.prepare_cached(
            "SELECT interval, last, t_ns FROM rollup_spans WHERE level = 1 AND raw = 1 ORDER BY interval",
        )?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut upto = None;
    let mut n = 0;
    for (first, last, t_ns) in spans {
        if !choose(t_ns.max(0) as u64) {
            break;
        }
        upto = Some((first, last));
        n += 1;
    }
    let Some((_, x)) = upto else {
        return Ok(0);
    };
    drop_raw_upto(conn, x)?;
    Ok(n)
}

/// Deletes every raw row of the intervals up to `x` and marks their spans.
pub fn drop_raw_upto(conn: &Connection, x: i64) -> rusqlite::Result<()> {
    let packed = super::packed::is_packed(conn);
    for (t, iv) in [
        ("intervals", "idx"),
        ("queue_intervals", "interval"),
        ("stage_stats", "interval"),
        ("stage_hist", "interval"),
        ("napi_hist", "interval"),
        ("miss_intervals", "interval"),
        ("miss_queues", "interval"),
        ("miss_age_hist", "interval"),
        ("buf_map_intervals", "interval"),
    ] {
        // Packed histograms are views over the rows deleted above.
        if packed && matches!(t, "stage_hist" | "napi_hist") {
            continue;
        }
        conn.execute(&format!("DELETE FROM {t} WHERE {iv} <= ?1"), [x])?;
    }
    conn.execute(
        "DELETE FROM counters WHERE interval <= ?1 AND source <> 'imported'",
        [x],
    )?;
    // Packet records carry no index: they are stored in interval order, so the ones to drop
    // are the rows before the first record of a later interval (found from the oldest).
    conn.execute(
        "DELETE FROM samples WHERE rowid < COALESCE(
            (SELECT rowid FROM samples WHERE interval > ?1 ORDER BY rowid LIMIT 1),
            (SELECT MAX(rowid) + 1 FROM samples))",
        [x],
    )?;
    conn.execute(
        "UPDATE rollup_spans SET raw = 0 WHERE raw = 1 AND last <= ?1",
        [x],
    )?;
    Ok(())
}

/// `backfill` as `Recording::open` runs it, for tests that build rollups on a small recording.
#[cfg(test)]
pub(crate) fn backfill_for_test(conn: &Connection, whole: bool) -> rusqlite::Result<()> {
    super::packed::install(conn)?;
    backfill(conn, &Columns::probe(conn), whole, |_, _| {})
}
