//! ddioscope: per-queue and per-flow Intel DDIO observability.
pub mod advise;
pub mod analysis;
pub mod attribution;
pub mod counters;
pub mod doctor;
pub mod live;
pub mod model;
pub mod probe;
pub mod record;
pub mod recording;
pub mod report;
pub mod serve;
pub mod snapshot;
pub mod top;
pub mod topology;
pub mod view;
pub mod windows;
