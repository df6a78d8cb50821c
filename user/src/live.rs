//! The live Snapshot stream: resolve the interface, attach the probes (tier 0 always, the
//! detail hooks in windows or for the whole run) and the counter sampler, and produce one
//! Snapshot per interval. `record`, `top` and `serve` all consume it, so what they show is
//! one code path.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::counters;
use crate::probe::features::Features;
use crate::probe::l3miss::L3missProbe;
use crate::probe::pktlife::{rx_queue_offset_for_driver, PktlifeProbe, ProbeConfig, StageCounts};
use crate::probe::qcount::{QcountConfig, QcountProbe, QueueCounts};
use crate::probe::qcount_skel::types::qc_counter;
use crate::snapshot::{Dir, EventCounters, FlowCounters, QueueCounters, Snapshot};
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

/// How much per-packet detail a live session takes, beyond tier 0's exact counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DetailMode {
    /// Tier 0 only: exact per-queue counts and sampled flows (no stages, records or attribution).
    Counts,
    /// Tier 1: stages, packet records, the buffer map and the L3-miss sampler in sampled
    /// windows (`--duty`), on top of tier 0.
    #[default]
    Windows,
    /// Tier 2: every detail hook for the whole run, flows counted exactly: for short deep dives.
    Full,
}

impl DetailMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DetailMode::Counts => "counts",
            DetailMode::Windows => "windows",
            DetailMode::Full => "full",
        }
    }
}

#[derive(Debug, Clone)]
pub struct LiveOptions {
    pub iface: String,
    pub netns: Option<String>,
    pub interval_ms: u64,
    pub detail: DetailMode,
    /// Windows: the detail hooks run 1/N of each cycle (1: always, as full).
    pub duty: u32,
    pub sample_every: u32,
    pub stage_every: u32,
    /// Tier 0 flows from 1 in N skbs (1: exact; 0: none).
    pub flow_sample: u32,
    /// Where tier 0 counts RX frames: auto (tcx, else the hand-up tracepoints) or forced.
    pub rx_counts: crate::probe::qcount::RxChoice,
    pub counters: CountersMode,
    pub miss_source: crate::probe::l3miss::MissSource,
    /// Sample period of the L3-miss event (events, or ns for cpu-clock), as if always on.
    pub miss_period: u64,
    /// Address join on 1 in N buffer pages (power of two; 1: every page).
    pub join_sample: u32,
    /// The L3-miss flow map's size (None: built in); a test knob.
    pub miss_flow_slots: Option<u32>,
    /// Flows are read from the kernel every this many intervals (and on the last).
    pub flow_every: u64,
    pub verbose: bool,
    /// Hook flavour: auto (tp_btf where the kernel allows, else raw_tp) or forced.
    pub hooks: crate::probe::features::HookChoice,
}

impl LiveOptions {
    /// A live surface (top, serve): tier 0 and the default windows, aggregates only, so no
    /// per-packet records cross to userspace, and no L3-miss sampler (attribution belongs to
    /// recordings).
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
            detail: DetailMode::Windows,
            duty: crate::windows::DEFAULT_DUTY,
            sample_every: 0,
            stage_every: crate::probe::pktlife::DEFAULT_STAGE_EVERY,
            flow_sample: crate::probe::qcount::DEFAULT_FLOW_EVERY,
            rx_counts: crate::probe::qcount::RxChoice::Auto,
            counters,
            miss_source: crate::probe::l3miss::MissSource::Off,
            miss_period: 0,
            join_sample: 1,
            miss_flow_slots: None,
            flow_every,
            verbose,
            hooks: crate::probe::features::HookChoice::Auto,
        }
    }
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

/// SIGINT/SIGTERM/SIGHUP set the returned flag instead of killing the process,
/// so every consumer detaches cleanly.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handlers")?;
    }
    Ok(stop)
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
    /// Tier 0: exact counts, sampled flows.
    pub tier0: QcountProbe,
    /// The detail hooks (None with `--detail counts`).
    pub detail: Option<PktlifeProbe>,
    /// The L3-miss sample program and its sampler (None without a sampler).
    pub l3: Option<L3missProbe>,
    pub detail_mode: DetailMode,
    /// The duty the detail hooks run at (1: always).
    pub duty: u32,
    pub flow_sample: u32,
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
    /// The detail windows, when they run 1/N of the time.
    windows: Option<WindowDriver>,
    sampler: Option<counters::Sampler>,
    interval: Duration,
    flow_every: u64,
    index: u64,
    prev_q: Vec<(Dir, u32, QueueCounts)>,
    prev_s: Vec<(Dir, u32, StageCounts)>,
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
        if opts.duty == 0 || opts.duty > crate::windows::MAX_DUTY {
            bail!("--duty must be from 1 to {}, not {}", crate::windows::MAX_DUTY, opts.duty);
        }
        if opts.detail == DetailMode::Counts
            && !matches!(opts.miss_source, crate::probe::l3miss::MissSource::Auto | crate::probe::l3miss::MissSource::Off)
        {
            bail!("--miss-sampling needs the detail hooks' buffer map: use --detail windows or full, not counts");
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
        use crate::probe::l3miss::{event_attr, L3missConfig, MissSource};
        let platform = counters::platform::detect_host().platform();
        let tier0 = QcountProbe::attach(
            &QcountConfig {
                ifindex: iface.ifindex,
                netns_inode: iface.netns_inode,
                netns_path: opts.netns.as_deref().map(|n| std::path::Path::new(topology::NETNS_RUN_DIR).join(n)),
                rx_queue_offset: rx_queue_offset_for_driver(iface.driver.as_deref()),
                link_hdr_len: iface.link_hdr_len(),
                flow_every: opts.flow_sample,
                rx: opts.rx_counts,
            },
            &features,
            opts.hooks,
        )?;
        // Windows of duty 1 are the whole run: full detail.
        let windowed = opts.detail == DetailMode::Windows && opts.duty > 1;
        let miss_period = crate::windows::window_period(opts.miss_period, if windowed { opts.duty } else { 1 });
        let miss_attr = match opts.detail {
            DetailMode::Counts => None,
            _ => event_attr(opts.miss_source, platform, miss_period, std::path::Path::new("/sys"))?,
        };
        // Frag pages need the page-to-address layout; without one, the join
        // covers linear data only and the recording says why.
        let layout = miss_attr.as_ref().map(|_| crate::probe::memlayout::resolve_live());
        let buffer_join = match &layout {
            None => "off (no L3-miss sampler)".to_string(),
            Some(Ok(m)) => format!("linear data and page frags; page addresses: {}", m.source),
            Some(Err(why)) => why.clone(),
        };
        let detail = match opts.detail {
            DetailMode::Counts => None,
            _ => Some(PktlifeProbe::load(
                &ProbeConfig {
                    ifindex: iface.ifindex,
                    netns_inode: iface.netns_inode,
                    sample_every: opts.sample_every,
                    stage_every: opts.stage_every,
                    rx_queue_offset: rx_queue_offset_for_driver(iface.driver.as_deref()),
                    join_buffers: miss_attr.is_some(),
                    mem_layout: layout.and_then(Result::ok),
                    copy_standin: opts.miss_source == MissSource::SoftwareCopy,
                    join_sample: opts.join_sample,
                },
                &features,
                opts.hooks,
                !windowed,
            )?),
        };
        let (l3, miss_label) = match (miss_attr, detail.as_ref()) {
            (Some((attr, label)), Some(d)) => {
                let cfg = L3missConfig {
                    join_sample: opts.join_sample,
                    copy_standin: opts.miss_source == MissSource::SoftwareCopy,
                    flow_slots: opts.miss_flow_slots,
                };
                // In windows the sampler waits, disabled, for the first one.
                match L3missProbe::load(&cfg, d).and_then(|mut l| l.attach_sampler(attr, label, windowed).map(|desc| (l, desc))) {
                    Ok((l, desc)) => (Some(l), desc),
                    Err(e) if opts.miss_source == MissSource::Auto => (None, format!("absent: {e:#}")),
                    Err(e) => return Err(e),
                }
            }
            _ => (
                None,
                match (opts.detail, opts.miss_source) {
                    (DetailMode::Counts, _) => "off (--detail counts)".to_string(),
                    (_, MissSource::Off) => "off (--miss-sampling off)".to_string(),
                    _ => "absent: no PEBS L3-miss event on this host (no Intel core PMU); attribution is model/regression-only".to_string(),
                },
            ),
        };
        let windows = if windowed { WindowDriver::new(crate::windows::cycle(Duration::from_millis(opts.interval_ms)), opts.duty) } else { None };
        let (sampler, counters_source, counter_notes) = open_counters(opts.counters)?;
        if opts.verbose {
            for n in &counter_notes {
                eprintln!("counters: {n}");
            }
            for h in &tier0.hooks {
                eprintln!("tier 0: {} as {}{}", h.hook, h.attach, h.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default());
            }
        }
        let mut sampler = sampler;
        if let Some(s) = sampler.as_mut() {
            // Counts since the counters were opened (before the probes attached)
            // belong to no interval: read them away so interval 0 starts here.
            let _ = s.read();
        }
        let start_ns = monotonic_ns();
        let mut live = LiveSession {
            host: topology::host_live(),
            iface,
            features,
            tier0,
            detail,
            l3,
            detail_mode: if windowed || opts.detail == DetailMode::Counts { opts.detail } else { DetailMode::Full },
            duty: if windowed { opts.duty } else { 1 },
            flow_sample: opts.flow_sample,
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
            prev_s: Vec::new(),
            prev_e: EventCounters::default(),
            prev_t: start_ns,
            prev_m: Default::default(),
        };
        // Counts already made (between attach and now) belong to no interval either.
        live.prev_q = live.tier0.read_queues()?;
        Ok(live)
    }

    pub fn index(&self) -> u64 {
        self.index
    }

    /// Every BPF program this session loaded (for leak checks and bpf_stats).
    pub fn prog_ids(&self) -> Vec<u32> {
        let mut ids = self.tier0.prog_ids();
        if let Some(d) = &self.detail {
            ids.extend(d.prog_ids());
        }
        if let Some(l) = &self.l3 {
            ids.extend(l.prog_ids());
        }
        ids
    }

    pub fn has_miss_sampler(&self) -> bool {
        self.l3.as_ref().is_some_and(L3missProbe::has_sampler)
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
            if let (Some(w), Some(d)) = (self.windows.as_mut(), self.detail.as_mut()) {
                let at = now.saturating_duration_since(self.started);
                w.drive(d, self.l3.as_mut(), at)?;
                if let Some(c) = w.next_change(at) {
                    wait = wait.min(c - at);
                }
            }
            if now >= deadline {
                break;
            }
            // Whole milliseconds: the ring's poll takes its timeout in ms, and a wait rounded
            // down to 0 would spin until a window's change.
            let wait = Duration::from_millis(wait.as_micros().div_ceil(1000) as u64);
            match &self.detail {
                Some(d) => d.poll(wait)?,
                None => std::thread::sleep(wait),
            }
        }
        let finishing = stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e);

        let t_ns = monotonic_ns();
        let cur_q = self.tier0.read_queues()?;
        let (cur_s, mut cur_e, samples) = match &self.detail {
            Some(d) => {
                let st = d.read_stages()?;
                let mut e = d.read_events()?;
                // The kernel wakes the ring's reader only once a quarter of it is full, so
                // most of an interval's records are still in it here: count them as received
                // once drained, like the records `sampled` counts.
                let samples = d.drain_samples();
                e.received = d.received();
                (st, e, samples)
            }
            None => (Vec::new(), EventCounters::default(), Vec::new()),
        };
        cur_e.queue_clamped += self.tier0.counter(qc_counter::QC_QUEUE_CLAMPED)?;
        let detail_ns = match self.windows.as_mut() {
            Some(w) => Some(w.take_detail(Instant::now().saturating_duration_since(self.started))),
            None if self.detail.is_some() => Some(t_ns - self.prev_t),
            None => Some(0),
        };
        let mut snap = Snapshot {
            index: self.index,
            t_ns,
            dur_ns: t_ns - self.prev_t,
            events: cur_e.delta(&self.prev_e),
            samples,
            detail_ns,
            ..Default::default()
        };
        snap.queues = merge_queues(&cur_q, &self.prev_q, &cur_s, &self.prev_s);
        let flow_turn = finishing || self.index % self.flow_every == self.flow_every - 1;
        if flow_turn {
            let every = u64::from(self.flow_sample.max(1));
            snap.flows = self
                .tier0
                .read_flows()?
                .into_iter()
                .map(|f| FlowCounters {
                    key: f.key,
                    queue: f.queue,
                    packets: f.packets * every,
                    bytes: f.bytes * every,
                    payload_bytes: f.payload_bytes * every,
                    first_ns: f.first_ns,
                    last_ns: f.last_ns,
                    samples: Some(f.samples),
                    bytes_sq: Some(f.bytes_sq),
                })
                .collect();
            snap.drop_reasons = self.tier0.read_drop_reasons()?;
        }
        if let (Some(l3), Some(d)) = (self.l3.as_ref(), self.detail.as_ref()) {
            let mut cur = l3.read_misses(flow_turn)?;
            let buf = d.read_buf_map()?;
            cur.buf = crate::snapshot::BufMapCounters {
                copy_linear_joined: cur.buf.copy_linear_joined,
                copy_frag_joined: cur.buf.copy_frag_joined,
                ..buf
            };
            let mut m = cur.delta(&self.prev_m);
            if let Some(w) = self.windows.as_mut() {
                m.sampled_ns = Some(w.take_sampled(Instant::now().saturating_duration_since(self.started)));
            }
            m.flows = cur.flows.clone();
            m.regions = cur.regions.clone();
            self.prev_m = cur;
            snap.misses = Some(m);
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
        self.prev_s = cur_s;
        self.prev_e = cur_e;
        self.prev_t = t_ns;
        self.index += 1;
        Ok((snap, finishing))
    }
}

/// One interval's per-queue counters: tier 0's counts and the detail hooks' stages, each the
/// difference of two cumulative reads; queues with nothing new are left out.
fn merge_queues(
    cur_q: &[(Dir, u32, QueueCounts)],
    prev_q: &[(Dir, u32, QueueCounts)],
    cur_s: &[(Dir, u32, StageCounts)],
    prev_s: &[(Dir, u32, StageCounts)],
) -> Vec<QueueCounters> {
    use std::collections::BTreeMap;
    let mut out: BTreeMap<(Dir, u32), QueueCounters> = BTreeMap::new();
    for (d, q, c) in cur_q {
        let p = prev_q.iter().find(|(pd, pq, _)| pd == d && pq == q).map(|x| x.2).unwrap_or_default();
        let e = out.entry((*d, *q)).or_insert_with(|| QueueCounters::new(*d, *q));
        e.packets = c.packets.saturating_sub(p.packets);
        e.bytes = c.bytes.saturating_sub(p.bytes);
        e.napi_polls = c.napi_polls.saturating_sub(p.napi_polls);
        e.napi_work = c.napi_work.saturating_sub(p.napi_work);
        e.napi_budget_exhausted = c.napi_budget_exhausted.saturating_sub(p.napi_budget_exhausted);
        e.drops = c.drops.saturating_sub(p.drops);
        for (i, v) in e.napi_work_hist.iter_mut().enumerate() {
            *v = c.napi_work_hist[i].saturating_sub(p.napi_work_hist[i]);
        }
    }
    for (d, q, c) in cur_s {
        let idle = StageCounts::default();
        let p = prev_s.iter().find(|(pd, pq, _)| pd == d && pq == q).map_or(&idle, |x| &x.2);
        let e = out.entry((*d, *q)).or_insert_with(|| QueueCounters::new(*d, *q));
        e.handups = c.handups.saturating_sub(p.handups);
        e.copies = c.copies.saturating_sub(p.copies);
        e.frees = c.frees.saturating_sub(p.frees);
        for st in 0..crate::snapshot::NSTAGES {
            e.stage_count[st] = c.stage_count[st].saturating_sub(p.stage_count[st]);
            e.stage_sum_ns[st] = c.stage_sum_ns[st].saturating_sub(p.stage_sum_ns[st]);
            // A max cannot be differenced: the largest so far.
            e.stage_max_ns[st] = c.stage_max_ns[st];
            for b in 0..crate::snapshot::NBUCKETS {
                e.stage_hist[st][b] = c.stage_hist[st][b].saturating_sub(p.stage_hist[st][b]);
            }
        }
    }
    out.into_values().filter(|q| !q.is_zero()).collect()
}

/// Drives the detail windows (crate::windows): attaches and detaches the detail hooks and
/// starts and stops the sampler as the recording passes through them, and measures how long
/// each ran.
struct WindowDriver {
    schedule: crate::windows::Schedule<fn() -> f64>,
    phase: crate::windows::Phase,
    /// Windows begun from all-off so far: the current one's number retires the packet states
    /// and CPU contexts of earlier ones.
    generation: u32,
    /// Time not yet reported that the sampler / the detail hooks ran, and since when they run
    /// (time since the start).
    sampled: Duration,
    sampling_since: Option<Duration>,
    detailed: Duration,
    detail_since: Option<Duration>,
}

impl WindowDriver {
    fn new(cycle: Duration, duty: u32) -> Option<WindowDriver> {
        let schedule = crate::windows::Schedule::new(cycle, duty, fastrand::f64 as fn() -> f64)?;
        Some(WindowDriver {
            schedule,
            phase: crate::windows::Phase::Off,
            generation: 0,
            sampled: Duration::ZERO,
            sampling_since: None,
            detailed: Duration::ZERO,
            detail_since: None,
        })
    }

    fn next_change(&mut self, at: Duration) -> Option<Duration> {
        self.schedule.next_change(at)
    }

    /// The time a span ran since the last call, up to `at`: the estimates scale by what it
    /// was, not by the nominal 1/duty (windows that overlap, a partial first or last cycle, a
    /// change made late).
    fn take(acc: &mut Duration, since: &mut Option<Duration>, at: Duration) -> u64 {
        let mut total = std::mem::take(acc);
        if let Some(s) = since.as_mut() {
            total += at.saturating_sub(*s);
            *s = at;
        }
        total.as_nanos() as u64
    }

    fn take_sampled(&mut self, at: Duration) -> u64 {
        Self::take(&mut self.sampled, &mut self.sampling_since, at)
    }

    fn take_detail(&mut self, at: Duration) -> u64 {
        Self::take(&mut self.detailed, &mut self.detail_since, at)
    }

    fn track(acc: &mut Duration, since: &mut Option<Duration>, was: bool, is: bool, at: Duration) {
        match (was, is) {
            (false, true) => *since = Some(at),
            (true, false) => {
                if let Some(s) = since.take() {
                    *acc += at.saturating_sub(s);
                }
            }
            _ => {}
        }
    }

    /// Put the probes in the phase of `at` (time since the recording started).
    fn drive(&mut self, detail: &mut PktlifeProbe, mut l3: Option<&mut L3missProbe>, at: Duration) -> Result<()> {
        use crate::windows::Phase;
        let phase = self.schedule.phase_at(at);
        if phase == self.phase {
            return Ok(());
        }
        let (was, is) = (self.phase, phase);
        // The sampler stops first and starts last: it never runs without the hooks.
        if was == Phase::Window {
            if let Some(l) = l3.as_deref() {
                l.set_sampling(false)?;
            }
        }
        match is {
            Phase::Off => detail.close_window(),
            Phase::Drain => detail.stop_starts(),
            Phase::Warmup | Phase::Window if matches!(was, Phase::Off | Phase::Drain) => {
                // From all-off, a new generation: what the hooks left when they went away is
                // stale. From a drain the hooks never left, and the lives in it go on.
                if was == Phase::Off {
                    self.generation = self.generation.wrapping_add(1);
                }
                detail.open_window(self.generation)?;
                if let Some(l) = l3.as_deref_mut() {
                    l.set_window(monotonic_ns(), self.generation)?;
                }
            }
            _ => {}
        }
        if is == Phase::Window {
            if let Some(l) = l3.as_deref() {
                l.set_sampling(true)?;
            }
        }
        Self::track(&mut self.sampled, &mut self.sampling_since, was == Phase::Window, is == Phase::Window, at);
        Self::track(&mut self.detailed, &mut self.detail_since, was != Phase::Off, is != Phase::Off, at);
        self.phase = phase;
        Ok(())
    }
}
