//! Reads a recording back as the same Snapshot stream live mode produces,
//! refusing files that are not ddioscope recordings with a one-line reason.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use rusqlite::{Connection, OpenFlags};

use super::meta::RecordingMeta;
use super::writer::{explain_sqlite, CounterRow};
use super::{APPLICATION_ID, SCHEMA_VERSION};
use crate::snapshot::{Dir, EventCounters, FlowCounters, FlowKey, MissSnapshot, PacketSample, SamplerThrottle, QueueCounters, Snapshot};
use crate::topology::{HostInfo, IfaceInfo};

pub struct Recording {
    pub path: PathBuf,
    pub meta: RecordingMeta,
    pub snapshots: Vec<Snapshot>,
    pub flows: Vec<FlowCounters>,
    pub drop_reasons: Vec<(u32, u64)>,
    /// (interval, row)
    pub counters: Vec<(u64, CounterRow)>,
}

/// A count, size or time as the writer stores it (u64 as i64): negative only in a damaged
/// file, and refused there, since sums of such values would wrap.
fn count(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<u64> {
    let v: i64 = r.get(i)?;
    u64::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(i, v))
}

fn opt_count(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<u64>> {
    match r.get::<_, Option<i64>>(i)? {
        Some(v) => u64::try_from(v).map(Some).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(i, v)),
        None => Ok(None),
    }
}

fn stage_index(dir: Dir, name: &str) -> Option<usize> {
    dir.stage_names().iter().position(|s| *s == name)
}

impl Recording {
    pub fn open(path: &Path) -> Result<Recording> {
        let p = path.display();
        if !path.exists() {
            bail!("{p}: no such file");
        }
        if path.is_dir() {
            bail!("{p} is a directory, not a ddioscope recording");
        }
        // Read-write when possible so SQLite can roll back an interval that a
        // SIGKILL interrupted (a hot journal); read-only otherwise.
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .or_else(|_| Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY))
            .map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
        let bad = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
                anyhow::anyhow!("{p} is not a readable ddioscope recording (not an SQLite database, or corrupt)")
            }
            _ => anyhow::anyhow!(explain_sqlite(&e, path)),
        };
        let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(bad)?;
        if app != APPLICATION_ID {
            bail!("{p} is an SQLite file but not a ddioscope recording");
        }
        let ver: i32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(bad)?;
        if ver > SCHEMA_VERSION {
            bail!("{p} was written by a newer ddioscope (schema {ver}; this one reads up to {SCHEMA_VERSION})");
        }
        let corrupt = |e: rusqlite::Error| anyhow::anyhow!("{p} is damaged: {e}");
        let mut meta = BTreeMap::new();
        {
            let mut st = conn.prepare("SELECT key, value FROM meta").map_err(corrupt)?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).map_err(corrupt)?;
            for r in rows {
                let (k, v) = r.map_err(corrupt)?;
                meta.insert(k, v);
            }
        }
        if !meta.contains_key("iface") {
            bail!("{p} has no run metadata: the recording was cut off before its first write");
        }
        let meta = RecordingMeta::from_rows(&meta);

        let table_exists = |name: &str| -> bool {
            conn.query_row("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1", [name], |_| Ok(()))
                .is_ok()
        };
        let column_exists = |table: &str, column: &str| -> bool {
            conn.query_row("SELECT 1 FROM pragma_table_info(?1) WHERE name=?2", [table, column], |_| Ok(())).is_ok()
        };
        // Recordings from before state_stale existed read it as 0.
        let has_stale = conn
            .prepare("SELECT state_stale FROM intervals LIMIT 0")
            .is_ok();
        let stale_col = if has_stale { "state_stale" } else { "0" };
        // Nor detail_ns, from before detail windows: the hooks ran all the time (NULL).
        let detail_col = if column_exists("intervals", "detail_ns") { "detail_ns" } else { "NULL" };
        let mut snaps: Vec<Snapshot> = Vec::new();
        let mut by_idx: HashMap<u64, usize> = HashMap::new();
        {
            let mut st = conn
                .prepare(&format!(
                    "SELECT idx,t_ns,dur_ns,sampled,lost,received,state_evicted,queue_clamped,{stale_col},{detail_col} FROM intervals ORDER BY idx"
                ))
                .map_err(corrupt)?;
            let rows = st
                .query_map([], |r| {
                    Ok(Snapshot {
                        index: count(r, 0)?,
                        t_ns: count(r, 1)?,
                        dur_ns: count(r, 2)?,
                        events: EventCounters {
                            sampled: count(r, 3)?,
                            lost: count(r, 4)?,
                            received: count(r, 5)?,
                            state_evicted: count(r, 6)?,
                            queue_clamped: count(r, 7)?,
                            state_stale: count(r, 8)?,
                        },
                        detail_ns: opt_count(r, 9)?,
                        ..Default::default()
                    })
                })
                .map_err(corrupt)?;
            for s in rows {
                let s = s.map_err(corrupt)?;
                by_idx.insert(s.index, snaps.len());
                snaps.push(s);
            }
        }
        let mut queues: HashMap<(u64, Dir, u32), QueueCounters> = HashMap::new();
        {
            let mut st = conn
                .prepare(&format!(
                    "SELECT interval,dir,queue,packets,bytes,napi_polls,napi_work,napi_budget_exhausted,copies,frees,drops,{} FROM queue_intervals",
                    if column_exists("queue_intervals", "handups") { "handups" } else { "0" }
                ))
                .map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let dir = Dir::parse(&r.get::<_, String>(1).map_err(corrupt)?).unwrap_or(Dir::Rx);
                let queue: u32 = r.get(2).map_err(corrupt)?;
                let mut q = QueueCounters::new(dir, queue);
                let g = |i: usize| -> Result<u64> { count(r, i).map_err(corrupt) };
                q.packets = g(3)?;
                q.bytes = g(4)?;
                q.napi_polls = g(5)?;
                q.napi_work = g(6)?;
                q.napi_budget_exhausted = g(7)?;
                q.copies = g(8)?;
                q.frees = g(9)?;
                q.drops = g(10)?;
                q.handups = g(11)?;
                queues.insert((g(0)?, dir, queue), q);
            }
        }
        {
            let mut st = conn
                .prepare("SELECT interval,dir,queue,stage,count,sum_ns,max_ns FROM stage_stats")
                .map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let iv = count(r, 0).map_err(corrupt)?;
                let dir = Dir::parse(&r.get::<_, String>(1).map_err(corrupt)?).unwrap_or(Dir::Rx);
                let queue: u32 = r.get(2).map_err(corrupt)?;
                let Some(si) = stage_index(dir, &r.get::<_, String>(3).map_err(corrupt)?) else { continue };
                let q = queues.entry((iv, dir, queue)).or_insert_with(|| QueueCounters::new(dir, queue));
                q.stage_count[si] = count(r, 4).map_err(corrupt)?;
                q.stage_sum_ns[si] = count(r, 5).map_err(corrupt)?;
                q.stage_max_ns[si] = count(r, 6).map_err(corrupt)?;
            }
        }
        {
            let mut st = conn.prepare("SELECT interval,dir,queue,stage,bucket,count FROM stage_hist").map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let iv = count(r, 0).map_err(corrupt)?;
                let dir = Dir::parse(&r.get::<_, String>(1).map_err(corrupt)?).unwrap_or(Dir::Rx);
                let queue: u32 = r.get(2).map_err(corrupt)?;
                let Some(si) = stage_index(dir, &r.get::<_, String>(3).map_err(corrupt)?) else { continue };
                let b = r.get::<_, i64>(4).map_err(corrupt)? as usize;
                let q = queues.entry((iv, dir, queue)).or_insert_with(|| QueueCounters::new(dir, queue));
                if let Some(slot) = q.stage_hist[si].get_mut(b) {
                    *slot = count(r, 5).map_err(corrupt)?;
                }
            }
        }
        {
            let mut st = conn.prepare("SELECT interval,queue,bucket,count FROM napi_hist").map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let iv = count(r, 0).map_err(corrupt)?;
                let queue: u32 = r.get(1).map_err(corrupt)?;
                let b = r.get::<_, i64>(2).map_err(corrupt)? as usize;
                let q = queues.entry((iv, Dir::Rx, queue)).or_insert_with(|| QueueCounters::new(Dir::Rx, queue));
                if let Some(slot) = q.napi_work_hist.get_mut(b) {
                    *slot = count(r, 3).map_err(corrupt)?;
                }
            }
        }
        let mut qlist: Vec<_> = queues.into_iter().collect();
        qlist.sort_by_key(|((iv, d, q), _)| (*iv, *d, *q));
        for ((iv, _, _), q) in qlist {
            if let Some(&si) = by_idx.get(&iv) {
                snaps[si].queues.push(q);
            }
        }
        {
            let mut st = conn
                .prepare("SELECT interval,dir,queue,cpu,len,skb_addr,data_addr,ts0,ts1,ts2,ts3,free_ns,dropped,drop_reason,proto,src,sport,dst,dport FROM samples")
                .map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let iv = count(r, 0).map_err(corrupt)?;
                let dir = Dir::parse(&r.get::<_, String>(1).map_err(corrupt)?).unwrap_or(Dir::Rx);
                let g = |i: usize| -> Result<u64> { count(r, i).map_err(corrupt) };
                let proto: Option<String> = r.get(14).map_err(corrupt)?;
                let flow = match proto {
                    Some(proto) => Some(FlowKey {
                        dir,
                        proto,
                        src: r.get(15).map_err(corrupt)?,
                        sport: r.get(16).map_err(corrupt)?,
                        dst: r.get(17).map_err(corrupt)?,
                        dport: r.get(18).map_err(corrupt)?,
                    }),
                    None => None,
                };
                let sample = PacketSample {
                    dir,
                    queue: g(2)? as u32,
                    cpu: g(3)? as u32,
                    len: g(4)? as u32,
                    // Kernel addresses: the writer's u64 read back as i64, negative above 2^63.
                    skb_addr: r.get::<_, i64>(5).map_err(corrupt)? as u64,
                    data_addr: r.get::<_, i64>(6).map_err(corrupt)? as u64,
                    ts: [g(7)?, g(8)?, g(9)?, g(10)?],
                    free_ns: g(11)?,
                    dropped: g(12)? != 0,
                    drop_reason: g(13)? as u32,
                    flow,
                };
                if let Some(&si) = by_idx.get(&iv) {
                    snaps[si].samples.push(sample);
                }
            }
        }
        let mut flows = Vec::new();
        {
            let mut st = conn
                .prepare(&format!(
                    "SELECT dir,proto,src,sport,dst,dport,queue,packets,bytes,payload_bytes,first_ns,last_ns,{} FROM flows",
                    if column_exists("flows", "samples") { "samples,bytes_var" } else { "NULL,NULL" }
                ))
                .map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let dir = Dir::parse(&r.get::<_, String>(0).map_err(corrupt)?).unwrap_or(Dir::Rx);
                flows.push(FlowCounters {
                    key: FlowKey {
                        dir,
                        proto: r.get(1).map_err(corrupt)?,
                        src: r.get(2).map_err(corrupt)?,
                        sport: r.get(3).map_err(corrupt)?,
                        dst: r.get(4).map_err(corrupt)?,
                        dport: r.get(5).map_err(corrupt)?,
                    },
                    queue: r.get(6).map_err(corrupt)?,
                    packets: count(r, 7).map_err(corrupt)?,
                    bytes: count(r, 8).map_err(corrupt)?,
                    payload_bytes: count(r, 9).map_err(corrupt)?,
                    first_ns: count(r, 10).map_err(corrupt)?,
                    last_ns: count(r, 11).map_err(corrupt)?,
                    samples: opt_count(r, 12).map_err(corrupt)?,
                    bytes_var: opt_count(r, 13).map_err(corrupt)?,
                });
            }
        }
        let mut drop_reasons = Vec::new();
        {
            let mut st = conn.prepare("SELECT reason,count FROM drop_reasons ORDER BY reason").map_err(corrupt)?;
            let rows = st.query_map([], |r| Ok((r.get::<_, u32>(0)?, count(r, 1)?))).map_err(corrupt)?;
            for r in rows {
                drop_reasons.push(r.map_err(corrupt)?);
            }
        }
        let mut counters = Vec::new();
        {
            let mut st = conn
                .prepare("SELECT interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns,source FROM counters ORDER BY interval")
                .map_err(corrupt)?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        count(r, 0)?,
                        CounterRow {
                            t_ns: count(r, 1)?,
                            socket: r.get(2)?,
                            pmu: r.get(3)?,
                            event: r.get(4)?,
                            value: r.get(5)?,
                            raw: count(r, 6)?,
                            enabled_ns: count(r, 7)?,
                            running_ns: count(r, 8)?,
                            source: r.get(9)?,
                        },
                    ))
                })
                .map_err(corrupt)?;
            for r in rows {
                counters.push(r.map_err(corrupt)?);
            }
        }
        // L3-miss samples: per-interval rows into each Snapshot; cumulative flows and regions into the last.
        if table_exists("miss_intervals") {
            // Recordings from before page sampling have no out_of_subset column: nothing was out.
            let out_of_subset = if column_exists("miss_intervals", "out_of_subset") { "out_of_subset" } else { "0" };
            // Nor, from before the flow-loss counts, no_flow (unknown: NULL) and queue_clamped.
            let no_flow = if column_exists("miss_intervals", "no_flow") { "no_flow" } else { "NULL" };
            let queue_clamped = if column_exists("miss_intervals", "queue_clamped") { "queue_clamped" } else { "0" };
            // Nor, from before the sampler's throttle log, its three columns (unknown).
            let throttle =
                if column_exists("miss_intervals", "throttles") { "throttles,throttled_ns,throttle_records_lost" } else { "NULL,NULL,NULL" };
            // Nor, from before attribution windows, before_window (always on: none).
            let before_window = if column_exists("miss_intervals", "before_window") { "before_window" } else { "0" };
            let sampled_ns = if column_exists("miss_intervals", "sampled_ns") { "sampled_ns" } else { "NULL" };
            let mut st = conn
                .prepare(&format!(
                    "SELECT interval,samples,on_packet_buffers,other_addr,no_addr,ctx_charged,uncharged,{out_of_subset},{no_flow},\
                     {queue_clamped},{throttle},{before_window},{sampled_ns} FROM miss_intervals"
                ))
                .map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let g = |i: usize| -> Result<u64> { count(r, i).map_err(corrupt) };
                let opt = |i: usize| -> Result<Option<u64>> { opt_count(r, i).map_err(corrupt) };
                if let Some(&si) = by_idx.get(&g(0)?) {
                    snaps[si].misses = Some(MissSnapshot {
                        samples: g(1)?,
                        on_packet_buffers: g(2)?,
                        other_addr: g(3)?,
                        no_addr: g(4)?,
                        ctx_charged: g(5)?,
                        uncharged: g(6)?,
                        out_of_subset: g(7)?,
                        no_flow: opt_count(r, 8).map_err(corrupt)?,
                        queue_clamped: g(9)?,
                        throttle: match (opt(10)?, opt(11)?, opt(12)?) {
                            (Some(throttles), Some(throttled_ns), Some(records_lost)) => {
                                Some(SamplerThrottle { throttles, throttled_ns, records_lost })
                            }
                            _ => None,
                        },
                        before_window: g(13)?,
                        sampled_ns: opt(14)?,
                        age_hist: vec![0; crate::snapshot::NBUCKETS],
                        ..Default::default()
                    });
                }
            }
            // Recordings from before the buffer-map table read it as all zero.
            if table_exists("buf_map_intervals") {
                let mut st = conn
                    .prepare(
                        &format!(
                            "SELECT interval,linear_pages,frag_pages,frags_over_cap,frags_no_page,frags_no_layout,entries,
                                    copy_linear_joined,copy_frag_joined,{},{} FROM buf_map_intervals",
                            // Columns added later read as 0 from recordings without them.
                            if column_exists("buf_map_intervals", "slots_replaced") { "slots_replaced" } else { "0" },
                            if column_exists("buf_map_intervals", "pages_over_cap") { "pages_over_cap" } else { "0" },
                        ),
                    )
                    .map_err(corrupt)?;
                let mut rows = st.query([]).map_err(corrupt)?;
                while let Some(r) = rows.next().map_err(corrupt)? {
                    let g = |i: usize| -> Result<u64> { count(r, i).map_err(corrupt) };
                    if let Some(m) = by_idx.get(&g(0)?).and_then(|&si| snaps[si].misses.as_mut()) {
                        m.buf = crate::snapshot::BufMapCounters {
                            linear_pages: g(1)?,
                            frag_pages: g(2)?,
                            frags_over_cap: g(3)?,
                            frags_no_page: g(4)?,
                            frags_no_layout: g(5)?,
                            entries: opt_count(r, 6).map_err(corrupt)?,
                            copy_linear_joined: g(7)?,
                            copy_frag_joined: g(8)?,
                            slots_replaced: g(9)?,
                            pages_over_cap: g(10)?,
                        };
                    }
                }
            }
            let mut st = conn.prepare("SELECT interval,dir,queue,addr_join,cpu_ctx FROM miss_queues").map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let iv = count(r, 0).map_err(corrupt)?;
                let dir = Dir::parse(&r.get::<_, String>(1).map_err(corrupt)?).unwrap_or(Dir::Rx);
                let q: u32 = r.get(2).map_err(corrupt)?;
                let a = count(r, 3).map_err(corrupt)?;
                let c = count(r, 4).map_err(corrupt)?;
                if let Some(m) = by_idx.get(&iv).and_then(|&si| snaps[si].misses.as_mut()) {
                    m.queues.push((dir, q, a, c));
                }
            }
            let mut st = conn.prepare("SELECT interval,bucket,count FROM miss_age_hist").map_err(corrupt)?;
            let mut rows = st.query([]).map_err(corrupt)?;
            while let Some(r) = rows.next().map_err(corrupt)? {
                let iv = count(r, 0).map_err(corrupt)?;
                let b = r.get::<_, i64>(1).map_err(corrupt)? as usize;
                if let Some(m) = by_idx.get(&iv).and_then(|&si| snaps[si].misses.as_mut()) {
                    if let Some(slot) = m.age_hist.get_mut(b) {
                        *slot = count(r, 2).map_err(corrupt)?;
                    }
                }
            }
            if let Some(last) = snaps.iter_mut().rev().find(|s| s.misses.is_some()).and_then(|s| s.misses.as_mut()) {
                let mut st = conn
                    .prepare("SELECT dir,proto,src,sport,dst,dport,addr_join,cpu_ctx FROM miss_flows")
                    .map_err(corrupt)?;
                let mut rows = st.query([]).map_err(corrupt)?;
                while let Some(r) = rows.next().map_err(corrupt)? {
                    let dir = Dir::parse(&r.get::<_, String>(0).map_err(corrupt)?).unwrap_or(Dir::Rx);
                    let k = FlowKey {
                        dir,
                        proto: r.get(1).map_err(corrupt)?,
                        src: r.get(2).map_err(corrupt)?,
                        sport: r.get(3).map_err(corrupt)?,
                        dst: r.get(4).map_err(corrupt)?,
                        dport: r.get(5).map_err(corrupt)?,
                    };
                    last.flows.push((k, count(r, 6).map_err(corrupt)?, count(r, 7).map_err(corrupt)?));
                }
                let mut st = conn.prepare("SELECT region,samples FROM miss_regions ORDER BY samples DESC").map_err(corrupt)?;
                // A region is an address range (any u64); its sample count is a count.
                let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, count(r, 1)?))).map_err(corrupt)?;
                for r in rows {
                    last.regions.push(r.map_err(corrupt)?);
                }
            }
        }
        // Replay parity: each Snapshot carries its interval's readings of the recording's counter source.
        let source = meta.counters_source.map(|s| s.as_str()).unwrap_or_default();
        for (iv, r) in counters.iter().filter(|(_, r)| r.source == source) {
            if let Some(&si) = by_idx.get(iv) {
                snaps[si].counters.push(r.reading());
            }
        }
        Ok(Recording { path: path.to_path_buf(), meta, snapshots: snaps, flows, drop_reasons, counters })
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

    pub fn duration_s(&self) -> f64 {
        // In f64: a damaged file's durations must not wrap a u64 sum.
        self.snapshots.iter().map(|s| s.dur_ns as f64).sum::<f64>() / 1e9
    }

    /// Per-queue totals over the whole run.
    pub fn queue_totals(&self) -> Vec<QueueCounters> {
        let mut map: BTreeMap<(Dir, u32), QueueCounters> = BTreeMap::new();
        for s in &self.snapshots {
            for q in &s.queues {
                map.entry((q.dir, q.queue)).or_insert_with(|| QueueCounters::new(q.dir, q.queue)).add(q);
            }
        }
        map.into_values().collect()
    }

    pub fn event_totals(&self) -> EventCounters {
        let mut t = EventCounters::default();
        for s in &self.snapshots {
            let e = &s.events;
            t.sampled = t.sampled.saturating_add(e.sampled);
            t.lost = t.lost.saturating_add(e.lost);
            t.received = t.received.saturating_add(e.received);
            t.state_evicted = t.state_evicted.saturating_add(e.state_evicted);
            t.queue_clamped = t.queue_clamped.saturating_add(e.queue_clamped);
            t.state_stale = t.state_stale.saturating_add(e.state_stale);
        }
        t
    }
}

/// The device's page pools as the recording last saw them (cumulative since each pool was
/// made; empty: the kernel kept no page_pool statistics, or a recording from before them).
pub fn page_pools(path: &Path) -> Result<Vec<crate::probe::kstats::PagePoolStat>> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| anyhow::anyhow!(explain_sqlite(&e, path)))?;
    let Ok(mut st) = conn.prepare(
        "SELECT pool,napi_id,alloc_fast,alloc_slow,alloc_slow_high_order,alloc_empty,alloc_refill,alloc_waive,
                recycle_cached,recycle_cache_full,recycle_ring,recycle_ring_full,recycle_released_refcnt FROM page_pools",
    ) else {
        return Ok(Vec::new());
    };
    let rows = st
        .query_map([], |r| {
            let g = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
            Ok(crate::probe::kstats::PagePoolStat {
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
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| anyhow::anyhow!("{}: damaged page_pools table: {e}", path.display()))
}

/// Test support: the checked-in fixture recording, altered.
#[cfg(test)]
pub(crate) mod fixture {
    use std::path::Path;

    /// The fixture recording with `sql` run on a copy: an older schema rebuilt by hand. The
    /// temporary directory lives as long as the returned guard.
    pub(crate) fn fixture_altered(sql: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/recordings/veth-tcp.ddio");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("old.ddio");
        std::fs::copy(&fixture, &path).expect("copy fixture");
        rusqlite::Connection::open(&path).expect("open copy").execute_batch(sql).expect("old-style table");
        (dir, path)
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::fixture_altered;
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
        assert_eq!((p[0].id, p[0].napi_id, p[0].recycle_ring), (5, Some(8193), 30));
        let (_dir2, old) = fixture_altered("SELECT 1;");
        assert!(page_pools(&old).expect("reads").is_empty());
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
        let r = Recording::open(&path);
        assert!(r.is_ok(), "{:?}", r.err());
    }
}

