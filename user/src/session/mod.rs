//! The live Snapshot stream: resolve the interface, attach the probes and the
//! counter sampler, and produce one Snapshot per interval. `record`, `top` and
//! `serve` all consume it, so what they show is one code path.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use serde::{Deserialize, Serialize};

use crate::counters::{self, CounterSource, CountersMode};
use crate::probe::features::HookChoice;
use crate::probe::l3miss::MissSource;
use crate::sys::{is_root, monotonic_ns};
use crate::probe::features::Features;
use crate::probe::pktlife::{rx_queue_offset_for_driver, PktlifeProbe, ProbeConfig};
use crate::snapshot::{EventCounters, QueueCounters, Snapshot};
use crate::topology::{self, HostInfo, IfaceInfo};

pub mod windows;

/// The flags `record`, `top` and `serve` share: which interface, where, and what else to open.
#[derive(Debug, Clone, clap::Args)]
pub struct SessionArgs {
    /// Interface to observe.
    #[arg(short, long)]
    pub iface: String,
    /// Named network namespace (from `ip netns list`) the interface lives in.
    #[arg(long)]
    pub netns: Option<String>,
    /// Hardware counters: auto (uncore PMUs when present), software (software
    /// perf events through the same path), off.
    #[arg(long, value_enum, default_value = "auto")]
    pub counters: CountersMode,
    /// Print the feature table and attach details (program ids) on stderr.
    #[arg(short, long)]
    pub verbose: bool,
}

/// L3-miss sampling for attribution, as `record` is asked for it.
#[derive(Debug, Clone, clap::Args)]
pub struct MissArgs {
    /// L3-miss sampling for attribution: auto (PEBS where the CPU has it), pebs,
    /// software-clock / software-faults / software-copy (stand-ins on hosts
    /// without a PMU; software-copy gives clock samples inside a socket copy
    /// the address of the buffer being copied), off.
    #[arg(long = "miss-sampling", value_name = "MISS_SAMPLING", value_enum, default_value = "auto")]
    pub source: MissSource,
    /// Sample period: 1 in N L3 misses (default 2000), N ns for software-clock
    /// and software-copy (default 1 ms), 1 in N page faults for software-faults (default 1).
    #[arg(long = "miss-period", value_name = "N")]
    pub period: Option<u64>,
    /// Address join on 1 in N packet-buffer pages, chosen by address (a power of two up
    /// to 16; 1: every page). The buffer map's per-packet cost falls with N; samples on
    /// the other pages are counted apart, and the join's shares and miss estimates
    /// come from the sampled pages (estimates scaled by N).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_join_sample)]
    pub join_sample: u32,
    /// Attribution in windows: the buffer join, CPU context and sampler run for 1/N of
    /// each second (plus a warm-up of up to 10 ms), at a random place, with the sample
    /// period divided by N inside, so per-packet cost falls about N-fold and the sample
    /// count stays the same. Miss counts then extrapolate from the windows; buffers handed
    /// up before a window and read in it keep an earlier owner and no age (counted).
    /// 1: always on. Default: 16 with PEBS, 1 with a software stand-in.
    #[arg(long = "miss-duty", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=windows::MAX_DUTY as i64))]
    pub duty: Option<u32>,
    /// Size of the in-kernel L3-miss flow map (default 4096): tests shrink it to check
    /// that charges lost to its evictions are counted.
    #[arg(long = "miss-flow-slots", value_name = "N", hide = true)]
    pub flow_slots: Option<u32>,
}

impl MissArgs {
    /// No sampler: the live surfaces (attribution belongs to recordings).
    pub fn off() -> MissArgs {
        MissArgs { source: MissSource::Off, period: None, join_sample: 1, duty: Some(1), flow_slots: None }
    }

    /// The period asked for, else the source's default.
    pub fn period(&self) -> u64 {
        self.period.unwrap_or(match self.source {
            MissSource::SoftwareClock | MissSource::SoftwareCopy => 1_000_000,
            MissSource::SoftwareFaults => 1,
            MissSource::Auto | MissSource::Pebs | MissSource::Off => 2000,
        })
    }

    /// The duty asked for, else the source's default (`windows::default_duty`).
    pub fn duty(&self) -> u32 {
        self.duty.unwrap_or(windows::default_duty(self.source))
    }
}

/// `--join-sample`: a power of two from 1 to MAX_JOIN_SAMPLE (the page subset is a mask
/// on the buffer table's set index).
fn parse_join_sample(s: &str) -> std::result::Result<u32, String> {
    let max = crate::probe::pktlife::MAX_JOIN_SAMPLE;
    match s.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= max => Ok(n),
        _ => Err(format!("must be a power of two from 1 to {max} (1, 2, 4, ...)")),
    }
}

/// Everything a session needs: the shared flags, and what its consumer sets.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub args: SessionArgs,
    pub interval_ms: u64,
    /// Send 1 in N packets' full life records to userspace (0: none).
    pub sample_every: u32,
    /// Time stage latencies on 1 in N packets.
    pub stage_every: u32,
    pub miss: MissArgs,
    /// Flows are read from the kernel every this many intervals (and on the last).
    pub flow_every: u64,
    /// Hook flavour: auto (tp_btf where the kernel allows, else raw_tp) or forced.
    pub hooks: HookChoice,
}

impl SessionOptions {
    /// A live surface (top, serve): aggregates only, so no per-packet records
    /// cross to userspace, stage latencies on the default share of packets, and no L3-miss
    /// sampler (attribution belongs to recordings).
    pub fn surface(args: &SessionArgs, interval_ms: u64, flow_every: u64) -> SessionOptions {
        SessionOptions {
            args: args.clone(),
            interval_ms,
            sample_every: 0,
            stage_every: crate::probe::pktlife::DEFAULT_STAGE_EVERY,
            miss: MissArgs::off(),
            flow_every,
            hooks: HookChoice::Auto,
        }
    }
}

/// What drives a session's L3-miss samples as it turned out: the source asked for,
/// resolved (auto becomes PEBS or nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissSampling {
    Pebs,
    SoftwareClock,
    SoftwareFaults,
    SoftwareCopy,
    /// Turned off (--miss-sampling off).
    Off,
    /// Asked for, but the host has no event for it.
    Absent,
}

impl MissSampling {
    /// A software event standing in for L3-miss samples: its counts are samples, not misses.
    pub fn is_stand_in(self) -> bool {
        matches!(self, MissSampling::SoftwareClock | MissSampling::SoftwareFaults | MissSampling::SoftwareCopy)
    }

    /// The sampler that runs for `source` once its event opened.
    pub fn of(source: MissSource) -> MissSampling {
        match source {
            MissSource::Auto | MissSource::Pebs => MissSampling::Pebs,
            MissSource::SoftwareClock => MissSampling::SoftwareClock,
            MissSource::SoftwareFaults => MissSampling::SoftwareFaults,
            MissSource::SoftwareCopy => MissSampling::SoftwareCopy,
            MissSource::Off => MissSampling::Off,
        }
    }
}

impl std::fmt::Display for MissSampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            MissSampling::Pebs => "pebs",
            MissSampling::SoftwareClock => "software-clock",
            MissSampling::SoftwareFaults => "software-faults",
            MissSampling::SoftwareCopy => "software-copy",
            MissSampling::Off => "off",
            MissSampling::Absent => "absent",
        })
    }
}

/// A live session: the probes attached to one interface, the counter sampler, and the
/// state that turns their cumulative counts into one Snapshot per interval.
pub struct Session {
    pub iface: IfaceInfo,
    pub host: HostInfo,
    pub features: Features,
    pub probe: PktlifeProbe,
    /// Which uncore event table the host takes, or why none.
    pub platform: counters::Detection,
    pub counters_source: CounterSource,
    pub counter_notes: Vec<String>,
    /// What drives the L3-miss samples, or why there are none, in words.
    pub miss_label: String,
    /// What drives the L3-miss samples.
    pub miss_sampling: MissSampling,
    /// Which packet buffers the address join maps (linear data, frags), and
    /// where the page-to-address layout came from or why frags are left out.
    pub buffer_join: String,
    pub start_ns: u64,
    pub started: Instant,
    /// The sampler's period as opened (inside windows when attribution runs in them).
    pub miss_period: u64,
    /// Attribution windows, when `miss_duty` > 1 and a sampler runs.
    windows: Option<WindowDriver>,
    sampler: Option<counters::Sampler>,
    interval: Duration,
    flow_every: u64,
    index: u64,
    prev_q: Vec<QueueCounters>,
    prev_e: EventCounters,
    prev_t: u64,
    prev_m: crate::snapshot::MissSnapshot,
}

impl Session {
    /// Everything that can fail for a bad argument fails here, before attaching.
    pub fn preflight(opts: &SessionOptions) -> Result<(Features, IfaceInfo)> {
        if opts.interval_ms < 10 {
            bail!("--interval must be at least 10 ms");
        }
        if !is_root() {
            bail!("ddioscope needs root to load BPF programs: run it with sudo");
        }
        let features = Features::detect();
        if let Some(why) = features.fatal() {
            bail!(why);
        }
        if opts.args.verbose {
            eprintln!("features: {}", serde_json::to_string(&features)?);
        }
        let iface = topology::resolve_iface_live(&opts.args.iface, opts.args.netns.as_deref())?;
        Ok((features, iface))
    }

    pub fn start(opts: &SessionOptions, features: Features, iface: IfaceInfo) -> Result<Session> {
        use crate::probe::l3miss::event_attr;
        let detection = counters::platform::detect_host();
        let platform = detection.platform();
        let miss_duty = opts.miss.duty();
        if miss_duty == 0 || miss_duty > windows::MAX_DUTY {
            bail!("--miss-duty must be from 1 to {}, not {}", windows::MAX_DUTY, miss_duty);
        }
        let miss_period = windows::window_period(opts.miss.period(), miss_duty);
        let miss_attr = event_attr(opts.miss.source, platform, miss_period, std::path::Path::new("/sys"))?;
        // Frag pages need the page-to-address layout; without one, the join
        // covers linear data only and the recording says why.
        let layout = miss_attr.as_ref().map(|_| crate::probe::memlayout::resolve_live());
        let buffer_join = match &layout {
            None => "off (no L3-miss sampler)".to_string(),
            Some(Ok(m)) => format!("linear data and page frags; page addresses: {}", m.source),
            Some(Err(why)) => why.clone(),
        };
        let cfg = ProbeConfig {
            ifindex: iface.ifindex,
            netns_inode: iface.netns_inode,
            sample_every: opts.sample_every,
            stage_every: opts.stage_every,
            track_flows: true,
            rx_queue_offset: rx_queue_offset_for_driver(iface.driver.as_deref()),
            join_buffers: miss_attr.is_some(),
            mem_layout: layout.and_then(Result::ok),
            copy_standin: opts.miss.source == MissSource::SoftwareCopy,
            join_sample: opts.miss.join_sample,
            miss_flow_slots: opts.miss.flow_slots,
        };
        let mut probe = PktlifeProbe::attach(&cfg, &features, opts.hooks)?;
        let (miss_sampling, miss_label) = match miss_attr {
            None => match opts.miss.source {
                MissSource::Off => (MissSampling::Off, "off (--miss-sampling off)".to_string()),
                _ => (
                    MissSampling::Absent,
                    "absent: no PEBS L3-miss event on this host (no Intel core PMU); attribution is model/regression-only".to_string(),
                ),
            },
            // In windows the sampler waits, disabled, for the first one.
            Some((attr, label)) => match probe.attach_miss_sampler(attr, label, miss_duty > 1) {
                Ok(desc) => (MissSampling::of(opts.miss.source), desc),
                Err(e) if opts.miss.source == MissSource::Auto => (MissSampling::Absent, format!("absent: {e:#}")),
                Err(e) => return Err(e),
            },
        };
        let windows = if probe.has_miss_sampler() && miss_duty > 1 {
            // Off until the first window: nothing kept, nothing sampled.
            probe.set_attribution(false, false, None)?;
            WindowDriver::new(windows::cycle(Duration::from_millis(opts.interval_ms)), miss_duty)
        } else {
            None
        };
        let (sampler, counters_source, counter_notes) = counters::open(opts.args.counters)?;
        if opts.args.verbose {
            for n in &counter_notes {
                eprintln!("counters: {n}");
            }
        }
        let mut sampler = sampler;
        if let Some(s) = sampler.as_mut() {
            // Counts since the counters were opened (before the probes attached)
            // belong to no interval: read them away so interval 0 starts here.
            let _ = s.read();
        }
        let start_ns = monotonic_ns();
        Ok(Session {
            host: topology::host_live(),
            iface,
            features,
            probe,
            platform: detection,
            counters_source,
            counter_notes,
            miss_label,
            miss_sampling,
            buffer_join,
            start_ns,
            started: Instant::now(),
            miss_period,
            windows,
            sampler,
            interval: Duration::from_millis(opts.interval_ms),
            flow_every: opts.flow_every.max(1),
            index: 0,
            prev_q: Vec::new(),
            prev_e: EventCounters::default(),
            prev_t: start_ns,
            prev_m: Default::default(),
        })
    }

    pub fn index(&self) -> u64 {
        self.index
    }

    /// Wait (on the ring buffer's epoll, not a busy loop) until the next
    /// interval ends, `end` passes or `stop` is set; then take the snapshot.
    /// Returns the snapshot and whether this is the last one.
    pub fn next(&mut self, stop: &AtomicBool, end: Option<Instant>) -> Result<(Snapshot, bool)> {
        let interval_start = self.started + self.interval * self.index as u32;
        let mut deadline = interval_start + self.interval;
        if let Some(e) = end {
            deadline = deadline.min(e);
        }
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let mut wait = deadline.saturating_duration_since(now).min(Duration::from_millis(200));
            if let Some(w) = self.windows.as_mut() {
                let at = now.saturating_duration_since(self.started);
                w.drive(&mut self.probe, at)?;
                if let Some(c) = w.next_change(at) {
                    wait = wait.min(c - at);
                }
            }
            if now >= deadline {
                break;
            }
            // Whole milliseconds: the ring's poll takes its timeout in ms, and a wait rounded
            // down to 0 would spin until a window's change.
            self.probe.poll(Duration::from_millis(wait.as_micros().div_ceil(1000) as u64))?;
        }
        let finishing = stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e);

        let t_ns = monotonic_ns();
        let cur_q = self.probe.read_queues()?;
        let mut cur_e = self.probe.read_events()?;
        // The kernel wakes the ring's reader only once a quarter of it is
        // full, so most of an interval's records are still in it here: count
        // them as received once drained, like the records `sampled` counts.
        let samples = self.probe.drain_samples();
        cur_e.received = self.probe.received();
        let mut snap = Snapshot {
            index: self.index,
            t_ns,
            dur_ns: t_ns - self.prev_t,
            events: cur_e.delta(&self.prev_e),
            samples,
            ..Default::default()
        };
        for q in &cur_q {
            let d = match self.prev_q.iter().find(|p| p.dir == q.dir && p.queue == q.queue) {
                Some(p) => q.delta(p),
                None => q.clone(),
            };
            if !d.is_zero() {
                snap.queues.push(d);
            }
        }
        let flow_turn = finishing || self.index % self.flow_every == self.flow_every - 1;
        if flow_turn {
            snap.flows = self.probe.read_flows()?;
            snap.drop_reasons = self.probe.read_drop_reasons()?;
        }
        if self.probe.has_miss_sampler() {
            let cur = self.probe.read_misses(flow_turn)?;
            let mut d = cur.delta(&self.prev_m);
            if let Some(w) = self.windows.as_mut() {
                d.sampled_ns = Some(w.take_sampled(Instant::now().saturating_duration_since(self.started)));
            }
            d.flows = cur.flows.clone();
            d.regions = cur.regions.clone();
            self.prev_m = cur;
            snap.misses = Some(d);
        }
        if let Some(s) = self.sampler.as_mut() {
            match s.read() {
                Ok(r) => snap.counters = r,
                Err(e) => {
                    // Keep the software view going; say why counters stopped.
                    self.counter_notes.push(format!("counter reads stopped at interval {}: {e:#}", self.index));
                    self.sampler = None;
                }
            }
        }
        self.prev_q = cur_q;
        self.prev_e = cur_e;
        self.prev_t = t_ns;
        self.index += 1;
        Ok((snap, finishing))
    }
}

/// Drives the attribution windows (`windows`): turns the join and the sampler on and
/// off as the recording passes through them, and measures how long the sampler ran.
struct WindowDriver {
    schedule: windows::Schedule<fn() -> f64>,
    phase: windows::Phase,
    /// Windows begun so far: the current one's number retires older CPU contexts.
    generation: u32,
    /// CLOCK_MONOTONIC when the join last came on: what it keeps from then on is current.
    join_since_ns: u64,
    /// Sampling time not yet reported, and since when the sampler runs (time since the start).
    sampled: Duration,
    sampling_since: Option<Duration>,
}

impl WindowDriver {
    fn new(cycle: Duration, duty: u32) -> Option<WindowDriver> {
        let schedule = windows::Schedule::new(cycle, duty, fastrand::f64 as fn() -> f64)?;
        Some(WindowDriver {
            schedule,
            phase: windows::Phase::Off,
            generation: 0,
            join_since_ns: 0,
            sampled: Duration::ZERO,
            sampling_since: None,
        })
    }

    fn next_change(&mut self, at: Duration) -> Option<Duration> {
        self.schedule.next_change(at)
    }

    /// The time the sampler ran since the last call, up to `at`: the estimates scale by what
    /// it was, not by the nominal 1/duty (windows that overlap, a partial first or last
    /// cycle, a change made late).
    fn take_sampled(&mut self, at: Duration) -> u64 {
        let mut total = std::mem::take(&mut self.sampled);
        if let Some(since) = self.sampling_since.as_mut() {
            total += at.saturating_sub(*since);
            *since = at;
        }
        total.as_nanos() as u64
    }

    /// Put the probes in the phase of `at` (time since the recording started).
    fn drive(&mut self, probe: &mut PktlifeProbe, at: Duration) -> Result<()> {
        use windows::Phase;
        let phase = self.schedule.phase_at(at);
        if phase == self.phase {
            return Ok(());
        }
        let window = if self.phase == Phase::Off {
            self.join_since_ns = monotonic_ns();
            self.generation = self.generation.wrapping_add(1);
            Some((self.join_since_ns, self.generation))
        } else {
            None
        };
        match phase {
            Phase::Off => probe.set_attribution(false, false, None)?,
            Phase::Joining => probe.set_attribution(true, false, window)?,
            Phase::Sampling => probe.set_attribution(true, true, window)?,
        }
        match (self.phase == Phase::Sampling, phase == Phase::Sampling) {
            (false, true) => self.sampling_since = Some(at),
            (true, false) => {
                if let Some(since) = self.sampling_since.take() {
                    self.sampled += at.saturating_sub(since);
                }
            }
            _ => {}
        }
        self.phase = phase;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn join_sample_is_a_power_of_two_up_to_the_cap() {
        for ok in ["1", "2", "4", "16"] {
            assert!(super::parse_join_sample(ok).is_ok(), "{ok}");
        }
        for bad in ["0", "3", "32", "-4", "four"] {
            assert!(super::parse_join_sample(bad).is_err(), "{bad}");
        }
    }
}
