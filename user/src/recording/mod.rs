//! The recording: one SQLite file per run. Its schema (documented in docs/recording.md), the
//! `record` command that fills it from a session, its typed metadata (`meta`), the writer
//! that commits one transaction per interval (so a SIGKILL loses at most the interval in
//! progress), the reader that aggregates it over a time `window`, and the counter import.
pub mod import;
pub mod meta;
pub mod packed;
pub mod reader;
pub mod record;
pub mod rollup;
pub mod window;
pub mod writer;

pub use meta::RecordingMeta;
pub use reader::Recording;
pub use writer::Writer;

/// Identifies a ddioscope recording (SQLite `application_id`, "DDIO").
pub const APPLICATION_ID: i32 = 0x4444_494f;
/// 2: histograms packed into their `stage_stats` and `queue_intervals` rows (`packed`);
/// 1: one row per bucket in `stage_hist` and `napi_hist`. The reader reads both.
pub const SCHEMA_VERSION: i32 = 2;

pub const SCHEMA: &str = r#"
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE intervals (
    idx INTEGER PRIMARY KEY, t_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
    sampled INTEGER NOT NULL, lost INTEGER NOT NULL, received INTEGER NOT NULL,
    state_evicted INTEGER NOT NULL, queue_clamped INTEGER NOT NULL, state_stale INTEGER NOT NULL DEFAULT 0,
    detail_ns INTEGER);
CREATE TABLE queue_intervals (
    interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL,
    packets INTEGER NOT NULL, bytes INTEGER NOT NULL,
    napi_polls INTEGER NOT NULL, napi_work INTEGER NOT NULL, napi_budget_exhausted INTEGER NOT NULL,
    copies INTEGER NOT NULL, frees INTEGER NOT NULL, drops INTEGER NOT NULL,
    handups INTEGER NOT NULL DEFAULT 0, unended INTEGER NOT NULL DEFAULT 0, napi_hist BLOB,
    PRIMARY KEY (interval, dir, queue)) WITHOUT ROWID;
CREATE TABLE stage_stats (
    interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL, stage TEXT NOT NULL,
    count INTEGER NOT NULL, sum_ns INTEGER NOT NULL, max_ns INTEGER NOT NULL, hist BLOB,
    PRIMARY KEY (interval, dir, queue, stage)) WITHOUT ROWID;
CREATE TABLE flows (
    dir TEXT NOT NULL, proto TEXT NOT NULL, src TEXT NOT NULL, sport INTEGER NOT NULL,
    dst TEXT NOT NULL, dport INTEGER NOT NULL, queue INTEGER NOT NULL,
    packets INTEGER NOT NULL, bytes INTEGER NOT NULL, payload_bytes INTEGER NOT NULL,
    first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL,
    samples INTEGER, bytes_var INTEGER, source TEXT,
    PRIMARY KEY (dir, proto, src, sport, dst, dport));
CREATE TABLE samples (
    interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL, cpu INTEGER NOT NULL,
    len INTEGER NOT NULL, skb_addr INTEGER NOT NULL, data_addr INTEGER NOT NULL,
    ts0 INTEGER NOT NULL, ts1 INTEGER NOT NULL, ts2 INTEGER NOT NULL, ts3 INTEGER NOT NULL,
    free_ns INTEGER NOT NULL, dropped INTEGER NOT NULL, drop_reason INTEGER NOT NULL,
    proto TEXT, src TEXT, sport INTEGER, dst TEXT, dport INTEGER);
CREATE TABLE flow_overflow (
    dir TEXT NOT NULL, queue INTEGER NOT NULL, packets INTEGER NOT NULL, bytes INTEGER NOT NULL,
    unparsed INTEGER NOT NULL, PRIMARY KEY (dir, queue));
CREATE TABLE drop_reasons (reason INTEGER PRIMARY KEY, count INTEGER NOT NULL, before_stack INTEGER);
CREATE TABLE page_pools (
    pool INTEGER PRIMARY KEY, napi_id INTEGER, alloc_fast INTEGER NOT NULL, alloc_slow INTEGER NOT NULL,
    alloc_slow_high_order INTEGER NOT NULL, alloc_empty INTEGER NOT NULL, alloc_refill INTEGER NOT NULL,
    alloc_waive INTEGER NOT NULL, recycle_cached INTEGER NOT NULL, recycle_cache_full INTEGER NOT NULL,
    recycle_ring INTEGER NOT NULL, recycle_ring_full INTEGER NOT NULL, recycle_released_refcnt INTEGER NOT NULL);
CREATE TABLE socket_queues (
    proto TEXT NOT NULL, src TEXT NOT NULL, sport INTEGER NOT NULL, dst TEXT NOT NULL, dport INTEGER NOT NULL,
    reads INTEGER NOT NULL, rqueue_sum INTEGER NOT NULL, rqueue_max INTEGER NOT NULL, rmem_sum INTEGER NOT NULL,
    rcvbuf_max INTEGER NOT NULL, drained_bytes INTEGER NOT NULL, span_ns INTEGER NOT NULL,
    PRIMARY KEY (proto, src, sport, dst, dport));
CREATE TABLE miss_intervals (
    interval INTEGER PRIMARY KEY, samples INTEGER NOT NULL, on_packet_buffers INTEGER NOT NULL,
    other_addr INTEGER NOT NULL, no_addr INTEGER NOT NULL, ctx_charged INTEGER NOT NULL, uncharged INTEGER NOT NULL,
    out_of_subset INTEGER NOT NULL DEFAULT 0, no_flow INTEGER, queue_clamped INTEGER NOT NULL DEFAULT 0,
    throttles INTEGER, throttled_ns INTEGER, throttle_records_lost INTEGER,
    before_window INTEGER NOT NULL DEFAULT 0, sampled_ns INTEGER);
CREATE TABLE miss_queues (
    interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL,
    addr_join INTEGER NOT NULL, cpu_ctx INTEGER NOT NULL, PRIMARY KEY (interval, dir, queue)) WITHOUT ROWID;
CREATE TABLE miss_age_hist (interval INTEGER NOT NULL, bucket INTEGER NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (interval, bucket)) WITHOUT ROWID;
CREATE TABLE miss_flows (
    dir TEXT NOT NULL, proto TEXT NOT NULL, src TEXT NOT NULL, sport INTEGER NOT NULL,
    dst TEXT NOT NULL, dport INTEGER NOT NULL, addr_join INTEGER NOT NULL, cpu_ctx INTEGER NOT NULL,
    PRIMARY KEY (dir, proto, src, sport, dst, dport));
CREATE TABLE miss_regions (region INTEGER PRIMARY KEY, samples INTEGER NOT NULL);
CREATE TABLE buf_map_intervals (
    interval INTEGER PRIMARY KEY, linear_pages INTEGER NOT NULL, frag_pages INTEGER NOT NULL,
    frags_over_cap INTEGER NOT NULL, frags_no_page INTEGER NOT NULL, frags_no_layout INTEGER NOT NULL,
    entries INTEGER, copy_linear_joined INTEGER NOT NULL, copy_frag_joined INTEGER NOT NULL,
    slots_replaced INTEGER NOT NULL DEFAULT 0, pages_over_cap INTEGER NOT NULL DEFAULT 0);
CREATE TABLE size_hist (
    interval INTEGER NOT NULL, dir TEXT NOT NULL, queue INTEGER NOT NULL, bucket INTEGER NOT NULL,
    count INTEGER NOT NULL, PRIMARY KEY (interval, dir, queue, bucket)) WITHOUT ROWID;
CREATE TABLE nic_drops (
    interval INTEGER NOT NULL, counter TEXT NOT NULL, queue INTEGER, count INTEGER NOT NULL);
CREATE TABLE counters (
    interval INTEGER NOT NULL, t_ns INTEGER NOT NULL, socket INTEGER NOT NULL, pmu TEXT NOT NULL,
    event TEXT NOT NULL, value REAL NOT NULL, raw INTEGER NOT NULL,
    enabled_ns INTEGER NOT NULL, running_ns INTEGER NOT NULL, source TEXT NOT NULL);
"#;
