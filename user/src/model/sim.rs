//! Trace-driven LLC simulator: set-associative, sliced LLC with DDIO way-restricted I/O write allocation, CPU consumers, buffer reuse, background pressure; per-queue / per-flow hit and miss accounting.
//!
//! Physical model (each choice is a property of the hardware, none is fitted per case):
//! * 64 B lines; `sets / slices` sets per slice indexed by the low physical-address bits
//!   above the line offset; the slice chosen by a hash of the whole line address (Intel's
//!   "complex addressing", approximated by a strong mixing hash).
//! * I/O full-line writes (ItoM): a hit anywhere in the set updates the line in place; a
//!   miss allocates only into the top `ddio_ways` ways (IIO LLC WAYS mask).
//! * I/O reads (PCIRdCur, NIC TX): hit or miss, never allocate.
//! * CPU reads/writes allocate into any way (a core's fills and L2 victims are not
//!   restricted by the DDIO mask) and so compete with I/O lines in the DDIO ways.
//! * Replacement inside the candidate ways: see [`Replacement`].

use serde::{Deserialize, Serialize};

use super::geometry::LlcGeometry;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessKind {
    /// NIC DMA write of packet data (ItoM when a full line).
    IoWrite,
    /// NIC DMA read (TX payload, PCIRdCur).
    IoRead,
    /// Core load (header parse, copy source).
    CpuRead,
    /// Core store (header rewrite, copy destination).
    CpuWrite,
}

/// One recorded buffer touch, as produced by the RX/TX probes (addresses are physical or at
/// least page-consistent; only their line index and slice hash matter).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BufferAccess {
    pub t_ns: u64,
    pub queue: u32,
    pub flow: u32,
    pub addr: u64,
    pub len: u32,
    pub kind: AccessKind,
}

/// Replacement among the candidate ways of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Replacement {
    /// True LRU.
    Lru,
    /// Random victim. Intel server LLCs use undocumented adaptive pseudo-LRU policies
    /// whose behaviour on cyclic (ring) streams that overflow a set is close to random
    /// replacement: some lines survive instead of LRU's all-or-nothing thrash. This is
    /// the default because it reproduces the measured gradual fall-off of DDIO hits.
    #[default]
    Random,
}

/// Hit/miss counters for one queue, one flow, or the total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HitStats {
    pub io_write_hits: u64,
    pub io_write_misses: u64,
    pub io_read_hits: u64,
    pub io_read_misses: u64,
    pub cpu_read_hits: u64,
    pub cpu_read_misses: u64,
    pub cpu_write_hits: u64,
    pub cpu_write_misses: u64,
}

fn pct(h: u64, m: u64) -> Option<f64> {
    if h + m == 0 {
        None
    } else {
        Some(100.0 * h as f64 / (h + m) as f64)
    }
}

impl HitStats {
    /// DDIO write (ItoM) hit % — the quantity CHA TOR IO_HIT_ITOM / IO_ITOM measures.
    pub fn io_write_hit_pct(&self) -> Option<f64> {
        pct(self.io_write_hits, self.io_write_misses)
    }
    /// NIC TX read (PCIRdCur) hit %.
    pub fn io_read_hit_pct(&self) -> Option<f64> {
        pct(self.io_read_hits, self.io_read_misses)
    }
    /// LLC hit % of core reads of packet data.
    pub fn cpu_read_hit_pct(&self) -> Option<f64> {
        pct(self.cpu_read_hits, self.cpu_read_misses)
    }
    pub fn add(&mut self, o: &HitStats) {
        self.io_write_hits += o.io_write_hits;
        self.io_write_misses += o.io_write_misses;
        self.io_read_hits += o.io_read_hits;
        self.io_read_misses += o.io_read_misses;
        self.cpu_read_hits += o.cpu_read_hits;
        self.cpu_read_misses += o.cpu_read_misses;
        self.cpu_write_hits += o.cpu_write_hits;
        self.cpu_write_misses += o.cpu_write_misses;
    }
    #[inline(always)]
    fn record(&mut self, kind: AccessKind, hit: bool) {
        let (h, m) = match kind {
            AccessKind::IoWrite => (&mut self.io_write_hits, &mut self.io_write_misses),
            AccessKind::IoRead => (&mut self.io_read_hits, &mut self.io_read_misses),
            AccessKind::CpuRead => (&mut self.cpu_read_hits, &mut self.cpu_read_misses),
            AccessKind::CpuWrite => (&mut self.cpu_write_hits, &mut self.cpu_write_misses),
        };
        if hit {
            *h += 1
        } else {
            *m += 1
        }
    }
}

/// One miss with its labels, for attribution ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MissEvent {
    pub t_ns: u64,
    pub queue: u32,
    pub flow: u32,
    pub line_addr: u64,
    pub kind: AccessKind,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    pub total: HitStats,
    /// Indexed by queue id (dense, 0..max queue id).
    pub per_queue: Vec<HitStats>,
    /// Indexed by flow id (dense, 0..max flow id).
    pub per_flow: Vec<HitStats>,
    /// Misses in the measured window, up to `SimOptions::miss_log_cap`.
    pub misses: Vec<MissEvent>,
    /// Misses that did not fit in `misses`.
    pub misses_dropped: u64,
    /// Cache-line accesses simulated (including warm-up and background).
    pub lines_simulated: u64,
    /// Background (other cores) line accesses simulated.
    pub background_lines: u64,
    /// Fraction of slices simulated (set sampling); hit rates are unbiased estimates.
    pub slice_fraction: f64,
    /// Packets dropped because no free buffer was available (synthetic runs only).
    pub drops: u64,
}

/// Cache pressure from the rest of the socket (other cores, other devices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Background {
    /// Line fills per second from other cores that reach the LLC.
    pub lines_per_sec: f64,
    /// Their working set; accesses are spread uniformly over it.
    pub working_set_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimOptions {
    pub replacement: Replacement,
    /// Simulate one slice in `slice_sample` (set sampling, to keep huge LLCs cheap). 1 = all.
    pub slice_sample: u32,
    pub background: Background,
    /// Accesses before this time warm the cache and are not counted.
    pub warmup_ns: u64,
    pub miss_log_cap: usize,
    pub seed: u64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            replacement: Replacement::Random,
            slice_sample: 1,
            background: Background::default(),
            warmup_ns: 0,
            miss_log_cap: 0,
            seed: 0x0dd1_05c0_9e00_0001,
        }
    }
}

#[inline(always)]
fn mix64(mut x: u64) -> u64 {
    // splitmix64 finaliser: stands in for the undocumented slice hash, which spreads
    // neighbouring lines and pages evenly over slices.
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The LLC state: flat arrays, `ways` entries per simulated set.
pub struct Llc {
    ways: usize,
    io_first_way: usize,
    sets_per_slice: u64,
    sps_mask: Option<u64>,
    slices: u64,
    slice_sample: u64,
    /// Tag per way: the line address above the set-index bits, folded to 32 bits with the
    /// low bit forced on (0 = invalid). 32-bit tags halve the simulator's own memory
    /// traffic; a false match needs two lines of one set that agree in 31 folded bits.
    tags: Vec<u32>,
    /// LRU stamp per way (empty unless `Replacement::Lru`).
    stamp: Vec<u64>,
    sps_bits: u32,
    clock: u64,
    rng: u64,
    replacement: Replacement,
}

impl Llc {
    pub fn new(geom: &LlcGeometry, replacement: Replacement, slice_sample: u32, seed: u64) -> Self {
        let ways = geom.ways.max(1) as usize;
        let slices = geom.slices.unwrap_or(1).max(1) as u64;
        let sets_per_slice = (geom.sets as u64 / slices).max(1);
        let slice_sample = (slice_sample.max(1) as u64).min(slices);
        let sim_slices = slices.div_ceil(slice_sample);
        let n = (sim_slices * sets_per_slice) as usize * ways;
        let ddio = (geom.ddio_ways.max(1) as usize).min(ways);
        Llc {
            ways,
            io_first_way: ways - ddio,
            sets_per_slice,
            sps_mask: sets_per_slice.is_power_of_two().then_some(sets_per_slice - 1),
            slices,
            slice_sample,
            tags: vec![0; n],
            stamp: if replacement == Replacement::Lru { vec![0; n] } else { Vec::new() },
            sps_bits: 64 - (sets_per_slice.max(1) - 1).leading_zeros(),
            clock: 0,
            rng: seed | 1,
            replacement,
        }
    }

    pub fn slice_fraction(&self) -> f64 {
        self.slices.div_ceil(self.slice_sample) as f64 / self.slices as f64
    }

    /// Index of the first way of the set holding `line`, or None if its slice is not sampled.
    #[inline(always)]
    fn set_base(&self, line: u64) -> Option<usize> {
        let slice = if self.slices == 1 {
            0
        } else {
            ((mix64(line) as u128 * self.slices as u128) >> 64) as u64
        };
        if slice % self.slice_sample != 0 {
            return None;
        }
        let set_in_slice = match self.sps_mask {
            Some(m) => line & m,
            None => line % self.sets_per_slice,
        };
        let set = (slice / self.slice_sample) * self.sets_per_slice + set_in_slice;
        Some(set as usize * self.ways)
    }

    #[inline(always)]
    fn next_rand(&mut self) -> u64 {
        // xorshift64*: cheap and deterministic for a given seed.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Access one line; returns Some(hit) or None when the line's slice is not simulated.
    #[inline(always)]
    pub fn access(&mut self, line: u64, kind: AccessKind) -> Option<bool> {
        let base = self.set_base(line)?;
        let hi = if self.sps_mask.is_some() { line >> self.sps_bits } else { line / self.sets_per_slice };
        let tag = ((hi ^ (hi >> 31)) as u32) << 1 | 1;
        self.clock += 1;
        let w = self.ways;
        let set_tags = &self.tags[base..base + w];
        let mut found = usize::MAX;
        for (i, &t) in set_tags.iter().enumerate() {
            if t == tag {
                found = i;
            }
        }
        if found != usize::MAX {
            if self.replacement == Replacement::Lru {
                self.stamp[base + found] = self.clock;
            }
            return Some(true);
        }
        let (lo, hi) = match kind {
            AccessKind::IoRead => return Some(false),
            AccessKind::IoWrite => (self.io_first_way, w),
            AccessKind::CpuRead | AccessKind::CpuWrite => (0, w),
        };
        let victim = self.victim(base, lo, hi);
        self.tags[base + victim] = tag;
        if self.replacement == Replacement::Lru {
            self.stamp[base + victim] = self.clock;
        }
        Some(false)
    }

    #[inline(always)]
    fn victim(&mut self, base: usize, lo: usize, hi: usize) -> usize {
        // Invalid ways fill first under every policy.
        for i in lo..hi {
            if self.tags[base + i] == 0 {
                return i;
            }
        }
        match self.replacement {
            Replacement::Lru => {
                let mut best = lo;
                let mut bs = u64::MAX;
                for i in lo..hi {
                    let s = self.stamp[base + i];
                    if s < bs {
                        bs = s;
                        best = i;
                    }
                }
                best
            }
            Replacement::Random => {
                let n = (hi - lo) as u64;
                lo + ((self.next_rand() as u128 * n as u128) >> 64) as usize
            }
        }
    }
}

/// Accumulates results; shared by the trace and synthetic drivers.
pub(crate) struct Recorder {
    pub res: SimResult,
    pub warmup_ns: u64,
    pub cap: usize,
}

impl Recorder {
    pub fn new(nq: usize, nf: usize, opts: &SimOptions, slice_fraction: f64) -> Self {
        Recorder {
            res: SimResult {
                per_queue: vec![HitStats::default(); nq],
                per_flow: vec![HitStats::default(); nf],
                slice_fraction,
                ..Default::default()
            },
            warmup_ns: opts.warmup_ns,
            cap: opts.miss_log_cap,
        }
    }

    /// Hand over the results so far and start counting afresh (next phase of a run).
    pub fn cut(&mut self) -> SimResult {
        let fresh = SimResult {
            per_queue: vec![HitStats::default(); self.res.per_queue.len()],
            per_flow: vec![HitStats::default(); self.res.per_flow.len()],
            slice_fraction: self.res.slice_fraction,
            ..Default::default()
        };
        std::mem::replace(&mut self.res, fresh)
    }

    /// Run every line of `[addr, addr+len)` through the LLC.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn touch(&mut self, llc: &mut Llc, t_ns: u64, q: usize, f: usize, addr: u64, len: u32, kind: AccessKind) {
        if len == 0 {
            return;
        }
        let first = addr >> 6;
        let last = (addr + len as u64 - 1) >> 6;
        let count = t_ns >= self.warmup_ns;
        for line in first..=last {
            self.res.lines_simulated += 1;
            let Some(hit) = llc.access(line, kind) else { continue };
            if !count {
                continue;
            }
            self.res.total.record(kind, hit);
            self.res.per_queue[q].record(kind, hit);
            self.res.per_flow[f].record(kind, hit);
            if !hit && matches!(kind, AccessKind::IoWrite | AccessKind::IoRead | AccessKind::CpuRead) {
                if self.res.misses.len() < self.cap {
                    self.res.misses.push(MissEvent { t_ns, queue: q as u32, flow: f as u32, line_addr: line << 6, kind });
                } else {
                    self.res.misses_dropped += 1;
                }
            }
        }
    }
}

/// Generates other cores' line fills at a constant rate over a working set.
pub(crate) struct BackgroundGen {
    per_ns: f64,
    owed: f64,
    last_t: u64,
    lines: u64,
    state: u64,
    base_line: u64,
}

impl BackgroundGen {
    pub fn new(bg: &Background, seed: u64) -> Self {
        BackgroundGen {
            per_ns: bg.lines_per_sec.max(0.0) / 1e9,
            owed: 0.0,
            last_t: 0,
            lines: (bg.working_set_bytes / 64).max(1),
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            // Far away from any buffer region the synthetic driver lays out.
            base_line: 1u64 << 40,
        }
    }

    /// Issue the background accesses owed up to time `t_ns`.
    #[inline(always)]
    pub fn advance(&mut self, llc: &mut Llc, res: &mut SimResult, t_ns: u64) {
        if self.per_ns <= 0.0 || t_ns <= self.last_t {
            return;
        }
        self.owed += (t_ns - self.last_t) as f64 * self.per_ns;
        self.last_t = t_ns;
        while self.owed >= 1.0 {
            self.owed -= 1.0;
            self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let off = ((mix64(self.state) as u128 * self.lines as u128) >> 64) as u64;
            res.lines_simulated += 1;
            res.background_lines += 1;
            let _ = llc.access(self.base_line + off, AccessKind::CpuRead);
        }
    }
}

/// Replay a recorded buffer stream (sorted by `t_ns`; unsorted input is replayed in the
/// order given). Queue and flow ids are used as dense indices.
pub fn simulate_trace(geom: &LlcGeometry, accesses: &[BufferAccess], opts: &SimOptions) -> SimResult {
    let nq = accesses.iter().map(|a| a.queue as usize + 1).max().unwrap_or(0);
    let nf = accesses.iter().map(|a| a.flow as usize + 1).max().unwrap_or(0);
    let mut llc = Llc::new(geom, opts.replacement, opts.slice_sample, opts.seed);
    let mut rec = Recorder::new(nq, nf, opts, llc.slice_fraction());
    let mut bg = BackgroundGen::new(&opts.background, opts.seed);
    for a in accesses {
        bg.advance(&mut llc, &mut rec.res, a.t_ns);
        rec.touch(&mut llc, a.t_ns, a.queue as usize, a.flow as usize, a.addr, a.len, a.kind);
    }
    rec.res
}

/// Simulated cache-line accesses per second on this core (single thread), measured on a
/// ring-overflow workload where most accesses miss (the expensive path).
pub fn bench_lines_per_sec() -> f64 {
    let geom = LlcGeometry::skx_gold_6140();
    let mut llc = Llc::new(&geom, Replacement::Random, 1, 1);
    let ring_lines: u64 = 8 << 20 >> 6; // 8 MiB ring: larger than the 4.5 MiB DDIO ways
    let n: u64 = 20_000_000;
    let start = std::time::Instant::now();
    let mut hits = 0u64;
    let mut off = 0u64;
    for i in 0..n {
        off += 1;
        if off == ring_lines {
            off = 0;
        }
        let kind = if i & 15 == 0 { AccessKind::CpuRead } else { AccessKind::IoWrite };
        if llc.access((1u64 << 24) + off, kind) == Some(true) {
            hits += 1;
        }
    }
    let dt = start.elapsed().as_secs_f64().max(1e-9);
    std::hint::black_box(hits);
    n as f64 / dt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_geom(ddio: u32) -> LlcGeometry {
        // 64 sets x 4 ways, one slice: small enough to reason about exactly.
        LlcGeometry {
            size_bytes: 64 * 4 * 64,
            ways: 4,
            sets: 64,
            line_bytes: 64,
            slices: Some(1),
            ddio_ways: ddio,
            ddio_ways_source: super::super::geometry::WaysSource::Override,
        }
    }

    #[test]
    fn io_write_allocates_only_in_ddio_ways() {
        let g = small_geom(1);
        let mut llc = Llc::new(&g, Replacement::Lru, 1, 1);
        // Two lines in the same set (stride = 64 sets): with one DDIO way the second
        // write evicts the first.
        assert_eq!(llc.access(0, AccessKind::IoWrite), Some(false));
        assert_eq!(llc.access(64, AccessKind::IoWrite), Some(false));
        assert_eq!(llc.access(0, AccessKind::IoWrite), Some(false));
        // A CPU fill goes to any way, so a later I/O write to it updates in place.
        assert_eq!(llc.access(128, AccessKind::CpuRead), Some(false));
        assert_eq!(llc.access(128, AccessKind::IoWrite), Some(true));
        // I/O reads never allocate.
        assert_eq!(llc.access(192, AccessKind::IoRead), Some(false));
        assert_eq!(llc.access(192, AccessKind::IoRead), Some(false));
    }

    #[test]
    fn trace_labels_misses_per_queue_and_flow() {
        let g = small_geom(1);
        let mut tr = Vec::new();
        for i in 0..8u64 {
            // queue 0/flow 0 cycles 2 lines of one set (fits); queue 1/flow 2 cycles 3
            // lines in another set through one way (always misses).
            tr.push(BufferAccess { t_ns: i * 10, queue: 0, flow: 0, addr: (i % 2) * 64 * 64, len: 64, kind: AccessKind::CpuRead });
            tr.push(BufferAccess { t_ns: i * 10 + 5, queue: 1, flow: 2, addr: 64 + (i % 3) * 64 * 64, len: 64, kind: AccessKind::IoWrite });
        }
        let opts = SimOptions { replacement: Replacement::Lru, miss_log_cap: 100, ..Default::default() };
        let r = simulate_trace(&g, &tr, &opts);
        assert_eq!(r.per_queue.len(), 2);
        assert_eq!(r.per_flow.len(), 3);
        assert_eq!(r.per_queue[0].cpu_read_misses, 2);
        assert_eq!(r.per_queue[0].cpu_read_hits, 6);
        assert_eq!(r.per_flow[2].io_write_misses, 8);
        assert!(r.misses.iter().all(|m| (m.queue, m.flow) == (0, 0) || (m.queue, m.flow) == (1, 2)));
        assert_eq!(r.misses.len(), 10);
    }

    #[test]
    fn bench_is_positive() {
        assert!(bench_lines_per_sec() > 0.0);
    }
}
