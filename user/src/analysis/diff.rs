//! `ddioscope diff BEFORE AFTER`: what changed between two recordings of one device. The
//! configuration (channels, rings, DDIO ways, IRQ affinity, kernel, driver) and the traffic
//! (rate, packet size, flows) are named; every measured quantity (per queue, per direction,
//! per flow, per socket's counters) is compared with an uncertainty from the spread of its
//! per-step values, so noise is not called an effect; and each prediction BEFORE's model
//! made (its recommendations, recomputed by this build, and its prediction for AFTER's
//! configuration and traffic) is set beside what AFTER shows.
//!
//! Uncertainty: a rate is measured once per step (`--every`, 1 s by default: steps that
//! long average out the recorder's interval-to-interval jitter, so consecutive steps are
//! close to independent), and a delta's 95 % interval is Welch's t-interval on the two sets
//! of step values. A delta is an effect when that interval excludes zero. Whole-run tables
//! (drop reasons, flows) have no steps: drops use the Poisson bound of their counts, flows
//! the recorder's sampling bound (none when counted exactly).
use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::Serialize;

use super::filter::{Filter, FlowView};
use super::{observation, GeometryOverrides, Outcome, Summary};
use crate::counters::socket_metrics;
use crate::recording::Recording;
use crate::snapshot::{hist_percentile, Dir};

/// Running mean and variance (Welford): one pass, constant memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stat {
    pub n: u64,
    mean: f64,
    m2: f64,
}

impl Stat {
    pub fn push(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then_some(self.mean)
    }
    /// Sample variance (n - 1).
    pub fn var(&self) -> Option<f64> {
        (self.n > 1).then(|| self.m2 / (self.n - 1) as f64)
    }
}

/// Two-sided 95 % quantile of Student's t with `df` degrees of freedom (the standard
/// table for 1..=30, then 40, 60, 120, ∞; between rows the smaller df's, which is wider).
pub fn t975(df: f64) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    if !df.is_finite() || df >= 120.0 {
        return if df.is_finite() { 1.980 } else { 1.960 };
    }
    let d = df.floor().max(1.0) as usize;
    match d {
        1..=30 => T[d - 1],
        31..=39 => T[29],
        40..=59 => 2.021,
        _ => 2.000,
    }
}

/// Welch's 95 % half-width for the difference of two means (None: fewer than two steps
/// on a side).
pub fn welch_half_width(a: &Stat, b: &Stat) -> Option<f64> {
    let (va, vb) = (a.var()?, b.var()?);
    let (na, nb) = (a.n as f64, b.n as f64);
    let (sa, sb) = (va / na, vb / nb);
    let se2 = sa + sb;
    if se2 <= 0.0 {
        return Some(0.0);
    }
    let df = se2 * se2 / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    Some(t975(df) * se2.sqrt())
}

/// One measured quantity before and after.
#[derive(Debug, Clone, Serialize)]
pub struct Delta {
    pub metric: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub delta: Option<f64>,
    /// `delta` as a share of `before`, %.
    pub delta_pct: Option<f64>,
    /// Half-width of the delta's 95 % interval (None: no way to tell noise from effect).
    pub ci95: Option<f64>,
    /// The interval excludes zero.
    pub effect: bool,
    /// Where the uncertainty comes from: `steps` (Welch over per-step values), `poisson`
    /// (a count), `sampling` (the recorder's flow sampling bound), `exact` (counted, no
    /// noise estimate), `none`.
    pub basis: &'static str,
    /// Steps behind each side (for `steps`).
    pub steps_before: u64,
    pub steps_after: u64,
}

impl Delta {
    fn new(
        metric: &str,
        before: Option<f64>,
        after: Option<f64>,
        ci95: Option<f64>,
        basis: &'static str,
    ) -> Delta {
        let delta = match (before, after) {
            (Some(b), Some(a)) => Some(a - b),
            _ => None,
        };
        Delta {
            metric: metric.to_string(),
            before,
            after,
            delta,
            delta_pct: match (delta, before) {
                (Some(d), Some(b)) if b != 0.0 => Some(100.0 * d / b),
                _ => None,
            },
            effect: match (delta, ci95) {
                (Some(d), Some(c)) => d.abs() > c,
                _ => false,
            },
            ci95,
            basis,
            steps_before: 0,
            steps_after: 0,
        }
    }

    /// From per-step statistics: the pooled values as given, the interval from the steps.
    fn steps(metric: &str, before: Option<f64>, after: Option<f64>, sb: &Stat, sa: &Stat) -> Delta {
        let ci = welch_half_width(sb, sa);
        let mut d = Delta::new(
            metric,
            before,
            after,
            ci,
            if ci.is_some() { "steps" } else { "none" },
        );
        d.steps_before = sb.n;
        d.steps_after = sa.n;
        d
    }
}

/// One setting of the recording's configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub what: String,
    pub before: String,
    pub after: String,
    pub changed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueDiff {
    pub dir: Dir,
    pub queue: u32,
    pub deltas: Vec<Delta>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FlowDiff {
    /// proto src -> dst:dport (the client's port is left out: it changes between runs).
    pub flow: String,
    pub dir: Dir,
    pub deltas: Vec<Delta>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SocketDiff {
    pub socket: u32,
    pub deltas: Vec<Delta>,
}

/// A prediction BEFORE's model made, beside what AFTER shows.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// `recommendation` (one of BEFORE's, recomputed by this build) or `after_inputs`
    /// (BEFORE's calibrated model given AFTER's configuration and measured traffic).
    pub kind: &'static str,
    pub what: String,
    pub command: Option<String>,
    /// Whether AFTER applied it, in words (`yes`, `no`, or why it cannot be told).
    pub applied: String,
    pub metric: String,
    pub predicted_before: Option<f64>,
    pub predicted_after: Option<f64>,
    /// AFTER's value of the metric and where it comes from.
    pub after: Option<f64>,
    pub after_source: String,
    /// after - predicted_after, in the metric's unit (points for the hit rates).
    pub error: Option<f64>,
    /// Within the measurement's interval when measured; within `MODEL_AGREEMENT_PP`
    /// when both sides are the model's; a DRAM read prediction within the calibration's
    /// agreement (10 % + 200 MB/s) or the measurement's interval, the wider.
    pub came_true: Option<bool>,
    pub note: String,
}

/// Two model values agree when within this many points: the simulator's results are
/// rounded to 0.1 and its sampled sets vary by a few tenths between equivalent inputs.
pub const MODEL_AGREEMENT_PP: f64 = 1.0;

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub file: String,
    pub iface: String,
    pub duration_s: f64,
    pub steps: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub before: Side,
    pub after: Side,
    pub step_s: f64,
    pub config: Vec<Change>,
    pub traffic: Vec<Delta>,
    /// Per direction (all of its queues together).
    pub directions: Vec<QueueDiff>,
    pub queues: Vec<QueueDiff>,
    pub flows: Vec<FlowDiff>,
    pub flows_only_before: Vec<String>,
    pub flows_only_after: Vec<String>,
    pub drops: Vec<Delta>,
    pub sockets: Vec<SocketDiff>,
    /// Why there are no counter deltas (absent when there are).
    pub counters_absent: Option<String>,
    pub predictions: Vec<Prediction>,
    /// What the filter left out, and what it does not apply to.
    pub filter: Option<String>,
    pub notes: Vec<String>,
}

/// Per-step statistics of one recording.
#[derive(Default)]
struct Steps {
    n: u64,
    /// (dir, queue) → metric → stat.
    queues: BTreeMap<(Dir, u32), BTreeMap<&'static str, Stat>>,
    dirs: BTreeMap<Dir, BTreeMap<&'static str, Stat>>,
    sockets: BTreeMap<u32, BTreeMap<&'static str, Stat>>,
}

const Q_METRICS: [&str; 6] = [
    "packets_per_s",
    "mbit_per_s",
    "drops_per_s",
    "avg_pkt_bytes",
    "life_p50_ns",
    "life_p99_ns",
];

fn steps_of(rec: &Recording, filter: &Filter, every_ns: u64) -> Result<Steps> {
    let mut s = Steps::default();
    let source = match rec.meta.counters_source {
        Some(
            c @ (crate::counters::CounterSource::Live | crate::counters::CounterSource::Software),
        ) => Some(c.as_str()),
        _ => None,
    };
    // Every queue seen anywhere gets a value in every step (an idle step is a rate of 0).
    let mut seen: Vec<(Dir, u32)> = Vec::new();
    rec.for_each_step(Some(every_ns), source, |step| {
        let dur = step.dur_ns as f64 / 1e9;
        if dur <= 0.0 {
            return Ok(());
        }
        s.n += 1;
        let mut dir_sum: BTreeMap<Dir, (u64, u64, u64)> = BTreeMap::new();
        for q in step.queues.iter().filter(|q| filter.queue(q.dir, q.queue)) {
            if !seen.contains(&(q.dir, q.queue)) {
                seen.push((q.dir, q.queue));
            }
            let m = s.queues.entry((q.dir, q.queue)).or_default();
            m.entry("packets_per_s")
                .or_default()
                .push(q.packets as f64 / dur);
            m.entry("mbit_per_s")
                .or_default()
                .push(q.bytes as f64 * 8.0 / dur / 1e6);
            m.entry("drops_per_s")
                .or_default()
                .push(q.drops as f64 / dur);
            if q.packets > 0 {
                m.entry("avg_pkt_bytes")
                    .or_default()
                    .push(q.bytes as f64 / q.packets as f64);
            }
            if let Some(p) = hist_percentile(&q.life_hist, 50.0, q.life_max_ns) {
                m.entry("life_p50_ns").or_default().push(p as f64);
            }
            if let Some(p) = hist_percentile(&q.life_hist, 99.0, q.life_max_ns) {
                m.entry("life_p99_ns").or_default().push(p as f64);
            }
            let d = dir_sum.entry(q.dir).or_default();
            d.0 += q.packets;
            d.1 += q.bytes;
            d.2 += q.drops;
        }
        // Queues seen earlier and silent now: a zero rate, not a missing step.
        for k in &seen {
            if !step.queues.iter().any(|q| (q.dir, q.queue) == *k) {
                let m = s.queues.entry(*k).or_default();
                for name in ["packets_per_s", "mbit_per_s", "drops_per_s"] {
                    m.entry(name).or_default().push(0.0);
                }
            }
        }
        for d in [Dir::Rx, Dir::Tx] {
            if filter.dir.is_some_and(|f| f != d) {
                continue;
            }
            let (p, b, dr) = dir_sum.get(&d).copied().unwrap_or_default();
            let m = s.dirs.entry(d).or_default();
            m.entry("packets_per_s").or_default().push(p as f64 / dur);
            m.entry("mbit_per_s")
                .or_default()
                .push(b as f64 * 8.0 / dur / 1e6);
            m.entry("drops_per_s").or_default().push(dr as f64 / dur);
            if p > 0 {
                m.entry("avg_pkt_bytes")
                    .or_default()
                    .push(b as f64 / p as f64);
            }
        }
        if !step.counters.is_empty() {
            for sm in socket_metrics(&step.counters, dur) {
                let m = s.sockets.entry(sm.socket).or_default();
                for (name, v) in socket_values(&sm) {
                    if let Some(v) = v {
                        m.entry(name).or_default().push(v);
                    }
                }
            }
        }
        Ok(())
    })?;
    Ok(s)
}

/// The counter metrics a diff compares: hit rates (100 - miss) and bandwidths.
fn socket_values(m: &crate::counters::SocketMetrics) -> [(&'static str, Option<f64>); 6] {
    [
        ("io_write_hit_pct", m.write_miss_pct.map(|v| 100.0 - v)),
        ("io_read_hit_pct", m.read_miss_pct.map(|v| 100.0 - v)),
        ("inbound_write_mbyte_per_s", m.inbound_write_mbps),
        ("inbound_read_mbyte_per_s", m.inbound_read_mbps),
        ("dram_read_mbyte_per_s", m.dram_read_mbps),
        ("dram_write_mbyte_per_s", m.dram_write_mbps),
    ]
}

fn side(rec: &Recording, steps: u64) -> Side {
    Side {
        file: rec.path.display().to_string(),
        iface: rec.iface().name,
        duration_s: rec.duration_s(),
        steps,
    }
}

fn opt_s<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "unknown".into())
}

fn config(
    b: &Recording,
    a: &Recording,
    gb: Option<(u32, String)>,
    ga: Option<(u32, String)>,
) -> Vec<Change> {
    let (ib, ia) = (b.iface(), a.iface());
    let (hb, ha) = (b.host(), a.host());
    let irqs = |i: &crate::topology::IfaceInfo| -> String {
        if i.irqs.is_empty() {
            return "none recorded".into();
        }
        i.irqs
            .iter()
            .map(|(n, q)| {
                format!(
                    "{n}({}):{}",
                    q.name,
                    q.cpus
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let ways = |g: &Option<(u32, String)>| match g {
        Some((w, src)) => format!("{w} ({src})"),
        None => "unknown".into(),
    };
    let llc = |h: &crate::topology::HostInfo| {
        h.llc
            .as_ref()
            .map(|l| format!("{} MiB, {} ways", l.size_bytes / 1048576, l.ways))
            .unwrap_or_else(|| "unknown".into())
    };
    let rows = [
        (
            "rx channels",
            ib.rx_queues.to_string(),
            ia.rx_queues.to_string(),
        ),
        (
            "tx channels",
            ib.tx_queues.to_string(),
            ia.tx_queues.to_string(),
        ),
        ("rx ring", opt_s(ib.rx_ring), opt_s(ia.rx_ring)),
        ("tx ring", opt_s(ib.tx_ring), opt_s(ia.tx_ring)),
        ("DDIO ways", ways(&gb), ways(&ga)),
        ("IRQ affinity", irqs(&ib), irqs(&ia)),
        ("NUMA node", opt_s(ib.numa_node), opt_s(ia.numa_node)),
        ("driver", opt_s(ib.driver.clone()), opt_s(ia.driver.clone())),
        ("kernel", hb.kernel.clone(), ha.kernel.clone()),
        ("host", hb.hostname.clone(), ha.hostname.clone()),
        ("CPU", hb.cpu_model.clone(), ha.cpu_model.clone()),
        ("LLC", llc(&hb), llc(&ha)),
        (
            "MTU",
            "not recorded".to_string(),
            "not recorded".to_string(),
        ),
    ];
    rows.into_iter()
        .map(|(w, x, y)| Change {
            what: w.into(),
            changed: x != y,
            before: x,
            after: y,
        })
        .collect()
}

/// Flows keyed without the client's port (an ephemeral port differs between runs): the
/// received side's source port, or the sent side's destination port, is dropped.
fn flow_service(proto: &str, src: &str, sport: u16, dst: &str, dport: u16) -> String {
    // The server's port is the lower of the two (well-known or registered, below the
    // ephemeral range); the direction does not change which end that is.
    let (port, client_is_src) = if sport < dport {
        (sport, false)
    } else {
        (dport, true)
    };
    if client_is_src {
        format!("{proto} {src} -> {dst}:{port}")
    } else {
        format!("{proto} {src}:{port} -> {dst}")
    }
}

fn qrep<'a>(s: &'a Summary, k: &(Dir, u32)) -> Option<&'a crate::analysis::summary::QueueReport> {
    s.queues.iter().find(|q| (q.dir, q.queue) == *k)
}

fn pooled_life(s: &Summary, dir: Dir, queue: u32, p50: bool) -> Option<f64> {
    let stage = dir.stage_names()[dir.lifetime_stage()];
    s.queues
        .iter()
        .find(|q| q.dir == dir && q.queue == queue)
        .and_then(|q| q.stage(stage))
        .and_then(|st| if p50 { st.p50_ns } else { st.p99_ns })
        .map(|v| v as f64)
}

/// The two recordings' outcomes and observations, for the predictions.
pub struct Models<'a> {
    pub before: &'a Outcome,
    pub after: &'a Outcome,
}

/// Build the diff. `every_ns`: the step the uncertainties rest on.
#[allow(clippy::too_many_arguments)]
pub fn diff(
    b: &Recording,
    a: &Recording,
    sb: &Summary,
    sa: &Summary,
    filter: &Filter,
    every_ns: u64,
    geometry: GeometryOverrides,
) -> Result<Diff> {
    check_same_device(b, a)?;
    let stb = steps_of(b, filter, every_ns)?;
    let sta = steps_of(a, filter, every_ns)?;
    check_comparable(b, a, &stb, &sta, filter)?;
    let geom = |r: &Recording| {
        super::geometry(r, geometry).ok().map(|g| {
            (
                g.ddio_ways,
                serde_json::to_value(g.ddio_ways_source)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            )
        })
    };
    let config = config(b, a, geom(b), geom(a));
    let queues = queue_diffs(&stb, &sta, sb, sa);
    let directions = direction_diffs(&stb, &sta, sb, sa);
    let mut traffic = traffic_deltas(&directions, sb, sa, filter);
    let (flows, flows_only_before, flows_only_after) = flow_diffs(sb, sa, filter, &mut traffic);
    let drops = drop_diffs(sb, sa);
    let (sockets, counters_absent) = socket_diffs(&stb, &sta, sb, sa);
    Ok(Diff {
        before: side(b, stb.n),
        after: side(a, sta.n),
        step_s: every_ns as f64 / 1e9,
        config,
        traffic,
        directions,
        queues,
        flows,
        flows_only_before,
        flows_only_after,
        drops,
        sockets,
        counters_absent,
        predictions: Vec::new(),
        filter: (!filter.is_empty()).then(|| filter.describe()),
        notes: diff_notes(filter, every_ns),
    })
}

/// Refuse two recordings of different devices: their queues are not the same queues.
fn check_same_device(b: &Recording, a: &Recording) -> Result<()> {
    let (ib, ia) = (b.iface(), a.iface());
    if ib.name != ia.name || ib.driver != ia.driver {
        bail!(
            "{} records {} ({}) and {} records {} ({}): diff compares two recordings of one device",
            b.path.display(),
            ib.name,
            ib.driver.as_deref().unwrap_or("unknown driver"),
            a.path.display(),
            ia.name,
            ia.driver.as_deref().unwrap_or("unknown driver")
        );
    }
    Ok(())
}

/// Refuse a side with no packets, or two sides with nothing in common: every delta would
/// be empty, and saying why is more use than an empty table.
fn check_comparable(
    b: &Recording,
    a: &Recording,
    stb: &Steps,
    sta: &Steps,
    filter: &Filter,
) -> Result<()> {
    let any = |s: &Steps| {
        s.queues.values().any(|m| {
            m.get("packets_per_s")
                .is_some_and(|x| x.mean().unwrap_or(0.0) > 0.0)
        })
    };
    if !any(stb) || !any(sta) {
        let which = if !any(stb) { b } else { a };
        bail!(
            "{} holds no packets{}: nothing to compare",
            which.path.display(),
            if filter.is_empty() {
                String::new()
            } else {
                format!(" that {} selects", filter.describe())
            }
        );
    }
    let shared = stb.queues.keys().any(|k| sta.queues.contains_key(k));
    if !shared && stb.dirs.keys().all(|d| !sta.dirs.contains_key(d)) {
        bail!(
            "{} and {} measured no queue or direction in common: nothing to compare",
            b.path.display(),
            a.path.display()
        );
    }
    Ok(())
}

/// Per queue: pooled rates from the summaries (whole-window totals), intervals from steps.
fn queue_diffs(stb: &Steps, sta: &Steps, sb: &Summary, sa: &Summary) -> Vec<QueueDiff> {
    let stat = |s: &Steps, k: &(Dir, u32), m: &str| {
        s.queues
            .get(k)
            .and_then(|x| x.get(m))
            .copied()
            .unwrap_or_default()
    };
    let mut all_keys: Vec<(Dir, u32)> = stb
        .queues
        .keys()
        .chain(sta.queues.keys())
        .copied()
        .collect();
    all_keys.sort();
    all_keys.dedup();
    let mut queues = Vec::new();
    for k in &all_keys {
        let (qb, qa) = (qrep(sb, k), qrep(sa, k));
        let mut deltas = Vec::new();
        for m in Q_METRICS {
            let pooled =
                |q: Option<&crate::analysis::summary::QueueReport>, s: &Summary| -> Option<f64> {
                    let q = q?;
                    let dur = s.meta.duration_s;
                    match m {
                        "packets_per_s" => Some(q.packets_per_s),
                        "mbit_per_s" => Some(q.mbit_per_s),
                        "drops_per_s" => (dur > 0.0).then(|| q.drops as f64 / dur),
                        "avg_pkt_bytes" => q.avg_pkt_bytes,
                        "life_p50_ns" => pooled_life(s, k.0, k.1, true),
                        _ => pooled_life(s, k.0, k.1, false),
                    }
                };
            let d = Delta::steps(
                m,
                pooled(qb, sb),
                pooled(qa, sa),
                &stat(stb, k, m),
                &stat(sta, k, m),
            );
            if d.before.is_some() || d.after.is_some() {
                deltas.push(d);
            }
        }
        queues.push(QueueDiff {
            dir: k.0,
            queue: k.1,
            deltas,
        });
    }
    queues
}

/// Per direction, all its queues together: pooled from the summaries' totals.
fn direction_diffs(stb: &Steps, sta: &Steps, sb: &Summary, sa: &Summary) -> Vec<QueueDiff> {
    let dstat = |s: &Steps, d: Dir, m: &str| {
        s.dirs
            .get(&d)
            .and_then(|x| x.get(m))
            .copied()
            .unwrap_or_default()
    };
    let mut directions = Vec::new();
    for d in [Dir::Rx, Dir::Tx] {
        if !stb.dirs.contains_key(&d) && !sta.dirs.contains_key(&d) {
            continue;
        }
        let tot = |s: &Summary| {
            let qs: Vec<_> = s.queues.iter().filter(|q| q.dir == d).collect();
            let p: u64 = qs.iter().map(|q| q.packets).sum();
            let by: u64 = qs.iter().map(|q| q.bytes).sum();
            let dr: u64 = qs.iter().map(|q| q.drops).sum();
            (p, by, dr, s.meta.duration_s)
        };
        let (tb, ta) = (tot(sb), tot(sa));
        let val = |t: (u64, u64, u64, f64), m: &str| -> Option<f64> {
            let dur = t.3;
            if dur <= 0.0 {
                return None;
            }
            match m {
                "packets_per_s" => Some(t.0 as f64 / dur),
                "mbit_per_s" => Some(t.1 as f64 * 8.0 / dur / 1e6),
                "drops_per_s" => Some(t.2 as f64 / dur),
                _ => (t.0 > 0).then(|| t.1 as f64 / t.0 as f64),
            }
        };
        let deltas = [
            "packets_per_s",
            "mbit_per_s",
            "drops_per_s",
            "avg_pkt_bytes",
        ]
        .iter()
        .map(|m| {
            Delta::steps(
                m,
                val(tb, m),
                val(ta, m),
                &dstat(stb, d, m),
                &dstat(sta, d, m),
            )
        })
        .collect();
        directions.push(QueueDiff {
            dir: d,
            queue: u32::MAX,
            deltas,
        });
    }
    directions
}

/// Traffic in one list: RX rate and size, active queues (the flows' count is added by
/// [`flow_diffs`], which groups them).
fn traffic_deltas(
    directions: &[QueueDiff],
    sb: &Summary,
    sa: &Summary,
    filter: &Filter,
) -> Vec<Delta> {
    let mut traffic: Vec<Delta> = Vec::new();
    for qd in directions {
        for d in &qd.deltas {
            if d.metric != "drops_per_s" {
                let mut x = d.clone();
                x.metric = format!("{} {}", qd.dir, d.metric);
                traffic.push(x);
            }
        }
    }
    let active = |s: &Summary, d: Dir| {
        s.queues
            .iter()
            .filter(|q| q.dir == d && q.packets > 0)
            .count() as f64
    };
    for d in [Dir::Rx, Dir::Tx] {
        if filter.dir.is_none_or(|f| f == d) {
            traffic.push(Delta::new(
                &format!("{d} active queues"),
                Some(active(sb, d)),
                Some(active(sa, d)),
                Some(0.0),
                "exact",
            ));
        }
    }
    traffic
}

/// A summary's flows grouped by (direction, service): bytes, summed squared sampling
/// error, whether any was sampled.
type FlowGroups = BTreeMap<(Dir, String), (u64, f64, bool)>;

/// Flows by service (proto, addresses, server port), filtered as the report filters, so a
/// client's new ephemeral port does not make every flow new.
fn flow_groups(s: &Summary, filter: &Filter) -> FlowGroups {
    let mut out = FlowGroups::new();
    for f in &s.flows {
        let v = FlowView {
            proto: &f.proto,
            src: &f.src,
            sport: f.sport,
            dst: &f.dst,
            dport: f.dport,
        };
        if !filter.flow(f.dir, f.rx_queue.or(f.tx_queue), &v) {
            continue;
        }
        let e = out
            .entry((
                f.dir,
                flow_service(&f.proto, &f.src, f.sport, &f.dst, f.dport),
            ))
            .or_default();
        e.0 += f.bytes;
        if let Some(x) = f.bytes_error {
            e.1 += (x as f64).powi(2);
            e.2 = true;
        }
    }
    out
}

/// The flows seen on both sides, largest first, and those seen on one side only; pushes
/// the flows' count onto `traffic`.
fn flow_diffs(
    sb: &Summary,
    sa: &Summary,
    filter: &Filter,
    traffic: &mut Vec<Delta>,
) -> (Vec<FlowDiff>, Vec<String>, Vec<String>) {
    let (fb, fa) = (flow_groups(sb, filter), flow_groups(sa, filter));
    traffic.push(Delta::new(
        "flows",
        Some(fb.len() as f64),
        Some(fa.len() as f64),
        Some(0.0),
        "exact",
    ));
    let (db, da) = (sb.meta.duration_s.max(1e-9), sa.meta.duration_s.max(1e-9));
    let mut flows = Vec::new();
    for (k, (bb, eb, sampled_b)) in &fb {
        if let Some((ba, ea, sampled_a)) = fa.get(k) {
            let rate = |x: u64, d: f64| x as f64 * 8.0 / d / 1e6;
            let sampled = *sampled_b || *sampled_a;
            let ci = sampled.then(|| ((eb / db / db) + (ea / da / da)).sqrt() * 8.0 / 1e6);
            let d = Delta::new(
                "mbit_per_s",
                Some(rate(*bb, db)),
                Some(rate(*ba, da)),
                ci,
                if sampled { "sampling" } else { "exact" },
            );
            flows.push(FlowDiff {
                flow: k.1.clone(),
                dir: k.0,
                deltas: vec![d],
            });
        }
    }
    flows.sort_by(|x, y| {
        let m = |f: &FlowDiff| {
            f.deltas[0]
                .before
                .unwrap_or(0.0)
                .max(f.deltas[0].after.unwrap_or(0.0))
        };
        m(y).total_cmp(&m(x))
    });
    let only = |x: &FlowGroups, y: &FlowGroups| {
        x.keys()
            .filter(|k| !y.contains_key(*k))
            .map(|k| format!("{} {}", k.0, k.1))
            .collect::<Vec<_>>()
    };
    let (only_before, only_after) = (only(&fb, &fa), only(&fa, &fb));
    (flows, only_before, only_after)
}

/// Drops by reason: whole-run counts, so Poisson intervals rather than Welch's over steps.
fn drop_diffs(sb: &Summary, sa: &Summary) -> Vec<Delta> {
    let (db, da) = (sb.meta.duration_s.max(1e-9), sa.meta.duration_s.max(1e-9));
    let mut reasons: BTreeMap<u32, (Option<String>, u64, u64)> = BTreeMap::new();
    for r in &sb.drops.reasons {
        let e = reasons.entry(r.reason).or_insert((r.name.clone(), 0, 0));
        e.1 += r.count;
    }
    for r in &sa.drops.reasons {
        let e = reasons.entry(r.reason).or_insert((r.name.clone(), 0, 0));
        e.2 += r.count;
    }
    reasons
        .into_iter()
        .map(|(reason, (name, cb, ca))| {
            let ci = 1.96 * ((cb as f64) / (db * db) + (ca as f64) / (da * da)).sqrt();
            Delta::new(
                &format!(
                    "{} per s",
                    name.unwrap_or_else(|| format!("reason {reason}"))
                ),
                Some(cb as f64 / db),
                Some(ca as f64 / da),
                Some(ci),
                "poisson",
            )
        })
        .collect()
}

/// Sockets' counters: pooled from the summaries, intervals from steps; when neither side
/// has any, the line saying why.
fn socket_diffs(
    stb: &Steps,
    sta: &Steps,
    sb: &Summary,
    sa: &Summary,
) -> (Vec<SocketDiff>, Option<String>) {
    let mut sockets = Vec::new();
    let mut socks: Vec<u32> = stb
        .sockets
        .keys()
        .chain(sta.sockets.keys())
        .copied()
        .collect();
    socks.sort();
    socks.dedup();
    for so in socks {
        let pooled = |s: &Summary, m: &str| {
            s.counters
                .sockets
                .iter()
                .find(|x| x.socket == so)
                .and_then(|x| {
                    socket_values(x)
                        .into_iter()
                        .find(|(n, _)| *n == m)
                        .and_then(|(_, v)| v)
                })
        };
        let st = |s: &Steps, m: &str| {
            s.sockets
                .get(&so)
                .and_then(|x| x.get(m))
                .copied()
                .unwrap_or_default()
        };
        let deltas = [
            "io_write_hit_pct",
            "io_read_hit_pct",
            "inbound_write_mbyte_per_s",
            "inbound_read_mbyte_per_s",
            "dram_read_mbyte_per_s",
            "dram_write_mbyte_per_s",
        ]
        .iter()
        .map(|m| Delta::steps(m, pooled(sb, m), pooled(sa, m), &st(stb, m), &st(sta, m)))
        .filter(|d| d.before.is_some() || d.after.is_some())
        .collect::<Vec<_>>();
        if !deltas.is_empty() {
            sockets.push(SocketDiff { socket: so, deltas });
        }
    }
    let counters_absent = sockets.is_empty().then(|| {
        format!(
            "no per-interval DDIO counters in {}: before: {}; after: {}",
            if stb.sockets.is_empty() && sta.sockets.is_empty() {
                "either recording"
            } else {
                "both recordings"
            },
            sb.counters
                .absent_why
                .clone()
                .unwrap_or_else(|| sb.counters.source.clone()),
            sa.counters
                .absent_why
                .clone()
                .unwrap_or_else(|| sa.counters.source.clone())
        )
    });
    (sockets, counters_absent)
}

/// What the intervals rest on, said once under the tables.
fn diff_notes(filter: &Filter, every_ns: u64) -> Vec<String> {
    let mut notes = vec![format!(
        "each uncertainty is a 95 % interval: Welch's t over {}-s steps for rates, sizes and lives (each side's pooled value is its whole-window figure); Poisson counts for drop reasons; the recorder's sampling bound for flows",
        every_ns as f64 / 1e9
    )];
    notes.push("flows are matched by protocol, addresses and the server's port: a client's ephemeral port differs between runs".into());
    if filter.flow.is_some() {
        notes.push(
            "--flow selects flow rows only: queue and direction rows count whole queues".into(),
        );
    }
    notes
}

/// AFTER's value of a model metric: measured by its counters when it has them, else the
/// model's on AFTER's own measured traffic.
/// AFTER's counter value of `metric` on the NIC's socket (else the first), with its 95 %
/// interval.
fn measured_after(
    metric: &str,
    a: &Summary,
    d: &Diff,
) -> Option<(Option<f64>, String, Option<f64>)> {
    let nic_socket = a.meta.numa_node.and_then(|n| u32::try_from(n).ok());
    let sock = d
        .sockets
        .iter()
        .find(|s| Some(s.socket) == nic_socket)
        .or_else(|| d.sockets.first())?;
    let x = sock.deltas.iter().find(|x| x.metric == metric)?;
    x.after.map(|v| {
        (
            Some(v),
            format!("measured: socket {} counters", sock.socket),
            x.ci95,
        )
    })
}

fn after_value(
    metric: &str,
    a: &Summary,
    after: &Outcome,
    d: &Diff,
) -> (Option<f64>, String, Option<f64>) {
    let counter = if metric.starts_with("io_write_hit_pct") {
        Some("io_write_hit_pct")
    } else if metric.starts_with("io_read_hit_pct") {
        Some("io_read_hit_pct")
    } else {
        None
    };
    if let Some(m) = counter.and_then(|c| measured_after(c, a, d)) {
        return m;
    }
    if let Outcome::Advised(adv) = after {
        if let Some(r) = adv.run.result(None, None) {
            let v = if metric.starts_with("io_write_hit_pct") {
                r.total.io_write_hit_pct()
            } else {
                adv.run.read_hit_pct(&r)
            };
            return (
                v.map(|v| (v * 10.0).round() / 10.0),
                "modelled, not measured: the model on AFTER's measured traffic (no counter measures this metric in AFTER)".into(),
                None,
            );
        }
    }
    (
        None,
        "not available: no counters and no model for AFTER".into(),
        None,
    )
}

/// `p`'s error, and whether it came true: within `bound` of the prediction.
fn judge_within(p: &mut Prediction, bound: f64) {
    p.error = match (p.after, p.predicted_after) {
        (Some(a), Some(pr)) => Some(((a - pr) * 100.0).round() / 100.0),
        _ => None,
    };
    p.came_true = p.error.map(|e| e.abs() <= bound);
}

/// A hit rate's prediction: true within the model's agreement or the measurement's 95 %
/// interval, whichever is wider.
fn judge(p: &mut Prediction, ci: Option<f64>) {
    judge_within(p, ci.unwrap_or(0.0).max(MODEL_AGREEMENT_PP));
}

/// Whether AFTER applied a recommendation, judged by the setting its command changes.
fn applied(kind: &str, command: &str, d: &Diff, b: &Summary, a: &Summary) -> String {
    let changed = |what: &str| d.config.iter().find(|c| c.what == what);
    match kind {
        "ring_size" => {
            let want = command
                .split_whitespace()
                .skip_while(|w| *w != "rx")
                .nth(1)
                .map(str::to_string);
            match (want, changed("rx ring")) {
                (Some(w), Some(c)) if c.after == w => format!("yes: AFTER's rx ring is {w}"),
                (Some(w), Some(c)) => {
                    format!("no: AFTER's rx ring is {}, the command sets {w}", c.after)
                }
                _ => "cannot tell: the ring size is not recorded".into(),
            }
        }
        "iio_llc_ways" => match changed("DDIO ways") {
            Some(c) if c.changed => format!("yes: DDIO ways {} → {}", c.before, c.after),
            Some(c) => format!("no: DDIO ways {} in both", c.after),
            None => "cannot tell".into(),
        },
        "spread_load" | "steer_flow" => {
            // Judged by its target, the hot queue's share of RX bytes.
            let share = |s: &Summary| {
                let rx: Vec<f64> = s
                    .queues
                    .iter()
                    .filter(|q| q.dir == Dir::Rx)
                    .map(|q| q.bytes as f64)
                    .collect();
                let tot: f64 = rx.iter().sum();
                let n = rx.iter().filter(|x| **x > 0.0).count().max(1) as f64;
                (tot > 0.0).then(|| rx.iter().copied().fold(0.0, f64::max) / (tot / n))
            };
            match (share(b), share(a)) {
                (Some(x), Some(y)) if y < x => format!("its aim is met: the busiest RX queue carried {x:.1}x the mean active queue's bytes before, {y:.1}x after"),
                (Some(x), Some(y)) => format!("not visibly: the busiest RX queue carried {x:.1}x the mean active queue's bytes before, {y:.1}x after"),
                _ => "cannot tell: no RX traffic".into(),
            }
        }
        _ => "cannot tell from the recordings (the setting it changes is not recorded)".into(),
    }
}

/// Fill in the predictions: BEFORE's recommendations (recomputed by this build from BEFORE)
/// and BEFORE's calibrated model given AFTER's configuration and traffic.
pub fn predictions(
    d: &mut Diff,
    a: &Recording,
    sb: &Summary,
    sa: &Summary,
    m: Models<'_>,
    geometry: GeometryOverrides,
) -> Result<()> {
    let Outcome::Advised(adv_b) = m.before else {
        d.notes
            .push("no predictions: BEFORE has no LLC geometry for the model".into());
        return Ok(());
    };
    for r in &adv_b.recommendations {
        let Some(metric) = r.predicted_metric.clone() else {
            continue;
        };
        let (after, src, ci) = after_value(&metric, sa, m.after, d);
        let mut p = Prediction {
            kind: "recommendation",
            what: format!("[{}] {}", r.kind, r.target),
            command: Some(r.command.clone()),
            applied: applied(r.kind.as_str(), &r.command, d, sb, sa),
            metric,
            predicted_before: r.predicted_before,
            predicted_after: r.predicted_after,
            after,
            after_source: src,
            error: None,
            came_true: None,
            note: format!(
                "recomputed from BEFORE by ddioscope {} (the model of this build)",
                crate::build_info::VERSION
            ),
        };
        judge(&mut p, ci);
        // A change AFTER did not make tests nothing: its prediction is left unjudged.
        if p.applied.starts_with("no") || p.applied.starts_with("not visibly") {
            p.came_true = None;
            p.note = format!("not applied, so not tested; {}", p.note);
        }
        d.predictions.push(p);
    }
    // BEFORE's model (its calibration) given AFTER's inputs: what BEFORE's model says AFTER
    // should show, for every change at once.
    let obs_a = observation(a, sa, geometry)?;
    if let Some(r) = adv_b.run.for_observation(&obs_a) {
        let before_now = adv_b.run.result(None, None);
        for metric in ["io_write_hit_pct", "read_hit_pct"] {
            let pick = |res: &crate::model::sim::SimResult| {
                if metric == "io_write_hit_pct" {
                    res.total.io_write_hit_pct()
                } else {
                    adv_b.run.read_hit_pct(res)
                }
            };
            let name = if metric == "read_hit_pct" {
                match adv_b.run.spec().map(|s| s.consumer) {
                    Some(crate::model::spec::Consumer::Forward) => "io_read_hit_pct".to_string(),
                    _ => "cpu_read_hit_pct".to_string(),
                }
            } else {
                metric.to_string()
            };
            let (after, src, ci) = after_value(&name, sa, m.after, d);
            let round = |v: Option<f64>| v.map(|v| (v * 10.0).round() / 10.0);
            let mut p = Prediction {
                kind: "after_inputs",
                what: "BEFORE's model given AFTER's configuration and measured traffic".into(),
                command: None,
                applied: "n/a".into(),
                metric: name,
                predicted_before: round(before_now.as_ref().and_then(pick)),
                predicted_after: round(pick(&r)),
                after,
                after_source: src,
                error: None,
                came_true: None,
                note: if adv_b.calibration.is_some() {
                    "BEFORE's calibration to its counters carried over".into()
                } else {
                    "BEFORE has no counters to calibrate to: both sides are the same uncalibrated model, so agreement checks the inputs, not the cache".into()
                },
            };
            judge(&mut p, ci);
            d.predictions.push(p);
        }
        let cal = adv_b.calibration.as_ref();
        if let Some(p) = dram_prediction(&adv_b.run, cal, (&before_now, &r), sa, d) {
            d.predictions.push(p);
        }
    }
    Ok(())
}

/// Agreement of a DRAM read prediction with AFTER's memory controllers: the calibration's
/// (model::calibrate), as a share of the prediction and a floor, MB/s.
const DRAM_AGREEMENT_SHARE: f64 = 0.1;
const DRAM_AGREEMENT_FLOOR_MBPS: f64 = 200.0;

/// BEFORE's model, calibrated to its memory controllers' reads, on AFTER's inputs: the
/// socket's DRAM reads (the network's and the rest of the socket's as BEFORE measured them),
/// judged against AFTER's controllers. Only when BEFORE's calibration used them (without
/// them the model's reads are the network's alone, not what a controller counts) and AFTER
/// has them.
fn dram_prediction(
    run: &crate::advise::ModelRun,
    cal: Option<&crate::advise::CalibrationReport>,
    (before_now, after_inputs): (
        &Option<crate::model::sim::SimResult>,
        &crate::model::sim::SimResult,
    ),
    sa: &Summary,
    d: &Diff,
) -> Option<Prediction> {
    cal?.measured_dram_read_gbps?;
    let metric = "dram_read_mbyte_per_s";
    let mbps = |r: &crate::model::sim::SimResult| run.dram_read_gbps(r).map(|g| (g * 1e3).round());
    let predicted_after = mbps(after_inputs);
    let (after, after_source, ci) = measured_after(metric, sa, d).unwrap_or((
        None,
        "not available: AFTER has no memory-controller counters".into(),
        None,
    ));
    let mut p = Prediction {
        kind: "after_inputs",
        what: "BEFORE's model given AFTER's configuration and measured traffic".into(),
        command: None,
        applied: "n/a".into(),
        metric: metric.into(),
        predicted_before: before_now.as_ref().and_then(mbps),
        predicted_after,
        after,
        after_source,
        error: None,
        came_true: None,
        note: "BEFORE's calibration to its memory controllers' reads carried over: the rest of the socket reads what it read in BEFORE".into(),
    };
    let bound = predicted_after
        .map(|v| v * DRAM_AGREEMENT_SHARE + DRAM_AGREEMENT_FLOOR_MBPS)
        .unwrap_or(DRAM_AGREEMENT_FLOOR_MBPS)
        .max(ci.unwrap_or(0.0));
    judge_within(&mut p, bound);
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welford_matches_two_pass() {
        let xs = [3.0, 5.0, 9.0, 1.0, 7.0];
        let mut s = Stat::default();
        xs.iter().for_each(|x| s.push(*x));
        let mean = xs.iter().sum::<f64>() / 5.0;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 4.0;
        assert!((s.mean().unwrap_or(f64::NAN) - mean).abs() < 1e-12);
        assert!((s.var().unwrap_or(f64::NAN) - var).abs() < 1e-12);
    }

    #[test]
    fn welch_interval_against_a_hand_computation() {
        // a: 10, 12, 14 (mean 12, var 4); b: 20, 21, 22, 23 (mean 21.5, var 5/3).
        let mut a = Stat::default();
        let mut b = Stat::default();
        [10.0, 12.0, 14.0].iter().for_each(|x| a.push(*x));
        [20.0, 21.0, 22.0, 23.0].iter().for_each(|x| b.push(*x));
        let sa: f64 = 4.0 / 3.0;
        let sb: f64 = (5.0 / 3.0) / 4.0;
        let df = (sa + sb).powi(2) / (sa * sa / 2.0 + sb * sb / 3.0);
        // df = 3.23: the table's row for 3.
        assert!((df - 3.235).abs() < 0.001, "{df}");
        let want = 3.182 * (sa + sb).sqrt();
        let got = welch_half_width(&a, &b).unwrap_or(f64::NAN);
        assert!((got - want).abs() < 1e-9, "{got} {want}");
        let d = Delta::steps("x", Some(12.0), Some(21.5), &a, &b);
        assert!(d.effect && d.basis == "steps");
        // The same sets, shifted by less than the interval: no effect.
        let d = Delta::new("x", Some(12.0), Some(13.0), Some(got), "steps");
        assert!(!d.effect);
    }

    #[test]
    fn t_table_is_monotone_and_ends_at_the_normal() {
        let mut prev = f64::INFINITY;
        for df in 1..200 {
            let t = t975(df as f64);
            assert!(t <= prev, "{df}");
            prev = t;
        }
        assert_eq!(t975(f64::INFINITY), 1.960);
    }

    #[test]
    fn flows_are_matched_without_the_clients_port() {
        let a = flow_service("tcp", "10.77.0.1", 46096, "10.77.0.2", 5201);
        let b = flow_service("tcp", "10.77.0.1", 51234, "10.77.0.2", 5201);
        assert_eq!(a, b);
        assert_eq!(a, "tcp 10.77.0.1 -> 10.77.0.2:5201");
        let tx = flow_service("tcp", "10.77.0.2", 5201, "10.77.0.1", 46096);
        assert_eq!(tx, "tcp 10.77.0.2:5201 -> 10.77.0.1");
    }

    /// BEFORE's model, calibrated to its memory controllers' reads, on AFTER's inputs,
    /// judged by AFTER's controllers: the same configuration and traffic reading what BEFORE
    /// read came true; a socket reading three times as much did not.
    #[test]
    fn dram_reads_predicted_from_before_are_judged_by_afters_controllers() {
        use crate::analysis::{advise_or_explain, summary};
        use crate::recording::reader::fixture::{synthetic_with_dram_reads, IV_NS};
        let rec = |gbps: f64| synthetic_with_dram_reads(gbps, "live");
        let (_db, b) = rec(3.0);
        let dram = |after_gbps: f64| -> Prediction {
            let (_da, a) = rec(after_gbps);
            let (rb, ra) = (Recording::open(&b).unwrap(), Recording::open(&a).unwrap());
            let (sb, sa) = (summary::build(&rb).unwrap(), summary::build(&ra).unwrap());
            let g = GeometryOverrides::default();
            let mut d = diff(&rb, &ra, &sb, &sa, &Filter::default(), IV_NS, g).unwrap();
            let (ob, oa) = (
                advise_or_explain(&rb, &sb, g).unwrap(),
                advise_or_explain(&ra, &sa, g).unwrap(),
            );
            let m = Models {
                before: &ob,
                after: &oa,
            };
            predictions(&mut d, &ra, &sb, &sa, m, g).unwrap();
            println!("{:#?}", d.predictions);
            d.predictions
                .into_iter()
                .find(|p| p.metric == "dram_read_mbyte_per_s")
                .expect("a DRAM read prediction")
        };
        let same = dram(3.0);
        assert!(same.after_source.starts_with("measured"), "{same:?}");
        assert!((same.after.unwrap() - 3_000.0).abs() < 1.0, "{same:?}");
        assert_eq!(same.came_true, Some(true), "{same:?}");
        let busier = dram(9.0);
        assert!(busier.error.unwrap() > 4_000.0, "{busier:?}");
        assert_eq!(busier.came_true, Some(false), "{busier:?}");
    }
}
