//! The one model computation behind a recording's answer: one spec built from the observation (calibrated by the host's counters when it has them), every prediction — per-queue view, recommendations, what-if curves, `simulate FILE` — a point of it, memoized and disk-cached.
//!
//! Because every consumer asks the same [`ModelRun`], the per-queue write hits, the what-if
//! row at the recorded ring and ways, and a recommendation's "before" are one simulation
//! and cannot disagree.

use std::sync::Mutex;

use serde::Serialize;

use super::{loads, spec_from_observation, HostObservation};
use crate::model::analytic::{self, Dir};
use crate::model::cache::{self, simulate_cached};
use crate::model::calibrate::{calibrate, BackgroundFit, Calibration, CalibrationParams, Measured};
use crate::model::geometry::WaysSource;
use crate::model::sim::SimResult;
use crate::model::spec::{Consumer, GridPoint, Input, SimSpec};

/// Packets simulated per calibration step: a calibration runs ~20 simulations, so each is
/// a quarter of a prediction's budget.
const CALIBRATION_BUDGET_DIVISOR: u64 = 4;

/// Simulations run at once by [`ModelRun::prefetch`].
const MAX_SIM_THREADS: usize = 4;

/// How the model was calibrated, for output: the uncalibrated and calibrated predictions of
/// the recorded configuration against what the counters measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationReport {
    /// "live" or "imported": where the measured hit rates come from.
    pub source: String,
    pub params: CalibrationParams,
    pub measured_write_hit_pct: Option<f64>,
    pub measured_read_hit_pct: Option<f64>,
    pub uncalibrated_write_hit_pct: Option<f64>,
    pub calibrated_write_hit_pct: Option<f64>,
    pub uncalibrated_read_hit_pct: Option<f64>,
    pub calibrated_read_hit_pct: Option<f64>,
    /// calibrated − measured, percentage points.
    pub residual_write_pct: Option<f64>,
    pub residual_read_pct: Option<f64>,
    /// DRAM reads the memory controllers counted (every source), and the calibrated model's
    /// share of them: the network's and the fitted background's, GB/s.
    pub measured_dram_read_gbps: Option<f64>,
    pub calibrated_network_dram_read_gbps: Option<f64>,
    pub calibrated_background_dram_read_gbps: f64,
    /// calibrated (network + background) − measured DRAM reads, GB/s.
    pub residual_dram_read_gbps: Option<f64>,
    /// What set the background load.
    pub background_fit: BackgroundFit,
}

/// How far the model's predictions move when the same workload is simulated again with
/// another seed: predictions closer than this are tied, not ranked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Largest change of a queue's predicted write or read hit rate, points.
    pub hit_pp: f64,
    /// Largest change of a queue's share of the predicted misses, points.
    pub share_pp: f64,
}

/// The model's predictions for one recording; see the module documentation.
pub struct ModelRun {
    obs: HostObservation,
    /// The recorded configuration's spec, calibration applied; None without RX traffic.
    base: Option<SimSpec>,
    params: Option<CalibrationParams>,
    pub calibration: Option<CalibrationReport>,
    /// (ring, DDIO ways) → result; keys are the actual values, so "as recorded" and the same
    /// numbers given explicitly are one point.
    memo: Mutex<Vec<((u32, u32), SimResult)>>,
}

impl ModelRun {
    /// Build the spec and, when the observation carries DDIO counters, calibrate it. The
    /// base simulation itself runs on first use.
    pub fn new(obs: &HostObservation) -> ModelRun {
        let mut run = ModelRun {
            obs: obs.clone(),
            base: spec_from_observation(obs, None, None),
            params: None,
            calibration: None,
            memo: Mutex::new(Vec::new()),
        };
        run.calibrate_from_counters();
        run
    }

    fn calibrate_from_counters(&mut self) {
        let (Some(spec), Some(c)) = (self.base.as_ref(), self.obs.counters.as_ref()) else {
            return;
        };
        let consumer = spec.consumer;
        let measured = Measured {
            io_write_hit_pct: c.write_miss_pct.map(|m| 100.0 - m),
            // The read counter is the NIC's reads (PCIeRdCur): forwarded packets only.
            io_read_hit_pct: c
                .read_miss_pct
                .filter(|_| consumer == Consumer::Forward)
                .map(|m| 100.0 - m),
            dram_read_gbps: c.dram_read_mbps.map(|m| m / 1e3),
            dram_write_gbps: c.dram_write_mbps.map(|m| m / 1e3),
        };
        if measured.io_write_hit_pct.is_none()
            && measured.io_read_hit_pct.is_none()
            && measured.dram_read_gbps.is_none()
        {
            return;
        }
        let mut quick = spec.clone();
        quick.max_packets = (quick.max_packets / CALIBRATION_BUDGET_DIVISOR).max(1);
        let key = format!(
            "{}-calibration-{:?}-{:?}-{:?}",
            quick.cache_key(),
            measured.io_write_hit_pct,
            measured.io_read_hit_pct,
            measured.dram_read_gbps
        );
        let fit: Calibration = match cache::get(&key) {
            Some(f) => f,
            None => {
                let f = calibrate(&quick, &measured);
                cache::put(&key, &f);
                f
            }
        };
        let uncal = simulate_cached(spec);
        let mut cal_spec = spec.clone();
        fit.params.apply(&mut cal_spec);
        let cal = simulate_cached(&cal_spec);
        let read = |r: &SimResult| {
            if consumer == Consumer::Forward {
                r.total.io_read_hit_pct()
            } else {
                None
            }
        };
        let res = |p: Option<f64>, m: Option<f64>| p.zip(m).map(|(p, m)| p - m);
        let network_read = cal.dram(&cal.total).map(|d| d.read_gbps);
        let background_read = cal.background_dram_read_gbps(fit.params.bg_lines_per_sec);
        self.calibration = Some(CalibrationReport {
            source: c.source.clone(),
            params: fit.params,
            measured_write_hit_pct: measured.io_write_hit_pct,
            measured_read_hit_pct: measured.io_read_hit_pct,
            uncalibrated_write_hit_pct: uncal.total.io_write_hit_pct(),
            calibrated_write_hit_pct: cal.total.io_write_hit_pct(),
            uncalibrated_read_hit_pct: read(&uncal),
            calibrated_read_hit_pct: read(&cal),
            residual_write_pct: res(cal.total.io_write_hit_pct(), measured.io_write_hit_pct),
            residual_read_pct: res(read(&cal), measured.io_read_hit_pct),
            measured_dram_read_gbps: measured.dram_read_gbps,
            calibrated_network_dram_read_gbps: network_read,
            calibrated_background_dram_read_gbps: background_read,
            residual_dram_read_gbps: res(
                cal.socket_dram_read_gbps(fit.params.bg_lines_per_sec),
                measured.dram_read_gbps,
            ),
            background_fit: fit.background_fit,
        });
        self.params = Some(fit.params);
        self.base = Some(cal_spec);
    }

    /// The recorded configuration's spec (calibrated when the counters allowed).
    pub fn spec(&self) -> Option<&SimSpec> {
        self.base.as_ref()
    }

    /// The workload inputs with what was measured and what assumed.
    pub fn inputs(&self) -> Vec<Input> {
        self.base.as_ref().map(|s| s.inputs()).unwrap_or_default()
    }

    /// The spec of the recorded workload at `ring` descriptors and `ways` DDIO ways (None:
    /// as recorded), with the same calibration.
    pub fn point_spec(&self, ring: Option<u32>, ways: Option<u32>) -> Option<SimSpec> {
        let base = self.base.as_ref()?;
        let mut s = if ring.is_none() && ways.is_none() {
            base.clone()
        } else {
            spec_from_observation(&self.obs, ring, ways)?
        };
        if let Some(p) = &self.params {
            p.apply(&mut s);
        }
        if ways.is_some() && s.geometry.ddio_ways != base.geometry.ddio_ways {
            s.geometry.ddio_ways_source = WaysSource::Override;
        }
        Some(s)
    }

    fn key(s: &SimSpec) -> (u32, u32) {
        (s.ring, s.geometry.ddio_ways)
    }

    /// The simulation at (`ring`, `ways`); None without RX traffic.
    pub fn result(&self, ring: Option<u32>, ways: Option<u32>) -> Option<SimResult> {
        let s = self.point_spec(ring, ways)?;
        let k = Self::key(&s);
        if let Some((_, r)) = self.memo.lock().ok()?.iter().find(|(kk, _)| *kk == k) {
            return Some(r.clone());
        }
        let r = simulate_cached(&s);
        if let Ok(mut m) = self.memo.lock() {
            if !m.iter().any(|(kk, _)| *kk == k) {
                m.push((k, r.clone()));
            }
        }
        Some(r)
    }

    /// Simulate the points not yet known on as many threads as the host offers, so a grid
    /// costs its slowest point per core rather than the sum.
    pub fn prefetch(&self, points: &[(Option<u32>, Option<u32>)]) {
        let todo: Vec<SimSpec> = {
            let Ok(m) = self.memo.lock() else { return };
            let mut v: Vec<SimSpec> = Vec::new();
            for (r, w) in points {
                if let Some(s) = self.point_spec(*r, *w) {
                    let k = Self::key(&s);
                    if !m.iter().any(|(kk, _)| *kk == k) && !v.iter().any(|x| Self::key(x) == k) {
                        v.push(s);
                    }
                }
            }
            v
        };
        if todo.is_empty() {
            return;
        }
        // Each simulation holds up to 64 MiB of LLC state: a few threads, however many CPUs.
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_SIM_THREADS)
            .min(todo.len());
        let results: Vec<((u32, u32), SimResult)> = std::thread::scope(|sc| {
            let chunks: Vec<Vec<&SimSpec>> = (0..threads)
                .map(|t| todo.iter().skip(t).step_by(threads).collect())
                .collect();
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|c| {
                    sc.spawn(move || {
                        c.into_iter()
                            .map(|s| (Self::key(s), simulate_cached(s)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| h.join().ok())
                .flatten()
                .collect()
        });
        if let Ok(mut m) = self.memo.lock() {
            for (k, r) in results {
                if !m.iter().any(|(kk, _)| *kk == k) {
                    m.push((k, r));
                }
            }
        }
    }

    /// The model's run-to-run spread over the RX queues that carried enough traffic for a
    /// verdict: the recorded configuration against the same with the next seed.
    pub fn spread(&self) -> Option<Spread> {
        let a = self.result(None, None)?;
        let b = self.variant(|s| s.seed = s.seed.wrapping_add(1))?;
        let ids = self.rx_queue_ids();
        let busy = |i: usize| {
            ids.get(i).is_some_and(|q| {
                self.obs.queues.iter().any(|o| {
                    o.dir == Dir::Rx
                        && o.queue == *q
                        && o.packets
                            .is_none_or(|p| p >= super::MIN_PACKETS_FOR_VERDICT)
                })
            })
        };
        let misses = |h: &crate::model::sim::HitStats| {
            (h.io_write_misses + h.io_read_misses + h.cpu_read_misses) as f64
        };
        let total = |r: &SimResult| r.per_queue.iter().map(misses).sum::<f64>();
        let (ta, tb) = (total(&a), total(&b));
        let mut sp = Spread {
            hit_pp: 0.0,
            share_pp: 0.0,
        };
        for (i, (x, y)) in a.per_queue.iter().zip(&b.per_queue).enumerate() {
            if !busy(i) {
                continue;
            }
            for (p, q) in [
                (x.io_write_hit_pct(), y.io_write_hit_pct()),
                (x.cpu_read_hit_pct(), y.cpu_read_hit_pct()),
                (x.io_read_hit_pct(), y.io_read_hit_pct()),
            ] {
                if let (Some(p), Some(q)) = (p, q) {
                    sp.hit_pp = sp.hit_pp.max((p - q).abs());
                }
            }
            if ta > 0.0 && tb > 0.0 {
                sp.share_pp = sp
                    .share_pp
                    .max((100.0 * misses(x) / ta - 100.0 * misses(y) / tb).abs());
            }
        }
        Some(sp)
    }

    /// The read-side hit rate that matters for this consumer: the copy's CPU reads, or the
    /// NIC's TX reads of forwarded packets.
    pub fn read_hit_pct(&self, r: &SimResult) -> Option<f64> {
        match self.base.as_ref().map(|s| s.consumer) {
            Some(Consumer::Forward) => r.total.io_read_hit_pct(),
            _ => r.total.cpu_read_hit_pct(),
        }
    }

    /// The socket's DRAM reads `r` accounts for, GB/s: the network's, and the background's at
    /// the calibrated fill rate (the rest of the socket as the memory controllers measured it
    /// when the calibration used them).
    pub fn dram_read_gbps(&self, r: &SimResult) -> Option<f64> {
        let lines = self
            .params
            .map(|p| p.bg_lines_per_sec)
            .or_else(|| self.base.as_ref().map(|s| s.background.lines_per_sec))
            .unwrap_or(0.0);
        r.socket_dram_read_gbps(lines)
    }

    /// A variant of the recorded workload (another buffer reuse, another spread), with the
    /// same calibration, simulated through the cache.
    pub fn variant(&self, change: impl FnOnce(&mut SimSpec)) -> Option<SimResult> {
        let mut s = self.base.clone()?;
        change(&mut s);
        Some(simulate_cached(&s))
    }

    /// The recorded workload as another observation gives it (the same host, its load
    /// spread differently), with this run's calibration.
    pub fn for_observation(&self, obs: &HostObservation) -> Option<SimResult> {
        let mut s = spec_from_observation(obs, None, None)?;
        if let Some(p) = &self.params {
            p.apply(&mut s);
        }
        Some(simulate_cached(&s))
    }

    /// What-if curves: hit rates against ring size at the recorded ways, and against DDIO
    /// ways at the recorded ring; footprints are the socket's RX rings as the per-queue view
    /// computes them (each queue's own packet size).
    pub fn what_if(&self, rings: &[u32], ways: &[u32]) -> (Vec<GridPoint>, Vec<GridPoint>) {
        let Some(base) = self.base.as_ref() else {
            return (Vec::new(), Vec::new());
        };
        let (ring0, ways0) = (base.ring, base.geometry.ddio_ways);
        let mut rings: Vec<u32> = rings.to_vec();
        if !rings.contains(&ring0) {
            rings.push(ring0);
            rings.sort_unstable();
        }
        let mut ways: Vec<u32> = ways
            .iter()
            .copied()
            .filter(|w| *w <= base.geometry.ways)
            .collect();
        if !ways.contains(&ways0) {
            ways.push(ways0);
            ways.sort_unstable();
        }
        let ring_pts: Vec<_> = rings.iter().map(|r| (Some(*r), None)).collect();
        let way_pts: Vec<_> = ways.iter().map(|w| (None, Some(*w))).collect();
        self.prefetch(&[ring_pts.clone(), way_pts.clone()].concat());
        let point = |(r, w): (Option<u32>, Option<u32>)| self.grid_point(r, w);
        (
            ring_pts.into_iter().filter_map(point).collect(),
            way_pts.into_iter().filter_map(point).collect(),
        )
    }

    /// Every (ring, ways) combination, an empty axis keeping the recorded value; the same
    /// points [`ModelRun::what_if`] and the recommendations use.
    pub fn grid(&self, rings: &[u32], ways: &[u32]) -> Vec<GridPoint> {
        let opt = |v: &[u32]| {
            if v.is_empty() {
                vec![None]
            } else {
                v.iter().map(|x| Some(*x)).collect()
            }
        };
        let pts: Vec<(Option<u32>, Option<u32>)> = opt(rings)
            .into_iter()
            .flat_map(|r| opt(ways).into_iter().map(move |w| (r, w)))
            .collect();
        self.prefetch(&pts);
        pts.into_iter()
            .filter_map(|(r, w)| self.grid_point(r, w))
            .collect()
    }

    fn grid_point(&self, ring: Option<u32>, ways: Option<u32>) -> Option<GridPoint> {
        let s = self.point_spec(ring, ways)?;
        let r = self.result(ring, ways)?;
        let sock = analytic::analyse_socket(&s.geometry, &loads(&self.obs, Some(s.ring)));
        Some(GridPoint {
            ring: s.ring,
            ddio_ways: s.geometry.ddio_ways,
            ddio_mask: s.geometry.ddio_mask(),
            queues: s.queues,
            pkt_bytes: s.pkt_bytes,
            footprint_bytes: sock.rx_footprint_bytes,
            ddio_capacity_bytes: s.geometry.ddio_capacity_bytes(),
            verdict: sock.rx_verdict,
            io_write_hit_pct: r.total.io_write_hit_pct(),
            io_read_hit_pct: r.total.io_read_hit_pct(),
            cpu_read_hit_pct: r.total.cpu_read_hit_pct(),
            dram_read_gbps: r.dram(&r.total).map(|d| d.read_gbps),
            dram_write_gbps: r.dram(&r.total).map(|d| d.write_gbps),
            drops: r.drops,
            error: None,
        })
    }

    /// The RX queues the spec models, in the order of its per-queue results.
    pub fn rx_queue_ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .obs
            .queues
            .iter()
            .filter(|q| q.dir == Dir::Rx)
            .map(|q| q.queue)
            .collect();
        v.sort_unstable();
        v
    }
}

impl std::fmt::Debug for ModelRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRun")
            .field("spec", &self.base.as_ref().map(|s| s.cache_key()))
            .field("calibration", &self.calibration)
            .finish()
    }
}
