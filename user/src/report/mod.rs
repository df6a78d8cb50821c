//! Rendering for people and tools: the text report, the one JSON object of `report --json`,
//! and the self-contained HTML page. Everything here formats; the numbers come from
//! `analysis`.
pub mod html;
pub mod json;
pub mod text;

pub use text::{queue_cells, queue_columns, render_report, socket_cells, TextOptions};

#[cfg(test)]
mod rollup_tests;
#[cfg(test)]
mod tests;
