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
//! * A core writing a DMA-written line that sits in the DDIO ways moves it to the
//!   "inclusive" ways (the bottom two on Skylake-SP and later, IIO LLC WAYS' mirror image):
//!   the non-inclusive LLC hands the line to the core, and it comes back outside the DDIO
//!   ways. Reverse-engineered by the Double-Trouble DDIO+ experiments (a line written by
//!   the device, then the core, then the device again lives in ways 0-1) and reported by
//!   Park et al. (A4, 2025: "DMA-written cache lines in DCA ways are migrated to inclusive
//!   ways when accessed by CPU cores"). Only writes move a line here: the evidence for
//!   reads is the abstract alone.
//! * Sets within a slice are the low line-address bits; the slice comes from a hash of the
//!   whole address. How evenly that hash spreads a contiguous buffer pool over
//!   (slice, set) pairs is [`SimOptions::hash_evenness`]: 1 = every aligned block of
//!   `slices x sets_per_slice` lines covers each set exactly once (Intel's complex
//!   addressing is built to do this), 0 = independent uniform placement per line.
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
    /// LLC miss % of core reads of packet data (the copy's read miss rate).
    pub fn cpu_read_miss_pct(&self) -> Option<f64> {
        self.cpu_read_hit_pct().map(|h| 100.0 - h)
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
    fn record(&mut self, kind: AccessKind, hits: u64, misses: u64) {
        let (h, m) = match kind {
            AccessKind::IoWrite => (&mut self.io_write_hits, &mut self.io_write_misses),
            AccessKind::IoRead => (&mut self.io_read_hits, &mut self.io_read_misses),
            AccessKind::CpuRead => (&mut self.cpu_read_hits, &mut self.cpu_read_misses),
            AccessKind::CpuWrite => (&mut self.cpu_write_hits, &mut self.cpu_write_misses),
        };
        *h += hits;
        *m += misses;
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

/// One packet handed up by the driver (a synthetic run's arrival, where its buffer is written):
/// what the probes' buffer-page map is written from, for the address join's ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HandUp {
    pub t_ns: u64,
    pub queue: u32,
    pub flow: u32,
    /// The packet's data in its buffer.
    pub addr: u64,
    pub len: u32,
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
    /// Hand-ups in the measured window (synthetic runs), up to `SimOptions::miss_log_cap`.
    pub handups: Vec<HandUp>,
    /// Hand-ups that did not fit in `handups`.
    pub handups_dropped: u64,
    /// Cache-line accesses simulated (including warm-up and background).
    pub lines_simulated: u64,
    /// Background (other cores) line accesses simulated.
    pub background_lines: u64,
    /// Of those, the ones in the sampled slices, and the ones of these that missed: the
    /// share of the background's accesses that go to DRAM.
    #[serde(default)]
    pub background_sampled: u64,
    #[serde(default)]
    pub background_misses: u64,
    /// Fraction of slices simulated (set sampling); hit rates are unbiased estimates.
    pub slice_fraction: f64,
    /// Packets the NIC dropped because no posted descriptor was free (the core fell behind)
    /// or no buffer was left to post (synthetic runs only).
    pub drops: u64,
    /// Packets written by the NIC in the measured window (synthetic runs only).
    pub packets: u64,
    /// Simulated time the counts cover (synthetic runs; 0 where unknown).
    #[serde(default)]
    pub measured_ns: u64,
}

/// DRAM traffic the network causes, GB/s, from one set of counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DramTraffic {
    /// Lines fetched from DRAM: NIC reads and core reads that missed, and the reads for
    /// ownership of the copy's destination lines that missed.
    pub read_gbps: f64,
    /// Lines written back to DRAM: each line a DMA write or the copy allocates displaces a
    /// dirty line (the network's own), which goes back to DRAM; in steady state one write
    /// back per allocating miss.
    pub write_gbps: f64,
}

impl SimResult {
    /// The DRAM traffic of `stats` (the total, a queue's or a flow's counts of this
    /// result) in GB/s: miss lines × 64 B, scaled up from the sampled slices, over the
    /// measured time. None without a measured time.
    pub fn dram(&self, stats: &HitStats) -> Option<DramTraffic> {
        if self.measured_ns == 0 || self.slice_fraction <= 0.0 {
            return None;
        }
        let gbps = |lines: u64| lines as f64 * 64.0 / self.slice_fraction / self.measured_ns as f64;
        Some(DramTraffic {
            read_gbps: gbps(stats.io_read_misses + stats.cpu_read_misses + stats.cpu_write_misses),
            write_gbps: gbps(stats.io_write_misses + stats.cpu_write_misses),
        })
    }

    /// The socket's DRAM reads this result accounts for, GB/s: the network's, and those of a
    /// background of `background_lines_per_sec`. None without a measured time.
    pub fn socket_dram_read_gbps(&self, background_lines_per_sec: f64) -> Option<f64> {
        self.dram(&self.total)
            .map(|d| d.read_gbps + self.background_dram_read_gbps(background_lines_per_sec))
    }

    /// DRAM reads of the background load (`lines_per_sec` accesses a second, of which the
    /// share that missed in the simulation goes to DRAM), GB/s; 0 without one.
    pub fn background_dram_read_gbps(&self, lines_per_sec: f64) -> f64 {
        if self.background_sampled == 0 {
            return 0.0;
        }
        let miss = self.background_misses as f64 / self.background_sampled as f64;
        lines_per_sec * miss * 64.0 / 1e9
    }
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
    /// Share of lines placed by the even (permutation) mapping rather than independently
    /// at random; see the module documentation. 0..=1.
    pub hash_evenness: f64,
    /// Ways a core-touched DMA line migrates to (0 = no migration, the line stays put).
    pub inclusive_ways: u32,
}

/// Inclusive ways on Skylake-SP..Sapphire Rapids (Double-Trouble: mask 0x003; Park et al., A4).
pub const INCLUSIVE_WAYS: u32 = 2;
/// The slice hash spreads a contiguous region evenly (Intel's complex addressing).
pub const HASH_EVENNESS: f64 = 1.0;

impl SimOptions {
    /// The options the model runs with by default (what `SimSpec::new` gives).
    pub fn model_default() -> Self {
        SimOptions {
            hash_evenness: HASH_EVENNESS,
            inclusive_ways: INCLUSIVE_WAYS,
            ..SimOptions::default()
        }
    }
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
            hash_evenness: 0.0,
            inclusive_ways: 0,
        }
    }
}

#[inline(always)]
pub(crate) fn mix64(mut x: u64) -> u64 {
    // splitmix64 finaliser: stands in for the undocumented slice hash, which spreads
    // neighbouring lines and pages evenly over slices.
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A line's tag: the address bits above the set index folded to 32 bits, the low bit forced
/// on so that 0 marks an invalid way.
#[inline(always)]
fn fold_tag(hi: u64) -> u32 {
    ((hi ^ (hi >> 31)) as u32) << 1 | 1
}

/// A way drawn at random among `lo..lo + n`: one xorshift64* step of `state`, cheap and
/// deterministic for a given seed.
#[inline(always)]
fn random_way(state: &mut u64, lo: usize, n: usize) -> usize {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    lo + ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) as u128 * n as u128) >> 64) as usize
}

/// Entries of a 16-entry block equal to `value`, as a bit mask.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn scan16(block: &[u32], value: u32) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_loadu_si128, _mm_movemask_ps,
        _mm_set1_epi32,
    };
    assert!(block.len() >= 16);
    // SAFETY: SSE2 is part of the x86_64 baseline, so these intrinsics are always
    // available; the four unaligned 16-byte loads read block[0..16], in bounds (asserted).
    unsafe {
        let t = _mm_set1_epi32(value as i32);
        let p = block.as_ptr() as *const __m128i;
        let m = |k: usize| {
            _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(
                _mm_loadu_si128(p.add(k)),
                t,
            ))) as u32
        };
        m(0) | m(1) << 4 | m(2) << 8 | m(3) << 12
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn scan16(block: &[u32], value: u32) -> u32 {
    let mut m = 0u32;
    for (i, &t) in block[..16].iter().enumerate() {
        m |= ((t == value) as u32) << i;
    }
    m
}

/// The LLC state: flat arrays, `ways` entries per simulated set.
pub struct Llc {
    /// Entries per set in `tags`: 16 (or 32 above 16 ways), so a set is one aligned block
    /// compared in a single vector pass; ways beyond `ways` stay invalid forever.
    stride: usize,
    /// log2(stride).
    stride_shift: u32,
    /// Bit i set for each real way i.
    way_bits: u32,
    /// Candidate ways (mask, first, count) for core fills, DMA writes and migrations.
    all_ways: (u32, usize, usize),
    io_ways: (u32, usize, usize),
    incl_ways: (u32, usize, usize),
    io_first_way: usize,
    /// Ways `[0, inclusive_end)` receive DMA lines a core touched (0 = no migration).
    inclusive_end: usize,
    sets_per_slice: u64,
    sps_mask: Option<u64>,
    sps_bits: u32,
    slices: u64,
    slice_sample: u64,
    /// Lines whose placement hash falls below this use the even mapping (u64::MAX = all,
    /// 0 = none).
    even_below: u64,
    /// One-entry memo of the even mapping's (block, slice): packet lines arrive in runs.
    memo_block: u64,
    memo_slice: u64,
    /// Tag per way: the line address above the set-index bits, folded to 32 bits with the
    /// low bit forced on (0 = invalid). 32-bit tags halve the simulator's own memory
    /// traffic; a false match needs two lines of one set that agree in 31 folded bits.
    tags: Vec<u32>,
    /// Valid ways per set as a bit mask, so a miss finds a free way without scanning.
    valid: Vec<u32>,
    /// LRU stamp per way (empty unless `Replacement::Lru`).
    stamp: Vec<u64>,
    clock: u64,
    rng: u64,
    replacement: Replacement,
}

impl Llc {
    pub fn new(geom: &LlcGeometry, replacement: Replacement, slice_sample: u32, seed: u64) -> Self {
        let opts = SimOptions {
            replacement,
            slice_sample,
            seed,
            ..SimOptions::default()
        };
        Self::with_options(geom, &opts)
    }

    pub fn with_options(geom: &LlcGeometry, opts: &SimOptions) -> Self {
        let ways = geom.ways.max(1) as usize;
        let slices = geom.slices.unwrap_or(1).max(1) as u64;
        let sets_per_slice = (geom.sets as u64 / slices).max(1);
        let slice_sample = (opts.slice_sample.max(1) as u64).min(slices);
        let sim_slices = slices.div_ceil(slice_sample);
        let ways = ways.min(32);
        let stride = if ways <= 16 { 16 } else { 32 };
        let n = (sim_slices * sets_per_slice) as usize * stride;
        let ddio = (geom.ddio_ways.max(1) as usize).min(ways);
        let io_first_way = ways - ddio;
        // Migration needs somewhere to go that is not the DDIO ways themselves.
        let inclusive_end = if (opts.inclusive_ways as usize) <= io_first_way {
            opts.inclusive_ways as usize
        } else {
            0
        };
        let e = opts.hash_evenness.clamp(0.0, 1.0);
        let even_below = if e >= 1.0 {
            u64::MAX
        } else {
            (e * 18_446_744_073_709_551_616.0) as u64
        };
        Llc {
            stride,
            stride_shift: stride.trailing_zeros(),
            way_bits: if ways == 32 {
                u32::MAX
            } else {
                (1u32 << ways) - 1
            },
            all_ways: (
                if ways == 32 {
                    u32::MAX
                } else {
                    (1u32 << ways) - 1
                },
                0,
                ways,
            ),
            io_ways: (
                (if ways == 32 {
                    u32::MAX
                } else {
                    (1u32 << ways) - 1
                }) & !((1u32 << io_first_way) - 1),
                io_first_way,
                ways - io_first_way,
            ),
            incl_ways: ((1u32 << inclusive_end) - 1, 0, inclusive_end),
            io_first_way,
            inclusive_end,
            sets_per_slice,
            sps_mask: sets_per_slice
                .is_power_of_two()
                .then_some(sets_per_slice - 1),
            sps_bits: 64 - (sets_per_slice.max(1) - 1).leading_zeros(),
            slices,
            slice_sample,
            even_below,
            memo_block: u64::MAX,
            memo_slice: 0,
            tags: vec![0; n],
            valid: vec![0; n / stride],
            stamp: if opts.replacement == Replacement::Lru {
                vec![0; n]
            } else {
                Vec::new()
            },
            clock: 0,
            rng: opts.seed | 1,
            replacement: opts.replacement,
        }
    }

    /// Bytes of simulator state for a geometry and options (the tag array dominates).
    pub fn state_bytes(geom: &LlcGeometry, opts: &SimOptions) -> u64 {
        let slices = geom.slices.unwrap_or(1).max(1) as u64;
        let sets_per_slice = (geom.sets as u64 / slices).max(1);
        let sim_slices = slices.div_ceil((opts.slice_sample.max(1) as u64).min(slices));
        let per_way = if opts.replacement == Replacement::Lru {
            12
        } else {
            4
        };
        let stride = if geom.ways <= 16 { 16 } else { 32 };
        sim_slices * sets_per_slice * stride * per_way
    }

    pub fn slice_fraction(&self) -> f64 {
        self.slices.div_ceil(self.slice_sample) as f64 / self.slices as f64
    }

    #[inline(always)]
    fn slice_of(&mut self, line: u64) -> u64 {
        if self.slices == 1 {
            return 0;
        }
        if self.even_below == u64::MAX || (self.even_below != 0 && mix64(line) < self.even_below) {
            // Even mapping: consecutive blocks of `sets_per_slice` lines rotate through the
            // slices from a per-superblock offset, so each aligned superblock of
            // `slices x sets_per_slice` lines covers every (slice, set) once.
            self.even_slice(line >> self.sps_bits)
        } else {
            ((mix64(line) as u128 * self.slices as u128) >> 64) as u64
        }
    }

    /// The even mapping's slice of slice block `b`: consecutive blocks of `sets_per_slice`
    /// lines rotate through the slices from a per-superblock offset.
    #[inline(always)]
    fn even_slice(&mut self, b: u64) -> u64 {
        if b != self.memo_block {
            self.memo_block = b;
            self.memo_slice =
                (b % self.slices + mix64(b / self.slices) % self.slices) % self.slices;
        }
        self.memo_slice
    }

    /// Ways of the set at `base` holding `value`, as a bit mask. On x86_64 four SSE2
    /// compares cover a 16-way block (the simulator's inner loop); elsewhere a scalar pass.
    #[inline(always)]
    fn ways_equal(&self, base: usize, value: u32) -> u32 {
        let m = if self.stride == 16 {
            scan16(&self.tags[base..base + 16], value)
        } else {
            scan16(&self.tags[base..base + 16], value)
                | scan16(&self.tags[base + 16..base + 32], value) << 16
        };
        m & self.way_bits
    }

    /// Index of the set holding `line`, or None if its slice is not sampled.
    #[inline(always)]
    fn set_index(&mut self, line: u64) -> Option<usize> {
        let mut slice = self.slice_of(line);
        if self.slice_sample != 1 {
            if !slice.is_multiple_of(self.slice_sample) {
                return None;
            }
            slice /= self.slice_sample;
        }
        let set_in_slice = match self.sps_mask {
            Some(m) => line & m,
            None => line % self.sets_per_slice,
        };
        Some((slice * self.sets_per_slice + set_in_slice) as usize)
    }

    /// Access one line; returns Some(hit) or None when the line's slice is not simulated.
    #[inline(always)]
    pub fn access(&mut self, line: u64, kind: AccessKind) -> Option<bool> {
        let set = self.set_index(line)?;
        let hi = if self.sps_mask.is_some() {
            line >> self.sps_bits
        } else {
            line / self.sets_per_slice
        };
        Some(self.resolve(set, fold_tag(hi), kind))
    }

    /// Access lines `first..=last` in order, as [`Llc::access`] would one by one, calling
    /// `on_line(line, hit)` for each simulated line. Packets are runs of consecutive lines, and
    /// under the even slice mapping every line of one slice block shares its slice and tag and
    /// takes the next set: those are worked out once per block, not once per line.
    #[inline(always)]
    pub fn access_run(
        &mut self,
        first: u64,
        last: u64,
        kind: AccessKind,
        mut on_line: impl FnMut(u64, bool),
    ) {
        let Some(mask) = self
            .sps_mask
            .filter(|_| self.slices == 1 || self.even_below == u64::MAX)
        else {
            for line in first..=last {
                if let Some(hit) = self.access(line, kind) {
                    on_line(line, hit);
                }
            }
            return;
        };
        let mut line = first;
        while line <= last {
            let block = line >> self.sps_bits;
            let block_last = (((block + 1) << self.sps_bits) - 1).min(last);
            let mut slice = if self.slices == 1 {
                0
            } else {
                self.even_slice(block)
            };
            if self.slice_sample != 1 {
                if !slice.is_multiple_of(self.slice_sample) {
                    line = block_last + 1;
                    continue;
                }
                slice /= self.slice_sample;
            }
            let tag = fold_tag(block);
            let set0 = (slice * self.sets_per_slice + (line & mask)) as usize;
            let n = (block_last - line + 1) as usize;
            if self.stride == 16
                && self.replacement == Replacement::Random
                && kind != AccessKind::CpuWrite
            {
                self.segment16(set0, n, tag, kind, |k, hit| on_line(line + k as u64, hit));
            } else {
                for k in 0..n {
                    let hit = self.resolve(set0 + k, tag, kind);
                    on_line(line + k as u64, hit);
                }
            }
            line = block_last + 1;
        }
    }

    /// [`Llc::resolve`] on `n` consecutive sets from `set0`, all with `tag`, for the common
    /// case (16-entry sets, random replacement, no migration: not a core write), with the
    /// state the loop needs held in locals: the compiler cannot keep it in registers across
    /// the stores into `tags` by itself.
    #[inline(always)]
    fn segment16(
        &mut self,
        set0: usize,
        n: usize,
        tag: u32,
        kind: AccessKind,
        mut on_line: impl FnMut(usize, bool),
    ) {
        let (cand, lo, ways) = match kind {
            AccessKind::IoWrite => self.io_ways,
            _ => self.all_ways,
        };
        let way_bits = self.way_bits;
        let tags = &mut self.tags[set0 * 16..(set0 + n) * 16];
        let valid = &mut self.valid[set0..set0 + n];
        let mut rng = self.rng;
        for (k, (block, valid)) in tags.chunks_exact_mut(16).zip(valid.iter_mut()).enumerate() {
            if scan16(block, tag) & way_bits != 0 {
                on_line(k, true);
                continue;
            }
            if kind != AccessKind::IoRead {
                let free = !*valid & cand;
                let v = if free != 0 {
                    free.trailing_zeros() as usize
                } else {
                    random_way(&mut rng, lo, ways)
                };
                block[v] = tag;
                *valid |= 1u32 << v;
            }
            on_line(k, false);
        }
        self.rng = rng;
    }

    /// The access itself, once the line's set and tag are known.
    #[inline(always)]
    fn resolve(&mut self, set: usize, tag: u32, kind: AccessKind) -> bool {
        let base = set << self.stride_shift;
        let hit = self.ways_equal(base, tag);
        if hit != 0 {
            let found = hit.trailing_zeros() as usize;
            // A core writing a DMA line takes it into its L2; when it comes back it lands in
            // the inclusive ways (Double-Trouble: device write, core write, device write
            // leaves the line in ways 0-1). Reads leave the line where it is.
            if kind == AccessKind::CpuWrite && self.inclusive_end != 0 && found >= self.io_first_way
            {
                let v = self.victim(set, self.incl_ways);
                self.tags[base + found] = 0;
                self.valid[set] &= !(1u32 << found);
                self.tags[base + v] = tag;
                self.valid[set] |= 1u32 << v;
                self.touch_stamp(base + v);
            } else {
                self.touch_stamp(base + found);
            }
            return true;
        }
        let cand = match kind {
            AccessKind::IoRead => return false,
            AccessKind::IoWrite => self.io_ways,
            AccessKind::CpuRead | AccessKind::CpuWrite => self.all_ways,
        };
        let victim = self.victim(set, cand);
        self.tags[base + victim] = tag;
        self.valid[set] |= 1u32 << victim;
        self.touch_stamp(base + victim);
        false
    }

    #[inline(always)]
    fn touch_stamp(&mut self, i: usize) {
        if self.replacement == Replacement::Lru {
            self.clock += 1;
            self.stamp[i] = self.clock;
        }
    }

    /// A way among ways `lo..lo + n` (`cand` as a bit mask) to fill in `set`.
    #[inline(always)]
    fn victim(&mut self, set: usize, (cand, lo, n): (u32, usize, usize)) -> usize {
        // Invalid ways fill first under every policy.
        let f = !self.valid[set] & cand;
        if f != 0 {
            return f.trailing_zeros() as usize;
        }
        match self.replacement {
            Replacement::Lru => {
                let base = set << self.stride_shift;
                let mut best = lo;
                let mut bs = u64::MAX;
                for i in lo..lo + n {
                    let s = self.stamp[base + i];
                    if s < bs {
                        bs = s;
                        best = i;
                    }
                }
                best
            }
            Replacement::Random => random_way(&mut self.rng, lo, n),
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

    /// A packet handed up at `t_ns` (logged under the miss log's cap).
    pub fn hand_up(&mut self, t_ns: u64, q: usize, f: usize, addr: u64, len: u32) {
        if t_ns < self.warmup_ns || self.cap == 0 {
            return;
        }
        if self.res.handups.len() < self.cap {
            self.res.handups.push(HandUp {
                t_ns,
                queue: q as u32,
                flow: f as u32,
                addr,
                len,
            });
        } else {
            self.res.handups_dropped += 1;
        }
    }

    /// Run every line of `[addr, addr+len)` through the LLC.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn touch(
        &mut self,
        llc: &mut Llc,
        t_ns: u64,
        q: usize,
        f: usize,
        addr: u64,
        len: u32,
        kind: AccessKind,
    ) {
        if len == 0 {
            return;
        }
        let first = addr >> 6;
        let last = (addr + len as u64 - 1) >> 6;
        self.res.lines_simulated += last - first + 1;
        if t_ns < self.warmup_ns {
            llc.access_run(first, last, kind, |_, _| {});
            return;
        }
        let log = self.cap > 0
            && matches!(
                kind,
                AccessKind::IoWrite | AccessKind::IoRead | AccessKind::CpuRead
            );
        let (mut hits, mut misses) = (0u64, 0u64);
        let (cap, log_of, dropped) = (self.cap, &mut self.res.misses, &mut self.res.misses_dropped);
        llc.access_run(first, last, kind, |line, hit| {
            if hit {
                hits += 1;
                return;
            }
            misses += 1;
            if log {
                if log_of.len() < cap {
                    log_of.push(MissEvent {
                        t_ns,
                        queue: q as u32,
                        flow: f as u32,
                        line_addr: line << 6,
                        kind,
                    });
                } else {
                    *dropped += 1;
                }
            }
        });
        self.res.total.record(kind, hits, misses);
        self.res.per_queue[q].record(kind, hits, misses);
        self.res.per_flow[f].record(kind, hits, misses);
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
            if let Some(hit) = llc.access(self.base_line + off, AccessKind::CpuRead) {
                res.background_sampled += 1;
                res.background_misses += u64::from(!hit);
            }
        }
    }
}

/// Replay a recorded buffer stream (sorted by `t_ns`; unsorted input is replayed in the
/// order given). Queue and flow ids are used as dense indices.
pub fn simulate_trace(
    geom: &LlcGeometry,
    accesses: &[BufferAccess],
    opts: &SimOptions,
) -> SimResult {
    let nq = accesses
        .iter()
        .map(|a| a.queue as usize + 1)
        .max()
        .unwrap_or(0);
    let nf = accesses
        .iter()
        .map(|a| a.flow as usize + 1)
        .max()
        .unwrap_or(0);
    let mut llc = Llc::with_options(geom, opts);
    let mut rec = Recorder::new(nq, nf, opts, llc.slice_fraction());
    let mut bg = BackgroundGen::new(&opts.background, opts.seed);
    for a in accesses {
        bg.advance(&mut llc, &mut rec.res, a.t_ns);
        rec.touch(
            &mut llc,
            a.t_ns,
            a.queue as usize,
            a.flow as usize,
            a.addr,
            a.len,
            a.kind,
        );
    }
    rec.res
}

/// Simulated cache-line accesses per second on this core (single thread), measured on a
/// ring-overflow workload where most accesses miss (the expensive path), shaped as the
/// synthetic driver issues it: each 1500 B packet is one DMA write of 24 consecutive lines,
/// then a core read of its header line. One figure per pass of 20 M accesses, the cache
/// carried over from pass to pass.
pub fn bench_lines_per_sec(passes: usize) -> Vec<f64> {
    let geom = LlcGeometry::skx_gold_6140();
    let mut llc = Llc::with_options(
        &geom,
        &SimOptions {
            seed: 1,
            ..SimOptions::model_default()
        },
    );
    let ring_lines: u64 = 8 << 20 >> 6; // 8 MiB ring: larger than the 4.5 MiB DDIO ways
    const PKT_LINES: u64 = 24; // 1500 B at a line boundary
    const SLOT_LINES: u64 = 37; // the driver's 2368 B buffer stride
    let n: u64 = 20_000_000;
    let mut off = 0u64;
    (0..passes.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            let (mut hits, mut done) = (0u64, 0u64);
            while done < n {
                if off + SLOT_LINES > ring_lines {
                    off = 0;
                }
                let first = (1u64 << 24) + off;
                llc.access_run(
                    first,
                    first + PKT_LINES - 1,
                    AccessKind::IoWrite,
                    |_, hit| hits += hit as u64,
                );
                llc.access_run(first, first, AccessKind::CpuRead, |_, hit| {
                    hits += hit as u64
                });
                off += SLOT_LINES;
                done += PKT_LINES + 1;
            }
            let dt = start.elapsed().as_secs_f64().max(1e-9);
            std::hint::black_box(hits);
            done as f64 / dt
        })
        .collect()
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
    fn a_run_of_lines_is_the_same_as_its_lines_one_by_one() {
        // Every geometry and option the run path specialises on: 11 and 20 ways (16- and
        // 32-entry sets), LRU and random, the even and the independent slice hash, slice
        // sampling, migration on core writes. Runs cross slice blocks and overlap.
        for (geom, replacement, evenness, sample) in [
            (LlcGeometry::skx_gold_6140(), Replacement::Random, 1.0, 1),
            (LlcGeometry::skx_gold_6140(), Replacement::Lru, 1.0, 1),
            (LlcGeometry::skx_gold_6140(), Replacement::Random, 0.5, 1),
            (LlcGeometry::bdw_e5_2695v4(), Replacement::Random, 1.0, 1),
            (
                LlcGeometry::emr_platinum_8592(),
                Replacement::Random,
                1.0,
                8,
            ),
        ] {
            let opts = SimOptions {
                replacement,
                hash_evenness: evenness,
                slice_sample: sample,
                inclusive_ways: INCLUSIVE_WAYS,
                seed: 7,
                ..SimOptions::default()
            };
            let (mut one, mut run) = (
                Llc::with_options(&geom, &opts),
                Llc::with_options(&geom, &opts),
            );
            let kinds = [
                AccessKind::IoWrite,
                AccessKind::IoWrite,
                AccessKind::IoRead,
                AccessKind::CpuRead,
                AccessKind::CpuWrite,
            ];
            let mut x = 1u64;
            for i in 0..40_000u64 {
                x = mix64(x + i);
                let first = (1 << 20) + x % (1 << 17);
                let last = first + x % 40;
                let kind = kinds[(x >> 40) as usize % kinds.len()];
                let expect: Vec<(u64, bool)> = (first..=last)
                    .filter_map(|l| one.access(l, kind).map(|h| (l, h)))
                    .collect();
                let mut got = Vec::new();
                run.access_run(first, last, kind, |l, h| got.push((l, h)));
                assert_eq!(
                    got, expect,
                    "{} ways, {replacement:?}, evenness {evenness}, run {first}..={last} {kind:?}",
                    geom.ways
                );
            }
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
            tr.push(BufferAccess {
                t_ns: i * 10,
                queue: 0,
                flow: 0,
                addr: (i % 2) * 64 * 64,
                len: 64,
                kind: AccessKind::CpuRead,
            });
            tr.push(BufferAccess {
                t_ns: i * 10 + 5,
                queue: 1,
                flow: 2,
                addr: 64 + (i % 3) * 64 * 64,
                len: 64,
                kind: AccessKind::IoWrite,
            });
        }
        let opts = SimOptions {
            replacement: Replacement::Lru,
            miss_log_cap: 100,
            ..Default::default()
        };
        let r = simulate_trace(&g, &tr, &opts);
        assert_eq!(r.per_queue.len(), 2);
        assert_eq!(r.per_flow.len(), 3);
        assert_eq!(r.per_queue[0].cpu_read_misses, 2);
        assert_eq!(r.per_queue[0].cpu_read_hits, 6);
        assert_eq!(r.per_flow[2].io_write_misses, 8);
        assert!(r
            .misses
            .iter()
            .all(|m| (m.queue, m.flow) == (0, 0) || (m.queue, m.flow) == (1, 2)));
        assert_eq!(r.misses.len(), 10);
    }

    #[test]
    fn a_core_write_moves_a_dma_line_to_the_inclusive_ways() {
        // 1 set x 4 ways: ways 0-1 inclusive, way 3 DDIO.
        let g = LlcGeometry {
            size_bytes: 4 * 64,
            ways: 4,
            sets: 1,
            line_bytes: 64,
            slices: Some(1),
            ddio_ways: 1,
            ddio_ways_source: super::super::geometry::WaysSource::Override,
        };
        let opts = SimOptions {
            inclusive_ways: 2,
            ..SimOptions::default()
        };
        let mut llc = Llc::with_options(&g, &opts);
        assert_eq!(llc.access(0, AccessKind::IoWrite), Some(false));
        assert_eq!(
            llc.tags.iter().position(|&t| t != 0),
            Some(3),
            "DMA allocates in the DDIO way"
        );
        // A read leaves it there; a write takes it to ways 0-1 and frees the DDIO way.
        assert_eq!(llc.access(0, AccessKind::CpuRead), Some(true));
        assert_ne!(llc.tags[3], 0);
        assert_eq!(llc.access(0, AccessKind::CpuWrite), Some(true));
        assert_eq!(llc.tags[3], 0);
        assert!(llc.tags[0] != 0 || llc.tags[1] != 0);
        // The next DMA write updates it in place (a hit), and a new DMA line gets the free
        // DDIO way without evicting it.
        assert_eq!(llc.access(0, AccessKind::IoWrite), Some(true));
        assert_eq!(llc.access(1, AccessKind::IoWrite), Some(false));
        assert_eq!(llc.access(0, AccessKind::IoRead), Some(true));
        // Without inclusive ways the line stays put.
        let mut flat = Llc::new(&g, Replacement::Random, 1, 1);
        flat.access(0, AccessKind::IoWrite);
        flat.access(0, AccessKind::CpuWrite);
        assert_ne!(flat.tags[3], 0);
    }

    #[test]
    fn the_even_hash_covers_every_set_once_per_superblock() {
        // 4 slices x 64 sets x 2 ways: any aligned 256-line block fills each set exactly once.
        let g = LlcGeometry {
            size_bytes: 4 * 64 * 2 * 64,
            ways: 2,
            sets: 256,
            line_bytes: 64,
            slices: Some(4),
            ddio_ways: 2,
            ddio_ways_source: super::super::geometry::WaysSource::Override,
        };
        let count = |evenness: f64| {
            let mut llc = Llc::with_options(
                &g,
                &SimOptions {
                    hash_evenness: evenness,
                    ..SimOptions::default()
                },
            );
            let mut per_set = vec![0u32; 256];
            for line in 5 * 256..6 * 256u64 {
                per_set[llc.set_index(line).unwrap()] += 1;
            }
            per_set
        };
        assert!(count(1.0).iter().all(|&c| c == 1));
        // Independent placement piles some sets up (Poisson: about 8% hold three or more).
        let random = count(0.0);
        assert!(
            random.iter().filter(|&&c| c == 0).count() > 50 && random.iter().any(|&c| c >= 3),
            "{random:?}"
        );
    }
}
