//! Reads a recording without holding its intervals in memory: totals aggregated over the
//! covered intervals (a `Window`, the whole run by default), per-interval series in a bounded
//! number of groups, and a bounded spread of packet records. Memory does not grow with the
//! recording's length. Files that are not ddioscope recordings are refused with a one-line
//! reason; a damaged table fails the query that reads it, naming the file.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::meta::RecordingMeta;
use super::rollup::{self, Piece, Rolled, HOUR, MINUTE};
use super::window::{bounds, clock_at, TimeSpec, Window};
use super::writer::explain_sqlite;
use super::{APPLICATION_ID, SCHEMA_VERSION};
use crate::counters::CounterReading;
use crate::snapshot::{
    BufMapCounters, Dir, EventCounters, FlowCounters, FlowKey, MissSnapshot, PacketSample,
    QueueCounters, SamplerThrottle, NAPI_BUCKETS, NBUCKETS, NSTAGES,
};
use crate::topology::{HostInfo, IfaceInfo};

mod many;
mod stream;
pub use many::{expand_patterns, gaps, Part};
pub use stream::{Step, StepQueue};

pub struct Recording {
    pub path: PathBuf,
    pub meta: RecordingMeta,
    /// The intervals every query covers.
    pub window: Window,
    /// All of it.
    all: Window,
    conn: Connection,
    cols: Columns,
    /// The rolled-up tables, and whether this recording's rollups are read.
    tables: Vec<Rolled>,
    rollups: bool,
    /// The window's per-interval tables, read once (see `scan`).
    scanned: std::cell::OnceCell<Scan>,
    /// The files read as one (`open_many`), in time order; empty for one file.
    pub parts: Vec<Part>,
}

/// Points in a per-interval series at most (charts, regression rows): a longer window sums
/// consecutive intervals into this many groups.
pub const SERIES_POINTS: usize = 1200;

/// A window of more intervals than this (two hours of 100 ms intervals) is grouped by whole
/// minutes of the BPF clock rather than by counts of intervals, so its series reads minute
/// rollups; a shorter one reads its raw intervals.
pub const MINUTE_SERIES_AFTER: u64 = 72_000;

/// How a window's intervals are grouped into series points: `k` consecutive intervals from
/// interval `a`, or `m` whole minutes from minute `b0` (see `MINUTE_SERIES_AFTER`).
#[derive(Debug, Clone, Copy)]
enum Grouping {
    Intervals { a: i64, k: i64 },
    Minutes { b0: u64, m: u64 },
}

/// Whether `open` may build the rollups a recording lacks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rollups {
    /// Read them, and build them in a complete, writable recording that has none.
    Use,
    /// Read raw intervals only (the reference the rollups are tested against).
    Ignore,
}

/// One pass over the window's interval, queue and stage-statistics rows.
#[derive(Debug, Default)]
struct Scan {
    /// Per-queue totals, without the histograms.
    totals: BTreeMap<(Dir, u32), QueueCounters>,
    /// Per queue, the most packets in flight in any interval (Little's law).
    peaks: BTreeMap<(Dir, u32), u64>,
    groups: Vec<IntervalGroup>,
}

/// A `scan` in progress across pieces: the sums so far, the group being filled and its key.
struct ScanState {
    grouping: Grouping,
    scan: Scan,
    group_sums: BTreeMap<(Dir, u32), GroupQueue>,
    group_key: Option<i64>,
}

impl ScanState {
    /// A unit (one interval, or one span `iv..=last`) begins: into its series group.
    fn enter(&mut self, iv: i64, last: i64, t_ns: u64, dur_ns: u64, minute: u64) {
        let key = match self.grouping {
            Grouping::Intervals { a, k } => (iv - a) / k,
            Grouping::Minutes { b0, m } => (minute.saturating_sub(b0) / m) as i64,
        };
        if self.group_key != Some(key) {
            if let Some(g) = self.scan.groups.last_mut() {
                g.queues = std::mem::take(&mut self.group_sums).into_values().collect();
            }
            self.scan.groups.push(IntervalGroup {
                first: iv as u64,
                ..Default::default()
            });
            self.group_key = Some(key);
        }
        let g = self.scan.groups.last_mut().expect("pushed");
        g.last = last as u64;
        g.t_ns = t_ns;
        g.dur_ns = g.dur_ns.saturating_add(dur_ns);
    }

    fn group_queue(&mut self, dir: Dir, queue: u32) -> &mut GroupQueue {
        self.group_sums
            .entry((dir, queue))
            .or_insert(GroupQueue::empty(dir, queue))
    }

    /// A queue row: packets, bytes, NAPI polls, work, budget exhausted, copies, frees,
    /// drops, hand-ups, unended.
    fn add_queue(&mut self, dir: Dir, queue: u32, v: &[u64; 10]) {
        let t = self
            .scan
            .totals
            .entry((dir, queue))
            .or_insert_with(|| QueueCounters::new(dir, queue));
        // Saturating: a damaged file's counts must not wrap.
        for (f, x) in [
            (&mut t.packets, v[0]),
            (&mut t.bytes, v[1]),
            (&mut t.napi_polls, v[2]),
            (&mut t.napi_work, v[3]),
            (&mut t.napi_budget_exhausted, v[4]),
            (&mut t.copies, v[5]),
            (&mut t.frees, v[6]),
            (&mut t.drops, v[7]),
            (&mut t.handups, v[8]),
            (&mut t.unended, v[9]),
        ] {
            *f = f.saturating_add(x);
        }
        let gq = self.group_queue(dir, queue);
        gq.packets = gq.packets.saturating_add(v[0]);
        gq.bytes = gq.bytes.saturating_add(v[1]);
    }

    /// A stage row of stage `si`: count, summed ns, maximum ns.
    fn add_stage(&mut self, dir: Dir, queue: u32, si: usize, v: &[u64; 3]) {
        let t = self
            .scan
            .totals
            .entry((dir, queue))
            .or_insert_with(|| QueueCounters::new(dir, queue));
        t.stage_count[si] = t.stage_count[si].saturating_add(v[0]);
        t.stage_sum_ns[si] = t.stage_sum_ns[si].saturating_add(v[1]);
        t.stage_max_ns[si] = t.stage_max_ns[si].max(v[2]);
        if si == dir.lifetime_stage() {
            let gq = self.group_queue(dir, queue);
            gq.life_count = gq.life_count.saturating_add(v[0]);
            gq.life_sum_ns = gq.life_sum_ns.saturating_add(v[1]);
        }
    }

    fn peak(&mut self, dir: Dir, queue: u32, inflight: u64) {
        let p = self.scan.peaks.entry((dir, queue)).or_insert(0);
        *p = (*p).max(inflight);
    }
}

/// The SQL for columns and tables older recordings lack: each reads as what it meant before
/// it existed.
pub(super) struct Columns {
    /// Recordings from before state_stale read it as 0.
    pub(super) stale: &'static str,
    /// Nor detail_ns, from before detail windows: the hooks ran all the time (NULL).
    pub(super) detail_ns: &'static str,
    pub(super) handups: &'static str,
    /// Lives whose end went unseen, from before they were counted: none known (0).
    pub(super) unended: &'static str,
    pub(super) flow_samples: &'static str,
    pub(super) flow_source: &'static str,
    pub(super) miss: bool,
    /// Recordings from before page sampling have no out_of_subset column: nothing was out.
    pub(super) out_of_subset: &'static str,
    /// Nor, from before the flow-loss counts, no_flow (unknown: NULL) and queue_clamped.
    pub(super) no_flow: &'static str,
    pub(super) miss_queue_clamped: &'static str,
    /// Nor, from before the sampler's throttle log, its three columns (unknown).
    pub(super) throttle: &'static str,
    /// Nor, from before attribution windows, before_window (always on: none) and sampled_ns.
    pub(super) before_window: &'static str,
    pub(super) sampled_ns: &'static str,
    pub(super) buf_map: bool,
    /// Recordings from before the size histogram and the NIC's drop counters have neither.
    pub(super) size_hist: bool,
    pub(super) nic_drops: bool,
    pub(super) slots_replaced: &'static str,
    pub(super) pages_over_cap: &'static str,
    /// Schema 2: each stage histogram is packed into its `stage_stats` row, and so are the
    /// rollups' (`packed`).
    pub(super) hist_packed: bool,
    /// Nor, from before it was kept, which drops came before the stack (unknown: NULL).
    pub(super) drops_before_stack: &'static str,
}

/// The columns every reader of a table needs (newer ones are optional, see `Columns`), and
/// whether every recording has the table (the L3-miss and buffer-map tables came later).
const REQUIRED: &[(&str, &str, bool)] = &[
    ("intervals", "idx,t_ns,dur_ns,sampled,lost,received,state_evicted,queue_clamped", true),
    ("queue_intervals", "interval,dir,queue,packets,bytes,napi_polls,napi_work,napi_budget_exhausted,copies,frees,drops", true),
    ("stage_stats", "interval,dir,queue,stage,count,sum_ns,max_ns", true),
    ("stage_hist", "interval,dir,queue,stage,bucket,count", true),
    ("napi_hist", "interval,queue,bucket,count", true),
    ("flows", "dir,proto,src,sport,dst,dport,queue,packets,bytes,payload_bytes,first_ns,last_ns", true),
    ("samples", "interval,dir,queue,cpu,len,skb_addr,data_addr,ts0,ts1,ts2,ts3,free_ns,dropped,drop_reason,proto,src,sport,dst,dport", true),
    ("drop_reasons", "reason,count", true),
    ("counters", "interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns,source", true),
    ("miss_intervals", "interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged", false),
    ("miss_queues", "interval,dir,queue,addr_join,cpu_ctx", false),
    ("miss_age_hist", "interval,bucket,count", false),
    ("miss_flows", "dir,proto,src,sport,dst,dport,addr_join,cpu_ctx", false),
    ("miss_regions", "region,samples", false),
    ("buf_map_intervals", "interval,linear_pages,frag_pages,frags_over_cap,frags_no_page,frags_no_layout,entries,copy_linear_joined,copy_frag_joined", false),
];

/// Whether the recording has table `name`: a table of its file or, for several files read
/// as one, a view over theirs.
pub(super) fn has_table(conn: &Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1
         UNION ALL SELECT 1 FROM sqlite_temp_master WHERE type IN ('table','view') AND name=?1",
        [name],
        |_| Ok(()),
    )
    .is_ok()
}

impl Columns {
    /// Whether a later table is there to read (the miss tables come together).
    fn has(&self, table: &str) -> bool {
        if table == "buf_map_intervals" {
            self.buf_map
        } else {
            self.miss
        }
    }

    pub(super) fn probe(conn: &Connection) -> Columns {
        let table = |name: &str| has_table(conn, name);
        let col = |t: &str, c: &str| {
            conn.query_row(
                "SELECT 1 FROM pragma_table_info(?1) WHERE name=?2",
                [t, c],
                |_| Ok(()),
            )
            .is_ok()
        };
        let pick = |t: &str, c: &'static str, or: &'static str| if col(t, c) { c } else { or };
        Columns {
            stale: pick("intervals", "state_stale", "0"),
            detail_ns: pick("intervals", "detail_ns", "NULL"),
            handups: pick("queue_intervals", "handups", "0"),
            unended: pick("queue_intervals", "unended", "0"),
            // Sampled flows came with `samples`; their variance first as a sum of squares
            // (`bytes_sq`, not read: a different estimator), then as `bytes_var`.
            flow_samples: match (col("flows", "samples"), col("flows", "bytes_var")) {
                (true, true) => "samples,bytes_var",
                (true, false) => "samples,NULL",
                _ => "NULL,NULL",
            },
            flow_source: pick("flows", "source", "NULL"),
            drops_before_stack: pick("drop_reasons", "before_stack", "NULL"),
            miss: table("miss_intervals"),
            out_of_subset: pick("miss_intervals", "out_of_subset", "0"),
            no_flow: pick("miss_intervals", "no_flow", "NULL"),
            miss_queue_clamped: pick("miss_intervals", "queue_clamped", "0"),
            throttle: if col("miss_intervals", "throttles") {
                "throttles,throttled_ns,throttle_records_lost"
            } else {
                "NULL,NULL,NULL"
            },
            before_window: pick("miss_intervals", "before_window", "0"),
            sampled_ns: pick("miss_intervals", "sampled_ns", "NULL"),
            buf_map: table("buf_map_intervals"),
            size_hist: table("size_hist"),
            nic_drops: table("nic_drops"),
            slots_replaced: pick("buf_map_intervals", "slots_replaced", "0"),
            pages_over_cap: pick("buf_map_intervals", "pages_over_cap", "0"),
            hist_packed: col("stage_stats", "hist"),
        }
    }
}

/// The L3-miss rows of the covered intervals, summed; the whole-run flow and region tables.
#[derive(Debug, Clone, Default)]
pub struct MissTotals {
    /// Sums over the intervals; `no_flow`, `throttle` and `sampled_ns` only when every
    /// interval has them; `buf.entries` is the last count read; `flows` and `regions` are
    /// the whole run's.
    pub totals: MissSnapshot,
    /// Intervals with miss rows, and their summed length.
    pub intervals: u64,
    pub span_ns: u64,
    /// Largest buffer-map entry count read.
    pub entries_max: Option<u64>,
}

/// Counter readings of one source over the covered intervals, summed per socket, PMU and event.
#[derive(Debug, Clone, Default)]
pub struct CounterTotals {
    pub readings: Vec<CounterReading>,
    /// Rows summed.
    pub rows: u64,
    /// The time the readings span, s.
    pub duration_s: f64,
}

/// One queue in a group of consecutive intervals: its counts and its lifetime stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupQueue {
    pub dir: Dir,
    pub queue: u32,
    pub packets: u64,
    pub bytes: u64,
    /// The lifetime stage (`Dir::lifetime_stage`): timed packets and their summed ns.
    pub life_count: u64,
    pub life_sum_ns: u64,
}

impl GroupQueue {
    /// A queue with nothing counted: where a group starts summing, and what a group that
    /// did not see the queue stands for.
    pub fn empty(dir: Dir, queue: u32) -> GroupQueue {
        GroupQueue {
            dir,
            queue,
            packets: 0,
            bytes: 0,
            life_count: 0,
            life_sum_ns: 0,
        }
    }
}

/// Consecutive intervals summed: the unit of every per-interval series (a chart point, a
/// regression row). A recording longer than the series' point count groups its intervals.
#[derive(Debug, Clone, Default)]
pub struct IntervalGroup {
    pub first: u64,
    pub last: u64,
    /// CLOCK_MONOTONIC at the end of the last interval.
    pub t_ns: u64,
    pub dur_ns: u64,
    pub queues: Vec<GroupQueue>,
    /// The live counter readings of these intervals, summed per socket, PMU and event (when asked for).
    pub counters: Vec<CounterReading>,
}

impl IntervalGroup {
    pub fn queue(&self, dir: Dir, queue: u32) -> Option<&GroupQueue> {
        self.queues
            .iter()
            .find(|q| q.dir == dir && q.queue == queue)
    }
}

/// Counter readings of one source in a group of their own intervals (a live recording's, or
/// an imported capture's), for ratios over time.
#[derive(Debug, Clone)]
pub struct CounterPoint {
    /// CLOCK_MONOTONIC at the end of the group's last reading.
    pub t_ns: u64,
    pub dur_s: f64,
    pub readings: Vec<CounterReading>,
}

/// A bounded, evenly spread subset of the covered intervals' packet records.
#[derive(Debug, Clone, Default)]
pub struct PacketRecords {
    pub records: Vec<PacketSample>,
    /// Records in the covered intervals (all of them, read or not).
    pub total: u64,
}

/// A count, size or time as the writer stores it (u64 as i64): negative only in a damaged
/// file, and refused there, since sums of such values would wrap.
fn count(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<u64> {
    let v: i64 = r.get(i)?;
    u64::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(i, v))
}

fn opt_count(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<u64>> {
    match r.get::<_, Option<i64>>(i)? {
        Some(v) => u64::try_from(v)
            .map(Some)
            .map_err(|_| rusqlite::Error::IntegralValueOutOfRange(i, v)),
        None => Ok(None),
    }
}

/// A SUM over rows: NULL (no rows) reads as 0; negative refused as `count`.
fn sum(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<u64> {
    Ok(opt_count(r, i)?.unwrap_or(0))
}

fn dir_of(s: &str) -> Dir {
    Dir::parse(s).unwrap_or(Dir::Rx)
}

fn stage_index(dir: Dir, name: &str) -> Option<usize> {
    dir.stage_names().iter().position(|s| *s == name)
}

/// Sum readings per (socket, PMU, event), keeping the last time and summing the times enabled.
fn fold_reading(acc: &mut BTreeMap<(u32, String, String), CounterReading>, r: CounterReading) {
    match acc.get_mut(&(r.socket, r.pmu.clone(), r.event.clone())) {
        Some(a) => {
            a.value += r.value;
            a.raw = a.raw.saturating_add(r.raw);
            a.enabled_ns = a.enabled_ns.saturating_add(r.enabled_ns);
            a.running_ns = a.running_ns.saturating_add(r.running_ns);
            a.t_ns = a.t_ns.max(r.t_ns);
        }
        None => {
            acc.insert((r.socket, r.pmu.clone(), r.event.clone()), r);
        }
    }
}

impl Recording {
    /// Open a recording for reading, covering all of it; a complete, writable recording
    /// without rollups gets them first (once, with a progress line on stderr).
    pub fn open(path: &Path) -> Result<Recording> {
        Recording::open_with(path, Rollups::Use)
    }

    pub fn open_with(path: &Path, use_rollups: Rollups) -> Result<Recording> {
        let p = path.display();
        if !path.exists() {
            bail!("{p}: no such file");
        }
        if path.is_dir() {
            bail!("{p} is a directory, not a ddioscope recording");
        }
        // Read-write when possible so SQLite can roll back an interval that a
        // SIGKILL interrupted (a hot journal); read-only otherwise.
        // One thread reads: no per-call locking (it is a third of the cost of a long scan).
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .or_else(|_| {
            Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        })
        .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
        let bad = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase)
            | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
                anyhow::anyhow!("{p} is not a readable ddioscope recording (not an SQLite database, or corrupt)")
            }
            _ => anyhow::anyhow!(explain_sqlite(&e, path)),
        };
        let app: i32 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(bad)?;
        if app != APPLICATION_ID {
            bail!("{p} is an SQLite file but not a ddioscope recording");
        }
        let ver: i32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(bad)?;
        if ver > SCHEMA_VERSION {
            bail!("{p} was written by a newer ddioscope (schema {ver}; this one reads up to {SCHEMA_VERSION})");
        }
        // Aggregates over a long recording sort in SQLite's temporary storage: keep its page
        // cache small so memory stays flat whatever the length.
        let _ = conn.execute_batch("PRAGMA cache_size = -8192; PRAGMA temp_store = FILE;");
        let corrupt = |e: rusqlite::Error| anyhow::anyhow!("{p} is damaged: {e}");
        let mut meta = BTreeMap::new();
        {
            let mut st = conn
                .prepare("SELECT key, value FROM meta")
                .map_err(corrupt)?;
            let rows = st
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .map_err(corrupt)?;
            for r in rows {
                let (k, v) = r.map_err(corrupt)?;
                meta.insert(k, v);
            }
        }
        if !meta.contains_key("iface") {
            bail!("{p} has no run metadata: the recording was cut off before its first write");
        }
        let meta = RecordingMeta::from_rows(&meta);
        Recording::assemble(path, conn, meta, use_rollups, Vec::new())
    }

    /// A recording from a connection whose tables (or views, for several files) are
    /// checked here, with its metadata read.
    fn assemble(
        path: &Path,
        conn: Connection,
        meta: RecordingMeta,
        use_rollups: Rollups,
        parts: Vec<Part>,
    ) -> Result<Recording> {
        let p = path.display();
        let corrupt = |e: rusqlite::Error| anyhow::anyhow!("{p} is damaged: {e}");
        // Packed histograms (schema 2) read as the per-bucket rows of schema 1.
        super::packed::install(&conn).map_err(corrupt)?;
        let cols = Columns::probe(&conn);
        // Every column a query will read must exist, rows or not: a damaged table is found at
        // open, in one line, not by whichever report happens to read it.
        for (table, columns, needed) in REQUIRED {
            if *needed || cols.has(table) {
                conn.prepare(&format!("SELECT {columns} FROM {table} LIMIT 0"))
                    .map_err(corrupt)?;
            }
        }
        let tables = rollup::tables(&cols);
        let rollups = use_rollups == Rollups::Use
            && (rollup::present(&conn) || build_rollups(&conn, &cols, &meta, path));
        let none = Window {
            whole: true,
            first: 0,
            last: 0,
            intervals: 0,
            from_s: 0.0,
            to_s: 0.0,
            dur_ns: 0,
            start_ns: 0,
            end_ns: 0,
        };
        let mut rec = Recording {
            path: path.to_path_buf(),
            meta,
            window: none.clone(),
            all: none,
            conn,
            cols,
            tables,
            rollups,
            scanned: Default::default(),
            parts,
        };
        rec.all = Window {
            whole: true,
            ..rec.select(0.0, f64::INFINITY)?
        };
        rec.window = rec.all.clone();
        Ok(rec)
    }

    /// A damaged table or column: one line naming the file.
    fn corrupt(&self, e: rusqlite::Error) -> anyhow::Error {
        anyhow::anyhow!("{} is damaged: {e}", self.path.display())
    }

    /// CLOCK_MONOTONIC at the recording's start: recorded, else the first interval's start.
    fn start_ns(&self) -> Result<u64> {
        if let Some(s) = self.meta.start_ns {
            return Ok(s);
        }
        let first: Option<i64> = self
            .conn
            .query_row(
                "SELECT t_ns - dur_ns FROM intervals ORDER BY idx LIMIT 1",
                [],
                |r| r.get(0),
            )
            .or_else(|e| {
                if e == rusqlite::Error::QueryReturnedNoRows {
                    Ok(None)
                } else {
                    Err(e)
                }
            })
            .map_err(|e| self.corrupt(e))?;
        Ok(first.unwrap_or(0).max(0) as u64)
    }

    /// The intervals whose middle lies in [from_s, to_s) seconds from the start.
    fn select(&self, from_s: f64, to_s: f64) -> Result<Window> {
        let start = self.start_ns()? as i64;
        let ns = |s: f64| {
            if s.is_finite() {
                start.saturating_add((s * 1e9) as i64)
            } else {
                i64::MAX
            }
        };
        // MIN(idx), MAX(idx), COUNT(*), SUM(dur_ns), MIN(start), MAX(end); all NULL but the count when empty.
        let sql = if self.rollups {
            self.select_spans(ns(from_s), ns(to_s))?
        } else {
            "SELECT MIN(idx), MAX(idx), COUNT(*), SUM(dur_ns), MIN(t_ns - dur_ns), MAX(t_ns) FROM intervals
             WHERE t_ns - dur_ns / 2 >= ?1 AND t_ns - dur_ns / 2 < ?2"
                .to_string()
        };
        let v: [Option<i64>; 6] = self
            .conn
            .query_row(&sql, params![ns(from_s), ns(to_s)], |r| {
                Ok([
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ])
            })
            .map_err(|e| self.corrupt(e))?;
        let [first, last, n, dur, lo, hi] = v;
        let n = n.unwrap_or(0);
        let (lo, hi) = (
            lo.unwrap_or(start).max(0) as u64,
            hi.unwrap_or(start).max(0) as u64,
        );
        Ok(Window {
            whole: false,
            first: first.unwrap_or(0).max(0) as u64,
            last: last.unwrap_or(-1).max(0) as u64,
            intervals: n.max(0) as u64,
            from_s: lo.saturating_sub(start as u64) as f64 / 1e9,
            to_s: hi.saturating_sub(start as u64) as f64 / 1e9,
            dur_ns: dur.unwrap_or(0).max(0) as u64,
            start_ns: lo,
            end_ns: hi,
        })
    }

    /// `select`'s query with rollups: whole minutes whose intervals' middles all lie in
    /// [?1, ?2) (or, once their raw intervals are dropped, the minute's middle), and raw
    /// intervals of the minutes that straddle an end and of any not yet rolled up.
    fn select_spans(&self, lo: i64, hi: i64) -> Result<String> {
        let e = |e| self.corrupt(e);
        let mut ranges: Vec<(i64, i64)> = {
            let mut st = self
                .conn
                .prepare(
                    "SELECT interval, last FROM rollup_spans WHERE level = 1 AND raw = 1
                     AND mid_hi >= ?1 AND mid_lo < ?2 AND NOT (mid_lo >= ?1 AND mid_hi < ?2)",
                )
                .map_err(e)?;
            let rows = st
                .query_map(params![lo, hi], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(e)?;
            rows.collect::<rusqlite::Result<_>>().map_err(e)?
        };
        let (first, last): (Option<i64>, Option<i64>) = self
            .conn
            .query_row(
                "SELECT MIN(interval), MAX(last) FROM rollup_spans WHERE level = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(e)?;
        match (first, last) {
            (Some(f), Some(l)) => {
                ranges.push((i64::MIN, f - 1));
                ranges.push((l + 1, i64::MAX));
            }
            _ => ranges.push((i64::MIN, i64::MAX)),
        }
        let raw: Vec<String> = ranges
            .iter()
            .map(|(a, b)| format!("idx BETWEEN {a} AND {b}"))
            .collect();
        Ok(format!(
            "SELECT MIN(f), MAX(l), COALESCE(SUM(n), 0), SUM(d), MIN(s), MAX(e) FROM (
               SELECT interval AS f, last AS l, n, dur_ns AS d, start_ns AS s, t_ns AS e FROM rollup_spans
               WHERE level = 1 AND ((mid_lo >= ?1 AND mid_hi < ?2)
                 OR (raw = 0 AND (mid_lo + mid_hi) / 2 >= ?1 AND (mid_lo + mid_hi) / 2 < ?2))
               UNION ALL
               SELECT idx, idx, 1, dur_ns, t_ns - dur_ns, t_ns FROM intervals
               WHERE ({}) AND t_ns - dur_ns / 2 >= ?1 AND t_ns - dur_ns / 2 < ?2)",
            raw.join(" OR ")
        ))
    }

    /// Cover only the intervals between `from` and `to` (either open): refused, in one line,
    /// when none lies between them.
    pub fn set_window(&mut self, from: Option<TimeSpec>, to: Option<TimeSpec>) -> Result<()> {
        if from.is_none() && to.is_none() {
            return Ok(());
        }
        let length = self.all.to_s;
        let (from_s, to_s) = bounds(from, to, self.meta.start_unix_ms, length)?;
        let w = self.select(from_s, to_s)?;
        if w.intervals == 0 {
            // Said back in the user's terms: a wall-clock time given stays a wall-clock time.
            let start = self.meta.start_unix_ms;
            let said = |t: Option<TimeSpec>, v: f64, none: &str| {
                // The time as given, not as clamped to the recording.
                t.map_or_else(
                    || none.to_string(),
                    |t| t.describe(t.offset_s(start, length).unwrap_or(v), start),
                )
            };
            let wall = from.or(to).is_some_and(|t| t.is_wall_clock());
            let covers = match start
                .filter(|_| wall)
                .and_then(|s| Some((clock_at(0.0, s)?, clock_at(length, s)?)))
            {
                Some((a, b)) => format!("it ran from {a} to {b}"),
                None => format!("it covers 0 to {length:.1} s"),
            };
            bail!(
                "no interval of {} lies between {} and {} ({covers})",
                self.path.display(),
                said(from, from_s, "its start"),
                said(to, to_s, "its end")
            );
        }
        self.window = Window {
            whole: w.first == self.all.first && w.last == self.all.last,
            ..w
        };
        self.scanned = Default::default();
        Ok(())
    }

    /// The recorded interface (a default one when its metadata is damaged).
    pub fn iface(&self) -> IfaceInfo {
        self.meta.iface.clone().unwrap_or_default()
    }

    /// The recording host (a default one when its metadata is damaged).
    pub fn host(&self) -> HostInfo {
        self.meta.host.clone().unwrap_or_default()
    }

    pub fn complete(&self) -> bool {
        self.meta.complete()
    }

    /// `flow_overflow` of this recording (of all its files, summed).
    pub fn flow_overflow(&self) -> Result<Vec<crate::probe::qcount::FlowOverflow>> {
        flow_overflow_in(&self.conn, &self.path)
    }

    /// `page_pools` of this recording (of its files, the last read).
    pub fn page_pools(&self) -> Result<Vec<crate::snapshot::PagePoolStat>> {
        page_pools_in(&self.conn, &self.path)
    }

    /// `socket_queues` of this recording (of its files, the last read).
    pub fn socket_queues(&self) -> Result<Vec<crate::snapshot::SocketQueueStat>> {
        socket_queues_in(&self.conn, &self.path)
    }

    pub fn duration_s(&self) -> f64 {
        self.window.duration_s()
    }

    fn range(&self) -> (i64, i64) {
        if self.window.intervals == 0 {
            (1, 0)
        } else {
            (self.window.first as i64, self.window.last as i64)
        }
    }

    /// The table rolled up from raw table `raw`.
    fn rolled(&self, raw: &str) -> &Rolled {
        self.tables
            .iter()
            .find(|t| t.raw == raw)
            .expect("every rolled table is listed")
    }

    /// The window as pieces: spans of up to `max_level` where they fit it exactly, raw
    /// intervals at its edges (all raw without rollups).
    fn pieces(&self, max_level: i64) -> Result<Vec<Piece>> {
        let (a, b) = self.range();
        if a > b {
            return Ok(Vec::new());
        }
        if !self.rollups {
            return Ok(vec![Piece {
                level: 0,
                lo: a,
                hi: b,
            }]);
        }
        rollup::cover(&self.conn, a, b, max_level).map_err(|e| self.corrupt(e))
    }

    /// What to write after a raw table's name for a piece: a piece of most of the recording
    /// reads faster as a plain scan in row order than through its index.
    fn hint(&self, p: &Piece) -> &'static str {
        let n = (p.hi - p.lo + 1).max(0) as u64;
        if p.level == 0 && n * 4 >= self.all.intervals {
            "NOT INDEXED"
        } else {
            ""
        }
    }

    /// How the window's series is grouped (the same with rollups or without).
    fn grouping(&self) -> Result<Grouping> {
        let (a, b) = self.range();
        let n = self.window.intervals;
        let pruned = self.rollups
            && {
                let x: Option<i64> = self
                .conn
                .query_row(
                    "SELECT 1 FROM rollup_spans WHERE level = 1 AND raw = 0 AND last >= ?1 AND interval <= ?2 LIMIT 1",
                    params![a, b],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| self.corrupt(e))?;
                x.is_some()
            };
        if n <= MINUTE_SERIES_AFTER && !pruned {
            let k = (n as usize).div_ceil(SERIES_POINTS).max(1) as i64;
            return Ok(Grouping::Intervals { a, k });
        }
        let (b0, b1) = (self.minute_of(a)?, self.minute_of(b)?);
        let m = (b1.saturating_sub(b0) + 1)
            .div_ceil(SERIES_POINTS as u64)
            .max(1);
        Ok(Grouping::Minutes { b0, m })
    }

    /// The minute (`rollup::bucket`) of interval `idx`: from its row, or its span's.
    fn minute_of(&self, idx: i64) -> Result<u64> {
        let raw: Option<(i64, i64)> = self
            .conn
            .query_row(
                "SELECT t_ns, dur_ns FROM intervals WHERE idx = ?1",
                [idx],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.corrupt(e))?;
        if let Some((t, d)) = raw {
            return Ok(rollup::bucket(MINUTE, t.max(0) as u64, d.max(0) as u64));
        }
        let span: Option<i64> = if self.rollups {
            self.conn
                .query_row(
                    "SELECT bucket FROM rollup_spans WHERE level = 1 AND interval <= ?1 AND last >= ?1",
                    [idx],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| self.corrupt(e))?
        } else {
            None
        };
        Ok(span.unwrap_or(0).max(0) as u64)
    }

    /// The window's intervals, queue counts and stage statistics in one pass over each
    /// piece: three cursors advanced together by interval (tables written one interval per
    /// transaction hold their rows in interval order), so nothing per interval is kept. Raw
    /// tables out of that order are read through their index instead.
    fn scan(&self) -> Result<&Scan> {
        if let Some(s) = self.scanned.get() {
            return Ok(s);
        }
        let s = match self.scan_ordered(false)? {
            Some(s) => s,
            None => self.scan_ordered(true)?.unwrap_or_default(),
        };
        Ok(self.scanned.get_or_init(|| s))
    }

    /// `scan`, reading raw rows in storage order (`by_index` false) or through the interval
    /// index; None when storage order is not interval order. A series grouped by minutes
    /// reads minute spans; one grouped by intervals reads raw intervals.
    fn scan_ordered(&self, by_index: bool) -> Result<Option<Scan>> {
        let grouping = self.grouping()?;
        let max_level = match grouping {
            Grouping::Intervals { .. } => 0,
            Grouping::Minutes { .. } => MINUTE,
        };
        let mut st = ScanState {
            grouping,
            scan: Scan::default(),
            group_sums: BTreeMap::new(),
            group_key: None,
        };
        for p in self.pieces(max_level)? {
            if !self.scan_piece(&p, by_index, &mut st)? {
                return Ok(None);
            }
        }
        let mut scan = st.scan;
        if let Some(g) = scan.groups.last_mut() {
            g.queues = st.group_sums.into_values().collect();
        }
        Ok(Some(scan))
    }

    /// One piece of `scan`: false when a raw table is out of interval order.
    fn scan_piece(&self, p: &Piece, by_index: bool, st: &mut ScanState) -> Result<bool> {
        let e = |e| self.corrupt(e);
        let (lo, hi) = (p.lo, p.hi);
        let (units, qsql, ssql) = if p.level == 0 {
            let (hint, order) = if by_index {
                ("", "ORDER BY interval")
            } else {
                (self.hint(p), "")
            };
            (
                format!("SELECT idx,t_ns,dur_ns,NULL,idx FROM intervals WHERE idx BETWEEN {lo} AND {hi} ORDER BY idx"),
                format!(
                    "SELECT interval,dir,queue,packets,bytes,napi_polls,napi_work,napi_budget_exhausted,copies,frees,drops,{},{},NULL
                     FROM queue_intervals {hint} WHERE interval BETWEEN {lo} AND {hi} {order}",
                    self.cols.handups, self.cols.unended
                ),
                format!("SELECT interval,dir,queue,stage,count,sum_ns,max_ns FROM stage_stats {hint} WHERE interval BETWEEN {lo} AND {hi} {order}"),
            )
        } else {
            let w = format!(
                "WHERE level = {} AND interval BETWEEN {lo} AND {hi} ORDER BY interval",
                p.level
            );
            (
                format!("SELECT interval,t_ns,dur_ns,bucket,last FROM rollup_spans {w}"),
                format!("SELECT interval,dir,queue,packets,bytes,napi_polls,napi_work,napi_budget_exhausted,copies,frees,drops,handups,unended,peak_inflight FROM rollup_queues {w}"),
                format!("SELECT interval,dir,queue,stage,count,sum_ns,max_ns FROM rollup_stage_stats {w}"),
            )
        };
        let mut ist = self.conn.prepare(&units).map_err(e)?;
        let mut qst = self.conn.prepare(&qsql).map_err(e)?;
        let mut sst = self.conn.prepare(&ssql).map_err(e)?;
        let mut irows = ist.query([]).map_err(e)?;
        let mut qrows = qst.query([]).map_err(e)?;
        let mut srows = sst.query([]).map_err(e)?;
        // The next row of each table, read ahead: (interval, row values, peak in flight).
        type QRow = (i64, Dir, u32, [u64; 10], Option<u64>);
        type SRow = (i64, Dir, u32, Option<usize>, [u64; 3]);
        let next_q = |rows: &mut rusqlite::Rows<'_>| -> Result<Option<QRow>> {
            let Some(r) = rows.next().map_err(e)? else {
                return Ok(None);
            };
            let g = |i: usize| -> Result<u64> { sum(r, i).map_err(|x| self.corrupt(x)) };
            let mut v = [0u64; 10];
            for (i, slot) in v.iter_mut().enumerate() {
                *slot = g(i + 3)?;
            }
            Ok(Some((
                r.get(0).map_err(e)?,
                dir_of(r.get_ref(1).map_err(e)?.as_str().unwrap_or("rx")),
                r.get(2).map_err(e)?,
                v,
                opt_count(r, 13).map_err(e)?,
            )))
        };
        let next_s = |rows: &mut rusqlite::Rows<'_>| -> Result<Option<SRow>> {
            let Some(r) = rows.next().map_err(e)? else {
                return Ok(None);
            };
            let dir = dir_of(r.get_ref(1).map_err(e)?.as_str().unwrap_or("rx"));
            let stage = r.get_ref(3).map_err(e)?.as_str().unwrap_or("");
            let si = stage_index(dir, stage);
            let g = |i: usize| -> Result<u64> { sum(r, i).map_err(|x| self.corrupt(x)) };
            Ok(Some((
                r.get(0).map_err(e)?,
                dir,
                r.get(2).map_err(e)?,
                si,
                [g(4)?, g(5)?, g(6)?],
            )))
        };
        let span = p.level > 0;
        let mut q_ahead = next_q(&mut qrows)?;
        let mut s_ahead = next_s(&mut srows)?;
        let mut last_q = i64::MIN;
        let mut last_s = i64::MIN;
        while let Some(r) = irows.next().map_err(e)? {
            let iv: i64 = r.get(0).map_err(e)?;
            let t_ns = count(r, 1).map_err(e)?;
            let dur_ns = count(r, 2).map_err(e)?;
            let bucket = match opt_count(r, 3).map_err(e)? {
                Some(b) => b,
                None => rollup::bucket(MINUTE, t_ns, dur_ns),
            };
            let last: i64 = r.get(4).map_err(e)?;
            st.enter(iv, last, t_ns, dur_ns, bucket);
            // This interval's packets per queue, for Little's law with its lifetime stage.
            let mut packets: BTreeMap<(Dir, u32), u64> = BTreeMap::new();
            while let Some((qi, dir, queue, v, peak)) = q_ahead.filter(|q| q.0 <= iv) {
                if qi < last_q {
                    return Ok(false);
                }
                last_q = qi;
                if qi == iv {
                    st.add_queue(dir, queue, &v);
                    packets.insert((dir, queue), v[0]);
                    if let Some(pk) = peak {
                        st.peak(dir, queue, pk);
                    }
                }
                q_ahead = next_q(&mut qrows)?;
            }
            while let Some((si_iv, dir, queue, si, v)) = s_ahead.filter(|s| s.0 <= iv) {
                if si_iv < last_s {
                    return Ok(false);
                }
                last_s = si_iv;
                if let (true, Some(si)) = (si_iv == iv, si) {
                    st.add_stage(dir, queue, si, &v);
                    // Peak in flight: this interval's packet rate × its mean lifetime (a
                    // span carries the most of its intervals').
                    if let (false, true, Some(&pk), true, true) = (
                        span,
                        si == dir.lifetime_stage(),
                        packets.get(&(dir, queue)),
                        v[0] > 0,
                        dur_ns > 0,
                    ) {
                        st.peak(dir, queue, rollup::inflight(pk, dur_ns, v[0], v[1]));
                    }
                }
                s_ahead = next_s(&mut srows)?;
            }
        }
        Ok(true)
    }

    /// Per-queue totals over the covered intervals, with their histograms (queues with rows only).
    pub fn queue_totals(&self) -> Result<Vec<QueueCounters>> {
        let e = |e| self.corrupt(e);
        let mut map = self.scan()?.totals.clone();
        // The histograms are the largest per-interval tables: summed while streaming, which
        // is several times faster than SQLite's sorting GROUP BY.
        for p in self.pieces(HOUR)? {
            let hint = self.hint(&p);
            let sql = self.rolled("stage_hist").select(p, hint);
            let mut st = self
                .conn
                .prepare(&format!("SELECT dir,queue,stage,bucket,count FROM ({sql})"))
                .map_err(e)?;
            let mut rows = st.query([]).map_err(e)?;
            while let Some(r) = rows.next().map_err(e)? {
                let dir = dir_of(r.get_ref(0).map_err(e)?.as_str().unwrap_or("rx"));
                let queue: u32 = r.get(1).map_err(e)?;
                let stage = r.get_ref(2).map_err(e)?.as_str().unwrap_or("");
                let Some(si) = stage_index(dir, stage) else {
                    continue;
                };
                let bucket = r.get::<_, i64>(3).map_err(e)?;
                let n = count(r, 4).map_err(e)?;
                let q = map
                    .entry((dir, queue))
                    .or_insert_with(|| QueueCounters::new(dir, queue));
                if let Some(slot) = usize::try_from(bucket)
                    .ok()
                    .and_then(|b| q.stage_hist[si].get_mut(b))
                {
                    *slot = slot.saturating_add(n);
                }
            }
            let sql = self.rolled("napi_hist").select(p, hint);
            let mut st = self
                .conn
                .prepare(&format!("SELECT queue,bucket,count FROM ({sql})"))
                .map_err(e)?;
            let mut rows = st.query([]).map_err(e)?;
            while let Some(r) = rows.next().map_err(e)? {
                let queue: u32 = r.get(0).map_err(e)?;
                let bucket = r.get::<_, i64>(1).map_err(e)?;
                let n = count(r, 2).map_err(e)?;
                let q = map
                    .entry((Dir::Rx, queue))
                    .or_insert_with(|| QueueCounters::new(Dir::Rx, queue));
                if let Some(slot) = usize::try_from(bucket)
                    .ok()
                    .filter(|b| *b < NAPI_BUCKETS)
                    .and_then(|b| q.napi_work_hist.get_mut(b))
                {
                    *slot = slot.saturating_add(n);
                }
            }
        }
        if self.cols.size_hist {
            // Frame sizes are timed in the detail windows only: few rows, read raw (no rollup).
            let (a, b) = self.range();
            let mut st = self
                .conn
                .prepare(
                    "SELECT dir,queue,bucket,SUM(count) FROM size_hist WHERE interval BETWEEN ?1 AND ?2
                     GROUP BY dir,queue,bucket",
                )
                .map_err(e)?;
            let mut rows = st.query(params![a, b]).map_err(e)?;
            while let Some(r) = rows.next().map_err(e)? {
                let dir = dir_of(r.get_ref(0).map_err(e)?.as_str().unwrap_or("rx"));
                let queue: u32 = r.get(1).map_err(e)?;
                let bucket = r.get::<_, i64>(2).map_err(e)?;
                let n = count(r, 3).map_err(e)?;
                let q = map
                    .entry((dir, queue))
                    .or_insert_with(|| QueueCounters::new(dir, queue));
                if let Some(slot) = usize::try_from(bucket)
                    .ok()
                    .and_then(|b| q.size_hist.get_mut(b))
                {
                    *slot = slot.saturating_add(n);
                }
            }
        }
        Ok(map.into_values().collect())
    }

    /// The NIC's ring-drop counters summed over the window, by counter and queue (None: the
    /// device's), every counter the driver has, zero or not; None: the recording has no
    /// such table (it predates it).
    pub fn nic_drop_totals(&self) -> Result<Option<Vec<crate::snapshot::NicDrop>>> {
        if !self.cols.nic_drops {
            return Ok(None);
        }
        let e = |e| self.corrupt(e);
        let (a, b) = self.range();
        // Every counter appears on the first interval, so the names come from the whole run.
        let mut st = self
            .conn
            .prepare(
                "SELECT counter,queue,SUM(CASE WHEN interval BETWEEN ?1 AND ?2 THEN count ELSE 0 END)
                 FROM nic_drops GROUP BY counter,queue ORDER BY counter,queue",
            )
            .map_err(e)?;
        let rows = st
            .query_map(params![a, b], |r| {
                Ok(crate::snapshot::NicDrop {
                    counter: r.get(0)?,
                    queue: r.get(1)?,
                    count: sum(r, 2)?,
                })
            })
            .map_err(e)?;
        rows.map(|r| r.map_err(e))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// The window's rows of raw table `raw` and its rollups, as one SQL source.
    fn source(&self, raw: &str) -> Result<String> {
        let pieces = self.pieces(HOUR)?;
        let hint = pieces
            .iter()
            .map(|p| self.hint(p))
            .find(|h| !h.is_empty())
            .unwrap_or("");
        Ok(self.rolled(raw).source(&pieces, hint))
    }

    pub fn event_totals(&self) -> Result<EventCounters> {
        let src = self.source("intervals")?;
        self.conn
            .query_row(
                &format!(
                    "SELECT SUM(sampled),SUM(lost),SUM(received),SUM(state_evicted),SUM(queue_clamped),SUM(state_stale) FROM ({src})"
                ),
                [],
                |r| {
                    let g = |i: usize| -> rusqlite::Result<u64> { sum(r, i) };
                    Ok(EventCounters {
                        sampled: g(0)?,
                        lost: g(1)?,
                        received: g(2)?,
                        state_evicted: g(3)?,
                        queue_clamped: g(4)?,
                        state_stale: g(5)?,
                    })
                },
            )
            .map_err(|e| self.corrupt(e))
    }

    /// How long the detail hooks ran in the covered intervals (None: all the time, a
    /// recording from before detail windows).
    pub fn detail_ns(&self) -> Result<Option<u64>> {
        let src = self.source("intervals")?;
        let (sum, n, all): (Option<i64>, Option<i64>, Option<i64>) = self
            .conn
            .query_row(
                &format!("SELECT SUM(detail_ns), SUM(detail_n), SUM(n) FROM ({src})"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(|e| self.corrupt(e))?;
        let (n, all) = (n.unwrap_or(0), all.unwrap_or(0));
        Ok((n == all && n > 0).then(|| sum.unwrap_or(0).max(0) as u64))
    }

    /// The run's flows (a whole-run table: with a window, the flows active in it, with their
    /// whole-run counts).
    pub fn flows(&self) -> Result<Vec<FlowCounters>> {
        let e = |e| self.corrupt(e);
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT dir,proto,src,sport,dst,dport,queue,packets,bytes,payload_bytes,first_ns,last_ns,{},{} FROM flows",
                self.cols.flow_samples, self.cols.flow_source
            ))
            .map_err(e)?;
        let mut rows = st.query([]).map_err(e)?;
        let mut flows = Vec::new();
        while let Some(r) = rows.next().map_err(e)? {
            let g = |i: usize| -> Result<u64> { count(r, i).map_err(|x| self.corrupt(x)) };
            let f = FlowCounters {
                key: FlowKey {
                    dir: dir_of(&r.get::<_, String>(0).map_err(e)?),
                    proto: r.get(1).map_err(e)?,
                    src: r.get(2).map_err(e)?,
                    sport: r.get(3).map_err(e)?,
                    dst: r.get(4).map_err(e)?,
                    dport: r.get(5).map_err(e)?,
                },
                queue: r.get(6).map_err(e)?,
                packets: g(7)?,
                bytes: g(8)?,
                payload_bytes: g(9)?,
                first_ns: g(10)?,
                last_ns: g(11)?,
                samples: opt_count(r, 12).map_err(e)?,
                bytes_var: opt_count(r, 13).map_err(e)?,
                source: r.get(14).map_err(e)?,
            };
            let w = &self.window;
            // A flow first seen before the window ends and last seen after it starts (a zero
            // first time is an unknown one).
            if w.whole || ((f.first_ns == 0 || f.first_ns <= w.end_ns) && f.last_ns >= w.start_ns) {
                flows.push(f);
            }
        }
        Ok(flows)
    }

    /// Drops by kernel reason over the run (a whole-run table): (reason, count, of them RX
    /// packets dropped before the stack took them in; None in recordings from before that
    /// was kept).
    pub fn drop_reasons(&self) -> Result<Vec<(u32, u64, Option<u64>)>> {
        let e = |e| self.corrupt(e);
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT reason,count,{} FROM drop_reasons ORDER BY reason",
                self.cols.drops_before_stack
            ))
            .map_err(e)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    count(r, 1)?,
                    r.get::<_, Option<i64>>(2)?.map(|v| v.max(0) as u64),
                ))
            })
            .map_err(e)?;
        rows.map(|r| r.map_err(e)).collect()
    }

    /// The WHERE clause selecting a source's readable counter rows in the window (see
    /// `COUNTER_ROW_READABLE`).
    fn counter_filter(&self, source: &str) -> String {
        format!("{} AND {COUNTER_ROW_READABLE}", self.counter_window(source))
    }

    /// The window's counter rows of a source that a report cannot read (a count stored
    /// negative, a value that is not a number): how many, and the first few as
    /// "EVENT on socket S, interval I".
    pub fn unreadable_counter_rows(&self, source: &str) -> Result<(u64, Vec<String>)> {
        let e = |e| self.corrupt(e);
        let bad = format!(
            "{} AND NOT ({COUNTER_ROW_READABLE})",
            self.counter_window(source)
        );
        let n: u64 = if self.rollups && !is_imported(source) {
            // Spans count theirs; only the edges' rows are counted here.
            let mut n = 0u64;
            for p in self.pieces(HOUR)? {
                let sql = if p.level == 0 {
                    format!(
                        "SELECT COUNT(*) FROM counters WHERE {bad} AND interval BETWEEN {} AND {}",
                        p.lo, p.hi
                    )
                } else {
                    format!(
                        "SELECT SUM(unreadable) FROM rollup_counter_spans WHERE source = ?1 AND level = {} AND interval BETWEEN {} AND {}",
                        p.level, p.lo, p.hi
                    )
                };
                n = n.saturating_add(
                    self.conn
                        .query_row(&sql, [source], |r| sum(r, 0))
                        .map_err(e)?,
                );
            }
            n
        } else {
            self.conn
                .query_row(
                    &format!("SELECT COUNT(*) FROM counters WHERE {bad}"),
                    [source],
                    |r| sum(r, 0),
                )
                .map_err(e)?
        };
        if n == 0 {
            return Ok((0, Vec::new()));
        }
        let mut st = self
            .conn
            .prepare(&format!("SELECT event, CAST(socket AS TEXT), CAST(interval AS TEXT) FROM counters WHERE {bad} LIMIT 3"))
            .map_err(e)?;
        let named = st
            .query_map([source], |r| {
                let t = |i: usize| r.get::<_, Option<String>>(i).map(Option::unwrap_or_default);
                Ok(format!("{} on socket {}, interval {}", t(0)?, t(1)?, t(2)?))
            })
            .map_err(e)?
            .collect::<rusqlite::Result<Vec<String>>>()
            .map_err(e)?;
        Ok((n, named))
    }

    /// The WHERE clause selecting a source's counter rows in the window: live and software
    /// rows by the recording's interval, imported ones (the capture's own intervals) by time.
    fn counter_window(&self, source: &str) -> String {
        let (a, b) = self.range();
        if is_imported(source) {
            if self.window.whole {
                "source = ?1".into()
            } else {
                format!(
                    "source = ?1 AND t_ns > {} AND t_ns <= {}",
                    self.window.start_ns, self.window.end_ns
                )
            }
        } else {
            format!("source = ?1 AND interval BETWEEN {a} AND {b}")
        }
    }

    /// A source's counter readings over the window, summed per socket, PMU and event; the
    /// time they span: an imported capture's from the start to its last reading (perf's own
    /// clock, shifted onto the recording's), else the recording intervals that have readings.
    pub fn counter_totals(&self, source: &str) -> Result<CounterTotals> {
        let e = |e| self.corrupt(e);
        let filter = self.counter_filter(source);
        let imported = is_imported(source);
        // The live sources' readable rows, raw at the edges and rolled up in between; an
        // imported capture's own rows.
        let src = if imported {
            format!("SELECT socket,pmu,event,value,raw,enabled_ns,running_ns,t_ns,1 AS rows FROM counters WHERE {filter}")
        } else {
            format!(
                "SELECT * FROM ({}) WHERE source = ?1",
                self.source("counters")?
            )
        };
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT socket,pmu,event,SUM(value),SUM(raw),SUM(enabled_ns),SUM(running_ns),MAX(t_ns),SUM(rows) FROM ({src})
                 GROUP BY socket,pmu,event"
            ))
            .map_err(e)?;
        let mut rows = st.query([source]).map_err(e)?;
        let mut t = CounterTotals::default();
        let mut last_t = 0u64;
        while let Some(r) = rows.next().map_err(e)? {
            let g = |i: usize| -> Result<u64> { count(r, i).map_err(|x| self.corrupt(x)) };
            let reading = CounterReading {
                t_ns: g(7)?,
                socket: r.get(0).map_err(e)?,
                pmu: r.get(1).map_err(e)?,
                event: r.get(2).map_err(e)?,
                value: r.get(3).map_err(e)?,
                raw: g(4)?,
                enabled_ns: g(5)?,
                running_ns: g(6)?,
            };
            last_t = last_t.max(reading.t_ns);
            t.rows = t.rows.saturating_add(g(8)?);
            t.readings.push(reading);
        }
        t.duration_s = if imported {
            let from = if self.window.whole {
                self.meta.start_ns.unwrap_or(0)
            } else {
                self.window.start_ns
            };
            last_t.saturating_sub(from) as f64 / 1e9
        } else {
            let mut ns = 0u64;
            for p in self.pieces(HOUR)? {
                let sql = if p.level == 0 {
                    format!("SELECT SUM(dur_ns) FROM intervals WHERE idx IN (SELECT DISTINCT interval FROM counters WHERE {filter} AND interval BETWEEN {} AND {})", p.lo, p.hi)
                } else {
                    format!(
                        "SELECT SUM(dur_ns) FROM rollup_counter_spans WHERE source = ?1 AND level = {} AND interval BETWEEN {} AND {}",
                        p.level, p.lo, p.hi
                    )
                };
                ns = ns.saturating_add(
                    self.conn
                        .query_row(&sql, [source], |r| sum(r, 0))
                        .map_err(e)?,
                );
            }
            ns as f64 / 1e9
        };
        Ok(t)
    }

    /// The L3-miss rows of the window, summed (None: no miss table, or no rows in the window).
    pub fn miss_totals(&self) -> Result<Option<MissTotals>> {
        if !self.cols.miss {
            return Ok(None);
        }
        let e = |e| self.corrupt(e);
        // A sum that stands only if every interval has the column (else None).
        let all = |col: &str| format!("CASE WHEN SUM({col}_n) = SUM(n) THEN SUM({col}) END");
        let src = self.source("miss_intervals")?;
        let sql = format!(
            "SELECT SUM(n),SUM(samples),SUM(on_packet_buffers),SUM(other_addr),SUM(no_addr),SUM(ctx_charged),SUM(uncharged),
                    SUM(out_of_subset),{},SUM(queue_clamped),{},{},{},SUM(before_window),{},SUM(span_ns)
             FROM ({src})",
            all("no_flow"),
            all("throttles"),
            all("throttled_ns"),
            all("throttle_records_lost"),
            all("sampled_ns"),
        );
        let mut t = MissTotals::default();
        let n = self
            .conn
            .query_row(&sql, [], |r| {
                let g = |i: usize| -> rusqlite::Result<u64> { sum(r, i) };
                let opt = |i: usize| -> rusqlite::Result<Option<u64>> { opt_count(r, i) };
                let m = &mut t.totals;
                m.samples = g(1)?;
                m.on_packet_buffers = g(2)?;
                m.other_addr = g(3)?;
                m.no_addr = g(4)?;
                m.ctx_charged = g(5)?;
                m.uncharged = g(6)?;
                m.out_of_subset = g(7)?;
                m.no_flow = opt(8)?;
                m.queue_clamped = g(9)?;
                m.throttle = match (opt(10)?, opt(11)?, opt(12)?) {
                    (Some(throttles), Some(throttled_ns), Some(records_lost)) => {
                        Some(SamplerThrottle {
                            throttles,
                            throttled_ns,
                            records_lost,
                        })
                    }
                    _ => None,
                };
                m.before_window = g(13)?;
                m.sampled_ns = opt(14)?;
                t.span_ns = g(15)?;
                g(0)
            })
            .map_err(e)?;
        if n == 0 {
            return Ok(None);
        }
        t.intervals = n;
        let m = &mut t.totals;
        m.age_hist = vec![0; NBUCKETS];
        if self.cols.buf_map {
            let src = self.source("buf_map_intervals")?;
            let sql = format!(
                "SELECT SUM(linear_pages),SUM(frag_pages),SUM(frags_over_cap),SUM(frags_no_page),SUM(frags_no_layout),
                        SUM(copy_linear_joined),SUM(copy_frag_joined),SUM(slots_replaced),SUM(pages_over_cap),MAX(entries_max),
                        (SELECT entries_last FROM ({src}) WHERE entries_at IS NOT NULL ORDER BY entries_at DESC LIMIT 1)
                 FROM ({src})"
            );
            let (buf, max) = self
                .conn
                .query_row(&sql, [], |r| {
                    let g = |i: usize| -> rusqlite::Result<u64> { sum(r, i) };
                    Ok((
                        BufMapCounters {
                            linear_pages: g(0)?,
                            frag_pages: g(1)?,
                            frags_over_cap: g(2)?,
                            frags_no_page: g(3)?,
                            frags_no_layout: g(4)?,
                            copy_linear_joined: g(5)?,
                            copy_frag_joined: g(6)?,
                            slots_replaced: g(7)?,
                            pages_over_cap: g(8)?,
                            entries: opt_count(r, 10)?,
                        },
                        opt_count(r, 9)?,
                    ))
                })
                .map_err(e)?;
            m.buf = buf;
            t.entries_max = max;
        }
        let src = self.source("miss_queues")?;
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT dir,queue,SUM(addr_join),SUM(cpu_ctx) FROM ({src}) GROUP BY dir,queue"
            ))
            .map_err(e)?;
        let mut rows = st.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let g = |i: usize| -> Result<u64> { count(r, i).map_err(|x| self.corrupt(x)) };
            m.queues.push((
                dir_of(&r.get::<_, String>(0).map_err(e)?),
                r.get(1).map_err(e)?,
                g(2)?,
                g(3)?,
            ));
        }
        let src = self.source("miss_age_hist")?;
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT bucket,SUM(count) FROM ({src}) GROUP BY bucket"
            ))
            .map_err(e)?;
        let mut rows = st.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let b = r.get::<_, i64>(0).map_err(e)?;
            if let Some(slot) = usize::try_from(b).ok().and_then(|b| m.age_hist.get_mut(b)) {
                *slot = count(r, 1).map_err(e)?;
            }
        }
        let mut st = self
            .conn
            .prepare("SELECT dir,proto,src,sport,dst,dport,addr_join,cpu_ctx FROM miss_flows")
            .map_err(e)?;
        let mut rows = st.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let k = FlowKey {
                dir: dir_of(&r.get::<_, String>(0).map_err(e)?),
                proto: r.get(1).map_err(e)?,
                src: r.get(2).map_err(e)?,
                sport: r.get(3).map_err(e)?,
                dst: r.get(4).map_err(e)?,
                dport: r.get(5).map_err(e)?,
            };
            m.flows
                .push((k, count(r, 6).map_err(e)?, count(r, 7).map_err(e)?));
        }
        let mut st = self
            .conn
            .prepare("SELECT region,samples FROM miss_regions ORDER BY samples DESC")
            .map_err(e)?;
        // A region is an address range (any u64); its sample count is a count.
        let rows = st
            .query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, count(r, 1)?)))
            .map_err(e)?;
        for r in rows {
            m.regions.push(r.map_err(e)?);
        }
        Ok(Some(t))
    }

    /// The covered intervals in at most `SERIES_POINTS` groups of consecutive intervals (one
    /// interval a group while they fit), with each queue's counts and lifetime stage, and
    /// the readings of counter source `counters` by recording interval (live or software).
    pub fn interval_groups(&self, counters: Option<&str>) -> Result<Vec<IntervalGroup>> {
        let mut groups = self.scan()?.groups.clone();
        let Some(source) = counters else {
            return Ok(groups);
        };
        let e = |e| self.corrupt(e);
        let mut acc: Vec<BTreeMap<(u32, String, String), CounterReading>> =
            vec![BTreeMap::new(); groups.len()];
        let filter = self.counter_filter(source);
        let cols = "interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns";
        // Read as the groups were: minute spans for a series by the minute, raw intervals
        // otherwise (an imported capture's own rows by time).
        let sqls: Vec<String> = if is_imported(source) {
            vec![format!("SELECT {cols} FROM counters WHERE {filter}")]
        } else {
            let max_level = match self.grouping()? {
                Grouping::Intervals { .. } => 0,
                Grouping::Minutes { .. } => MINUTE,
            };
            self.pieces(max_level)?
                .iter()
                .map(|p| {
                    if p.level == 0 {
                        format!(
                            "SELECT {cols} FROM counters WHERE {filter} AND interval BETWEEN {} AND {}",
                            p.lo, p.hi
                        )
                    } else {
                        format!(
                            "SELECT {cols} FROM rollup_counters WHERE source = ?1 AND level = {} AND interval BETWEEN {} AND {}",
                            p.level, p.lo, p.hi
                        )
                    }
                })
                .collect()
        };
        for sql in sqls {
            let mut st = self.conn.prepare(&sql).map_err(e)?;
            let mut rows = st.query([source]).map_err(e)?;
            while let Some(r) = rows.next().map_err(e)? {
                let iv: i64 = r.get(0).map_err(e)?;
                let gi = groups.partition_point(|g| (g.last as i64) < iv);
                let Some(m) = acc
                    .get_mut(gi)
                    .filter(|_| groups.get(gi).is_some_and(|g| g.first as i64 <= iv))
                else {
                    continue;
                };
                fold_reading(m, reading_at(r, 1).map_err(e)?);
            }
        }
        for (g, m) in groups.iter_mut().zip(acc) {
            g.counters = m.into_values().collect();
        }
        Ok(groups)
    }

    /// A source's counter readings over time in at most `max` points, each summing
    /// consecutive readings of the source's own intervals; a point's length is the time since
    /// the previous one (the first: since the window's start).
    pub fn counter_series(&self, source: &str, max: usize) -> Result<Vec<CounterPoint>> {
        let e = |e| self.corrupt(e);
        let filter = self.counter_filter(source);
        let (n, lo): (i64, Option<i64>) = self
            .conn
            .query_row(
                &format!(
                    "SELECT COUNT(DISTINCT interval), MIN(interval) FROM counters WHERE {filter}"
                ),
                [source],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(e)?;
        let Some(lo) = lo else { return Ok(Vec::new()) };
        // Intervals are numbered without gaps in both kinds of source; a gap only merges points.
        let k = (n.max(1) as usize).div_ceil(max.max(1)).max(1) as i64;
        let mut points: BTreeMap<i64, BTreeMap<(u32, String, String), CounterReading>> =
            BTreeMap::new();
        let mut st = self
            .conn
            .prepare(&format!("SELECT interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns FROM counters WHERE {filter}"))
            .map_err(e)?;
        let mut rows = st.query([source]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let iv: i64 = r.get(0).map_err(e)?;
            fold_reading(
                points.entry((iv - lo) / k).or_default(),
                reading_at(r, 1).map_err(e)?,
            );
        }
        let mut prev = if self.window.whole {
            self.meta.start_ns.unwrap_or(self.window.start_ns)
        } else {
            self.window.start_ns
        };
        Ok(points
            .into_values()
            .map(|m| {
                let readings: Vec<CounterReading> = m.into_values().collect();
                let t_ns = readings.iter().map(|r| r.t_ns).max().unwrap_or(prev);
                let dur_s = t_ns.saturating_sub(prev) as f64 / 1e9;
                prev = t_ns;
                CounterPoint {
                    t_ns,
                    dur_s,
                    readings,
                }
            })
            .collect())
    }

    /// Per queue, the most packets in flight in any interval by Little's law (its packet rate
    /// × the mean of its lifetime stage), over the intervals that timed that stage.
    pub fn peak_inflight(&self) -> Result<BTreeMap<(Dir, u32), u64>> {
        Ok(self.scan()?.peaks.clone())
    }

    /// At most `limit` of the window's packet records, in evenly spaced runs across it, and
    /// how many it holds. Records are stored in interval order, so the window is a range of
    /// row ids, found by bisection.
    pub fn packet_records(&self, limit: usize) -> Result<PacketRecords> {
        if self.parts.is_empty() {
            return self.packet_records_in("samples", 0, limit);
        }
        // Several files: each file's rows by its own row ids (a view has none to bisect),
        // the limit shared in proportion to what each holds in the window.
        let tables: Vec<(String, i64)> = (0..self.parts.len())
            .map(|i| (format!("f{i}.samples"), self.parts[i].offset))
            .collect();
        let mut totals = Vec::with_capacity(tables.len());
        for (t, off) in &tables {
            totals.push(self.packet_records_in(t, *off, 0)?.total);
        }
        let all: u64 = totals.iter().sum();
        let mut out = PacketRecords {
            records: Vec::new(),
            total: all,
        };
        for ((t, off), n) in tables.iter().zip(totals) {
            if n == 0 {
                continue;
            }
            let share = ((limit as u128 * n as u128).div_ceil(all.max(1) as u128)) as usize;
            out.records
                .extend(self.packet_records_in(t, *off, share)?.records);
        }
        out.records.truncate(limit);
        Ok(out)
    }

    /// `packet_records` of one table of samples, whose intervals are `off` before the
    /// recording's.
    fn packet_records_in(&self, table: &str, off: i64, limit: usize) -> Result<PacketRecords> {
        let e = |e| self.corrupt(e);
        let (a, b) = self.range();
        let (a, b) = (a - off, b - off);
        let (lo, hi): (Option<i64>, Option<i64>) = self
            .conn
            .query_row(
                &format!("SELECT MIN(rowid), MAX(rowid) FROM {table}"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(e)?;
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Ok(PacketRecords::default());
        };
        // The first row id whose interval is at least `iv` (hi + 1: none).
        let first_at = |iv: i64| -> Result<i64> {
            let (mut l, mut h) = (lo, hi + 1);
            while l < h {
                let mid = l + (h - l) / 2;
                let at: Option<i64> = self
                    .conn
                    .query_row(
                        &format!(
                            "SELECT interval FROM {table} WHERE rowid >= ?1 ORDER BY rowid LIMIT 1"
                        ),
                        [mid],
                        |r| r.get(0),
                    )
                    .or_else(|x| {
                        if x == rusqlite::Error::QueryReturnedNoRows {
                            Ok(None)
                        } else {
                            Err(x)
                        }
                    })
                    .map_err(e)?;
                match at {
                    Some(v) if v < iv => l = mid + 1,
                    _ => h = mid,
                }
            }
            Ok(l)
        };
        let (from, to) = if self.window.whole {
            (lo, hi + 1)
        } else {
            (first_at(a)?, first_at(b + 1)?)
        };
        let total = (to - from).max(0) as u64;
        let mut out = PacketRecords {
            records: Vec::with_capacity(limit.min(total as usize)),
            total,
        };
        if total == 0 || limit == 0 {
            return Ok(out);
        }
        const RUNS: i64 = 64;
        let runs: Vec<(i64, i64)> = if total as usize <= limit {
            vec![(from, to)]
        } else {
            let len = (limit as i64 / RUNS).max(1);
            let step = (to - from) / RUNS;
            (0..RUNS)
                .map(|i| (from + i * step, from + i * step + len))
                .collect()
        };
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT dir,queue,cpu,len,skb_addr,data_addr,ts0,ts1,ts2,ts3,free_ns,dropped,drop_reason,proto,src,sport,dst,dport
                 FROM {table} WHERE rowid >= ?1 AND rowid < ?2"
            ))
            .map_err(e)?;
        for (s, t) in runs {
            let mut rows = st.query(params![s, t]).map_err(e)?;
            while let Some(r) = rows.next().map_err(e)? {
                let dir = dir_of(&r.get::<_, String>(0).map_err(e)?);
                let g = |i: usize| -> Result<u64> { count(r, i).map_err(|x| self.corrupt(x)) };
                // Kernel addresses: the writer's u64 read back as i64, negative above 2^63.
                let addr = |i: usize| -> Result<u64> {
                    Ok(r.get::<_, i64>(i).map_err(|x| self.corrupt(x))? as u64)
                };
                let flow = match r.get::<_, Option<String>>(13).map_err(e)? {
                    Some(proto) => Some(FlowKey {
                        dir,
                        proto,
                        src: r.get(14).map_err(e)?,
                        sport: r.get(15).map_err(e)?,
                        dst: r.get(16).map_err(e)?,
                        dport: r.get(17).map_err(e)?,
                    }),
                    None => None,
                };
                out.records.push(PacketSample {
                    dir,
                    queue: g(1)? as u32,
                    cpu: g(2)? as u32,
                    len: g(3)? as u32,
                    skb_addr: addr(4)?,
                    data_addr: addr(5)?,
                    ts: [g(6)?, g(7)?, g(8)?, g(9)?],
                    free_ns: g(10)?,
                    dropped: g(11)? != 0,
                    drop_reason: g(12)? as u32,
                    flow,
                });
            }
        }
        Ok(out)
    }
}

/// A recording of at most this many intervals (an hour of 100 ms ones) reports from its raw
/// intervals in well under a second: rollups are built only for longer ones.
pub const BACKFILL_AFTER: i64 = 36_000;

/// Builds the rollups of a complete recording that has none, when the file is writable: one
/// line on stderr says so (with progress on a terminal). Whether it has them now; a failure
/// is said in one line and the report reads its raw intervals.
fn build_rollups(conn: &Connection, cols: &Columns, meta: &RecordingMeta, path: &Path) -> bool {
    use std::io::{IsTerminal, Write};
    // A recording still being written (or cut off) is read as it is.
    if !meta.complete() || conn.is_readonly("main").unwrap_or(true) {
        return false;
    }
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM intervals", [], |r| r.get(0))
        .unwrap_or(0);
    if n <= BACKFILL_AFTER {
        return false;
    }
    let p = path.display();
    let tty = std::io::stderr().is_terminal();
    eprint!("ddioscope: {p}: building its per-minute and per-hour rollups ({n} intervals, once)");
    let done = rollup::backfill(conn, cols, true, |i, n| {
        if tty && n > 0 {
            eprint!(
                "\rddioscope: {p}: building its per-minute and per-hour rollups: {:.0} %",
                i as f64 * 100.0 / n as f64
            );
            let _ = std::io::stderr().flush();
        }
    });
    match done {
        Ok(()) => {
            eprintln!();
            true
        }
        Err(e) => {
            eprintln!();
            eprintln!(
                "ddioscope: {p}: could not build rollups ({}); reading its raw intervals",
                explain_sqlite(&e, path)
            );
            false
        }
    }
}

fn is_imported(source: &str) -> bool {
    source == crate::counters::CounterSource::Imported.as_str()
}

/// A counter reading from columns t_ns, socket, pmu, event, value, raw, enabled_ns,
/// running_ns starting at `at`.
/// A counter row a report can read: its counts integers from 0 (a count that wrapped past
/// 2^63 - 1 is stored negative), its value a number. Other rows, which only a damaged
/// file or an older importer leaves, are skipped and named rather than failing the report.
const COUNTER_ROW_READABLE: &str = "typeof(interval) = 'integer' AND typeof(t_ns) = 'integer' AND t_ns >= 0 AND typeof(raw) = 'integer' AND raw >= 0
     AND typeof(enabled_ns) = 'integer' AND enabled_ns >= 0 AND typeof(running_ns) = 'integer' AND running_ns >= 0
     AND typeof(socket) = 'integer' AND socket BETWEEN 0 AND 4294967295 AND typeof(value) IN ('integer', 'real')
     AND typeof(pmu) = 'text' AND typeof(event) = 'text'";

fn reading_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<CounterReading> {
    Ok(CounterReading {
        t_ns: count(r, at)?,
        socket: r.get(at + 1)?,
        pmu: r.get(at + 2)?,
        event: r.get(at + 3)?,
        value: r.get(at + 4)?,
        raw: count(r, at + 5)?,
        enabled_ns: count(r, at + 6)?,
        running_ns: count(r, at + 7)?,
    })
}

const _: () = assert!(NSTAGES == 4);

/// Each queue's flow overflow bucket as the recording last saw it (cumulative; empty: none
/// overflowed, or a recording from before the bucket, whose flow table let flows go unsaid).
pub fn flow_overflow(path: &Path) -> Result<Vec<crate::probe::qcount::FlowOverflow>> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
    flow_overflow_in(&conn, path)
}

fn flow_overflow_in(
    conn: &Connection,
    path: &Path,
) -> Result<Vec<crate::probe::qcount::FlowOverflow>> {
    let Ok(mut st) = conn
        .prepare("SELECT dir,queue,packets,bytes,unparsed FROM flow_overflow ORDER BY dir,queue")
    else {
        return Ok(Vec::new());
    };
    let damaged = |e: rusqlite::Error| {
        anyhow::anyhow!("{}: damaged flow_overflow table: {e}", path.display())
    };
    let rows = st
        .query_map([], |r| {
            let g = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
            Ok(crate::probe::qcount::FlowOverflow {
                dir: dir_of(&r.get::<_, String>(0)?),
                queue: r.get(1)?,
                packets: g(2)?,
                bytes: g(3)?,
                unparsed: g(4)?,
            })
        })
        .map_err(damaged)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(damaged)
}

/// The device's page pools as the recording last saw them (cumulative since each pool was
/// made; empty: the kernel kept no page_pool statistics, or a recording from before them).
pub fn page_pools(path: &Path) -> Result<Vec<crate::snapshot::PagePoolStat>> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
    page_pools_in(&conn, path)
}

fn page_pools_in(conn: &Connection, path: &Path) -> Result<Vec<crate::snapshot::PagePoolStat>> {
    let Ok(mut st) = conn.prepare(
        "SELECT pool,napi_id,alloc_fast,alloc_slow,alloc_slow_high_order,alloc_empty,alloc_refill,alloc_waive,
                recycle_cached,recycle_cache_full,recycle_ring,recycle_ring_full,recycle_released_refcnt FROM page_pools",
    ) else {
        return Ok(Vec::new());
    };
    let rows = st
        .query_map([], |r| {
            let g = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
            Ok(crate::snapshot::PagePoolStat {
                id: g(0)?,
                napi_id: r.get::<_, Option<i64>>(1)?.map(|v| v.max(0) as u64),
                alloc_fast: g(2)?,
                alloc_slow: g(3)?,
                alloc_slow_high_order: g(4)?,
                alloc_empty: g(5)?,
                alloc_refill: g(6)?,
                alloc_waive: g(7)?,
                recycle_cached: g(8)?,
                recycle_cache_full: g(9)?,
                recycle_ring: g(10)?,
                recycle_ring_full: g(11)?,
                recycle_released_refcnt: g(12)?,
            })
        })
        .map_err(|e| anyhow::anyhow!("{}: damaged page_pools table: {e}", path.display()))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(|e| anyhow::anyhow!("{}: damaged page_pools table: {e}", path.display()))
}

/// The local TCP sockets' receive queues as the recording last saw them (empty: no
/// sock_diag, or a recording from before the table).
pub fn socket_queues(path: &Path) -> Result<Vec<crate::snapshot::SocketQueueStat>> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
    socket_queues_in(&conn, path)
}

fn socket_queues_in(
    conn: &Connection,
    path: &Path,
) -> Result<Vec<crate::snapshot::SocketQueueStat>> {
    let Ok(mut st) = conn.prepare(
        "SELECT proto,src,sport,dst,dport,reads,rqueue_sum,rqueue_max,rmem_sum,rcvbuf_max,drained_bytes,span_ns
         FROM socket_queues",
    ) else {
        return Ok(Vec::new());
    };
    let damaged = |e: rusqlite::Error| {
        anyhow::anyhow!("{}: damaged socket_queues table: {e}", path.display())
    };
    let rows = st
        .query_map([], |r| {
            let g = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
            Ok(crate::snapshot::SocketQueueStat {
                key: crate::snapshot::FlowKey {
                    dir: crate::snapshot::Dir::Rx,
                    proto: r.get(0)?,
                    src: r.get(1)?,
                    sport: r.get::<_, i64>(2)?.clamp(0, 65535) as u16,
                    dst: r.get(3)?,
                    dport: r.get::<_, i64>(4)?.clamp(0, 65535) as u16,
                },
                reads: g(5)?,
                rqueue_sum: g(6)?,
                rqueue_max: g(7)?,
                rmem_sum: g(8)?,
                rcvbuf_max: g(9)?,
                drained_bytes: g(10)?,
                span_ns: g(11)?,
            })
        })
        .map_err(damaged)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(damaged)
}

/// Test support: the checked-in fixture recording, altered, and recordings written from
/// Snapshots.
#[cfg(test)]
pub(crate) mod fixture {
    use std::path::{Path, PathBuf};

    use crate::recording::writer::CounterRow;
    use crate::snapshot::{Dir, EventCounters, FlowCounters, FlowKey, QueueCounters, Snapshot};
    use crate::topology::{CacheInfo, HostInfo, IfaceInfo};

    pub(crate) const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/recordings/veth-tcp.ddio"
    );

    /// The fixture recording with `sql` run on a copy: an older schema rebuilt by hand. The
    /// temporary directory lives as long as the returned guard.
    pub(crate) fn fixture_altered(sql: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("old.ddio");
        std::fs::copy(Path::new(FIXTURE), &path).expect("copy fixture");
        rusqlite::Connection::open(&path)
            .expect("open copy")
            .execute_batch(sql)
            .expect("old-style table");
        (dir, path)
    }

    /// A recording written through the recorder's own writer: `meta` rows, then `snaps`, then
    /// `counters` rows per interval.
    pub(crate) fn write_recording(
        meta: &[(&str, String)],
        snaps: &[crate::snapshot::Snapshot],
        counters: &[(u64, crate::recording::writer::CounterRow)],
    ) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("built.ddio");
        let mut w = crate::recording::Writer::create(&path, false).expect("create");
        for (k, v) in meta {
            w.set_meta(k, v).expect("meta");
        }
        for s in snaps {
            w.write_snapshot(s).expect("snapshot");
        }
        for (iv, row) in counters {
            w.write_counters(*iv, std::slice::from_ref(row))
                .expect("counters");
        }
        (dir, path)
    }

    pub(crate) const START_NS: u64 = 1_000_000_000;
    pub(crate) const IV_NS: u64 = 100_000_000;

    /// [`synthetic_recording`] with LLC info, RX traffic and memory controllers that read
    /// `gbps` GB/s in every interval, the counters' source `source`.
    pub(crate) fn synthetic_with_dram_reads(
        gbps: f64,
        source: &str,
    ) -> (tempfile::TempDir, PathBuf) {
        // CAS lines per interval for `gbps`.
        let cas = gbps * 1e9 / 64.0 * (IV_NS as f64 / 1e9);
        let rows = (0..5)
            .map(|iv| counter_row(iv, "imc", "UNC_M_CAS_COUNT.RD", cas, source))
            .collect();
        synthetic_recording(true, true, rows)
    }

    /// One counter reading of interval `iv` of [`synthetic_recording`], on socket 0.
    pub(crate) fn counter_row(
        iv: u64,
        pmu: &str,
        event: &str,
        value: f64,
        source: &str,
    ) -> (u64, CounterRow) {
        (
            iv,
            CounterRow {
                t_ns: START_NS + (iv + 1) * IV_NS,
                socket: 0,
                pmu: pmu.into(),
                event: event.into(),
                value,
                raw: value as u64,
                enabled_ns: IV_NS,
                running_ns: IV_NS,
                source: source.into(),
            },
        )
    }

    /// One queue's counters in interval `i` of [`synthetic_recording`].
    pub(crate) fn synthetic_queue(dir: Dir, q: u32, i: u64) -> QueueCounters {
        let mut c = QueueCounters::new(dir, q);
        c.packets = 10_000 + 1_000 * i + 500 * q as u64;
        c.bytes = c.packets * 1514;
        if dir == Dir::Rx {
            c.napi_polls = c.packets / 8;
            c.napi_work = c.packets;
        }
        for s in 0..3 {
            // Two modes per stage so a chart has more than one bar.
            c.stage_hist[s][9 + s] = c.packets * 3 / 4;
            c.stage_hist[s][13 + s] = c.packets / 4;
            c.stage_count[s] = c.packets;
            c.stage_sum_ns[s] = c.packets * (1 << (10 + s));
            c.stage_max_ns[s] = 1 << (14 + s);
        }
        c
    }

    /// Five 100 ms intervals, two RX queues and one TX queue, optionally LLC info, and the
    /// given counter rows (their source is the recording's counters source), written through
    /// the recorder's own writer (`rx` false: no RX traffic).
    pub(crate) fn synthetic_recording(
        llc: bool,
        rx: bool,
        rows: Vec<(u64, CounterRow)>,
    ) -> (tempfile::TempDir, PathBuf) {
        let counters_source = rows
            .first()
            .map_or_else(|| "absent".to_string(), |(_, r)| r.source.clone());
        let iface = IfaceInfo {
            name: "eth<1>".into(),
            netns: Some("ns-test".into()),
            ifindex: 7,
            driver: Some("veth".into()),
            rx_queues: 2,
            tx_queues: 1,
            ..Default::default()
        };
        let host = HostInfo {
            hostname: "box".into(),
            kernel: "6.1.0".into(),
            cpu_model: "Test CPU".into(),
            cpu_vendor: "GenuineIntel".into(),
            ncpus: 4,
            llc: llc.then(|| CacheInfo {
                level: 3,
                size_bytes: 8 << 20,
                ways: 16,
                sets: 8192,
                line_bytes: 64,
                shared_cpus: "0-3".into(),
            }),
            ..Default::default()
        };
        let meta: Vec<(&str, String)> = vec![
        ("iface", serde_json::to_string(&iface).unwrap()),
        ("host", serde_json::to_string(&host).unwrap()),
        ("start_ns", START_NS.to_string()),
        ("interval_ms", "100".into()),
        ("sample_every", "64".into()),
        ("complete", "true".into()),
        ("hooks", r#"[{"tracepoint":"net:napi_gro_receive_entry","flavor":"tp_btf"},{"tracepoint":"skb:consume_skb","flavor":null}]"#.into()),
        ("counters_source", counters_source),
    ];
        let flow = FlowCounters {
            key: FlowKey {
                dir: Dir::Rx,
                proto: "tcp".into(),
                src: "fd77::1".into(),
                sport: 40000,
                dst: "fd77::2".into(),
                dport: 5201,
            },
            queue: 1,
            packets: 1000,
            bytes: 1_514_000,
            payload_bytes: 1_448_000,
            first_ns: START_NS,
            last_ns: START_NS + 5 * IV_NS,
            samples: None,
            bytes_var: None,
            source: None,
        };
        let snapshots: Vec<Snapshot> = (0..5u64)
            .map(|i| {
                let mut queues = vec![synthetic_queue(Dir::Tx, 0, i)];
                if rx {
                    queues.extend([
                        synthetic_queue(Dir::Rx, 0, i),
                        synthetic_queue(Dir::Rx, 1, i),
                    ]);
                }
                Snapshot {
                    index: i,
                    t_ns: START_NS + (i + 1) * IV_NS,
                    dur_ns: IV_NS,
                    queues,
                    events: EventCounters {
                        sampled: 10,
                        received: 10,
                        ..Default::default()
                    },
                    flows: if i == 4 {
                        vec![flow.clone()]
                    } else {
                        Vec::new()
                    },
                    drop_reasons: if i == 4 { vec![(2, 5)] } else { Vec::new() },
                    ..Default::default()
                }
            })
            .collect();
        write_recording(&meta, &snapshots, &rows)
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::{fixture_altered, FIXTURE};
    use super::*;

    /// Page pools written with an interval read back; a recording without the table has none.
    #[test]
    fn page_pools_round_trip() {
        let (_dir, path) = fixture_altered(
            "CREATE TABLE page_pools (pool INTEGER PRIMARY KEY, napi_id INTEGER, alloc_fast INTEGER NOT NULL,
                alloc_slow INTEGER NOT NULL, alloc_slow_high_order INTEGER NOT NULL, alloc_empty INTEGER NOT NULL,
                alloc_refill INTEGER NOT NULL, alloc_waive INTEGER NOT NULL, recycle_cached INTEGER NOT NULL,
                recycle_cache_full INTEGER NOT NULL, recycle_ring INTEGER NOT NULL, recycle_ring_full INTEGER NOT NULL,
                recycle_released_refcnt INTEGER NOT NULL);
             INSERT INTO page_pools VALUES (5, 8193, 90, 10, 0, 0, 0, 0, 60, 0, 30, 0, 1);",
        );
        let p = page_pools(&path).expect("reads");
        assert_eq!(p.len(), 1);
        assert_eq!(
            (p[0].id, p[0].napi_id, p[0].recycle_ring),
            (5, Some(8193), 30)
        );
        let (_dir2, old) = fixture_altered("SELECT 1;");
        assert!(page_pools(&old).expect("reads").is_empty());
    }

    /// A count an older importer stored wrapped (negative), or a value that is not a number,
    /// is skipped and named; the report reads the rest.
    #[test]
    fn unreadable_counter_rows_are_skipped_and_named() {
        let (_dir, path) = fixture_altered(
            "DELETE FROM counters;
             INSERT INTO counters VALUES (0, 1, 0, 'imc', 'UNC_M_CAS_COUNT.RD', 10.0, 10, 5, 5, 'imported');
             INSERT INTO counters VALUES (0, 1, 0, 'imc', 'UNC_M_CAS_COUNT.WR', 9.2e18, -9223372036854775808, 5, 5, 'imported');
             INSERT INTO counters VALUES (1, 2, 1, 'cha', 'UNC_CHA_TOR_INSERTS.IO_ITOM', 'x', 3, 5, 5, 'imported');",
        );
        let r = Recording::open(&path).expect("opens");
        let t = r
            .counter_totals("imported")
            .expect("reads the readable rows");
        assert_eq!((t.rows, t.readings.len(), t.readings[0].raw), (1, 1, 10));
        assert!(
            r.counter_series("imported", 10).is_ok() && r.interval_groups(Some("imported")).is_ok()
        );
        let (n, named) = r.unreadable_counter_rows("imported").expect("counts");
        assert_eq!(n, 2);
        assert_eq!(
            named,
            [
                "UNC_M_CAS_COUNT.WR on socket 0, interval 0",
                "UNC_CHA_TOR_INSERTS.IO_ITOM on socket 1, interval 1"
            ]
        );
    }

    /// A recording whose buffer-map table predates its later columns still opens;
    /// the missing counters read as 0.
    #[test]
    fn buffer_map_table_without_later_columns_reads() {
        let (_dir, path) = fixture_altered(
            "DROP TABLE IF EXISTS buf_map_intervals;
             CREATE TABLE buf_map_intervals (
                interval INTEGER PRIMARY KEY, linear_pages INTEGER NOT NULL, frag_pages INTEGER NOT NULL,
                frags_over_cap INTEGER NOT NULL, frags_no_page INTEGER NOT NULL, frags_no_layout INTEGER NOT NULL,
                entries INTEGER, copy_linear_joined INTEGER NOT NULL, copy_frag_joined INTEGER NOT NULL);
             INSERT INTO buf_map_intervals VALUES (1, 10, 20, 0, 0, 0, 5, 0, 0);",
        );
        let r = Recording::open(&path).expect("opens");
        assert!(r.miss_totals().is_ok());
    }

    /// Flows from the first sampled recordings (a sum of squares, `bytes_sq`, not the variance)
    /// read with their sample counts and no error bound.
    #[test]
    fn flows_with_a_sum_of_squares_read() {
        let (_dir, path) = fixture_altered(
            "ALTER TABLE flows ADD COLUMN samples INTEGER; ALTER TABLE flows ADD COLUMN bytes_sq INTEGER;
             UPDATE flows SET samples = 3, bytes_sq = 9;",
        );
        let flows = Recording::open(&path).unwrap().flows().expect("reads");
        assert!(
            !flows.is_empty()
                && flows
                    .iter()
                    .all(|f| f.samples == Some(3) && f.bytes_var.is_none())
        );
    }

    /// The aggregates equal sums taken row by row in SQL, over the whole run and a window.
    #[test]
    fn totals_are_the_rows_summed() {
        let mut r = Recording::open(Path::new(FIXTURE)).unwrap();
        let c = rusqlite::Connection::open(FIXTURE).unwrap();
        let one = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            r.window.intervals as i64,
            one("SELECT COUNT(*) FROM intervals")
        );
        assert_eq!(
            r.window.dur_ns as i64,
            one("SELECT SUM(dur_ns) FROM intervals")
        );
        let rx: u64 = r
            .queue_totals()
            .unwrap()
            .iter()
            .filter(|q| q.dir == Dir::Rx)
            .map(|q| q.packets)
            .sum();
        assert_eq!(
            rx as i64,
            one("SELECT SUM(packets) FROM queue_intervals WHERE dir='rx'")
        );
        let hist: u64 = r
            .queue_totals()
            .unwrap()
            .iter()
            .flat_map(|q| q.stage_hist.iter().flatten())
            .sum();
        assert_eq!(hist as i64, one("SELECT SUM(count) FROM stage_hist"));
        assert_eq!(
            r.event_totals().unwrap().sampled as i64,
            one("SELECT SUM(sampled) FROM intervals")
        );
        let recs = r.packet_records(100_000).unwrap();
        assert_eq!(
            (recs.total as i64, recs.records.len() as i64),
            (one("SELECT COUNT(*) FROM samples"), recs.total as i64)
        );
        // Fewer than asked for: evenly spread runs, and the count still of all.
        let few = r.packet_records(64).unwrap();
        assert!(
            few.records.len() <= 64 && few.total == recs.total,
            "{} of {}",
            few.records.len(),
            few.total
        );
        // The groups of a series cover every interval once.
        let g = r.interval_groups(None).unwrap();
        assert!(g.len() <= SERIES_POINTS);
        assert_eq!(g.iter().map(|g| g.dur_ns).sum::<u64>(), r.window.dur_ns);
        let pk: u64 = g
            .iter()
            .flat_map(|g| g.queues.iter())
            .filter(|q| q.dir == Dir::Rx)
            .map(|q| q.packets)
            .sum();
        assert_eq!(pk, rx);

        // A window of the 2nd to 4th 200 ms interval: the same sums over those rows.
        r.set_window(Some(TimeSpec::Offset(0.2)), Some(TimeSpec::Offset(0.8)))
            .unwrap();
        let (a, b) = (r.window.first, r.window.last);
        assert_eq!(r.window.intervals, 3, "{:?}", r.window);
        let rx: u64 = r
            .queue_totals()
            .unwrap()
            .iter()
            .filter(|q| q.dir == Dir::Rx)
            .map(|q| q.packets)
            .sum();
        assert_eq!(rx as i64, one(&format!("SELECT SUM(packets) FROM queue_intervals WHERE dir='rx' AND interval BETWEEN {a} AND {b}")));
        let recs = r.packet_records(100_000).unwrap();
        assert_eq!(
            recs.total as i64,
            one(&format!(
                "SELECT COUNT(*) FROM samples WHERE interval BETWEEN {a} AND {b}"
            ))
        );
        assert!((r.duration_s() - 0.6).abs() < 0.01, "{}", r.duration_s());
        // Nothing there: one line saying what the recording covers.
        let err = r
            .set_window(Some(TimeSpec::Offset(100.0)), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no interval") && err.contains("covers 0 to 3.0 s"),
            "{err}"
        );
    }
}
