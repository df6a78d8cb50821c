//! ddioscope: per-queue and per-flow Intel DDIO observability.
//!
//! The modules in the order the data flows: the kernel's view (`probe`) and the host's
//! (`topology`, `counters`) feed a live `session`, whose snapshots a `recording` keeps;
//! `analysis` turns a recording into evidence, attribution and advice (with `model`,
//! `attribution`, `advise`), `report` renders it, and the live `surfaces` show a session.
//! `build_info` (what this binary is) and `outfile` (what an output may replace) sit beside
//! `sys` at the bottom; `dist` generates man pages and completions from the command line
//! (`cli`) at the top.
pub mod advise;
pub mod analysis;
pub mod attribution;
pub mod build_info;
pub mod cli;
pub mod commands;
pub mod counters;
pub mod dist;
pub mod export;
pub mod model;
pub mod outfile;
pub mod probe;
pub mod recording;
pub mod report;
pub mod session;
pub mod snapshot;
pub mod surfaces;
pub mod sys;
pub mod topology;
pub mod units;
