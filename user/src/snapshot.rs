//! The Snapshot: everything ddioscope knows about one interval. Live recording
//! and replay both produce it, so every surface and analysis is one code path.
use serde::{Deserialize, Serialize};

pub const NSTAGES: usize = 4;
pub const NBUCKETS: usize = 32;
pub const NAPI_BUCKETS: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Rx,
    Tx,
}

impl Dir {
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Rx => "rx",
            Dir::Tx => "tx",
        }
    }
    pub fn from_u8(v: u8) -> Dir {
        if v == 0 {
            Dir::Rx
        } else {
            Dir::Tx
        }
    }
    pub fn parse(s: &str) -> Option<Dir> {
        match s {
            "rx" => Some(Dir::Rx),
            "tx" => Some(Dir::Tx),
            _ => None,
        }
    }
    /// Stage names in the order of the kernel's stage slots (see bpf/pktlife.h).
    pub fn stage_names(self) -> [&'static str; NSTAGES] {
        match self {
            Dir::Rx => [
                "driver_to_stack",
                "stack_to_copy",
                "copy_to_free",
                "driver_to_free",
            ],
            Dir::Tx => [
                "queue_to_xmit",
                "xmit_call",
                "xmit_to_free",
                "queue_to_free",
            ],
        }
    }

    /// The stage a packet buffer lives through while the NIC or the CPU still uses it:
    /// RX from the DMA hand-up to the buffer's release, TX the NIC's DMA read window.
    pub fn lifetime_stage(self) -> usize {
        match self {
            Dir::Rx => RX_DRIVER_TO_FREE,
            Dir::Tx => TX_XMIT_TO_FREE,
        }
    }
}

/// As in JSON: `rx`, `tx`.
impl std::fmt::Display for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

// The kernel's stage slots (bpf/pktlife.h `enum pl_rx_stage` / `enum pl_tx_stage`): the index
// into every per-stage array, and into a sampled packet's stage-entry times (`ts`).
/// Driver hand-up (pre-GRO) to stack entry.
pub const RX_DRIVER_TO_STACK: usize = 0;
/// Stack entry to the first copy to a socket.
pub const RX_STACK_TO_COPY: usize = 1;
/// First copy to the buffer's release.
pub const RX_COPY_TO_FREE: usize = 2;
/// The whole RX buffer lifetime.
pub const RX_DRIVER_TO_FREE: usize = 3;
/// Queueing (dev_queue_xmit) to the driver's xmit.
pub const TX_QUEUE_TO_XMIT: usize = 0;
/// The driver's xmit call.
pub const TX_XMIT_CALL: usize = 1;
/// Driver xmit to completion free: the NIC's DMA window.
pub const TX_XMIT_TO_FREE: usize = 2;
/// Queueing to completion free.
pub const TX_QUEUE_TO_FREE: usize = 3;

/// Per-queue counters: cumulative when read from the kernel, a delta in a Snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueCounters {
    pub dir: Dir,
    pub queue: u32,
    pub packets: u64,
    pub bytes: u64,
    pub napi_polls: u64,
    pub napi_work: u64,
    pub napi_budget_exhausted: u64,
    pub copies: u64,
    pub frees: u64,
    pub drops: u64,
    /// Packets whose life the detail hooks saw begin (the population the stages time).
    #[serde(default)]
    pub handups: u64,
    /// Of those, lives whose end the hooks did not see: a later packet took the state's slot
    /// first (the free unseen: coalesced or merged away), or the window ended first.
    #[serde(default)]
    pub unended: u64,
    pub stage_count: [u64; NSTAGES],
    pub stage_sum_ns: [u64; NSTAGES],
    /// Largest value seen so far (not a delta: a max cannot be differenced).
    pub stage_max_ns: [u64; NSTAGES],
    pub stage_hist: [[u64; NBUCKETS]; NSTAGES],
    pub napi_work_hist: [u64; NAPI_BUCKETS],
    /// Timed RX frames by size (see [`SIZE_BUCKETS`]), from the detail windows.
    #[serde(default)]
    pub size_hist: [u64; SIZE_BUCKETS],
}

/// Frame-size buckets of [`QueueCounters::size_hist`]: bucket 0 holds frames of up to 64
/// bytes, bucket b > 0 frames of 2^(b+5)+1 ..= 2^(b+6) bytes, the last everything above 4096
/// (L2 header included; a GSO skb counts as its segments of the mean segment's size).
pub const SIZE_BUCKETS: usize = 8;

/// The largest frame of a size bucket (None: the open-ended last one).
pub fn size_bucket_max(b: usize) -> Option<u32> {
    (b + 1 < SIZE_BUCKETS).then(|| 1u32 << (b + 6))
}

impl QueueCounters {
    pub fn new(dir: Dir, queue: u32) -> Self {
        QueueCounters {
            dir,
            queue,
            packets: 0,
            bytes: 0,
            napi_polls: 0,
            napi_work: 0,
            napi_budget_exhausted: 0,
            copies: 0,
            frees: 0,
            drops: 0,
            handups: 0,
            unended: 0,
            stage_count: [0; NSTAGES],
            stage_sum_ns: [0; NSTAGES],
            stage_max_ns: [0; NSTAGES],
            stage_hist: [[0; NBUCKETS]; NSTAGES],
            napi_work_hist: [0; NAPI_BUCKETS],
            size_hist: [0; SIZE_BUCKETS],
        }
    }

    /// Nothing counted: every count is 0 (the stages' maxima are no count). Bytes are a count
    /// of their own: an estimated split can give a queue bytes in an interval it gave no
    /// packet, and a row left out for it would lose them.
    pub fn is_zero(&self) -> bool {
        [
            self.packets,
            self.bytes,
            self.napi_polls,
            self.napi_work,
            self.napi_budget_exhausted,
            self.copies,
            self.frees,
            self.drops,
            self.handups,
            self.unended,
        ]
        .iter()
        .chain(&self.stage_count)
        .chain(&self.stage_sum_ns)
        .chain(self.stage_hist.iter().flatten())
        .chain(&self.napi_work_hist)
        .chain(&self.size_hist)
        .all(|&c| c == 0)
    }

    /// self - earlier, saturating: the kernel's counters only grow.
    pub fn delta(&self, earlier: &QueueCounters) -> QueueCounters {
        let mut d = self.clone();
        d.packets = self.packets.saturating_sub(earlier.packets);
        d.bytes = self.bytes.saturating_sub(earlier.bytes);
        d.napi_polls = self.napi_polls.saturating_sub(earlier.napi_polls);
        d.napi_work = self.napi_work.saturating_sub(earlier.napi_work);
        d.napi_budget_exhausted = self
            .napi_budget_exhausted
            .saturating_sub(earlier.napi_budget_exhausted);
        d.copies = self.copies.saturating_sub(earlier.copies);
        d.frees = self.frees.saturating_sub(earlier.frees);
        d.drops = self.drops.saturating_sub(earlier.drops);
        d.handups = self.handups.saturating_sub(earlier.handups);
        d.unended = self.unended.saturating_sub(earlier.unended);
        for s in 0..NSTAGES {
            d.stage_count[s] = self.stage_count[s].saturating_sub(earlier.stage_count[s]);
            d.stage_sum_ns[s] = self.stage_sum_ns[s].saturating_sub(earlier.stage_sum_ns[s]);
            for b in 0..NBUCKETS {
                d.stage_hist[s][b] = self.stage_hist[s][b].saturating_sub(earlier.stage_hist[s][b]);
            }
        }
        for b in 0..NAPI_BUCKETS {
            d.napi_work_hist[b] = self.napi_work_hist[b].saturating_sub(earlier.napi_work_hist[b]);
        }
        for b in 0..SIZE_BUCKETS {
            d.size_hist[b] = self.size_hist[b].saturating_sub(earlier.size_hist[b]);
        }
        d
    }

    /// Accumulate a delta into a running total (saturating: a damaged recording's
    /// counts must not wrap around).
    pub fn add(&mut self, d: &QueueCounters) {
        self.packets = self.packets.saturating_add(d.packets);
        self.bytes = self.bytes.saturating_add(d.bytes);
        self.napi_polls = self.napi_polls.saturating_add(d.napi_polls);
        self.napi_work = self.napi_work.saturating_add(d.napi_work);
        self.napi_budget_exhausted = self
            .napi_budget_exhausted
            .saturating_add(d.napi_budget_exhausted);
        self.copies = self.copies.saturating_add(d.copies);
        self.frees = self.frees.saturating_add(d.frees);
        self.drops = self.drops.saturating_add(d.drops);
        self.handups = self.handups.saturating_add(d.handups);
        self.unended = self.unended.saturating_add(d.unended);
        for s in 0..NSTAGES {
            self.stage_count[s] = self.stage_count[s].saturating_add(d.stage_count[s]);
            self.stage_sum_ns[s] = self.stage_sum_ns[s].saturating_add(d.stage_sum_ns[s]);
            self.stage_max_ns[s] = self.stage_max_ns[s].max(d.stage_max_ns[s]);
            for b in 0..NBUCKETS {
                self.stage_hist[s][b] = self.stage_hist[s][b].saturating_add(d.stage_hist[s][b]);
            }
        }
        for b in 0..NAPI_BUCKETS {
            self.napi_work_hist[b] = self.napi_work_hist[b].saturating_add(d.napi_work_hist[b]);
        }
        for b in 0..SIZE_BUCKETS {
            self.size_hist[b] = self.size_hist[b].saturating_add(d.size_hist[b]);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowKey {
    pub dir: Dir,
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowCounters {
    pub key: FlowKey,
    pub queue: u32,
    pub packets: u64,
    pub bytes: u64,
    /// L4 payload bytes (what the application sees).
    pub payload_bytes: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// The skbs sampled for this flow (packets, bytes and payload_bytes are then estimates
    /// from them); None: counted exactly (recordings from before sampled flows).
    #[serde(default)]
    pub samples: Option<u64>,
    /// The estimated variance of `bytes` (see `bytes_error`); 0 when every skb was sampled.
    #[serde(default)]
    pub bytes_var: Option<u64>,
    /// Where exact counts came from other than the probes: "socket" (the local TCP socket's
    /// own counters). None: the probes (sampled, or counted where `samples` is None).
    #[serde(default)]
    pub source: Option<String>,
}

impl FlowCounters {
    /// The 95 % error bound of `bytes`, in bytes: 1.96 standard deviations of the estimate
    /// (its variance is estimated in the kernel with it); 0 when counted exactly.
    pub fn bytes_error(&self) -> f64 {
        1.96 * (self.bytes_var.unwrap_or(0) as f64).sqrt()
    }
}

/// One sampled packet's life (1 in N), as the kernel sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacketSample {
    pub dir: Dir,
    pub queue: u32,
    pub cpu: u32,
    pub len: u32,
    pub skb_addr: u64,
    pub data_addr: u64,
    /// Stage-entry times (0 = stage not seen), bpf_ktime_get_ns clock.
    pub ts: [u64; NSTAGES],
    pub free_ns: u64,
    pub dropped: bool,
    pub drop_reason: u32,
    pub flow: Option<FlowKey>,
}

/// Global event-path counters (cumulative in the kernel, deltas in a Snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EventCounters {
    pub sampled: u64,
    pub lost: u64,
    pub state_evicted: u64,
    pub queue_clamped: u64,
    /// In-flight states found to belong to an earlier packet (its free went unseen).
    #[serde(default)]
    pub state_stale: u64,
    /// Records the userspace reader received (should equal `sampled`).
    pub received: u64,
}

impl EventCounters {
    pub fn delta(&self, e: &EventCounters) -> EventCounters {
        EventCounters {
            sampled: self.sampled.saturating_sub(e.sampled),
            lost: self.lost.saturating_sub(e.lost),
            state_evicted: self.state_evicted.saturating_sub(e.state_evicted),
            queue_clamped: self.queue_clamped.saturating_sub(e.queue_clamped),
            state_stale: self.state_stale.saturating_sub(e.state_stale),
            received: self.received.saturating_sub(e.received),
        }
    }
}

/// Packets the NIC dropped for want of RX descriptors or buffers, as one of its own counters
/// counts them (cumulative when read, a delta in a Snapshot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicDrop {
    /// The driver's name for it (`rx_out_of_buffer`, `rx_missed_errors`, qstats `rx-hw-drops`…).
    pub counter: String,
    /// The RX queue it counts, or None for the whole device.
    pub queue: Option<u32>,
    pub count: u64,
}

/// One interval.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub index: u64,
    /// End of the interval, CLOCK_MONOTONIC ns (the BPF clock).
    pub t_ns: u64,
    pub dur_ns: u64,
    pub queues: Vec<QueueCounters>,
    pub samples: Vec<PacketSample>,
    pub events: EventCounters,
    /// Flows, cumulative since the start (present on the intervals where they were read).
    pub flows: Vec<FlowCounters>,
    /// Each queue's flow overflow bucket, cumulative (present with the flows): what no flow
    /// table entry could take, and the sampled skbs that were no TCP/UDP flow.
    #[serde(default)]
    pub flow_overflow: Vec<crate::probe::qcount::FlowOverflow>,
    /// Drop reasons, cumulative: (reason id, count).
    pub drop_reasons: Vec<(u32, u64)>,
    /// Of them, RX packets dropped before the device's stack took them in (by the driver, a
    /// full ring, the CPU's backlog), cumulative: (reason id, count).
    #[serde(default)]
    pub drops_before_stack: Vec<(u32, u64)>,
    /// The device's page pools as the kernel counts them, cumulative (present on the
    /// intervals where they were read, where the kernel keeps page_pool statistics).
    #[serde(default)]
    pub page_pools: Vec<PagePoolStat>,
    /// The NIC's ring-drop counters over this interval: every counter the driver has on the
    /// first interval (zero or not, so the recording says which exist), the nonzero ones after.
    #[serde(default)]
    pub nic_drops: Vec<NicDrop>,
    /// The local TCP sockets' receive queues over the run so far (present with the flows,
    /// where sock_diag could be read), keyed by their RX flow.
    #[serde(default)]
    pub socket_queues: Vec<SocketQueueStat>,
    /// Counter deltas of this interval (any source), per socket.
    pub counters: Vec<crate::counters::CounterReading>,
    /// L3-miss samples of this interval, when a miss sampler is attached.
    pub misses: Option<MissSnapshot>,
    /// How long the detail hooks (stages, packet records, the buffer map) ran in this
    /// interval: all of it at full detail, the windows' share by default, none with counts
    /// only. None: a recording from before windows (all of it).
    #[serde(default)]
    pub detail_ns: Option<u64>,
}

/// L3-miss samples: totals and per-queue charges are deltas; flows and
/// regions cumulative (present on the intervals where they were read).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MissSnapshot {
    pub samples: u64,
    pub on_packet_buffers: u64,
    pub other_addr: u64,
    pub no_addr: u64,
    pub ctx_charged: u64,
    pub uncharged: u64,
    /// Samples whose data address lies on a page outside the join's sampled subset
    /// (`record --join-sample N`): neither joined nor known to be off packet buffers.
    #[serde(default)]
    pub out_of_subset: u64,
    /// Charged samples with no flow key (the rest of the charges have one, kept in the flow map
    /// unless its LRU evicted the flow). None: a recording from before this count.
    #[serde(default)]
    pub no_flow: Option<u64>,
    /// Charged samples whose queue number was past the probes' MAX_QUEUES, counted on the last.
    #[serde(default)]
    pub queue_clamped: u64,
    /// Joined samples on a page last kept before the current attribution window
    /// (`record --miss-duty N`): charged to that owner, their age unknown (not in `age_hist`).
    #[serde(default)]
    pub before_window: u64,
    /// How long the sampler ran in this interval, in attribution windows (None: always on,
    /// or a recording from before windows).
    #[serde(default)]
    pub sampled_ns: Option<u64>,
    /// The kernel's throttling of the sampler (None: not read: no ring could be mapped, or a
    /// recording from before this count).
    #[serde(default)]
    pub throttle: Option<SamplerThrottle>,
    /// Joined samples by ns since the buffer's hand-up (log2 buckets).
    pub age_hist: Vec<u64>,
    /// (dir, queue, by address join, by CPU context)
    pub queues: Vec<(Dir, u32, u64, u64)>,
    /// (flow, by address join, by CPU context), cumulative
    pub flows: Vec<(FlowKey, u64, u64)>,
    /// (2 MiB region index = address >> 21, samples), cumulative, top entries
    pub regions: Vec<(u64, u64)>,
    /// What the probes wrote to the packet-buffer page map (deltas).
    pub buf: BufMapCounters,
}

/// The kernel stopping the sampler for overflowing too often (perf_event_max_sample_rate):
/// while stopped it samples nothing, so only these records show the gap. Cumulative while live,
/// per interval in a recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplerThrottle {
    /// Times the kernel stopped the sampler.
    pub throttles: u64,
    /// CPU-ns the sampler spent stopped (a stop still open counts up to the read).
    pub throttled_ns: u64,
    /// Throttle records the ring dropped: the figures above are then approximate (a stop
    /// whose start or end was lost is not timed).
    pub records_lost: u64,
}

impl SamplerThrottle {
    pub fn combine(&self, o: &SamplerThrottle, f: impl Fn(u64, u64) -> u64) -> SamplerThrottle {
        SamplerThrottle {
            throttles: f(self.throttles, o.throttles),
            throttled_ns: f(self.throttled_ns, o.throttled_ns),
            records_lost: f(self.records_lost, o.records_lost),
        }
    }
}

/// The packet-buffer page map of the address join: pages written (linear data
/// and frags) and frags left out, as deltas; its size as a gauge.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BufMapCounters {
    pub linear_pages: u64,
    pub frag_pages: u64,
    /// Frags past the per-skb cap (PL_MAX_JOIN_FRAGS).
    pub frags_over_cap: u64,
    /// Frags without a struct page (net_iov device memory).
    pub frags_no_page: u64,
    /// Frags not mapped for want of a page-to-address layout (or one that failed its check).
    pub frags_no_layout: u64,
    /// Ways a newer page took over from another (the older one live or long freed).
    pub slots_replaced: u64,
    /// Buffer pages past the per-skb page cap (PL_MAX_JOIN_PAGES): not mapped.
    pub pages_over_cap: u64,
    /// Entries in the map when it was last counted this interval (None: not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
    /// software-copy stand-in: joined samples whose address was drawn from
    /// the copied skb's linear data / from one of its frags.
    pub copy_linear_joined: u64,
    pub copy_frag_joined: u64,
}

impl BufMapCounters {
    /// Every counter of `self` and `other` through `f` (a delta, a sum); the
    /// `entries` gauge is `self`'s. The one place that lists the counters.
    pub fn combine(&self, other: &BufMapCounters, f: impl Fn(u64, u64) -> u64) -> BufMapCounters {
        BufMapCounters {
            linear_pages: f(self.linear_pages, other.linear_pages),
            frag_pages: f(self.frag_pages, other.frag_pages),
            frags_over_cap: f(self.frags_over_cap, other.frags_over_cap),
            frags_no_page: f(self.frags_no_page, other.frags_no_page),
            frags_no_layout: f(self.frags_no_layout, other.frags_no_layout),
            slots_replaced: f(self.slots_replaced, other.slots_replaced),
            pages_over_cap: f(self.pages_over_cap, other.pages_over_cap),
            entries: self.entries,
            copy_linear_joined: f(self.copy_linear_joined, other.copy_linear_joined),
            copy_frag_joined: f(self.copy_frag_joined, other.copy_frag_joined),
        }
    }
}

impl MissSnapshot {
    pub fn delta(&self, e: &MissSnapshot) -> MissSnapshot {
        let mut d = self.clone();
        d.samples = self.samples.saturating_sub(e.samples);
        d.on_packet_buffers = self.on_packet_buffers.saturating_sub(e.on_packet_buffers);
        d.other_addr = self.other_addr.saturating_sub(e.other_addr);
        d.no_addr = self.no_addr.saturating_sub(e.no_addr);
        d.ctx_charged = self.ctx_charged.saturating_sub(e.ctx_charged);
        d.uncharged = self.uncharged.saturating_sub(e.uncharged);
        d.out_of_subset = self.out_of_subset.saturating_sub(e.out_of_subset);
        // Nothing read before (the start): all of it is this interval's.
        d.no_flow = self
            .no_flow
            .map(|a| a.saturating_sub(e.no_flow.unwrap_or(0)));
        d.queue_clamped = self.queue_clamped.saturating_sub(e.queue_clamped);
        d.before_window = self.before_window.saturating_sub(e.before_window);
        d.sampled_ns = None;
        d.throttle = self
            .throttle
            .map(|a| a.combine(&e.throttle.unwrap_or_default(), u64::saturating_sub));
        d.age_hist = self
            .age_hist
            .iter()
            .enumerate()
            .map(|(i, v)| v.saturating_sub(*e.age_hist.get(i).unwrap_or(&0)))
            .collect();
        d.queues = self
            .queues
            .iter()
            .map(|&(dir, q, a, c)| {
                let prev = e
                    .queues
                    .iter()
                    .find(|p| p.0 == dir && p.1 == q)
                    .map_or((0, 0), |p| (p.2, p.3));
                (dir, q, a.saturating_sub(prev.0), c.saturating_sub(prev.1))
            })
            .filter(|q| q.2 + q.3 > 0)
            .collect();
        d.buf = self.buf.combine(&e.buf, u64::saturating_sub);
        d
    }
}

/// Percentile of a log2 histogram (bucket b = [2^b, 2^(b+1)) ns), interpolated
/// within the bucket and capped at the observed maximum.
pub fn hist_percentile(hist: &[u64], p: f64, max: u64) -> Option<u64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (p / 100.0 * total as f64).max(1.0);
    let mut seen = 0.0;
    for (b, &c) in hist.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let next = seen + c as f64;
        if next >= rank {
            let lo = if b == 0 { 0.0 } else { (1u64 << b) as f64 };
            let hi = (1u64 << (b + 1)) as f64;
            let frac = (rank - seen) / c as f64;
            let v = (lo + frac * (hi - lo)) as u64;
            return Some(if max > 0 { v.min(max) } else { v });
        }
        seen = next;
    }
    Some(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_interpolates_and_caps() {
        let mut h = [0u64; NBUCKETS];
        h[10] = 100; // [1024, 2048)
        assert_eq!(hist_percentile(&h, 50.0, 0), Some(1536));
        assert_eq!(hist_percentile(&h, 50.0, 1200), Some(1200));
        assert_eq!(hist_percentile(&[0; 4], 50.0, 0), None);
        h[20] = 100;
        let p50 = hist_percentile(&h, 50.0, 0).unwrap();
        let p99 = hist_percentile(&h, 99.0, 0).unwrap();
        assert!(p50 <= 2048 && p99 >= 1 << 20, "{p50} {p99}");
    }

    #[test]
    fn delta_keeps_max_and_subtracts_counts() {
        let mut a = QueueCounters::new(Dir::Rx, 1);
        a.packets = 10;
        a.stage_max_ns[0] = 500;
        a.stage_hist[0][3] = 7;
        let mut b = a.clone();
        b.packets = 25;
        b.stage_max_ns[0] = 900;
        b.stage_hist[0][3] = 9;
        let d = b.delta(&a);
        assert_eq!(d.packets, 15);
        assert_eq!(d.stage_hist[0][3], 2);
        assert_eq!(d.stage_max_ns[0], 900);
    }
}

/// A local socket's receive queue over the reads that listed it (cumulative): its flow as the
/// probes key RX packets to it, the payload queued summed over the reads, its peak, the
/// memory (truesize) queued summed, the largest receive buffer, and the payload the
/// application read between the first and the last read over that time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketQueueStat {
    pub key: FlowKey,
    pub reads: u64,
    pub rqueue_sum: u64,
    pub rqueue_max: u64,
    pub rmem_sum: u64,
    pub rcvbuf_max: u64,
    pub drained_bytes: u64,
    pub span_ns: u64,
}

impl SocketQueueStat {
    /// Mean payload queued over the reads.
    pub fn mean_queued(&self) -> f64 {
        self.rqueue_sum as f64 / self.reads.max(1) as f64
    }

    /// Bytes per second the application read, None without two reads apart.
    pub fn drain_bytes_per_s(&self) -> Option<f64> {
        (self.span_ns > 0).then(|| self.drained_bytes as f64 * 1e9 / self.span_ns as f64)
    }

    /// Seconds a byte waits in the queue (Little's law: mean queued / drain rate).
    pub fn residence_s(&self) -> Option<f64> {
        self.drain_bytes_per_s()
            .filter(|r| *r > 0.0)
            .map(|r| self.mean_queued() / r)
    }
}

/// One page_pool's recycling (cumulative): where its pages came from and went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePoolStat {
    pub id: u64,
    pub napi_id: Option<u64>,
    pub alloc_fast: u64,
    pub alloc_slow: u64,
    pub alloc_slow_high_order: u64,
    pub alloc_empty: u64,
    pub alloc_refill: u64,
    pub alloc_waive: u64,
    pub recycle_cached: u64,
    pub recycle_cache_full: u64,
    pub recycle_ring: u64,
    pub recycle_ring_full: u64,
    pub recycle_released_refcnt: u64,
}

impl PagePoolStat {
    /// Of the pages handed to the driver, the share that came back through the pool's cache
    /// or ring rather than from the page allocator: how warm its buffers are.
    pub fn recycled_share(&self) -> Option<f64> {
        let recycled = self.recycle_cached + self.recycle_ring;
        let total = self.alloc_fast + self.alloc_slow + self.alloc_slow_high_order;
        (total > 0).then(|| recycled as f64 / total as f64)
    }
}
