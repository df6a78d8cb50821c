//! Recommendations: ring sizes, IIO LLC ways, load spreading, flow steering, NUMA/IRQ placement, DDIO write-allocation and buffer-reuse findings, each a rule of its own with evidence, a printed (never executed) command that runs as pasted on the recorded device, and the simulator's predicted effect; plus the model's per-queue view and verdicts, the one computation every surface shows.

use serde::{Deserialize, Serialize};

use crate::model::analytic::{self, Dir, QueueLoad, SocketAnalytic};
use crate::model::buffers::Driver;
use crate::model::geometry::{LlcGeometry, WaysSource};
use crate::model::spec::{Consumer, Reuse, SimSpec, StackInputs};

mod attributed;
mod rules;
mod run;
mod socket_buffer;
#[cfg(test)]
mod tests;
mod verdict;

pub use crate::model::calibrate::BackgroundFit;
pub use attributed::{order_by_attributed_misses, steer_attributed_flow};
pub use rules::{recommend, steer_flow, AttributedFlow};
pub use run::{CalibrationReport, ModelRun, Spread};
pub use verdict::{queue_verdict, VerdictKind, MIN_PACKETS_FOR_VERDICT};

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
/// Ring entries assumed when the driver reports none.
pub const ASSUMED_RING: u32 = 1024;
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
    /// Every drop the kernel counted for the queue, whatever its reason.
    pub drops: u64,
    /// Of them, the drops that say something was full (estimated by the device's reasons).
    #[serde(default)]
    pub full_drops: FullDrops,
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
    /// Packets the queue carried in what was analysed: too few and it gets no verdict.
    #[serde(default)]
    pub packets: Option<u64>,
    /// The byte rate of the queue's largest flow, where flows were recorded: RSS moves
    /// whole flows, so it cannot spread a queue whose load is one flow.
    #[serde(default)]
    pub top_flow_bytes_per_s: Option<f64>,
}

/// A queue's drops that say something was full. The programs count drops per queue and
/// their reasons per device, so a queue's share is its drops in the device's proportion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FullDrops {
    /// Dropped with the driver's own ring full: a larger ring holds them.
    pub ring: u64,
    /// Dropped with the queue's processing behind (its ring or its CPU's backlog full): the
    /// queue's load outruns the CPU that takes it.
    pub backlog: u64,
    /// The kernel's names of the reasons counted, for the evidence.
    pub reasons: Vec<String>,
}

/// What a drop says was full: by the reason's name as the kernel gave it when recorded (the
/// numbers differ between kernels), and whether the stack had taken the packet in. Most
/// drops say nothing of room (no socket, a filter); a socket's full buffer is the socket
/// rule's.
pub fn full_drop(name: &str, before_stack: bool) -> Option<FullWhat> {
    match name {
        "FULL_RING" => Some(FullWhat::Ring),
        "CPU_BACKLOG" => Some(FullWhat::Backlog),
        // Before the stack a driver drops without a reason where its ring is full (veth
        // with no qdisc); in the stack it is a multicast frame nobody joined, and more.
        "NOT_SPECIFIED" if before_stack => Some(FullWhat::Ring),
        _ => None,
    }
}

/// What was full when a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullWhat {
    /// The driver's ring (tun's, for one).
    Ring,
    /// The CPU's backlog queue (`netdev_max_backlog`), where RPS or `netif_rx` put packets.
    Backlog,
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
    /// What the device lets a printed command do, and where the command must run.
    #[serde(default)]
    pub device: Device,
}

/// What the recorded device supports, so a printed command is one that runs on it as pasted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// The network namespace the device is in (None: the host's): device commands carry
    /// `ip netns exec NS`.
    pub netns: Option<String>,
    pub driver: Option<String>,
    /// RX queues configured, whether or not they carried traffic.
    pub rx_queues: u32,
    /// Entries of the RSS indirection table; None: the device has none (`ethtool -X`
    /// cannot run), or the recording predates the check.
    pub rss_table: Option<u32>,
    /// The largest RX ring the driver accepts; None: the ring cannot be read, so
    /// `ethtool -G` is not offered.
    pub rx_ring_max: Option<u32>,
    /// The recording host has no DDIO: commands that change DDIO itself (MSR 0xC8B) do not
    /// apply there, and every prediction is for the stand-in Intel LLC.
    pub no_ddio: bool,
}

impl Device {
    /// `cmd` as it runs on this device: inside its namespace when it has one.
    pub fn run(&self, cmd: &str) -> String {
        match &self.netns {
            Some(ns) => format!("ip netns exec {ns} {cmd}"),
            None => cmd.to_string(),
        }
    }
}

/// What a recommendation changes; serialised as the JSON has always spelt it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    RingSize,
    IioLlcWays,
    SpreadLoad,
    SteerFlow,
    NumaPlacement,
    DdioWriteAllocationDisabled,
    BufferReuse,
    SocketBuffer,
}

impl Kind {
    /// Every kind (a new one goes here too: the JSON schema's enum is tested against it).
    pub const ALL: [Kind; 8] = [
        Kind::RingSize,
        Kind::IioLlcWays,
        Kind::SpreadLoad,
        Kind::SteerFlow,
        Kind::NumaPlacement,
        Kind::DdioWriteAllocationDisabled,
        Kind::BufferReuse,
        Kind::SocketBuffer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::RingSize => "ring_size",
            Kind::IioLlcWays => "iio_llc_ways",
            Kind::SpreadLoad => "spread_load",
            Kind::SteerFlow => "steer_flow",
            Kind::NumaPlacement => "numa_placement",
            Kind::DdioWriteAllocationDisabled => "ddio_write_allocation_disabled",
            Kind::BufferReuse => "buffer_reuse",
            Kind::SocketBuffer => "socket_buffer",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub kind: Kind,
    pub target: String,
    /// Printed for the operator; ddioscope never runs it. Every line runs as pasted on the
    /// recorded device; empty when the change is not one command (the evidence says what).
    pub command: String,
    /// Why the change is offered when it is not for the cache (the model predicts no cache
    /// gain): said before anything else. None: it is offered for the cache.
    pub reason: Option<String>,
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
    pub verdict: VerdictKind,
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
    loads_of(&obs.queues, ring_override)
}

fn loads_of(queues: &[QueueObservation], ring_override: Option<u32>) -> Vec<QueueLoad> {
    let mut qs: Vec<&QueueObservation> = queues.iter().collect();
    qs.sort_by_key(|q| (q.dir, q.queue));
    qs.iter()
        .map(|q| QueueLoad {
            dir: q.dir,
            queue: q.queue,
            ring_entries: ring_override.or(q.ring_entries).unwrap_or(ASSUMED_RING),
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
        .unwrap_or(ASSUMED_RING);
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
        // The sampled life is measured directly; the socket's wait comes from a queue read
        // once a second, which can catch a burst. Where that wait is longer than the whole
        // measured life, the socket's share is cut to fit it: the queue the copy actually saw.
        for ((r, q), bytes) in res.iter_mut().zip(&rx).zip(s.queue_socket_bytes.iter_mut()) {
            if let (Some(o), Some(_)) = (q.socket.as_ref(), q.residence_ns_p50) {
                let socket_us = o.residence_ns().unwrap_or(0.0) / 1e3;
                if socket_us > *r && socket_us > 0.0 {
                    *bytes *= *r / socket_us;
                }
                *r = (*r - socket_us).max(0.0);
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

/// The socket's analysis and each queue's verdict, from the queues' loads alone: what
/// `serve` and `top` compute on every interval and `report` on a whole recording, so they
/// cannot disagree. `predicted`: the queues the simulator predicts a hit rate for.
pub fn socket_verdicts(
    g: &LlcGeometry,
    queues: &[QueueObservation],
    predicted: &[(Dir, u32)],
) -> (SocketAnalytic, Vec<(Dir, u32, VerdictKind)>) {
    let obs_q = |d: Dir, q: u32| queues.iter().find(|o| o.dir == d && o.queue == q);
    let sock = analytic::analyse_socket(g, &loads_of(queues, None));
    let v = sock
        .queues
        .iter()
        .map(|qa| {
            let o = obs_q(qa.dir, qa.queue);
            (
                qa.dir,
                qa.queue,
                queue_verdict(
                    qa.verdict,
                    qa.dir,
                    o.and_then(|o| o.packets),
                    o.is_some_and(|o| o.ring_entries.is_some()),
                    predicted.contains(&(qa.dir, qa.queue)),
                ),
            )
        })
        .collect();
    (sock, v)
}

/// The model's per-queue view and the socket's DDIO capacity. A queue that carried too
/// little traffic gets neither a verdict nor a predicted hit rate.
pub fn model_view(obs: &HostObservation, run: &ModelRun) -> ModelView {
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
    let enough = |d: Dir, q: u32| {
        obs.queues
            .iter()
            .find(|o| o.dir == d && o.queue == q)
            .and_then(|o| o.packets)
            .is_none_or(|p| p >= MIN_PACKETS_FOR_VERDICT)
    };
    let hits = |dir: Dir, queue: u32| -> (Option<f64>, Option<f64>) {
        if !enough(dir, queue) {
            return (None, None);
        }
        match (&per_q, dir) {
            (Some((r, c)), Dir::Rx) => {
                let idx = rx.iter().position(|q| q.queue == queue);
                let st = idx.and_then(|i| r.per_queue.get(i));
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
        }
    };
    // The copy's read miss and the DRAM traffic a queue's packets cause (kernel stack).
    let extra = |dir: Dir, queue: u32| -> (Option<f64>, Option<f64>, Option<f64>) {
        let (Some((r, c)), Dir::Rx) = (&per_q, dir) else {
            return (None, None, None);
        };
        if !enough(dir, queue) {
            return (None, None, None);
        }
        let idx = rx.iter().position(|q| q.queue == queue);
        let Some(s) = idx.and_then(|i| r.per_queue.get(i)) else {
            return (None, None, None);
        };
        let d = r.dram(s);
        (
            s.cpu_read_miss_pct()
                .filter(|_| *c == Consumer::Copy)
                .map(round1),
            d.map(|d| round2(d.read_gbps)),
            d.map(|d| round2(d.write_gbps)),
        )
    };
    let predicted: Vec<(Dir, u32)> = obs
        .queues
        .iter()
        .filter(|q| {
            let (w, r) = hits(q.dir, q.queue);
            w.is_some() || r.is_some()
        })
        .map(|q| (q.dir, q.queue))
        .collect();
    let (sock, verdicts) = socket_verdicts(&obs.geometry, &obs.queues, &predicted);
    let queues = sock
        .queues
        .iter()
        .zip(&verdicts)
        .map(|(qa, (_, _, verdict))| {
            let (w, rd) = hits(qa.dir, qa.queue);
            let extra = extra(qa.dir, qa.queue);
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
                verdict: *verdict,
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
