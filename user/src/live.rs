//! The live Snapshot stream: resolve the interface, attach the probes and the
//! counter sampler, and produce one Snapshot per interval. `record`, `top` and
//! `serve` all consume it, so what they show is one code path.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::counters;
use crate::sys::{is_root, monotonic_ns};
use crate::probe::features::Features;
use crate::probe::pktlife::{rx_queue_offset_for_driver, PktlifeProbe, ProbeConfig};
use crate::snapshot::{EventCounters, QueueCounters, Snapshot};
use crate::topology::{self, HostInfo, IfaceInfo};

/// Which hardware view a live session takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CountersMode {
    /// Uncore/core PMUs when the platform has them; otherwise none, quietly.
    Auto,
    /// Software perf events through the same read path (hosts without a PMU; tests).
    Software,
    /// No counters.
    Off,
}

#[derive(Debug, Clone)]
pub struct LiveOptions {
    pub iface: String,
    pub netns: Option<String>,
    pub interval_ms: u64,
    pub sample_every: u32,
    pub stage_every: u32,
    pub counters: CountersMode,
    pub miss_source: crate::probe::l3miss::MissSource,
    /// Sample period of the L3-miss event (events, or ns for cpu-clock).
    pub miss_period: u64,
    /// Address join on 1 in N buffer pages (power of two; 1: every page).
    pub join_sample: u32,
    /// Attribution (buffer join, CPU context, sampler) in one window per interval, 1/N of it
    /// (crate::windows); 1: always on.
    pub miss_duty: u32,
    /// The L3-miss flow map's size (None: built in); a test knob.
    pub miss_flow_slots: Option<u32>,
    /// Flows are read from the kernel every this many intervals (and on the last).
    pub flow_every: u64,
    pub verbose: bool,
    /// Hook flavour: auto (tp_btf where the kernel allows, else raw_tp) or forced.
    pub hooks: crate::probe::features::HookChoice,
}

impl LiveOptions {
    /// A live surface (top, serve): aggregates only, so no per-packet records
    /// cross to userspace, stage latencies on the default share of packets, and no L3-miss
    /// sampler (attribution belongs to recordings).
    pub fn surface(
        iface: &str,
        netns: Option<&str>,
        interval_ms: u64,
        counters: CountersMode,
        flow_every: u64,
        verbose: bool,
    ) -> LiveOptions {
        LiveOptions {
            iface: iface.to_string(),
            netns: netns.map(str::to_string),
            interval_ms,
            sample_every: 0,
            stage_every: crate::probe::pktlife::DEFAULT_STAGE_EVERY,
            counters,
            miss_source: crate::probe::l3miss::MissSource::Off,
            miss_period: 0,
            join_sample: 1,
            miss_duty: 1,
            miss_flow_slots: None,
            flow_every,
            verbose,
            hooks: crate::probe::features::HookChoice::Auto,
        }
    }
}

/// Open the counter sampler asked for. Auto degrades quietly (the reason is
/// kept in `notes`); an explicit request fails loudly.
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

pub struct LiveSession {
    pub iface: IfaceInfo,
    pub host: HostInfo,
    pub features: Features,
    pub probe: PktlifeProbe,
    pub platform: String,
    pub counters_source: &'static str,
    pub counter_notes: Vec<String>,
    /// What drives the L3-miss samples, or why there are none.
    pub miss_label: String,
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

impl LiveSession {
    /// Everything that can fail for a bad argument fails here, before attaching.
    pub fn preflight(opts: &LiveOptions) -> Result<(Features, IfaceInfo)> {
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
        if opts.verbose {
            eprintln!("features: {}", serde_json::to_string(&features)?);
        }
        let iface = topology::resolve_iface_live(&opts.iface, opts.netns.as_deref())?;
        Ok((features, iface))
    }

    pub fn start(opts: &LiveOptions, features: Features, iface: IfaceInfo) -> Result<LiveSession> {
        use crate::probe::l3miss::{event_attr, MissSource};
        let platform = counters::platform::detect_host().platform();
        if opts.miss_duty == 0 || opts.miss_duty > crate::windows::MAX_DUTY {
            bail!("--miss-duty must be from 1 to {}, not {}", crate::windows::MAX_DUTY, opts.miss_duty);
        }
        let miss_period = crate::windows::window_period(opts.miss_period, opts.miss_duty);
        let miss_attr = event_attr(opts.miss_source, platform, miss_period, std::path::Path::new("/sys"))?;
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
            copy_standin: opts.miss_source == MissSource::SoftwareCopy,
            join_sample: opts.join_sample,
            miss_flow_slots: opts.miss_flow_slots,
        };
        let mut probe = PktlifeProbe::attach(&cfg, &features, opts.hooks)?;
        let miss_label = match miss_attr {
            None => match opts.miss_source {
                MissSource::Off => "off (--miss-sampling off)".to_string(),
                _ => "absent: no PEBS L3-miss event on this host (no Intel core PMU); attribution is model/regression-only".to_string(),
            },
            // In windows the sampler waits, disabled, for the first one.
            Some((attr, label)) => match probe.attach_miss_sampler(attr, label, opts.miss_duty > 1) {
                Ok(desc) => desc,
                Err(e) if opts.miss_source == MissSource::Auto => format!("absent: {e:#}"),
                Err(e) => return Err(e),
            },
        };
        let windows = if probe.has_miss_sampler() && opts.miss_duty > 1 {
            // Off until the first window: nothing kept, nothing sampled.
            probe.set_attribution(false, false, None)?;
            WindowDriver::new(crate::windows::cycle(Duration::from_millis(opts.interval_ms)), opts.miss_duty)
        } else {
            None
        };
        let (sampler, counters_source, counter_notes) = open_counters(opts.counters)?;
        if opts.verbose {
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
        Ok(LiveSession {
            host: topology::host_live(),
            iface,
            features,
            probe,
            platform: counters::platform::detect_host().describe(),
            counters_source,
            counter_notes,
            miss_label,
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

/// Drives the attribution windows (crate::windows): turns the join and the sampler on and
/// off as the recording passes through them, and measures how long the sampler ran.
struct WindowDriver {
    schedule: crate::windows::Schedule<fn() -> f64>,
    phase: crate::windows::Phase,
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
        let schedule = crate::windows::Schedule::new(cycle, duty, fastrand::f64 as fn() -> f64)?;
        Some(WindowDriver {
            schedule,
            phase: crate::windows::Phase::Off,
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
        use crate::windows::Phase;
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
