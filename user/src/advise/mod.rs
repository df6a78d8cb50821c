//! Recommendations: ring sizes, IIO LLC ways, load spreading, NUMA/IRQ placement, DDIO write-allocation and buffer-reuse findings, each with evidence, a printed (never executed) command and the simulator's predicted effect; plus the model's per-queue view for the report.

use serde::{Deserialize, Serialize};

use crate::model::analytic::{self, Dir, QueueLoad, SocketAnalytic, Verdict, DESC_BYTES_PER_PKT};
use crate::model::buffers::Driver;
use crate::model::geometry::{ways_to_mask, LlcGeometry, WaysSource};
use crate::model::spec::{Consumer, Reuse, SimSpec, StackInputs};

mod run;
mod socket_buffer;
#[cfg(test)]
mod tests;

pub use run::{CalibrationReport, ModelRun};

/// Smallest ring we recommend: one NAPI budget (64 packets) must fit; most drivers
/// accept 64 (ixgbe, i40e, ice, mlx5).
pub const MIN_RING: u32 = 64;
/// Largest ring drivers accept (mlx5 8192, ice 8160, i40e 4096); we stop searching here.
pub const MAX_RING: u32 = 8192;
/// A ring must hold this multiple of the observed peak in-flight packets: one NAPI batch
/// is being processed while the next burst lands.
pub const BURST_HEADROOM: f64 = 2.0;
/// Fraction of NAPI polls that exhaust their budget above which the core is backlogged
/// and the ring is acting as a queue, not a handoff.
pub const BUDGET_EXHAUSTED_FRACTION: f64 = 0.10;
/// Busiest/mean queue byte rate at which load imbalance counts as a cause.
pub const IMBALANCE_RATIO: f64 = 2.0;
/// Write-miss % from counters regarded as significant.
pub const SIGNIFICANT_WRITE_MISS_PCT: f64 = 20.0;
/// Read-miss % below which CPU-side reads count as "warm".
pub const WARM_READ_MISS_PCT: f64 = 5.0;
/// Cap on packets simulated per prediction, to keep advice fast on 48-queue hosts.
pub const PREDICTION_MAX_PACKETS: u64 = 1_200_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueObservation {
    pub dir: Dir,
    pub queue: u32,
    pub ring_entries: Option<u32>,
    pub pkts_per_s: f64,
    pub bytes_per_s: f64,
    pub avg_pkt_bytes: f64,
    pub residence_ns_p50: Option<f64>,
    pub residence_ns_p99: Option<f64>,
    pub napi_polls: u64,
    pub napi_budget_exhausted: u64,
    pub peak_inflight_pkts: Option<u64>,
    pub drops: u64,
    /// What the NIC's own counters say it dropped for want of descriptors or buffers (None:
    /// the driver keeps no such counter, or the recording predates them).
    #[serde(default)]
    pub nic_ring_drops: Option<NicRingDrops>,
    /// Timed frames by size (`crate::snapshot::SIZE_BUCKETS`); empty: not measured.
    #[serde(default)]
    pub size_hist: Vec<u64>,
    /// The receive queues of the local sockets this queue's flows end in, where measured.
    #[serde(default)]
    pub socket: Option<SocketQueueObs>,
}

/// The NIC's ring-full / no-buffer drops that bear on one queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicRingDrops {
    pub count: u64,
    /// The counters summed, as the driver names them.
    pub counters: Vec<String>,
    /// True: the counters are this queue's own; false: the device's, not tied to a queue.
    pub per_queue: bool,
}

/// The sockets a queue's flows end in, together: what their receive queues held and how
/// fast the applications read them (sock_diag, sampled with the flows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketQueueObs {
    pub sockets: u32,
    /// Payload queued, the sockets' means summed.
    pub queued_bytes: f64,
    /// Memory (truesize) their queued buffers held, the means summed.
    pub rmem_bytes: f64,
    /// The largest receive buffer among them.
    pub rcvbuf_max: u64,
    /// Payload the applications read per second, summed.
    pub drain_bytes_per_s: f64,
}

impl SocketQueueObs {
    /// Time a byte waits in them before the copy (Little's law: queued / drain rate).
    pub fn residence_ns(&self) -> Option<f64> {
        (self.drain_bytes_per_s > 0.0).then(|| self.queued_bytes / self.drain_bytes_per_s * 1e9)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterEvidence {
    pub write_miss_pct: Option<f64>,
    pub read_miss_pct: Option<f64>,
    pub write_allocation_disabled: bool,
    /// "live" or "imported".
    pub source: String,
    /// DRAM traffic the memory controllers counted (IMC CAS), all sources, MB/s.
    #[serde(default)]
    pub dram_read_mbps: Option<f64>,
    #[serde(default)]
    pub dram_write_mbps: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostObservation {
    pub iface: String,
    pub geometry: LlcGeometry,
    pub nic_numa_node: Option<i32>,
    /// (queue, NUMA node of the CPU handling its IRQ/NAPI).
    pub queue_cpus_numa: Vec<(u32, Option<i32>)>,
    /// (queue, IRQ number), when known, for affinity commands.
    #[serde(default)]
    pub queue_irqs: Vec<(u32, u32)>,
    /// (node, cpulist as in /sys/devices/system/node/nodeN/cpulist).
    #[serde(default)]
    pub node_cpulists: Vec<(i32, String)>,
    /// PCI address of the NIC's root port, for the DDIO allocation check command.
    #[serde(default)]
    pub root_port: Option<String>,
    /// What consumes received packets; None = kernel stack copying to sockets.
    #[serde(default)]
    pub consumer: Option<Consumer>,
    pub queues: Vec<QueueObservation>,
    pub counters: Option<CounterEvidence>,
    /// The kernel's buffer recycling as measured (page_pool statistics); None: not measured.
    #[serde(default)]
    pub stack: Option<StackInputs>,
    /// The NIC's driver (`ethtool -i`), whose buffer rules the model takes.
    #[serde(default)]
    pub driver: Option<String>,
    /// The interface MTU.
    #[serde(default)]
    pub mtu: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// ring_size | iio_llc_ways | spread_load | steer_flow | numa_placement |
    /// ddio_write_allocation_disabled | buffer_reuse | socket_buffer
    pub kind: String,
    pub target: String,
    /// Printed for the operator; ddioscope never runs it.
    pub command: String,
    pub evidence: Vec<String>,
    /// Which simulated metric the predictions refer to (e.g. "io_write_hit_pct").
    pub predicted_metric: Option<String>,
    pub predicted_before: Option<f64>,
    pub predicted_after: Option<f64>,
}

/// The model's per-queue view for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueModel {
    pub dir: Dir,
    pub queue: u32,
    pub footprint_bytes: u64,
    pub inflight_bytes: f64,
    pub predicted_write_hit_pct: Option<f64>,
    pub predicted_read_hit_pct: Option<f64>,
    /// LLC miss % of the copy's reads (kernel stack; None when forwarding).
    #[serde(default)]
    pub predicted_cpu_read_miss_pct: Option<f64>,
    /// DRAM traffic this queue's packets cause, GB/s.
    #[serde(default)]
    pub predicted_dram_read_gbps: Option<f64>,
    #[serde(default)]
    pub predicted_dram_write_gbps: Option<f64>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelView {
    pub ddio_capacity_bytes: u64,
    pub usable_ddio_bytes: u64,
    pub ddio_ways: u32,
    pub ddio_ways_source: WaysSource,
    pub socket: SocketAnalytic,
    pub queues: Vec<QueueModel>,
    /// The socket's totals: the copy's read miss %, the DRAM traffic the network causes.
    #[serde(default)]
    pub predicted_cpu_read_miss_pct: Option<f64>,
    #[serde(default)]
    pub predicted_dram_read_gbps: Option<f64>,
    #[serde(default)]
    pub predicted_dram_write_gbps: Option<f64>,
    /// What the memory controllers counted (all traffic, not the network's alone), GB/s.
    #[serde(default)]
    pub measured_dram_read_gbps: Option<f64>,
    #[serde(default)]
    pub measured_dram_write_gbps: Option<f64>,
}

/// Decide from CHA TOR counts whether inbound writes bypass the LLC: with allocation off
/// the CHA turns the former WBMTOI (write-back allocate) into CLFLUSH-style requests
/// (Intel DDIO PerfMon paper, Table 8).
pub fn write_allocation_disabled(io_clflush: u64, io_wbmtoi: u64) -> bool {
    io_clflush >= 1_000_000 && (io_wbmtoi as f64) < 0.01 * io_clflush as f64
}

fn rx_queues(obs: &HostObservation) -> Vec<&QueueObservation> {
    let mut v: Vec<&QueueObservation> = obs.queues.iter().filter(|q| q.dir == Dir::Rx).collect();
    v.sort_by_key(|q| q.queue);
    v
}

fn loads(obs: &HostObservation, ring_override: Option<u32>) -> Vec<QueueLoad> {
    let mut qs: Vec<&QueueObservation> = obs.queues.iter().collect();
    qs.sort_by_key(|q| (q.dir, q.queue));
    qs.iter()
        .map(|q| QueueLoad {
            dir: q.dir,
            queue: q.queue,
            ring_entries: ring_override.or(q.ring_entries).unwrap_or(1024),
            pkts_per_s: q.pkts_per_s,
            bytes_per_s: q.bytes_per_s,
            avg_pkt_bytes: q.avg_pkt_bytes,
            residence_ns: q.residence_ns_p50,
        })
        .collect()
}

fn mean_pkt(qs: &[&QueueObservation]) -> f64 {
    let pps: f64 = qs.iter().map(|q| q.pkts_per_s).sum();
    let bps: f64 = qs.iter().map(|q| q.bytes_per_s).sum();
    if pps > 0.0 {
        bps / pps
    } else {
        qs.iter()
            .map(|q| q.avg_pkt_bytes)
            .fold(0.0, f64::max)
            .max(64.0)
    }
}

/// A synthetic spec reproducing the observed RX load, for predictions.
pub fn spec_from_observation(
    obs: &HostObservation,
    ring: Option<u32>,
    ddio_ways: Option<u32>,
) -> Option<SimSpec> {
    let rx = rx_queues(obs);
    if rx.is_empty() {
        return None;
    }
    let pkt = mean_pkt(&rx).round().clamp(64.0, 9000.0) as u32;
    let cur = rx
        .iter()
        .filter_map(|q| q.ring_entries)
        .max()
        .unwrap_or(1024);
    let mut g = obs.geometry.clone();
    if let Some(w) = ddio_ways {
        g.ddio_ways = w.clamp(1, g.ways);
    }
    let mut s = SimSpec::new(g, rx.len() as u32, ring.unwrap_or(cur), pkt);
    // What the recording measured; the rest of the spec is a default or an assumption.
    s.measured = vec![
        "queues".into(),
        "pkt_bytes".into(),
        "pps".into(),
        "llc".into(),
    ];
    if ring.is_none() && rx.iter().any(|q| q.ring_entries.is_some()) {
        s.measured.push("ring".into());
    }
    if rx.iter().any(|q| q.residence_ns_p50.is_some()) {
        s.measured.push("residence_us".into());
    }
    if obs.consumer.is_some() {
        s.measured.push("consumer".into());
    }
    let pps: f64 = rx.iter().map(|q| q.pkts_per_s).sum();
    if pps > 0.0 {
        s.pps = pps;
        s.queue_weights = rx.iter().map(|q| q.pkts_per_s).collect();
    }
    s.consumer = obs.consumer.unwrap_or(Consumer::Copy);
    if s.consumer == Consumer::Copy {
        s.buf_stride = 2048;
        s.data_offset = 256;
        s.tx_delay_us = 0.0;
    }
    // The buffer layout by the driver's rules, at the interface's MTU (both measured when
    // the recording has them; the kernel's half pages when the driver has no rule).
    let driver = obs.driver.as_deref().and_then(Driver::from_name);
    s.mtu = obs.mtu;
    if obs.mtu.is_some() {
        s.measured.push("mtu".into());
    }
    if driver.is_some() {
        s.measured.push("driver".into());
    }
    // A forwarding host runs DPDK's mbufs, whatever the kernel driver.
    s.apply_layout(driver.filter(|_| s.consumer == Consumer::Copy));
    let mut res: Vec<f64> = rx
        .iter()
        .map(|q| q.residence_ns_p50.unwrap_or(2_000.0) / 1e3)
        .collect();
    if s.consumer == Consumer::Copy && rx.iter().any(|q| q.socket.is_some()) {
        // The sockets' receive queues, measured: the model adds their wait (Little's law)
        // to the stack's, so the sampled lives (which end at the copy) lose it here.
        s.queue_socket_bytes = rx
            .iter()
            .map(|q| q.socket.as_ref().map_or(0.0, |o| o.queued_bytes))
            .collect();
        s.measured.push("socket_queue_bytes".into());
        for (r, q) in res.iter_mut().zip(&rx) {
            if let (Some(o), Some(_)) = (q.socket.as_ref(), q.residence_ns_p50) {
                *r = (*r - o.residence_ns().unwrap_or(0.0) / 1e3).max(0.0);
            }
        }
    }
    s.residence_us = median(&res);
    s.queue_residence_us = res;
    s.reuse = Reuse::Recycle;
    // The driver's page_pool, where the kernel counted it: how often a buffer comes back
    // warm from the cache, from the recycle ring, or fresh from the page allocator.
    s.stack = obs.stack.clone().filter(|st| st.has_shares());
    // Enough spare buffers for everything in flight (Little's law or the observed peak),
    // so the simulation does not drop what the host actually carried.
    let inflight = rx
        .iter()
        .map(|q| {
            let little = q.pkts_per_s * q.residence_ns_p50.unwrap_or(0.0) / 1e9;
            little.max(q.peak_inflight_pkts.unwrap_or(0) as f64)
        })
        .fold(0.0f64, f64::max);
    // And for what the sockets hold until the copy (a page_pool takes fresh pages for them).
    let held = s.socket_held_pkts().into_iter().fold(inflight, f64::max);
    s.pool_extra = ((held * 1.25).ceil() as u32).clamp(256, 1 << 20);
    // Sample slices on big LLCs: the hit-rate estimate stays unbiased and the run short.
    if let Some(sl) = s.geometry.slices {
        s.slice_sample = (sl / 16).max(1);
    }
    s.max_packets = PREDICTION_MAX_PACKETS;
    s.measure_cycles = 2.0;
    s.warmup_cycles = 2.0;
    Some(s)
}

/// Name of the read-side metric `predict` returns for this consumer.
fn read_metric(obs: &HostObservation) -> &'static str {
    match obs.consumer.unwrap_or(Consumer::Copy) {
        Consumer::Copy => "cpu_read_hit_pct",
        Consumer::Forward => "io_read_hit_pct (NIC TX reads of forwarded packets)",
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// (write hit %, read hit %) of one prediction, rounded as printed.
type Prediction = (Option<f64>, Option<f64>);

fn prediction(run: &ModelRun, ring: Option<u32>, ways: Option<u32>) -> Option<Prediction> {
    let r = run.result(ring, ways)?;
    Some((
        r.total.io_write_hit_pct().map(round1),
        run.read_hit_pct(&r).map(round1),
    ))
}

/// The model's per-queue view and the socket's DDIO capacity.
pub fn model_view(obs: &HostObservation, run: &ModelRun) -> ModelView {
    let ls = loads(obs, None);
    let sock = analytic::analyse_socket(&obs.geometry, &ls);
    let (per_q, tx_read) = match (run.result(None, None), run.spec()) {
        (Some(r), Some(s)) => {
            let tx = if s.consumer == Consumer::Forward {
                r.total.io_read_hit_pct()
            } else {
                None
            };
            (Some((r, s.consumer)), tx)
        }
        _ => (None, None),
    };
    let rx = rx_queues(obs);
    let queues = sock
        .queues
        .iter()
        .map(|qa| {
            let mut extra = (None, None, None);
            let (w, rd) = match (&per_q, qa.dir) {
                (Some((r, c)), Dir::Rx) => {
                    let idx = rx.iter().position(|q| q.queue == qa.queue);
                    let st = idx.and_then(|i| r.per_queue.get(i));
                    if let Some(s) = st {
                        let d = r.dram(s);
                        extra = (
                            s.cpu_read_miss_pct()
                                .filter(|_| *c == Consumer::Copy)
                                .map(round1),
                            d.map(|d| round2(d.read_gbps)),
                            d.map(|d| round2(d.write_gbps)),
                        );
                    }
                    let rd = st.and_then(|s| {
                        if *c == Consumer::Copy {
                            s.cpu_read_hit_pct()
                        } else {
                            s.io_read_hit_pct()
                        }
                    });
                    (
                        st.and_then(|s| s.io_write_hit_pct()).map(round1),
                        rd.map(round1),
                    )
                }
                (_, Dir::Tx) => (None, tx_read.map(round1)),
                _ => (None, None),
            };
            QueueModel {
                dir: qa.dir,
                queue: qa.queue,
                footprint_bytes: qa.footprint_bytes,
                inflight_bytes: qa.inflight_bytes,
                predicted_write_hit_pct: w,
                predicted_read_hit_pct: rd,
                predicted_cpu_read_miss_pct: extra.0,
                predicted_dram_read_gbps: extra.1,
                predicted_dram_write_gbps: extra.2,
                verdict: qa.verdict,
            }
        })
        .collect();
    let (miss, dr, dw) = match &per_q {
        Some((r, c)) => {
            let d = r.dram(&r.total);
            (
                r.total
                    .cpu_read_miss_pct()
                    .filter(|_| *c == Consumer::Copy)
                    .map(round1),
                d.map(|d| round2(d.read_gbps)),
                d.map(|d| round2(d.write_gbps)),
            )
        }
        None => (None, None, None),
    };
    let imc = obs.counters.as_ref();
    ModelView {
        ddio_capacity_bytes: obs.geometry.ddio_capacity_bytes(),
        usable_ddio_bytes: obs.geometry.usable_ddio_bytes(),
        ddio_ways: obs.geometry.ddio_ways,
        ddio_ways_source: obs.geometry.ddio_ways_source,
        socket: sock,
        queues,
        predicted_cpu_read_miss_pct: miss,
        predicted_dram_read_gbps: dr,
        predicted_dram_write_gbps: dw,
        measured_dram_read_gbps: imc.and_then(|c| c.dram_read_mbps).map(|m| round2(m / 1e3)),
        measured_dram_write_gbps: imc.and_then(|c| c.dram_write_mbps).map(|m| round2(m / 1e3)),
    }
}

/// A queue's frame-size mix in words, "62% ≤ 128 B, 38% 1025–2048 B" (buckets of 5% or more;
/// None: no frames sized).
fn size_mix(hist: &[u64]) -> Option<String> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let parts: Vec<String> = hist
        .iter()
        .enumerate()
        .filter(|(_, n)| **n * 20 >= total)
        .map(|(b, n)| {
            let pct = 100.0 * *n as f64 / total as f64;
            let range = match (b, crate::snapshot::size_bucket_max(b)) {
                (0, _) => "≤ 64 B".to_string(),
                (_, Some(hi)) => format!("{}–{hi} B", hi / 2 + 1),
                (_, None) => format!("> {} B", 1u32 << (b + 5)),
            };
            format!("{pct:.0}% {range}")
        })
        .collect();
    Some(format!("{} ({total} timed frames)", parts.join(", ")))
}

/// Ring entries a queue needs to absorb what was observed on it.
fn burst_floor(q: &QueueObservation) -> (u32, Vec<String>) {
    let mut need = MIN_RING as f64;
    let mut why = Vec::new();
    if let Some(p) = q.peak_inflight_pkts {
        need = need.max(p as f64 * BURST_HEADROOM);
        why.push(format!("rx{}: peak {} packets in flight", q.queue, p));
    }
    if let Some(r99) = q.residence_ns_p99 {
        // Little's law at the tail: packets that arrive while one waits its p99 residence.
        let inflight = q.pkts_per_s * r99 / 1e9;
        need = need.max(inflight * BURST_HEADROOM);
    }
    let cur = q.ring_entries.unwrap_or(0);
    let exhausted = q.napi_polls > 0
        && q.napi_budget_exhausted as f64 / q.napi_polls as f64 >= BUDGET_EXHAUSTED_FRACTION;
    if exhausted && q.peak_inflight_pkts.is_none() {
        // Backlogged with no measured depth: do not shrink below what it has now.
        need = need.max(cur as f64);
        why.push(format!(
            "rx{}: {} of {} NAPI polls exhausted the budget (backlog, keeping ring)",
            q.queue, q.napi_budget_exhausted, q.napi_polls
        ));
    }
    if q.drops > 0 && cur > 0 {
        // Drops mean the ring overflowed: never shrink it, grow it one step.
        need = need.max(cur as f64 * 2.0);
        why.push(format!("rx{}: {} drops at ring {}", q.queue, q.drops, cur));
    }
    if let Some(n) = &q.nic_ring_drops {
        let whose = if n.per_queue {
            "its own"
        } else {
            "the device's, queue unknown"
        };
        if n.count > 0 && cur > 0 {
            // The NIC found no free descriptor: a smaller ring would drop more, so never
            // shrink; grow one step.
            need = need.max(cur as f64 * 2.0);
            why.push(format!(
                "rx{}: the NIC dropped {} packets for want of descriptors or buffers at ring {cur} ({}, {whose}): not shrinking",
                q.queue,
                n.count,
                n.counters.join(" + ")
            ));
        } else if n.count == 0 {
            why.push(format!(
                "rx{}: no NIC ring-full drops at ring {cur} ({}, {whose})",
                q.queue,
                n.counters.join(" + ")
            ));
        }
    }
    if let Some(mix) = size_mix(&q.size_hist) {
        why.push(format!("rx{}: frame sizes {mix}", q.queue));
    }
    let r = (need.ceil() as u32)
        .next_power_of_two()
        .clamp(MIN_RING, MAX_RING);
    (r, why)
}

/// Recommendations for one host observation. Deterministic: same input, same output.
pub fn recommend(obs: &HostObservation, run: &ModelRun) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let g = &obs.geometry;
    let rx = rx_queues(obs);
    let counters = obs.counters.as_ref();

    // 1. Write allocation disabled: nothing else about DDIO applies until it is on.
    if let Some(c) = counters.filter(|c| c.write_allocation_disabled) {
        let rp = obs
            .root_port
            .clone()
            .unwrap_or_else(|| "<root-port-BDF>".into());
        out.push(Recommendation {
            kind: "ddio_write_allocation_disabled".into(),
            target: obs.iface.clone(),
            command: format!(
                "setpci -s {rp} 0x180.l   # PERFCTRLSTS_0: bit 7 Use_Allocating_Flow_Wr must be 1 for DDIO write allocation (enable in BIOS or by setting the bit)"
            ),
            evidence: vec![format!(
                "{} counters: inbound writes are non-allocating (IO_CLFLUSH replaces IO_WBMTOI); DDIO write allocation is disabled on this port, every DMA write goes to DRAM",
                c.source
            )],
            predicted_metric: None,
            predicted_before: None,
            predicted_after: None,
        });
        return out;
    }

    // 2. NUMA placement.
    let mut numa_mismatch = false;
    if let Some(nic) = obs.nic_numa_node {
        let mut bad: Vec<(u32, i32)> = obs
            .queue_cpus_numa
            .iter()
            .filter_map(|(q, n)| n.filter(|n| *n != nic).map(|n| (*q, n)))
            .collect();
        bad.sort();
        bad.dedup();
        if !bad.is_empty() {
            numa_mismatch = true;
            let cpus = obs
                .node_cpulists
                .iter()
                .find(|(n, _)| *n == nic)
                .map(|(_, c)| c.clone());
            let cpus_s = cpus
                .clone()
                .unwrap_or_else(|| format!("<cpus of node {nic}>"));
            let mut cmds: Vec<String> = Vec::new();
            for (q, _) in &bad {
                match obs.queue_irqs.iter().find(|(qq, _)| qq == q) {
                    Some((_, irq)) => cmds.push(format!("echo {cpus_s} > /proc/irq/{irq}/smp_affinity_list")),
                    None => cmds.push(format!("# queue {q}: echo {cpus_s} > /proc/irq/<irq of queue {q}>/smp_affinity_list")),
                }
            }
            cmds.push(format!(
                "numactl --cpunodebind={nic} --membind={nic} <application>"
            ));
            let mut ev = vec![format!(
                "{} is on NUMA node {nic}; queues {} are processed on node(s) {}: DDIO places packets in node {nic}'s LLC, so the processing cores read them across the socket link",
                obs.iface,
                bad.iter().map(|(q, _)| q.to_string()).collect::<Vec<_>>().join(","),
                {
                    let mut ns: Vec<i32> = bad.iter().map(|b| b.1).collect();
                    ns.sort();
                    ns.dedup();
                    ns.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
                }
            )];
            if let Some(c) = counters {
                if let (Some(w), Some(r)) = (c.write_miss_pct, c.read_miss_pct) {
                    ev.push(format!(
                        "{} counters: inbound write miss {w:.0}%, read miss {r:.0}%",
                        c.source
                    ));
                }
            }
            let after = prediction(run, None, None).and_then(|p| p.1);
            out.push(Recommendation {
                kind: "numa_placement".into(),
                target: format!("{} (NUMA node {nic})", obs.iface),
                command: cmds.join("\n"),
                evidence: ev,
                predicted_metric: Some(
                    "cpu_read_hit_pct (LLC hits of the processing cores)".into(),
                ),
                // Remote cores never find the packets in their own LLC.
                predicted_before: Some(0.0),
                predicted_after: after,
            });
        }
    }

    if rx.is_empty() {
        return out;
    }

    // 3. Ring size / IIO LLC ways.
    let cur_ring = rx.iter().filter_map(|q| q.ring_entries).max();
    let pkt = mean_pkt(&rx).round().max(64.0) as u32;
    let nq = rx.len() as u32;
    let mut floors: Vec<(u32, u32)> = Vec::new();
    let mut burst_ev = Vec::new();
    for q in &rx {
        let (f, why) = burst_floor(q);
        floors.push((q.queue, f));
        burst_ev.extend(why);
    }
    let need_ring = floors.iter().map(|f| f.1).max().unwrap_or(MIN_RING);
    // The socket's RX footprint as the per-queue view computes it (each queue's own packet size).
    let fp = |r: u32| analytic::analyse_socket(g, &loads(obs, Some(r))).rx_footprint_bytes;
    let usable = g.usable_ddio_bytes();
    let cur_fp = cur_ring.map(fp);
    let over = cur_fp.is_some_and(|f| f > usable);
    let measured_misses = counters
        .and_then(|c| c.write_miss_pct)
        .is_some_and(|w| w >= SIGNIFICANT_WRITE_MISS_PCT);
    let mib = |b: u64| b as f64 / 1048576.0;
    let fits_ring = analytic::max_ring_within_usable(g, nq, pkt, MIN_RING);
    let mut ev_ring = vec![format!(
        "{nq} RX queues x {} descriptors x {} B lines (+{} B descriptor) = {:.1} MiB working set vs DDIO {:.2} MiB nominal ({} of {} ways, {}) / {:.2} MiB usable",
        cur_ring.map_or("?".into(), |r| r.to_string()),
        analytic::line_rounded(pkt),
        DESC_BYTES_PER_PKT,
        mib(cur_fp.unwrap_or(0)),
        mib(g.ddio_capacity_bytes()),
        g.ddio_ways,
        g.ways,
        // As the JSON spells it.
        match g.ddio_ways_source {
            crate::model::geometry::WaysSource::Measured => "measured",
            crate::model::geometry::WaysSource::Assumed => "assumed",
            crate::model::geometry::WaysSource::Override => "override",
        },
        mib(usable)
    )];
    if let Some(c) = counters {
        if let Some(w) = c.write_miss_pct {
            ev_ring.push(format!(
                "{} counters: {w:.0}% of inbound full-line writes miss the LLC",
                c.source
            ));
        }
    }
    ev_ring.extend(burst_ev.iter().cloned());
    let ring_fits = fp(need_ring) <= usable;
    // The smallest ring that absorbs the observed bursts leaves the most DDIO room.
    let target_ring = need_ring;
    // Shrinking only helps when the current rings overflow usable capacity; misses with a
    // ring that fits have another cause (reuse, placement, allocation).
    let shrink = cur_ring.is_some_and(|c| target_ring < c) && over;
    let grow = cur_ring.is_some_and(|c| target_ring > c);
    if ring_fits && (shrink || grow) {
        let (b, a) = match (
            prediction(run, None, None),
            prediction(run, Some(target_ring), None),
        ) {
            (Some(b), Some(a)) => (b.0, a.0),
            _ => (None, None),
        };
        ev_ring.push(format!(
            "ring {target_ring}: {:.2} MiB working set, within usable DDIO capacity, and ≥ {BURST_HEADROOM}x observed bursts",
            mib(fp(target_ring))
        ));
        out.push(Recommendation {
            kind: "ring_size".into(),
            target: obs.iface.clone(),
            command: format!("ethtool -G {} rx {target_ring}", obs.iface),
            evidence: ev_ring.clone(),
            predicted_metric: Some("io_write_hit_pct".into()),
            predicted_before: b,
            predicted_after: a,
        });
    } else if !ring_fits && (over || measured_misses) {
        // No ring both absorbs bursts and fits: shrink to the burst floor anyway (it is the
        // best a ring can do) and widen DDIO so that floor fits.
        let ways_needed = (1..=g.ways).find(|w| {
            let mut gg = g.clone();
            gg.ddio_ways = *w;
            fp(need_ring) <= gg.usable_ddio_bytes()
        });
        let shrink_to = cur_ring.filter(|c| need_ring < *c).map(|_| need_ring);
        if let Some(r) = shrink_to {
            let (b, a) = match (prediction(run, None, None), prediction(run, Some(r), None)) {
                (Some(b), Some(a)) => (b.0, a.0),
                _ => (None, None),
            };
            let mut ev = ev_ring.clone();
            ev.push(format!(
                "no ring both absorbs the observed bursts (needs {need_ring}) and fits usable DDIO capacity{}; {need_ring} is the smallest safe ring",
                fits_ring.map_or(String::new(), |f| format!(" (≤ {f})"))
            ));
            out.push(Recommendation {
                kind: "ring_size".into(),
                target: obs.iface.clone(),
                command: format!("ethtool -G {} rx {r}", obs.iface),
                evidence: ev,
                predicted_metric: Some("io_write_hit_pct".into()),
                predicted_before: b,
                predicted_after: a,
            });
        }
        // Keep at least one way for the cores: DDIO may not take the whole LLC.
        match ways_needed.filter(|w| *w < g.ways) {
            Some(w) if w > g.ddio_ways => {
                let mask = ways_to_mask(w, g.ways).unwrap_or(0);
                let mut gg = g.clone();
                gg.ddio_ways = w;
                let (b, a) = match (
                    prediction(run, Some(need_ring), None),
                    prediction(run, Some(need_ring), Some(w)),
                ) {
                    (Some(b), Some(a)) => (b.0, a.0),
                    _ => (None, None),
                };
                let mut ev = ev_ring.clone();
                ev.push(format!(
                    "{w} DDIO ways ({:.2} MiB usable) hold {nq} rings of {need_ring}: {:.2} MiB; costs the cores {} of {} LLC ways for I/O",
                    mib(gg.usable_ddio_bytes()),
                    mib(fp(need_ring)),
                    w,
                    g.ways
                ));
                out.push(Recommendation {
                    kind: "iio_llc_ways".into(),
                    target: "IIO LLC WAYS (MSR 0xC8B, every socket)".into(),
                    command: format!("wrmsr -a 0xc8b {mask:#x}"),
                    evidence: ev,
                    predicted_metric: Some("io_write_hit_pct".into()),
                    predicted_before: b,
                    predicted_after: a,
                });
            }
            _ => {
                let mut ev = ev_ring.clone();
                ev.push(format!(
                    "even {} DDIO ways cannot hold {nq} rings of {need_ring}: spread the queues over more sockets/NICs or reduce queues",
                    g.ways - 1
                ));
                out.push(Recommendation {
                    kind: "spread_load".into(),
                    target: obs.iface.clone(),
                    command: format!(
                        "ethtool -L {} combined <fewer queues per socket>",
                        obs.iface
                    ),
                    evidence: ev,
                    predicted_metric: None,
                    predicted_before: None,
                    predicted_after: None,
                });
            }
        }
    }

    // 4. Load imbalance.
    let total_bps: f64 = rx.iter().map(|q| q.bytes_per_s).sum();
    if rx.len() > 1 && total_bps > 0.0 {
        let mean = total_bps / rx.len() as f64;
        let hot = rx.iter().copied().fold(
            rx[0],
            |a, b| if b.bytes_per_s > a.bytes_per_s { b } else { a },
        );
        let hot_exhausted = hot.napi_polls > 0
            && hot.napi_budget_exhausted as f64 / hot.napi_polls as f64
                >= BUDGET_EXHAUSTED_FRACTION;
        let hot_slow = match (
            hot.residence_ns_p50,
            median(
                &rx.iter()
                    .filter_map(|q| q.residence_ns_p50)
                    .collect::<Vec<_>>(),
            ),
        ) {
            (Some(h), m) if m > 0.0 => h > 2.0 * m,
            _ => false,
        };
        if hot.bytes_per_s >= IMBALANCE_RATIO * mean && (hot_exhausted || hot_slow || hot.drops > 0)
        {
            let before = prediction(run, None, None).and_then(|p| p.1);
            let mut even = obs.clone();
            let med = median(
                &rx.iter()
                    .filter_map(|q| q.residence_ns_p50)
                    .collect::<Vec<_>>(),
            );
            let pps: f64 = rx.iter().map(|q| q.pkts_per_s).sum::<f64>() / rx.len() as f64;
            for q in even.queues.iter_mut().filter(|q| q.dir == Dir::Rx) {
                q.pkts_per_s = pps;
                q.bytes_per_s = mean;
                if med > 0.0 {
                    q.residence_ns_p50 = Some(med);
                }
            }
            let after = run
                .for_observation(&even)
                .and_then(|r| run.read_hit_pct(&r))
                .map(round1);
            let mut evidence = vec![format!(
                "rx{} carries {:.1}x the mean queue load ({:.0} vs {:.0} MB/s){}{}",
                hot.queue,
                hot.bytes_per_s / mean,
                hot.bytes_per_s / 1e6,
                mean / 1e6,
                if hot_exhausted {
                    "; its NAPI polls exhaust the budget"
                } else {
                    ""
                },
                if hot_slow {
                    "; its packets wait over 2x the median residence"
                } else {
                    ""
                }
            )];
            if let (Some(b), Some(a)) = (before, after) {
                if a <= b {
                    evidence.push(format!(
                        "the DDIO model predicts no hit-rate gain ({b:.1} → {a:.1}): the case for it is the hot queue's backlog, not the cache"
                    ));
                }
            }
            out.push(Recommendation {
                kind: "spread_load".into(),
                target: format!("{} rx{}", obs.iface, hot.queue),
                command: format!("ethtool -X {} equal {}", obs.iface, rx.len()),
                evidence,
                predicted_metric: Some(read_metric(obs).into()),
                predicted_before: before,
                predicted_after: after,
            });
        }
    }

    // 5. Buffers not reused while warm: writes miss although reads hit and the ring fits.
    if let Some(c) = counters {
        if let (Some(w), Some(r)) = (c.write_miss_pct, c.read_miss_pct) {
            let ring_explains = over || !ring_fits;
            if !numa_mismatch
                && w >= SIGNIFICANT_WRITE_MISS_PCT
                && r <= WARM_READ_MISS_PCT
                && !ring_explains
            {
                let b = predict_with_reuse(run, Reuse::Fifo);
                let a = predict_with_reuse(run, Reuse::Recycle);
                out.push(Recommendation {
                    kind: "buffer_reuse".into(),
                    target: obs.iface.clone(),
                    command: "enable buffer recycling: DPDK mempool per-lcore cache (rte_pktmbuf_pool_create cache_size > 0, e.g. 256) or a smaller mbuf pool; kernel: keep page_pool recycling on (no XDP/skb paths that release pages)".into(),
                    evidence: vec![
                        format!("{} counters: {w:.0}% of inbound writes miss while {r:.0}% of inbound reads miss", c.source),
                        format!(
                            "the ring working set ({:.2} MiB) fits usable DDIO capacity ({:.2} MiB), so the misses come from buffers that are not reused while warm (FIFO reuse over a large pool)",
                            mib(cur_fp.unwrap_or(0)),
                            mib(usable)
                        ),
                    ],
                    predicted_metric: Some("io_write_hit_pct".into()),
                    predicted_before: b,
                    predicted_after: a,
                });
            }
        }
    }
    // 6. Socket receive buffers holding more than DDIO keeps until the copy.
    out.extend(socket_buffer::socket_buffer(obs, run));
    out
}

/// A flow the attribution charged, on the RX queue the probes saw it on, with its rates.
#[derive(Debug, Clone, PartialEq)]
pub struct AttributedFlow {
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    pub queue: u32,
    pub share_pct: f64,
    pub bytes_per_s: f64,
    pub pkts_per_s: f64,
}

/// A queue must carry this share of the attributed misses, and this many times its even
/// share, for its top flow to be worth moving.
const STEER_MIN_QUEUE_SHARE: f64 = 40.0;
const STEER_OVER_EVEN: f64 = 1.5;
/// The flow must carry this share of the attributed misses itself.
const STEER_MIN_FLOW_SHARE: f64 = 10.0;
/// And the model must predict at least this gain (hit-rate points) from moving it.
const STEER_MIN_GAIN: f64 = 1.0;

/// Steer the flow that matters off the queue that matters: when one RX queue carries most of
/// the attributed misses (`rx_shares`: (queue, share %)), move its top attributed flow to the RX
/// queue with the fewest, with an ntuple rule, if the model predicts a gain. `how`: the
/// attribution's method and confidence, for the evidence.
pub fn steer_flow(
    obs: &HostObservation,
    run: &ModelRun,
    rx_shares: &[(u32, f64)],
    flows: &[AttributedFlow],
    how: &str,
) -> Option<Recommendation> {
    let rx: Vec<&QueueObservation> = obs.queues.iter().filter(|q| q.dir == Dir::Rx).collect();
    if rx.len() < 2 {
        return None;
    }
    let share = |q: u32| rx_shares.iter().find(|s| s.0 == q).map_or(0.0, |s| s.1);
    let hot = rx
        .iter()
        .copied()
        .max_by(|a, b| share(a.queue).total_cmp(&share(b.queue)))?;
    let hot_share = share(hot.queue);
    if hot_share < STEER_MIN_QUEUE_SHARE || hot_share < STEER_OVER_EVEN * 100.0 / rx.len() as f64 {
        return None;
    }
    let cold = rx
        .iter()
        .copied()
        .filter(|q| q.queue != hot.queue)
        .min_by(|a, b| {
            share(a.queue)
                .total_cmp(&share(b.queue))
                .then(a.bytes_per_s.total_cmp(&b.bytes_per_s))
        })?;
    let flow = flows
        .iter()
        .filter(|f| f.queue == hot.queue && f.share_pct >= STEER_MIN_FLOW_SHARE)
        .max_by(|a, b| a.share_pct.total_cmp(&b.share_pct))?;
    let (_, before) = prediction(run, None, None)?;
    let mut moved = obs.clone();
    for q in moved.queues.iter_mut().filter(|q| q.dir == Dir::Rx) {
        let sign = if q.queue == hot.queue {
            -1.0
        } else if q.queue == cold.queue {
            1.0
        } else {
            continue;
        };
        q.pkts_per_s = (q.pkts_per_s + sign * flow.pkts_per_s).max(0.0);
        q.bytes_per_s = (q.bytes_per_s + sign * flow.bytes_per_s).max(0.0);
        if q.pkts_per_s > 0.0 {
            q.avg_pkt_bytes = q.bytes_per_s / q.pkts_per_s;
        }
    }
    let after = run
        .for_observation(&moved)
        .and_then(|r| run.read_hit_pct(&r))
        .map(round1);
    let (b, a) = (before?, after?);
    if a - b < STEER_MIN_GAIN {
        return None;
    }
    let v6 = flow.src.contains(':') || flow.dst.contains(':');
    let flow_type = format!("{}{}", flow.proto, if v6 { "6" } else { "4" });
    Some(Recommendation {
        kind: "steer_flow".into(),
        target: format!("{} rx{} {} {}:{} -> {}:{}", obs.iface, hot.queue, flow.proto, flow.src, flow.sport, flow.dst, flow.dport),
        command: format!(
            "ethtool -N {} flow-type {flow_type} src-ip {} dst-ip {} src-port {} dst-port {} action {}",
            obs.iface, flow.src, flow.dst, flow.sport, flow.dport, cold.queue
        ),
        evidence: vec![
            format!("rx{} carries {hot_share:.1}% of the attributed misses ({how})", hot.queue),
            format!(
                "its top flow {} {}:{} -> {}:{} carries {:.1}% ({:.0} MB/s)",
                flow.proto,
                flow.src,
                flow.sport,
                flow.dst,
                flow.dport,
                flow.share_pct,
                flow.bytes_per_s / 1e6
            ),
            format!("rx{} carries the fewest ({:.1}%)", cold.queue, share(cold.queue)),
        ],
        predicted_metric: Some(read_metric(obs).into()),
        predicted_before: Some(b),
        predicted_after: Some(a),
    })
}

/// Predicted write hit % when buffers come from a large FIFO pool vs recycled warm.
fn predict_with_reuse(run: &ModelRun, reuse: Reuse) -> Option<f64> {
    let r = run.variant(|s| {
        s.reuse = reuse;
        if reuse == Reuse::Fifo {
            // A pool without a per-core cache cycles through all its buffers. ASSUMPTION: the
            // pool is sized generously (as testpmd/DPDK apps do), taken as twice what the
            // DDIO ways can hold of these packets, and at least 8 rings.
            let per_buf = analytic::line_rounded(s.pkt_bytes) as u32;
            let pool = (2 * s.geometry.ddio_capacity_bytes() / per_buf as u64) as u32;
            s.pool_extra = s
                .pool_extra
                .max(8 * s.ring)
                .max(pool.saturating_sub(s.ring));
        }
    })?;
    r.total.io_write_hit_pct().map(round1)
}
