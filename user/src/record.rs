//! `ddioscope record`: attach, snapshot the kernel aggregates every interval
//! into a recording, stop on Ctrl-C/SIGTERM or after the duration, detach.
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::counters;
use crate::live::{LiveOptions, LiveSession};
pub use crate::live::{is_root, monotonic_ns, CountersMode};
use crate::recording::writer::CounterRow;
use crate::recording::Writer;
use crate::snapshot::{Dir, EventCounters};

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub iface: String,
    pub netns: Option<String>,
    pub duration: Option<f64>,
    pub output: PathBuf,
    pub force: bool,
    pub interval_ms: u64,
    pub sample_every: u32,
    pub stage_every: u32,
    pub json_progress: bool,
    pub verbose: bool,
    pub command_line: String,
    pub counters: CountersMode,
    pub miss_source: crate::probe::l3miss::MissSource,
    pub miss_period: u64,
    /// Address join on 1 in N buffer pages (power of two; 1: every page).
    pub join_sample: u32,
    /// Attribution in one window per interval, 1/N of it (1: always on).
    pub miss_duty: u32,
    /// The L3-miss flow map's size (None: built in); a test knob.
    pub miss_flow_slots: Option<u32>,
    /// perf-stat CSV captured elsewhere, imported into this recording at the end.
    pub counters_from: Option<PathBuf>,
    pub hooks: crate::probe::features::HookChoice,
}

/// One JSON progress line on stdout. A reader that went away (closed pipe)
/// must not stop the recording, so write errors are ignored.
pub fn progress_line(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

pub fn counter_rows(readings: &[counters::CounterReading], source: &str) -> Vec<CounterRow> {
    readings
        .iter()
        .map(|r| CounterRow {
            t_ns: r.t_ns,
            socket: r.socket,
            pmu: r.pmu.clone(),
            event: r.event.clone(),
            value: r.value,
            raw: r.raw,
            enabled_ns: r.enabled_ns,
            running_ns: r.running_ns,
            source: source.to_string(),
        })
        .collect()
}

/// Import a `perf stat -I … -x,` CSV into an existing recording, aligned to
/// its clock: the capture's first interval is taken to start with the recording.
pub fn import_counters(rec_path: &std::path::Path, csv: &std::path::Path) -> Result<usize> {
    let text = std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let intervals = counters::import::parse_perf_stat_csv(&text)
        .with_context(|| format!("{} is not perf stat -I -x, output", csv.display()))?;
    let rec = crate::recording::Recording::open(rec_path)?;
    let start_ns: u64 = rec.meta.get("start_ns").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut w = Writer::open_existing(rec_path)?;
    // Importing again replaces the earlier import rather than doubling it.
    w.delete_counters("imported")?;
    let mut n = 0;
    for (i, iv) in intervals.iter().enumerate() {
        let mut rows = counter_rows(iv, "imported");
        for r in &mut rows {
            r.t_ns += start_ns;
        }
        n += rows.len();
        w.write_counters(i as u64, &rows)?;
    }
    w.set_meta("counters_source", "imported")?;
    w.set_meta("counters_imported_from", &csv.display().to_string())?;
    Ok(n)
}


/// Summary returned to the caller (and printed).
pub struct RecordSummary {
    pub intervals: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub events: EventCounters,
    pub stopped_by_signal: bool,
}

pub fn record(opts: &RecordOptions) -> Result<RecordSummary> {
    if let Some(d) = opts.duration {
        if d.is_nan() || d <= 0.0 {
            bail!("--duration must be a positive number of seconds");
        }
    }
    let live_opts = LiveOptions {
        iface: opts.iface.clone(),
        netns: opts.netns.clone(),
        interval_ms: opts.interval_ms,
        sample_every: opts.sample_every,
        stage_every: opts.stage_every,
        counters: opts.counters,
        miss_source: opts.miss_source,
        miss_period: opts.miss_period,
        join_sample: opts.join_sample,
        miss_duty: opts.miss_duty,
        miss_flow_slots: opts.miss_flow_slots,
        flow_every: (1000 / opts.interval_ms.max(1)).max(1),
        verbose: opts.verbose,
        hooks: opts.hooks,
    };
    let (features, iface) = LiveSession::preflight(&live_opts)?;

    // The output is created before anything attaches: a bad path fails cleanly.
    let mut writer = Writer::create(&opts.output, opts.force)?;
    writer.set_meta("format", "ddioscope-recording")?;
    writer.set_meta("ddioscope_version", crate::build_info::VERSION)?;
    writer.set_meta("git_commit", crate::build_info::GIT_COMMIT)?;
    writer.set_meta("bpf_build_id", crate::build_info::BPF_BUILD_ID)?;
    writer.set_meta("command", &opts.command_line)?;
    writer.set_meta_json("iface", &iface)?;
    writer.set_meta_json("features", &features)?;
    writer.set_meta_json("drop_reason_names", &crate::probe::features::drop_reason_names())?;
    writer.set_meta("interval_ms", &opts.interval_ms.to_string())?;
    writer.set_meta("sample_every", &opts.sample_every.to_string())?;
    writer.set_meta("stage_every", &opts.stage_every.to_string())?;
    writer.set_meta("complete", "false")?;

    // Signals first, so a Ctrl-C during attach still detaches cleanly.
    let stop = crate::live::stop_flag()?;
    let mut live = LiveSession::start(&live_opts, features, iface)?;
    writer.set_meta_json("host", &live.host)?;
    // LLC from sysfs and IIO LLC WAYS from MSR 0xC8B (read only), as the model will use them.
    if let Ok(g) = crate::model::geometry::LlcGeometry::detect(std::path::Path::new("/sys"), std::path::Path::new("/dev"), 0) {
        writer.set_meta_json("geometry", &g)?;
    }
    writer.set_meta_json("hooks", &live.probe.hooks)?;
    writer.set_meta("platform", &live.platform)?;
    writer.set_meta("counters_source", live.counters_source)?;
    writer.set_meta_json("counters_notes", &live.counter_notes)?;
    writer.set_meta("miss_sampling", &live.miss_label)?;
    // The period the sampler runs at: inside windows, the one asked for over the duty.
    writer.set_meta("miss_period", &live.miss_period.to_string())?;
    writer.set_meta("join_sample", &opts.join_sample.to_string())?;
    if live.probe.has_miss_sampler() && opts.miss_duty > 1 {
        let cycle = crate::windows::cycle(std::time::Duration::from_millis(opts.interval_ms));
        let (sampling, warmup) = crate::windows::spans(cycle, opts.miss_duty);
        writer.set_meta("miss_cycle_ms", &cycle.as_millis().to_string())?;
        writer.set_meta("miss_duty", &opts.miss_duty.to_string())?;
        writer.set_meta("miss_window_ms", &format!("{:.3}", sampling.as_secs_f64() * 1e3))?;
        writer.set_meta("miss_warmup_ms", &format!("{:.3}", warmup.as_secs_f64() * 1e3))?;
    }
    writer.set_meta("buffer_join", &live.buffer_join)?;
    if let Some(why) = live.probe.miss_throttle_unavailable() {
        writer.set_meta("miss_throttle", &format!("not measured: {why}"))?;
    }
    if let Some(n) = live.probe.miss_sampler_cpus() {
        writer.set_meta("miss_sampler_cpus", &n.to_string())?;
    }
    if live.probe.has_miss_sampler() {
        writer.set_meta("buf_pages_capacity", &live.probe.buf_pages_capacity().to_string())?;
    }
    let prog_ids = live.probe.prog_ids();
    writer.set_meta_json("prog_ids", &prog_ids)?;
    writer.set_meta("start_ns", &live.start_ns.to_string())?;
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    writer.set_meta("start_unix_ms", &unix_ms.to_string())?;

    let attached = live.probe.hooks.iter().filter(|h| h.flavor.is_some()).count();
    let iface = live.iface.clone();
    if opts.json_progress {
        progress_line(
            serde_json::json!({"event": "attached", "iface": iface.name, "ifindex": iface.ifindex,
                "hooks": attached, "output": opts.output.display().to_string(), "prog_ids": prog_ids,
                "progs": live.probe.attached_progs()}),
        );
    }
    let tty = std::io::stderr().is_terminal() && !opts.json_progress;
    if !opts.json_progress {
        let windows = if live.probe.has_miss_sampler() && opts.miss_duty > 1 {
            format!(", attribution in windows of 1/{} of the time", opts.miss_duty)
        } else {
            String::new()
        };
        eprintln!(
            "recording {}{} ({} hooks, counters: {}{windows}) into {}{}; Ctrl-C to stop",
            iface.name,
            iface.netns.as_deref().map(|n| format!(" in netns {n}")).unwrap_or_default(),
            attached,
            live.counters_source,
            opts.output.display(),
            opts.duration.map(|d| format!(" for {d} s")).unwrap_or_default()
        );
    }

    let end = opts.duration.map(|d| live.started + Duration::from_secs_f64(d));
    let (mut rx_total, mut tx_total) = (0u64, 0u64);
    let mut events_total = EventCounters::default();
    let mut last_progress = Instant::now();
    let mut write_error = None;
    let mut notes_len = live.counter_notes.len();
    loop {
        let (snap, finishing) = live.next(&stop, end)?;
        for q in &snap.queues {
            match q.dir {
                Dir::Rx => rx_total += q.packets,
                Dir::Tx => tx_total += q.packets,
            }
        }
        let written = writer
            .write_snapshot(&snap)
            .and_then(|()| writer.write_counters(snap.index, &counter_rows(&snap.counters, live.counters_source)));
        if let Err(e) = written {
            write_error = Some(e);
            break;
        }
        if live.counter_notes.len() != notes_len {
            notes_len = live.counter_notes.len();
            writer.set_meta_json("counters_notes", &live.counter_notes)?;
        }
        events_total.sampled += snap.events.sampled;
        events_total.lost += snap.events.lost;
        events_total.received += snap.events.received;
        events_total.state_evicted += snap.events.state_evicted;

        if opts.json_progress {
            progress_line(
                serde_json::json!({"event": "interval", "index": live.index(), "elapsed_s": live.started.elapsed().as_secs_f64(),
                    "rx_packets": rx_total, "tx_packets": tx_total, "sampled": events_total.sampled, "lost": events_total.lost}),
            );
        } else if tty && (last_progress.elapsed() >= Duration::from_millis(500) || finishing) {
            last_progress = Instant::now();
            eprint!(
                "\r  {:6.1} s{}  rx {:>10} pkts  tx {:>10} pkts  samples {}  lost {}   ",
                live.started.elapsed().as_secs_f64(),
                opts.duration.map(|d| format!(" / {d} s")).unwrap_or_default(),
                rx_total,
                tx_total,
                events_total.sampled,
                events_total.lost
            );
        }
        if finishing {
            break;
        }
    }
    if tty {
        eprintln!();
    }
    let stopped_by_signal = stop.load(Ordering::Relaxed);
    let intervals = live.index();
    // Detach before the final metadata write: nothing stays attached even if that write fails.
    drop(live);
    if let Some(e) = write_error {
        return Err(e.context(format!(
            "recording stopped after {intervals} intervals; {} holds everything up to the last completed interval",
            opts.output.display()
        )));
    }
    writer.set_meta("end_ns", &monotonic_ns().to_string())?;
    writer.set_meta("stopped_by", if stopped_by_signal { "signal" } else { "duration" })?;
    writer.set_meta("complete", "true")?;
    drop(writer);
    if let Some(csv) = &opts.counters_from {
        import_counters(&opts.output, csv)?;
    }
    Ok(RecordSummary { intervals, rx_packets: rx_total, tx_packets: tx_total, events: events_total, stopped_by_signal })
}
