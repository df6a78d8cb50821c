//! Writes a recording: metadata first, then one committed transaction per interval.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, ErrorCode};

use super::{APPLICATION_ID, SCHEMA, SCHEMA_VERSION};
use crate::snapshot::{Snapshot, NAPI_BUCKETS, NBUCKETS};

pub struct Writer {
    conn: Connection,
    path: PathBuf,
}

/// A one-line reason for an SQLite write failure, naming the file.
pub fn explain_sqlite(e: &rusqlite::Error, path: &Path) -> String {
    let p = path.display();
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => format!("writing recording {p}: the disk is full"),
        Some(ErrorCode::ReadOnly) | Some(ErrorCode::PermissionDenied) => {
            format!("writing recording {p}: permission denied (choose another -o path)")
        }
        Some(ErrorCode::CannotOpen) => format!("cannot create recording {p}: the directory does not exist or is not writable"),
        Some(ErrorCode::NotADatabase) => format!("{p} is not a ddioscope recording (not an SQLite database)"),
        _ => format!("recording {p}: {e}"),
    }
}

impl Writer {
    /// Create a new recording; an existing file is refused unless `force`.
    pub fn create(path: &Path, force: bool) -> Result<Writer> {
        if path.exists() {
            if !force {
                bail!("{} already exists; pass --force to overwrite it", path.display());
            }
            std::fs::remove_file(path).with_context(|| format!("removing {} for --force", path.display()))?;
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                bail!("cannot create recording {}: directory {} does not exist", path.display(), dir.display());
            }
        }
        let conn = Connection::open(path).map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
        let w = Writer { conn, path: path.to_path_buf() };
        w.conn
            .execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};
                 PRAGMA journal_mode = DELETE; PRAGMA synchronous = NORMAL; BEGIN; {SCHEMA} COMMIT;"
            ))
            .map_err(|e| w.err(e))?;
        Ok(w)
    }

    /// Append to a finished recording (counter import).
    pub fn open_existing(path: &Path) -> Result<Writer> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
        Ok(Writer { conn, path: path.to_path_buf() })
    }

    pub fn delete_counters(&self, source: &str) -> Result<()> {
        self.conn.execute("DELETE FROM counters WHERE source = ?1", params![source]).map_err(|e| self.err(e))?;
        Ok(())
    }

    fn err(&self, e: rusqlite::Error) -> anyhow::Error {
        anyhow::anyhow!(explain_sqlite(&e, &self.path))
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn
            .execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)", params![key, value])
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn set_meta_json<T: serde::Serialize>(&self, key: &str, value: &T) -> Result<()> {
        self.set_meta(key, &serde_json::to_string(value)?)
    }

    /// One interval, all or nothing.
    pub fn write_snapshot(&mut self, s: &Snapshot) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| anyhow::anyhow!(explain_sqlite(&e, &path)))?;
        write_snapshot_tx(&tx, s).map_err(|e| anyhow::anyhow!(explain_sqlite(&e, &path)))?;
        tx.commit().map_err(|e| anyhow::anyhow!(explain_sqlite(&e, &path)))?;
        Ok(())
    }

    /// Counter readings of one interval (any source).
    pub fn write_counters(&mut self, interval: u64, rows: &[CounterRow]) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| anyhow::anyhow!(explain_sqlite(&e, &path)))?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT INTO counters(interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns,source)
                     VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
                )
                .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, &path)))?;
            for r in rows {
                st.execute(params![
                    interval as i64,
                    r.t_ns as i64,
                    r.socket,
                    r.pmu,
                    r.event,
                    r.value,
                    r.raw as i64,
                    r.enabled_ns as i64,
                    r.running_ns as i64,
                    r.source
                ])
                .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, &path)))?;
            }
        }
        tx.commit().map_err(|e| anyhow::anyhow!(explain_sqlite(&e, &path)))?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
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

fn write_snapshot_tx(tx: &rusqlite::Transaction<'_>, s: &Snapshot) -> rusqlite::Result<()> {
    let i = s.index as i64;
    let e = &s.events;
    tx.execute(
        "INSERT INTO intervals(idx,t_ns,dur_ns,sampled,lost,received,state_evicted,queue_clamped,state_stale,detail_ns)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
        params![
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
        ],
    )?;
    let mut q_st = tx.prepare_cached(
        "INSERT INTO queue_intervals(interval,dir,queue,packets,bytes,napi_polls,napi_work,
         napi_budget_exhausted,copies,frees,drops,handups) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
    )?;
    let mut ss_st = tx.prepare_cached(
        "INSERT INTO stage_stats(interval,dir,queue,stage,count,sum_ns,max_ns) VALUES (?1,?2,?3,?4,?5,?6,?7)",
    )?;
    let mut h_st = tx.prepare_cached(
        "INSERT INTO stage_hist(interval,dir,queue,stage,bucket,count) VALUES (?1,?2,?3,?4,?5,?6)",
    )?;
    let mut n_st = tx.prepare_cached("INSERT INTO napi_hist(interval,queue,bucket,count) VALUES (?1,?2,?3,?4)")?;
    for q in s.queues.iter().filter(|q| !q.is_zero()) {
        let dir = q.dir.as_str();
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
            q.handups as i64
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
                q.stage_max_ns[st] as i64
            ])?;
            for b in 0..NBUCKETS {
                if q.stage_hist[st][b] > 0 {
                    h_st.execute(params![i, dir, q.queue, name, b as i64, q.stage_hist[st][b] as i64])?;
                }
            }
        }
        for b in 0..NAPI_BUCKETS {
            if q.napi_work_hist[b] > 0 {
                n_st.execute(params![i, q.queue, b as i64, q.napi_work_hist[b] as i64])?;
            }
        }
    }
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
    let mut f_st = tx.prepare_cached(
        "INSERT OR REPLACE INTO flows(dir,proto,src,sport,dst,dport,queue,packets,bytes,payload_bytes,first_ns,last_ns,
         samples,bytes_var) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)",
    )?;
    for f in &s.flows {
        let k = &f.key;
        f_st.execute(params![
            k.dir.as_str(),
            k.proto,
            k.src,
            k.sport,
            k.dst,
            k.dport,
            f.queue,
            f.packets as i64,
            f.bytes as i64,
            f.payload_bytes as i64,
            f.first_ns as i64,
            f.last_ns as i64,
            f.samples.map(|v| v as i64),
            // SQLite integers are signed 64-bit: a variance past that is capped.
            f.bytes_var.map(|v| v.min(i64::MAX as u64) as i64)
        ])?;
    }
    if let Some(m) = &s.misses {
        tx.execute(
            "INSERT INTO miss_intervals(interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged,out_of_subset,
                                        no_flow,queue_clamped,throttles,throttled_ns,throttle_records_lost,before_window,
                                        sampled_ns)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)",
            params![
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
            ],
        )?;
        let b = &m.buf;
        tx.execute(
            "INSERT INTO buf_map_intervals(interval,linear_pages,frag_pages,frags_over_cap,frags_no_page,frags_no_layout,entries,
                                           copy_linear_joined,copy_frag_joined,slots_replaced,pages_over_cap)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
            params![
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
            ],
        )?;
        let mut q = tx.prepare_cached("INSERT INTO miss_queues(interval,dir,queue,addr_join,cpu_ctx) VALUES (?1,?2,?3,?4,?5)")?;
        for (dir, queue, a, c) in &m.queues {
            q.execute(params![i, dir.as_str(), queue, *a as i64, *c as i64])?;
        }
        let mut h = tx.prepare_cached("INSERT INTO miss_age_hist(interval,bucket,count) VALUES (?1,?2,?3)")?;
        for (b, c) in m.age_hist.iter().enumerate().filter(|(_, c)| **c > 0) {
            h.execute(params![i, b as i64, *c as i64])?;
        }
        let mut f = tx.prepare_cached(
            "INSERT OR REPLACE INTO miss_flows(dir,proto,src,sport,dst,dport,addr_join,cpu_ctx) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
        )?;
        for (k, a, c) in &m.flows {
            f.execute(params![k.dir.as_str(), k.proto, k.src, k.sport, k.dst, k.dport, *a as i64, *c as i64])?;
        }
        let mut r = tx.prepare_cached("INSERT OR REPLACE INTO miss_regions(region,samples) VALUES (?1,?2)")?;
        for (region, n) in &m.regions {
            r.execute(params![*region as i64, *n as i64])?;
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
    let mut d_st = tx.prepare_cached("INSERT OR REPLACE INTO drop_reasons(reason,count) VALUES (?1,?2)")?;
    for (r, c) in &s.drop_reasons {
        d_st.execute(params![r, *c as i64])?;
    }
    Ok(())
}
