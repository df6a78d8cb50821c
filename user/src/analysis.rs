//! Turns a recording into the inputs of the model and the recommendation
//! engine (LLC geometry, per-queue rates, residence times, bursts, placement,
//! counter evidence), so `recommend`, `report` and the HTML report agree.
use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::advise::{self, CounterEvidence, HostObservation, ModelView, QueueObservation, Recommendation};
use crate::model::analytic::{self, Dir as MDir};
use crate::model::geometry::{LlcGeometry, WaysSource};
use crate::recording::Recording;
use crate::snapshot::{hist_percentile, Dir};

/// Fewer packets than this on a queue: no predicted hit rate for it.
pub const MIN_PACKETS_FOR_PREDICTION: f64 = 1000.0;

/// Command-line overrides, so a recording from one host can be evaluated for another cache
/// than the one it was taken on.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct GeometryOverrides {
    /// LLC size in MiB (default: the recording host's).
    #[arg(long, value_name = "MIB")]
    pub llc_mib: Option<f64>,
    /// LLC associativity (default: the recording host's).
    #[arg(long, value_name = "N")]
    pub llc_ways: Option<u32>,
    /// DDIO (IIO LLC WAYS) ways (default: read from MSR 0xC8B at record time, else 2).
    #[arg(long, value_name = "N")]
    pub ddio_ways: Option<u32>,
}

/// The geometry recorded with the run (sysfs + MSR 0xC8B at record time),
/// else the recorded host's LLC with the default 2 DDIO ways, then overrides.
pub fn geometry(rec: &Recording, o: GeometryOverrides) -> Result<LlcGeometry> {
    let base = match rec.meta.geometry.clone() {
        Some(g) => Some(g),
        None => rec.host().llc.and_then(|l| LlcGeometry::new(l.size_bytes, l.ways, l.line_bytes.max(64)).ok()),
    };
    let g = match base {
        Some(g) => g,
        None => match (o.llc_mib, o.llc_ways) {
            (Some(mib), Some(ways)) => LlcGeometry::new((mib * 1048576.0) as u64, ways, 64)?,
            _ => bail!("{} records no LLC geometry; pass --llc-mib and --llc-ways", rec.path.display()),
        },
    };
    Ok(g.with_overrides(o.llc_mib, o.llc_ways, o.ddio_ways)?)
}

fn mdir(d: Dir) -> MDir {
    match d {
        Dir::Rx => MDir::Rx,
        Dir::Tx => MDir::Tx,
    }
}

/// Trailing queue number of an IRQ name ("mlx5_comp3@pci:…", "eth0-TxRx-3").
fn irq_queue(name: &str) -> Option<u32> {
    let head = name.split('@').next().unwrap_or(name);
    let digits: String = head.chars().rev().take_while(|c| c.is_ascii_digit()).collect::<Vec<_>>().into_iter().rev().collect();
    digits.parse().ok()
}

pub fn observation(rec: &Recording, o: GeometryOverrides) -> Result<HostObservation> {
    let iface = rec.iface();
    let host = rec.host();
    let dur = rec.duration_s().max(1e-9);
    let rx_stage_total = 3; // driver_to_free: DMA hand-up to the buffer's release
    let mut queues = Vec::new();
    for q in rec.queue_totals() {
        if q.packets == 0 {
            continue;
        }
        let life = match q.dir {
            Dir::Rx => rx_stage_total,
            Dir::Tx => 2, // xmit_to_free: the NIC's DMA read window
        };
        // Residence until the last CPU touch: sampled lives where there are
        // enough, the lifetime histogram otherwise.
        let mut lives: Vec<f64> = rec
            .snapshots
            .iter()
            .flat_map(|s| s.samples.iter())
            .filter(|p| p.dir == q.dir && p.queue == q.queue && p.ts[0] > 0)
            .filter_map(|p| {
                let last = if p.dir == Dir::Rx && p.ts[2] > 0 { p.ts[2] } else { p.free_ns };
                (last > p.ts[0]).then(|| (last - p.ts[0]) as f64)
            })
            .collect();
        lives.sort_by(|a, b| a.total_cmp(b));
        let pct = |v: &[f64], p: f64| v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied();
        let (p50, p99) = if lives.len() >= 20 {
            (pct(&lives, 0.5), pct(&lives, 0.99))
        } else {
            let h = &q.stage_hist[life];
            (
                hist_percentile(h, 50.0, q.stage_max_ns[life]).map(|v| v as f64),
                hist_percentile(h, 99.0, q.stage_max_ns[life]).map(|v| v as f64),
            )
        };
        // Peak in flight: Little's law per interval (rate × mean lifetime).
        let peak = rec
            .snapshots
            .iter()
            .filter_map(|s| {
                let x = s.queues.iter().find(|x| x.dir == q.dir && x.queue == q.queue)?;
                let n = x.stage_count[life];
                (n > 0 && s.dur_ns > 0).then(|| {
                    let mean_ns = x.stage_sum_ns[life] as f64 / n as f64;
                    (x.packets as f64 / (s.dur_ns as f64 / 1e9) * mean_ns / 1e9).ceil() as u64
                })
            })
            .max();
        queues.push(QueueObservation {
            dir: mdir(q.dir),
            queue: q.queue,
            ring_entries: match q.dir {
                Dir::Rx => iface.rx_ring,
                Dir::Tx => iface.tx_ring,
            },
            pkts_per_s: q.packets as f64 / dur,
            bytes_per_s: q.bytes as f64 / dur,
            avg_pkt_bytes: q.bytes as f64 / q.packets as f64,
            residence_ns_p50: p50,
            residence_ns_p99: p99,
            napi_polls: q.napi_polls,
            napi_budget_exhausted: q.napi_budget_exhausted,
            peak_inflight_pkts: peak,
            drops: q.drops,
        });
    }
    // Where each queue is processed: its IRQ's CPUs, else the CPUs that freed its sampled packets.
    let mut queue_cpus_numa = Vec::new();
    let mut queue_irqs = Vec::new();
    for (irq, info) in &iface.irqs {
        if let Some(q) = irq_queue(&info.name) {
            queue_irqs.push((q, *irq));
            let node = info.cpus.first().and_then(|c| host.cpu_node.get(c)).copied();
            queue_cpus_numa.push((q, node));
        }
    }
    if queue_cpus_numa.is_empty() {
        let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
        for p in rec.snapshots.iter().flat_map(|s| s.samples.iter()).filter(|p| p.dir == Dir::Rx) {
            seen.entry(p.queue).or_insert(p.cpu);
        }
        queue_cpus_numa = seen.into_iter().map(|(q, cpu)| (q, host.cpu_node.get(&cpu).copied())).collect();
    }
    let mut node_cpus: BTreeMap<i32, Vec<u32>> = BTreeMap::new();
    for (cpu, node) in &host.cpu_node {
        node_cpus.entry(*node).or_default().push(*cpu);
    }
    let node_cpulists = node_cpus
        .into_iter()
        .map(|(n, cpus)| (n, cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")))
        .collect();
    let counters = {
        let r = crate::report::build(rec).counters;
        let usable = matches!(r.source.as_str(), "live" | "imported");
        let socket = iface.counter_socket();
        r.sockets
            .iter()
            .find(|s| s.socket == socket)
            .or_else(|| r.sockets.first())
            .filter(|_| usable)
            .map(|s| CounterEvidence {
                write_miss_pct: s.write_miss_pct,
                read_miss_pct: s.read_miss_pct,
                write_allocation_disabled: s.write_allocation_disabled,
                source: r.source.clone(),
            })
    };
    Ok(HostObservation {
        iface: iface.name.clone(),
        geometry: geometry(rec, o)?,
        nic_numa_node: iface.numa_node,
        queue_cpus_numa,
        queue_irqs,
        node_cpulists,
        root_port: iface.bus_info.clone(),
        consumer: None,
        queues,
        counters,
    })
}

/// What `recommend` prints and the report embeds.
#[derive(Debug, Serialize)]
pub struct Advice {
    pub attribution: AttributionReport,
    pub model: ModelView,
    pub geometry: LlcGeometry,
    /// "measured" when MSR 0xC8B was read at record time; "assumed" otherwise.
    pub ddio_ways_note: String,
    /// What the model had to assume about this recording, in plain words.
    pub notes: Vec<String>,
    pub recommendations: Vec<Recommendation>,
}

pub fn advise(rec: &Recording, o: GeometryOverrides) -> Result<Advice> {
    let obs = observation(rec, o)?;
    let note = match obs.geometry.ddio_ways_source {
        WaysSource::Measured => "measured (MSR 0xC8B)".to_string(),
        WaysSource::Assumed => format!("assumed {} (MSR 0xC8B not readable at record time)", obs.geometry.ddio_ways),
        WaysSource::Override => "given on the command line".to_string(),
    };
    let attribution = attribution(rec, Some(&obs));
    let mut recommendations = advise::recommend(&obs);
    let iface = rec.iface();
    for r in recommendations.iter_mut().filter(|r| r.kind == "spread_load") {
        // Spread over every configured queue, not only the ones that saw traffic.
        if iface.rx_queues > 0 {
            r.command = format!("ethtool -X {} equal {}", iface.name, iface.rx_queues);
        }
        if iface.driver.as_deref() == Some("veth") {
            r.evidence.push(
                "veth has no RSS indirection table: spread flows by the sender's TX queue (XPS) instead".to_string(),
            );
        }
    }
    let flows = attributed_flows(rec, &attribution.chosen);
    target_with_attribution(&mut recommendations, &attribution.chosen, &flows);
    if let Some(r) = steer_attributed_flow(&obs, iface.driver.as_deref() == Some("veth"), &attribution.chosen, &flows) {
        recommendations.insert(0, r);
    }
    let mut model = advise::model_view(&obs);
    // A queue that carried a handful of packets gives the simulator nothing to
    // measure: no predicted hit rate rather than a confident 0 %.
    let dur = rec.duration_s().max(1e-9);
    for q in &mut model.queues {
        let carried = obs.queues.iter().find(|o| o.dir == q.dir && o.queue == q.queue).map_or(0.0, |o| o.pkts_per_s * dur);
        if carried < MIN_PACKETS_FOR_PREDICTION {
            q.predicted_write_hit_pct = None;
            q.predicted_read_hit_pct = None;
        }
    }
    let mut notes = Vec::new();
    if let Some(crate::counters::Detection::Unsupported { reason, .. }) = rec.meta.platform_detection() {
        notes.push(format!(
            "the recording host has no Intel DDIO ({reason}): the model shows what an Intel LLC of the recorded size and ways would do with this traffic"
        ));
    }
    if obs.queues.iter().filter(|q| q.dir == MDir::Rx).all(|q| q.ring_entries.is_none()) {
        notes.push(format!(
            "{} reports no ring size: the model assumes 1024 descriptors per RX queue, and makes no ring-size recommendation",
            iface.driver.as_deref().unwrap_or("the driver")
        ));
    }
    Ok(Advice { attribution, model, geometry: obs.geometry.clone(), ddio_ways_note: note, notes, recommendations })
}

/// Put the attributed misses behind each recommendation that names a queue, and
/// order the recommendations by the share of misses their queue carries, so the
/// queues that matter come first.
/// The attributed flows received on the traced device, each on the RX queue the probes saw it
/// on, with its rates over the recording.
fn attributed_flows(rec: &Recording, a: &crate::attribution::Attribution) -> Vec<advise::AttributedFlow> {
    let dur = rec.duration_s().max(1e-9);
    a.flows
        .iter()
        .filter_map(|f| {
            let seen = rec.flows.iter().find(|c| {
                c.key.dir == Dir::Rx
                    && (c.key.proto.as_str(), c.key.src.as_str(), c.key.sport, c.key.dst.as_str(), c.key.dport)
                        == (f.proto.as_str(), f.src.as_str(), f.sport, f.dst.as_str(), f.dport)
            })?;
            Some(advise::AttributedFlow {
                proto: f.proto.clone(),
                src: f.src.clone(),
                sport: f.sport,
                dst: f.dst.clone(),
                dport: f.dport,
                queue: seen.queue,
                share_pct: f.share_pct,
                bytes_per_s: seen.bytes as f64 / dur,
                pkts_per_s: seen.packets as f64 / dur,
            })
        })
        .collect()
}

/// `advise::steer_flow` on the attribution's RX queue shares and flows.
fn steer_attributed_flow(
    obs: &HostObservation,
    veth: bool,
    a: &crate::attribution::Attribution,
    flows: &[advise::AttributedFlow],
) -> Option<Recommendation> {
    use crate::attribution::{Confidence, Method};
    // Measured shares only: steering by the model prior would be the model agreeing with itself.
    if a.confidence == Confidence::Insufficient || !matches!(a.method, Method::AddressJoin | Method::CpuContext | Method::Regression) {
        return None;
    }
    let rx_shares: Vec<(u32, f64)> = a.queues.iter().filter(|q| q.dir == "rx").map(|q| (q.queue, q.share_pct)).collect();
    let mut r = advise::steer_flow(obs, &rx_shares, flows, &attribution_label(a))?;
    if veth {
        r.evidence.push("veth has no ntuple filters: send the flow from another TX queue of the sender (XPS) instead".into());
    } else {
        r.evidence.push(format!("ntuple filters must be on: ethtool -K {} ntuple on", obs.iface));
    }
    Some(r)
}

/// "method, confidence" for evidence lines, and whether the counts are a stand-in's samples.
fn attribution_label(a: &crate::attribution::Attribution) -> String {
    let name = |v: serde_json::Result<serde_json::Value>| v.ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    format!(
        "{}, {} confidence{}",
        name(serde_json::to_value(a.method)),
        name(serde_json::to_value(a.confidence)),
        if a.counts_are_samples { "; software stand-in samples, not measured misses" } else { "" }
    )
}

fn target_with_attribution(recs: &mut [Recommendation], a: &crate::attribution::Attribution, flows: &[advise::AttributedFlow]) {
    use crate::attribution::Confidence;
    if a.confidence == Confidence::Insufficient || a.queues.is_empty() {
        return;
    }
    let how = attribution_label(a);
    let share_of = |target: &str| -> Option<&crate::attribution::QueueShare> {
        a.queues.iter().find(|q| {
            let name = format!("{}{}", q.dir, q.queue);
            target.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == name)
        })
    };
    for r in recs.iter_mut() {
        if let Some(q) = share_of(&r.target) {
            r.evidence.push(format!(
                "{}{} carries {:.1}% of the attributed misses ({how})",
                q.dir, q.queue, q.share_pct
            ));
            // The queue's own top flow (flows are known by RX queue).
            let top = flows.iter().filter(|f| q.dir == "rx" && f.queue == q.queue).max_by(|x, y| x.share_pct.total_cmp(&y.share_pct));
            if let Some(top) = top {
                r.evidence.push(format!(
                    "its top flow by attributed misses: {} {}:{} -> {}:{} ({:.1}%)",
                    top.proto, top.src, top.sport, top.dst, top.dport, top.share_pct
                ));
            }
        }
    }
    recs.sort_by(|x, y| {
        let s = |r: &Recommendation| share_of(&r.target).map_or(-1.0, |q| q.share_pct);
        s(y).total_cmp(&s(x))
    });
}

#[cfg(test)]
mod tests {
    use super::{irq_queue, queue_features};
    use crate::snapshot::{Dir, QueueCounters};

    #[test]
    fn recommendations_follow_the_attributed_misses() {
        use crate::advise::{AttributedFlow, Recommendation};
        use crate::attribution::{Attribution, Confidence, Method, QueueShare};
        let rec = |target: &str| Recommendation {
            kind: "ring_size".into(),
            target: target.into(),
            command: String::new(),
            evidence: Vec::new(),
            predicted_metric: None,
            predicted_before: None,
            predicted_after: None,
        };
        let share = |queue, share_pct| QueueShare { dir: "rx".into(), queue, misses: share_pct * 10.0, share_pct, ci_pct: None };
        let a = Attribution {
            method: Method::AddressJoin,
            confidence: Confidence::High,
            queues: vec![share(0, 30.0), share(1, 70.0)],
            flows: Vec::new(),
            notes: Vec::new(),
            counts_are_samples: false,
        };
        let flow = |sport, queue, share_pct| AttributedFlow {
            proto: "udp".into(),
            src: "10.0.0.1".into(),
            sport,
            dst: "10.0.0.2".into(),
            dport: 9,
            queue,
            share_pct,
            bytes_per_s: 1e6,
            pkts_per_s: 1e3,
        };
        // The overall top flow is on rx1; rx0's own top flow is the smaller one on rx0.
        let flows = [flow(1000, 1, 60.0), flow(2000, 0, 20.0), flow(3000, 0, 10.0)];
        let mut recs = vec![rec("ens2 rx0"), rec("ens2"), rec("ens2 rx1")];
        super::target_with_attribution(&mut recs, &a, &flows);
        // The queue with the most attributed misses first; a target naming no queue last.
        assert_eq!(recs.iter().map(|r| r.target.as_str()).collect::<Vec<_>>(), ["ens2 rx1", "ens2 rx0", "ens2"]);
        assert!(recs[0].evidence[0].contains("rx1 carries 70.0%"), "{:?}", recs[0].evidence);
        assert!(recs[0].evidence[1].contains(":1000 ") && recs[1].evidence[1].contains(":2000 "), "{:?}", recs);
        assert!(recs[2].evidence.is_empty());
    }

    #[test]
    fn regression_features_of_a_queue() {
        let mut q = QueueCounters::new(Dir::Rx, 2);
        q.packets = 1_000;
        q.bytes = 1_000 * 1514;
        q.stage_count[3] = 100;
        q.stage_sum_ns[3] = 100 * 20_000; // 20 µs from DMA to free
        let f = queue_features(&q, 1_000_000_000, Some(1024), Some(1514));
        assert_eq!((f.queue.dir.as_str(), f.queue.queue), ("rx", 2));
        assert_eq!(f.inbound_bytes, 1_514_000.0);
        // Little's law: 1.514 MB/s for 20 µs.
        assert!((f.inflight_bytes.unwrap() - 30.28).abs() < 1e-6, "{:?}", f.inflight_bytes);
        // 1024 entries × 24 lines (1514 B) + 1024 × 64 B of descriptors.
        assert_eq!(f.footprint_bytes, Some((1024 * 24 * 64 + 1024 * 64) as f64));
        // No ring size (veth, no ethtool -g) or a queue that never carried a packet: no footprint,
        // not a zero one.
        assert_eq!(queue_features(&q, 1_000_000_000, None, Some(1514)).footprint_bytes, None);
        assert_eq!(queue_features(&q, 1_000_000_000, Some(1024), None).footprint_bytes, None);
        // Idle this interval: nothing in flight, and its ring's footprint all the same.
        let idle = queue_features(&QueueCounters::new(Dir::Tx, 0), 1_000_000_000, Some(512), Some(64));
        assert_eq!((idle.inflight_bytes, idle.footprint_bytes), (Some(0.0), Some((512 * 64 + 512 * 64) as f64)));
        // Packets but none timed: in-flight unknown.
        let mut untimed = q.clone();
        untimed.stage_count[3] = 0;
        assert_eq!(queue_features(&untimed, 1_000_000_000, Some(1024), Some(1514)).inflight_bytes, None);
    }

    #[test]
    fn queue_numbers_from_irq_names() {
        assert_eq!(irq_queue("mlx5_comp3@pci:0000:5e:00.0"), Some(3));
        assert_eq!(irq_queue("ens1f0-TxRx-12"), Some(12));
        assert_eq!(irq_queue("ens1f0-TxRx-"), None);
    }

    #[test]
    fn other_stacks_only_while_the_nic_stack_is_the_traced_device() {
        use crate::counters::CounterReading;
        use crate::snapshot::{Dir, QueueCounters, Snapshot};
        let row = |pmu: &str, ev: &str, units: f64| CounterReading {
            t_ns: 0,
            socket: 0,
            pmu: pmu.into(),
            event: ev.into(),
            value: units,
            raw: units as u64,
            enabled_ns: 1,
            running_ns: 1,
        };
        let (w, r) = ("UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0", "UNC_IIO_DATA_REQ_OF_CPU.MEM_READ.PART0");
        // 1000 RX packets of 1000 bytes: the NIC's stack writes 1.1 MB (data and completions).
        let snap = |nic_write_units: f64| Snapshot {
            queues: vec![QueueCounters { packets: 1000, bytes: 1_000_000, ..QueueCounters::new(Dir::Rx, 0) }],
            counters: vec![
                row("iio", w, nic_write_units + 500_000.0),
                row("iio", r, 40_000.0),
                row("uncore_iio_2", w, nic_write_units),
                row("uncore_iio_2", r, 10_000.0),
            ],
            ..Default::default()
        };
        let traced = [snap(275_000.0), snap(250_000.0)];
        assert_eq!(
            super::other_stacks_bytes(&traced, 0, Some("uncore_iio_2")),
            vec![(Some(2e6), Some(120_000.0)); 2]
        );
        // No box for the NIC, or no per-box rows: not measured.
        assert_eq!(super::other_stacks_bytes(&traced, 0, None), vec![(None, None); 2]);
        assert_eq!(super::other_stacks_bytes(&traced, 0, Some("uncore_iio_7")), vec![(None, None); 2]);
        // The NIC's stack writes 4× what the device received: another device shares it, so its
        // writes are not known; reads still are.
        let shared = [snap(1_000_000.0)];
        assert_eq!(super::other_stacks_bytes(&shared, 0, Some("uncore_iio_2")), vec![(None, Some(120_000.0))]);
        // The box carries a tenth of what the device received: not the NIC's stack (wrong box or
        // socket), so the "other" bytes would hold the NIC's own DMA.
        let wrong = [snap(25_000.0)];
        assert_eq!(super::other_stacks_bytes(&wrong, 0, Some("uncore_iio_2")), vec![(None, Some(120_000.0))]);
    }
}

/// Per snapshot, the inbound DMA (write, read) bytes of the socket's IIO stacks other than the
/// NIC's: the driver of the I/O misses no queue causes. Trusted per direction only while the
/// NIC's stack carried what the traced device moved: no more than twice its packets plus a
/// descriptor line each (more: an untraced device behind the same stack, a second port, whose
/// misses would be charged to the queues), and at least half its packet bytes (less: the box
/// or socket is not the NIC's, and the "other" bytes would hold the NIC's own DMA). None: not
/// measured (the regression then takes the background as steady in time).
pub fn other_stacks_bytes(snaps: &[crate::snapshot::Snapshot], socket: u32, nic_box: Option<&str>) -> Vec<(Option<f64>, Option<f64>)> {
    use crate::counters::metrics::stack_split;
    let splits: Vec<_> = snaps.iter().map(|s| nic_box.and_then(|b| stack_split(&s.counters, socket, b))).collect();
    let (mut moved, mut payload, mut seen) = ([0.0f64; 2], [0.0f64; 2], [0.0f64; 2]);
    for (s, sp) in snaps.iter().zip(&splits) {
        let Some(sp) = sp else { continue };
        let lines: f64 = s.queues.iter().map(|q| 64.0 * q.packets as f64).sum();
        let bytes = |d: Dir| s.queues.iter().filter(|q| q.dir == d).map(|q| q.bytes as f64).sum::<f64>();
        payload[0] += bytes(Dir::Rx);
        payload[1] += bytes(Dir::Tx);
        moved[0] += bytes(Dir::Rx) + lines;
        moved[1] += bytes(Dir::Tx) + lines;
        seen[0] += sp.nic_write_bytes;
        seen[1] += sp.nic_read_bytes;
    }
    let carried = |d: usize| seen[d] <= 2.0 * moved[d] && seen[d] >= 0.5 * payload[d];
    let (write_ok, read_ok) = (carried(0), carried(1));
    splits
        .iter()
        .map(|sp| match sp {
            Some(p) => (write_ok.then_some(p.other_write_bytes), read_ok.then_some(p.other_read_bytes)),
            None => (None, None),
        })
        .collect()
}

/// One queue's regression features over an interval of `dur_ns`: its bytes; in-flight bytes by
/// Little's law from its measured lifetime stage (none carried: none in flight); the ring's DDIO
/// footprint from its entries (`ring`, as ethtool reports them) and the queue's mean packet over
/// the recording (`mean_pkt`, bytes) in whole lines, as the model and the ground truth count it:
/// the ring is there, idle or not.
fn queue_features(
    q: &crate::snapshot::QueueCounters,
    dur_ns: u64,
    ring: Option<u32>,
    mean_pkt: Option<u32>,
) -> crate::attribution::QueueFeatures {
    let life = if q.dir == Dir::Rx { 3 } else { 2 };
    let inflight = if q.bytes == 0 {
        Some(0.0)
    } else {
        (q.stage_count[life] > 0 && dur_ns > 0).then(|| {
            analytic::inflight_bytes(q.bytes as f64 / (dur_ns as f64 / 1e9), q.stage_sum_ns[life] as f64 / q.stage_count[life] as f64)
        })
    };
    let footprint = ring
        .zip(mean_pkt)
        .filter(|&(r, p)| r > 0 && p > 0)
        .map(|(r, p)| analytic::ring_footprint_bytes(r, p, analytic::DESC_BYTES_PER_PKT) as f64);
    crate::attribution::QueueFeatures {
        queue: crate::attribution::QueueId { dir: q.dir.as_str().to_string(), queue: q.queue },
        inbound_bytes: q.bytes as f64,
        inflight_bytes: inflight,
        footprint_bytes: footprint,
    }
}

/// Every piece of attribution evidence the recording holds, in the attribution module's terms:
/// what each method is given. `obs`: the host as the model sees it, for the model
/// prior; without one (no LLC geometry) the measured methods still get their evidence.
pub fn evidence(rec: &Recording, obs: Option<&HostObservation>) -> crate::attribution::Evidence {
    evidence_from(rec, obs, &crate::report::build(rec))
}

/// `evidence`, from the recording's report already built.
fn evidence_from(rec: &Recording, obs: Option<&HostObservation>, report: &crate::report::Report) -> crate::attribution::Evidence {
    use crate::attribution::{
        Evidence, FlowId, Interval, ModelPrediction, QueueId, RegressionInput, SampledCounts, SocketMisses,
    };
    let qid = |d: Dir, q: u32| QueueId { dir: d.as_str().to_string(), queue: q };
    let fid = |k: &crate::snapshot::FlowKey| FlowId {
        proto: k.proto.clone(),
        src: k.src.clone(),
        sport: k.sport,
        dst: k.dst.clone(),
        dport: k.dport,
    };
    let m = &report.l3miss;
    let period = rec.meta.miss_period.unwrap_or(0);
    let stand_in = rec.meta.miss_stand_in();
    let sampled = |by_addr: bool, other: u64| -> Option<SampledCounts> {
        if m.samples == 0 {
            return None;
        }
        Some(SampledCounts {
            period,
            stand_in,
            queues: m.queues.iter().map(|q| (qid(q.dir, q.queue), if by_addr { q.addr_join } else { q.cpu_ctx })).collect(),
            flows: m
                .flows
                .iter()
                .map(|f| {
                    (
                        FlowId { proto: f.proto.clone(), src: f.src.clone(), sport: f.sport, dst: f.dst.clone(), dport: f.dport },
                        if by_addr { f.addr_join } else { f.cpu_ctx },
                    )
                })
                .collect(),
            other_samples: other,
            join_sample: if by_addr { m.join_sample } else { 1 },
            // The measured share of the time the sampler ran, else the nominal one.
            duty: m.duty_measured.unwrap_or(m.duty as f64),
            before_window: if by_addr { m.before_window } else { 0 },
            // (upper bound ns, samples) per log2 bucket; ages exist for joined samples only.
            age_hist: if by_addr {
                m.age_hist.iter().enumerate().filter(|(_, &c)| c > 0).map(|(b, &c)| (1u64 << (b + 1), c)).collect()
            } else {
                Vec::new()
            },
        })
    };
    let address_join = sampled(true, m.other_addr);
    let cpu_context = sampled(false, m.uncharged);

    // Regression needs socket miss counts in the recording's own intervals: live counters only.
    let socket = rec.iface().counter_socket();
    let live = rec.meta.counters_source == Some(crate::counters::CounterSource::Live);
    let sum_of = |s: &crate::snapshot::Snapshot, names: &[&str]| -> Option<f64> {
        let v: Vec<f64> = s
            .counters
            .iter()
            .filter(|r| r.socket == socket && r.is_socket_total() && names.iter().any(|n| r.event.eq_ignore_ascii_case(n)))
            .map(|r| r.value)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let other_stacks = other_stacks_bytes(&rec.snapshots, socket, rec.iface().iio_box.as_deref());
    // Every queue the recording saw, in every interval (a snapshot leaves idle queues out), with
    // its mean packet over the recording, rounded up to whole bytes as the model does.
    let mut seen: BTreeMap<(Dir, u32), (u64, u64)> = BTreeMap::new();
    for s in &rec.snapshots {
        for q in &s.queues {
            let e = seen.entry((q.dir, q.queue)).or_default();
            e.0 += q.bytes;
            e.1 += q.packets;
        }
    }
    let mean_pkt = |d: Dir, q: u32| -> Option<u32> {
        seen.get(&(d, q)).filter(|e| e.1 > 0).map(|e| e.0.div_ceil(e.1).min(u32::MAX as u64) as u32)
    };
    let regression = live.then(|| RegressionInput {
        intervals: rec
            .snapshots
            .iter()
            .zip(&other_stacks)
            .filter(|(s, _)| !s.counters.is_empty())
            .map(|(s, &(other_io_write_bytes, other_io_read_bytes))| Interval {
                duration_ns: s.dur_ns,
                queues: seen
                    .keys()
                    .map(|&(d, qn)| {
                        let idle = crate::snapshot::QueueCounters::new(d, qn);
                        let q = s.queues.iter().find(|q| q.dir == d && q.queue == qn).unwrap_or(&idle);
                        let ring = if d == Dir::Rx { rec.iface().rx_ring } else { rec.iface().tx_ring };
                        queue_features(q, s.dur_ns, ring, mean_pkt(d, qn))
                    })
                    .collect(),
                socket: SocketMisses {
                    io_write: sum_of(s, &["UNC_CHA_TOR_INSERTS.IO_MISS_ITOM"]),
                    io_read: sum_of(s, &["UNC_CHA_TOR_INSERTS.IO_MISS_PCIRDCUR", "UNC_CHA_TOR_INSERTS.IO_MISS_RDCUR"]),
                    l3: sum_of(s, &["MEM_LOAD_RETIRED.L3_MISS"]),
                    other_io_write_bytes,
                    other_io_read_bytes,
                },
            })
            .collect(),
        flow_bytes: rec.flows.iter().map(|f| (fid(&f.key), qid(f.key.dir, f.queue), f.bytes as f64)).collect(),
    });

    // Model prior: the simulator's per-queue misses (sim queue i is the i-th RX
    // queue by id), each split over its flows by bytes.
    let model = obs.and_then(|obs| crate::advise::spec_from_observation(obs, None, None).map(|spec| (obs, spec))).map(|(obs, spec)| {
        let r = crate::model::spec::simulate(&spec);
        let mut rx_ids: Vec<u32> = obs.queues.iter().filter(|q| q.dir == MDir::Rx).map(|q| q.queue).collect();
        rx_ids.sort_unstable();
        let mut p = ModelPrediction::from_sim(&r, None);
        for (id, _) in p.queues.iter_mut() {
            if let Some(real) = rx_ids.get(id.queue as usize) {
                id.queue = *real;
            }
        }
        for (id, misses) in &p.queues {
            let flows: Vec<_> = rec.flows.iter().filter(|f| f.key.dir == Dir::Rx && f.queue == id.queue).collect();
            let total: f64 = flows.iter().map(|f| f.bytes as f64).sum();
            if total > 0.0 {
                for f in flows {
                    p.flows.push((fid(&f.key), misses * f.bytes as f64 / total));
                }
            }
        }
        let measured = report.counters.sockets.iter().find(|s| s.socket == socket).and_then(|_| {
            let live_or_imported = matches!(report.counters.source.as_str(), "live" | "imported");
            live_or_imported.then(|| rec.snapshots.iter().filter_map(|s| sum_of(s, &["UNC_CHA_TOR_INSERTS.IO_MISS_ITOM"])).sum())
        });
        p.measured_total = measured.filter(|v: &f64| *v > 0.0);
        p
    });
    Evidence { address_join, cpu_context, regression, model }
}

/// The attribution `report` shows: the strongest method the evidence
/// supports, plus every method's own answer for comparison.
#[derive(Debug, Serialize)]
pub struct AttributionReport {
    #[serde(flatten)]
    pub chosen: crate::attribution::Attribution,
    pub stand_in: bool,
    pub all: Vec<crate::attribution::Attribution>,
}

/// Below this share of its CPU time stopped, the sampler's throttling is left out of the notes.
const THROTTLE_NOTE_PCT: f64 = 1.0;

/// The attribution of a recording; `obs` as for `evidence`.
pub fn attribution(rec: &Recording, obs: Option<&HostObservation>) -> AttributionReport {
    let report = crate::report::build(rec);
    let ev = evidence_from(rec, obs, &report);
    let mut chosen = crate::attribution::attribute(&ev);
    let all = crate::attribution::attribute_all(&ev);
    // Software stand-in events measure where network CPU time goes, not L3 misses.
    let source = rec.meta.miss_sampling.clone().unwrap_or_default();
    let stand_in = rec.meta.miss_stand_in();
    if stand_in && matches!(chosen.method, crate::attribution::Method::AddressJoin | crate::attribution::Method::CpuContext) {
        let note = if rec.meta.miss_source() == Some(crate::session::MissSampling::SoftwareCopy) {
            format!(
                "samples come from {source}: their addresses are those of the packet buffers the CPUs were copying, which tests the \
                 address join on real buffer addresses; they are a stand-in, not measured L3 misses"
            )
        } else {
            format!("samples come from {source}: they show which queues' and flows' work the CPUs were doing, a stand-in for L3-miss samples")
        };
        chosen.notes.insert(0, note);
    }
    let m = &report.l3miss;
    if matches!(chosen.method, crate::attribution::Method::AddressJoin | crate::attribution::Method::CpuContext) {
        if let Some(lost) = m.flow_charges_lost.filter(|&n| n > 0) {
            chosen.notes.push(format!(
                "{lost} charged samples belong to flows the probes' flow map lost (LRU eviction): they are missing from the flows"
            ));
        }
        if let Some(p) = m.throttle.as_ref().and_then(|t| t.stopped_pct).filter(|&p| p >= THROTTLE_NOTE_PCT) {
            chosen.notes.push(format!(
                "the kernel throttled the sampler for {p:.1}% of its CPU time: misses in those windows went unsampled (none if the \
                 stops fell in idle time), and the shares assume they fell on every queue alike (a burst on one queue is what triggers them)"
            ));
        }
        if m.queue_clamped > 0 {
            chosen.notes.push(format!(
                "{} samples were charged to queues past the probes' table and counted on its last queue",
                m.queue_clamped
            ));
        }
    }
    AttributionReport { chosen, stand_in, all }
}
