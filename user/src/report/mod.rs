//! Rendering for people and tools: the text report, the one JSON object of `report --json`,
//! and the self-contained HTML page. Everything here formats what `analysis` built; no
//! renderer reads a recording or runs the model (a test holds them to that).
pub mod diff;
pub mod html;
pub mod json;
pub mod svg;
pub mod text;
pub mod words;

pub use text::{render_report, TextOptions};
pub use words::{queue_cells, queue_columns, socket_cells};

#[cfg(test)]
mod rollup_tests;
#[cfg(test)]
mod tests;
