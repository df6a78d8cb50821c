//! DDIO model: LLC geometry and the DDIO way mask, the analytic footprint / Little's-law model, and the trace-driven LLC simulator with its synthetic workload driver.

//!
//! Assumptions and physical parameters (none fitted per case):
//! * LLC: sets × ways of 64 B lines, split into slices (sysfs sets / 2048 on SKX-style
//!   parts); set-in-slice = low line-address bits, slice = mixing hash of the line address.
//! * I/O full-line writes update in place on a hit in any way, else allocate only in the top
//!   `ddio_ways` ways; I/O reads never allocate; core fills use every way (and so press on
//!   the DDIO ways). Replacement: random among candidate ways (Intel's adaptive policies
//!   do not thrash all-or-nothing like LRU on ring streams).
//! * Buffers: DPDK mbuf stride 2368 B, packet at offset 320; kernel (copy) half-page 2048 B,
//!   offset 256. One 64 B completion line per packet. Reuse: per-queue recycling (default),
//!   shared LIFO, or FIFO over the whole pool; spare buffers per queue `pool_extra` (512).
//! * Consumers: forward reads+rewrites the header line, NIC TX reads the packet 2 µs later;
//!   copy reads the whole packet and writes it to a 256 KiB per-flow socket buffer.
//! * Usable DDIO capacity = 0.45 × nominal (`analytic::USABLE_DDIO_FRACTION`), the target for
//!   recommended rings; verdicts use nominal capacity and the expected conflict-miss fraction
//!   (`analytic::expected_conflict_miss_fraction`).
//! * Presets: SKX Gold 6140 (24.75 MiB, 11 ways, 18 slices), BDW E5-2695 v4 (45 MiB, 20
//!   ways), EMR 8592+ (ASSUMED 320 MiB per socket, 20 ways, 64 slices, 2 DDIO ways).

pub mod analytic;
pub mod geometry;
pub mod sim;
pub mod spec;

#[cfg(test)]
mod validation;

pub use analytic::{Dir, Verdict};
pub use geometry::{LlcGeometry, WaysSource};
pub use sim::{bench_lines_per_sec, simulate_trace, AccessKind, Background, BufferAccess, HitStats, MissEvent, Replacement, SimOptions, SimResult};
pub use spec::{simulate, simulate_phases, what_if, Consumer, FlowSpec, GridPoint, Phase, Reuse, SimSpec, SpecError};
