//! Turns a recording into the inputs of the model and the recommendation
//! engine (LLC geometry, per-queue rates, residence times, bursts, placement,
//! counter evidence), so `recommend`, `report` and the HTML report agree.
use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::advise::{self, CounterEvidence, HostObservation, ModelView, QueueObservation, Recommendation};
use crate::model::analytic::Dir as MDir;
use crate::model::geometry::{LlcGeometry, WaysSource};
use crate::recording::Recording;
use crate::snapshot::{hist_percentile, Dir};

/// Command-line overrides, so a recording from one host can be evaluated for another.
#[derive(Debug, Clone, Copy, Default)]
pub struct GeometryOverrides {
    pub llc_mib: Option<f64>,
    pub llc_ways: Option<u32>,
    pub ddio_ways: Option<u32>,
}

/// The geometry recorded with the run (sysfs + MSR 0xC8B at record time),
/// else the recorded host's LLC with the default 2 DDIO ways, then overrides.
pub fn geometry(rec: &Recording, o: GeometryOverrides) -> Result<LlcGeometry> {
    let base = match rec.meta_json::<LlcGeometry>("geometry") {
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
        let socket = iface.numa_node.unwrap_or(0).max(0) as u32;
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
    pub model: ModelView,
    pub geometry: LlcGeometry,
    /// "measured" when MSR 0xC8B was read at record time; "assumed" otherwise.
    pub ddio_ways_note: String,
    pub recommendations: Vec<Recommendation>,
}

pub fn advise(rec: &Recording, o: GeometryOverrides) -> Result<Advice> {
    let obs = observation(rec, o)?;
    let note = match obs.geometry.ddio_ways_source {
        WaysSource::Measured => "measured (MSR 0xC8B)".to_string(),
        WaysSource::Assumed => format!("assumed {} (MSR 0xC8B not readable at record time)", obs.geometry.ddio_ways),
        WaysSource::Override => "given on the command line".to_string(),
    };
    Ok(Advice {
        model: advise::model_view(&obs),
        geometry: obs.geometry.clone(),
        ddio_ways_note: note,
        recommendations: advise::recommend(&obs),
    })
}

#[cfg(test)]
mod tests {
    use super::irq_queue;

    #[test]
    fn queue_numbers_from_irq_names() {
        assert_eq!(irq_queue("mlx5_comp3@pci:0000:5e:00.0"), Some(3));
        assert_eq!(irq_queue("ens1f0-TxRx-12"), Some(12));
        assert_eq!(irq_queue("ens1f0-TxRx-"), None);
    }
}
