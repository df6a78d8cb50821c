//! `ddioscope import-counters`: a `perf stat -I … -x,` CSV into an existing recording.
use std::path::Path;

use anyhow::{Context, Result};

use super::writer::CounterRow;
use super::{Recording, RecordingMeta, Writer};
use crate::counters::{self, CounterSource};

/// Import a `perf stat -I … -x,` CSV into an existing recording, aligned to
/// its clock: the capture's first interval is taken to start with the recording.
pub fn import_counters(rec_path: &Path, csv: &Path) -> Result<usize> {
    let text = std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let intervals = counters::import::parse_perf_stat_csv(&text)
        .with_context(|| format!("{} is not perf stat -I -x, output", csv.display()))?;
    let rec = Recording::open(rec_path)?;
    let start_ns = rec.meta.start_ns.unwrap_or(0);
    let mut w = Writer::open_existing(rec_path)?;
    let source = CounterSource::Imported.as_str();
    // Importing again replaces the earlier import rather than doubling it.
    w.delete_counters(source)?;
    let mut n = 0;
    for (i, iv) in intervals.iter().enumerate() {
        let rows: Vec<CounterRow> = iv
            .iter()
            .map(|r| CounterRow { t_ns: r.t_ns + start_ns, ..CounterRow::from_reading(r, source) })
            .collect();
        n += rows.len();
        w.write_counters(i as u64, &rows)?;
    }
    RecordingMeta {
        counters_source: Some(CounterSource::Imported),
        counters_imported_from: Some(csv.display().to_string()),
        ..Default::default()
    }
    .write(&w)?;
    Ok(n)
}
