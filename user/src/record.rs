//! `ddioscope record`: attach, snapshot the kernel aggregates every interval
//! into a recording, stop on Ctrl-C/SIGTERM or after the duration, detach.
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::probe::features::Features;
use crate::probe::pktlife::{PktlifeProbe, ProbeConfig};
use crate::counters;
use crate::recording::writer::CounterRow;
use crate::recording::Writer;
use crate::snapshot::{EventCounters, QueueCounters, Snapshot};
use crate::topology;

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub iface: String,
    pub netns: Option<String>,
    pub duration: Option<f64>,
    pub output: PathBuf,
    pub force: bool,
    pub interval_ms: u64,
    pub sample_every: u32,
    pub json_progress: bool,
    pub verbose: bool,
    pub command_line: String,
    pub counters: CountersMode,
    /// perf-stat CSV captured elsewhere, imported into this recording at the end.
    pub counters_from: Option<PathBuf>,
}

/// Which hardware view `record` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CountersMode {
    /// Uncore/core PMUs when the platform has them; otherwise none, quietly.
    Auto,
    /// Software perf events through the same read path (hosts without a PMU; tests).
    Software,
    /// No counters.
    Off,
}

/// Open the counter sampler the user asked for. Auto degrades quietly (the
/// reason is recorded); an explicit request fails loudly.
fn open_counters(mode: CountersMode) -> Result<(Option<counters::Sampler>, &'static str, Vec<String>)> {
    use counters::{Sampler, SamplerConfig};
    let detection = counters::platform::detect_host();
    Ok(match mode {
        CountersMode::Off => (None, "absent", vec!["counters disabled (--counters off)".into()]),
        CountersMode::Software => {
            let (s, rep) = Sampler::try_open(&SamplerConfig::software());
            if s.is_none() {
                bail!("--counters software: {}", rep.failure_lines().join("; "));
            }
            (s, "software", rep.failure_lines())
        }
        CountersMode::Auto => match detection.platform() {
            Some(p) => {
                let (s, rep) = Sampler::try_open(&SamplerConfig::hardware(p));
                let src = if s.is_some() { "live" } else { "absent" };
                (s, src, rep.failure_lines())
            }
            None => (None, "absent", vec![format!("no uncore DDIO counters: {}", detection.describe())]),
        },
    })
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

/// CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns, so BPF timestamps,
/// intervals and counter readings line up.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into ts.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no failure mode.
    unsafe { libc::geteuid() == 0 }
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
    if opts.interval_ms < 10 {
        bail!("--interval must be at least 10 ms");
    }
    if let Some(d) = opts.duration {
        if d.is_nan() || d <= 0.0 {
            bail!("--duration must be a positive number of seconds");
        }
    }
    if !is_root() {
        bail!("ddioscope record needs root (it loads BPF programs): run it with sudo");
    }
    let features = Features::detect();
    if let Some(why) = features.fatal() {
        bail!(why);
    }
    if opts.verbose {
        eprintln!("features: {}", serde_json::to_string(&features)?);
    }
    let iface = topology::resolve_iface_live(&opts.iface, opts.netns.as_deref())?;
    let host = topology::host_live();

    // The output is created before anything attaches: a bad path fails cleanly.
    let mut writer = Writer::create(&opts.output, opts.force)?;
    writer.set_meta("format", "ddioscope-recording")?;
    writer.set_meta("ddioscope_version", env!("CARGO_PKG_VERSION"))?;
    writer.set_meta("command", &opts.command_line)?;
    writer.set_meta_json("host", &host)?;
    writer.set_meta_json("iface", &iface)?;
    writer.set_meta_json("features", &features)?;
    writer.set_meta_json("drop_reason_names", &crate::probe::features::drop_reason_names())?;
    writer.set_meta("interval_ms", &opts.interval_ms.to_string())?;
    writer.set_meta("sample_every", &opts.sample_every.to_string())?;
    writer.set_meta("complete", "false")?;

    // Signals first, so a Ctrl-C during attach still detaches cleanly.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handlers")?;
    }

    let cfg = ProbeConfig {
        ifindex: iface.ifindex,
        netns_inode: iface.netns_inode,
        sample_every: opts.sample_every,
        track_flows: true,
        rx_queue_offset: crate::probe::pktlife::rx_queue_offset_for_driver(iface.driver.as_deref()),
    };
    let probe = PktlifeProbe::attach(&cfg, &features)?;
    writer.set_meta_json("hooks", &probe.hooks)?;
    let (mut sampler, counters_source, counter_notes) = open_counters(opts.counters)?;
    writer.set_meta("platform", &counters::platform::detect_host().describe())?;
    writer.set_meta("counters_source", counters_source)?;
    writer.set_meta_json("counters_notes", &counter_notes)?;
    if opts.verbose {
        for n in &counter_notes {
            eprintln!("counters: {n}");
        }
    }
    writer.set_meta_json("prog_ids", &probe.prog_ids())?;
    let start_ns = monotonic_ns();
    writer.set_meta("start_ns", &start_ns.to_string())?;
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    writer.set_meta("start_unix_ms", &unix_ms.to_string())?;

    let attached: Vec<_> = probe.hooks.iter().filter(|h| h.flavor.is_some()).collect();
    if opts.json_progress {
        println!(
            "{}",
            serde_json::json!({"event": "attached", "iface": iface.name, "ifindex": iface.ifindex,
                "hooks": attached.len(), "output": opts.output.display().to_string(), "prog_ids": probe.prog_ids()})
        );
        let _ = std::io::stdout().flush();
    }
    let tty = std::io::stderr().is_terminal() && !opts.json_progress;
    if !opts.json_progress {
        eprintln!(
            "recording {}{} ({} hooks) into {}{}; Ctrl-C to stop",
            iface.name,
            iface.netns.as_deref().map(|n| format!(" in netns {n}")).unwrap_or_default(),
            attached.len(),
            opts.output.display(),
            opts.duration.map(|d| format!(" for {d} s")).unwrap_or_default()
        );
    }

    let interval = Duration::from_millis(opts.interval_ms);
    let started = Instant::now();
    let end = opts.duration.map(|d| started + Duration::from_secs_f64(d));
    let mut prev_q: Vec<QueueCounters> = Vec::new();
    let mut prev_e = EventCounters::default();
    let mut prev_t = start_ns;
    let mut index = 0u64;
    let (mut rx_total, mut tx_total) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    let mut write_error = None;
    let mut events_total = EventCounters::default();
    let flow_every = (1000 / opts.interval_ms).max(1);

    loop {
        let deadline = started + interval * (index as u32 + 1);
        let deadline = match end {
            Some(e) if e < deadline => e,
            _ => deadline,
        };
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            probe.poll((deadline - now).min(Duration::from_millis(200)))?;
        }
        let finishing = stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e);

        let t_ns = monotonic_ns();
        let cur_q = probe.read_queues()?;
        let cur_e = probe.read_events()?;
        let mut snap = Snapshot {
            index,
            t_ns,
            dur_ns: t_ns - prev_t,
            events: cur_e.delta(&prev_e),
            samples: probe.drain_samples(),
            ..Default::default()
        };
        for q in &cur_q {
            let d = match prev_q.iter().find(|p| p.dir == q.dir && p.queue == q.queue) {
                Some(p) => q.delta(p),
                None => q.clone(),
            };
            if !d.is_zero() {
                match d.dir {
                    crate::snapshot::Dir::Rx => rx_total += d.packets,
                    crate::snapshot::Dir::Tx => tx_total += d.packets,
                }
                snap.queues.push(d);
            }
        }
        if finishing || index % flow_every == flow_every - 1 {
            snap.flows = probe.read_flows()?;
            snap.drop_reasons = probe.read_drop_reasons()?;
        }
        if let Err(e) = writer.write_snapshot(&snap) {
            write_error = Some(e);
            break;
        }
        if let Some(s) = sampler.as_mut() {
            match s.read() {
                Ok(readings) => {
                    if let Err(e) = writer.write_counters(index, &counter_rows(&readings, counters_source)) {
                        write_error = Some(e);
                        break;
                    }
                }
                Err(e) => {
                    // Keep recording the software view; say why counters stopped.
                    writer.set_meta_json("counters_notes", &[format!("counter reads stopped at interval {index}: {e:#}")])?;
                    sampler = None;
                }
            }
        }
        events_total = cur_e;
        prev_q = cur_q;
        prev_e = cur_e;
        prev_t = t_ns;
        index += 1;

        if opts.json_progress {
            println!(
                "{}",
                serde_json::json!({"event": "interval", "index": index, "elapsed_s": started.elapsed().as_secs_f64(),
                    "rx_packets": rx_total, "tx_packets": tx_total, "sampled": cur_e.sampled, "lost": cur_e.lost})
            );
            let _ = std::io::stdout().flush();
        } else if tty && (last_progress.elapsed() >= Duration::from_millis(500) || finishing) {
            last_progress = Instant::now();
            eprint!(
                "\r  {:6.1} s{}  rx {:>10} pkts  tx {:>10} pkts  samples {}  lost {}   ",
                started.elapsed().as_secs_f64(),
                opts.duration.map(|d| format!(" / {d} s")).unwrap_or_default(),
                rx_total,
                tx_total,
                cur_e.sampled,
                cur_e.lost
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
    // Detach before the final metadata write: nothing stays attached even if that write fails.
    drop(probe);
    if let Some(e) = write_error {
        return Err(e.context(format!(
            "recording stopped after {index} intervals; {} holds everything up to the last completed interval",
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
    Ok(RecordSummary { intervals: index, rx_packets: rx_total, tx_packets: tx_total, events: events_total, stopped_by_signal })
}
