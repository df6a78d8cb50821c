//! Calibration by the host's own counters: fit the model's few free physical parameters to measured socket DDIO write (ItoM) and I/O read (PCIeRdCur) hit rates for one configuration, and report the uncalibrated and calibrated predictions and the residual.
//!
//! Free parameters (everything else in a spec is geometry, configuration or measured):
//! * `hash_evenness` (0..=1): how evenly this host's LLC slice hash spreads its buffer pool
//!   over the sets (1 = a contiguous pool covers every set equally, 0 = each line lands
//!   independently at random). Searched on a grid: the response is not monotone between
//!   the ends, where the two placements mix and collide.
//! * `background.lines_per_sec`: LLC fills per second by everything else on the socket
//!   (other cores, other devices) over a working set of four LLCs. Lowers hits; fitted only
//!   when every placement on the grid predicts more write hits than were measured.
//! * `tx_delay_us`: core done → NIC TX read, fitted to the read hit rate (forwarding).
//!
//! The memory controllers' counts (IMC CAS reads and writes) are the pair to the model's
//! predicted DRAM traffic, but they count every source on the socket: they bound the
//! network's traffic and the background's from above, and what they count beyond the
//! network's is the rest of the socket's. So they are used three ways:
//! * a background fitted to the write hit rate is lowered until its DRAM reads and the
//!   network's fit in what the controllers read;
//! * without a write hit rate, the reads the network does not account for are the
//!   background's, and its fill rate is fitted to them;
//! * without a write hit rate, a prediction of more network reads than the controllers
//!   counted moves the placement to the nearest one within them.
//!
//! Bisection where the response is monotone; a calibration costs at most
//! `EVENNESS.len() + 4 * STEPS + 3` simulations.

use serde::{Deserialize, Serialize};

use super::drive::simulate;
use super::sim::DramTraffic;
use super::spec::{Consumer, SimSpec};

/// Bisection steps per parameter (resolution 1/2^STEPS of its range).
const STEPS: u32 = 7;
/// Upper end of the background search: 5e9 fills/s is the LLC's whole bandwidth.
const MAX_BG_LINES_PER_SEC: f64 = 5e9;
/// Upper end of the TX delay search.
const MAX_TX_DELAY_US: f64 = 2000.0;
/// Placements searched, nearest the spec's own first.
const EVENNESS: [f64; 5] = [1.0, 0.75, 0.5, 0.25, 0.0];
/// Predicted and measured hit rates this close agree, and a parameter moves only as far as it
/// must to get there. Neither a counter interval on a host nor repeated runs of one
/// configuration are more precise (ddio-bench's ten runs of a configuration spread by 0.1-2
/// points, outside its bimodal ones). One configuration cannot tell the free parameters apart:
/// a fit that chases a smaller difference swaps the spec's placement or adds a background
/// load the host may not have, and every other prediction moves with it.
const AGREE_PP: f64 = 2.0;
/// Predicted and measured DRAM reads this close agree: the share of the measured reads, and a
/// floor for an idle socket. The controllers count exactly; the prediction carries the
/// simulation's sampling error (a few per cent at a calibration's packet budget) and the
/// lines it leaves out (descriptors, socket metadata, the kernel's own).
const DRAM_AGREE_SHARE: f64 = 0.1;
const DRAM_AGREE_FLOOR_GBPS: f64 = 0.2;
/// Steps of the background's fit to the DRAM reads at most.
const FIXED_POINT_STEPS: u32 = 4;

/// Counters measured on the host for the configuration the spec describes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Socket DDIO write hit % (CHA TOR IO_HIT_ITOM / IO_ITOM).
    pub io_write_hit_pct: Option<f64>,
    /// Socket I/O read hit % (IO_HIT_PCIRDCUR / IO_PCIRDCUR).
    pub io_read_hit_pct: Option<f64>,
    /// DRAM reads and writes the memory controllers counted (IMC CAS), every source on the
    /// socket, GB/s.
    #[serde(default)]
    pub dram_read_gbps: Option<f64>,
    #[serde(default)]
    pub dram_write_gbps: Option<f64>,
}

/// What set the background load's fill rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackgroundFit {
    /// Not fitted: the spec's own.
    #[default]
    Spec,
    /// The measured DDIO write hit rate.
    WriteHits,
    /// The write hit rate, lowered to what the memory controllers' reads leave room for: the
    /// write misses are not all the background's.
    WriteHitsBoundByDram,
    /// The memory controllers' reads beyond the network's (no write hit rate measured).
    DramExcess,
}

/// The fitted parameters; [`CalibrationParams::apply`] puts them into a spec.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationParams {
    pub hash_evenness: f64,
    pub bg_lines_per_sec: f64,
    pub bg_working_set_bytes: u64,
    pub tx_delay_us: f64,
}

impl CalibrationParams {
    /// The spec's own values (what an uncalibrated prediction uses).
    pub fn of(spec: &SimSpec) -> Self {
        CalibrationParams {
            hash_evenness: spec.hash_evenness,
            bg_lines_per_sec: spec.background.lines_per_sec,
            bg_working_set_bytes: spec.background.working_set_bytes,
            tx_delay_us: spec.tx_delay_us,
        }
    }

    pub fn apply(&self, spec: &mut SimSpec) {
        spec.hash_evenness = self.hash_evenness;
        spec.background.lines_per_sec = self.bg_lines_per_sec;
        spec.background.working_set_bytes = self.bg_working_set_bytes;
        spec.tx_delay_us = self.tx_delay_us;
    }
}

/// Predicted socket hit rates and DRAM traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub io_write_hit_pct: Option<f64>,
    pub io_read_hit_pct: Option<f64>,
    /// The network's DRAM traffic.
    #[serde(default)]
    pub network_dram: Option<DramTraffic>,
    /// DRAM reads of the background load.
    #[serde(default)]
    pub background_dram_read_gbps: f64,
}

impl Prediction {
    /// The socket's DRAM reads the model accounts for: the network's and the background's.
    pub fn dram_read_gbps(&self) -> Option<f64> {
        self.network_dram
            .map(|d| d.read_gbps + self.background_dram_read_gbps)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub params: CalibrationParams,
    pub uncalibrated: Prediction,
    pub calibrated: Prediction,
    pub measured: Measured,
    /// calibrated − measured, percentage points.
    pub residual_write_pct: Option<f64>,
    pub residual_read_pct: Option<f64>,
    /// Calibrated DRAM reads (network and background) − measured, GB/s.
    #[serde(default)]
    pub residual_dram_read_gbps: Option<f64>,
    #[serde(default)]
    pub background_fit: BackgroundFit,
    pub simulations: u32,
}

fn predict(spec: &SimSpec) -> Prediction {
    let r = simulate(spec);
    Prediction {
        io_write_hit_pct: r.total.io_write_hit_pct(),
        io_read_hit_pct: r.total.io_read_hit_pct(),
        network_dram: r.dram(&r.total),
        background_dram_read_gbps: r.background_dram_read_gbps(spec.background.lines_per_sec),
    }
}

/// Whether DRAM reads `predicted` exceed `measured` by more than the two can differ by.
fn dram_over(predicted: f64, measured: f64) -> bool {
    predicted > measured * (1.0 + DRAM_AGREE_SHARE) + DRAM_AGREE_FLOOR_GBPS
}

/// Bisection for the x in [lo, hi] where `f(x)` crosses `target`; `rising` says whether f
/// grows with x. Returns the end of the bracket closest to the target when it is outside.
fn bisect(
    mut lo: f64,
    mut hi: f64,
    rising: bool,
    target: f64,
    f: &mut dyn FnMut(f64) -> f64,
) -> f64 {
    for _ in 0..STEPS {
        let mid = 0.5 * (lo + hi);
        let above = f(mid) > target;
        if above == rising {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    0.5 * (lo + hi)
}

/// `spec` with the parameters `p`.
fn with_params(spec: &SimSpec, p: &CalibrationParams) -> SimSpec {
    let mut s = spec.clone();
    p.apply(&mut s);
    s
}

/// `p` with the background fill rate at which the write hit rate is `target`, on a log scale.
fn fit_background(
    spec: &SimSpec,
    mut p: CalibrationParams,
    target: f64,
    sims: &mut u32,
) -> CalibrationParams {
    let x = bisect(
        0.0,
        (MAX_BG_LINES_PER_SEC / 1e6).ln(),
        false,
        target,
        &mut |x| {
            p.bg_lines_per_sec = 1e6 * x.exp();
            *sims += 1;
            predict(&with_params(spec, &p))
                .io_write_hit_pct
                .unwrap_or(0.0)
        },
    );
    p.bg_lines_per_sec = 1e6 * x.exp();
    p
}

/// `p` with the TX delay at which the NIC's read hit rate is `target`.
fn fit_tx_delay(
    spec: &SimSpec,
    mut p: CalibrationParams,
    target: f64,
    sims: &mut u32,
) -> CalibrationParams {
    p.tx_delay_us = bisect(0.0, MAX_TX_DELAY_US.ln_1p(), false, target, &mut |x| {
        p.tx_delay_us = x.exp_m1();
        *sims += 1;
        predict(&with_params(spec, &p))
            .io_read_hit_pct
            .unwrap_or(0.0)
    })
    .exp_m1();
    p
}

/// `p` with the background fill rate, at most `max_lines_per_sec`, at which the DRAM reads
/// the model accounts for are `target` GB/s (none when the network's alone reach it).
///
/// A fixed point rather than a bisection: the background's reads are its accesses × the
/// share of them that miss, which its working set against the LLC sets and the network
/// hardly moves, so each step solves for the rate with the last step's share and network
/// reads. A busy socket's background is most of a run's simulated accesses; this takes a
/// few runs where a bisection takes eight.
fn fit_background_to_dram(
    spec: &SimSpec,
    mut p: CalibrationParams,
    target: f64,
    max_lines_per_sec: f64,
    sims: &mut u32,
) -> CalibrationParams {
    let mut at = |p: &CalibrationParams| {
        *sims += 1;
        predict(&with_params(spec, p))
    };
    let network = |r: &Prediction| r.network_dram.map_or(0.0, |d| d.read_gbps);
    let mut none = p;
    none.bg_lines_per_sec = 0.0;
    let mut net = network(&at(&none));
    if net >= target || max_lines_per_sec <= 0.0 {
        return none;
    }
    // Uniform accesses over the working set miss about as often as the LLC is smaller.
    let llc = spec.geometry.size_bytes as f64;
    let mut miss = (1.0 - llc / p.bg_working_set_bytes.max(1) as f64).clamp(0.05, 1.0);
    for _ in 0..FIXED_POINT_STEPS {
        p.bg_lines_per_sec = ((target - net) * 1e9 / 64.0 / miss).clamp(0.0, max_lines_per_sec);
        let r = at(&p);
        net = network(&r);
        let bg = r.background_dram_read_gbps;
        let reads = net + bg;
        let capped = p.bg_lines_per_sec >= max_lines_per_sec && reads < target;
        if capped || (!dram_over(reads, target) && !dram_over(target, reads)) || net >= target {
            break;
        }
        if bg > 0.0 {
            miss = bg * 1e9 / 64.0 / p.bg_lines_per_sec;
        }
    }
    p
}

/// Without a write hit rate, the placement nearest the spec's own whose network DRAM reads
/// fit in the measured `read`, or the one with the fewest; `p` itself when they fit.
fn fit_placement_to_dram(
    spec: &SimSpec,
    p: CalibrationParams,
    now: &Prediction,
    read: f64,
    sims: &mut u32,
) -> CalibrationParams {
    let network = |q: &Prediction| q.network_dram.map_or(0.0, |d| d.read_gbps);
    if !dram_over(network(now), read) {
        return p;
    }
    let mut fewest = (network(now), p);
    for e in placements_nearest(spec.hash_evenness) {
        let mut q = p;
        q.hash_evenness = e;
        *sims += 1;
        let r = network(&predict(&with_params(spec, &q)));
        if !dram_over(r, read) {
            return q;
        }
        if r < fewest.0 {
            fewest = (r, q);
        }
    }
    fewest.1
}

/// [`EVENNESS`], nearest `own` first.
fn placements_nearest(own: f64) -> [f64; EVENNESS.len()] {
    let mut placements = EVENNESS;
    placements.sort_by(|a, b| (a - own).abs().total_cmp(&(b - own).abs()));
    placements
}

/// Fit the free parameters of `spec` to `measured`; see the module documentation.
pub fn calibrate(spec: &SimSpec, measured: &Measured) -> Calibration {
    let mut sims = 0u32;
    let uncal = predict(spec);
    sims += 1;
    let mut p = CalibrationParams::of(spec);
    let mut background_fit = BackgroundFit::Spec;
    let with = |p: &CalibrationParams| with_params(spec, p);
    if let Some(target) = measured.io_write_hit_pct.filter(|t| {
        uncal
            .io_write_hit_pct
            .is_none_or(|u| (u - t).abs() > AGREE_PP)
    }) {
        let w = |p: &CalibrationParams, sims: &mut u32| {
            *sims += 1;
            predict(&with(p)).io_write_hit_pct.unwrap_or(0.0)
        };
        let mut base = p;
        base.bg_lines_per_sec = 0.0;
        let mut best: Option<(f64, CalibrationParams)> = None;
        let mut lowest = f64::INFINITY;
        for e in placements_nearest(spec.hash_evenness) {
            let mut q = base;
            q.hash_evenness = e;
            let h = w(&q, &mut sims);
            lowest = lowest.min(h);
            if best.is_none_or(|(b, _)| (h - target).abs() < (b - target).abs()) {
                best = Some((h, q));
            }
            if (h - target).abs() <= AGREE_PP {
                break;
            }
        }
        if let Some((h, q)) = best {
            p = q;
            if lowest > target + AGREE_PP && h > target + AGREE_PP {
                // Every placement hits more than measured: something else on the socket takes
                // the capacity. Fit its fill rate, placement kept.
                let mut q = q;
                q.bg_working_set_bytes = spec.geometry.size_bytes.saturating_mul(4);
                p = fit_background(spec, q, target, &mut sims);
                background_fit = BackgroundFit::WriteHits;
            }
        }
    }
    if let Some(read) = measured.dram_read_gbps {
        let now = if p == CalibrationParams::of(spec) {
            uncal
        } else {
            sims += 1;
            predict(&with(&p))
        };
        (p, background_fit) =
            fit_to_dram(spec, measured, (p, &now), background_fit, read, &mut sims);
    }
    // The TX delay is fitted to the read hit rate. Where a background load was fitted too,
    // the two move each other's rate (buffers the TX path holds longer take cache, and the
    // background evicts lines before the NIC reads them), so each is fitted once more with
    // the other's value.
    let read_differs = |t: &f64| {
        uncal
            .io_read_hit_pct
            .is_none_or(|u| (u - t).abs() > AGREE_PP)
    };
    if let (Some(read), Consumer::Forward) =
        (measured.io_read_hit_pct.filter(read_differs), spec.consumer)
    {
        p = fit_tx_delay(spec, p, read, &mut sims);
        // A background the controllers bound stays where they put it.
        if let Some(write) = measured
            .io_write_hit_pct
            .filter(|_| background_fit == BackgroundFit::WriteHits)
        {
            p = fit_background(spec, p, write, &mut sims);
            p = fit_tx_delay(spec, p, read, &mut sims);
        }
    }
    let cal = predict(&with(&p));
    sims += 1;
    let res = |c: Option<f64>, m: Option<f64>| c.zip(m).map(|(c, m)| c - m);
    Calibration {
        params: p,
        uncalibrated: uncal,
        calibrated: cal,
        measured: *measured,
        residual_write_pct: res(cal.io_write_hit_pct, measured.io_write_hit_pct),
        residual_read_pct: res(cal.io_read_hit_pct, measured.io_read_hit_pct),
        residual_dram_read_gbps: res(cal.dram_read_gbps(), measured.dram_read_gbps),
        background_fit,
        simulations: sims,
    }
}

/// The memory controllers' `read` GB/s applied to the fit so far; see the module
/// documentation.
fn fit_to_dram(
    spec: &SimSpec,
    measured: &Measured,
    (p, now): (CalibrationParams, &Prediction),
    background_fit: BackgroundFit,
    read: f64,
    sims: &mut u32,
) -> (CalibrationParams, BackgroundFit) {
    let Some(predicted) = now.dram_read_gbps() else {
        return (p, background_fit);
    };
    if background_fit == BackgroundFit::WriteHits {
        if !dram_over(predicted, read) {
            return (p, background_fit);
        }
        let q = fit_background_to_dram(spec, p, read, p.bg_lines_per_sec, sims);
        return (q, BackgroundFit::WriteHitsBoundByDram);
    }
    if measured.io_write_hit_pct.is_some() {
        // The write hit rate measures the DDIO ways directly; the controllers' excess may be
        // any core's traffic that does not reach them.
        return (p, background_fit);
    }
    let p = fit_placement_to_dram(spec, p, now, read, sims);
    if !dram_over(read, predicted) {
        return (p, background_fit);
    }
    let mut q = p;
    q.bg_working_set_bytes = spec.geometry.size_bytes.saturating_mul(4);
    let q = fit_background_to_dram(spec, q, read, MAX_BG_LINES_PER_SEC, sims);
    if q.bg_lines_per_sec > 0.0 {
        (q, BackgroundFit::DramExcess)
    } else {
        (p, background_fit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_the_model_already_agrees_with_moves_no_parameter() {
        let spec =
            SimSpec::parse("queues=2,ring=1024,pkt_bytes=1500,rate_gbps=60,max_packets=200000")
                .unwrap();
        let r = simulate(&spec);
        let (w, rd) = (
            r.total.io_write_hit_pct().unwrap(),
            r.total.io_read_hit_pct().unwrap(),
        );
        // Within the counters' precision of the prediction: nothing to explain.
        let c = calibrate(
            &spec,
            &Measured {
                io_write_hit_pct: Some(w - 0.8 * AGREE_PP),
                io_read_hit_pct: Some(rd + 0.8 * AGREE_PP),
                ..Default::default()
            },
        );
        assert_eq!(c.params, CalibrationParams::of(&spec));
        assert_eq!(c.simulations, 2);
        assert!((c.residual_write_pct.unwrap() - 0.8 * AGREE_PP).abs() < 1e-9);
    }

    #[test]
    fn calibration_recovers_a_host_with_other_load_and_reports_the_residual() {
        // A "host" like the spec but with another tenant filling 1e9 LLC lines/s and a
        // slower TX path; its counters are what the model says for it.
        let mut spec =
            SimSpec::parse("queues=4,ring=1024,pkt_bytes=1024,rate_gbps=60,max_packets=300000")
                .unwrap();
        spec.hash_evenness = 1.0;
        let mut host = spec.clone();
        host.background.lines_per_sec = 1e9;
        host.background.working_set_bytes = host.geometry.size_bytes * 4;
        host.tx_delay_us = 300.0;
        let r = simulate(&host);
        let m = Measured {
            io_write_hit_pct: r.total.io_write_hit_pct(),
            io_read_hit_pct: r.total.io_read_hit_pct(),
            ..Default::default()
        };
        let c = calibrate(&spec, &m);
        println!("{c:?}");
        let (u, k) = (
            c.uncalibrated.io_write_hit_pct.unwrap(),
            c.calibrated.io_write_hit_pct.unwrap(),
        );
        let mw = m.io_write_hit_pct.unwrap();
        assert!(
            (u - mw).abs() > 5.0,
            "the uncalibrated model must be off to begin with: {u} vs {mw}"
        );
        assert!((k - mw).abs() < 1.5, "calibrated {k} vs measured {mw}");
        assert!(
            c.params.bg_lines_per_sec > 1e8 && c.params.bg_lines_per_sec < 5e9,
            "{:?}",
            c.params
        );
        assert!((c.residual_write_pct.unwrap() - (k - mw)).abs() < 1e-9);
        assert!(
            c.residual_read_pct.unwrap().abs() < 3.0,
            "{:?}",
            c.residual_read_pct
        );
        assert!(c.simulations <= (EVENNESS.len() as u32) + 4 * STEPS + 3);
    }

    /// A host like `spec` with another tenant filling 1e9 LLC lines/s over four LLCs.
    fn busy_host(spec: &SimSpec) -> SimSpec {
        let mut host = spec.clone();
        host.background.lines_per_sec = 1e9;
        host.background.working_set_bytes = host.geometry.size_bytes * 4;
        host
    }

    /// `spec` calibrated to the memory controllers' reads alone.
    fn calibrate_to_reads(spec: &SimSpec, read: f64) -> Calibration {
        let c = calibrate(
            spec,
            &Measured {
                dram_read_gbps: Some(read),
                ..Default::default()
            },
        );
        println!("{c:?}");
        c
    }

    fn rx_spec() -> SimSpec {
        let mut spec =
            SimSpec::parse("queues=4,ring=1024,pkt_bytes=1024,rate_gbps=60,max_packets=300000")
                .unwrap();
        spec.hash_evenness = 1.0;
        spec
    }

    #[test]
    fn the_controllers_reads_alone_recover_a_busy_neighbour() {
        // No CHA counters, only the IMC's: what it reads beyond the network's traffic is the
        // neighbour, and fitting it recovers the write hit rate nothing measured.
        let spec = rx_spec();
        let host = predict(&busy_host(&spec));
        let read = host.dram_read_gbps().unwrap();
        let c = calibrate_to_reads(&spec, read);
        assert_eq!(c.background_fit, BackgroundFit::DramExcess);
        let (u, k, h) = (
            c.uncalibrated.io_write_hit_pct.unwrap(),
            c.calibrated.io_write_hit_pct.unwrap(),
            host.io_write_hit_pct.unwrap(),
        );
        assert!((u - h).abs() > 5.0, "uncalibrated {u} vs host {h}");
        assert!((k - h).abs() < 3.0, "calibrated {k} vs host {h}");
        let r = c.residual_dram_read_gbps.unwrap();
        assert!(
            !dram_over(read + r, read) && !dram_over(read, read + r),
            "{r} of {read}"
        );
        assert!(c.simulations <= (EVENNESS.len() as u32) + 4 * STEPS + 3);
    }

    #[test]
    fn the_controllers_bound_a_background_fitted_to_write_hits() {
        // The write hits say the DDIO ways lose lines; the controllers say no other core
        // moves that much through DRAM. The background stays within their reads, and the
        // write hits keep the residual the model cannot explain.
        let spec = rx_spec();
        let host = predict(&busy_host(&spec));
        let quiet = predict(&spec);
        let write = host.io_write_hit_pct;
        let unbound = calibrate(
            &spec,
            &Measured {
                io_write_hit_pct: write,
                ..Default::default()
            },
        );
        assert_eq!(unbound.background_fit, BackgroundFit::WriteHits);
        let read = quiet.dram_read_gbps().unwrap() * 1.5;
        assert!(dram_over(
            unbound.calibrated.dram_read_gbps().unwrap(),
            read
        ));
        let c = calibrate(
            &spec,
            &Measured {
                io_write_hit_pct: write,
                dram_read_gbps: Some(read),
                ..Default::default()
            },
        );
        println!("{c:?}");
        assert_eq!(c.background_fit, BackgroundFit::WriteHitsBoundByDram);
        assert!(c.params.bg_lines_per_sec < unbound.params.bg_lines_per_sec);
        assert!(!dram_over(c.calibrated.dram_read_gbps().unwrap(), read));
        assert!(
            c.residual_write_pct.unwrap() > AGREE_PP,
            "{:?}",
            c.residual_write_pct
        );
    }

    #[test]
    fn fewer_reads_than_the_network_needs_add_no_background() {
        let spec = rx_spec();
        let quiet = predict(&spec);
        let read = quiet.network_dram.unwrap().read_gbps * 0.5;
        let c = calibrate_to_reads(&spec, read);
        assert_eq!(c.background_fit, BackgroundFit::Spec);
        assert_eq!(c.params.bg_lines_per_sec, 0.0);
        assert!(
            c.calibrated.network_dram.unwrap().read_gbps
                <= quiet.network_dram.unwrap().read_gbps + DRAM_AGREE_FLOOR_GBPS
        );
        assert!(c.residual_dram_read_gbps.unwrap() > 0.0);
    }
}
