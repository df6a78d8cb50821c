//! The recorder's sampled windows: when the detail hooks (packet lifetimes, packet records,
//! the buffer-page map) and the L3-miss sampler run, so their per-packet cost is paid about
//! 1/N of the time while the always-on counts (tier 0) stay exact.
//!
//! Time is cut into cycles of a second (or the recording interval, if longer); each cycle
//! draws one window of 1/N of its length, starting anywhere in it (a fixed place would alias
//! with any periodic load) and free to run on into the next cycle, so no cycle boundary is
//! special (where two windows overlap, their union runs once: the recorder measures the time
//! the hooks and the sampler ran rather than assume 1/N). Where a sampler runs, the hooks come on
//! before each window for a warm-up with the sampler still off: the buffer pages in use are
//! handed up again and so are current in the map when the first sample arrives. After it, a drain: no new packet
//! starts a life, and the lives begun in the window can still end; it is held on while they
//! still do, up to a bound. The sampler runs at N
//! times its rate inside, so a recording gets about as many samples as always on.
use std::collections::VecDeque;
use std::time::Duration;

/// Longest warm-up: several RX ring cycles at any rate worth attributing (a 4096-entry ring
/// at 1 Mpkt/s turns over in 4 ms).
pub const MAX_WARMUP: Duration = Duration::from_millis(10);

/// A window's drain before it is looked at: a life begun in a window that ends at all mostly
/// ends within a few milliseconds of it; one that does not holds the drain on step by step
/// (`DRAIN_STEP`), so a short base drain does not cut lives, and the end hooks, which run for
/// every packet of the host, stay on no longer than lives still end.
pub const MAX_DRAIN: Duration = Duration::from_millis(5);

/// The drain is held on by this step at a time while the window's lives still end: a socket
/// whose reader lags copies a window's packets well after it (on a 2-CPU host with two CPU
/// hogs, a window's TCP lives were still ending 45 ms after it).
pub const DRAIN_STEP: Duration = Duration::from_millis(5);

/// Steps in a row in which no life ends before a drain stops: a reader descheduled for a step
/// on a loaded host has not stopped reading, and the lives left after them most likely ended
/// where no hook sees (a segment TCP coalesced into the one before it). Only the copy and free
/// hooks stay on through these steps.
pub const DRAIN_PATIENCE: u32 = 4;

/// Longest a drain is held on: a life longer than this after its window's end is counted as
/// cut rather than timed, and the hooks' time on stays bounded whatever a reader does.
pub const LONGEST_DRAIN: Duration = Duration::from_millis(100);

/// The shortest cycle: long enough that warm-up and drain are a small part of a window at
/// any duty (at 16, a 62.5 ms window between 10 ms of each).
pub const MIN_CYCLE: Duration = Duration::from_secs(1);

/// The cycle for a recording interval.
pub fn cycle(interval: Duration) -> Duration {
    interval.max(MIN_CYCLE)
}

/// Largest `--duty`.
pub const MAX_DUTY: u32 = 64;

/// `--duty` when not given: the detail hooks and the sampler run 1/32 of the time (31 ms of
/// every second), which keeps their cost a thirty-second of always-on while a busy queue still
/// gets thousands of timed packets a second. A queue that turns busy between two drawn
/// windows has one opened for it (`Schedule::open_at`), so a burst of a few hundred
/// milliseconds still gets its stages timed.
pub const DEFAULT_DUTY: u32 = 32;

/// Packets (both directions) a window is sized to see on a busy device (`--window-packets`):
/// thousands of timed packets a second are more than the stage histograms, the flow sample
/// and the splits need, while the detail hooks cost a fixed number of runs per packet inside
/// a window. Sizing windows by packets rather than time holds their cost to about this many
/// packets' worth of hook runs a second, whatever the rate: at 1 Mpkt/s a 1/32 window would
/// time 31,000 packets a second, each paying every hook on its path (and its peer's, for a
/// host-wide one).
pub const WINDOW_PACKETS: u64 = 1024;

/// `--run-budget` when not given: the programs run at most this many times per packet of the
/// device, on average. At the 60-220 ns a run costs on a 2-vCPU VM (100 ns on average), about
/// 8 ns of BPF time per packet.
pub const RUN_BUDGET: f64 = 0.08;

/// The windows' run budget: credit in program runs, earned at `per_packet` for each packet
/// the device carries and spent by every run of the programs. A drawn window comes on only
/// with the credit not spent, so the runs per packet stay at the budget over any stretch
/// longer than a window and the time to earn it back, whatever each window costs (its hooks,
/// its attach and drain, the host's other packets through a host-wide hook). Credit banks
/// at most a cycle's worth: a quiet spell buys no burst of windows after it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunBudget {
    per_packet: f64,
    credit: f64,
    runs_seen: Option<u64>,
    /// Drawn windows let pass for it so far.
    pub passed: u64,
}

impl RunBudget {
    /// None for no budget (0).
    pub fn new(per_packet: f64) -> Option<RunBudget> {
        (per_packet > 0.0 && per_packet.is_finite()).then_some(RunBudget {
            per_packet,
            credit: 0.0,
            runs_seen: None,
            passed: 0,
        })
    }

    /// An interval's account: the programs' runs so far (cumulative) and the device's packets
    /// in it, which lasted `secs` of a `cycle`.
    pub fn account(&mut self, runs_so_far: u64, packets: u64, secs: f64, cycle: Duration) {
        let ran = runs_so_far.saturating_sub(self.runs_seen.unwrap_or(runs_so_far));
        self.runs_seen = Some(runs_so_far);
        let earned = self.per_packet * packets as f64;
        let bank = if secs > 0.0 {
            earned * (cycle.as_secs_f64() / secs).max(1.0)
        } else {
            earned
        };
        self.credit = (self.credit + earned - ran as f64).min(bank);
    }

    /// Whether a window may come on now.
    pub fn allows(&self) -> bool {
        self.credit >= 0.0
    }

    pub fn per_packet(&self) -> f64 {
        self.per_packet
    }
}

/// The shortest window a packet budget sizes: attaching the hooks takes about a millisecond,
/// and a window much shorter than that would be mostly attach.
pub const MIN_WINDOW: Duration = Duration::from_millis(2);

/// A window long enough to see `packets` packets at `rate` packets a second, within
/// [`MIN_WINDOW`] and `longest` (the duty's window). `packets` 0: the duty's window.
pub fn budgeted_window(longest: Duration, rate: f64, packets: u64) -> Duration {
    if packets == 0 || rate <= 0.0 || !rate.is_finite() {
        return longest;
    }
    let fit = Duration::from_secs_f64((packets as f64 / rate).min(longest.as_secs_f64()));
    fit.max(MIN_WINDOW).min(longest)
}

/// The spans of one window within a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spans {
    /// The window proper: hooks on and the sampler running.
    pub window: Duration,
    /// Hooks on, sampler off, before it.
    pub warmup: Duration,
    /// Lives already begun may end (start hooks off), after it.
    pub drain: Duration,
}

/// What a window runs beside tier 0's window programs; each asks for a span of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRuns {
    /// The L3-miss sampler, which starts once the hooks are warm.
    pub sampler: bool,
    /// The detail hooks, whose lives under way at the window's end are drained.
    pub detail: bool,
}

/// A window's spans for a cycle and duty: warm-up and drain take what the cycle leaves. The
/// warm-up is there for the sampler and the drain for the detail hooks' lives: without them
/// each would only lengthen the window beyond 1/duty.
pub fn spans(cycle: Duration, duty: u32, runs: WindowRuns) -> Spans {
    let window = cycle / duty.max(1);
    let warmup = if runs.sampler {
        MAX_WARMUP.min(cycle - window)
    } else {
        Duration::ZERO
    };
    let drain = if runs.detail {
        MAX_DRAIN.min(cycle - window - warmup)
    } else {
        Duration::ZERO
    };
    Spans {
        window,
        warmup,
        drain,
    }
}

/// The sampler's period inside windows: `period` (the period asked for, as if always on)
/// over the duty, so the samples per interval stay the same. At least 1.
pub fn window_period(period: u64, duty: u32) -> u64 {
    (period / u64::from(duty.max(1))).max(1)
}

/// What the probes do at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Off,
    /// Lives begun earlier may end; none starts.
    Drain,
    /// Every hook on; the sampler stopped.
    Warmup,
    /// Every hook on and the sampler running.
    Window,
}

/// One window, in time since the recording started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub warm_on: Duration,
    pub window_on: Duration,
    pub off: Duration,
    pub drained: Duration,
    /// The recorder has been in it (`Schedule::phase_at`).
    pub entered: bool,
}

impl Window {
    fn phase_at(&self, t: Duration) -> Phase {
        if t < self.warm_on || t >= self.drained {
            Phase::Off
        } else if t >= self.off {
            Phase::Drain
        } else if t >= self.window_on {
            Phase::Window
        } else {
            Phase::Warmup
        }
    }
}

/// The windows of a recording, drawn a cycle ahead as time passes. `draw` gives numbers
/// in [0, 1) that place each cycle's window.
pub struct Schedule<F: FnMut() -> f64> {
    cycle: Duration,
    spans: Spans,
    /// The duty's window: the longest a window runs (`fit_window` may shorten it).
    longest: Duration,
    draw: F,
    /// Cycles whose window is drawn.
    planned: u64,
    windows: VecDeque<Window>,
    /// A drain held on past its window's span until then (`hold_drain`).
    held_until: Option<Duration>,
}

impl<F: FnMut() -> f64> Schedule<F> {
    /// None for duty 1: always on.
    pub fn new(cycle: Duration, duty: u32, runs: WindowRuns, draw: F) -> Option<Schedule<F>> {
        if duty <= 1 || cycle.is_zero() {
            return None;
        }
        let spans = spans(cycle, duty, runs);
        Some(Schedule {
            cycle,
            spans,
            longest: spans.window,
            draw,
            planned: 0,
            windows: VecDeque::new(),
            held_until: None,
        })
    }

    /// Draw windows up to the cycle after the one holding `t` (its warm-up may begin in this
    /// one), and forget those over by `t`.
    fn plan_through(&mut self, t: Duration) {
        let upto = (t.as_nanos() / self.cycle.as_nanos().max(1)) as u64 + 1;
        while self.planned <= upto {
            let start = self.cycle * self.planned as u32;
            let window_on = start + self.cycle.mul_f64((self.draw)().clamp(0.0, 1.0));
            let off = window_on + self.spans.window;
            self.windows.push_back(Window {
                warm_on: window_on.saturating_sub(self.spans.warmup),
                window_on,
                off,
                drained: off + self.spans.drain,
                entered: false,
            });
            self.planned += 1;
        }
        while self.windows.front().is_some_and(|w| w.drained <= t) {
            self.windows.pop_front();
        }
    }

    /// Open a window whose warm-up begins at `t`, unless one is on at `t` or begins within a
    /// window's length of it: a queue that turned busy between two drawn windows is timed while
    /// it is still busy. The drawn windows stay where they are. Returns whether it opened one.
    pub fn open_at(&mut self, t: Duration) -> bool {
        self.plan_through(t);
        let soon = t + self.spans.window;
        if self
            .windows
            .iter()
            .any(|w| w.warm_on <= soon && w.drained > t)
        {
            return false;
        }
        let window_on = t + self.spans.warmup;
        let off = window_on + self.spans.window;
        let opened = Window {
            warm_on: t,
            window_on,
            off,
            drained: off + self.spans.drain,
            entered: false,
        };
        let at = self
            .windows
            .iter()
            .position(|w| w.warm_on > t)
            .unwrap_or(self.windows.len());
        self.windows.insert(at, opened);
        true
    }

    /// Push the rest of the windows on at `t` later by `by`: what opens them took that long
    /// before the detail hooks came on, and each still runs its full span.
    pub fn postpone(&mut self, t: Duration, by: Duration) {
        for w in self
            .windows
            .iter_mut()
            .filter(|w| w.phase_at(t) != Phase::Off)
        {
            if w.window_on > t {
                w.window_on += by;
            }
            w.off += by;
            w.drained += by;
        }
    }

    /// From `t` on, windows run `window` (at most the duty's): those drawn that have not come
    /// on yet are cut or stretched to it; one under way keeps its length.
    pub fn fit_window(&mut self, t: Duration, window: Duration) {
        self.spans.window = window.min(self.longest);
        let (len, drain) = (self.spans.window, self.spans.drain);
        for w in self.windows.iter_mut().filter(|w| w.warm_on > t) {
            w.off = w.window_on + len;
            w.drained = w.off + drain;
        }
    }

    /// The cycle each window is drawn in.
    pub fn cycle(&self) -> Duration {
        self.cycle
    }

    /// The duty's window: the longest a window runs.
    pub fn longest(&self) -> Duration {
        self.longest
    }

    /// A window's spans at the duty's window, uncut.
    pub fn duty_spans(&self) -> Spans {
        Spans {
            window: self.longest,
            ..self.spans
        }
    }

    /// The part of the duty's window the windows are cut to now (1: uncut).
    pub fn cut(&self) -> f64 {
        if self.longest.is_zero() {
            return 1.0;
        }
        (self.spans.window.as_secs_f64() / self.longest.as_secs_f64()).clamp(0.0, 1.0)
    }

    /// From `t` on, windows are sized to see `packets` at `rate` packets a second
    /// ([`budgeted_window`]); `packets` 0: the duty's window.
    pub fn fit_packets(&mut self, t: Duration, rate: f64, packets: u64) {
        self.fit_window(t, budgeted_window(self.longest, rate, packets));
    }

    /// Keep the drain on until `until`: the lives of the window that just ended are still
    /// ending. A window due in the meantime comes on as it would have.
    pub fn hold_drain(&mut self, until: Duration) {
        self.held_until = Some(until);
    }

    /// The phase at `t` (time since the start; call with non-decreasing `t`): the most
    /// active phase of any window there (overlapping windows run as one), or a held drain.
    pub fn phase_at(&mut self, t: Duration) -> Phase {
        // A window the recorder reaches only after its end (its loop was busy all through it)
        // begins when it gets there and runs its whole length: a window of a few
        // milliseconds would otherwise pass between two looks and never run.
        for w in self.windows.iter_mut().filter(|w| !w.entered) {
            if w.off <= t {
                let late = t - w.warm_on;
                w.warm_on += late;
                w.window_on += late;
                w.off += late;
                w.drained += late;
            }
            if w.warm_on <= t {
                w.entered = true;
            }
        }
        self.plan_through(t);
        let held = if self.held_until.is_some_and(|h| h > t) {
            Phase::Drain
        } else {
            Phase::Off
        };
        self.windows
            .iter()
            .map(|w| w.phase_at(t))
            .max()
            .unwrap_or(Phase::Off)
            .max(held)
    }

    /// The next instant after `t` at which the phase may change.
    pub fn next_change(&mut self, t: Duration) -> Option<Duration> {
        self.plan_through(t);
        self.windows
            .iter()
            .flat_map(|w| [w.warm_on, w.window_on, w.off, w.drained])
            .chain(self.held_until)
            .filter(|&c| c > t)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: WindowRuns = WindowRuns {
        sampler: true,
        detail: true,
    };
    const UNSAMPLED: WindowRuns = WindowRuns {
        sampler: false,
        detail: true,
    };

    /// Windows costing 25,000 runs on a device of 80,000 packets a second, at 0.08 runs a
    /// packet (6,400 a second): one window in four cycles comes on, and over the stretch the
    /// runs per packet stay at the budget. A cheap one each cycle is never held back; a quiet
    /// spell banks at most a cycle's credit.
    #[test]
    fn a_run_budget_spaces_costly_windows_and_never_cheap_ones() {
        let sec = Duration::from_secs(1);
        let mut b = RunBudget::new(0.08).unwrap();
        let (mut runs, mut on, cycles) = (0u64, 0, 40);
        b.account(0, 80_000, 1.0, sec);
        for _ in 0..cycles {
            if b.allows() {
                on += 1;
                runs += 25_000;
            }
            b.account(runs, 80_000, 1.0, sec);
        }
        assert!((9..=11).contains(&on), "{on} windows in {cycles} cycles");
        let per_packet = runs as f64 / (80_000.0 * cycles as f64);
        assert!(per_packet <= 0.08 * 1.1, "{per_packet}");

        let mut b = RunBudget::new(0.08).unwrap();
        let mut runs = 0;
        for _ in 0..40 {
            assert!(b.allows());
            runs += 3_000;
            b.account(runs, 80_000, 1.0, sec);
        }

        let mut b = RunBudget::new(0.08).unwrap();
        for i in 0..100 {
            b.account(0, 80_000, 0.1, sec);
            assert!(b.credit <= 0.08 * 80_000.0 * 10.0 + 1e-6, "interval {i}");
        }
        // Uncapped, the hundred intervals would have banked 640,000 runs.
        b.account(100_000, 8_000, 0.1, sec);
        assert!(!b.allows(), "the bank is one cycle's: {}", b.credit);
        assert!(RunBudget::new(0.0).is_none() && RunBudget::new(f64::NAN).is_none());
    }

    const SEC: Duration = Duration::from_secs(1);
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A schedule whose draws come from a list, in turn.
    fn fixed(draws: Vec<f64>, duty: u32) -> Schedule<impl FnMut() -> f64> {
        let mut i = 0;
        Schedule::new(SEC, duty, BOTH, move || {
            let d = draws[i % draws.len()];
            i += 1;
            d
        })
        .expect("duty > 1")
    }

    /// A window cut to its packet budget says how much of the duty's window it kept.
    #[test]
    fn the_cut_is_the_part_of_the_duty_window_kept() {
        let mut s = Schedule::new(Duration::from_secs(1), 4, UNSAMPLED, || 0.5).unwrap();
        assert_eq!(s.cut(), 1.0);
        // 1024 packets at 102 400 a second: 10 ms of a 250 ms window.
        s.fit_packets(Duration::ZERO, 102_400.0, 1024);
        assert!((s.cut() - 0.04).abs() < 1e-9, "{}", s.cut());
        // A quiet device keeps the whole window.
        s.fit_packets(Duration::ZERO, 10.0, 1024);
        assert_eq!(s.cut(), 1.0);
    }

    #[test]
    fn duty_one_is_always_on() {
        assert!(Schedule::new(SEC, 1, BOTH, || 0.5).is_none());
        assert_eq!(window_period(2000, 1), 2000);
    }

    #[test]
    fn phases_walk_each_window_warmup_window_drain() {
        // Cycle 0's window runs from 500 ms for 250 ms (duty 4) after 10 ms of warm-up, then
        // drains for 5 ms.
        let mut s = fixed(vec![0.5, 0.5, 0.5], 4);
        assert_eq!(s.phase_at(ms(0)), Phase::Off);
        assert_eq!(s.next_change(ms(0)), Some(ms(490)));
        assert_eq!(s.phase_at(ms(490)), Phase::Warmup);
        assert_eq!(s.phase_at(ms(500)), Phase::Window);
        assert_eq!(s.phase_at(ms(749)), Phase::Window);
        assert_eq!(s.phase_at(ms(750)), Phase::Drain);
        assert_eq!(s.phase_at(ms(754)), Phase::Drain);
        assert_eq!(s.phase_at(ms(755)), Phase::Off);
        assert_eq!(s.next_change(ms(755)), Some(ms(1490)));
    }

    #[test]
    fn a_held_drain_stays_on_until_its_hold_and_gives_way_to_a_window_due_in_it() {
        // Cycle 0's window drains 750-755 ms; held to 770 ms, then to 790 ms.
        let mut s = fixed(vec![0.5, 0.0], 4);
        assert_eq!(s.phase_at(ms(754)), Phase::Drain);
        s.hold_drain(ms(770));
        assert_eq!(s.next_change(ms(755)), Some(ms(770)));
        assert_eq!(s.phase_at(ms(755)), Phase::Drain);
        s.hold_drain(ms(790));
        assert_eq!(s.phase_at(ms(789)), Phase::Drain);
        assert_eq!(s.phase_at(ms(790)), Phase::Off);
        // Cycle 1's window warms up from 990 ms: held into it, the drain gives way to it.
        s.hold_drain(ms(1005));
        assert_eq!(s.phase_at(ms(989)), Phase::Drain);
        assert_eq!(s.phase_at(ms(990)), Phase::Warmup);
        assert_eq!(s.phase_at(ms(1000)), Phase::Window);
    }

    #[test]
    fn a_window_runs_on_into_the_next_interval_and_a_warmup_may_start_in_the_previous_one() {
        // Window 0 samples 900–1150 ms; window 1 starts at 1005 ms: its warm-up (995 ms) and
        // sampling lie inside window 0's, so the sampler stays on until 1255 ms.
        let mut s = fixed(vec![0.9, 0.005, 0.9], 4);
        assert_eq!(s.phase_at(ms(950)), Phase::Window);
        assert_eq!(s.phase_at(ms(1100)), Phase::Window);
        assert_eq!(s.phase_at(ms(1200)), Phase::Window);
        assert_eq!(s.phase_at(ms(1255)), Phase::Drain);
        assert_eq!(s.phase_at(ms(1265)), Phase::Off);
        // Window 2 (interval 2, from 2900 ms) warms up from 2890 ms.
        assert_eq!(s.next_change(ms(1265)), Some(ms(2890)));
    }

    /// Over many cycles every instant is sampled about 1/duty of the time, near a cycle's edges
    /// as in its middle (a little less just after a cycle's start, where two windows may
    /// overlap: down to 1/duty − 1/(4 duty²)).
    #[test]
    fn every_instant_is_sampled_about_one_nth_of_the_time() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let duty = 4;
        let mut s = Schedule::new(SEC, duty, BOTH, move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        })
        .unwrap();
        let intervals = 4000u64;
        let mut hits = [0u32; 10];
        for k in 1..intervals {
            for (b, h) in hits.iter_mut().enumerate() {
                let t = SEC * k as u32 + ms(50 + 100 * b as u64);
                if s.phase_at(t) == Phase::Window {
                    *h += 1;
                }
            }
        }
        for (b, &h) in hits.iter().enumerate() {
            let p = h as f64 / (intervals - 1) as f64;
            // 1/4, less the overlap of two windows (≤ 1/4 × 1/4 near an edge); 4σ ≈ 0.03.
            assert!(
                (0.19..=0.28).contains(&p),
                "offset {} ms sampled {p:.3} of intervals",
                50 + 100 * b
            );
        }
    }

    #[test]
    fn a_window_opened_between_drawn_ones_runs_whole_and_leaves_them_in_place() {
        // Drawn: 900 ms of each cycle, duty 4 (250 ms windows).
        let mut s = fixed(vec![0.9, 0.9, 0.9], 4);
        assert_eq!(s.phase_at(ms(100)), Phase::Off);
        assert!(s.open_at(ms(100)));
        assert_eq!(s.phase_at(ms(100)), Phase::Warmup);
        assert_eq!(s.phase_at(ms(110)), Phase::Window);
        assert_eq!(s.phase_at(ms(359)), Phase::Window);
        assert_eq!(s.phase_at(ms(360)), Phase::Drain);
        assert_eq!(s.phase_at(ms(370)), Phase::Off);
        assert_eq!(s.next_change(ms(370)), Some(ms(890)));
        assert_eq!(s.phase_at(ms(900)), Phase::Window);
        // Not while one is on, nor within a window's length of a drawn one.
        assert!(!s.open_at(ms(1000)));
        assert!(s.open_at(ms(1300)));
        assert_eq!(s.phase_at(ms(1300)), Phase::Warmup);
        assert_eq!(s.phase_at(ms(1570)), Phase::Off);
        assert!(!s.open_at(ms(1700)));
        assert_eq!(s.phase_at(ms(1700)), Phase::Off);
        assert_eq!(s.phase_at(ms(1900)), Phase::Window);
    }

    #[test]
    fn a_postponed_window_keeps_its_spans() {
        // Cycle 0's window: warm-up from 490 ms, window 500-750 ms, drain to 760 ms.
        let mut s = fixed(vec![0.5], 4);
        assert_eq!(s.phase_at(ms(490)), Phase::Warmup);
        s.postpone(ms(490), ms(15));
        assert_eq!(s.phase_at(ms(510)), Phase::Warmup);
        assert_eq!(s.phase_at(ms(515)), Phase::Window);
        assert_eq!(s.phase_at(ms(764)), Phase::Window);
        assert_eq!(s.phase_at(ms(765)), Phase::Drain);
        assert_eq!(s.phase_at(ms(775)), Phase::Off);
    }

    #[test]
    fn the_window_period_keeps_the_sample_count() {
        assert_eq!(window_period(2000, 16), 125);
        assert_eq!(window_period(1_000_000, 8), 125_000);
        assert_eq!(window_period(3, 16), 1);
    }

    #[test]
    fn spans_cap_the_warmup_by_what_the_interval_leaves() {
        assert_eq!(
            spans(SEC, 16, BOTH),
            Spans {
                window: ms(62) + Duration::from_micros(500),
                warmup: MAX_WARMUP,
                drain: MAX_DRAIN
            }
        );
        assert_eq!(
            spans(ms(10), 2, BOTH),
            Spans {
                window: ms(5),
                warmup: ms(5),
                drain: ms(0)
            }
        );
        assert_eq!(
            spans(ms(30), 2, BOTH),
            Spans {
                window: ms(15),
                warmup: ms(10),
                drain: ms(5)
            }
        );
        // No sampler, no warm-up: the drain takes its full span.
        assert_eq!(
            spans(ms(30), 2, UNSAMPLED),
            Spans {
                window: ms(15),
                warmup: ms(0),
                drain: ms(5)
            }
        );
        // No detail hooks (`--detail counts`), no lives to drain: the window alone.
        assert_eq!(
            spans(
                ms(30),
                2,
                WindowRuns {
                    sampler: false,
                    detail: false
                }
            ),
            Spans {
                window: ms(15),
                warmup: ms(0),
                drain: ms(0)
            }
        );
    }

    #[test]
    fn a_busy_device_gets_windows_sized_to_its_packet_budget() {
        let longest = SEC / 32;
        // 100 kpkt/s: 1024 packets take 10.24 ms.
        assert_eq!(
            budgeted_window(longest, 100_000.0, 1024),
            Duration::from_micros(10_240)
        );
        // Faster than the floor allows: 2 ms, not 1.024.
        assert_eq!(budgeted_window(longest, 1e6, 1024), MIN_WINDOW);
        // Slower than the duty's window: the duty's window.
        assert_eq!(budgeted_window(longest, 10_000.0, 1024), longest);
        // No budget, an idle device or a rate not measured: the duty's window.
        assert_eq!(budgeted_window(longest, 1e6, 0), longest);
        assert_eq!(budgeted_window(longest, 0.0, 1024), longest);
        assert_eq!(budgeted_window(longest, f64::NAN, 1024), longest);
    }

    #[test]
    fn a_fitted_window_cuts_the_windows_to_come_and_not_the_one_under_way() {
        // Duty 4 without warm-up: windows of 250 ms at 500 ms of each cycle, 5 ms of drain.
        let mut s = Schedule::new(SEC, 4, UNSAMPLED, || 0.5).expect("duty > 1");
        assert_eq!(s.phase_at(ms(600)), Phase::Window);
        s.fit_window(ms(600), ms(20));
        // The window under way runs its 250 ms ...
        assert_eq!(s.phase_at(ms(749)), Phase::Window);
        assert_eq!(s.phase_at(ms(750)), Phase::Drain);
        // ... and the next one 20 ms, then drains.
        assert_eq!(s.phase_at(ms(1519)), Phase::Window);
        assert_eq!(s.phase_at(ms(1520)), Phase::Drain);
        assert_eq!(s.phase_at(ms(1525)), Phase::Off);
        // A fit never stretches a window past the duty's.
        s.fit_window(ms(1600), SEC);
        assert_eq!(s.phase_at(ms(2749)), Phase::Window);
        assert_eq!(s.phase_at(ms(2750)), Phase::Drain);
    }

    #[test]
    fn a_window_the_recorder_reaches_after_its_end_runs_from_then() {
        // Duty 64 without warm-up: a 15.625 ms window at 500 ms, 5 ms of drain. The loop
        // looks at 400 ms and next at 530 ms, after the window's end.
        let mut s = Schedule::new(SEC, 64, UNSAMPLED, || 0.5).expect("duty > 1");
        assert_eq!(s.phase_at(ms(400)), Phase::Off);
        assert_eq!(s.phase_at(ms(530)), Phase::Window);
        assert_eq!(
            s.next_change(ms(530)),
            Some(ms(530) + Duration::from_micros(15_625))
        );
        assert_eq!(s.phase_at(ms(546)), Phase::Drain);
        assert_eq!(s.phase_at(ms(551)), Phase::Off);
        // A window looked at inside it runs what is left of it.
        assert_eq!(s.phase_at(ms(1505)), Phase::Window);
        assert_eq!(s.phase_at(ms(1516)), Phase::Drain);
    }
}
