//! DDIO model: LLC geometry and the DDIO way mask, the analytic footprint / Little's-law model, the trace-driven LLC simulator, its synthetic workload driver and what-if grid, and calibration by the host's counters.

//!
//! Physical parameters (none fitted per case; docs/model.md says where each comes from):
//! * LLC: sets × ways of 64 B lines split into slices; set-in-slice = low line-address bits,
//!   slice = a hash that spreads a contiguous region evenly (`hash_evenness` 1).
//! * I/O full-line writes update in place on a hit in any way, else allocate only in the top
//!   `ddio_ways` ways; I/O reads never allocate; core fills use every way; a core's write to
//!   a DMA line moves it to the two inclusive ways (Skylake-SP and later).
//! * RX ring: a descriptor holds its buffer until the queue's core picks the packet up; the
//!   driver re-posts in batches of min(64, ring/4); TX completions free in batches of 32; the
//!   NIC drops when no descriptor is posted. Each queue's core serves one packet per
//!   27 ns + 0.0698 ns/B (the Gold 6140 testbed's single-queue forwarding rate).
//! * Buffers: DPDK mbuf stride 2368 B (packet at 320) in a contiguous hugepage pool; kernel
//!   (copy) 2048 B half pages at 256, scattered pages; recycling per queue (LIFO), shared,
//!   FIFO, or page_pool shares measured by a recording. One 64 B completion line per packet.
//! * Consumers: forward reads and rewrites the header line, its prefetchers pull the next
//!   `prefetch_bytes` (192) through its L2 in proportion to its idle share (both leave the
//!   DDIO ways for the inclusive ways), NIC TX reads the packet 2 µs later; copy reads the
//!   whole packet after the (measured) residence and writes it to a 256 KiB per-flow socket
//!   buffer.
//! * Verdicts use nominal capacity and the expected conflict-miss fraction
//!   (`analytic::expected_conflict_miss_fraction`); recommended rings target 0.45 × nominal
//!   (`analytic::USABLE_DDIO_FRACTION`).
//! * Presets: SKX Gold 6140 (24.75 MiB, 11 ways, 18 slices), BDW E5-2695 v4 (45 MiB, 20
//!   ways), EMR 8592+ (ASSUMED 320 MiB per socket, 20 ways, 64 slices, 2 DDIO ways).

pub mod analytic;
pub mod buffers;
pub mod cache;
pub mod calibrate;
pub mod drive;
pub mod geometry;
pub mod grid;
pub mod sim;
pub mod spec;

#[cfg(test)]
mod kernel_validation;
#[cfg(test)]
mod validation;

pub use analytic::{Dir, Verdict};
pub use calibrate::{calibrate, Calibration, CalibrationParams, Measured};
pub use geometry::{LlcGeometry, WaysSource};
pub use sim::{
    bench_lines_per_sec, simulate_trace, AccessKind, Background, BufferAccess, DramTraffic, HandUp,
    HitStats, MissEvent, Replacement, SimOptions, SimResult,
};
pub use spec::{
    simulate, simulate_phases, try_what_if, what_if, what_if_with_progress, Axes, Consumer,
    FlowSpec, GridPoint, Input, Phase, PoolLayout, Reuse, SimSpec, Source, SpecError, StackInputs,
    MODEL_VERSION,
};
