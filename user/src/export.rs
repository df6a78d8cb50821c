//! Time series and tables out, as `perf stat -I` and PCM users expect them: `report
//! --intervals` prints one row per queue per interval (or per `--every` step), as plain
//! columns or as CSV with a header (`-x ,`); `report --csv DIR` writes one CSV per report
//! table for pandas or R. Rows are written as the recording's steps stream by, so memory
//! does not grow with the recording's length.
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::analysis::filter::Filter;
use crate::analysis::{Outcome, Summary};
use crate::counters::{socket_metrics, CounterSource, SocketMetrics};
use crate::recording::reader::{Step, StepQueue};
use crate::recording::Recording;
use crate::report::json::round_meaningful;
use crate::snapshot::{hist_percentile, Dir};

/// The columns of an interval row; the counter columns follow when the recording has
/// per-interval counter readings.
const QUEUE_COLUMNS: &[&str] = &[
    "from_s",
    "to_s",
    "intervals",
    "dir",
    "queue",
    "packets",
    "bytes",
    "packets_per_s",
    "mbit_per_s",
    "avg_pkt_bytes",
    "drops",
    "drops_per_s",
    "napi_polls",
    "avg_batch",
    "budget_exhausted",
    "life_timed",
    "life_p50_ns",
    "life_p99_ns",
];

/// The NIC's socket's DDIO metrics, repeated on each of a step's queue rows.
const COUNTER_COLUMNS: &[&str] = &[
    "socket",
    "write_miss_pct",
    "read_miss_pct",
    "inbound_write_mbyte_per_s",
    "dram_read_mbyte_per_s",
    "dram_write_mbyte_per_s",
];

const SOCKET_COLUMNS: &[&str] = &[
    "from_s",
    "to_s",
    "socket",
    "write_miss_pct",
    "partial_write_miss_pct",
    "read_miss_pct",
    "inbound_write_mbyte_per_s",
    "inbound_read_mbyte_per_s",
    "dram_read_mbyte_per_s",
    "dram_write_mbyte_per_s",
    "l3_miss_per_s",
];

/// Seconds from the recording's start, to the millisecond (intervals are ms-aligned).
fn secs(v: f64) -> String {
    format!("{v:.3}")
}

/// A number as a cell: four significant digits, as the JSON report.
fn num(v: f64) -> String {
    if v.is_finite() {
        round_meaningful(v).to_string()
    } else {
        String::new()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(num).unwrap_or_default()
}

fn opt_u(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The counter source whose readings are per recording interval (live or software); an
/// imported capture keeps its own intervals, and is summed only over the whole window.
pub fn interval_counter_source(rec: &Recording) -> Option<&'static str> {
    match rec.meta.counters_source {
        Some(s @ (CounterSource::Live | CounterSource::Software)) => Some(s.as_str()),
        _ => None,
    }
}

/// Why an output has no counter columns, when the recording has counters of another kind.
pub fn counter_note(rec: &Recording) -> Option<String> {
    (rec.meta.counters_source == Some(CounterSource::Imported)).then(|| {
        "the recording's counters were imported from a perf capture on its own intervals: \
         the report's counter section sums them over the window; the interval rows carry none"
            .to_string()
    })
}

/// The socket whose metrics a step's queue rows carry: the NIC's NUMA node when a socket of
/// that number has readings, else the first.
fn nic_socket(metrics: &[SocketMetrics], node: Option<i32>) -> Option<&SocketMetrics> {
    node.and_then(|n| u32::try_from(n).ok())
        .and_then(|n| metrics.iter().find(|m| m.socket == n))
        .or_else(|| metrics.first())
}

fn queue_cells(step: &Step, q: &StepQueue) -> Vec<String> {
    let dur = step.dur_ns as f64 / 1e9;
    let rate = |v: u64| {
        if dur > 0.0 {
            num(v as f64 / dur)
        } else {
            String::new()
        }
    };
    vec![
        secs(step.from_s),
        secs(step.to_s),
        step.intervals.to_string(),
        q.dir.to_string(),
        q.queue.to_string(),
        q.packets.to_string(),
        q.bytes.to_string(),
        rate(q.packets),
        if dur > 0.0 {
            num(q.bytes as f64 * 8.0 / dur / 1e6)
        } else {
            String::new()
        },
        opt((q.packets > 0).then(|| q.bytes as f64 / q.packets as f64)),
        q.drops.to_string(),
        rate(q.drops),
        if q.dir == Dir::Rx {
            q.napi_polls.to_string()
        } else {
            String::new()
        },
        opt((q.napi_polls > 0).then(|| q.napi_work as f64 / q.napi_polls as f64)),
        if q.dir == Dir::Rx {
            q.napi_budget_exhausted.to_string()
        } else {
            String::new()
        },
        q.life_count.to_string(),
        opt_u(hist_percentile(&q.life_hist, 50.0, q.life_max_ns)),
        opt_u(hist_percentile(&q.life_hist, 99.0, q.life_max_ns)),
    ]
}

fn counter_cells(m: Option<&SocketMetrics>) -> Vec<String> {
    match m {
        Some(m) => vec![
            m.socket.to_string(),
            opt(m.write_miss_pct),
            opt(m.read_miss_pct),
            opt(m.inbound_write_mbps),
            opt(m.dram_read_mbps),
            opt(m.dram_write_mbps),
        ],
        None => vec![String::new(); COUNTER_COLUMNS.len()],
    }
}

fn socket_cells(step: &Step, m: &SocketMetrics) -> Vec<String> {
    vec![
        secs(step.from_s),
        secs(step.to_s),
        m.socket.to_string(),
        opt(m.write_miss_pct),
        opt(m.partial_write_miss_pct),
        opt(m.read_miss_pct),
        opt(m.inbound_write_mbps),
        opt(m.inbound_read_mbps),
        opt(m.dram_read_mbps),
        opt(m.dram_write_mbps),
        opt(m.l3_miss_per_s),
    ]
}

/// How rows are written: CSV with a header (any one-byte separator), or plain columns.
enum Sink<W: Write> {
    Csv(Box<csv::Writer<W>>),
    Plain(W, Vec<usize>),
}

impl<W: Write> Sink<W> {
    fn new(out: W, sep: Option<u8>, header: &[&str]) -> Result<Sink<W>> {
        let mut s = match sep {
            Some(b) => Sink::Csv(Box::new(
                csv::WriterBuilder::new().delimiter(b).from_writer(out),
            )),
            // Wide enough for a rate or a count of a busy queue; a longer value widens only
            // its own cell (the columns are fixed before the first row streams by).
            None => Sink::Plain(out, header.iter().map(|h| h.len().max(9)).collect()),
        };
        s.row(header.iter().map(|h| h.to_string()).collect())?;
        Ok(s)
    }

    fn row(&mut self, cells: Vec<String>) -> Result<()> {
        match self {
            Sink::Csv(w) => w.write_record(&cells)?,
            Sink::Plain(w, widths) => {
                let line: Vec<String> = cells
                    .iter()
                    .zip(widths.iter())
                    .map(|(c, n)| format!("{:>n$}", if c.is_empty() { "-" } else { c }))
                    .collect();
                writeln!(w, "{}", line.join(" "))?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        match self {
            Sink::Csv(mut w) => w.flush()?,
            Sink::Plain(mut w, _) => w.flush()?,
        }
        Ok(())
    }
}

/// `-x SEP`: one character of one byte.
pub fn separator(s: &str) -> Result<u8, String> {
    let s = if s == "\\t" { "\t" } else { s };
    match s.as_bytes() {
        [b] if *b != b'"' && *b != b'\n' && *b != b'\r' => Ok(*b),
        _ => Err(format!(
            "'{s}' is not a separator: give one ASCII character (, ; \\t |)"
        )),
    }
}

/// The per-step rows of the window: queue rows to `queues` and, when given, one row per
/// socket and step to `sockets`. Returns the steps written.
fn stream_rows<Q: Write, S: Write>(
    rec: &Recording,
    filter: &Filter,
    every_ns: Option<u64>,
    queues: &mut Sink<Q>,
    mut sockets: Option<&mut Sink<S>>,
) -> Result<u64> {
    let source = interval_counter_source(rec);
    let node = rec.iface().numa_node;
    rec.for_each_step(every_ns, source, |step| {
        let metrics = if step.counters.is_empty() || step.dur_ns == 0 {
            Vec::new()
        } else {
            socket_metrics(&step.counters, step.dur_ns as f64 / 1e9)
        };
        let nic = nic_socket(&metrics, node);
        for q in step.queues.iter().filter(|q| filter.queue(q.dir, q.queue)) {
            let mut cells = queue_cells(step, q);
            if source.is_some() {
                cells.extend(counter_cells(nic));
            }
            queues.row(cells)?;
        }
        if let Some(s) = sockets.as_deref_mut() {
            for m in &metrics {
                s.row(socket_cells(step, m))?;
            }
        }
        Ok(())
    })
}

fn queue_header(rec: &Recording) -> Vec<&'static str> {
    let mut h: Vec<&str> = QUEUE_COLUMNS.to_vec();
    if interval_counter_source(rec).is_some() {
        h.extend(COUNTER_COLUMNS);
    }
    h
}

/// `report --intervals`: the window's rows on `out`.
pub fn write_intervals(
    rec: &Recording,
    filter: &Filter,
    every_ns: Option<u64>,
    sep: Option<u8>,
    out: impl Write,
) -> Result<u64> {
    let mut sink = Sink::new(out, sep, &queue_header(rec))?;
    let n = stream_rows::<_, Vec<u8>>(rec, filter, every_ns, &mut sink, None)?;
    sink.finish()?;
    Ok(n)
}

/// One CSV file being written under a temporary name.
struct Pending {
    path: PathBuf,
    tmp: PathBuf,
    file: std::fs::File,
}

fn start(dir: &Path, name: &str) -> Result<Pending> {
    let path = dir.join(name);
    let (tmp, file) = crate::outfile::create_temp(&path)?;
    Ok(Pending { path, tmp, file })
}

/// Write one table whole.
fn table(
    dir: &Path,
    name: &str,
    header: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
    made: &mut Vec<Pending>,
) -> Result<()> {
    let p = start(dir, name)?;
    let mut sink = Sink::new(
        std::io::BufWriter::new(p.file.try_clone()?),
        Some(b','),
        header,
    )?;
    made.push(p);
    for r in rows {
        sink.row(r)?;
    }
    sink.finish()
}

/// The file names `report --csv` writes, in the order it writes them.
pub const CSV_FILES: &[&str] = &[
    "intervals.csv",
    "sockets.csv",
    "queues.csv",
    "stages.csv",
    "flows.csv",
    "drops.csv",
    "verdicts.csv",
    "recommendations.csv",
];

/// `report --csv DIR`: one CSV per table, each renamed into place once whole; an existing
/// file of those names is replaced only with `force`, and nothing is replaced unless every
/// table was written. Returns the files written.
pub fn write_csv_dir(
    rec: &Recording,
    summary: &Summary,
    outcome: &Outcome,
    filter: &Filter,
    every_ns: Option<u64>,
    dir: &Path,
    force: bool,
) -> Result<Vec<PathBuf>> {
    prepare_csv_dir(dir, force)?;
    let mut made: Vec<Pending> = Vec::new();
    let result = (|| -> Result<()> {
        write_interval_csvs(rec, filter, every_ns, dir, &mut made)?;
        write_summary_csvs(summary, dir, &mut made)?;
        write_advice_csvs(outcome, dir, &mut made)?;
        sync_pending(&made, dir)
    })();
    publish_all(&made, result, force)
}

/// Make the directory if it is missing and refuse, before writing anything, any existing
/// table that `force` does not allow replacing.
fn prepare_csv_dir(dir: &Path, force: bool) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("{} exists and is not a directory", dir.display());
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create {}: {}",
                dir.display(),
                crate::outfile::io_words(&e, dir)
            )
        })?;
    }
    for name in CSV_FILES {
        crate::outfile::check(&dir.join(name), force)?;
    }
    Ok(())
}

/// The per-interval queue and socket rows, streamed from the recording in one pass so
/// memory does not grow with its length.
fn write_interval_csvs(
    rec: &Recording,
    filter: &Filter,
    every_ns: Option<u64>,
    dir: &Path,
    made: &mut Vec<Pending>,
) -> Result<()> {
    let iv = start(dir, "intervals.csv")?;
    let so = start(dir, "sockets.csv")?;
    let mut q = Sink::new(
        std::io::BufWriter::new(iv.file.try_clone()?),
        Some(b','),
        &queue_header(rec),
    )?;
    let mut s = Sink::new(
        std::io::BufWriter::new(so.file.try_clone()?),
        Some(b','),
        SOCKET_COLUMNS,
    )?;
    made.push(iv);
    made.push(so);
    stream_rows(rec, filter, every_ns, &mut q, Some(&mut s))?;
    q.finish()?;
    s.finish()?;
    Ok(())
}

/// The summary's whole-window tables: queues, stages, flows and drop reasons.
fn write_summary_csvs(summary: &Summary, dir: &Path, made: &mut Vec<Pending>) -> Result<()> {
    table(
        dir,
        "queues.csv",
        &[
            "dir",
            "queue",
            "packets",
            "bytes",
            "packets_per_s",
            "mbit_per_s",
            "avg_pkt_bytes",
            "drops",
            "napi_polls",
            "avg_batch",
            "budget_exhausted",
        ],
        summary.queues.iter().map(|q| {
            vec![
                q.dir.to_string(),
                q.queue.to_string(),
                q.packets.to_string(),
                q.bytes.to_string(),
                num(q.packets_per_s),
                num(q.mbit_per_s),
                opt(q.avg_pkt_bytes),
                q.drops.to_string(),
                opt_u(q.napi.as_ref().map(|n| n.polls)),
                opt(q.napi.as_ref().and_then(|n| n.avg_work)),
                opt_u(q.napi.as_ref().map(|n| n.budget_exhausted)),
            ]
        }),
        made,
    )?;
    table(
        dir,
        "stages.csv",
        &[
            "dir", "queue", "stage", "count", "p50_ns", "p99_ns", "max_ns", "mean_ns",
        ],
        summary.queues.iter().flat_map(|q| {
            q.stages.iter().map(move |(name, s)| {
                vec![
                    q.dir.to_string(),
                    q.queue.to_string(),
                    name.clone(),
                    s.count.to_string(),
                    opt_u(s.p50_ns),
                    opt_u(s.p99_ns),
                    s.max_ns.to_string(),
                    opt_u(s.mean_ns),
                ]
            })
        }),
        made,
    )?;
    table(
        dir,
        "flows.csv",
        &[
            "dir",
            "proto",
            "src",
            "sport",
            "dst",
            "dport",
            "rx_queue",
            "tx_queue",
            "packets",
            "bytes",
            "payload_bytes",
            "samples",
            "bytes_error",
            "source",
        ],
        summary.flows.iter().map(|f| {
            vec![
                f.dir.to_string(),
                f.proto.clone(),
                f.src.clone(),
                f.sport.to_string(),
                f.dst.clone(),
                f.dport.to_string(),
                opt_u(f.rx_queue.map(u64::from)),
                opt_u(f.tx_queue.map(u64::from)),
                f.packets.to_string(),
                f.bytes.to_string(),
                f.payload_bytes.to_string(),
                opt_u(f.samples),
                opt_u(f.bytes_error),
                f.source.clone().unwrap_or_default(),
            ]
        }),
        made,
    )?;
    table(
        dir,
        "drops.csv",
        &["reason", "name", "count"],
        summary.drops.reasons.iter().map(|d| {
            vec![
                d.reason.to_string(),
                d.name.clone().unwrap_or_default(),
                d.count.to_string(),
            ]
        }),
        made,
    )?;
    Ok(())
}

/// The model's verdicts and recommendations (header-only files when there is no model, so
/// the directory always holds the same files).
fn write_advice_csvs(outcome: &Outcome, dir: &Path, made: &mut Vec<Pending>) -> Result<()> {
    let (verdicts, recs) = match outcome {
        Outcome::Advised(a) => (&a.verdicts[..], &a.recommendations[..]),
        Outcome::NoModel { .. } => (&[][..], &[][..]),
    };
    table(
        dir,
        "verdicts.csv",
        &[
            "dir",
            "queue",
            "verdict",
            "footprint_bytes",
            "inflight_bytes",
            "predicted_write_hit_pct",
            "predicted_read_hit_pct",
            "ring_assumed",
            "reason",
        ],
        verdicts.iter().map(|v| {
            vec![
                v.dir.to_string(),
                v.queue.to_string(),
                serde_json::to_value(v.verdict)
                    .ok()
                    .and_then(|x| x.as_str().map(str::to_string))
                    .unwrap_or_default(),
                opt_u(v.footprint_bytes),
                opt(v.inflight_bytes),
                opt(v.predicted_write_hit_pct),
                opt(v.predicted_read_hit_pct),
                v.ring_assumed.to_string(),
                v.reason.clone(),
            ]
        }),
        made,
    )?;
    table(
        dir,
        "recommendations.csv",
        &[
            "kind",
            "target",
            "command",
            "predicted_metric",
            "predicted_before",
            "predicted_after",
        ],
        recs.iter().map(|r| {
            vec![
                r.kind.to_string(),
                r.target.clone(),
                r.command.clone(),
                r.predicted_metric.clone().unwrap_or_default(),
                opt(r.predicted_before),
                opt(r.predicted_after),
            ]
        }),
        made,
    )?;
    Ok(())
}

/// Flush every table to disk before any is renamed into place.
fn sync_pending(made: &[Pending], dir: &Path) -> Result<()> {
    for p in made {
        p.file.sync_all().map_err(|e| {
            anyhow::anyhow!(
                "cannot write {}: {}",
                p.path.display(),
                crate::outfile::io_words(&e, dir)
            )
        })?;
    }
    Ok(())
}

/// Rename every table into place if all were written, and remove the temporary files of
/// any that were not, so a failure leaves the old tables whole.
fn publish_all(made: &[Pending], result: Result<()>, force: bool) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let result = result.and_then(|()| {
        for p in made {
            crate::outfile::publish(&p.tmp, &p.path, force)?;
            written.push(p.path.clone());
        }
        Ok(())
    });
    for p in made {
        if !written.contains(&p.path) {
            let _ = std::fs::remove_file(&p.tmp);
        }
    }
    result.map(|()| written)
}
