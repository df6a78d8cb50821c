//! Per-interval numbers derived from a Snapshot for the live surfaces (`top`,
//! `serve`): rates, NAPI batch, stage p99s, Little's-law in-flight bytes and the
//! assumed DDIO capacity. One place, so the terminal and the metrics agree.

use crate::snapshot::{
    hist_percentile, Dir, FlowCounters, FlowKey, QueueCounters, NSTAGES, RX_DRIVER_TO_FREE,
};
use crate::topology::HostInfo;

/// Ways Intel assigns to I/O by default (IIO LLC WAYS = 0x600 on SKX..SPR).
/// The real mask is not readable without MSR access, so it is an assumption
/// and every surface says so.
pub const ASSUMED_DDIO_WAYS: u32 = 2;

/// LLC bytes the NIC may allocate into: LLC size × assumed DDIO ways / ways.
pub fn ddio_capacity_bytes(host: &HostInfo) -> Option<u64> {
    let llc = host.llc.as_ref()?;
    if llc.ways == 0 || llc.size_bytes == 0 {
        return None;
    }
    Some(llc.size_bytes * u64::from(ASSUMED_DDIO_WAYS.min(llc.ways)) / u64::from(llc.ways))
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueView {
    pub dir: Dir,
    pub queue: u32,
    pub packets_per_s: f64,
    pub mbit_per_s: f64,
    pub napi_polls: u64,
    /// Packets per NAPI poll (RX only; None without polls).
    pub napi_avg_batch: Option<f64>,
    pub napi_budget_exhausted: u64,
    pub drops: u64,
    /// p99 of each stage over this interval, ns.
    pub p99_ns: [Option<u64>; NSTAGES],
    /// Mean RX buffer lifetime (driver hand-up → free) this interval, ns.
    pub mean_lifetime_ns: Option<f64>,
    /// Little's law: bytes/s × mean residence = bytes the queue keeps alive.
    pub inflight_bytes: Option<f64>,
}

impl QueueView {
    pub fn from_delta(d: &QueueCounters, dur_s: f64) -> QueueView {
        let per_s = |v: u64| if dur_s > 0.0 { v as f64 / dur_s } else { 0.0 };
        let mut p99_ns = [None; NSTAGES];
        for (s, p) in p99_ns.iter_mut().enumerate() {
            *p = hist_percentile(&d.stage_hist[s], 99.0, d.stage_max_ns[s]);
        }
        let s = RX_DRIVER_TO_FREE;
        let mean_lifetime_ns = (d.dir == Dir::Rx && d.stage_count[s] > 0)
            .then(|| d.stage_sum_ns[s] as f64 / d.stage_count[s] as f64);
        let bytes_per_s = per_s(d.bytes);
        QueueView {
            dir: d.dir,
            queue: d.queue,
            packets_per_s: per_s(d.packets),
            mbit_per_s: bytes_per_s * 8.0 / 1e6,
            napi_polls: d.napi_polls,
            napi_avg_batch: (d.napi_polls > 0).then(|| d.napi_work as f64 / d.napi_polls as f64),
            napi_budget_exhausted: d.napi_budget_exhausted,
            drops: d.drops,
            p99_ns,
            mean_lifetime_ns,
            inflight_bytes: mean_lifetime_ns.map(|ns| bytes_per_s * ns / 1e9),
        }
    }
}

/// Views of a snapshot's queues, RX first, each direction by queue.
pub fn queue_views(queues: &[QueueCounters], dur_ns: u64) -> Vec<QueueView> {
    let dur_s = dur_ns as f64 / 1e9;
    let mut v: Vec<QueueView> = queues
        .iter()
        .map(|q| QueueView::from_delta(q, dur_s))
        .collect();
    v.sort_by_key(|q| (q.dir, q.queue));
    v
}

/// One flow's bytes and packets over an interval.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRate {
    pub flow: FlowCounters,
    pub bytes_per_s: f64,
    pub packets_per_s: f64,
}

/// Turns the cumulative flow totals into per-interval rates.
#[derive(Debug, Default)]
pub struct FlowRates {
    prev: super::estimates::Increases<FlowKey, 2>,
}

impl FlowRates {
    /// Rates since the previous call, busiest first. The totals are estimates: only what
    /// passes a flow's highest total counts, and a later first sighting (the kernel's table
    /// let the flow go and it came back) counts from zero ([`super::estimates`]).
    pub fn update(&mut self, flows: &[FlowCounters], dur_ns: u64) -> Vec<FlowRate> {
        let dur_s = dur_ns as f64 / 1e9;
        let deltas = self.prev.read(
            flows
                .iter()
                .map(|f| (f.key.clone(), f.first_ns, [f.bytes, f.packets])),
        );
        let mut out: Vec<FlowRate> = flows
            .iter()
            .zip(deltas)
            .filter(|(_, (_, d))| d[0] > 0 && dur_s > 0.0)
            .map(|(f, (_, d))| FlowRate {
                flow: f.clone(),
                bytes_per_s: d[0] as f64 / dur_s,
                packets_per_s: d[1] as f64 / dur_s,
            })
            .collect();
        out.sort_by(|a, b| b.bytes_per_s.total_cmp(&a.bytes_per_s));
        out
    }
}

pub use crate::units::{fmt_bytes, fmt_ns};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::CacheInfo;

    #[test]
    fn littles_law_and_capacity() {
        let mut d = QueueCounters::new(Dir::Rx, 2);
        d.packets = 1000;
        d.bytes = 1_500_000; // 1.5 MB in 0.5 s = 3 MB/s = 24 Mbit/s
        d.napi_polls = 10;
        d.napi_work = 640;
        d.stage_count[RX_DRIVER_TO_FREE] = 1000;
        d.stage_sum_ns[RX_DRIVER_TO_FREE] = 1000 * 20_000; // 20 µs mean
        d.stage_hist[RX_DRIVER_TO_FREE][14] = 1000; // [16384, 32768) ns
        let v = QueueView::from_delta(&d, 0.5);
        assert_eq!(v.packets_per_s, 2000.0);
        assert!((v.mbit_per_s - 24.0).abs() < 1e-9);
        assert_eq!(v.napi_avg_batch, Some(64.0));
        // 3e6 B/s × 20e-6 s = 60 B in flight.
        assert!((v.inflight_bytes.unwrap() - 60.0).abs() < 1e-9);
        assert!(v.p99_ns[RX_DRIVER_TO_FREE].unwrap() >= 16384);

        let mut host = HostInfo::default();
        assert_eq!(ddio_capacity_bytes(&host), None);
        host.llc = Some(CacheInfo {
            level: 3,
            size_bytes: 11 * 1024 * 1024,
            ways: 11,
            ..Default::default()
        });
        assert_eq!(ddio_capacity_bytes(&host), Some(2 * 1024 * 1024));
    }

    #[test]
    fn flow_rates_are_deltas_busiest_first() {
        let key = |sport| FlowKey {
            dir: Dir::Rx,
            proto: "tcp".into(),
            src: "a".into(),
            sport,
            dst: "b".into(),
            dport: 1,
        };
        let f = |sport, bytes| FlowCounters {
            key: key(sport),
            queue: 0,
            packets: bytes / 100,
            bytes,
            payload_bytes: 0,
            first_ns: 0,
            last_ns: 0,
            samples: None,
            bytes_var: None,
            source: None,
        };
        let mut r = FlowRates::default();
        let first = r.update(&[f(1, 1000), f(2, 5000)], 1_000_000_000);
        assert_eq!(
            first.iter().map(|x| x.flow.key.sport).collect::<Vec<_>>(),
            vec![2, 1]
        );
        let second = r.update(&[f(1, 9000), f(2, 5000)], 1_000_000_000);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].bytes_per_s, 8000.0);
        // Left out, then back with its total carried on; revised down: nothing new twice.
        assert!(r.update(&[f(2, 5000)], 1_000_000_000).is_empty());
        let back = r.update(&[f(1, 9500), f(2, 4000)], 1_000_000_000);
        assert_eq!(
            back.iter()
                .map(|x| (x.flow.key.sport, x.bytes_per_s))
                .collect::<Vec<_>>(),
            vec![(1, 500.0)]
        );
        // A later first sighting is a new entry.
        let again = r.update(
            &[FlowCounters {
                first_ns: 7,
                ..f(1, 300)
            }],
            1_000_000_000,
        );
        assert_eq!(again[0].bytes_per_s, 300.0);
    }
}
