//! What faces a person or a scraper outside a recording: the live terminal view (`top`),
//! the metrics endpoint (`serve`) with its bounded flow series (`capped`) and the model's
//! live verdicts (`live_model`), the per-interval numbers both show (`view`), and the
//! host check (`doctor`).
pub mod bundle;
pub mod capped;
pub mod conns;
pub mod doctor;
pub mod estimates;
pub mod live_model;
pub mod serve;
pub mod top;
pub mod view;
