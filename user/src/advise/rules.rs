//! The recommendation rules, each its own function over the same observation and model run:
//! DDIO write allocation, NUMA placement, ring size (and the IIO LLC ways a ring needs),
//! load spreading, buffer reuse, and flow steering. A rule offers a command only where the
//! recorded device can run it, and never a change the model predicts makes the cache worse
//! unless it is for something else, which it then says first.
use super::{
    mean_pkt, median, predict_with_reuse, prediction, read_metric, round1, rx_queues,
    HostObservation, Kind, ModelRun, QueueObservation, Recommendation, BUDGET_EXHAUSTED_FRACTION,
    BURST_HEADROOM, IMBALANCE_RATIO, MAX_RING, MIN_RING, SIGNIFICANT_WRITE_MISS_PCT,
    WARM_READ_MISS_PCT,
};
use crate::model::analytic::{self, Dir, DESC_BYTES_PER_PKT};
use crate::model::geometry::{ways_to_mask, WaysSource};
use crate::model::spec::Reuse;

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

/// The model predicts the metric falls: more than the printed rounding.
fn worse(before: Option<f64>, after: Option<f64>) -> bool {
    matches!((before, after), (Some(b), Some(a)) if a < b - 0.05)
}

/// "predicted M falls (b → a)" for a reason that is not the cache.
fn falls(metric: &str, b: Option<f64>, a: Option<f64>) -> String {
    match (b, a) {
        (Some(b), Some(a)) => format!("the DDIO model predicts {metric} falls ({b:.1} → {a:.1})"),
        _ => format!("the DDIO model predicts no {metric} gain"),
    }
}

/// Recommendations for one host observation, rule by rule. Deterministic: same input,
/// same output.
pub fn recommend(obs: &HostObservation, run: &ModelRun) -> Vec<Recommendation> {
    // Nothing else about DDIO applies until write allocation is on.
    if let Some(r) = write_allocation(obs) {
        return vec![r];
    }
    let mut out = Vec::new();
    let numa = numa_placement(obs, run);
    let numa_mismatch = numa.is_some();
    out.extend(numa);
    if rx_queues(obs).is_empty() {
        return out;
    }
    let rings = RingFacts::of(obs);
    out.extend(ring_size_and_ways(obs, run, &rings));
    out.extend(spread_load(obs, run));
    out.extend(buffer_reuse(obs, run, &rings, numa_mismatch));
    // Socket receive buffers holding more than DDIO keeps until the copy.
    out.extend(super::socket_buffer::socket_buffer(obs, run));
    out
}

/// Write allocation disabled on the NIC's root port: every DMA write goes to DRAM.
fn write_allocation(obs: &HostObservation) -> Option<Recommendation> {
    let c = obs
        .counters
        .as_ref()
        .filter(|c| c.write_allocation_disabled)?;
    let mut evidence = vec![format!(
        "{} counters: inbound writes are non-allocating (IO_CLFLUSH replaces IO_WBMTOI); DDIO write allocation is disabled on this port, every DMA write goes to DRAM",
        c.source
    )];
    // Reading the register runs anywhere; setting bit 7 is a BIOS matter.
    let command = match &obs.root_port {
        Some(rp) => format!(
            "setpci -s {rp} 0x180.l   # PERFCTRLSTS_0: bit 7 Use_Allocating_Flow_Wr must be 1 for DDIO write allocation"
        ),
        None => {
            evidence.push("the recording does not name the NIC's root port: read its PERFCTRLSTS_0 (offset 0x180, bit 7) with setpci -s <root port> 0x180.l".into());
            String::new()
        }
    };
    evidence
        .push("enable Use_Allocating_Flow_Wr in the BIOS (or set bit 7 of that register)".into());
    Some(Recommendation {
        kind: Kind::DdioWriteAllocationDisabled,
        target: obs.iface.clone(),
        command,
        reason: None,
        evidence,
        predicted_metric: None,
        predicted_before: None,
        predicted_after: None,
    })
}

/// Queues processed on another NUMA node than the NIC's: IRQ affinity for the queues that
/// have IRQs, and where the application should run.
fn numa_placement(obs: &HostObservation, run: &ModelRun) -> Option<Recommendation> {
    let nic = obs.nic_numa_node?;
    let mut bad: Vec<(u32, i32)> = obs
        .queue_cpus_numa
        .iter()
        .filter_map(|(q, n)| n.filter(|n| *n != nic).map(|n| (*q, n)))
        .collect();
    bad.sort();
    bad.dedup();
    if bad.is_empty() {
        return None;
    }
    let cpus = obs
        .node_cpulists
        .iter()
        .find(|(n, _)| *n == nic)
        .map(|(_, c)| c.clone());
    // An affinity line only where the queue has an IRQ and node's CPUs are known: anything
    // else would not run as pasted.
    let cmds: Vec<String> = match &cpus {
        Some(c) => bad
            .iter()
            .filter_map(|(q, _)| obs.queue_irqs.iter().find(|(qq, _)| qq == q))
            .map(|(_, irq)| format!("echo {c} > /proc/irq/{irq}/smp_affinity_list"))
            .collect(),
        None => Vec::new(),
    };
    let mut ns: Vec<i32> = bad.iter().map(|b| b.1).collect();
    ns.sort();
    ns.dedup();
    let mut ev = vec![format!(
        "{} is on NUMA node {nic}; queues {} are processed on node(s) {}: DDIO places packets in node {nic}'s LLC, so the processing cores read them across the socket link",
        obs.iface,
        bad.iter().map(|(q, _)| q.to_string()).collect::<Vec<_>>().join(","),
        ns.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
    )];
    if cmds.is_empty() {
        ev.push(format!(
            "the recording knows no IRQ {}for these queues: move their interrupt processing to node {nic}'s CPUs by hand",
            if cpus.is_none() { "and no CPU list of that node " } else { "" }
        ));
    }
    ev.push(format!(
        "run the application that reads the packets on node {nic} too: numactl --cpunodebind={nic} --membind={nic} <application>"
    ));
    if let Some(c) = &obs.counters {
        if let (Some(w), Some(r)) = (c.write_miss_pct, c.read_miss_pct) {
            ev.push(format!(
                "{} counters: inbound write miss {w:.0}%, read miss {r:.0}%",
                c.source
            ));
        }
    }
    let after = prediction(run, None, None).and_then(|p| p.1);
    Some(Recommendation {
        kind: Kind::NumaPlacement,
        target: format!("{} (NUMA node {nic})", obs.iface),
        command: cmds.join("\n"),
        reason: None,
        evidence: ev,
        predicted_metric: Some("cpu_read_hit_pct (LLC hits of the processing cores)".into()),
        // Remote cores never find the packets in their own LLC.
        predicted_before: Some(0.0),
        predicted_after: after,
    })
}

/// What the ring rules and the buffer-reuse rule share: the RX rings now, the ring the
/// bursts need, and how both sit against the usable DDIO capacity.
pub(super) struct RingFacts {
    cur_ring: Option<u32>,
    need_ring: u32,
    cur_fp: Option<u64>,
    usable: u64,
    /// The rings now overflow usable capacity.
    over: bool,
    /// The ring the bursts need fits usable capacity.
    ring_fits: bool,
    measured_misses: bool,
    /// Why the ring rules say what they say: the working set, counters, bursts.
    evidence: Vec<String>,
    /// Why the burst floor is what it is when it is not for the cache (drops, backlog).
    not_cache: Vec<String>,
}

impl RingFacts {
    pub(super) fn of(obs: &HostObservation) -> RingFacts {
        let g = &obs.geometry;
        let rx = rx_queues(obs);
        let cur_ring = rx.iter().filter_map(|q| q.ring_entries).max();
        let pkt = mean_pkt(&rx).round().max(64.0) as u32;
        let nq = rx.len() as u32;
        let mut need_ring = MIN_RING;
        let mut burst_ev = Vec::new();
        let mut not_cache = Vec::new();
        for q in &rx {
            let (f, why, nc) = burst_floor(q);
            need_ring = need_ring.max(f);
            burst_ev.extend(why);
            not_cache.extend(nc);
        }
        let fp =
            |r: u32| analytic::analyse_socket(g, &super::loads(obs, Some(r))).rx_footprint_bytes;
        let usable = g.usable_ddio_bytes();
        let cur_fp = cur_ring.map(fp);
        let counters = obs.counters.as_ref();
        let mut evidence = vec![format!(
            "{nq} RX queues x {} descriptors x {} B lines (+{} B descriptor) = {:.1} MiB working set vs DDIO {:.2} MiB nominal ({} of {} ways, {}) / {:.2} MiB usable",
            cur_ring.map_or("?".into(), |r| r.to_string()),
            analytic::line_rounded(pkt),
            DESC_BYTES_PER_PKT,
            mib(cur_fp.unwrap_or(0)),
            mib(g.ddio_capacity_bytes()),
            g.ddio_ways,
            g.ways,
            // As the JSON spells it.
            match g.ddio_ways_source {
                WaysSource::Measured => "measured",
                WaysSource::Assumed => "assumed",
                WaysSource::Override => "override",
            },
            mib(usable)
        )];
        if let Some(w) = counters.and_then(|c| c.write_miss_pct) {
            evidence.push(format!(
                "{} counters: {w:.0}% of inbound full-line writes miss the LLC",
                counters.map_or("", |c| c.source.as_str())
            ));
        }
        evidence.extend(burst_ev);
        RingFacts {
            cur_ring,
            need_ring,
            cur_fp,
            usable,
            over: cur_fp.is_some_and(|f| f > usable),
            ring_fits: fp(need_ring) <= usable,
            measured_misses: counters
                .and_then(|c| c.write_miss_pct)
                .is_some_and(|w| w >= SIGNIFICANT_WRITE_MISS_PCT),
            evidence,
            not_cache,
        }
    }
}

/// A queue's frame-size mix in words, "62% ≤ 128 B, 38% 1025–2048 B" (buckets of 5% or more;
/// None: no frames sized).
fn size_mix(hist: &[u64]) -> Option<String> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let parts: Vec<String> = hist
        .iter()
        .enumerate()
        .filter(|(_, n)| **n * 20 >= total)
        .map(|(b, n)| {
            let pct = 100.0 * *n as f64 / total as f64;
            let range = match (b, crate::snapshot::size_bucket_max(b)) {
                (0, _) => "≤ 64 B".to_string(),
                (_, Some(hi)) => format!("{}–{hi} B", hi / 2 + 1),
                (_, None) => format!("> {} B", 1u32 << (b + 5)),
            };
            format!("{pct:.0}% {range}")
        })
        .collect();
    Some(format!("{} ({total} timed frames)", parts.join(", ")))
}

/// Ring entries a queue needs to absorb what was observed on it; why; and the part of the
/// why that is not about the cache (drops, a backlog).
fn burst_floor(q: &QueueObservation) -> (u32, Vec<String>, Vec<String>) {
    let mut need = MIN_RING as f64;
    let mut why = Vec::new();
    let mut not_cache = Vec::new();
    if let Some(p) = q.peak_inflight_pkts {
        need = need.max(p as f64 * BURST_HEADROOM);
        why.push(format!("rx{}: peak {} packets in flight", q.queue, p));
    }
    if let Some(r99) = q.residence_ns_p99 {
        // Little's law at the tail: packets that arrive while one waits its p99 residence.
        let inflight = q.pkts_per_s * r99 / 1e9;
        need = need.max(inflight * BURST_HEADROOM);
    }
    let cur = q.ring_entries.unwrap_or(0);
    let exhausted = q.napi_polls > 0
        && q.napi_budget_exhausted as f64 / q.napi_polls as f64 >= BUDGET_EXHAUSTED_FRACTION;
    if exhausted && q.peak_inflight_pkts.is_none() {
        // Backlogged with no measured depth: do not shrink below what it has now.
        need = need.max(cur as f64);
        let w = format!(
            "rx{}: {} of {} NAPI polls exhausted the budget (backlog, keeping ring)",
            q.queue, q.napi_budget_exhausted, q.napi_polls
        );
        why.push(w.clone());
        not_cache.push(w);
    }
    if q.full_drops.ring > 0 && cur > 0 {
        // The ring overflowed: never shrink it, grow it one step.
        need = need.max(cur as f64 * 2.0);
        let w = format!(
            "rx{}: {} drops with the ring full at ring {cur}, by {}",
            q.queue,
            q.full_drops.ring,
            q.full_drops.reasons.join(", ")
        );
        why.push(w.clone());
        not_cache.push(w);
    }
    if let Some(n) = &q.nic_ring_drops {
        let whose = if n.per_queue {
            "its own"
        } else {
            "the device's, queue unknown"
        };
        if n.count > 0 && cur > 0 {
            // The NIC found no free descriptor: a smaller ring would drop more, so never
            // shrink; grow one step.
            need = need.max(cur as f64 * 2.0);
            let w = format!(
                "rx{}: the NIC dropped {} packets for want of descriptors or buffers at ring {cur} ({}, {whose}): not shrinking",
                q.queue,
                n.count,
                n.counters.join(" + ")
            );
            why.push(w.clone());
            not_cache.push(w);
        } else if n.count == 0 {
            why.push(format!(
                "rx{}: no NIC ring-full drops at ring {cur} ({}, {whose})",
                q.queue,
                n.counters.join(" + ")
            ));
        }
    }
    if let Some(mix) = size_mix(&q.size_hist) {
        why.push(format!("rx{}: frame sizes {mix}", q.queue));
    }
    let r = (need.ceil() as u32)
        .next_power_of_two()
        .clamp(MIN_RING, MAX_RING);
    (r, why, not_cache)
}

/// A ring-size recommendation, or None where `ethtool -G` cannot run on the device, the
/// device does not take the ring, or the model predicts a worse cache and nothing else
/// (drops, a backlog) asks for the change.
pub(super) fn ring_change(
    obs: &HostObservation,
    run: &ModelRun,
    f: &RingFacts,
    ring: u32,
    mut evidence: Vec<String>,
) -> Option<Recommendation> {
    let max = obs.device.rx_ring_max?;
    if ring > max || f.cur_ring == Some(ring) {
        return None;
    }
    let (b, a) = match (
        prediction(run, None, None),
        prediction(run, Some(ring), None),
    ) {
        (Some(b), Some(a)) => (b.0, a.0),
        _ => (None, None),
    };
    let grows = f.cur_ring.is_some_and(|c| ring > c);
    let reason = if worse(b, a) {
        // Shrinking is only ever for the cache; growing may be for drops or a backlog.
        if !grows || f.not_cache.is_empty() {
            return None;
        }
        Some(format!(
            "{}: a larger ring is for that, not the cache; {}",
            f.not_cache.join("; "),
            falls("io_write_hit_pct", b, a)
        ))
    } else {
        None
    };
    evidence.push(format!(
        "the driver takes rings of up to {max} entries: {ring} is within it"
    ));
    Some(Recommendation {
        kind: Kind::RingSize,
        target: obs.iface.clone(),
        command: obs
            .device
            .run(&format!("ethtool -G {} rx {ring}", obs.iface)),
        reason,
        evidence,
        predicted_metric: Some("io_write_hit_pct".into()),
        predicted_before: b,
        predicted_after: a,
    })
}

/// Ring size; where no ring both absorbs the bursts and fits, the IIO LLC ways that would
/// hold the burst floor, or fewer queues on the socket when no way count can.
fn ring_size_and_ways(obs: &HostObservation, run: &ModelRun, f: &RingFacts) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let g = &obs.geometry;
    let rx = rx_queues(obs);
    let nq = rx.len() as u32;
    let pkt = mean_pkt(&rx).round().max(64.0) as u32;
    let need_ring = f.need_ring;
    let fp = |r: u32| analytic::analyse_socket(g, &super::loads(obs, Some(r))).rx_footprint_bytes;
    // Shrinking only helps when the current rings overflow usable capacity; misses with a
    // ring that fits have another cause (reuse, placement, allocation).
    let shrink = f.cur_ring.is_some_and(|c| need_ring < c) && f.over;
    let grow = f.cur_ring.is_some_and(|c| need_ring > c);
    // Drops or a backlog ask for a grow whether or not it fits: `ring_change` says what for.
    let asked = grow && !f.not_cache.is_empty();
    if (f.ring_fits && (shrink || grow)) || asked {
        let mut ev = f.evidence.clone();
        ev.push(if f.ring_fits {
            format!(
                "ring {need_ring}: {:.2} MiB working set, within usable DDIO capacity, and ≥ {BURST_HEADROOM}x observed bursts",
                mib(fp(need_ring))
            )
        } else {
            format!(
                "ring {need_ring}: {:.2} MiB working set, more than usable DDIO capacity ({:.2} MiB)",
                mib(fp(need_ring)),
                mib(f.usable)
            )
        });
        out.extend(ring_change(obs, run, f, need_ring, ev));
        return out;
    }
    if f.ring_fits || !(f.over || f.measured_misses) {
        return out;
    }
    // No ring both absorbs bursts and fits: shrink to the burst floor anyway (it is the
    // best a ring can do) and widen DDIO so that floor fits.
    if f.cur_ring.is_some_and(|c| need_ring < c) {
        let fits_ring = analytic::max_ring_within_usable(g, nq, pkt, MIN_RING);
        let mut ev = f.evidence.clone();
        ev.push(format!(
            "no ring both absorbs the observed bursts (needs {need_ring}) and fits usable DDIO capacity{}; {need_ring} is the smallest safe ring",
            fits_ring.map_or(String::new(), |r| format!(" (≤ {r})"))
        ));
        out.extend(ring_change(obs, run, f, need_ring, ev));
    }
    if obs.device.no_ddio {
        // IIO LLC ways are a DDIO register: nothing on this host to set.
        return out;
    }
    let ways_needed = (1..=g.ways).find(|w| {
        let mut gg = g.clone();
        gg.ddio_ways = *w;
        fp(need_ring) <= gg.usable_ddio_bytes()
    });
    // Keep at least one way for the cores: DDIO may not take the whole LLC.
    match ways_needed.filter(|w| *w < g.ways) {
        Some(w) if w > g.ddio_ways => {
            let mask = ways_to_mask(w, g.ways).unwrap_or(0);
            let mut gg = g.clone();
            gg.ddio_ways = w;
            let (b, a) = match (
                prediction(run, Some(need_ring), None),
                prediction(run, Some(need_ring), Some(w)),
            ) {
                (Some(b), Some(a)) => (b.0, a.0),
                _ => (None, None),
            };
            if worse(b, a) {
                return out;
            }
            let mut ev = f.evidence.clone();
            ev.push(format!(
                "{w} DDIO ways ({:.2} MiB usable) hold {nq} rings of {need_ring}: {:.2} MiB; costs the cores {} of {} LLC ways for I/O",
                mib(gg.usable_ddio_bytes()),
                mib(fp(need_ring)),
                w,
                g.ways
            ));
            ev.push("wrmsr is in msr-tools and needs the msr module loaded (modprobe msr)".into());
            out.push(Recommendation {
                kind: Kind::IioLlcWays,
                target: "IIO LLC WAYS (MSR 0xC8B, every socket)".into(),
                command: format!("wrmsr -a 0xc8b {mask:#x}"),
                reason: None,
                evidence: ev,
                predicted_metric: Some("io_write_hit_pct".into()),
                predicted_before: b,
                predicted_after: a,
            });
        }
        Some(_) => {}
        None => {
            // How many queues' rings of the burst floor the most DDIO can hold.
            let mut gg = g.clone();
            gg.ddio_ways = g.ways - 1;
            let per_q = fp(need_ring) / u64::from(nq.max(1));
            let fit_q = gg.usable_ddio_bytes().checked_div(per_q).unwrap_or(0);
            let mut ev = f.evidence.clone();
            ev.push(format!(
                "even {} DDIO ways cannot hold {nq} rings of {need_ring}: spread the queues over more sockets or NICs, or keep at most {fit_q} RX queues on this socket (ethtool -L)",
                g.ways - 1
            ));
            out.push(Recommendation {
                kind: Kind::SpreadLoad,
                target: obs.iface.clone(),
                // How many channels of which kind the device has is the operator's to
                // choose: no command would run as pasted on every driver.
                command: String::new(),
                reason: None,
                evidence: ev,
                predicted_metric: None,
                predicted_before: None,
                predicted_after: None,
            });
        }
    }
    out
}

/// One RX queue carries most of the load and is backlogged: spread it with the RSS
/// indirection table, where the device has one and its load is more than one flow.
fn spread_load(obs: &HostObservation, run: &ModelRun) -> Option<Recommendation> {
    let rx = rx_queues(obs);
    let total_bps: f64 = rx.iter().map(|q| q.bytes_per_s).sum();
    if rx.len() < 2 || total_bps <= 0.0 {
        return None;
    }
    let mean = total_bps / rx.len() as f64;
    let hot = rx.iter().copied().fold(
        rx[0],
        |a, b| if b.bytes_per_s > a.bytes_per_s { b } else { a },
    );
    let hot_exhausted = hot.napi_polls > 0
        && hot.napi_budget_exhausted as f64 / hot.napi_polls as f64 >= BUDGET_EXHAUSTED_FRACTION;
    let residences: Vec<f64> = rx.iter().filter_map(|q| q.residence_ns_p50).collect();
    let med = median(&residences);
    let hot_slow = matches!(hot.residence_ns_p50, Some(h) if med > 0.0 && h > 2.0 * med);
    let hot_dropping = hot.full_drops.backlog > 0;
    if hot.bytes_per_s < IMBALANCE_RATIO * mean || !(hot_exhausted || hot_slow || hot_dropping) {
        return None;
    }
    // `ethtool -X` needs an indirection table, and moves whole flows: a queue whose load
    // is one flow stays as hot however the table is spread.
    let table = obs.device.rss_table?;
    if hot
        .top_flow_bytes_per_s
        .is_some_and(|f| f >= IMBALANCE_RATIO * mean)
    {
        return None;
    }
    let before = prediction(run, None, None).and_then(|p| p.1);
    let mut even = obs.clone();
    let pps: f64 = rx.iter().map(|q| q.pkts_per_s).sum::<f64>() / rx.len() as f64;
    for q in even.queues.iter_mut().filter(|q| q.dir == Dir::Rx) {
        q.pkts_per_s = pps;
        q.bytes_per_s = mean;
        if med > 0.0 {
            q.residence_ns_p50 = Some(med);
        }
    }
    let after = run
        .for_observation(&even)
        .and_then(|r| run.read_hit_pct(&r))
        .map(round1);
    let mut backlog = Vec::new();
    if hot_exhausted {
        backlog.push("its NAPI polls exhaust the budget");
    }
    if hot_slow {
        backlog.push("its packets wait over 2x the median residence");
    }
    let drops = format!(
        "it dropped {} packets for want of room, by {}",
        hot.full_drops.backlog,
        hot.full_drops.reasons.join(", ")
    );
    if hot_dropping {
        backlog.push(&drops);
    }
    let evidence = vec![
        format!(
            "rx{} carries {:.1}x the mean queue load ({:.0} vs {:.0} MB/s); {}",
            hot.queue,
            hot.bytes_per_s / mean,
            hot.bytes_per_s / 1e6,
            mean / 1e6,
            backlog.join("; ")
        ),
        format!("the device's RSS indirection table has {table} entries"),
    ];
    let metric = read_metric(obs);
    let reason = (after.is_none() || worse(before, after) || before == after).then(|| {
        format!(
            "rx{}'s backlog ({}): spreading is for that, not the cache; {}",
            hot.queue,
            backlog.join("; "),
            falls(metric.split(' ').next().unwrap_or(metric), before, after)
        )
    });
    let n = obs.device.rx_queues.max(rx.len() as u32);
    Some(Recommendation {
        kind: Kind::SpreadLoad,
        target: format!("{} rx{}", obs.iface, hot.queue),
        command: obs
            .device
            .run(&format!("ethtool -X {} equal {n}", obs.iface)),
        reason,
        evidence,
        predicted_metric: Some(metric.into()),
        predicted_before: before,
        predicted_after: after,
    })
}

/// Buffers not reused while warm: writes miss although reads hit and the ring fits. Not a
/// command: where the buffers come from is the application's or the driver's choice.
fn buffer_reuse(
    obs: &HostObservation,
    run: &ModelRun,
    f: &RingFacts,
    numa_mismatch: bool,
) -> Option<Recommendation> {
    let c = obs.counters.as_ref()?;
    let (w, r) = (c.write_miss_pct?, c.read_miss_pct?);
    let ring_explains = f.over || !f.ring_fits;
    if numa_mismatch || w < SIGNIFICANT_WRITE_MISS_PCT || r > WARM_READ_MISS_PCT || ring_explains {
        return None;
    }
    let b = predict_with_reuse(run, Reuse::Fifo);
    let a = predict_with_reuse(run, Reuse::Recycle);
    if worse(b, a) {
        return None;
    }
    Some(Recommendation {
        kind: Kind::BufferReuse,
        target: obs.iface.clone(),
        command: String::new(),
        reason: None,
        evidence: vec![
            format!("{} counters: {w:.0}% of inbound writes miss while {r:.0}% of inbound reads miss", c.source),
            format!(
                "the ring working set ({:.2} MiB) fits usable DDIO capacity ({:.2} MiB), so the misses come from buffers that are not reused while warm (FIFO reuse over a large pool)",
                mib(f.cur_fp.unwrap_or(0)),
                mib(f.usable)
            ),
            "enable buffer recycling: DPDK mempool per-lcore cache (rte_pktmbuf_pool_create cache_size > 0, e.g. 256) or a smaller mbuf pool; kernel: keep page_pool recycling on (no XDP/skb paths that release pages)".into(),
        ],
        predicted_metric: Some("io_write_hit_pct".into()),
        predicted_before: b,
        predicted_after: a,
    })
}
/// A flow the attribution charged, on the RX queue the probes saw it on, with its rates.
#[derive(Debug, Clone, PartialEq)]
pub struct AttributedFlow {
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    pub queue: u32,
    pub share_pct: f64,
    pub bytes_per_s: f64,
    pub pkts_per_s: f64,
}

/// A queue must carry this share of the attributed misses, and this many times its even
/// share, for its top flow to be worth moving.
const STEER_MIN_QUEUE_SHARE: f64 = 40.0;
const STEER_OVER_EVEN: f64 = 1.5;
/// The flow must carry this share of the attributed misses itself.
const STEER_MIN_FLOW_SHARE: f64 = 10.0;
/// And the model must predict at least this gain (hit-rate points) from moving it.
pub(super) const STEER_MIN_GAIN: f64 = 1.0;

/// Steer the flow that matters off the queue that matters: when one RX queue carries most of
/// the attributed misses (`rx_shares`: (queue, share %)), move its top attributed flow to the RX
/// queue with the fewest, with an ntuple rule, if the model predicts a gain. `how`: the
/// attribution's method and confidence, for the evidence.
pub fn steer_flow(
    obs: &HostObservation,
    run: &ModelRun,
    rx_shares: &[(u32, f64)],
    flows: &[AttributedFlow],
    how: &str,
) -> Option<Recommendation> {
    let rx: Vec<&QueueObservation> = obs.queues.iter().filter(|q| q.dir == Dir::Rx).collect();
    // ntuple filters come with multi-queue receive: a device without an RSS table (veth,
    // tun) has none, and `ethtool -N` would not run.
    if rx.len() < 2 || obs.device.rss_table.is_none() {
        return None;
    }
    let share = |q: u32| rx_shares.iter().find(|s| s.0 == q).map_or(0.0, |s| s.1);
    let hot = rx
        .iter()
        .copied()
        .max_by(|a, b| share(a.queue).total_cmp(&share(b.queue)))?;
    let hot_share = share(hot.queue);
    if hot_share < STEER_MIN_QUEUE_SHARE || hot_share < STEER_OVER_EVEN * 100.0 / rx.len() as f64 {
        return None;
    }
    let cold = rx
        .iter()
        .copied()
        .filter(|q| q.queue != hot.queue)
        .min_by(|a, b| {
            share(a.queue)
                .total_cmp(&share(b.queue))
                .then(a.bytes_per_s.total_cmp(&b.bytes_per_s))
        })?;
    let flow = flows
        .iter()
        .filter(|f| f.queue == hot.queue && f.share_pct >= STEER_MIN_FLOW_SHARE)
        .max_by(|a, b| a.share_pct.total_cmp(&b.share_pct))?;
    let (_, before) = prediction(run, None, None)?;
    let mut moved = obs.clone();
    for q in moved.queues.iter_mut().filter(|q| q.dir == Dir::Rx) {
        let sign = if q.queue == hot.queue {
            -1.0
        } else if q.queue == cold.queue {
            1.0
        } else {
            continue;
        };
        q.pkts_per_s = (q.pkts_per_s + sign * flow.pkts_per_s).max(0.0);
        q.bytes_per_s = (q.bytes_per_s + sign * flow.bytes_per_s).max(0.0);
        if q.pkts_per_s > 0.0 {
            q.avg_pkt_bytes = q.bytes_per_s / q.pkts_per_s;
        }
    }
    let after = run
        .for_observation(&moved)
        .and_then(|r| run.read_hit_pct(&r))
        .map(round1);
    let (b, a) = (before?, after?);
    if a - b < STEER_MIN_GAIN {
        return None;
    }
    let v6 = flow.src.contains(':') || flow.dst.contains(':');
    let flow_type = format!("{}{}", flow.proto, if v6 { "6" } else { "4" });
    Some(Recommendation {
        kind: Kind::SteerFlow,
        target: format!("{} rx{} {} {}:{} -> {}:{}", obs.iface, hot.queue, flow.proto, flow.src, flow.sport, flow.dst, flow.dport),
        command: obs.device.run(&format!(
            "ethtool -N {} flow-type {flow_type} src-ip {} dst-ip {} src-port {} dst-port {} action {}",
            obs.iface, flow.src, flow.dst, flow.sport, flow.dport, cold.queue
        )),
        reason: None,
        evidence: vec![
            format!("rx{} carries {hot_share:.1}% of the attributed misses ({how})", hot.queue),
            format!(
                "its top flow {} {}:{} -> {}:{} carries {:.1}% ({:.0} MB/s)",
                flow.proto,
                flow.src,
                flow.sport,
                flow.dst,
                flow.dport,
                flow.share_pct,
                flow.bytes_per_s / 1e6
            ),
            format!("rx{} carries the fewest ({:.1}%)", cold.queue, share(cold.queue)),
            format!("ntuple filters must be on: {}", obs.device.run(&format!("ethtool -K {} ntuple on", obs.iface))),
        ],
        predicted_metric: Some(read_metric(obs).into()),
        predicted_before: Some(b),
        predicted_after: Some(a),
    })
}
