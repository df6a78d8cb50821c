//! The synthetic driver: turns a [`SimSpec`] into timed buffer accesses — NIC writes into posted RX descriptors, the queue's core picking packets up and refilling the ring, NIC TX reads, buffer recycling — and runs them through the LLC simulator.
//!
//! The RX ring is modelled as the hardware sees it: a descriptor holds its buffer from the
//! moment it is posted until the core picks the packet up; the driver re-posts consumed
//! descriptors in batches; the NIC writes only posted descriptors and drops when it finds
//! none (the core fell behind). So the buffers in circulation per queue are the ring plus
//! what is out in TX or in the stack, never "ring + everything in flight" twice, and a queue
//! whose core is saturated keeps its ring full (each packet waits a whole ring turn).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::sim::mix64;
use super::sim::{AccessKind, BackgroundGen, Llc, Recorder, SimOptions, SimResult};
use super::spec::{Consumer, PoolLayout, Reuse, SimSpec, SpecError};

/// Address-space layout of the synthetic run. The buffer pool is one contiguous region
/// (a DPDK mempool in hugepages, or the pages a page_pool keeps cycling), completion rings
/// another; fresh pages (never recently used) come from a far region.
const POOL_BASE: u64 = 1 << 32;
const CQ_BASE: u64 = 1 << 31;
const FRESH_BASE: u64 = 1 << 40;
const USER_BASE: u64 = 1 << 38;

/// Fresh pages cycle over this many buffers: far more than any LLC holds, so a fresh page is
/// always cold, as a page from the allocator is.
const FRESH_BUFS: u64 = 1 << 22;

/// Queues below this share of the packets do not set the warm-up and measurement windows.
const MINOR_QUEUE_SHARE: f64 = 0.01;

/// Measure at least this many packets so hit rates near 100% are not sampling noise.
const MIN_MEASURE_PACKETS: f64 = 100_000.0;

/// One stretch of a contiguous run: how long it lasts and each queue's packet rate in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub duration_ns: u64,
    pub queue_pps: Vec<f64>,
}

/// Run the synthetic workload through the LLC simulator. The spec runs as
/// [`SimSpec::bounded`] makes it (work and memory bounded); a spec that fails
/// [`SimSpec::validate`] is not run and gives an empty result (no hit rates).
pub fn simulate(spec: &SimSpec) -> SimResult {
    if spec.validate().is_err() {
        return SimResult::default();
    }
    let spec = &spec.bounded();
    let (warm_ns, end_ns) = windows(spec);
    let phase = Phase {
        duration_ns: end_ns - warm_ns,
        queue_pps: spec.queue_pps(),
    };
    drive(spec, warm_ns, std::slice::from_ref(&phase))
        .pop()
        .unwrap_or_default()
}

/// Run the workload once, warm-up then `phases` back to back, with each queue's rate
/// switching at the phase boundaries; one result per phase. The cache, rings, in-flight
/// packets and buffer pools carry over from phase to phase, as on a host whose load varies
/// during a recording (separate cold-started runs would each begin with a start-up
/// transient no real interval has). Warm-up runs at the first phase's rates for the spec's
/// usual warm-up window, shortened as [`simulate`] shortens it when `max_packets` bounds the
/// run; the phases themselves are not bounded (the caller chose their durations).
pub fn simulate_phases(spec: &SimSpec, phases: &[Phase]) -> Vec<SimResult> {
    let Some(first) = phases.first() else {
        return Vec::new();
    };
    if spec.validate().is_err() {
        return vec![SimResult::default(); phases.len()];
    }
    let spec = &spec.bounded();
    let mut s = spec.clone();
    s.pps = first.queue_pps.iter().sum();
    s.queue_weights = first.queue_pps.clone();
    let (warm_ns, _) = windows(&s);
    drive(spec, warm_ns, phases)
}

/// Cache-line accesses one run of `spec` makes (warm-up and background included), estimated
/// from the spec without running it: the packets its windows hold, each the lines the NIC
/// and the consumer touch, plus the other cores' background over the same simulated time.
/// Close to the run's own count where no packet is dropped; above it where the NIC drops (a
/// dropped packet touches nothing), so a bound on it errs on the safe side.
pub fn estimated_accesses(spec: &SimSpec) -> f64 {
    if spec.validate().is_err() {
        return 0.0;
    }
    let spec = &spec.bounded();
    let (_, end_ns) = windows(spec);
    (spec.pps * lines_per_packet(spec) + spec.background.lines_per_sec) * end_ns as f64 / 1e9
}

/// Cache-line accesses per packet, the queues' mean weighted by their packet rates: the
/// NIC's data and completion writes, and what the consumer does with the packet.
pub(crate) fn lines_per_packet(spec: &SimSpec) -> f64 {
    let lines = |bytes: f64, at: u32| ((at % 64) as f64 + bytes.max(1.0).ceil()) / 64.0;
    let lines = |bytes: f64, at: u32| lines(bytes, at).ceil();
    let cqe = lines(spec.cqe_bytes as f64, 0);
    let qpps = spec.queue_pps();
    let total: f64 = qpps.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let per_queue = spec.mean_pkt_bytes_per_queue().into_iter().map(|bytes| {
        let data = lines(bytes, spec.data_offset);
        let consumer = match spec.consumer {
            // The header read and write, the prefetched lines (at most), the TX read.
            Consumer::Forward => {
                lines((spec.touch_bytes as f64).min(bytes), spec.data_offset)
                    + 1.0
                    + ((spec.prefetch_bytes as f64).min((bytes - 64.0).max(0.0)) / 64.0).ceil()
                    + data
            }
            // The payload read, and its copy into the socket's buffer.
            Consumer::Copy => 2.0 * data,
        };
        data + cqe + consumer
    });
    qpps.iter().zip(per_queue).map(|(p, l)| p * l).sum::<f64>() / total
}

/// The synthetic run [`bench_run_lines_per_sec`] times: ddio-bench's two forwarding cores,
/// 4096 descriptors each, 1500 B at 99.3 Gb/s, 2 DDIO ways of the Gold 6140.
pub const BENCH_RUN_SPEC: &str =
    "preset=skx6140,queues=2,ring=4096,pkt_bytes=1500,rate_gbps=99.3,ddio_ways=2,consumer=forward";

/// Cache-line accesses per second of whole synthetic runs on this core: the LLC with
/// everything around it (arrivals, the event queue, rings, recycling). One figure per run of
/// [`BENCH_RUN_SPEC`] (about 6 M accesses).
pub fn bench_run_lines_per_sec(passes: usize) -> Result<Vec<f64>, SpecError> {
    let spec = SimSpec::parse(BENCH_RUN_SPEC)?;
    Ok((0..passes.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            let r = simulate(&spec);
            r.lines_simulated as f64 / start.elapsed().as_secs_f64().max(1e-9)
        })
        .collect())
}

/// Buffers a queue keeps in circulation beyond its ring: the refill batch not yet re-posted,
/// the TX completions not yet released, and the recycling ring of a page_pool.
fn extra_circulating(spec: &SimSpec) -> usize {
    let ring = spec.ring_slots() as usize;
    let mut extra = refill_batch(spec) as usize + spec.tx_free_batch as usize;
    if let Some(pp) = spec.page_pool() {
        extra += pp.ring_size.min(pp.universe.saturating_sub(ring) as u32) as usize;
    }
    extra
}

/// Descriptors the driver re-posts at once: min(batch, ring / 4), as mlx5's vectorised
/// receive does (MLX5_VPMD_RXQ_RPLNSH_THRESH); at least one.
fn refill_batch(spec: &SimSpec) -> u64 {
    (spec.rx_refill_batch as u64)
        .min(spec.ring_slots() as u64 / 4)
        .max(1)
}

/// Warm-up end and run end (ns) for a single-phase run of `spec`.
fn windows(spec: &SimSpec) -> (u64, u64) {
    let nq = spec.queues as usize;
    let qpps = spec.queue_pps();
    let svc = spec.service_ns(spec.pkt_bytes);
    let slots = spec.ring_slots() as usize;
    let reuse_bufs = match (spec.reuse, spec.page_pool()) {
        (_, Some(_)) => (slots + extra_circulating(spec)) as f64,
        (Reuse::Fifo, None) => ((slots + spec.pool_extra as usize) * nq) as f64,
        _ => (slots + extra_circulating(spec)) as f64,
    };
    // One buffer reuse cycle of the slowest queue sets the warm-up and measurement windows.
    // A saturated queue turns over at its core's pace, not the offered rate. A queue with a
    // sliver of the traffic (under MINOR_QUEUE_SHARE) would stretch the run to its own
    // turnover for a hit rate that weighs nothing in the total: it does not set the cycle.
    let total_pps: f64 = qpps.iter().sum();
    let cycle_ns = qpps
        .iter()
        .filter(|p| **p > 0.0 && **p >= MINOR_QUEUE_SHARE * total_pps)
        .map(|p| {
            let served = if svc > 0.0 { p.min(1e9 / svc) } else { *p };
            let per_s = if spec.reuse == Reuse::Fifo && spec.page_pool().is_none() {
                spec.pps
            } else {
                served
            };
            reuse_bufs / per_s * 1e9
        })
        .fold(0.0f64, f64::max)
        .max(1.0);
    let max_res_us = spec
        .queue_residence_us
        .iter()
        .copied()
        .fold(spec.residence_us, f64::max)
        + spec
            .socket_wait_ns()
            .iter()
            .flatten()
            .map(|w| w.1 / 1e3)
            .fold(0.0f64, f64::max);
    // A queue offered more than its core serves fills its ring at the difference; measure
    // once it is full (the steady state a host runs in), not while it fills.
    let fill_ns = qpps
        .iter()
        .filter(|p| svc > 0.0 && **p > 1e9 / svc)
        .map(|p| slots as f64 / (p - 1e9 / svc) * 1e9)
        .fold(0.0f64, f64::max);
    let mut warm_ns =
        spec.warmup_cycles * cycle_ns + fill_ns + (max_res_us + spec.tx_delay_us) * 1e3;
    let measure_ns = (spec.measure_cycles * cycle_ns).max(MIN_MEASURE_PACKETS / spec.pps * 1e9);
    let mut end_ns = warm_ns + measure_ns;
    let total_pkts = spec.pps * end_ns / 1e9;
    if total_pkts > spec.max_packets as f64 {
        // Shorten warm-up and measurement alike, but never below the ring's fill time
        // (bounded too: at most the whole packet budget).
        let k = spec.max_packets as f64 / total_pkts;
        let fill = fill_ns.min(spec.max_packets as f64 / spec.pps * 1e9);
        warm_ns = (warm_ns * k).max(fill);
        end_ns = warm_ns + measure_ns * k;
    }
    (warm_ns as u64, end_ns.max(warm_ns + 1.0) as u64)
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive = 0,
    /// The queue's core takes the packet off the ring (and re-posts descriptors).
    Pickup = 1,
    /// Copy consumer: the stack copies the payload to the socket and frees the buffer.
    Copy = 2,
    /// Forward consumer: the NIC reads the packet for transmission.
    TxRead = 3,
    /// End of a phase of a [`simulate_phases`] run: rates switch here.
    Boundary = 4,
}

/// (time, sequence, event, queue, flow, buffer, packet bytes); sequence keeps ties deterministic.
type Item = Reverse<(u64, u64, Ev, u32, u32, u32, u32)>;

/// Where freed buffers go and where re-posted descriptors get theirs.
struct Recycler {
    mode: Mode,
    /// Per-queue LIFO cache (DPDK per-lcore mempool cache, page_pool alloc cache).
    cache: Vec<Vec<u32>>,
    /// Per-queue FIFO ring of recycled buffers (page_pool ptr_ring).
    ring: Vec<VecDeque<u32>>,
    shared_stack: Vec<u32>,
    shared_fifo: VecDeque<u32>,
    fresh_next: u64,
    rng: u64,
}

enum Mode {
    Recycle,
    Lifo,
    Fifo,
    /// page_pool with measured path shares (cumulative thresholds of a uniform draw).
    PagePool {
        cache_below: f64,
        ring_below: f64,
        cache_cap: usize,
        ring_cap: usize,
    },
}

/// Buffer ids at or above this are fresh pages (cold), not pool buffers.
const FRESH_ID: u32 = 1 << 31;

impl Recycler {
    fn pop(&mut self, q: usize) -> Option<u32> {
        match self.mode {
            Mode::Recycle => self.cache[q].pop(),
            Mode::Lifo => self.shared_stack.pop(),
            Mode::Fifo => self.shared_fifo.pop_front(),
            Mode::PagePool {
                cache_below,
                ring_below,
                ..
            } => {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
                if u < cache_below {
                    self.cache[q]
                        .pop()
                        .or_else(|| self.ring[q].pop_front())
                        .or_else(|| Some(self.fresh()))
                } else if u < ring_below {
                    self.ring[q]
                        .pop_front()
                        .or_else(|| self.cache[q].pop())
                        .or_else(|| Some(self.fresh()))
                } else {
                    Some(self.fresh())
                }
            }
        }
    }

    fn fresh(&mut self) -> u32 {
        let id = FRESH_ID + (self.fresh_next % FRESH_BUFS) as u32;
        self.fresh_next += 1;
        id
    }

    fn push(&mut self, q: usize, b: u32) {
        match self.mode {
            Mode::Recycle => self.cache[q].push(b),
            Mode::Lifo => self.shared_stack.push(b),
            Mode::Fifo => self.shared_fifo.push_back(b),
            Mode::PagePool {
                cache_cap,
                ring_cap,
                ..
            } => {
                // Recycling: the direct cache first, then the ptr_ring; a full pool releases
                // the page to the allocator (the buffer leaves circulation).
                if self.cache[q].len() < cache_cap {
                    self.cache[q].push(b);
                } else if self.ring[q].len() < ring_cap {
                    self.ring[q].push_back(b);
                }
            }
        }
    }
}

/// Per-queue RX ring and core state.
struct Queue {
    /// Next descriptor the NIC writes, the core picks up, the driver re-posts (monotonic).
    nic: u64,
    cpu: u64,
    posted_upto: u64,
    /// When the queue's core is free to take the next packet (ns).
    core_free: f64,
    /// TX completions not yet released (forward consumer).
    tx_done: Vec<u32>,
}

/// Bytes a forwarding core rewrites in each packet: the header line (MAC swap).
const HDR_BYTES: u32 = 64;

/// Where a run's buffers, completion lines and socket buffers sit: fixed for the run, read
/// on every access, so plain fields rather than closures over the spec.
struct Layout {
    nq: usize,
    ring: usize,
    ring64: u64,
    /// Buffers per queue: the ring's and the spares'.
    pool: usize,
    stride: u64,
    scattered: bool,
    per_page: u64,
    page_span: u64,
    cqe: u64,
    data_offset: u64,
    user_stride: u64,
}

impl Layout {
    /// The layout the spec's ring, pool and buffer rules give.
    fn new(spec: &SimSpec) -> Self {
        let ring = spec.ring_slots() as usize;
        let pool = match spec.page_pool() {
            Some(p) => p.universe.max(ring + 1),
            None => ring + spec.pool_extra as usize,
        };
        let stride = spec.buf_stride as u64;
        Layout {
            nq: spec.queues as usize,
            ring,
            ring64: ring as u64,
            pool,
            stride,
            scattered: spec.layout() == PoolLayout::Scattered,
            // Scattered pages: the buffers of one 4 KiB page stay together, the page itself
            // lands anywhere in 64 GiB.
            per_page: (4096 / stride).max(1),
            page_span: stride.div_ceil(4096).max(1) * 4096,
            cqe: spec.cqe_bytes as u64,
            data_offset: spec.data_offset as u64,
            user_stride: (spec.user_buf_bytes as u64).next_multiple_of(4096),
        }
    }

    /// Where buffer `b`'s packet data starts: pool buffers and fresh pages have regions of
    /// their own, so a fresh page is never a pool buffer's line.
    #[inline]
    fn data_addr(&self, b: u32) -> u64 {
        let (base, i) = if b >= FRESH_ID {
            (FRESH_BASE, (b - FRESH_ID) as u64)
        } else {
            (POOL_BASE, b as u64)
        };
        let buf = if self.scattered {
            let page = mix64((i / self.per_page) ^ base) % (1 << 24);
            base + page * self.page_span + (i % self.per_page) * self.stride
        } else {
            base + i * self.stride
        };
        buf + self.data_offset
    }

    /// The completion line of queue `q`'s descriptor `slot`: completion rings sit apart from
    /// the buffers, one after another.
    #[inline]
    fn cq_addr(&self, q: usize, slot: usize) -> u64 {
        CQ_BASE + (q * self.ring + slot) as u64 * self.cqe
    }

    /// Flow `f`'s socket buffer: whole pages of its own, so flows never share a line.
    #[inline]
    fn user_base(&self, f: u32) -> u64 {
        USER_BASE + f as u64 * self.user_stride
    }

    /// Buffer id of queue `q`'s `i`-th buffer. All queues draw from one pool, as a DPDK
    /// mempool (one per socket, per-lcore caches on top) or the pages a kernel's page pools
    /// take from one allocator: the rings take the pool's first `queues x ring` buffers queue
    /// after queue as each is set up, each queue's spares follow as one chunk. So the buffers
    /// in circulation are one contiguous stretch whatever the queue count, not one stretch
    /// per queue a pool apart.
    fn buf_id(&self, q: usize, i: usize) -> u32 {
        if i < self.ring {
            (q * self.ring + i) as u32
        } else {
            (self.nq * self.ring + q * (self.pool - self.ring) + (i - self.ring)) as u32
        }
    }
}

/// The start-up state of the rings and the pool, as a driver leaves them: every descriptor
/// posted with the queue's first `ring` buffers, the rest waiting in the pool in the order
/// the spec's recycling hands them out.
fn initial_buffers(spec: &SimSpec, lay: &Layout) -> (Vec<u32>, Recycler) {
    let (nq, ring, pool) = (lay.nq, lay.ring, lay.pool);
    let mut slots: Vec<u32> = Vec::with_capacity(nq * ring);
    let mut rc = Recycler {
        mode: match (spec.page_pool(), spec.reuse) {
            (Some(p), _) => Mode::PagePool {
                cache_below: p.cache_share,
                ring_below: p.cache_share + p.ring_share,
                cache_cap: p.cache_size as usize,
                ring_cap: p.ring_size as usize,
            },
            (None, Reuse::Recycle) => Mode::Recycle,
            (None, Reuse::Lifo) => Mode::Lifo,
            (None, Reuse::Fifo) => Mode::Fifo,
        },
        cache: vec![Vec::new(); nq],
        ring: vec![VecDeque::new(); nq],
        shared_stack: Vec::new(),
        shared_fifo: VecDeque::new(),
        fresh_next: 0,
        rng: spec.seed | 1,
    };
    for q in 0..nq {
        for i in 0..ring {
            slots.push(lay.buf_id(q, i));
        }
        // Stacks pop from the end: push so that the lowest spare buffer is used first.
        for i in (ring..pool).rev() {
            let b = lay.buf_id(q, i);
            match rc.mode {
                Mode::Recycle => rc.cache[q].push(b),
                Mode::Lifo => rc.shared_stack.push(b),
                Mode::Fifo => {}
                Mode::PagePool { .. } => rc.ring[q].push_front(b),
            }
        }
    }
    if matches!(rc.mode, Mode::Fifo) {
        // Interleave queues so a shared FIFO pool hands out buffers oldest-first.
        for i in ring..pool {
            for q in 0..nq {
                rc.shared_fifo.push_back(lay.buf_id(q, i));
            }
        }
    }
    (slots, rc)
}

/// Each queue's packet rate in phase `k` (0 past the last phase or for a queue it omits).
fn rates_of(phases: &[Phase], nq: usize, k: usize) -> Vec<f64> {
    (0..nq)
        .map(|q| {
            phases
                .get(k)
                .and_then(|p| p.queue_pps.get(q))
                .copied()
                .unwrap_or(0.0)
        })
        .collect()
}

/// The wire: one packet every 1 / (total rate), each sent to a queue drawn at random by its
/// share. RSS hashes many flows over the queues, so a queue's arrivals are the wire's thinned
/// at random, not a clock of its own: queues drift apart in their rings as on a host.
/// (Per-queue clocks at equal rates keep every ring in lockstep, writing the same slot of
/// each ring at once, and their buffers' sets collide forever.)
struct Wire {
    gap: f64,
    /// Cumulative queue shares, the draw's thresholds.
    share_cum: Vec<f64>,
    /// Each queue's rate in the current phase.
    rates: Vec<f64>,
    /// Arrival n of the phase is at anchor + n x gap: computing from an anchor, not by
    /// summing gaps, keeps the times free of drift.
    anchor: f64,
    pkt_no: u64,
    /// Queue draws so far (the run's, not the phase's): the draw's counter.
    drawn: u64,
}

impl Wire {
    /// The wire at phase `k`'s rates, its arrivals counted from `anchor`.
    fn set_phase(&mut self, phases: &[Phase], nq: usize, k: usize, anchor: f64) {
        let r = rates_of(phases, nq, k);
        let tot: f64 = r.iter().sum();
        let mut acc = 0.0;
        self.share_cum = r
            .iter()
            .map(|p| {
                acc += if tot > 0.0 { p / tot } else { 0.0 };
                acc
            })
            .collect();
        self.gap = if tot > 0.0 { 1e9 / tot } else { f64::INFINITY };
        self.rates = r;
        self.anchor = anchor;
        self.pkt_no = 0;
    }

    /// The queue the next packet goes to: a hash of the seed and the draw's number, so a run
    /// is the same whatever else it does.
    #[inline]
    fn draw(&mut self, seed: u64, nq: usize) -> usize {
        self.drawn += 1;
        let u = (mix64(seed ^ self.drawn.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 11) as f64
            / (1u64 << 53) as f64;
        self.share_cum.partition_point(|c| *c <= u).min(nq - 1)
    }

    /// The time of the phase's next arrival.
    #[inline]
    fn next_time(&mut self) -> u64 {
        self.pkt_no += 1;
        (self.anchor + self.pkt_no as f64 * self.gap) as u64
    }
}

/// The state of one run of [`drive`]: the cache, the rings, the pool and the pending events.
/// One struct with a method per event, so each event's handling reads on its own while the
/// loop stays a plain match with no indirection.
struct Run<'a> {
    spec: &'a SimSpec,
    lay: Layout,
    flows: Vec<Vec<(u32, f64, u32)>>,
    llc: Llc,
    rec: Recorder,
    bg: BackgroundGen,
    rc: Recycler,
    /// Each descriptor's buffer, queue after queue.
    slots: Vec<u32>,
    qs: Vec<Queue>,
    heap: BinaryHeap<Item>,
    /// The next event's sequence number.
    seq: u64,
    /// The wire's next arrival (time, sequence) waits outside the heap: arrivals are one
    /// periodic stream, a third of all events, and a heap push and pop each cost more than
    /// the comparison with the heap's top that replaces them.
    next_arrival: Option<(u64, u64)>,
    wire: Wire,
    /// Smooth weighted round-robin state per queue, deterministic flow interleaving.
    wrr: Vec<Vec<f64>>,
    /// Where each flow's next copy lands in its socket buffer.
    user_off: Vec<u64>,
    /// Each queue's residence (ns), DMA to pickup (forward) or to the socket (copy).
    res_ns: Vec<f64>,
    /// Each flow's wait in its socket's receive queue before the copy (kernel stack).
    sock_ns: Vec<f64>,
    tx_ns: u64,
    batch: u64,
    tx_batch: usize,
}

impl<'a> Run<'a> {
    /// The run at start-up, with the first arrival and the phase boundaries scheduled.
    fn new(spec: &'a SimSpec, warm_ns: u64, phases: &[Phase], phase_end: &[u64]) -> Self {
        let lay = Layout::new(spec);
        let nq = lay.nq;
        let flows = spec.flow_table();
        let nf = flows
            .iter()
            .flatten()
            .map(|f| f.0 as usize + 1)
            .max()
            .unwrap_or(0);
        let opts: SimOptions = spec.sim_options(warm_ns);
        let llc = Llc::with_options(&spec.geometry, &opts);
        let rec = Recorder::new(nq, nf, &opts, llc.slice_fraction());
        let bg = BackgroundGen::new(&opts.background, opts.seed);
        let (slots, rc) = initial_buffers(spec, &lay);
        let qs = (0..nq)
            .map(|_| Queue {
                nic: 0,
                cpu: 0,
                posted_upto: lay.ring64,
                core_free: 0.0,
                tx_done: Vec::new(),
            })
            .collect();
        let res_ns = (0..nq)
            .map(|q| {
                (spec
                    .queue_residence_us
                    .get(q)
                    .copied()
                    .unwrap_or(spec.residence_us)
                    * 1e3)
                    .max(0.0)
            })
            .collect();
        let mut sock_ns = vec![0.0f64; nf];
        for (fid, w) in spec.socket_wait_ns().into_iter().flatten() {
            sock_ns[fid as usize] = w;
        }
        let mut wire = Wire {
            gap: f64::INFINITY,
            share_cum: Vec::new(),
            rates: Vec::new(),
            anchor: 0.0,
            pkt_no: 0,
            drawn: 0,
        };
        wire.set_phase(phases, nq, 0, 0.0);
        wire.anchor = wire.gap * 0.5;
        let mut run = Run {
            spec,
            wrr: flows.iter().map(|v| vec![0.0; v.len()]).collect(),
            flows,
            llc,
            rec,
            bg,
            rc,
            slots,
            qs,
            heap: BinaryHeap::with_capacity(nq * 64),
            seq: 0,
            next_arrival: None,
            user_off: vec![0u64; nf],
            res_ns,
            sock_ns,
            tx_ns: (spec.tx_delay_us * 1e3).max(0.0) as u64,
            batch: refill_batch(spec),
            tx_batch: spec.tx_free_batch.max(1) as usize,
            lay,
            wire,
        };
        if run.wire.gap.is_finite() {
            run.arrival_at(run.wire.anchor as u64);
        }
        for &e in phase_end.iter().take(phases.len().saturating_sub(1)) {
            run.schedule(e, Ev::Boundary, 0, 0, 0, 0);
        }
        run
    }

    /// Set the wire's next arrival at `t`.
    #[inline]
    fn arrival_at(&mut self, t: u64) {
        self.next_arrival = Some((t, self.seq));
        self.seq += 1;
    }

    /// Queue an event; the sequence number keeps ties in the order they were made.
    #[inline]
    fn schedule(&mut self, t: u64, ev: Ev, q: u32, f: u32, b: u32, bytes: u32) {
        self.heap.push(Reverse((t, self.seq, ev, q, f, b, bytes)));
        self.seq += 1;
    }

    /// The earliest pending event: the wire's next arrival or the heap's top, ties to the
    /// one made first.
    #[inline]
    fn next_event(&mut self) -> Option<(u64, Ev, u32, u32, u32, u32)> {
        let arrival_first = match (self.next_arrival, self.heap.peek()) {
            (Some(a), Some(Reverse(top))) => a < (top.0, top.1),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if arrival_first {
            self.next_arrival
                .take()
                .map(|(t, _)| (t, Ev::Arrive, 0, 0, 0, 0))
        } else {
            self.heap
                .pop()
                .map(|Reverse((t, _, ev, q, f, b, bytes))| (t, ev, q, f, b, bytes))
        }
    }

    /// One access through the LLC, recorded against its queue and flow.
    #[inline]
    fn touch(&mut self, t: u64, qi: usize, f: u32, addr: u64, len: u32, kind: AccessKind) {
        self.rec
            .touch(&mut self.llc, t, qi, f as usize, addr, len, kind);
    }

    /// Phase `k` starts at `t`: the wire switches to its rates. Arrivals at the old rate are
    /// dropped: the next one is at the new rate.
    fn next_phase(&mut self, t: u64, phases: &[Phase], k: usize) {
        self.wire.set_phase(phases, self.lay.nq, k, t as f64);
        self.next_arrival = None;
        if self.wire.gap.is_finite() {
            self.arrival_at(t);
        }
    }

    /// The flow of queue `qi`'s next packet, by smooth weighted round-robin over the flows'
    /// weights: (flow, packet bytes).
    #[inline]
    fn pick_flow(&mut self, qi: usize) -> (u32, u32) {
        let fv = &self.flows[qi];
        let wst = &mut self.wrr[qi];
        let tot: f64 = fv.iter().map(|x| x.1).sum();
        let mut best = 0;
        for (i, x) in fv.iter().enumerate() {
            wst[i] += x.1;
            if wst[i] > wst[best] {
                best = i;
            }
        }
        wst[best] -= tot;
        let (fid, _, pbytes) = fv[best];
        (fid, pbytes)
    }

    /// A packet reaches queue `qi` at `t`: the NIC writes it and its completion into the
    /// next posted descriptor (or drops it when none is posted), and the queue's core is
    /// booked to pick it up.
    fn arrive(&mut self, t: u64, qi: usize, measuring: bool) {
        let next_t = self.wire.next_time();
        self.arrival_at(next_t);
        let (fid, pbytes) = self.pick_flow(qi);
        let st = &mut self.qs[qi];
        if st.nic >= st.posted_upto {
            // No posted descriptor: the NIC drops (rx_missed / out-of-buffer).
            if measuring {
                self.rec.res.drops += 1;
            }
            return;
        }
        let slot = (st.nic % self.lay.ring64) as usize;
        st.nic += 1;
        let buf = self.slots[qi * self.lay.ring + slot];
        if measuring {
            self.rec.res.packets += 1;
        }
        let data = self.lay.data_addr(buf);
        self.touch(t, qi, fid, data, pbytes, AccessKind::IoWrite);
        self.rec.hand_up(t, qi, fid as usize, data, pbytes);
        if self.lay.cqe > 0 {
            let cq = self.lay.cq_addr(qi, slot);
            self.touch(t, qi, fid, cq, self.spec.cqe_bytes, AccessKind::IoWrite);
        }
        // The core serves its ring in order, one packet per service time.
        let spec = self.spec;
        let svc = spec.service_ns(pbytes);
        let st = &mut self.qs[qi];
        let (pickup, use_at) = match spec.consumer {
            Consumer::Forward => {
                let p = (t as f64 + self.res_ns[qi]).max(st.core_free);
                (p, p)
            }
            Consumer::Copy => {
                let p = (t as f64).max(st.core_free);
                let sock = self.sock_ns[fid as usize];
                (p, p.max(t as f64 + self.res_ns[qi]) + sock)
            }
        };
        st.core_free = pickup + svc;
        let q = qi as u32;
        self.schedule(pickup as u64, Ev::Pickup, q, fid, buf, pbytes);
        if spec.consumer == Consumer::Copy {
            self.schedule(use_at as u64, Ev::Copy, q, fid, buf, pbytes);
        }
    }

    /// Re-post queue `qi`'s consumed descriptors once a batch of them is free, as far as
    /// buffers allow.
    #[inline]
    fn repost(&mut self, qi: usize) {
        let ring64 = self.lay.ring64;
        let st = &mut self.qs[qi];
        if st.cpu + ring64 - st.posted_upto < self.batch {
            return;
        }
        while st.posted_upto < st.cpu + ring64 {
            let Some(b) = self.rc.pop(qi) else { break };
            self.slots[qi * self.lay.ring + (st.posted_upto % ring64) as usize] = b;
            st.posted_upto += 1;
        }
    }

    /// Queue `qi`'s core takes buffer `b` off the ring; a forwarding core reads and rewrites
    /// the header (MAC swap), then hands the packet to TX.
    fn pickup(&mut self, t: u64, qi: usize, f: u32, b: u32, bytes: u32) {
        self.qs[qi].cpu += 1;
        self.repost(qi);
        let spec = self.spec;
        if spec.consumer != Consumer::Forward {
            return;
        }
        let data = self.lay.data_addr(b);
        let touched = spec.touch_bytes.min(bytes);
        self.touch(t, qi, f, data, touched, AccessKind::CpuRead);
        self.touch(t, qi, f, data, HDR_BYTES.min(bytes), AccessKind::CpuWrite);
        // The lines its prefetchers pulled along make the same round trip through its L2 as
        // the written header, as far as the core's idle share lets them.
        let busy = self.wire.rates[qi] * spec.service_ns(bytes) / 1e9;
        let idle = 1.0 - busy.clamp(0.0, 1.0);
        let pulled =
            ((spec.prefetch_bytes as f64 * idle) as u32).min(bytes.saturating_sub(HDR_BYTES));
        if pulled > 0 {
            let at = data + HDR_BYTES as u64;
            self.touch(t, qi, f, at, pulled, AccessKind::CpuWrite);
        }
        self.schedule(t + self.tx_ns, Ev::TxRead, qi as u32, f, b, bytes);
    }

    /// The stack copies flow `f`'s packet into its socket buffer (wrapping at its end) and
    /// frees the packet's buffer.
    fn copy(&mut self, t: u64, qi: usize, f: u32, b: u32, bytes: u32) {
        let fi = f as usize;
        let data = self.lay.data_addr(b);
        self.touch(t, qi, f, data, bytes, AccessKind::CpuRead);
        let ub = self.spec.user_buf_bytes.max(64) as u64;
        let off = self.user_off[fi];
        let first = bytes.min((ub - off) as u32);
        let user = self.lay.user_base(f);
        self.touch(t, qi, f, user + off, first, AccessKind::CpuWrite);
        if first < bytes {
            self.touch(t, qi, f, user, bytes - first, AccessKind::CpuWrite);
        }
        self.user_off[fi] = (off + bytes as u64) % ub;
        if b < FRESH_ID || matches!(self.rc.mode, Mode::PagePool { .. }) {
            self.rc.push(qi, b);
        }
        self.repost(qi);
    }

    /// The NIC reads the packet for transmission; its buffer is freed with the TX batch's
    /// completions.
    fn tx_read(&mut self, t: u64, qi: usize, f: u32, b: u32, bytes: u32) {
        let data = self.lay.data_addr(b);
        self.touch(t, qi, f, data, bytes, AccessKind::IoRead);
        let st = &mut self.qs[qi];
        st.tx_done.push(b);
        if st.tx_done.len() >= self.tx_batch {
            for x in st.tx_done.drain(..) {
                self.rc.push(qi, x);
            }
        }
        self.repost(qi);
    }
}

/// The event loop behind [`simulate`] and [`simulate_phases`]: measurement starts at
/// `warm_ns`; phase k covers the k-th `duration_ns` after it.
fn drive(spec: &SimSpec, warm_ns: u64, phases: &[Phase]) -> Vec<SimResult> {
    let mut phase_end = Vec::with_capacity(phases.len());
    let mut end_ns = warm_ns;
    for p in phases {
        end_ns = end_ns.saturating_add(p.duration_ns);
        phase_end.push(end_ns);
    }
    let mut run = Run::new(spec, warm_ns, phases, &phase_end);
    let nq = run.lay.nq;
    let mut phase = 0usize;
    let mut out: Vec<SimResult> = Vec::with_capacity(phases.len());
    while let Some((t, ev, q, f, b, bytes)) = run.next_event() {
        if t > end_ns {
            break;
        }
        let qi = if ev == Ev::Arrive {
            run.wire.draw(spec.seed, nq)
        } else {
            q as usize
        };
        run.bg.advance(&mut run.llc, &mut run.rec.res, t);
        match ev {
            Ev::Boundary => {
                out.push(run.rec.cut());
                phase += 1;
                run.next_phase(t, phases, phase);
            }
            Ev::Arrive => run.arrive(t, qi, t >= warm_ns),
            Ev::Pickup => run.pickup(t, qi, f, b, bytes),
            Ev::Copy => run.copy(t, qi, f, b, bytes),
            Ev::TxRead => run.tx_read(t, qi, f, b, bytes),
        }
    }
    while out.len() < phases.len() {
        out.push(run.rec.cut());
    }
    for (r, p) in out.iter_mut().zip(phases) {
        r.measured_ns = p.duration_ns;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: &str) -> SimResult {
        simulate(&SimSpec::parse(spec).unwrap())
    }

    #[test]
    fn a_saturated_queue_keeps_its_ring_full_and_drops() {
        // One queue offered 100 Gb/s of 1500 B (8.2 Mpps) against a core that forwards 7.6:
        // the NIC drops the difference, every packet waits a whole ring, and what is evicted
        // while waiting misses on the TX read and then again on the next write.
        let r = run("queues=1,ring=4096,pkt_bytes=1500,rate_gbps=100,max_packets=1500000");
        let drop = r.drops as f64 / (r.drops + r.packets) as f64;
        let (w, rd) = (
            r.total.io_write_hit_pct().unwrap(),
            r.total.io_read_hit_pct().unwrap(),
        );
        println!(
            "saturated: {:.1}% dropped, write {w:.1}%, read {rd:.1}%",
            100.0 * drop
        );
        assert!((drop - (1.0 - 7.58 / 8.22)).abs() < 0.02, "{drop}");
        assert!(rd < 80.0 && (w - rd).abs() < 15.0, "write {w}, read {rd}");
        // Four cores for the same 4096 descriptors: nobody waits, TX reads hit.
        let r = run("queues=4,ring=1024,pkt_bytes=1500,rate_gbps=100,max_packets=1500000");
        assert_eq!(r.drops, 0);
        assert!(r.total.io_read_hit_pct().unwrap() > 99.0);
    }

    #[test]
    fn an_idle_cores_prefetched_lines_leave_the_ddio_ways_and_a_saturated_cores_do_not() {
        let hit = |spec: &str| run(spec).total.io_write_hit_pct().unwrap();
        // Sixteen cores at half a million packets each: mostly idle, so the lines their
        // prefetchers pulled along sit outside the DDIO ways and hit on the next write.
        let idle = "queues=16,ring=256,pkt_bytes=1500,rate_gbps=99.4,max_packets=1500000";
        let (with, without) = (hit(idle), hit(&format!("{idle},prefetch_bytes=0")));
        assert!(
            with > without + 5.0,
            "idle cores: {with} with prefetch, {without} without"
        );
        // One core offered more than it forwards: no idle share, no prefetch.
        let busy = "queues=1,ring=4096,pkt_bytes=1500,rate_gbps=99.4,max_packets=1500000";
        assert_eq!(hit(busy), hit(&format!("{busy},prefetch_bytes=0")));
    }

    #[test]
    fn buffers_in_circulation_are_the_ring_and_what_is_out() {
        // A slow copy consumer (2 ms of residence) needs that many packets' worth of spares;
        // with too few the ring runs dry and the NIC drops, as a real driver does.
        let ok = run("consumer=copy,queues=1,ring=256,pkt_bytes=1024,pps=1e6,residence_us=2000,pool_extra=4096,max_packets=200000");
        assert_eq!(ok.drops, 0);
        let short = run("consumer=copy,queues=1,ring=256,pkt_bytes=1024,pps=1e6,residence_us=2000,pool_extra=512,max_packets=200000");
        assert!(
            short.drops > short.packets,
            "{} drops, {} packets",
            short.drops,
            short.packets
        );
    }
}
