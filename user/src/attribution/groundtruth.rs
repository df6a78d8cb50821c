//! Ground-truth tests: multi-queue, multi-flow simulator scenarios whose every miss is labelled with its queue and flow; each method gets only what a real host would record, and its shares are compared with the labels.
//!
//! One scenario = one contiguous simulator run (`simulate_phases`): two lead-in phases, then
//! `INTERVALS` intervals with each queue's rate scaled by an independent factor in [0.5, 1.5]
//! (load varies over a recording; without variation no regression can separate queues). The
//! cache, rings and in-flight packets carry over between intervals, as on a running host;
//! separate cold-started runs would give every interval a start-up transient no real interval
//! has. Per interval the harness derives:
//! * per-queue inbound bytes (what the RX probes count) from the simulator's per-flow DMA
//!   line counts, in-flight bytes by Little's law (byte rate × residence, ±3% measurement
//!   noise), ring footprint;
//! * socket counters: Σ queue DDIO write misses and Σ queue core-read misses, each with ±3%
//!   multiplicative noise plus a background miss rate (other cores) — never the per-queue split;
//! * address join: the core-read (L3 load) miss stream, interleaved with 30% misses on
//!   non-packet memory, sampled every `PERIOD`-th event as PEBS does;
//! * CPU context: the same samples, 10% charged to a wrong queue/flow (softirq of another
//!   queue on that CPU).

use std::collections::BTreeMap;

use super::{
    address_join, attribute, cpu_context, model_prior, regression, Attribution, Confidence,
    Evidence, FlowId, Interval, Method, ModelPrediction, QueueFeatures, QueueId, RegressionInput,
    SampledCounts, SocketMisses,
};
use crate::model::{simulate, simulate_phases, Phase, SimResult, SimSpec};

const INTERVALS: usize = 20;
/// Interval length: several buffer-reuse cycles of every queue in the scenarios.
const INTERVAL_NS: u64 = 100_000_000;
const PERIOD: u64 = 200;
const NON_PACKET_FRACTION: f64 = 0.3;
const MISCHARGE: f64 = 0.1;

/// splitmix64: deterministic test noise.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

fn flow_id(f: u32) -> FlowId {
    FlowId { proto: "tcp".into(), src: format!("10.0.0.{}", 10 + f), sport: 40000 + f as u16, dst: "10.0.1.1".into(), dport: 5201 }
}

struct Run {
    /// The workload of this interval (its rates).
    spec: SimSpec,
    secs: f64,
    res: SimResult,
    /// Core-read misses in time order as (queue, flow, 4 KiB page address).
    /// Core-read misses: (queue, flow, page, ns).
    loads: Vec<(u32, u32, u64, u64)>,
}

struct Scenario {
    name: &'static str,
    base: SimSpec,
    runs: Vec<Run>,
}

fn spec(json: &str) -> SimSpec {
    match SimSpec::parse(json) {
        Ok(s) => s,
        Err(e) => panic!("scenario spec: {e}"),
    }
}

fn build(name: &'static str, json: &str, seed: u64) -> Scenario {
    let mut base = spec(json);
    base.miss_log_cap = 4_000_000;
    base.seed = seed;
    let mut rng = Rng(seed);
    let rates0 = base.queue_pps();
    // The host has been running before the recording starts: lead-in phases at the top of
    // the load range, then at the mean, so every buffer any interval uses has been used.
    let lead_in = [1.5, 1.0].map(|k| Phase {
        duration_ns: INTERVAL_NS,
        queue_pps: rates0.iter().map(|r| r * k).collect(),
    });
    let phases: Vec<Phase> = lead_in
        .iter()
        .cloned()
        .chain((0..INTERVALS).map(|_| Phase {
            duration_ns: INTERVAL_NS,
            queue_pps: rates0.iter().map(|r| r * rng.range(0.5, 1.5)).collect(),
        }))
        .collect();
    let results = simulate_phases(&base, &phases);
    let runs = phases
        .iter()
        .zip(results)
        .skip(lead_in.len())
        .map(|(p, mut res)| {
            assert_eq!(res.misses_dropped, 0, "miss log too small");
            let loads = res
                .misses
                .iter()
                .filter(|m| m.kind == crate::model::AccessKind::CpuRead)
                .map(|m| (m.queue, m.flow, m.line_addr & !4095, m.t_ns))
                .collect();
            res.misses = Vec::new();
            let mut s = base.clone();
            s.pps = p.queue_pps.iter().sum();
            s.queue_weights = p.queue_pps.clone();
            Run {
                spec: s,
                secs: p.duration_ns as f64 / 1e9,
                res,
                loads,
            }
        })
        .collect();
    Scenario { name, base, runs }
}

/// Per-queue (io_write + cpu_read), cpu_read-only and io_write-only truth over all intervals.
fn truth(sc: &Scenario) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let nq = sc.base.queues as usize;
    let mut all = vec![0.0; nq];
    let mut loads = vec![0.0; nq];
    let mut writes = vec![0.0; nq];
    for r in &sc.runs {
        for (q, h) in r.res.per_queue.iter().enumerate() {
            all[q] += (h.io_write_misses + h.cpu_read_misses) as f64;
            loads[q] += h.cpu_read_misses as f64;
            writes[q] += h.io_write_misses as f64;
        }
    }
    (all, loads, writes)
}

fn pct(v: &[f64]) -> Vec<f64> {
    let s: f64 = v.iter().sum();
    v.iter().map(|x| if s > 0.0 { 100.0 * x / s } else { 0.0 }).collect()
}

/// Packet bytes per flow id of a spec (flows listed explicitly in every scenario).
fn flow_bytes_of(s: &SimSpec) -> Vec<u32> {
    s.flows.iter().map(|f| f.pkt_bytes).collect()
}

/// `other_stacks_read`: the other IIO stacks' DMA bytes are in the input (a host whose NIC's
/// IIO box is known); otherwise the regression must take the background as steady in time.
fn regression_input(sc: &Scenario, rng: &mut Rng, other_stacks_read: bool) -> RegressionInput {
    let nq = sc.base.queues as usize;
    let fb = flow_bytes_of(&sc.base);
    let mut intervals = Vec::new();
    let mut flow_tot: BTreeMap<u32, f64> = BTreeMap::new();
    // Background rates: 5% of the scenario's mean network miss rate, per counter. The write
    // background comes from another device (a disk) whose DMA load half follows the network's
    // (it stores what arrives) and half varies on its own, and whose cold target buffers miss on
    // 85–95% of their lines; plus a steady 1% from a device on no measured stack.
    let mut w_rate = 0.0;
    let mut l_rate = 0.0;
    let mut secs_all = 0.0;
    let mut rows = Vec::new();
    for r in &sc.runs {
        let s = &r.spec;
        let mut qbytes = vec![0.0; nq];
        for (f, h) in r.res.per_flow.iter().enumerate() {
            let Some(&b) = fb.get(f) else { continue };
            // Each packet: ceil(b/64) data lines (data offset is line-aligned) + one CQE line.
            let lines_per_pkt = (b as f64 / 64.0).ceil() + (s.cqe_bytes as f64 / 64.0).ceil();
            let p = (h.io_write_hits + h.io_write_misses) as f64 / lines_per_pkt;
            let q = s.flows[f].queue as usize;
            qbytes[q] += p * b as f64;
            *flow_tot.entry(f as u32).or_default() += p * b as f64;
        }
        let secs = r.secs;
        let w: f64 = r.res.per_queue.iter().map(|h| h.io_write_misses as f64).sum();
        let l: f64 = r.res.per_queue.iter().map(|h| h.cpu_read_misses as f64).sum();
        w_rate += w;
        l_rate += l;
        secs_all += secs;
        rows.push((secs, qbytes, w, l));
    }
    let (w_bg, l_bg) = (0.05 * w_rate / secs_all, 0.05 * l_rate / secs_all);
    let net_bytes = |q: &Vec<f64>| q.iter().sum::<f64>();
    let mean_net = rows.iter().map(|(_, q, _, _)| net_bytes(q)).sum::<f64>() / rows.len().max(1) as f64;
    for (i, (secs, qbytes, w, l)) in rows.into_iter().enumerate() {
        let s = &sc.runs[i].spec;
        let queues = (0..nq)
            .map(|q| {
                let res_us = s.queue_residence_us.get(q).copied().unwrap_or(s.residence_us);
                QueueFeatures {
                    queue: QueueId::rx(q as u32),
                    inbound_bytes: qbytes[q],
                    inflight_bytes: Some(qbytes[q] / secs * res_us * 1e-6 * rng.range(0.97, 1.03)),
                    footprint_bytes: Some(s.ring_footprint_bytes(q) as f64),
                }
            })
            .collect();
        let load = 0.5 * rng.range(0.5, 1.5) + 0.5 * net_bytes(&qbytes) / mean_net.max(1.0);
        let other_lines = w_bg / 0.9 * secs * load;
        let other_misses = other_lines * rng.range(0.85, 0.95) + 0.2 * w_bg * secs * rng.range(0.9, 1.1);
        let socket = SocketMisses {
            io_write: Some(w * rng.range(0.97, 1.03) + other_misses),
            io_read: None,
            l3: Some(l * rng.range(0.97, 1.03) + l_bg * secs * rng.range(0.9, 1.1)),
            other_io_write_bytes: other_stacks_read.then(|| other_lines * 64.0 * rng.range(0.99, 1.01)),
            other_io_read_bytes: None,
        };
        intervals.push(Interval { duration_ns: (secs * 1e9) as u64, queues, socket });
    }
    let flow_bytes = flow_tot.into_iter().map(|(f, b)| (flow_id(f), QueueId::rx(sc.base.flows[f as usize].queue), b)).collect();
    RegressionInput { intervals, flow_bytes }
}

/// The probes' buffer-table set of a page (`buf_set_of` in bpf/pktlife.bpf.c).
fn buf_set_of(page: u64) -> u32 {
    (((page >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) & (BUF_SETS - 1)) as u32
}
const BUF_SETS: u64 = 32768;

/// The mirror above is the probes' hash: their source says the same constants.
#[test]
fn buf_set_of_mirrors_the_probes() {
    let bpf = include_str!("../../../bpf/pktlife.bpf.c");
    assert!(bpf.contains("#define BUF_SETS 32768"), "BUF_SETS changed in the probes");
    assert!(
        bpf.contains("return (__u32)(((page >> 12) * 0x9E3779B97F4A7C15ULL) >> 40) & (BUF_SETS - 1);"),
        "buf_set_of changed in the probes"
    );
    assert!(bpf.contains("return !(set & join_page_mask);"), "in_join_subset changed in the probes");
    assert_eq!(BUF_SETS, 32768);
}

/// `record --join-sample n`: the join keeps the pages whose set has its low log2 n bits clear.
fn in_join_subset(page: u64, n: u32) -> bool {
    buf_set_of(page) & (n - 1) == 0
}

/// PEBS-like sampling of the load-miss stream (packet misses + non-packet misses).
fn sampled(sc: &Scenario, rng: &mut Rng, mischarge: f64) -> SampledCounts {
    sampled_pages(sc, rng, mischarge, 1, 1).0
}

/// The same with the join on 1 in `join_sample` pages: a sample on another page is neither
/// joined nor "outside packet buffers" (the probes count it apart). With `duty` > 1, as
/// `record --miss-duty`: the sampler runs in one window of 1/duty of each interval, placed at
/// random, at the period over the duty (crate::session::windows).
/// Also returns the load misses inside the sampling windows (all of them when always on).
fn sampled_pages(sc: &Scenario, rng: &mut Rng, mischarge: f64, join_sample: u32, duty: u32) -> (SampledCounts, u64) {
    let nq = sc.base.queues;
    let nf = sc.base.flows.len() as u32;
    let mut q: BTreeMap<u32, u64> = BTreeMap::new();
    let mut f: BTreeMap<u32, u64> = BTreeMap::new();
    let mut other = 0u64;
    let mut in_windows = 0u64;
    let period = crate::session::windows::window_period(PERIOD, duty);
    let mut count = rng.next() % period;
    let take = |count: &mut u64| {
        *count += 1;
        (*count).is_multiple_of(period)
    };
    // The runs are back-to-back intervals of one simulation: one timeline, as in `record`.
    // No draws when always on: the page-sampling checks keep their sample streams.
    let draws: Vec<f64> = if duty > 1 { (0..sc.runs.len() + 2).map(|_| rng.unit()).collect() } else { Vec::new() };
    let cycle = std::time::Duration::from_nanos(INTERVAL_NS);
    let t0 = sc.runs.iter().flat_map(|r| r.loads.iter().map(|l| l.3)).min().unwrap_or(0);
    let t1 = sc.runs.iter().flat_map(|r| r.loads.iter().map(|l| l.3)).max().unwrap_or(0);
    // The time the sampler ran, as the recorder measures it: the duty the estimates scale by.
    let measured_duty = {
        let mut d = draws.clone().into_iter();
        match crate::session::windows::Schedule::new(cycle, duty, || d.next().unwrap_or(0.5)) {
            None => 1.0,
            Some(mut s) => {
                let (end, mut t, mut on) = (std::time::Duration::from_nanos(t1 - t0), std::time::Duration::ZERO, std::time::Duration::ZERO);
                while t < end {
                    let next = s.next_change(t).unwrap_or(end).min(end);
                    if s.phase_at(t) == crate::session::windows::Phase::Sampling {
                        on += next - t;
                    }
                    t = next;
                }
                end.as_secs_f64() / on.as_secs_f64()
            }
        }
    };
    let mut next_draw = draws.into_iter();
    let mut schedule = crate::session::windows::Schedule::new(cycle, duty, || next_draw.next().unwrap_or(0.5));
    for r in &sc.runs {
        for &(lq, lf, page, t) in &r.loads {
            if let Some(s) = schedule.as_mut() {
                if s.phase_at(std::time::Duration::from_nanos(t - t0)) != crate::session::windows::Phase::Sampling {
                    continue;
                }
            }
            in_windows += 1;
            // Non-packet misses interleaved: geometric run with mean φ/(1−φ) per packet miss.
            while rng.unit() < NON_PACKET_FRACTION {
                if take(&mut count) {
                    other += 1;
                }
            }
            if take(&mut count) && in_join_subset(page, join_sample) {
                let (cq, cf) = if rng.unit() < mischarge { ((rng.next() % nq as u64) as u32, (rng.next() % nf as u64) as u32) } else { (lq, lf) };
                *q.entry(cq).or_default() += 1;
                *f.entry(cf).or_default() += 1;
            }
        }
    }
    let counts = SampledCounts {
        period,
        stand_in: false,
        queues: q.into_iter().map(|(k, v)| (QueueId::rx(k), v)).collect(),
        flows: f.into_iter().map(|(k, v)| (flow_id(k), v)).collect(),
        other_samples: other,
        join_sample: join_sample as u64,
        duty: measured_duty,
        before_window: 0,
        age_hist: Vec::new(),
    };
    (counts, in_windows)
}

fn shares(a: &Attribution, nq: usize) -> Vec<f64> {
    let mut v = vec![0.0; nq];
    for s in &a.queues {
        if let Some(x) = v.get_mut(s.queue as usize) {
            *x = s.share_pct;
        }
    }
    v
}

fn max_err(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn row(label: &str, v: &[f64], truth: Option<&[f64]>, extra: &str) -> String {
    let cells: String = v.iter().map(|x| format!("{x:7.1}")).collect();
    let err = truth.map_or("       ".into(), |t| format!("{:7.2}", max_err(v, t)));
    format!("  {label:<24}{cells} {err}  {extra}")
}

struct Outcome {
    /// Address-join samples on packet buffers.
    samples: u64,
    join_err: f64,
    ctx_err: f64,
    reg_err: f64,
    reg_conf: Confidence,
    /// The regression without the other stacks' DMA bytes (background steady in time).
    blind_err: f64,
    blind_conf: Confidence,
    prior_err: f64,
}

fn evaluate(sc: &Scenario, seed: u64) -> Outcome {
    let nq = sc.base.queues as usize;
    let mut rng = Rng(seed);
    let (t_all, t_loads, t_writes) = truth(sc);
    let (p_all, p_loads) = (pct(&t_all), pct(&t_loads));

    let join = address_join(&sampled(sc, &mut rng, 0.0));
    let ctx = cpu_context(&sampled(sc, &mut rng, MISCHARGE));
    let reg_in = regression_input(sc, &mut rng, true);
    let reg = regression(&reg_in);
    let blind = regression(&regression_input(sc, &mut Rng(seed ^ 0x5eed), false));
    let measured: f64 = reg_in.intervals.iter().map(|i| i.socket.io_write.unwrap_or(0.0) + i.socket.l3.unwrap_or(0.0)).sum();
    let prior = model_prior(&ModelPrediction::from_sim(&simulate(&sc.base), Some(measured)));

    let (sj, sc_, sr, sp) = (shares(&join, nq), shares(&ctx, nq), shares(&reg, nq), shares(&prior, nq));
    let sb = shares(&blind, nq);
    let qs: String = (0..nq).map(|q| format!("{:>7}", format!("rx{q}"))).collect();
    let lines = [
        format!("scenario {}: {} intervals, {} flows, {:.3e} labelled misses ({:.3e} core loads)", sc.name, sc.runs.len(), sc.base.flows.len(), t_all.iter().sum::<f64>(), t_loads.iter().sum::<f64>()),
        format!("  {:<24}{qs} {:>7}  confidence", "share %", "maxerr"),
        row("truth (write+load)", &p_all, None, ""),
        row("truth (load misses)", &p_loads, None, ""),
        row("truth (write misses)", &pct(&t_writes), None, ""),
        row("address_join vs load", &sj, Some(&p_loads), &format!("{:?}", join.confidence)),
        row("cpu_context vs load", &sc_, Some(&p_loads), &format!("{:?}", ctx.confidence)),
        row("regression vs w+l", &sr, Some(&p_all), &format!("{:?}", reg.confidence)),
        row("  without other stacks", &sb, Some(&p_all), &format!("{:?} (background steady in time)", blind.confidence)),
        row("model_prior vs w+l", &sp, Some(&p_all), &format!("{:?} (same simulator, mean rates)", prior.confidence)),
    ];
    println!("{}", lines.join("\n"));
    for n in &reg.notes {
        println!("    regression: {n}");
    }
    for n in &blind.notes {
        println!("    without other stacks: {n}");
    }
    // Flows by address join vs labels.
    let mut tf: BTreeMap<u32, f64> = BTreeMap::new();
    for r in &sc.runs {
        for &(_, f, _, _) in &r.loads {
            *tf.entry(f).or_default() += 1.0;
        }
    }
    let tfs: f64 = tf.values().sum();
    let mut flow_err = 0.0f64;
    for (f, n) in &tf {
        let id = flow_id(*f);
        let got = join.flows.iter().find(|x| x.sport == id.sport).map_or(0.0, |x| x.share_pct);
        flow_err = flow_err.max((got - 100.0 * n / tfs).abs());
    }
    let n_samples: u64 = join.queues.iter().map(|q| (q.misses / PERIOD as f64) as u64).sum();
    println!("  address_join per-flow max error {flow_err:.2} pp over {} flows ({n_samples} samples)", tf.len());
    page_sampling(sc, seed, &p_loads, t_loads.iter().sum());
    time_windows(sc, seed, &p_loads, t_loads.iter().sum());
    println!();
    // Flow shares are not held to the queue bound: a queue's samples split over its flows,
    // so with few samples the binomial error dominates; allow 3.3σ of the worst case (p=½).
    let flow_bound = 2.0f64.max(100.0 * 3.3 * (0.25 / n_samples.max(1) as f64).sqrt());
    assert!(flow_err <= flow_bound, "{}: flow shares off by {flow_err:.2} pp (bound {flow_bound:.2})", sc.name);
    assert_eq!(join.method, Method::AddressJoin);
    assert_ne!(join.confidence, Confidence::Insufficient);
    assert!(matches!(ctx.confidence, Confidence::Medium | Confidence::Low), "context is never high");
    assert_eq!(attribute(&Evidence { address_join: Some(sampled(sc, &mut rng, 0.0)), regression: Some(reg_in), ..Default::default() }).method, Method::AddressJoin);
    Outcome { samples: n_samples, join_err: max_err(&sj, &p_loads), ctx_err: max_err(&sc_, &p_loads), reg_err: max_err(&sr, &p_all), reg_conf: reg.confidence, blind_err: max_err(&sb, &p_all), blind_conf: blind.confidence, prior_err: max_err(&sp, &p_all) }
}

/// `--join-sample`: the join on 1 in 4 and 1 in 16 buffer pages, the same sample stream. The
/// hash knows nothing of queues, so each queue's share is off by no more than the binomial
/// error of the fewer samples joined (3.3σ, at least the full join's 2 pp), and the estimate
/// scaled by N lands on the true load misses; with too few samples the join declines.
fn page_sampling(sc: &Scenario, seed: u64, p_loads: &[f64], true_loads: f64) {
    let nq = p_loads.len();
    for n in [4u32, 16] {
        let (counts, _) = sampled_pages(sc, &mut Rng(seed ^ 0x9a9e), 0.0, n, 1);
        let joined: u64 = counts.queues.iter().map(|(_, k)| k).sum();
        let a = address_join(&counts);
        let label = format!("join, 1 page in {n}");
        if a.confidence == Confidence::Insufficient {
            println!("  {label:<24}insufficient: {joined} samples joined");
            assert!(joined < super::sampled::MIN_SAMPLES, "{}: 1 in {n} declined with {joined} samples", sc.name);
            continue;
        }
        let got = shares(&a, nq);
        let estimate: f64 = a.queues.iter().map(|q| q.misses).sum();
        println!("{}, {joined} samples, misses ×{:.3} of truth", row(&label, &got, Some(p_loads), &format!("{:?}", a.confidence)), estimate / true_loads);
        for (q, (g, t)) in got.iter().zip(p_loads).enumerate() {
            let p = t / 100.0;
            let bound = 2.0f64.max(100.0 * 3.3 * (p * (1.0 - p) / joined as f64).sqrt());
            assert!((g - t).abs() <= bound, "{}: 1 in {n} pages, rx{q} off by {:.2} pp (bound {bound:.2})", sc.name, (g - t).abs());
        }
        let rel = 3.3 / (joined as f64).sqrt();
        assert!((estimate / true_loads - 1.0).abs() <= rel, "{}: 1 in {n} pages scaled to {estimate:.3e} misses, truth {true_loads:.3e}", sc.name);
    }
}

/// `--miss-duty`: the sampler in one window of 1/4 and 1/16 of each interval at 4 and 16
/// times the rate. The window sees every page, so with the rate raised the join gets about
/// the samples it gets always on and must meet the same 2 pp bar (3.3σ binomial where the
/// windows' sample count is lower); the estimate lands on the load misses the windows held,
/// scaled by the duty. How far that is from the recording's total depends on how the load
/// varies in time (here each interval's rates differ, ±50 %): printed, not asserted.
fn time_windows(sc: &Scenario, seed: u64, p_loads: &[f64], true_loads: f64) {
    for duty in [4u32, 16] {
        let (counts, in_windows) = sampled_pages(sc, &mut Rng(seed ^ 0x7d17), 0.0, 1, duty);
        let joined: u64 = counts.queues.iter().map(|(_, k)| k).sum();
        let a = address_join(&counts);
        let label = format!("join, windows 1/{duty}");
        assert_ne!(a.confidence, Confidence::Insufficient, "{}: windows of 1/{duty} declined with {joined} samples", sc.name);
        let got = shares(&a, p_loads.len());
        let estimate: f64 = a.queues.iter().map(|q| q.misses).sum();
        // What the windows held against their share of the time (measured, as the recorder
        // does): the error of extrapolating from them, a property of how the load varies.
        let held = in_windows as f64 * counts.duty / true_loads;
        println!(
            "{}, {joined} samples, misses ×{:.3} of truth (sampled 1/{:.2} of the time; the windows held ×{held:.3} of that share)",
            row(&label, &got, Some(p_loads), &format!("{:?}", a.confidence)),
            estimate / true_loads,
            counts.duty
        );
        for (q, (g, t)) in got.iter().zip(p_loads).enumerate() {
            let p = t / 100.0;
            let bound = 2.0f64.max(100.0 * 3.3 * (p * (1.0 - p) / joined as f64).sqrt());
            assert!((g - t).abs() <= bound, "{}: windows of 1/{duty}, rx{q} off by {:.2} pp (bound {bound:.2})", sc.name, (g - t).abs());
        }
        // The sampling itself: the estimate lands on what the windows held, scaled by the
        // share of the time they sampled.
        let rel = 3.3 / (joined as f64).sqrt();
        assert!(
            (estimate / (in_windows as f64 * counts.duty) - 1.0).abs() <= rel,
            "{}: windows of 1/{duty} scaled to {estimate:.3e} misses, the windows held {in_windows} (×{:.2})",
            sc.name,
            counts.duty
        );
        // And against the labels: within the spread a load varying ±50 % from interval to
        // interval gives 20 windows, far inside what a wrong schedule or scale (×N too few
        // or too many) would give.
        assert!((estimate / true_loads - 1.0).abs() <= 0.5, "{}: windows of 1/{duty}: {estimate:.3e} misses against {true_loads:.3e}", sc.name);
    }
}

/// The regression must answer within 10 pp. Without the other stacks' DMA bytes it may decline
/// (a queue's steady misses look like a steady background) but must not answer wrongly.
fn check(sc: &Scenario, seed: u64) {
    let o = evaluate(sc, seed);
    let show = |c: Confidence, e: f64| if c == Confidence::Insufficient { "insufficient".to_string() } else { format!("{e:.2}") };
    println!(
        "SUMMARY {:<27} max abs error (pp): address_join {:.2}  cpu_context {:.2}  regression {} ({:?}; without other stacks {})  model_prior {:.2}",
        sc.name,
        o.join_err,
        o.ctx_err,
        show(o.reg_conf, o.reg_err),
        o.reg_conf,
        show(o.blind_conf, o.blind_err),
        o.prior_err
    );
    assert_ne!(o.reg_conf, Confidence::Insufficient, "{}: regression declined", sc.name);
    assert!(o.reg_err <= 10.0, "{}: regression off by {:.2} pp", sc.name, o.reg_err);
    assert!(
        o.blind_conf == Confidence::Insufficient || o.blind_err <= 10.0,
        "{}: regression without the other stacks off by {:.2} pp",
        sc.name,
        o.blind_err
    );
    assert!(o.join_err <= 2.0, "{}: address join off by {:.2} pp", sc.name, o.join_err);
    // 10% of context samples are charged uniformly at random: a bias up to 0.1 × |share − 1/4|,
    // plus the binomial error of the samples (3.3σ at p = ½).
    let ctx_bound = 0.1 * 75.0 + 100.0 * 3.3 * (0.25 / o.samples.max(1) as f64).sqrt();
    assert!(o.ctx_err <= ctx_bound, "{}: cpu context off by {:.2} pp (bound {ctx_bound:.2})", sc.name, o.ctx_err);
}

/// Queue 0: two large-packet flows, a slow consumer (8 ms residence) and most of the load —
/// it overflows the DDIO ways and causes most misses. Queues 1–3: small/mixed packets,
/// prompt consumers.
const HEAVY: &str = r#"{"queues":4,"ring":256,"pps":2e6,"consumer":"copy","pool_extra":16384,"queue_weights":[3,1,1,1],
  "queue_residence_us":[8000,5,5,5],"max_packets":3000000,
  "flows":[{"queue":0,"weight":2,"pkt_bytes":1500},{"queue":0,"weight":1,"pkt_bytes":1024},
           {"queue":1,"weight":1,"pkt_bytes":256},{"queue":1,"weight":1,"pkt_bytes":512},
           {"queue":2,"weight":1,"pkt_bytes":1500},
           {"queue":3,"weight":3,"pkt_bytes":128},{"queue":3,"weight":1,"pkt_bytes":900}]}"#;

/// Similar queues (weights 1.2/1/0.9/1.1), similar residences, mixed sizes: misses spread.
const BALANCED: &str = r#"{"queues":4,"ring":512,"pps":2.4e6,"consumer":"copy","pool_extra":8192,"queue_weights":[1.2,1,0.9,1.1],
  "queue_residence_us":[1500,1800,1400,1600],"max_packets":3000000,
  "flows":[{"queue":0,"weight":1,"pkt_bytes":1500},{"queue":0,"weight":1,"pkt_bytes":700},
           {"queue":1,"weight":1,"pkt_bytes":1200},{"queue":1,"weight":2,"pkt_bytes":900},
           {"queue":2,"weight":1,"pkt_bytes":1400},{"queue":2,"weight":1,"pkt_bytes":600},
           {"queue":3,"weight":1,"pkt_bytes":1000},{"queue":3,"weight":1,"pkt_bytes":1100}]}"#;

/// Queue 3 carries little traffic but its consumer is starved (25 ms residence); queues 0–2
/// are busy with prompt consumers.
const SMALL_SLOW: &str = r#"{"queues":4,"ring":256,"pps":2e6,"consumer":"copy","pool_extra":16384,"queue_weights":[2,2,1.5,0.5],
  "queue_residence_us":[10,10,10,25000],"max_packets":3000000,
  "flows":[{"queue":0,"weight":1,"pkt_bytes":1500},{"queue":0,"weight":1,"pkt_bytes":300},
           {"queue":1,"weight":3,"pkt_bytes":1024},{"queue":1,"weight":1,"pkt_bytes":64},
           {"queue":2,"weight":1,"pkt_bytes":1500},
           {"queue":3,"weight":1,"pkt_bytes":1400},{"queue":3,"weight":1,"pkt_bytes":800}]}"#;

#[test]
fn ground_truth_heavy_slow_queue() {
    check(&build("heavy-slow-queue", HEAVY, 11), 101);
}

#[test]
fn ground_truth_balanced() {
    check(&build("balanced", BALANCED, 22), 202);
}

#[test]
fn ground_truth_small_queue_long_residence() {
    // The prompt queues' ring lines leak from the DDIO ways at footprint × fill rate whatever
    // their own rate: steady misses, which equal-length intervals cannot tell from a background
    // steady in time, so without the other IIO stacks' bytes the regression declines here. With
    // them the background has its own driver (and at most a miss per line), and the rest is the
    // queues'. Over six more seeds per scenario: 1.4–7.8 pp with the other stacks; without them
    // small declined on four and answered 6.5 and 6.8 pp off on two.
    check(&build("small-queue-long-residence", SMALL_SLOW, 33), 303);
}
