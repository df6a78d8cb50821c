//! DDIO model: LLC geometry and the DDIO way mask, the analytic footprint / Little's-law model, and the trace-driven LLC simulator with its synthetic workload driver.

pub mod analytic;
pub mod geometry;
pub mod sim;
pub mod spec;

#[cfg(test)]
mod validation;

pub use analytic::{Dir, Verdict};
pub use geometry::{LlcGeometry, WaysSource};
pub use sim::{bench_lines_per_sec, simulate_trace, AccessKind, Background, BufferAccess, HitStats, MissEvent, Replacement, SimOptions, SimResult};
pub use spec::{simulate, what_if, Consumer, FlowSpec, GridPoint, Reuse, SimSpec, SpecError};
