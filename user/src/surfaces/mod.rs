//! What faces a person or a scraper outside a recording: the live terminal view (`top`),
//! the metrics endpoint (`serve`), the per-interval numbers both show (`view`), and the
//! host check (`doctor`).
pub mod doctor;
pub mod serve;
pub mod top;
pub mod view;
