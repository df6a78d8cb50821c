//! `ddioscope import-counters`: a `perf stat -I … -x,` CSV into an existing recording.
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::writer::CounterRow;
use super::{Recording, RecordingMeta, Writer};
use crate::counters::{self, CounterSource};

/// Import a `perf stat -I … -x,` CSV into an existing recording, aligned to
/// its clock: the capture's first interval is taken to start with the recording.
/// All or nothing: the earlier import's removal, every row and the meta keys are one
/// transaction, so a refused or killed import leaves the recording as it was.
pub fn import_counters(rec_path: &Path, csv: &Path) -> Result<usize> {
    let text =
        std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let intervals =
        counters::import::parse_perf_stat_csv(&text).with_context(|| csv.display().to_string())?;
    // Opening it as a reader first checks it is a recording (and rolls back what a killed
    // writer left half-done).
    let start_ns = Recording::open(rec_path)?.meta.start_ns.unwrap_or(0);
    let source = CounterSource::Imported.as_str();
    if let Some(r) = intervals.iter().flatten().find(|r| {
        r.t_ns
            .checked_add(start_ns)
            .is_none_or(|t| t > i64::MAX as u64)
    }) {
        bail!(
            "{}: a timestamp {} ns after the recording's start is past what it holds",
            csv.display(),
            r.t_ns
        );
    }
    let rows = intervals.iter().enumerate().flat_map(|(i, iv)| {
        iv.iter().map(move |r| {
            (
                i as u64,
                CounterRow {
                    t_ns: r.t_ns + start_ns,
                    ..CounterRow::from_reading(r, source)
                },
            )
        })
    });
    let meta = RecordingMeta {
        counters_source: Some(CounterSource::Imported),
        counters_imported_from: Some(csv.display().to_string()),
        ..Default::default()
    };
    let mut w = Writer::open_existing(rec_path)?;
    // Importing again replaces the earlier import rather than doubling it.
    w.replace_counters(source, rows, |w| meta.write(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::reader::fixture::FIXTURE;

    /// SQLite's file change counter (header bytes 24..28): one more per committed write
    /// transaction in rollback-journal mode.
    fn change_counter(p: &Path) -> u32 {
        let b = std::fs::read(p).expect("reads");
        u32::from_be_bytes([b[24], b[25], b[26], b[27]])
    }

    fn csv(dir: &Path, lines: usize) -> std::path::PathBuf {
        let p = dir.join("c.csv");
        let text: String = (1..=lines)
            .map(|i| {
                format!(
                    "{}.0,S0,2,{i},,UNC_CHA_TOR_INSERTS.IO_MISS_ITOM,1000000,100.00,,\n",
                    i
                )
            })
            .collect();
        std::fs::write(&p, text).expect("writes");
        p
    }

    #[test]
    fn an_import_is_one_transaction() {
        let d = tempfile::tempdir().expect("tempdir");
        let rec = d.path().join("r.ddio");
        std::fs::copy(FIXTURE, &rec).expect("copy");
        let before = change_counter(&rec);
        assert_eq!(
            import_counters(&rec, &csv(d.path(), 500)).expect("imports"),
            500
        );
        assert_eq!(change_counter(&rec), before.wrapping_add(1));
        let r = Recording::open(&rec).expect("opens");
        assert_eq!(r.meta.counters_source, Some(CounterSource::Imported));
        assert_eq!(r.counter_totals("imported").expect("reads").rows, 500);
    }

    #[test]
    fn a_refused_import_leaves_the_file_as_it_was() {
        let d = tempfile::tempdir().expect("tempdir");
        let rec = d.path().join("r.ddio");
        std::fs::copy(FIXTURE, &rec).expect("copy");
        import_counters(&rec, &csv(d.path(), 3)).expect("imports");
        let before = std::fs::read(&rec).expect("reads");
        let big = d.path().join("big.csv");
        std::fs::write(&big, "1.0,S0,2,5,,cycles,1000,100.00,,\n2.0,S0,2,9223372036854775807,,cycles,1000,100.00,,\n").expect("writes");
        let e = format!("{:#}", import_counters(&rec, &big).expect_err("refused"));
        assert_eq!(e, format!("{}: line 2: counter value 9223372036854775807 is outside 0 to 2^63-1, what a recording holds", big.display()));
        assert!(
            std::fs::read(&rec).expect("reads") == before,
            "the recording changed"
        );
    }
}
