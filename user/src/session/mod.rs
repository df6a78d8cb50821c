//! The live Snapshot stream: resolve the interface, attach the probes (tier 0 always, the
//! detail hooks in windows or for the whole run) and the counter sampler, and produce one
//! Snapshot per interval. `record`, `top` and `serve` all consume it, so what they show is
//! one code path.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::counters::{self, CounterSource};
use crate::probe::features::Features;
use crate::probe::l3miss::L3missProbe;
use crate::probe::pktlife::PktlifeProbe;
use crate::probe::qcount::QcountProbe;
use crate::probe::qcount_skel::types::qc_counter;
use crate::snapshot::{Dir, EventCounters, QueueCounters, Snapshot};
use crate::sys::monotonic_ns;
use crate::topology::presence::LinkTotals;
use crate::topology::{self, HostInfo, IfaceInfo};

mod attach;
mod counts;
mod dropscale;
mod flows;
mod flowscale;
mod linksplit;
mod napiscale;
mod options;
mod windowdriver;
pub mod windows;

use counts::{add_missed, combine, interval_queues, CountPlan};
pub use options::{
    DetailArgs, DetailMode, FlowTiming, MissArgs, MissSampling, SessionArgs, SessionOptions,
};
use windowdriver::WindowDriver;

/// A live session: tier 0 and the detail probes attached to one interface, the counter
/// sampler, and the state that turns their cumulative counts into one Snapshot per interval.
pub struct Session {
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
    /// Packets a window is sized to see (0: the duty's window).
    pub window_packets: u64,
    /// Program runs per packet the windows are held to (0: no budget).
    pub run_budget: f64,
    /// Address join on 1 in N buffer pages.
    pub join_sample: u32,
    /// The flows' sampling threshold in bytes (1: exact).
    pub flow_sample: u32,
    /// The threshold inside the detail windows of a direction sampled there alone.
    pub window_flow_sample: u32,
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
    /// The detail windows, when they run 1/N of the time.
    windows: Option<WindowDriver>,
    /// The driver's own counters, when they cover a direction ([RX, TX]): packets and bytes
    /// come from them there.
    kstats: Option<crate::probe::kstats::KernelStats>,
    pub kernel_counts: [bool; 2],
    /// Flows of the directions the driver counts, sampled in windows and scaled by its counts.
    flow_windows: Option<flowscale::WindowFlows>,
    /// NAPI polls counted in windows only, estimated for every interval.
    napi_windows: Option<napiscale::WindowNapi>,
    /// Drops estimated from the windows' kfree_skb counts (None: counted all the time).
    drop_windows: Option<dropscale::WindowDrops>,
    /// The namespace's TCP sockets, whose own counters stand in for the estimates of the
    /// flows that end in them (None: flows are counted exactly, or sock_diag is not there).
    sockets: Option<crate::probe::sockets::SocketFlows>,
    /// Reads of the sockets' close notifications that found them overflowed, so far.
    socket_overflows: u64,
    /// The interface's own totals, read just before and just after the driver's per-queue
    /// counters at the last interval's end, against which those are checked.
    prev_link: Option<(LinkTotals, LinkTotals)>,
    /// Per direction, the interface's totals split across queues by the windows' program (the
    /// driver's counters do not count every path, and detail runs in windows).
    splits: [Option<linksplit::LinkSplit>; 2],
    /// Spans in a row whose driver counts missed the interface's [RX, TX].
    kernel_misses: [u32; 2],
    /// [RX, TX]: the span being checked: the interface's totals (before, after) at its start,
    /// and what the driver's counters counted in it so far.
    check_spans: [Option<(u64, u64, u64)>; 2],
    /// The interface's totals when the recording began (after the baseline read).
    start_link: Option<LinkTotals>,
    /// [RX, TX]: packets and bytes the driver's counters missed before a program took over
    /// counting, for the next interval's queues.
    missed: [Option<(u64, u64)>; 2],
    /// Whether the interface is still there, asked every interval.
    watch: Option<topology::presence::DeviceWatch>,
    /// The recorded namespace, held open while the programs run: they know it by the address
    /// of its struct net once seen, which no other namespace can take while this one is held.
    _netns_held: Option<std::fs::File>,
    /// Why the session ended early: the interface or its namespace went away.
    gone: Option<String>,
    gone_how: Option<topology::presence::Gone>,
    sampler: Option<counters::Sampler>,
    interval: Duration,
    flow_every: u64,
    index: u64,
    /// Each queue's cumulative counters at the last snapshot (tier 0's and the detail's).
    prev_q: Vec<QueueCounters>,
    prev_e: EventCounters,
    prev_t: u64,
    prev_m: crate::snapshot::MissSnapshot,
}

impl Session {
    pub fn start(opts: &SessionOptions, features: Features, iface: IfaceInfo) -> Result<Session> {
        let detection = counters::platform::detect_host();
        let netns_path = opts
            .args
            .netns
            .as_deref()
            .map(|n| std::path::Path::new(topology::NETNS_RUN_DIR).join(n));
        let netns_held = match &netns_path {
            Some(p) => Some(
                std::fs::File::open(p)
                    .with_context(|| format!("opening network namespace {}", p.display()))?,
            ),
            None => None,
        };
        // Without a watch (no netlink socket could be made) a vanished device goes unnoticed:
        // said once, the session goes on.
        let mut watch = match topology::presence::DeviceWatch::open(&iface) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("ddioscope: cannot watch {} for removal ({e:#}); a removed device will not be noticed", iface.name);
                None
            }
        };
        let mut plan = CountPlan::decide(opts, &iface, netns_path.as_deref(), watch.as_mut());
        let (tier0, learn_first) =
            attach::attach_tier0(opts, &features, &iface, netns_path.as_deref(), &mut plan)?;
        let windowed = plan.windowed;
        let probes = attach::attach_detail(
            opts,
            &features,
            &iface,
            detection.platform(),
            windowed,
            learn_first,
        )?;
        let (sampler, counters_source, counter_notes) =
            attach::open_counters(opts, std::mem::take(&mut plan.notes), &tier0)?;
        let start_ns = monotonic_ns();
        let mut live = Session {
            host: topology::host_live(),
            iface,
            features,
            tier0,
            detail: probes.detail,
            l3: probes.l3,
            detail_mode: if windowed || opts.detail.mode == DetailMode::Counts {
                opts.detail.mode
            } else {
                DetailMode::Full
            },
            duty: if windowed { opts.duty() } else { 1 },
            window_packets: if windowed { opts.window_packets() } else { 0 },
            run_budget: if windowed { opts.run_budget() } else { 0.0 },
            join_sample: opts.miss.join_sample,
            flow_sample: opts.detail.flow_sample(),
            window_flow_sample: attach::window_flow_bytes(opts),
            platform: detection,
            counters_source,
            counter_notes,
            miss_label: probes.miss_label,
            miss_sampling: probes.miss_sampling,
            buffer_join: probes.buffer_join,
            start_ns,
            started: Instant::now(),
            miss_period: probes.miss_period,
            windows: probes.windows,
            kstats: plan.kstats,
            kernel_counts: plan.kernel_counts,
            flow_windows: None,
            napi_windows: None,
            drop_windows: None,
            sockets: None,
            socket_overflows: 0,
            prev_link: None,
            splits: [None, None],
            kernel_misses: [0; 2],
            check_spans: [None; 2],
            start_link: None,
            missed: [None; 2],
            watch,
            _netns_held: netns_held,
            gone: None,
            gone_how: None,
            sampler,
            interval: Duration::from_millis(opts.interval_ms),
            flow_every: opts.flow_every.max(1),
            index: 0,
            prev_q: Vec::new(),
            prev_e: EventCounters::default(),
            prev_t: start_ns,
            prev_m: Default::default(),
        };
        live.open_sockets(opts, netns_path.as_deref());
        live.baseline(plan.split, plan.window_only)?;
        Ok(live)
    }

    pub fn index(&self) -> u64 {
        self.index
    }

    pub fn interval_ms(&self) -> u64 {
        self.interval.as_millis() as u64
    }

    /// Whether the session runs windows (of the detail hooks, or with `--detail counts` of
    /// tier 0's sampling programs alone).
    pub fn windowed(&self) -> bool {
        self.windows.is_some()
    }

    /// The cycle windows are drawn in and a window's spans at the duty (None: no windows).
    pub fn window_spans(&self) -> Option<(Duration, windows::Spans)> {
        self.windows
            .as_ref()
            .map(|w| (w.schedule.cycle(), w.schedule.duty_spans()))
    }

    /// Windows opened between the drawn ones for queues with a stage untimed (None: no windows).
    pub fn windows_opened(&self) -> Option<u64> {
        self.windows.as_ref().map(|w| w.opened)
    }

    /// Drawn windows let pass to hold the programs to their run budget (None: no windows, or
    /// no budget).
    pub fn windows_passed(&self) -> Option<u64> {
        self.windows
            .as_ref()
            .and_then(|w| w.budget.as_ref())
            .map(|b| b.passed)
    }

    /// The windows the flows of a driver-counted direction were sampled in so far (None: flows
    /// are not time-sampled).
    pub fn flow_windows(&self) -> Option<u64> {
        self.flow_windows
            .as_ref()
            .map(flowscale::WindowFlows::windows)
    }

    /// Why the session ended early, if the interface or its namespace went away.
    pub fn gone(&self) -> Option<&str> {
        self.gone.as_deref()
    }

    /// How the interface went away, when it did.
    pub fn gone_how(&self) -> Option<topology::presence::Gone> {
        self.gone_how
    }

    pub fn has_miss_sampler(&self) -> bool {
        self.l3.as_ref().is_some_and(L3missProbe::has_sampler)
    }

    /// Wait (on the ring buffer's epoll, not a busy loop) until the next
    /// interval ends, `end` passes or `stop` is set; then take the snapshot.
    /// Returns the snapshot and whether this is the last one.
    pub fn next(&mut self, stop: &AtomicBool, end: Option<Instant>) -> Result<(Snapshot, bool)> {
        let finishing = self.wait_interval(stop, end)?;
        let t_ns = monotonic_ns();
        // The counters are read at the interval's end as stamped, before the rest of the
        // snapshot is taken (reading the probes, closing a window can take tens of ms): read
        // after them, a reading spanned another length than the interval it was filed under.
        let counters = self.read_counters();
        let (cur_q, link) = self.read_counts(finishing)?;
        // The window under way when the run ends is a window too.
        if finishing {
            let now = Instant::now().saturating_duration_since(self.started);
            if let Some(from) = self
                .windows
                .as_ref()
                .filter(|w| w.phase != windows::Phase::Off)
                .and_then(|w| w.opened_at)
            {
                self.flow_window_ended((from, now))?;
            }
        }
        if let Some(f) = self.flow_windows.as_mut() {
            f.driver_read(
                Instant::now()
                    .saturating_duration_since(self.started)
                    .as_secs_f64(),
                &cur_q,
            );
        }
        let (cur_s, mut cur_e, samples) = match self.detail.as_mut() {
            Some(d) => {
                let st = d.read_stages(finishing)?;
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
        let detail_ns = match (self.windows.as_mut(), self.detail.is_some()) {
            (Some(w), true) => {
                Some(w.take_detail(Instant::now().saturating_duration_since(self.started)))
            }
            (None, true) => Some(t_ns - self.prev_t),
            (_, false) => Some(0),
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
        let mut cur_q = combine(cur_q, &cur_s);
        snap.queues = interval_queues(&cur_q, &self.prev_q);
        for (d, dir) in [(0, Dir::Rx), (1, Dir::Tx)] {
            if let Some(m) = self.missed[d].take() {
                self.missed[d] = add_missed(&mut snap.queues, &mut cur_q, dir, m);
            }
        }
        // Not on the last snapshot: a window opened then would never run.
        if !finishing {
            self.plan_windows(&snap.queues, &cur_q, snap.dur_ns as f64 / 1e9)?;
        }
        if finishing {
            for (dir, split) in [Dir::Rx, Dir::Tx].into_iter().zip(&self.splits) {
                if let Some(n) = split
                    .as_ref()
                    .map(linksplit::LinkSplit::unsplit)
                    .filter(|&n| n > 0)
                {
                    let what = dir.as_str().to_uppercase();
                    self.counter_notes.push(format!(
                        "interval {}: {n} {what} packets the interface counted at the end were in no window's split: they are in no {what} queue",
                        self.index
                    ));
                }
            }
        }
        if let Some(n) = self.napi_windows.as_mut() {
            n.estimate(&mut snap.queues);
        }
        if let Some(d) = self.drop_windows.as_mut() {
            // The share of the interval kfree_skb was attached (tier 0's window programs
            // come on before the detail hooks and go after them).
            let on = self.tier0.take_window_ns();
            let covered = if snap.dur_ns > 0 {
                on as f64 / snap.dur_ns as f64
            } else {
                0.0
            };
            d.estimate(&mut snap.queues, covered);
        }
        let flow_turn = finishing || self.index % self.flow_every == self.flow_every - 1;
        if !flow_turn {
            // Flows coming faster than a read per flow turn can take them: drained now.
            self.tier0.drain_flows_if_filling()?;
        }
        self.check_kernel_counts(link, &mut cur_q, &snap.queues)?;
        if flow_turn {
            self.read_flow_turn(&mut snap, &cur_q, finishing)?;
        }
        snap.misses = self.read_misses(finishing, flow_turn)?;
        if let Some(k) = self.kstats.as_mut() {
            let first = self.index == 0;
            snap.nic_drops = k
                .ring_drop_deltas()
                .into_iter()
                .filter(|d| first || d.count > 0)
                .collect();
        }
        snap.counters = counters;
        self.prev_q = cur_q;
        self.prev_e = cur_e;
        self.prev_t = t_ns;
        self.index += 1;
        Ok((snap, finishing))
    }

    /// Wait out the interval, driving the detail windows meanwhile; whether this is the
    /// session's last interval (stopped, at its end, or the device gone).
    fn wait_interval(&mut self, stop: &AtomicBool, end: Option<Instant>) -> Result<bool> {
        let interval_start = self.started + self.interval * self.index as u32;
        let mut deadline = interval_start + self.interval;
        if let Some(e) = end {
            deadline = deadline.min(e);
        }
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let mut wait = deadline
                .saturating_duration_since(now)
                .min(Duration::from_millis(200));
            if let Some(w) = self.windows.as_mut() {
                let at = now.saturating_duration_since(self.started);
                let tier0_windows = self.tier0.has_window_hooks();
                let closed = w.drive(
                    self.detail.as_mut(),
                    self.l3.as_mut(),
                    &mut self.tier0,
                    tier0_windows,
                    at,
                )?;
                // Attaching and detaching take time (a tcx link waits for an RCU grace period),
                // and the schedule may have moved by it: the next change is reckoned from now.
                let now = Instant::now();
                wait = deadline
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(200));
                let at = now.saturating_duration_since(self.started);
                if let Some(c) = w.next_change(at) {
                    wait = wait.min(c - at);
                }
                if let Some(span) = closed {
                    self.flow_window_ended(span)?;
                }
                if let Some(why) = self.windows.as_mut().and_then(|w| w.flow_failure.take()) {
                    self.counter_notes.push(format!(
                        "interval {}: tier 0's window programs (flows, NAPI polls) did not attach for a window ({why}); such windows miss them",
                        self.index
                    ));
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
        let mut finishing =
            stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e);
        if let Some(w) = self.watch.as_mut() {
            // A check the kernel cannot answer says nothing: the next interval asks again.
            if let Ok(topology::presence::Presence::Gone(how, why)) = w.check() {
                self.gone = Some(why);
                self.gone_how = Some(how);
                finishing = true;
            }
        }
        Ok(finishing)
    }

    /// The uncore counters' reading for the interval, or none (and why, once) if they stopped.
    fn read_counters(&mut self) -> Vec<crate::counters::CounterReading> {
        let mut counters = Vec::new();
        if let Some(s) = self.sampler.as_mut() {
            match s.read() {
                Ok(r) => counters = r,
                Err(e) => {
                    // Keep the software view going; say why counters stopped.
                    self.counter_notes.push(format!(
                        "counter reads stopped at interval {}: {e:#}",
                        self.index
                    ));
                    self.sampler = None;
                }
            }
        }
        counters
    }
}
