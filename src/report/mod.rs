//! Everything a run writes: summary.json's model, the CSV/JSON files and the
//! self-contained HTML report with its SVG charts.

pub mod charts;
pub mod experiment;
pub mod files;
pub mod html;
pub mod summary;
pub mod version;
