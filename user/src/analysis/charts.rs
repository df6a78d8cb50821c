//! What the HTML report draws beyond the summary: packet rates and DDIO miss ratios over
//! time (read from the recording, at most `SERIES_POINTS` points a line), and the what-if
//! curves of the recording's one model run. Computed here so the page only draws them;
//! `report` builds them only for `--html`, since the what-if runs the simulator.
use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;

use super::{Outcome, Summary};
use crate::model::geometry::WaysSource;
use crate::model::spec::{GridPoint, SimSpec, Source};
use crate::recording::reader::SERIES_POINTS;
use crate::recording::Recording;
use crate::snapshot::Dir;

/// Ring sizes and DDIO way counts of the what-if curves.
pub const WHATIF_RINGS: [u32; 7] = [64, 128, 256, 512, 1024, 2048, 4096];
pub const WHATIF_WAYS: [u32; 6] = [1, 2, 3, 4, 5, 6];

/// Everything the what-if section shows: the spec built from the recording, where each of
/// its inputs came from, and the two curves.
pub struct WhatIf {
    pub spec: SimSpec,
    /// The recorded configuration, marked on the curves.
    pub ring: u32,
    pub ddio_ways: u32,
    /// (input, value and its source)
    pub inputs: Vec<(String, String)>,
    /// The model's fit to the recording's DDIO counters (None: there were none).
    pub calibration: Option<crate::advise::CalibrationReport>,
    /// The model's view of the socket (its predicted DRAM traffic among it).
    pub model: crate::advise::ModelView,
    pub by_ring: Vec<GridPoint>,
    pub by_ways: Vec<GridPoint>,
    pub elapsed_s: f64,
}

/// One queue's packets per second over time.
pub struct QueueRates {
    pub dir: Dir,
    pub queue: u32,
    /// (seconds since the start, packets/s); None where a group has no duration.
    pub points: Vec<Option<(f64, f64)>>,
}

/// (seconds since start, write miss %, read miss %) per counter interval.
pub type MissPoints = Vec<(f64, Option<f64>, Option<f64>)>;

/// The page's time series and what-if curves.
pub struct Charts {
    /// Recording intervals summed per point (1 while they fit in `SERIES_POINTS`).
    pub intervals_per_point: u64,
    /// Every queue that carried packets, RX first.
    pub rates: Vec<QueueRates>,
    /// Per socket, from the report's counter source; empty without DDIO counters.
    pub misses: BTreeMap<u32, MissPoints>,
    /// Err is why nothing can be modelled (shown as such).
    pub what_if: Result<WhatIf, String>,
}

/// The time series and what-if curves of `summary`'s recording and `outcome`'s model run.
pub fn charts(rec: &Recording, summary: &Summary, outcome: &Outcome) -> Result<Charts> {
    let (intervals_per_point, rates) = rates(rec, summary)?;
    let misses = match summary.counters.absent_why {
        None => miss_series(rec, &summary.counters.source)?,
        Some(_) => BTreeMap::new(),
    };
    Ok(Charts {
        intervals_per_point,
        rates,
        misses,
        what_if: what_if(outcome),
    })
}

/// Seconds since the recording started for a CLOCK_MONOTONIC timestamp.
fn rel_s(t_ns: u64, start_ns: Option<u64>) -> Option<f64> {
    start_ns
        .filter(|s| t_ns >= *s)
        .map(|s| (t_ns - s) as f64 / 1e9)
}

/// Packets per second of each queue the summary lists as carrying traffic, per group of
/// intervals; with the number of intervals a group sums.
pub fn rates(rec: &Recording, r: &Summary) -> Result<(u64, Vec<QueueRates>)> {
    let start_ns = rec.meta.start_ns;
    let groups = rec.interval_groups(None)?;
    // Group ends in seconds: from the BPF clock when the start is known, else summed durations.
    let mut acc = 0.0;
    let xs: Vec<f64> = groups
        .iter()
        .map(|g| {
            acc += g.dur_ns as f64 / 1e9;
            rel_s(g.t_ns, start_ns).unwrap_or(acc)
        })
        .collect();
    let per = groups.first().map_or(1, |g| g.last - g.first + 1);
    if groups.is_empty() {
        return Ok((per, Vec::new()));
    }
    let mut out = Vec::new();
    for dir in [Dir::Rx, Dir::Tx] {
        for q in r.queues.iter().filter(|q| q.dir == dir && q.packets > 0) {
            let points = groups
                .iter()
                .zip(&xs)
                .map(|(g, &x)| {
                    let pk = g.queue(dir, q.queue).map_or(0, |q| q.packets);
                    (g.dur_ns > 0).then(|| (x, pk as f64 / (g.dur_ns as f64 / 1e9)))
                })
                .collect();
            out.push(QueueRates {
                dir,
                queue: q.queue,
                points,
            });
        }
    }
    Ok((per, out))
}

/// Write and read miss % per socket over time from the counter readings of the report's
/// source, at most `SERIES_POINTS` points. Returns (socket, [(t_s, write_miss, read_miss)]).
pub fn miss_series(rec: &Recording, source: &str) -> Result<BTreeMap<u32, MissPoints>> {
    let start_ns = rec.meta.start_ns;
    let mut out: BTreeMap<u32, MissPoints> = BTreeMap::new();
    for p in rec.counter_series(source, SERIES_POINTS)? {
        let Some(t) = rel_s(p.t_ns, start_ns) else {
            continue;
        };
        // Miss % is a ratio and does not depend on the duration; bandwidths would.
        for s in crate::counters::socket_metrics(&p.readings, p.dur_s.max(1e-3)) {
            out.entry(s.socket)
                .or_default()
                .push((t, s.write_miss_pct, s.read_miss_pct));
        }
    }
    Ok(out)
}

/// The what-if curves of the recording's one model computation (the same `ModelRun` the
/// per-queue verdicts and the recommendations came from), with the model's inputs and what
/// was measured of them. Err is the reason nothing can be modelled.
pub fn what_if(outcome: &Outcome) -> Result<WhatIf, String> {
    let a = match outcome {
        Outcome::Advised(a) => a,
        Outcome::NoModel { why, .. } => {
            return Err(format!("the DDIO model is not available: {why}"))
        }
    };
    let spec = a.run.spec().cloned().ok_or_else(|| {
        "no RX traffic in this recording, so there is nothing to model".to_string()
    })?;
    let t0 = Instant::now();
    let (by_ring, by_ways) = a.run.what_if(&WHATIF_RINGS, &WHATIF_WAYS);
    let g = &spec.geometry;
    let mut inputs: Vec<(String, String)> = vec![(
        "LLC".into(),
        format!(
            "{:.2} MiB, {} ways, {} sets{} — from the recording host's sysfs",
            g.size_bytes as f64 / 1048576.0,
            g.ways,
            g.sets,
            g.slices
                .map(|s| format!(", {s} slices"))
                .unwrap_or_default(),
        ),
    )];
    inputs.push((
        "DDIO ways".into(),
        format!(
            "{} — {}",
            g.ddio_ways,
            match g.ddio_ways_source {
                WaysSource::Measured => "read from MSR 0xC8B",
                WaysSource::Override => "set explicitly",
                WaysSource::Assumed =>
                    "assumed (power-on default; the recording does not carry MSR 0xC8B)",
            }
        ),
    ));
    for i in a
        .model_inputs
        .iter()
        .filter(|i| !matches!(i.name.as_str(), "ddio_ways" | "llc"))
    {
        let src = match i.source {
            Source::Measured => "measured",
            Source::Assumed => "assumed",
        };
        inputs.push((i.name.clone(), format!("{} — {src}", i.value)));
    }
    Ok(WhatIf {
        ring: spec.ring,
        ddio_ways: spec.geometry.ddio_ways,
        spec,
        inputs,
        calibration: a.calibration.clone(),
        model: a.model.clone(),
        by_ring,
        by_ways,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}
