//! The detail windows as they run: attaching and detaching the detail hooks, starting and
//! stopping the sampler, draining the lives under way after each window, and opening windows
//! at once for queues whose stages are untimed. The schedule they follow is `windows`.
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::probe::l3miss::L3missProbe;
use crate::probe::pktlife::PktlifeProbe;
use crate::probe::qcount::QcountProbe;
use crate::probe::qcount_skel::types::qc_counter;
use crate::snapshot::{Dir, QueueCounters, NSTAGES};
use crate::sys::monotonic_ns;

use super::{linksplit, windows, Session};

/// Drives the detail windows (crate::windows): attaches and detaches the detail hooks and
/// starts and stops the sampler as the recording passes through them, and measures how long
/// each ran.
pub(super) struct WindowDriver {
    pub(super) schedule: windows::Schedule<fn() -> f64>,
    pub(super) phase: windows::Phase,
    /// Windows begun from all-off so far: the current one's number retires the packet states
    /// and CPU contexts of earlier ones.
    pub(super) generation: u32,
    /// Time not yet reported that the sampler / the detail hooks ran, and since when they run
    /// (time since the start).
    pub(super) sampled: Duration,
    pub(super) sampling_since: Option<Duration>,
    pub(super) detailed: Duration,
    pub(super) detail_since: Option<Duration>,
    /// Windows the flow sampler could not attach for, and why the first could not (said once
    /// in the recording's notes; a device going away says so itself).
    pub(super) flow_failures: u64,
    pub(super) flow_failure: Option<String>,
    /// When the hooks last came on from all-off.
    pub(super) opened_at: Option<Duration>,
    /// The window-only flow programs run from the start until the first window ends.
    pub(super) learning: bool,
    /// Tier 0's window-only programs are attached.
    pub(super) tier0_on: bool,
    /// Packets a window is sized to see (`windows::WINDOW_PACKETS`; 0: the duty's window).
    pub(super) window_packets: u64,
    /// Windows opened for each queue (direction, queue) that carried traffic with a stage
    /// untimed; at most `OPENED_PER_QUEUE` each.
    pub(super) opened_for: std::collections::HashMap<(Dir, u32), u32>,
    /// Windows opened between the drawn ones so far.
    pub opened: u64,
    /// The drain under way.
    pub(super) drain: Option<Drain>,
    /// The device carried fewer than `IDLE_BELOW_PACKETS` in the last interval.
    pub(super) device_idle: bool,
    /// Windows opened at once for TX the interface counted that no window has split yet.
    pub(super) opened_for_split: u32,
    /// The programs' runs per packet the windows are held to (None: no budget).
    pub(super) budget: Option<windows::RunBudget>,
    /// A drawn window is being let pass (counted once, at its start).
    passing: bool,
    /// Tier 0's program runs while its window programs were on: what the windows cost of
    /// tier 0 (its always-on programs, the drop counter or a device's RX counter, run outside
    /// them too, and are no window's to pay for).
    pub(super) tier0_runs: SpanRuns,
}

/// A counter's runs summed over the spans it was counted in.
#[derive(Debug, Default)]
pub(super) struct SpanRuns {
    since: Option<u64>,
    done: u64,
}

impl SpanRuns {
    /// A span begins with the counter at `now`.
    pub(super) fn on(&mut self, now: u64) {
        self.since.get_or_insert(now);
    }

    /// The span under way ends with the counter at `now`.
    pub(super) fn off(&mut self, now: u64) {
        if let Some(s) = self.since.take() {
            self.done += now.saturating_sub(s);
        }
    }

    /// Runs in the spans so far, the one under way up to `now`.
    pub(super) fn so_far(&self, now: u64) -> u64 {
        self.done + self.since.map_or(0, |s| now.saturating_sub(s))
    }
}

/// A drain under way, as last looked at.
pub(super) struct Drain {
    began: Duration,
    /// The window's lives in flight.
    left: u64,
    /// Looks in a row at which no life had ended since the one before.
    idle: u32,
    /// Held on past the window's drain, with only the hooks that end a life.
    held: bool,
}

impl Drain {
    pub(super) fn new(began: Duration, left: u64) -> Drain {
        Drain {
            began,
            left,
            idle: 0,
            held: false,
        }
    }

    /// A look at `at` found `left` of the window's lives in flight: until when the drain goes
    /// on, or None for it to end now.
    pub(super) fn look(&mut self, left: u64, at: Duration) -> Option<Duration> {
        self.idle = if left < self.left { 0 } else { self.idle + 1 };
        self.left = left;
        let until = at + windows::DRAIN_STEP;
        (left > 0
            && self.idle < windows::DRAIN_PATIENCE
            && until <= self.began + windows::LONGEST_DRAIN)
            .then_some(until)
    }
}

/// Windows a queue may have opened for it while a stage of it is untimed: the cost of windows
/// stays near 1/duty whatever a queue does (one whose stages never get timed, such as a TX
/// queue of a driver without completion events, asks twice and stops).
pub(super) const OPENED_PER_QUEUE: u32 = 2;

/// Packets a queue carries in an interval before a window is opened for it: a few packets of
/// a control connection are not traffic worth timing.
pub(super) const OPEN_FOR_PACKETS: u64 = 100;

/// Below this many packets in an interval (both directions) the device is idle, and the
/// drawn windows are let pass (a busy neighbour would pay for them alone).
pub(super) const IDLE_BELOW_PACKETS: u64 = 10;

/// Windows opened at once for TX that no window split yet, until one did: a path the TX
/// program cannot see asks this often and stops.
pub(super) const OPENED_FOR_SPLIT: u32 = 2;

impl WindowDriver {
    pub(super) fn new(
        cycle: Duration,
        duty: u32,
        runs: windows::WindowRuns,
    ) -> Option<WindowDriver> {
        let schedule = windows::Schedule::new(cycle, duty, runs, fastrand::f64 as fn() -> f64)?;
        Some(WindowDriver {
            schedule,
            phase: windows::Phase::Off,
            generation: 0,
            sampled: Duration::ZERO,
            sampling_since: None,
            detailed: Duration::ZERO,
            detail_since: None,
            flow_failures: 0,
            flow_failure: None,
            opened_at: None,
            learning: false,
            tier0_on: false,
            window_packets: windows::WINDOW_PACKETS,
            opened_for: std::collections::HashMap::new(),
            opened: 0,
            drain: None,
            device_idle: false,
            opened_for_split: 0,
            budget: None,
            passing: false,
            tier0_runs: SpanRuns::default(),
        })
    }

    /// Open a window now if a queue carried traffic this interval (`OPEN_FOR_PACKETS`) and a
    /// stage of it is untimed yet (`cumulative`: every queue's counters since the start): at
    /// 1/duty a queue busy for a few hundred milliseconds between two drawn windows would
    /// otherwise go without stage histograms. A stage no queue of its direction has timed is
    /// not asked for (a forwarding host copies nothing to sockets); one that others have is (a
    /// queue whose few timed packets were all coalesced away before their copy). Linear in
    /// the queues: this runs every interval.
    pub(super) fn time_untimed_queues(
        &mut self,
        interval: &[QueueCounters],
        cumulative: &[QueueCounters],
        at: Duration,
    ) {
        let stages_of = |c: &QueueCounters| c.stage_count.map(|n| n > 0);
        // Per direction, the stages some queue has timed.
        let mut seen = [[false; NSTAGES]; 2];
        for c in cumulative {
            for (s, t) in seen[usize::from(c.dir == Dir::Tx)]
                .iter_mut()
                .zip(stages_of(c))
            {
                *s |= t;
            }
        }
        let own: std::collections::HashMap<(Dir, u32), [bool; NSTAGES]> = cumulative
            .iter()
            .map(|c| ((c.dir, c.queue), stages_of(c)))
            .collect();
        let untimed: Vec<(Dir, u32)> = interval
            .iter()
            .filter(|q| q.packets >= OPEN_FOR_PACKETS)
            .map(|q| (q.dir, q.queue))
            .filter(|k| self.opened_for.get(k).copied().unwrap_or(0) < OPENED_PER_QUEUE)
            .filter(|k| {
                let own = own.get(k).copied().unwrap_or_default();
                !own.contains(&true)
                    || seen[usize::from(k.0 == Dir::Tx)]
                        .iter()
                        .zip(own)
                        .any(|(&s, o)| s && !o)
            })
            .collect();
        if untimed.is_empty() || !self.schedule.open_at(at) {
            return;
        }
        self.opened += 1;
        for k in untimed {
            *self.opened_for.entry(k).or_insert(0) += 1;
        }
    }

    pub(super) fn next_change(&mut self, at: Duration) -> Option<Duration> {
        self.schedule.next_change(at)
    }

    /// The time a span ran since the last call, up to `at`: the estimates scale by what it
    /// was, not by the nominal 1/duty (windows that overlap, a partial first or last cycle, a
    /// change made late).
    pub(super) fn take(acc: &mut Duration, since: &mut Option<Duration>, at: Duration) -> u64 {
        let mut total = std::mem::take(acc);
        if let Some(s) = since.as_mut() {
            total += at.saturating_sub(*s);
            *s = at;
        }
        total.as_nanos() as u64
    }

    pub(super) fn take_sampled(&mut self, at: Duration) -> u64 {
        Self::take(&mut self.sampled, &mut self.sampling_since, at)
    }

    pub(super) fn take_detail(&mut self, at: Duration) -> u64 {
        Self::take(&mut self.detailed, &mut self.detail_since, at)
    }

    pub(super) fn track(
        acc: &mut Duration,
        since: &mut Option<Duration>,
        was: bool,
        is: bool,
        at: Duration,
    ) {
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

    /// Let tier 0's window-only programs go at `at`: the span they ran.
    fn tier0_off(&mut self, tier0: &mut QcountProbe, at: Duration) -> Option<(Duration, Duration)> {
        tier0.detach_window_hooks();
        self.tier0_on = false;
        self.opened_at.take().map(|from| (from, at))
    }

    /// Whether a drain due to end at `at` is held on for another step: lives of the window
    /// ended within the last `DRAIN_PATIENCE` steps (a reader still copying them) and the drain
    /// is not at its longest. Those left when it stops are either waiting on a reader that has
    /// stalled or were freed where no hook sees, and are counted as cut.
    pub(super) fn drain_goes_on(&mut self, detail: &mut PktlifeProbe, at: Duration) -> bool {
        let Some(drain) = self.drain.as_mut() else {
            return false;
        };
        let Some(until) = drain.look(detail.lives_in_flight(), at) else {
            return false;
        };
        if !drain.held {
            detail.keep_ends();
            drain.held = true;
        }
        self.schedule.hold_drain(until);
        true
    }

    /// Put the probes in the phase of `at` (time since the recording started). Without detail
    /// hooks (`--detail counts`) the schedule has no drain: a window is tier 0's programs alone.
    pub(super) fn drive(
        &mut self,
        mut detail: Option<&mut PktlifeProbe>,
        mut l3: Option<&mut L3missProbe>,
        tier0: &mut QcountProbe,
        tier0_windows: bool,
        mut at: Duration,
    ) -> Result<Option<(Duration, Duration)>> {
        use windows::Phase;
        let mut phase = self.schedule.phase_at(at);
        if phase == Phase::Off && self.phase == Phase::Drain {
            if let Some(d) = detail.as_deref_mut() {
                if self.drain_goes_on(d, at) {
                    phase = Phase::Drain;
                }
            }
        }
        // A device that carried next to nothing has nothing to time, and the detail hooks
        // would bill only the host's other devices: its drawn windows are let pass. So are
        // those due while the programs have run past their budget per packet.
        let over_budget = self.budget.as_ref().is_some_and(|b| !b.allows());
        if phase == Phase::Off {
            self.passing = false;
        } else if self.phase == Phase::Off && !self.learning && (self.device_idle || over_budget) {
            if over_budget && !self.device_idle && !self.passing {
                if let Some(b) = self.budget.as_mut() {
                    b.passed += 1;
                }
            }
            self.passing = true;
            phase = Phase::Off;
        }
        if phase == self.phase {
            // A drain held on keeps the hooks that end a life, and tier0's programs go.
            let held = self.drain.as_ref().is_some_and(|d| d.held);
            if held && self.tier0_on && !self.learning {
                return Ok(self.tier0_off(tier0, at));
            }
            return Ok(None);
        }
        let (was, is) = (self.phase, phase);
        // The sampler stops first and starts last: it never runs without the hooks.
        if was == Phase::Window {
            if let Some(l) = l3.as_deref() {
                l.set_sampling(false)?;
            }
        }
        // The first window's end ends the learning, whatever comes after it.
        if was == Phase::Window && is != Phase::Window {
            self.learning = false;
        }
        // Tier 0's window programs run through the window's first drain and leave with the
        // detail hooks (then off the recorder's loop: see QcountProbe::detach_window_hooks), or
        // when the drain is held on for a reader that lags: what they count (the splits,
        // drops and flows) is scaled by the time they ran, and none of it needs the drain.
        // Let go at the window's end instead, a tcx link's detach would hold kernel locks the
        // detail hooks' detach then waits on, with every drain hook still running.
        let tier0_wanted = tier0_windows && (self.learning || is != Phase::Off);
        match is {
            Phase::Off => {
                // The detail hooks ran until they are detached: the window's time ends then.
                if let Some(d) = detail.as_deref_mut() {
                    let closing = Instant::now();
                    d.close_window();
                    at += closing.elapsed();
                }
            }
            Phase::Drain => {
                if let Some(d) = detail.as_deref_mut() {
                    d.stop_starts();
                    self.drain = Some(Drain::new(at, d.lives_in_flight()));
                }
            }
            Phase::Warmup | Phase::Window if matches!(was, Phase::Off | Phase::Drain) => {
                // From all-off, a new generation: what the hooks left when they went away is
                // stale. From a drain the hooks never left, and the lives in it go on.
                if was == Phase::Off {
                    self.generation = self.generation.wrapping_add(1);
                }
                // Tier 0's window programs first and the detail hooks after them: the detail
                // hooks, the costly ones per packet, are not held on while tier 0's tcx link
                // waits for its grace period.
                if tier0_wanted && !self.tier0_on {
                    self.tier0_on = true;
                    self.tier0_runs.on(tier0.counter(qc_counter::QC_RUNS)?);
                    let attaching = Instant::now();
                    // A window without tier 0's programs (one would not attach) still has its detail.
                    if let Err(e) = tier0.attach_window_hooks() {
                        self.flow_failures += 1;
                        if self.flow_failures == 1 {
                            self.flow_failure = Some(format!("{e:#}"));
                        }
                    }
                    // The window's time starts when the detail hooks come on.
                    let took = attaching.elapsed();
                    self.schedule.postpone(at, took);
                    at += took;
                    self.opened_at = Some(at);
                }
                if let Some(d) = detail {
                    d.open_window(self.generation)?;
                }
                if let Some(l) = l3.as_deref_mut() {
                    l.set_window(monotonic_ns(), self.generation)?;
                }
            }
            _ => {}
        }
        // The span the window-only flow programs ran, once it ends.
        let flow_span = if self.tier0_on && !tier0_wanted {
            self.tier0_off(tier0, at)
        } else {
            None
        };
        if is != Phase::Drain {
            self.drain = None;
        }
        if is == Phase::Window {
            if let Some(l) = l3.as_deref() {
                l.set_sampling(true)?;
            }
        }
        Self::track(
            &mut self.sampled,
            &mut self.sampling_since,
            was == Phase::Window,
            is == Phase::Window,
            at,
        );
        Self::track(
            &mut self.detailed,
            &mut self.detail_since,
            was != Phase::Off,
            is != Phase::Off,
            at,
        );
        self.phase = phase;
        Ok(flow_span)
    }
}

impl Session {
    /// After an interval (`interval`; `cumulative`, every queue since the start): whether the
    /// device is idle, windows opened at once for what needs timing or splitting, and the
    /// first window's learning ended early on an idle device.
    pub(super) fn plan_windows(
        &mut self,
        interval: &[QueueCounters],
        cumulative: &[QueueCounters],
        interval_secs: f64,
    ) -> Result<()> {
        let Some(w) = self.windows.as_mut() else {
            return Ok(());
        };
        let at = Instant::now().saturating_duration_since(self.started);
        let unsplit: u64 = self
            .splits
            .iter()
            .flatten()
            .map(linksplit::LinkSplit::unsplit)
            .sum();
        let packets = interval.iter().map(|q| q.packets).sum::<u64>() + unsplit;
        w.device_idle = packets < IDLE_BELOW_PACKETS;
        if let Some(b) = w.budget.as_mut() {
            // Tier 0's runs while its window programs were on, and every detail hook's (they
            // run in the windows alone). Tier 0's detach waits out a grace period off the
            // loop with its programs still running: their span ends once it is done.
            let tier0_runs = self.tier0.counter(qc_counter::QC_RUNS)?;
            if !w.tier0_on && self.tier0.window_hooks_detached() {
                w.tier0_runs.off(tier0_runs);
            }
            let runs = w.tier0_runs.so_far(tier0_runs)
                + self.detail.as_ref().map_or(Ok(0), PktlifeProbe::runs)?;
            b.account(runs, packets, interval_secs, w.schedule.cycle());
        }
        if w.window_packets > 0 && interval_secs > 0.0 {
            w.schedule
                .fit_packets(at, packets as f64 / interval_secs, w.window_packets);
            // A cut window samples flows as densely as the duty's whole window would have: as
            // many samples a second. Its programs run longer than the window (their attach
            // waits out a grace period with them on), and sample all that time.
            let on = self.tier0.last_on().as_secs_f64() / w.schedule.longest().as_secs_f64();
            self.tier0
                .set_window_flow_cut(w.schedule.cut().max(on).min(1.0))?;
        }
        // Without detail hooks no stage is ever timed: no window is opened to time one.
        if self.detail.is_some() {
            w.time_untimed_queues(interval, cumulative, at);
        }
        if self.splits.iter().any(Option::is_some) {
            if unsplit < OPEN_FOR_PACKETS {
                w.opened_for_split = 0;
            } else if w.opened_for_split < OPENED_FOR_SPLIT && w.schedule.open_at(at) {
                w.opened_for_split += 1;
                w.opened += 1;
            }
        }
        // The programs that learn which queue a NAPI instance serves have nothing to learn from
        // an idle device, and would bill the host's other devices until the first window
        // ends: they wait for the device to carry traffic.
        if !(w.learning && w.device_idle && w.phase == windows::Phase::Off) {
            return Ok(());
        }
        w.learning = false;
        w.tier0_on = false;
        let learned = w.opened_at.take();
        self.tier0.detach_window_hooks();
        match learned {
            Some(from) => self.flow_window_ended((from, at)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{windows, Drain, SpanRuns};
    use crate::snapshot::{Dir, QueueCounters};
    use std::time::Duration;

    /// Only the runs inside spans count; a span asked for again before it ended is one span
    /// (the window programs never came off), and an end with no span under way counts nothing.
    #[test]
    fn span_runs_count_inside_spans_only() {
        let mut r = SpanRuns::default();
        assert_eq!(r.so_far(500), 0);
        r.off(600);
        r.on(1_000);
        assert_eq!(r.so_far(1_400), 400);
        r.on(1_200);
        r.off(1_500);
        assert_eq!(r.so_far(9_000), 500);
        r.on(10_000);
        assert_eq!(r.so_far(10_250), 750);
        r.off(10_300);
        r.off(20_000);
        assert_eq!(r.so_far(30_000), 800);
    }

    /// A drain goes on while lives end, through a reader's pause shorter than its patience,
    /// and ends once none has ended for that long, none is left, or at its longest.
    #[test]
    fn a_drain_goes_on_while_lives_end_and_not_past_its_patience_or_length() {
        let ms = Duration::from_millis;
        let step = windows::DRAIN_STEP;
        // Lives still ending at the window's drain: held a step at a time; a pause of fewer
        // than DRAIN_PATIENCE looks is waited out; then as many looks without an end stop it.
        let mut d = Drain::new(ms(0), 100);
        let mut at = windows::MAX_DRAIN;
        assert_eq!(d.look(60, at), Some(at + step));
        for _ in 1..windows::DRAIN_PATIENCE {
            at += step;
            assert_eq!(
                d.look(60, at),
                Some(at + step),
                "a pause shorter than the patience"
            );
        }
        at += step;
        assert_eq!(d.look(40, at), Some(at + step), "lives end again");
        for _ in 1..windows::DRAIN_PATIENCE {
            at += step;
            assert!(d.look(40, at).is_some());
        }
        at += step;
        assert_eq!(
            d.look(40, at),
            None,
            "no life ended for the patience: the rest are cut"
        );
        // None left: over at once.
        assert_eq!(Drain::new(ms(0), 100).look(0, windows::MAX_DRAIN), None);
        // Lives ending steadily: held until the longest drain, not past it.
        let mut d = Drain::new(ms(0), 10_000);
        let (mut at, mut left) = (windows::MAX_DRAIN, 10_000);
        while let Some(until) = d.look(left, at) {
            assert!(until <= windows::LONGEST_DRAIN);
            (at, left) = (until, left - 1);
        }
        assert!(at + step > windows::LONGEST_DRAIN, "ended early at {at:?}");
    }

    /// A driver of 1-second cycles at duty 32, with detail hooks and no sampler.
    fn unsampled_driver() -> super::WindowDriver {
        super::WindowDriver::new(
            std::time::Duration::from_secs(1),
            32,
            windows::WindowRuns {
                sampler: false,
                detail: true,
            },
        )
        .expect("duty 32 has windows")
    }

    /// The first instant from `t` with no drawn window on, nor one beginning within a window's
    /// length (a window opened for a queue would then wait for that one); `w` draws windows of
    /// 1/32 of a second.
    fn quiet(w: &mut super::WindowDriver, mut t: std::time::Duration) -> std::time::Duration {
        let window = std::time::Duration::from_secs(1) / 32;
        while w.schedule.phase_at(t) != super::windows::Phase::Off
            || w.schedule.next_change(t).is_some_and(|c| c <= t + window)
        {
            t += std::time::Duration::from_millis(1);
        }
        t
    }

    /// A queue with traffic and no stage timed gets a window at once, at most
    /// OPENED_PER_QUEUE times; a few packets, or a queue already timed, get none.
    #[test]
    fn a_busy_queue_without_stages_gets_a_window_opened_at_most_twice() {
        use super::{windows::Phase, OPENED_PER_QUEUE, OPEN_FOR_PACKETS};
        use std::time::Duration;
        let ms = Duration::from_millis;
        let busy = |q: u32, n: u64| QueueCounters {
            packets: n,
            ..QueueCounters::new(Dir::Rx, q)
        };
        let mut timed = busy(1, 5000);
        timed.stage_count[0] = 7;
        let mut w = unsampled_driver();
        let t = quiet(&mut w, ms(0));
        w.time_untimed_queues(
            &[busy(0, OPEN_FOR_PACKETS - 1), timed.clone()],
            &[timed.clone()],
            t,
        );
        assert_eq!(w.opened, 0);
        w.time_untimed_queues(&[busy(0, 500)], &[busy(0, 500)], t);
        assert_eq!(w.opened, 1);
        // No sampler, no warm-up: the window proper opens at once.
        assert_eq!(w.schedule.phase_at(t), Phase::Window);
        // Still untimed after its windows: it stops asking.
        let mut at = t;
        for _ in 0..10 {
            at = quiet(&mut w, at + Duration::from_secs(3));
            w.time_untimed_queues(&[busy(0, 500)], &[busy(0, 500)], at);
        }
        assert_eq!(w.opened, u64::from(OPENED_PER_QUEUE));
    }

    /// A busy queue is timed once it has every stage some queue of its direction has: one
    /// whose few timed packets never reached a copy that others reached gets a window, and a
    /// stage no queue has (nothing copied to sockets when forwarding) is not asked for.
    #[test]
    fn a_busy_queue_missing_a_stage_others_have_gets_a_window() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        let queue = |q: u32, stages: &[usize]| {
            let mut c = QueueCounters {
                packets: 5000,
                ..QueueCounters::new(Dir::Rx, q)
            };
            for &s in stages {
                c.stage_count[s] = 3;
            }
            c
        };
        let mut w = unsampled_driver();
        let t = quiet(&mut w, ms(0));
        // Forwarding: no queue has a copy stage, so stages 0 and 3 are all there is.
        let forwarded = [queue(0, &[0, 3]), queue(1, &[0, 3])];
        w.time_untimed_queues(&forwarded, &forwarded, t);
        assert_eq!(w.opened, 0);
        // Queue 1 lacks the copy stage that queue 0 has: it asks.
        let delivered = [queue(0, &[0, 1, 2, 3]), queue(1, &[0, 3])];
        w.time_untimed_queues(&delivered[1..], &delivered, t);
        assert_eq!(w.opened, 1);
    }
}
