//! `ddioscope record`: attach a session, write each of its snapshots into a recording,
//! stop on Ctrl-C/SIGTERM or after the duration, detach.
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};

use super::meta::StoppedBy;
use super::writer::{CounterRow, Retention};
use super::{RecordingMeta, Writer};
use crate::probe::features::HookChoice;
use crate::session::{DetailArgs, DetailMode, MissArgs, Session, SessionArgs, SessionOptions};
use crate::snapshot::{Dir, EventCounters, Snapshot};
use crate::sys::{monotonic_ns, progress_line, stop_flag};
use crate::topology::presence::Gone;

/// `ddioscope record`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub session: SessionArgs,
    /// Stop after this long: seconds, or with units (10s, 5m, 1h30m). Default: run until Ctrl-C.
    #[arg(short, long, value_name = "DURATION", value_parser = crate::units::duration_flag)]
    pub duration: Option<f64>,
    /// Recording file to create.
    #[arg(short, long, default_value = "ddioscope.ddio")]
    pub output: PathBuf,
    /// Start a new file every DURATION (1h, 30m, seconds): with `-o run.ddio`, files
    /// run-YYYYmmddTHHMMSSZ.ddio (UTC at each file's start; -2, -3 ... appended when the
    /// name is taken, never replacing a file). Each file is a complete recording of its
    /// period; `report 'run-*.ddio'` reads them as one. --keep and --max-size apply to each
    /// file; no file is ever deleted.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::duration_flag)]
    pub rotate: Option<f64>,
    /// Keep raw intervals for this long (24h, 90m, seconds); older ones are dropped once
    /// their per-minute and per-hour rollups are written, so the whole run stays reportable
    /// by the minute. Default: keep all.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::duration_flag)]
    pub keep: Option<f64>,
    /// Drop the oldest raw intervals (their rollups stay) while the recording would pass
    /// this size (2G, 500M). Default: no limit.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size_flag)]
    pub max_size: Option<u64>,
    /// Replace the output file if it exists (a regular file only: never a device, FIFO,
    /// socket or symlink), once the new recording holds its first interval.
    #[arg(long)]
    pub force: bool,
    /// Snapshot interval in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    pub interval: u64,
    #[command(flatten)]
    pub detail: DetailArgs,
    /// Send 1 in N packets' full life records to userspace (0 disables sampling).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub sample: u32,
    /// Measure stage latencies on 1 in N packets the detail hooks see (1: every packet).
    /// Counts always cover every packet; this trades histogram density for per-packet cost.
    #[arg(long, value_name = "N", default_value_t = crate::probe::pktlife::DEFAULT_STAGE_EVERY, value_parser = clap::value_parser!(u32).range(1..))]
    pub stage_sample: u32,
    /// Print progress as JSON lines on stdout (first line once the probes are attached).
    #[arg(long)]
    pub json_progress: bool,
    /// Import a `perf stat -I MS -x,` CSV captured on this or another host
    /// (see scripts/capture-counters.sh) into the recording.
    #[arg(long, value_name = "FILE")]
    pub counters_from: Option<PathBuf>,
    #[command(flatten)]
    pub miss: MissArgs,
    /// Hook flavour: auto (tp_btf where this kernel allows it, else raw_tp), or
    /// tp-btf / raw-tp for every hook, failing if the kernel refuses it.
    #[arg(long, value_enum, default_value = "auto")]
    pub hooks: HookChoice,
}

impl RecordArgs {
    /// The session a recording runs: per-packet samples and the L3-miss sampler as asked,
    /// flows read about once a second.
    pub fn session_options(&self) -> SessionOptions {
        SessionOptions {
            args: self.session.clone(),
            interval_ms: self.interval,
            sample_every: self.sample,
            stage_every: self.stage_sample,
            miss: self.miss.clone(),
            detail: self.detail.clone(),
            flow_every: (1000 / self.interval.max(1)).max(1),
            hooks: self.hooks,
        }
    }
}

/// Summary returned to the caller (and printed).
pub struct RecordSummary {
    /// The files written, in order (one without --rotate).
    pub files: Vec<PathBuf>,
    pub intervals: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub events: EventCounters,
    pub stopped_by_signal: bool,
}

/// `ddioscope record`: the recording, then one line saying what was written.
pub fn run(args: &RecordArgs) -> Result<()> {
    let s = record(args)?;
    Progress::new(args).done(args, &s);
    Ok(())
}

pub fn record(args: &RecordArgs) -> Result<RecordSummary> {
    check_args(args)?;
    let opts = args.session_options();
    let (features, iface) = Session::preflight(&opts)?;

    // The output is created before anything attaches: a bad path fails cleanly.
    let first_path = match args.rotate {
        Some(_) => rotated_path(&args.output, unix_ms()),
        None => args.output.clone(),
    };
    let mut writer = Writer::create(&first_path, args.force && args.rotate.is_none())?;
    writer.set_retention(retention(args));
    let static_meta = RecordingMeta {
        command: Some(std::env::args().collect::<Vec<_>>().join(" ")),
        iface: Some(iface.clone()),
        features: Some(serde_json::to_value(&features)?),
        drop_reason_names: Some(crate::probe::features::drop_reason_names()),
        interval_ms: Some(args.interval),
        sample_every: Some(args.sample),
        stage_every: Some(args.stage_sample),
        complete: Some(false),
        ..RecordingMeta::this_build()
    };
    static_meta.write(&writer)?;

    // Signals first, so a Ctrl-C during attach still detaches cleanly.
    let stop = stop_flag()?;
    let mut live = Session::start(&opts, features, iface)?;
    session_meta(&live)?.write(&writer)?;

    let mut progress = Progress::new(args);
    progress.started(&live, &first_path);
    let end = args
        .duration
        .map(|d| live.started + Duration::from_secs_f64(d));
    let mut totals = Totals::default();
    let mut rotation = args.rotate.map(|every| Rotation {
        every_ns: (every * 1e9) as u64,
        next_ns: live.start_ns + (every * 1e9) as u64,
        base: args.output.clone(),
        files: vec![first_path.clone()],
        baseline: WholeRun::default(),
        latest: WholeRun::default(),
        static_meta: static_meta.clone(),
        retention: retention(args),
    });
    let write_error = write_intervals(
        &mut live,
        &mut writer,
        &stop,
        end,
        rotation.as_mut(),
        &mut progress,
        |live, snap, finishing, progress| {
            totals.add(snap);
            progress.interval(live, &totals, finishing);
        },
    )?;
    let files = rotation.map_or_else(|| vec![first_path.clone()], |r| r.files);
    progress.finished();
    let stopped_by_signal = stop.load(Ordering::Relaxed);
    let intervals = live.index();
    let live_gone = live.gone().map(str::to_string);
    let gone_how = live.gone_how();
    let flow_windows = live.flow_windows();
    let windows_opened = live.windows_opened();
    let windows_passed = live.windows_passed();
    // Detach before the final metadata write: nothing stays attached even if that write fails.
    drop(live);
    if let Some(e) = write_error {
        if is_disk_full(&e) && writer.published() {
            // The intervals before are whole: say why it ended, in one transaction (a page
            // or two, which fits where the failed interval's space is reused; all of it or
            // none). If even that does not fit, the recording reads as cut off, which it
            // also is.
            let end = RecordingMeta {
                end_ns: Some(monotonic_ns()),
                stopped_by: Some(StoppedBy::DiskFull),
                complete: Some(true),
                flow_windows,
                windows_opened,
                windows_passed,
                ..Default::default()
            };
            // The last minute's rollups first, if they still fit; else it stays raw.
            let _ = writer.close_rollups();
            let _ = writer.in_transaction(|w| end.write(w));
        }
        return Err(write_failure(e, writer.path(), &writer));
    }
    let gone = live_gone;
    if let Err(e) = writer.close_rollups() {
        return Err(write_failure(e, writer.path(), &writer));
    }
    RecordingMeta {
        end_ns: Some(monotonic_ns()),
        stopped_by: Some(if let Some(how) = gone_how {
            match how {
                Gone::Removed => StoppedBy::DeviceRemoved,
                Gone::Moved => StoppedBy::DeviceMoved,
                Gone::NetnsDeleted => StoppedBy::NetnsDeleted,
            }
        } else if gone.is_some() {
            StoppedBy::DeviceRemoved
        } else if stopped_by_signal {
            StoppedBy::Signal
        } else {
            StoppedBy::Duration
        }),
        complete: Some(true),
        flow_windows,
        windows_opened,
        windows_passed,
        ..Default::default()
    }
    .write(&writer)?;
    drop(writer);
    if let Some(csv) = &args.counters_from {
        super::import::import_counters(&args.output, csv)?;
    }
    if let Some(why) = gone {
        bail!(
            "recording stopped: {why}; {} holds the {intervals} intervals before, complete and readable",
            describe_files(&files[files.len() - 1..])
        );
    }
    Ok(RecordSummary {
        files,
        intervals,
        rx_packets: totals.rx_packets,
        tx_packets: totals.tx_packets,
        events: totals.events,
        stopped_by_signal,
    })
}

/// The flags' values that no session could honour, refused before anything attaches.
fn check_args(args: &RecordArgs) -> Result<()> {
    if let Some(f) = &args.counters_from {
        if !f.is_file() {
            bail!("--counters-from {}: no such file", f.display());
        }
    }
    if let Some(d) = args.duration {
        if d.is_nan() || d <= 0.0 {
            bail!("--duration must be a positive number of seconds");
        }
    }
    if let Some(r) = args.rotate {
        if r.is_nan() || r * 1e3 < args.interval as f64 || r < 1.0 {
            bail!(
                "--rotate must be at least 1 s and one interval ({} ms)",
                args.interval
            );
        }
        if args.counters_from.is_some() {
            bail!("--counters-from imports into one file: it cannot be combined with --rotate");
        }
    }
    Ok(())
}

/// What the session found and opened, once it is attached.
fn session_meta(live: &Session) -> Result<RecordingMeta> {
    let windowed = live.windowed();
    let (cycle, spans) = live.window_spans().unzip();
    let attributing = windowed && live.has_miss_sampler();
    // Whole microseconds: the windows are drawn no finer.
    let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    let hooks: &[crate::probe::pktlife::AttachedHook] =
        live.detail.as_ref().map_or(&[], |d| d.hooks.as_slice());
    let l3 = live.l3.as_ref();
    Ok(RecordingMeta {
        host: Some(live.host.clone()),
        // LLC from sysfs and IIO LLC WAYS from MSR 0xC8B (read only), as the model will use them.
        geometry: crate::model::geometry::LlcGeometry::detect(
            std::path::Path::new("/sys"),
            std::path::Path::new("/dev"),
            0,
        )
        .ok(),
        hooks: Some(serde_json::to_value(hooks)?),
        detail: Some(live.detail_mode),
        rx_counts: Some(live.count_sources().0),
        tx_counts: Some(live.count_sources().1.to_string()),
        tier0_hooks: Some(live.tier0.hooks.clone()),
        hook_plan: Some(live.hook_plan()),
        flow_sample_bytes: Some(live.flow_sample),
        flow_window_sample_bytes: live.flow_windows().map(|_| live.window_flow_sample),
        napi_counts: Some(
            if live.napi_windowed() {
                "windows"
            } else {
                "exact"
            }
            .to_string(),
        ),
        drop_counts: Some(
            if live.drops_windowed() {
                "windows"
            } else {
                "exact"
            }
            .to_string(),
        ),
        window_cycle_ms: cycle.map(|c| c.as_millis() as f64),
        window_duty: windowed.then_some(live.duty),
        window_ms: spans.map(|s| ms(s.window)),
        window_packets: windowed.then_some(live.window_packets),
        window_run_budget: windowed.then_some(live.run_budget),
        window_warmup_ms: spans.map(|s| ms(s.warmup)),
        window_drain_ms: spans.map(|s| ms(s.drain)),
        platform: Some(live.platform.describe()),
        platform_detection: Some(live.platform.clone()),
        counters_source: Some(live.counters_source),
        counters_notes: Some(live.counter_notes.clone()),
        miss_sampling: Some(live.miss_label.clone()),
        miss_source: Some(live.miss_sampling),
        miss_stand_in: Some(live.miss_sampling.is_stand_in()),
        // The period the sampler runs at: inside windows, the one asked for over the duty.
        miss_period: Some(live.miss_period),
        join_sample: Some(live.join_sample as u64),
        // The attribution's windows are the detail windows (the keys readers of attribution know).
        miss_cycle_ms: cycle.filter(|_| attributing).map(|c| c.as_millis() as f64),
        miss_duty: attributing.then_some(live.duty as u64),
        miss_window_ms: spans.filter(|_| attributing).map(|s| ms(s.window)),
        miss_warmup_ms: spans.filter(|_| attributing).map(|s| ms(s.warmup)),
        buffer_join: Some(live.buffer_join.clone()),
        miss_throttle: l3
            .and_then(|l| l.throttle_unavailable())
            .map(|why| format!("not measured: {why}")),
        miss_sampler_cpus: l3.and_then(|l| l.sampler_cpus()).map(|n| n as u64),
        buf_pages_capacity: live
            .detail
            .as_ref()
            .filter(|_| live.has_miss_sampler())
            .map(|d| d.buf_pages_capacity() as u64),
        prog_ids: Some(live.prog_ids()),
        start_ns: Some(live.start_ns),
        start_unix_ms: Some(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        ),
        ..Default::default()
    })
}

/// Whether a write failed because the file system is full (SQLITE_FULL, or ENOSPC from the
/// rename into place).
fn is_disk_full(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<super::writer::DiskFull>()
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.raw_os_error() == Some(libc::ENOSPC))
    })
}

/// The error of an interval that could not be written, saying what the output path holds
/// now: the intervals before it once the recording was renamed into place there, else
/// whatever it held before the run (nothing of this run reached it).
fn write_failure(e: anyhow::Error, output: &Path, writer: &Writer) -> anyhow::Error {
    let out = output.display();
    let what = if writer.published() {
        format!(
            "recording stopped after {} intervals; {out} holds everything up to the last completed interval",
            writer.intervals()
        )
    } else if std::fs::symlink_metadata(output).is_ok() {
        format!("recording stopped before its first interval was written; {out} was left as it was")
    } else {
        format!("recording stopped before its first interval was written; {out} was not created")
    };
    e.context(what)
}

/// Take snapshots until the session finishes, writing each as one committed interval, and
/// show each to `each`. An interval that cannot be written ends the loop and is returned
/// (the file keeps the intervals before it); the session's own errors end it as errors.
#[allow(clippy::too_many_arguments)]
fn write_intervals(
    live: &mut Session,
    writer: &mut Writer,
    stop: &AtomicBool,
    end: Option<Instant>,
    mut rotation: Option<&mut Rotation>,
    progress: &mut Progress,
    mut each: impl FnMut(&Session, &Snapshot, bool, &mut Progress),
) -> Result<Option<anyhow::Error>> {
    let mut notes_len = live.counter_notes.len();
    loop {
        let (mut snap, finishing) = live.next(stop, end)?;
        if let Some(r) = rotation.as_deref_mut() {
            // The whole-run rows say what this file's period added.
            r.latest.observe(&snap);
            r.baseline.subtract(&mut snap);
        }
        let source = live.counters_source.as_str();
        let rows: Vec<CounterRow> = snap
            .counters
            .iter()
            .map(|r| CounterRow::from_reading(r, source))
            .collect();
        if let Err(e) = writer
            .check_room()
            .and_then(|()| writer.write_snapshot(&snap))
            .and_then(|()| writer.write_counters(snap.index, &rows))
        {
            return Ok(Some(e));
        }
        if live.counter_notes.len() != notes_len {
            notes_len = live.counter_notes.len();
            // A note may say the counts changed source: the meta says where they come from now.
            RecordingMeta {
                counters_notes: Some(live.counter_notes.clone()),
                rx_counts: Some(live.count_sources().0),
                tx_counts: Some(live.count_sources().1.to_string()),
                hook_plan: Some(live.hook_plan()),
                ..Default::default()
            }
            .write(writer)?;
        }
        each(live, &snap, finishing, progress);
        if finishing {
            return Ok(None);
        }
        if let Some(r) = rotation.as_deref_mut() {
            if snap.t_ns >= r.next_ns {
                if let Err(e) = r.close(live, writer, snap.t_ns) {
                    return Ok(Some(e));
                }
                let next = r.open(live, snap.t_ns)?;
                let closed = std::mem::replace(writer, next);
                let intervals = closed.intervals();
                // Dropped here: its log is folded back, so the closed file is one file.
                drop(closed);
                progress.rotated(&r.files[r.files.len() - 2], intervals, writer.path());
                while r.next_ns <= snap.t_ns {
                    r.next_ns += r.every_ns;
                }
            }
        }
    }
}

/// `record --rotate`: when the next file begins, what each new file starts with, and the
/// whole-run counts the files before already hold.
struct Rotation {
    every_ns: u64,
    /// The BPF-clock time after which the next interval goes into a new file.
    next_ns: u64,
    base: PathBuf,
    files: Vec<PathBuf>,
    baseline: WholeRun,
    latest: WholeRun,
    static_meta: RecordingMeta,
    retention: Retention,
}

impl Rotation {
    /// The file ends after the interval that ended at `end_ns`: its last minute rolled up
    /// and its end said, as a recording that stopped there.
    fn close(&self, live: &Session, writer: &mut Writer, end_ns: u64) -> Result<()> {
        writer.close_rollups()?;
        writer.in_transaction(|w| {
            RecordingMeta {
                end_ns: Some(end_ns),
                stopped_by: Some(StoppedBy::Rotated),
                complete: Some(true),
                flow_windows: live.flow_windows(),
                windows_opened: live.windows_opened(),
                windows_passed: live.windows_passed(),
                ..Default::default()
            }
            .write(w)
        })
    }

    /// The next file, from the interval after `start_ns`: its own metadata (the session's,
    /// with this file's start), and the whole-run counts so far as its baseline.
    fn open(&mut self, live: &Session, start_ns: u64) -> Result<Writer> {
        let path = rotated_path(&self.base, unix_ms());
        let fail = |e: anyhow::Error| {
            e.context(format!(
                "recording stopped: could not start {}; {} complete and readable",
                path.display(),
                describe_files(&self.files)
            ))
        };
        let mut w = Writer::create(&path, false).map_err(fail)?;
        w.set_retention(self.retention);
        let meta = |w: &Writer| -> Result<()> {
            self.static_meta.write(w)?;
            RecordingMeta {
                start_ns: Some(start_ns),
                ..session_meta(live)?
            }
            .write(w)
        };
        meta(&w).map_err(fail)?;
        self.baseline = self.latest.clone();
        self.files.push(path);
        Ok(w)
    }
}

/// The whole-run tables' cumulative counts (flows, drop reasons, flow overflow, the L3-miss
/// flows and regions) as last read, so a rotated file stores only what its period added.
/// Page pools and socket queues are kernel state as last read, and stay so.
#[derive(Clone, Default)]
struct WholeRun {
    flows: BTreeMap<crate::snapshot::FlowKey, [u64; 4]>,
    drops: BTreeMap<u32, u64>,
    drops_before_stack: BTreeMap<u32, u64>,
    overflow: BTreeMap<(Dir, u32), [u64; 3]>,
    miss_flows: BTreeMap<crate::snapshot::FlowKey, [u64; 2]>,
    regions: BTreeMap<u64, u64>,
}

impl WholeRun {
    fn observe(&mut self, s: &Snapshot) {
        for f in &s.flows {
            self.flows.insert(
                f.key.clone(),
                [f.packets, f.bytes, f.payload_bytes, f.samples.unwrap_or(0)],
            );
        }
        self.drops.extend(s.drop_reasons.iter().copied());
        self.drops_before_stack
            .extend(s.drops_before_stack.iter().copied());
        for o in &s.flow_overflow {
            self.overflow
                .insert((o.dir, o.queue), [o.packets, o.bytes, o.unparsed]);
        }
        if let Some(m) = &s.misses {
            for (k, a, c) in &m.flows {
                self.miss_flows.insert(k.clone(), [*a, *c]);
            }
            self.regions.extend(m.regions.iter().copied());
        }
    }

    /// `s`'s cumulative rows less the baseline; rows with nothing added are left out.
    fn subtract(&self, s: &mut Snapshot) {
        s.flows.retain_mut(|f| {
            let Some(b) = self.flows.get(&f.key) else {
                return true;
            };
            f.packets = f.packets.saturating_sub(b[0]);
            f.bytes = f.bytes.saturating_sub(b[1]);
            f.payload_bytes = f.payload_bytes.saturating_sub(b[2]);
            f.samples = f.samples.map(|n| n.saturating_sub(b[3]));
            f.packets > 0
        });
        s.drop_reasons.retain_mut(|(r, n)| {
            *n = n.saturating_sub(self.drops.get(r).copied().unwrap_or(0));
            *n > 0
        });
        s.drops_before_stack.retain_mut(|(r, n)| {
            *n = n.saturating_sub(self.drops_before_stack.get(r).copied().unwrap_or(0));
            *n > 0
        });
        s.flow_overflow.retain_mut(|o| {
            let b = self
                .overflow
                .get(&(o.dir, o.queue))
                .copied()
                .unwrap_or_default();
            o.packets = o.packets.saturating_sub(b[0]);
            o.bytes = o.bytes.saturating_sub(b[1]);
            o.unparsed = o.unparsed.saturating_sub(b[2]);
            o.packets > 0 || o.unparsed > 0
        });
        if let Some(m) = &mut s.misses {
            m.flows.retain_mut(|(k, a, c)| {
                let b = self.miss_flows.get(k).copied().unwrap_or_default();
                *a = a.saturating_sub(b[0]);
                *c = c.saturating_sub(b[1]);
                *a > 0 || *c > 0
            });
            m.regions.retain_mut(|(r, n)| {
                *n = n.saturating_sub(self.regions.get(r).copied().unwrap_or(0));
                *n > 0
            });
        }
    }
}

/// `--keep`/`--max-size` as the writer takes them (per file with --rotate).
fn retention(args: &RecordArgs) -> Retention {
    Retention {
        keep_ns: args.keep.map(|s| (s * 1e9) as u64),
        max_bytes: args.max_size,
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `DIR/NAME-YYYYmmddTHHMMSSZ.EXT` for `-o DIR/NAME.EXT` (EXT `ddio` when none), at UTC
/// `unix_ms`; `-2`, `-3` ... before the extension while that name is taken, so a rotation
/// never replaces a file (an earlier run's in the same second, or anyone's).
pub fn rotated_path(output: &Path, unix_ms: u64) -> PathBuf {
    let dir = crate::outfile::parent_dir(output);
    let stem = output
        .file_stem()
        .map_or_else(|| "ddioscope".into(), |s| s.to_string_lossy());
    let ext = output
        .extension()
        .map_or_else(|| "ddio".into(), |s| s.to_string_lossy());
    let ts = chrono::DateTime::from_timestamp_millis(unix_ms as i64)
        .unwrap_or_default()
        .format("%Y%m%dT%H%M%SZ");
    let name = |n: u32| {
        let suffix = if n < 2 {
            String::new()
        } else {
            format!("-{n}")
        };
        dir.join(format!("{stem}-{ts}{suffix}.{ext}"))
    };
    let mut n = 1;
    while n < 10_000 && std::fs::symlink_metadata(name(n)).is_ok() {
        n += 1;
    }
    let p = name(n);
    if output.parent().is_some_and(|d| d.as_os_str().is_empty()) {
        p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p)
    } else {
        p
    }
}

/// A run's files in a message: the one, or the first and how many.
fn describe_files(files: &[PathBuf]) -> String {
    match files {
        [one] => one.display().to_string(),
        [first, .., last] => format!(
            "{} files, {} to {},",
            files.len(),
            first.display(),
            last.display()
        ),
        [] => "no file".to_string(),
    }
}

/// Packets and events over the recording so far.
#[derive(Default)]
struct Totals {
    rx_packets: u64,
    tx_packets: u64,
    events: EventCounters,
}

impl Totals {
    fn add(&mut self, snap: &Snapshot) {
        for q in &snap.queues {
            match q.dir {
                Dir::Rx => self.rx_packets += q.packets,
                Dir::Tx => self.tx_packets += q.packets,
            }
        }
        self.events.sampled += snap.events.sampled;
        self.events.lost += snap.events.lost;
        self.events.received += snap.events.received;
        self.events.state_evicted += snap.events.state_evicted;
    }
}

/// What a recording shows while it runs: JSON lines on stdout for tools (--json-progress),
/// else a start line and, on a terminal, a status line refreshed twice a second on stderr.
struct Progress {
    json: bool,
    tty: bool,
    duration: Option<f64>,
    last: Instant,
}

impl Progress {
    fn new(args: &RecordArgs) -> Progress {
        Progress {
            json: args.json_progress,
            tty: std::io::stderr().is_terminal() && !args.json_progress,
            duration: args.duration,
            last: Instant::now(),
        }
    }

    fn started(&self, live: &Session, output: &Path) {
        let detail_hooks = live
            .detail
            .as_ref()
            .map_or(0, |d| d.hooks.iter().filter(|h| h.flavor.is_some()).count());
        let attached = detail_hooks
            + live
                .tier0
                .hooks
                .iter()
                .filter(|h| h.error.is_none())
                .count();
        let iface = &live.iface;
        if self.json {
            // Each program with whose packets it sees and when it runs.
            let label = |p: &crate::probe::AttachedProg, plan: &[crate::probe::HookPlan]| {
                let mut v = serde_json::to_value(p).unwrap_or_default();
                if let Some(h) = plan.iter().find(|h| h.hook == p.tracepoint) {
                    v["scope"] = serde_json::to_value(h.scope).unwrap_or_default();
                    v["when"] = serde_json::to_value(h.when).unwrap_or_default();
                }
                v
            };
            let tier0 = live.tier0.plan();
            let detail = live.detail_plan();
            let mut progs: Vec<serde_json::Value> = live
                .tier0
                .attached_progs()
                .iter()
                .map(|p| label(p, &tier0))
                .collect();
            if let Some(d) = &live.detail {
                progs.extend(d.hook_progs().iter().map(|p| label(p, &detail)));
            }
            progress_line(
                serde_json::json!({"event": "attached", "iface": iface.name, "ifindex": iface.ifindex,
                "hooks": attached, "output": output.display().to_string(), "prog_ids": live.prog_ids(),
                "progs": progs, "detail": live.detail_mode.as_str(), "rx_counts": live.tier0.rx_source.as_str()}),
            );
            return;
        }
        let windows = match live.detail_mode {
            DetailMode::Windows if live.window_packets > 0 => format!(
                ", detail in windows of 1/{} of the time or about {} packets{}",
                live.duty,
                live.window_packets,
                if live.run_budget > 0.0 {
                    format!(", at most {} program runs per packet", live.run_budget)
                } else {
                    String::new()
                }
            ),
            DetailMode::Windows => format!(", detail in windows of 1/{} of the time", live.duty),
            DetailMode::Full => ", full detail".to_string(),
            DetailMode::Counts if live.duty > 1 => format!(
                ", counts only, tier 0's window programs in windows of 1/{} of the time",
                live.duty
            ),
            DetailMode::Counts => ", counts only, tier 0's programs all the time".to_string(),
        };
        eprintln!(
            "recording {}{} ({} hooks, counters: {}{windows}) into {}{}; Ctrl-C to stop",
            iface.name,
            iface
                .netns
                .as_deref()
                .map(|n| format!(" in netns {n}"))
                .unwrap_or_default(),
            attached,
            live.counters_source,
            output.display(),
            self.duration
                .map(|d| format!(" for {d} s"))
                .unwrap_or_default()
        );
    }

    fn interval(&mut self, live: &Session, t: &Totals, finishing: bool) {
        let elapsed = live.started.elapsed().as_secs_f64();
        if self.json {
            progress_line(
                serde_json::json!({"event": "interval", "index": live.index(), "elapsed_s": elapsed,
                "rx_packets": t.rx_packets, "tx_packets": t.tx_packets, "sampled": t.events.sampled, "lost": t.events.lost,
                "flow_windows": live.flow_windows()}),
            );
        } else if self.tty && (self.last.elapsed() >= Duration::from_millis(500) || finishing) {
            self.last = Instant::now();
            eprint!(
                "\r  {:6.1} s{}  rx {:>10} pkts  tx {:>10} pkts  samples {}  lost {}   ",
                elapsed,
                self.duration
                    .map(|d| format!(" / {d} s"))
                    .unwrap_or_default(),
                t.rx_packets,
                t.tx_packets,
                t.events.sampled,
                t.events.lost
            );
        }
    }

    /// `--rotate` closed one file and opened the next.
    fn rotated(&mut self, closed: &Path, intervals: u64, opened: &Path) {
        if self.json {
            progress_line(
                serde_json::json!({"event": "rotated", "closed": closed.display().to_string(),
                "intervals": intervals, "opened": opened.display().to_string()}),
            );
        } else {
            if self.tty {
                eprintln!();
            }
            eprintln!(
                "closed {} ({intervals} intervals); writing {}",
                closed.display(),
                opened.display()
            );
        }
    }

    /// End the status line.
    fn finished(&self) {
        if self.tty {
            eprintln!();
        }
    }

    fn done(&self, args: &RecordArgs, s: &RecordSummary) {
        if self.json {
            progress_line(
                serde_json::json!({"event": "done", "intervals": s.intervals, "output": s.files.last().unwrap_or(&args.output).display().to_string(),
                    "files": s.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>()}),
            );
        } else {
            eprintln!(
                "wrote {} ({} intervals, rx {} / tx {} packets, {} sampled, {} lost){}",
                describe_files(&s.files).trim_end_matches(','),
                s.intervals,
                s.rx_packets,
                s.tx_packets,
                s.events.sampled,
                s.events.lost,
                if s.stopped_by_signal {
                    "; stopped by signal"
                } else {
                    ""
                }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first interval that failed never claims the path holds a recording: nothing was
    /// renamed there, and whatever it held is as it was.
    #[test]
    fn a_failed_first_interval_says_the_path_is_untouched() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        let mut w = Writer::create(&p, false).unwrap();
        std::fs::write(&p, b"someone else's").unwrap();
        let e = w.write_snapshot(&Snapshot::default()).unwrap_err();
        let line = format!("{:#}", write_failure(e, &p, &w));
        assert!(
            line.contains("before its first interval was written")
                && line.contains("was left as it was"),
            "{line}"
        );
        assert!(!line.contains("holds everything"), "{line}");

        let q = d.path().join("q.ddio");
        let w = Writer::create(&q, false).unwrap();
        let line = format!(
            "{:#}",
            write_failure(anyhow::anyhow!("the disk is full"), &q, &w)
        );
        assert!(
            line.ends_with(&format!(
                "{} was not created: the disk is full",
                q.display()
            )),
            "{line}"
        );
    }

    /// Files are named by their UTC start beside `-o`, and never over a file that exists.
    #[test]
    fn rotated_files_are_named_by_their_start() {
        let d = tempfile::tempdir().unwrap();
        // 2026-11-28 10:05:09.5 UTC.
        let ms = 1_795_860_309_500;
        let p = rotated_path(&d.path().join("run.ddio"), ms);
        assert_eq!(p, d.path().join("run-20261128T100509Z.ddio"));
        std::fs::write(&p, b"someone's").unwrap();
        let q = rotated_path(&d.path().join("run.ddio"), ms);
        assert_eq!(q, d.path().join("run-20261128T100509Z-2.ddio"));
        assert_eq!(std::fs::read(&p).unwrap(), b"someone's");
        // No extension: .ddio; a bare name stays relative to the working directory.
        assert_eq!(
            rotated_path(Path::new("cap"), ms),
            PathBuf::from("cap-20261128T100509Z.ddio")
        );
    }

    #[test]
    fn a_later_failure_names_the_intervals_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        let mut w = Writer::create(&p, false).unwrap();
        w.write_snapshot(&Snapshot::default()).unwrap();
        w.write_snapshot(&Snapshot {
            index: 1,
            ..Default::default()
        })
        .unwrap();
        let line = format!(
            "{:#}",
            write_failure(anyhow::anyhow!("the disk is full"), &p, &w)
        );
        assert!(
            line.contains("stopped after 2 intervals")
                && line.contains("holds everything up to the last completed interval"),
            "{line}"
        );
    }
}
