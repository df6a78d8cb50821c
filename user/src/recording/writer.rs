//! Writes a recording: metadata first, then one committed transaction per interval.
use std::path::{Path, PathBuf};

use anyhow::Result;
use rusqlite::types::{ToSql, ToSqlOutput};
use rusqlite::{params, params_from_iter, Connection, ErrorCode};

use super::reader::Columns;
use super::rollup::{self, OpenSpans, Rolled};
use super::{packed, APPLICATION_ID, SCHEMA, SCHEMA_VERSION};
use crate::outfile;
use crate::snapshot::{Dir, FlowKey, Snapshot};

pub struct Writer {
    conn: Connection,
    path: PathBuf,
    force: bool,
    /// Intervals committed by this writer.
    intervals: u64,
    /// Declared after `conn`, so the connection is closed before its file is removed.
    temp: Temp,
    /// The recording's size at the last `check_room`, and the most one interval added.
    used_before: Option<u64>,
    largest_interval: u64,
    /// The rolled-up tables, the spans being filled, and how much raw history to keep.
    rollups: Vec<Rolled>,
    open: OpenSpans,
    retention: Retention,
}

/// How much of the raw intervals a recording keeps (`record --keep`, `--max-size`); the
/// rollups of what is dropped stay. Default: all of it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Retention {
    /// Raw intervals whose minute ended longer ago than this before the latest are dropped.
    pub keep_ns: Option<u64>,
    /// The oldest raw minutes are dropped while the recording's pages in use exceed this.
    pub max_bytes: Option<u64>,
}

/// Room kept beyond two intervals: the end-of-recording meta and the log's index pages.
const ROOM_MARGIN: u64 = 64 * 1024;

/// Prepared statements kept: every statement an interval writes stays prepared (rusqlite's
/// default of 16 is fewer than the writer has, and a miss parses the statement again).
const STATEMENT_CACHE: usize = 64;

/// Bytes an unprivileged writer may still use on the file system holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs is plain data, zero a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// The temporary file a new recording is written to until its first interval is
/// committed, with the File that holds its lock (see `outfile::create_temp`); removed
/// with its journal if the run ends before that.
struct Temp(Option<(PathBuf, std::fs::File)>);

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some((tmp, _lock)) = self.0.take() {
            let _ = std::fs::remove_file(&tmp);
            let mut journal = tmp.into_os_string();
            journal.push("-journal");
            let _ = std::fs::remove_file(journal);
        }
    }
}

/// Per connection: a committed interval survives the writer's death (SIGKILL: its writes
/// are in the kernel's page cache), and an interrupted one is rolled back from its journal by
/// the next reader. No fsync per commit: ten a second were a measurable part of what the
/// recorder cost the traffic, and they only guard against the host itself crashing.
const PRAGMAS: &str = "PRAGMA journal_mode = DELETE; PRAGMA synchronous = OFF;";

/// Once the recording is in place, each interval appends its pages to a write-ahead log
/// rather than copying the pages it changes into a rollback journal that is created and
/// unlinked every commit: that file churn was most of the recorder's own CPU time at ten
/// intervals a second. A SIGKILL leaves the log beside the recording, and the next reader
/// applies it; a normal end folds it back into the one file (`Drop`).
/// The log is folded back into the file whenever it passes 1000 pages (SQLite's automatic
/// checkpoint), and cut back to 4 MiB after a checkpoint that found it longer (a minute that
/// dropped raw intervals writes more than most), so a recording of days holds no growing log.
const LIVE_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF;
                            PRAGMA wal_autocheckpoint = 1000; PRAGMA journal_size_limit = 4194304;";

/// A write that failed because the file system is full: the recorder tells it from other
/// failures (it can still say why the recording ended).
#[derive(Debug)]
pub struct DiskFull(String);

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DiskFull {}

/// An SQLite failure as an error with its one-line reason, a `DiskFull` when it is one.
pub fn sqlite_error(e: &rusqlite::Error, path: &Path) -> anyhow::Error {
    let line = explain_sqlite(e, path);
    if e.sqlite_error_code() == Some(ErrorCode::DiskFull) {
        anyhow::Error::new(DiskFull(line))
    } else {
        anyhow::anyhow!(line)
    }
}

/// A one-line reason for an SQLite write failure, naming the file.
pub fn explain_sqlite(e: &rusqlite::Error, path: &Path) -> String {
    let p = path.display();
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => format!("writing recording {p}: the disk is full"),
        Some(ErrorCode::ReadOnly) | Some(ErrorCode::PermissionDenied) => {
            format!("writing recording {p}: permission denied (choose another -o path)")
        }
        Some(ErrorCode::CannotOpen) => {
            format!("cannot create recording {p}: the directory does not exist or is not writable")
        }
        Some(ErrorCode::NotADatabase) => {
            format!("{p} is not a ddioscope recording (not an SQLite database)")
        }
        _ => format!("recording {p}: {e}"),
    }
}

impl Writer {
    /// Create a new recording. The path is checked as `outfile::check` decides (`force`
    /// replaces only a regular file), and the recording is written to a temporary file
    /// beside it until the first interval is committed: a run that fails before that
    /// (unknown interface, BPF load error) leaves whatever was at `path` as it was.
    pub fn create(path: &Path, force: bool) -> Result<Writer> {
        outfile::check(path, force)?;
        let (tmp, lock) = outfile::create_temp(path)?;
        let temp = Temp(Some((tmp.clone(), lock)));
        let conn = Connection::open(&tmp).map_err(|e| sqlite_error(&e, path))?;
        let w = Writer {
            conn,
            path: path.to_path_buf(),
            force,
            intervals: 0,
            temp,
            used_before: None,
            largest_interval: 0,
            rollups: Vec::new(),
            open: OpenSpans::default(),
            retention: Retention::default(),
        };
        let mut w = w;
        w.conn
            .set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        w.conn
            .execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};
                 {PRAGMAS} BEGIN; {SCHEMA} {} COMMIT;",
                rollup::SCHEMA
            ))
            .map_err(|e| w.err(e))?;
        // Rolling a minute up reads its histograms in their old row shape.
        packed::install(&w.conn).map_err(|e| w.err(e))?;
        w.rollups = rollup::tables(&Columns::probe(&w.conn));
        Ok(w)
    }

    /// Renames the temporary file into place (once). SQLite names an open database's
    /// journal after the path it was opened by, so the connection is reopened under the
    /// final name: a SIGKILL in a later interval then leaves the hot journal beside the
    /// recording, where the next reader finds it and rolls the cut interval back.
    fn publish(&mut self) -> Result<()> {
        let Some((tmp, _)) = &self.temp.0 else {
            return Ok(());
        };
        outfile::publish(tmp, &self.path, self.force)?;
        // Renamed: nothing to remove any more, and the lock goes with the File.
        self.temp.0 = None;
        remove_stale_companions(&self.path);
        self.conn =
            Connection::open_with_flags(&self.path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
                .map_err(|e| sqlite_error(&e, &self.path))?;
        self.conn
            .set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        self.conn
            .execute_batch(LIVE_PRAGMAS)
            .map_err(|e| self.err(e))?;
        packed::install(&self.conn).map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Append to a finished recording (counter import).
    pub fn open_existing(path: &Path) -> Result<Writer> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| sqlite_error(&e, path))?;
        let w = Writer {
            conn,
            path: path.to_path_buf(),
            force: false,
            intervals: 0,
            temp: Temp(None),
            used_before: None,
            largest_interval: 0,
            rollups: Vec::new(),
            open: OpenSpans::default(),
            retention: Retention::default(),
        };
        // As the recorder's: a rollback journal (a SIGKILL leaves it hot, and the next
        // reader rolls the cut transaction back) and no fsync of our own.
        w.conn.execute_batch(PRAGMAS).map_err(|e| w.err(e))?;
        Ok(w)
    }

    /// Runs `f` as one transaction: all of its writes or, on any error, none. IMMEDIATE
    /// takes the write lock at once, so a recorder still writing the file makes this fail
    /// before anything is staged.
    pub fn in_transaction<T>(&self, f: impl FnOnce(&Writer) -> Result<T>) -> Result<T> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.err(e))?;
        let done = f(self).and_then(|v| {
            self.conn
                .execute_batch("COMMIT")
                .map(|()| v)
                .map_err(|e| self.err(e))
        });
        if done.is_err() {
            // A failed rollback leaves the journal for the next reader, which rolls it back.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        done
    }

    /// Replaces a source's counter rows with `rows` (interval, row) and runs `then` (the
    /// meta keys that say so), all in one transaction: on any error, or a SIGKILL part way,
    /// the recording keeps its earlier rows and meta. Returns the rows written.
    pub fn replace_counters(
        &mut self,
        source: &str,
        rows: impl Iterator<Item = (u64, CounterRow)>,
        then: impl FnOnce(&Writer) -> Result<()>,
    ) -> Result<usize> {
        self.in_transaction(|w| {
            w.conn
                .execute("DELETE FROM counters WHERE source = ?1", params![source])
                .map_err(|e| w.err(e))?;
            let mut st = w
                .conn
                .prepare_cached(INSERT_COUNTER)
                .map_err(|e| w.err(e))?;
            let mut n = 0;
            for (interval, r) in rows {
                insert_counter(&mut st, interval, &r).map_err(|e| w.err(e))?;
                n += 1;
            }
            drop(st);
            then(w)?;
            Ok(n)
        })
    }

    fn err(&self, e: rusqlite::Error) -> anyhow::Error {
        sqlite_error(&e, &self.path)
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                params![key, value],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn set_meta_json<T: serde::Serialize>(&self, key: &str, value: &T) -> Result<()> {
        self.set_meta(key, &serde_json::to_string(value)?)
    }

    /// Raw history to keep from now on (see `Retention`).
    pub fn set_retention(&mut self, r: Retention) {
        self.retention = r;
    }

    /// One interval, all or nothing; with it, the rollups of the minute and hour it closes,
    /// and the raw intervals the retention then lets go.
    pub fn write_snapshot(&mut self, s: &Snapshot) -> Result<()> {
        let path = self.path.clone();
        let mut open = self.open.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| sqlite_error(&e, &path))?;
        write_snapshot_tx(&tx, s).map_err(|e| sqlite_error(&e, &path))?;
        let closed = open
            .add(&tx, &self.rollups, s.index, s.t_ns, s.dur_ns)
            .map_err(|e| sqlite_error(&e, &path))?;
        if closed {
            apply_retention(&tx, self.retention, s.t_ns).map_err(|e| sqlite_error(&e, &path))?;
        }
        tx.commit().map_err(|e| sqlite_error(&e, &path))?;
        self.open = open;
        self.intervals += 1;
        self.publish()
    }

    /// The recording has ended: the minute and hour it ended in are rolled up too.
    pub fn close_rollups(&mut self) -> Result<()> {
        let path = self.path.clone();
        let mut open = std::mem::take(&mut self.open);
        let tx = self
            .conn
            .transaction()
            .map_err(|e| sqlite_error(&e, &path))?;
        open.close(&tx, &self.rollups)
            .map_err(|e| sqlite_error(&e, &path))?;
        tx.commit().map_err(|e| sqlite_error(&e, &path))?;
        Ok(())
    }

    /// Fails with `DiskFull` when the file system has less room than two of the largest
    /// intervals so far need, plus a margin: the recorder then stops while the few pages
    /// that say why still fit. An interval that fills it anyway fails as a write.
    pub fn check_room(&mut self) -> Result<()> {
        let used = self.bytes_used();
        if let Some(before) = self.used_before.replace(used) {
            self.largest_interval = self.largest_interval.max(used.saturating_sub(before));
        }
        let Some(free) = free_bytes(&self.path) else {
            return Ok(());
        };
        let need = 2 * self.largest_interval + ROOM_MARGIN;
        if free < need {
            return Err(anyhow::Error::new(DiskFull(format!(
                "writing recording {}: the disk is full ({free} bytes left, the next interval may need {need})",
                self.path.display()
            ))));
        }
        Ok(())
    }

    /// The recording's bytes on disk with its log (or its temporary file's, before it is
    /// published).
    fn bytes_used(&self) -> u64 {
        let file = self
            .temp
            .0
            .as_ref()
            .map_or(self.path.as_path(), |(t, _)| t.as_path());
        let mut wal = file.as_os_str().to_owned();
        wal.push("-wal");
        [file.as_os_str().to_owned(), wal]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Whether the recording is at its path: false until the first interval is committed
    /// and renamed into place (until then the path holds whatever it held before).
    pub fn published(&self) -> bool {
        self.temp.0.is_none()
    }

    /// Intervals committed so far (into the temporary file, before `published`).
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// Counter readings of one interval (any source).
    pub fn write_counters(&mut self, interval: u64, rows: &[CounterRow]) -> Result<()> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| sqlite_error(&e, &path))?;
        {
            let mut st = tx
                .prepare_cached(INSERT_COUNTER)
                .map_err(|e| sqlite_error(&e, &path))?;
            for r in rows {
                insert_counter(&mut st, interval, r).map_err(|e| sqlite_error(&e, &path))?;
            }
        }
        tx.commit().map_err(|e| sqlite_error(&e, &path))?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Drops the raw minutes the retention lets go, after the rollups of the minute just closed
/// are written (in the same transaction): those older than `keep_ns` before `now_ns`, then the
/// oldest while the pages in use exceed `max_bytes` (the file keeps its size and reuses them).
fn apply_retention(conn: &Connection, r: Retention, now_ns: u64) -> rusqlite::Result<()> {
    if let Some(keep) = r.keep_ns {
        rollup::prune(conn, |end| end.saturating_add(keep) < now_ns)?;
    }
    if let Some(max) = r.max_bytes {
        let used = || -> rusqlite::Result<u64> {
            conn.query_row(
                "SELECT (page_count - freelist_count) * page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|v| v.max(0) as u64)
        };
        while used()? > max {
            let mut first = true;
            if rollup::prune(conn, |_| std::mem::take(&mut first))? == 0 {
                break;
            }
        }
    }
    Ok(())
}

const INSERT_COUNTER: &str =
    "INSERT INTO counters(interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns,source)
     VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)";

/// One counter row. Its counts are stored as SQLite's signed integers: one past 2^63 - 1
/// (which the importer refuses and live readings cannot reach) is capped rather than
/// stored as a negative that no reader takes.
fn insert_counter(
    st: &mut rusqlite::CachedStatement<'_>,
    interval: u64,
    r: &CounterRow,
) -> rusqlite::Result<()> {
    let n = |v: u64| v.min(i64::MAX as u64) as i64;
    st.execute(params![
        n(interval),
        n(r.t_ns),
        r.socket,
        r.pmu,
        r.event,
        r.value,
        n(r.raw),
        n(r.enabled_ns),
        n(r.running_ns),
        r.source
    ])?;
    Ok(())
}

/// A rollback journal or write-ahead log named after `path` from before this run (a killed
/// recording that `--force` replaced) would be applied to the new recording by the next open
/// and corrupt it: it went with the file it belonged to. Only regular files that begin with
/// SQLite's journal or log magic are removed.
fn remove_stale_companions(path: &Path) {
    const JOURNAL_MAGIC: [u8; 8] = [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];
    for suffix in ["-journal", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let companion = PathBuf::from(name);
        if !std::fs::symlink_metadata(&companion).is_ok_and(|m| m.file_type().is_file()) {
            continue;
        }
        let mut head = [0u8; 8];
        let Ok(n) = std::fs::File::open(&companion)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        else {
            continue;
        };
        let sqlite = n == 0
            || match suffix {
                "-journal" => head == JOURNAL_MAGIC,
                "-wal" => matches!(
                    u32::from_be_bytes([head[0], head[1], head[2], head[3]]),
                    0x377f_0682 | 0x377f_0683
                ),
                // The log's index has no magic of its own; it is nothing without its log.
                _ => true,
            };
        if sqlite {
            let _ = std::fs::remove_file(&companion);
        }
    }
}

impl Drop for Writer {
    /// Fold the write-ahead log back into the recording, so a finished recording is one
    /// file. Best effort: a reader that holds the recording open keeps the log, which SQLite
    /// then applies on the next open.
    fn drop(&mut self) {
        if self.published() {
            let _ = self.conn.execute_batch("PRAGMA journal_mode = DELETE;");
        }
    }
}

/// A counter row as stored (see the `counters` table): a reading plus its source.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CounterRow {
    pub t_ns: u64,
    pub socket: u32,
    pub pmu: String,
    pub event: String,
    pub value: f64,
    pub raw: u64,
    pub enabled_ns: u64,
    pub running_ns: u64,
    pub source: String,
}

impl CounterRow {
    /// A reading as a row of the given source ("live", "software", "imported").
    pub fn from_reading(r: &crate::counters::CounterReading, source: &str) -> CounterRow {
        CounterRow {
            t_ns: r.t_ns,
            socket: r.socket,
            pmu: r.pmu.clone(),
            event: r.event.clone(),
            value: r.value,
            raw: r.raw,
            enabled_ns: r.enabled_ns,
            running_ns: r.running_ns,
            source: source.to_string(),
        }
    }

    pub fn reading(&self) -> crate::counters::CounterReading {
        crate::counters::CounterReading {
            t_ns: self.t_ns,
            socket: self.socket,
            pmu: self.pmu.clone(),
            event: self.event.clone(),
            value: self.value,
            raw: self.raw,
            enabled_ns: self.enabled_ns,
            running_ns: self.running_ns,
        }
    }
}

/// One interval's rows, table by table.
fn write_snapshot_tx(tx: &rusqlite::Transaction<'_>, s: &Snapshot) -> rusqlite::Result<()> {
    insert_interval(tx, s)?;
    insert_queues(tx, s)?;
    insert_samples(tx, s)?;
    insert_flows(tx, s)?;
    if let Some(m) = &s.misses {
        insert_misses(tx, s.index as i64, m)?;
    }
    insert_whole_run(tx, s)
}

/// The interval's own row: its time and the event path's counters.
fn insert_interval(tx: &rusqlite::Transaction<'_>, s: &Snapshot) -> rusqlite::Result<()> {
    let i = s.index as i64;
    let e = &s.events;
    tx.prepare_cached(
        "INSERT INTO intervals(idx,t_ns,dur_ns,sampled,lost,received,state_evicted,queue_clamped,state_stale,detail_ns)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)")?
    .execute(params![
            i,
            s.t_ns as i64,
            s.dur_ns as i64,
            e.sampled as i64,
            e.lost as i64,
            e.received as i64,
            e.state_evicted as i64,
            e.queue_clamped as i64,
            e.state_stale as i64,
            s.detail_ns.map(|v| v as i64)
        ])?;
    Ok(())
}

/// Per queue: counts with its NAPI work histogram, stage statistics each with its
/// histogram (both packed, see `packed`), size histogram.
fn insert_queues(tx: &rusqlite::Transaction<'_>, s: &Snapshot) -> rusqlite::Result<()> {
    let i = s.index as i64;
    let mut q_st = tx.prepare_cached(
        "INSERT INTO queue_intervals(interval,dir,queue,packets,bytes,napi_polls,napi_work,
         napi_budget_exhausted,copies,frees,drops,handups,unended,napi_hist)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)",
    )?;
    let mut ss_st = tx.prepare_cached(
        "INSERT INTO stage_stats(interval,dir,queue,stage,count,sum_ns,max_ns,hist) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
    )?;
    let mut z_st = tx.prepare_cached(
        "INSERT INTO size_hist(interval,dir,queue,bucket,count) VALUES (?1,?2,?3,?4,?5)",
    )?;
    for q in s.queues.iter().filter(|q| !q.is_zero()) {
        let dir = q.dir.as_str();
        // No NAPI work (a transmit queue): NULL, as no rows were before.
        let napi = Some(packed::pack(&q.napi_work_hist)).filter(|p| !p.is_empty());
        q_st.execute(params![
            i,
            dir,
            q.queue,
            q.packets as i64,
            q.bytes as i64,
            q.napi_polls as i64,
            q.napi_work as i64,
            q.napi_budget_exhausted as i64,
            q.copies as i64,
            q.frees as i64,
            q.drops as i64,
            q.handups as i64,
            q.unended as i64,
            napi
        ])?;
        for (st, name) in q.dir.stage_names().into_iter().enumerate() {
            if q.stage_count[st] == 0 {
                continue;
            }
            ss_st.execute(params![
                i,
                dir,
                q.queue,
                name,
                q.stage_count[st] as i64,
                q.stage_sum_ns[st] as i64,
                q.stage_max_ns[st] as i64,
                packed::pack(&q.stage_hist[st])
            ])?;
        }
        for (b, &n) in q.size_hist.iter().enumerate().filter(|(_, n)| **n > 0) {
            z_st.execute(params![i, dir, q.queue, b as i64, n as i64])?;
        }
    }
    let mut d_st = tx.prepare_cached(
        "INSERT INTO nic_drops(interval,counter,queue,count) VALUES (?1,?2,?3,?4)",
    )?;
    for d in &s.nic_drops {
        d_st.execute(params![i, d.counter, d.queue, d.count as i64])?;
    }
    Ok(())
}

/// Sampled packet lives, in interval order (the reader and `prune` rely on it).
fn insert_samples(tx: &rusqlite::Transaction<'_>, s: &Snapshot) -> rusqlite::Result<()> {
    let i = s.index as i64;
    let mut sa_st = tx.prepare_cached(
        "INSERT INTO samples(interval,dir,queue,cpu,len,skb_addr,data_addr,ts0,ts1,ts2,ts3,free_ns,dropped,
         drop_reason,proto,src,sport,dst,dport) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19)",
    )?;
    for p in &s.samples {
        let f = p.flow.as_ref();
        sa_st.execute(params![
            i,
            p.dir.as_str(),
            p.queue,
            p.cpu,
            p.len,
            p.skb_addr as i64,
            p.data_addr as i64,
            p.ts[0] as i64,
            p.ts[1] as i64,
            p.ts[2] as i64,
            p.ts[3] as i64,
            p.free_ns as i64,
            p.dropped,
            p.drop_reason,
            f.map(|f| f.proto.clone()),
            f.map(|f| f.src.clone()),
            f.map(|f| f.sport),
            f.map(|f| f.dst.clone()),
            f.map(|f| f.dport)
        ])?;
    }
    Ok(())
}

/// The run's flows as last read (whole-run rows, replaced).
fn insert_flows(tx: &rusqlite::Transaction<'_>, s: &Snapshot) -> rusqlite::Result<()> {
    let mut f_st = tx.prepare_cached(
        "INSERT OR REPLACE INTO flows(dir,proto,src,sport,dst,dport,queue,packets,bytes,payload_bytes,first_ns,last_ns,
         samples,bytes_var,source) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)",
    )?;
    for f in &s.flows {
        // SQLite integers are signed 64-bit: a variance past that is capped.
        let var = f.bytes_var.map(|v| v.min(i64::MAX as u64) as i64);
        let (samples, queue) = (f.samples.map(|v| v as i64), f.queue);
        let counts = [f.packets, f.bytes, f.payload_bytes, f.first_ns, f.last_ns].map(|v| v as i64);
        let [p, b, pb, first, last] = &counts;
        f_st.execute(with_flow_key(
            &f.key,
            &[&queue, p, b, pb, first, last, &samples, &var, &f.source],
        ))?;
    }
    Ok(())
}

/// A flow's key (dir, proto, src, sport, dst, dport: the key of `flows` and `miss_flows`)
/// then `rest`, as one statement's parameters in that order.
fn with_flow_key<'a>(
    k: &'a FlowKey,
    rest: &[&'a dyn ToSql],
) -> rusqlite::ParamsFromIter<Vec<&'a dyn ToSql>> {
    let mut v: Vec<&dyn ToSql> = vec![&k.dir, &k.proto, &k.src, &k.sport, &k.dst, &k.dport];
    v.extend_from_slice(rest);
    params_from_iter(v)
}

/// A direction is stored by its name.
impl ToSql for Dir {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

/// The L3-miss sampler's rows: totals, buffer map, per-queue charges, age histogram, and
/// its whole-run flows and regions.
fn insert_misses(
    tx: &rusqlite::Transaction<'_>,
    i: i64,
    m: &crate::snapshot::MissSnapshot,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO miss_intervals(interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged,out_of_subset,
                                    no_flow,queue_clamped,throttles,throttled_ns,throttle_records_lost,before_window,
                                    sampled_ns)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)")?
    .execute(params![
            i,
            m.samples as i64,
            m.on_packet_buffers as i64,
            m.other_addr as i64,
            m.no_addr as i64,
            m.ctx_charged as i64,
            m.uncharged as i64,
            m.out_of_subset as i64,
            m.no_flow.map(|v| v as i64),
            m.queue_clamped as i64,
            m.throttle.map(|t| t.throttles as i64),
            m.throttle.map(|t| t.throttled_ns as i64),
            m.throttle.map(|t| t.records_lost as i64),
            m.before_window as i64,
            m.sampled_ns.map(|v| v as i64)
        ])?;
    let b = &m.buf;
    tx.prepare_cached(
        "INSERT INTO buf_map_intervals(interval,linear_pages,frag_pages,frags_over_cap,frags_no_page,frags_no_layout,entries,
                                       copy_linear_joined,copy_frag_joined,slots_replaced,pages_over_cap)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)")?
    .execute(params![
            i,
            b.linear_pages as i64,
            b.frag_pages as i64,
            b.frags_over_cap as i64,
            b.frags_no_page as i64,
            b.frags_no_layout as i64,
            b.entries.map(|e| e as i64),
            b.copy_linear_joined as i64,
            b.copy_frag_joined as i64,
            b.slots_replaced as i64,
            b.pages_over_cap as i64
        ])?;
    let mut q = tx.prepare_cached(
        "INSERT INTO miss_queues(interval,dir,queue,addr_join,cpu_ctx) VALUES (?1,?2,?3,?4,?5)",
    )?;
    for (dir, queue, a, c) in &m.queues {
        q.execute(params![i, dir.as_str(), queue, *a as i64, *c as i64])?;
    }
    let mut h =
        tx.prepare_cached("INSERT INTO miss_age_hist(interval,bucket,count) VALUES (?1,?2,?3)")?;
    for (b, c) in m.age_hist.iter().enumerate().filter(|(_, c)| **c > 0) {
        h.execute(params![i, b as i64, *c as i64])?;
    }
    let mut f = tx.prepare_cached(
        "INSERT OR REPLACE INTO miss_flows(dir,proto,src,sport,dst,dport,addr_join,cpu_ctx) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
    )?;
    for (k, a, c) in &m.flows {
        let (a, c) = (*a as i64, *c as i64);
        f.execute(with_flow_key(k, &[&a, &c]))?;
    }
    let mut r =
        tx.prepare_cached("INSERT OR REPLACE INTO miss_regions(region,samples) VALUES (?1,?2)")?;
    for (region, n) in &m.regions {
        r.execute(params![*region as i64, *n as i64])?;
    }
    Ok(())
}

/// Whole-run tables as last read: flow overflow, page pools, drop reasons.
fn insert_whole_run(tx: &rusqlite::Transaction<'_>, s: &Snapshot) -> rusqlite::Result<()> {
    if !s.flow_overflow.is_empty() {
        let mut o_st = tx.prepare_cached("INSERT OR REPLACE INTO flow_overflow(dir,queue,packets,bytes,unparsed) VALUES (?1,?2,?3,?4,?5)")?;
        let n = |v: u64| v.min(i64::MAX as u64) as i64;
        for o in &s.flow_overflow {
            o_st.execute(params![
                o.dir.as_str(),
                o.queue,
                n(o.packets),
                n(o.bytes),
                n(o.unparsed)
            ])?;
        }
    }
    if !s.socket_queues.is_empty() {
        let mut q_st = tx.prepare_cached(
            "INSERT OR REPLACE INTO socket_queues(proto,src,sport,dst,dport,reads,rqueue_sum,rqueue_max,rmem_sum,
             rcvbuf_max,drained_bytes,span_ns) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
        )?;
        let n = |v: u64| v.min(i64::MAX as u64) as i64;
        for q in &s.socket_queues {
            q_st.execute(params![
                q.key.proto,
                q.key.src,
                q.key.sport,
                q.key.dst,
                q.key.dport,
                n(q.reads),
                n(q.rqueue_sum),
                n(q.rqueue_max),
                n(q.rmem_sum),
                n(q.rcvbuf_max),
                n(q.drained_bytes),
                n(q.span_ns)
            ])?;
        }
    }
    if !s.page_pools.is_empty() {
        let mut p_st = tx.prepare_cached(
            "INSERT OR REPLACE INTO page_pools(pool,napi_id,alloc_fast,alloc_slow,alloc_slow_high_order,alloc_empty,alloc_refill,
             alloc_waive,recycle_cached,recycle_cache_full,recycle_ring,recycle_ring_full,recycle_released_refcnt)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
        )?;
        let n = |v: u64| v.min(i64::MAX as u64) as i64;
        for p in &s.page_pools {
            p_st.execute(params![
                n(p.id),
                p.napi_id.map(n),
                n(p.alloc_fast),
                n(p.alloc_slow),
                n(p.alloc_slow_high_order),
                n(p.alloc_empty),
                n(p.alloc_refill),
                n(p.alloc_waive),
                n(p.recycle_cached),
                n(p.recycle_cache_full),
                n(p.recycle_ring),
                n(p.recycle_ring_full),
                n(p.recycle_released_refcnt)
            ])?;
        }
    }
    let mut d_st = tx.prepare_cached(
        "INSERT OR REPLACE INTO drop_reasons(reason,count,before_stack) VALUES (?1,?2,?3)",
    )?;
    for (r, c) in &s.drop_reasons {
        let early = s
            .drops_before_stack
            .iter()
            .find(|(e, _)| e == r)
            .map_or(0, |e| e.1);
        d_st.execute(params![r, *c as i64, early as i64])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_start_that_fails_before_the_first_interval_leaves_the_old_file_and_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        std::fs::write(&p, b"an earlier recording").unwrap();
        let w = Writer::create(&p, true).unwrap();
        w.set_meta("iface", "{}").unwrap();
        drop(w);
        assert_eq!(std::fs::read(&p).unwrap(), b"an earlier recording");
        assert_eq!(dir_names(d.path()), ["r.ddio"]);
    }

    #[test]
    fn the_first_interval_moves_the_recording_into_place_with_its_journal() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        std::fs::write(&p, b"an earlier recording").unwrap();
        let mut w = Writer::create(&p, true).unwrap();
        w.set_meta("iface", "{}").unwrap();
        assert!(!w.published());
        w.write_snapshot(&Snapshot::default()).unwrap();
        assert!(w.published() && w.intervals() == 1);
        // Later transactions journal beside the final name, where a reader looks.
        let opened = std::fs::canonicalize(w.conn.path().unwrap()).unwrap();
        assert_eq!(opened, std::fs::canonicalize(&p).unwrap());
        w.write_snapshot(&Snapshot {
            index: 1,
            ..Default::default()
        })
        .unwrap();
        w.set_meta("complete", "true").unwrap();
        drop(w);
        assert_eq!(dir_names(d.path()), ["r.ddio"]);
        let conn = Connection::open(&p).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM intervals", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn a_killed_writer_leaves_its_intervals_in_the_log_for_the_next_reader() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        let mut w = Writer::create(&p, false).unwrap();
        for index in 0..3 {
            w.write_snapshot(&Snapshot {
                index,
                ..Default::default()
            })
            .unwrap();
        }
        // As SIGKILL: nothing closes the connection or folds the log back.
        std::mem::forget(w);
        assert!(d.path().join("r.ddio-wal").exists());
        let conn = Connection::open(&p).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM intervals", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
    }

    #[test]
    fn a_replaced_recordings_journal_and_log_go_with_it_and_other_files_stay() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        std::fs::write(&p, b"a killed recording").unwrap();
        let mut journal = vec![0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];
        journal.extend([0xab; 600]);
        std::fs::write(d.path().join("r.ddio-journal"), &journal).unwrap();
        let mut wal = 0x377f_0682u32.to_be_bytes().to_vec();
        wal.extend([0xcd; 600]);
        std::fs::write(d.path().join("r.ddio-wal"), &wal).unwrap();
        std::fs::write(d.path().join("r.ddio-shm"), [0u8; 64]).unwrap();
        std::fs::write(d.path().join("r.ddio-notes"), b"not SQLite's").unwrap();
        let mut w = Writer::create(&p, true).unwrap();
        w.write_snapshot(&Snapshot::default()).unwrap();
        w.write_snapshot(&Snapshot {
            index: 1,
            ..Default::default()
        })
        .unwrap();
        drop(w);
        assert_eq!(dir_names(d.path()), ["r.ddio", "r.ddio-notes"]);
        let conn = Connection::open(&p).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM intervals", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn a_log_that_is_not_sqlites_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        std::fs::write(d.path().join("r.ddio-wal"), b"someone's own file").unwrap();
        remove_stale_companions(&p);
        assert!(d.path().join("r.ddio-wal").exists());
    }

    #[test]
    fn a_first_interval_that_cannot_be_published_leaves_the_path_to_its_owner() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        let mut w = Writer::create(&p, false).unwrap();
        assert!(!w.published());
        // Another program creates the path meanwhile: without --force it is not replaced.
        std::fs::write(&p, b"someone else's").unwrap();
        let e = w
            .write_snapshot(&Snapshot::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("already exists"), "{e}");
        assert!(!w.published());
        drop(w);
        assert_eq!(std::fs::read(&p).unwrap(), b"someone else's");
        assert_eq!(dir_names(d.path()), ["r.ddio"]);
    }

    #[test]
    fn refusals_happen_before_anything_is_created() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        std::fs::write(&p, b"keep").unwrap();
        let e = Writer::create(&p, false).err().unwrap().to_string();
        assert!(e.contains("--force"), "{e}");
        let e = Writer::create(d.path(), true).err().unwrap().to_string();
        assert!(e.ends_with("is a directory"), "{e}");
        assert_eq!(dir_names(d.path()), ["r.ddio"]);
        assert_eq!(std::fs::read(&p).unwrap(), b"keep");
    }
}
