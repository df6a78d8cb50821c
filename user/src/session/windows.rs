//! Attribution windows (`record --miss-duty N`): when the buffer join and the L3-miss sampler
//! run, so that attribution's per-packet cost is paid about 1/N of the time.
//!
//! Time is cut into cycles of a second (or the recording interval, if longer); each cycle
//! draws one sampling window of 1/N of its length, starting anywhere in it (a fixed place
//! would alias with any periodic load) and free to run on into the next cycle, so no cycle
//! boundary is special (where two windows overlap, their union is sampled once: the recorder
//! measures the time the sampler ran rather than assume 1/N). The sampler runs at N times its rate inside, so a recording
//! gets about as many samples as with attribution always on. Before each window the buffer
//! map and CPU context come on for a warm-up: the pages in use are handed up again and so
//! are current in the map when the first sample arrives.
use std::collections::VecDeque;
use std::time::Duration;

/// Longest warm-up: several RX ring cycles at any rate worth attributing (a 4096-entry ring
/// at 1 Mpkt/s turns over in 4 ms).
pub const MAX_WARMUP: Duration = Duration::from_millis(10);

/// The shortest cycle: long enough that the warm-up is a small part of a window at any duty
/// (at 16, a 62.5 ms window after 10 ms).
pub const MIN_CYCLE: Duration = Duration::from_secs(1);

/// The cycle for a recording interval.
pub fn cycle(interval: Duration) -> Duration {
    interval.max(MIN_CYCLE)
}

/// Largest `--miss-duty`.
pub const MAX_DUTY: u32 = 64;

/// `--miss-duty` when not given: windows of 1/16 with PEBS (the production case, where
/// always-on attribution costs every received packet its buffer-map update), always on with
/// a software stand-in (tests and hosts without a PMU, where exact counts are the point and
/// a clock period divided by 16 soon meets cpu-clock's 10 µs floor).
pub fn default_duty(source: crate::probe::l3miss::MissSource) -> u32 {
    use crate::probe::l3miss::MissSource;
    match source {
        MissSource::Auto | MissSource::Pebs => 16,
        _ => 1,
    }
}

/// The sampler's span per cycle and the warm-up before it.
pub fn spans(cycle: Duration, duty: u32) -> (Duration, Duration) {
    let sampling = cycle / duty.max(1);
    (sampling, MAX_WARMUP.min(cycle - sampling))
}

/// The sampler's period inside windows: `period` (the period asked for, as if always on)
/// over the duty, so the samples per interval stay the same. At least 1.
pub fn window_period(period: u64, duty: u32) -> u64 {
    (period / u64::from(duty.max(1))).max(1)
}

/// What the probes do at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Off,
    /// The buffer map and CPU context are kept; the sampler is stopped.
    Joining,
    Sampling,
}

/// One window, in time since the recording started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub join_on: Duration,
    pub sample_on: Duration,
    pub off: Duration,
}

/// The windows of a recording, drawn a cycle ahead as time passes. `draw` gives numbers
/// in [0, 1) that place each interval's window.
pub struct Schedule<F: FnMut() -> f64> {
    interval: Duration,
    sampling: Duration,
    warmup: Duration,
    draw: F,
    /// Cycles whose window is drawn.
    planned: u64,
    windows: VecDeque<Window>,
}

impl<F: FnMut() -> f64> Schedule<F> {
    /// None for duty 1: always on.
    /// `interval`: the cycle (see `cycle`).
    pub fn new(interval: Duration, duty: u32, draw: F) -> Option<Schedule<F>> {
        if duty <= 1 || interval.is_zero() {
            return None;
        }
        let (sampling, warmup) = spans(interval, duty);
        Some(Schedule { interval, sampling, warmup, draw, planned: 0, windows: VecDeque::new() })
    }

    /// Draw windows up to the cycle after the one holding `t` (its warm-up may begin in this
    /// one), and forget those over by `t`.
    fn plan_through(&mut self, t: Duration) {
        let upto = (t.as_nanos() / self.interval.as_nanos().max(1)) as u64 + 1;
        while self.planned <= upto {
            let start = self.interval * self.planned as u32;
            let sample_on = start + self.interval.mul_f64((self.draw)().clamp(0.0, 1.0));
            self.windows.push_back(Window {
                join_on: sample_on.saturating_sub(self.warmup),
                sample_on,
                off: sample_on + self.sampling,
            });
            self.planned += 1;
        }
        while self.windows.front().is_some_and(|w| w.off <= t) {
            self.windows.pop_front();
        }
    }

    /// The phase at `t` (time since the start; call with non-decreasing `t`).
    pub fn phase_at(&mut self, t: Duration) -> Phase {
        self.plan_through(t);
        let mut phase = Phase::Off;
        for w in &self.windows {
            if w.sample_on <= t && t < w.off {
                return Phase::Sampling;
            }
            if w.join_on <= t && t < w.off {
                phase = Phase::Joining;
            }
        }
        phase
    }

    /// The next instant after `t` at which the phase may change.
    pub fn next_change(&mut self, t: Duration) -> Option<Duration> {
        self.plan_through(t);
        self.windows.iter().flat_map(|w| [w.join_on, w.sample_on, w.off]).filter(|&c| c > t).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A schedule whose draws come from a list, in turn.
    fn fixed(draws: Vec<f64>, duty: u32) -> Schedule<impl FnMut() -> f64> {
        let mut i = 0;
        Schedule::new(SEC, duty, move || {
            let d = draws[i % draws.len()];
            i += 1;
            d
        })
        .expect("duty > 1")
    }

    #[test]
    fn duty_one_is_always_on() {
        assert!(Schedule::new(SEC, 1, || 0.5).is_none());
        assert_eq!(window_period(2000, 1), 2000);
    }

    #[test]
    fn phases_walk_each_window_warmup_then_sampling() {
        // Interval 0's window samples from 500 ms for 250 ms (duty 4) after 10 ms of warm-up.
        let mut s = fixed(vec![0.5, 0.5, 0.5], 4);
        assert_eq!(s.phase_at(ms(0)), Phase::Off);
        assert_eq!(s.next_change(ms(0)), Some(ms(490)));
        assert_eq!(s.phase_at(ms(490)), Phase::Joining);
        assert_eq!(s.phase_at(ms(500)), Phase::Sampling);
        assert_eq!(s.phase_at(ms(749)), Phase::Sampling);
        assert_eq!(s.phase_at(ms(750)), Phase::Off);
        assert_eq!(s.next_change(ms(750)), Some(ms(1490)));
    }

    #[test]
    fn a_window_runs_on_into_the_next_interval_and_a_warmup_may_start_in_the_previous_one() {
        // Window 0 samples 900–1150 ms; window 1 starts at 1005 ms: its warm-up (995 ms) and
        // sampling lie inside window 0's, so the sampler stays on until 1255 ms.
        let mut s = fixed(vec![0.9, 0.005, 0.9], 4);
        assert_eq!(s.phase_at(ms(950)), Phase::Sampling);
        assert_eq!(s.phase_at(ms(1100)), Phase::Sampling);
        assert_eq!(s.phase_at(ms(1200)), Phase::Sampling);
        assert_eq!(s.phase_at(ms(1255)), Phase::Off);
        // Window 2 (interval 2, from 2900 ms) warms up from 2890 ms.
        assert_eq!(s.next_change(ms(1255)), Some(ms(2890)));
    }

    /// Over many cycles every instant is sampled about 1/duty of the time, near a cycle's edges
    /// as in its middle (a little less just after a cycle's start, where two windows may
    /// overlap: down to 1/duty − 1/(4 duty²)).
    #[test]
    fn every_instant_is_sampled_about_one_nth_of_the_time() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let duty = 4;
        let mut s = Schedule::new(SEC, duty, move || {
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
                if s.phase_at(t) == Phase::Sampling {
                    *h += 1;
                }
            }
        }
        for (b, &h) in hits.iter().enumerate() {
            let p = h as f64 / (intervals - 1) as f64;
            // 1/4, less the overlap of two windows (≤ 1/4 × 1/4 near an edge); 4σ ≈ 0.03.
            assert!((0.19..=0.28).contains(&p), "offset {} ms sampled {p:.3} of intervals", 50 + 100 * b);
        }
    }

    #[test]
    fn windows_by_default_with_pebs_only() {
        use crate::probe::l3miss::MissSource;
        assert_eq!((default_duty(MissSource::Auto), default_duty(MissSource::Pebs)), (16, 16));
        for s in [MissSource::SoftwareClock, MissSource::SoftwareCopy, MissSource::SoftwareFaults, MissSource::Off] {
            assert_eq!(default_duty(s), 1, "{s:?}");
        }
    }

    #[test]
    fn the_window_period_keeps_the_sample_count() {
        assert_eq!(window_period(2000, 16), 125);
        assert_eq!(window_period(1_000_000, 8), 125_000);
        assert_eq!(window_period(3, 16), 1);
    }

    #[test]
    fn spans_cap_the_warmup_by_what_the_interval_leaves() {
        assert_eq!(spans(SEC, 16), (ms(62) + Duration::from_micros(500), MAX_WARMUP));
        assert_eq!(spans(ms(10), 2), (ms(5), ms(5)));
    }
}
