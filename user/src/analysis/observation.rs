//! What a recording says about the host, the interface and each queue, in the model's
//! terms (`advise::HostObservation`): rates, residence times, bursts, placement and the
//! counters' DDIO evidence.
use std::collections::BTreeMap;

use anyhow::Result;

use super::geometry::{geometry, GeometryOverrides};
use super::summary::Summary;
use crate::advise::{
    full_drop, CounterEvidence, Device, FullDrops, FullWhat, HostObservation, QueueObservation,
    SocketQueueObs,
};
use crate::counters::CounterSource;
use crate::model::analytic::Dir as MDir;
use crate::model::geometry::vendor_has_ddio;
use crate::model::spec::StackInputs;
use crate::recording::Recording;
use crate::snapshot::{hist_percentile, Dir, RX_COPY_TO_FREE};

/// Packet records read for residence times: an even spread over the recording, so the cost
/// and memory stay flat however long it is (percentiles of 50 000 lives are within a few
/// tenths of a percent of rank).
pub const MAX_PACKET_RECORDS: usize = 50_000;

/// The start of a sampled packet's life: its first stage-entry time (slot 0 either way,
/// the RX driver's hand-up or TX queueing).
const LIFE_START: usize = 0;

/// The model's direction for a probe direction.
fn mdir(d: Dir) -> MDir {
    match d {
        Dir::Rx => MDir::Rx,
        Dir::Tx => MDir::Tx,
    }
}

/// Trailing queue number of an IRQ name ("mlx5_comp3@pci:…", "eth0-TxRx-3").
fn irq_queue(name: &str) -> Option<u32> {
    let head = name.split('@').next().unwrap_or(name);
    let digits: String = head
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// The NIC's ring-full / no-buffer drops that bear on RX queue `queue`: its own counters,
/// plus the device's (which no queue can be cleared of). None: the driver keeps none.
pub fn nic_ring_drops(
    drops: &[crate::snapshot::NicDrop],
    queue: u32,
) -> Option<crate::advise::NicRingDrops> {
    let mine: Vec<_> = drops
        .iter()
        .filter(|d| d.queue.is_none_or(|q| q == queue))
        .collect();
    if mine.is_empty() {
        return None;
    }
    let mut counters: Vec<String> = mine.iter().map(|d| d.counter.clone()).collect();
    counters.dedup();
    Some(crate::advise::NicRingDrops {
        count: mine.iter().map(|d| d.count).sum(),
        counters,
        // The device's counters only settle a queue's drops when they counted none.
        per_queue: mine.iter().all(|d| d.queue.is_some() || d.count == 0),
    })
}

/// A queue's drops that say something was full: its drops in the proportion the device's
/// reasons give (drops are counted per queue, their reasons per device).
pub fn full_drops(queue_drops: u64, device: &super::summary::Drops) -> FullDrops {
    // Each reason's drops that say something was full, and what. Recordings from before the
    // drops before the stack were kept count all of a reason's as if before it.
    let mut full: Vec<(FullWhat, u64, String)> = Vec::new();
    for r in &device.reasons {
        let Some(name) = r.name.as_deref() else {
            continue;
        };
        let early = r.before_stack.unwrap_or(r.count).min(r.count);
        for (before, n) in [(true, early), (false, r.count - early)] {
            let Some(what) = full_drop(name, before).filter(|_| n > 0) else {
                continue;
            };
            let said = if full_drop(name, !before).is_some() {
                name.to_string()
            } else {
                format!("{name} before the stack")
            };
            match full.iter_mut().find(|f| f.2 == said) {
                Some(f) => f.1 += n,
                None => full.push((what, n, said)),
            }
        }
    }
    let of = |what: FullWhat| -> u64 { full.iter().filter(|f| f.0 == what).map(|f| f.1).sum() };
    let (ring, backlog) = (of(FullWhat::Ring), of(FullWhat::Backlog));
    let total = device.total.max(ring + backlog);
    let share = |n: u64| {
        if total == 0 {
            return 0;
        }
        let x = u128::from(queue_drops) * u128::from(n);
        ((x + u128::from(total) / 2) / u128::from(total)) as u64
    };
    FullDrops {
        ring: share(ring),
        backlog: share(ring + backlog),
        reasons: full.into_iter().map(|f| f.2).collect(),
    }
}

/// The host, the interface and each queue that carried traffic, as the model and the
/// recommendation engine take them; `summary` is the recording's, built once.
pub fn observation(
    rec: &Recording,
    summary: &Summary,
    o: GeometryOverrides,
) -> Result<HostObservation> {
    let iface = rec.iface();
    let host = rec.host();
    let dur = rec.duration_s().max(1e-9);
    let records = rec.packet_records(MAX_PACKET_RECORDS)?;
    let nic_drops = rec.nic_drop_totals()?;
    let peaks = rec.peak_inflight()?;
    let mut sockets = socket_queues_by_queue(rec)?;
    let top_flow = top_flows(rec)?;
    let mut queues = Vec::new();
    for q in &summary.totals {
        if q.packets == 0 {
            continue;
        }
        let (p50, p99) = residence(&records.records, q);
        // Peak in flight: Little's law per interval (rate × mean lifetime).
        let peak = peaks.get(&(q.dir, q.queue)).copied();
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
            full_drops: full_drops(q.drops, &summary.drops),
            nic_ring_drops: match q.dir {
                Dir::Rx => nic_drops
                    .as_deref()
                    .and_then(|d| nic_ring_drops(d, q.queue)),
                Dir::Tx => None,
            },
            size_hist: if q.size_hist.iter().any(|&n| n > 0) {
                q.size_hist.to_vec()
            } else {
                Vec::new()
            },
            socket: if q.dir == Dir::Rx {
                sockets.remove(&q.queue)
            } else {
                None
            },
            packets: Some(q.packets),
            top_flow_bytes_per_s: match q.dir {
                Dir::Rx => top_flow.get(&q.queue).map(|b| *b as f64 / dur),
                Dir::Tx => None,
            },
        });
    }
    let (queue_cpus_numa, queue_irqs) = queue_placement(&iface, &host, &records.records);
    let node_cpulists = node_cpulists(&host);
    let counters = counter_evidence(rec, summary, &iface);
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
        stack: stack_inputs(&rec.page_pools()?),
        driver: iface.driver.clone(),
        mtu: iface.mtu,
        device: Device {
            netns: iface.netns.clone(),
            driver: iface.driver.clone(),
            rx_queues: iface.rx_queues,
            rss_table: iface.rss_table,
            rx_ring_max: iface.rx_ring_max.filter(|_| iface.rx_ring.is_some()),
            no_ddio: vendor_has_ddio(&host.cpu_vendor) == Some(false),
        },
    })
}

/// Each RX queue's largest flow in bytes: RSS moves whole flows, so no queue can be
/// relieved below it.
fn top_flows(rec: &Recording) -> Result<BTreeMap<u32, u64>> {
    let mut top_flow: BTreeMap<u32, u64> = BTreeMap::new();
    for f in rec.flows()?.iter().filter(|f| f.key.dir == Dir::Rx) {
        let e = top_flow.entry(f.queue).or_default();
        *e = (*e).max(f.bytes);
    }
    Ok(top_flow)
}

/// A queue's residence until the last CPU touch, p50 and p99: sampled lives where there
/// are enough, the lifetime histogram otherwise.
fn residence(
    records: &[crate::snapshot::PacketSample],
    q: &crate::snapshot::QueueCounters,
) -> (Option<f64>, Option<f64>) {
    let life = q.dir.lifetime_stage();
    let mut lives: Vec<f64> = records
        .iter()
        .filter(|p| p.dir == q.dir && p.queue == q.queue && p.ts[LIFE_START] > 0)
        .filter_map(|p| {
            let copied = p.ts[RX_COPY_TO_FREE];
            let last = if p.dir == Dir::Rx && copied > 0 {
                copied
            } else {
                p.free_ns
            };
            (last > p.ts[LIFE_START]).then(|| (last - p.ts[LIFE_START]) as f64)
        })
        .collect();
    lives.sort_by(|a, b| a.total_cmp(b));
    let pct = |v: &[f64], p: f64| {
        v.get(((v.len() as f64 - 1.0) * p).round() as usize)
            .copied()
    };
    if lives.len() >= 20 {
        (pct(&lives, 0.5), pct(&lives, 0.99))
    } else {
        let h = &q.stage_hist[life];
        (
            hist_percentile(h, 50.0, q.stage_max_ns[life]).map(|v| v as f64),
            hist_percentile(h, 99.0, q.stage_max_ns[life]).map(|v| v as f64),
        )
    }
}

/// Where each queue is processed, (queue, NUMA node), with each queue's IRQ: its IRQ's
/// CPUs, else the CPUs that freed its sampled packets.
#[allow(clippy::type_complexity)]
fn queue_placement(
    iface: &crate::topology::IfaceInfo,
    host: &crate::topology::HostInfo,
    records: &[crate::snapshot::PacketSample],
) -> (Vec<(u32, Option<i32>)>, Vec<(u32, u32)>) {
    let mut queue_cpus_numa = Vec::new();
    let mut queue_irqs = Vec::new();
    for (irq, info) in &iface.irqs {
        if let Some(q) = irq_queue(&info.name) {
            queue_irqs.push((q, *irq));
            let node = info
                .cpus
                .first()
                .and_then(|c| host.cpu_node.get(c))
                .copied();
            queue_cpus_numa.push((q, node));
        }
    }
    if queue_cpus_numa.is_empty() {
        let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
        for p in records.iter().filter(|p| p.dir == Dir::Rx) {
            seen.entry(p.queue).or_insert(p.cpu);
        }
        queue_cpus_numa = seen
            .into_iter()
            .map(|(q, cpu)| (q, host.cpu_node.get(&cpu).copied()))
            .collect();
    }
    (queue_cpus_numa, queue_irqs)
}

/// Each NUMA node's CPUs as a cpulist, for the pinning commands.
fn node_cpulists(host: &crate::topology::HostInfo) -> Vec<(i32, String)> {
    let mut node_cpus: BTreeMap<i32, Vec<u32>> = BTreeMap::new();
    for (cpu, node) in &host.cpu_node {
        node_cpus.entry(*node).or_default().push(*cpu);
    }
    node_cpus
        .into_iter()
        .map(|(n, cpus)| {
            (
                n,
                cpus.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            )
        })
        .collect()
}

/// The device socket's DDIO counters, when they were measured or imported (the software stand-in's
/// numbers never reach the model as evidence).
fn counter_evidence(
    rec: &Recording,
    summary: &Summary,
    iface: &crate::topology::IfaceInfo,
) -> Option<CounterEvidence> {
    let r = &summary.counters;
    let usable = matches!(
        rec.meta.counters_source,
        Some(CounterSource::Live | CounterSource::Imported)
    );
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
            dram_read_mbps: s.dram_read_mbps,
            dram_write_mbps: s.dram_write_mbps,
        })
}

/// The local sockets' receive queues per RX queue: each socket on the queue its flow's
/// packets came in on (the flows table's queue), their means and drain rates summed.
fn socket_queues_by_queue(rec: &Recording) -> Result<BTreeMap<u32, SocketQueueObs>> {
    let stats = rec.socket_queues()?;
    if stats.is_empty() {
        return Ok(BTreeMap::new());
    }
    let queue_of: std::collections::HashMap<_, u32> = rec
        .flows()?
        .into_iter()
        .filter(|f| f.key.dir == Dir::Rx)
        .map(|f| (f.key, f.queue))
        .collect();
    let mut out: BTreeMap<u32, SocketQueueObs> = BTreeMap::new();
    for s in stats {
        let Some(q) = queue_of.get(&s.key) else {
            continue;
        };
        let o = out.entry(*q).or_insert(SocketQueueObs {
            sockets: 0,
            queued_bytes: 0.0,
            rmem_bytes: 0.0,
            rcvbuf_max: 0,
            drain_bytes_per_s: 0.0,
        });
        o.sockets += 1;
        o.queued_bytes += s.mean_queued();
        o.rmem_bytes += s.rmem_sum as f64 / s.reads.max(1) as f64;
        o.rcvbuf_max = o.rcvbuf_max.max(s.rcvbuf_max);
        o.drain_bytes_per_s += s.drain_bytes_per_s().unwrap_or(0.0);
    }
    Ok(out)
}

/// The recycling shares of the device's page pools, summed: of the buffers the driver took,
/// how many came back through the pool's cache (LIFO, warm), through its ring (oldest
/// first), or fresh from the page allocator. None when no pool counted anything.
pub fn stack_inputs(pools: &[crate::snapshot::PagePoolStat]) -> Option<StackInputs> {
    let sum = |f: fn(&crate::snapshot::PagePoolStat) -> u64| {
        pools.iter().map(f).fold(0u64, u64::saturating_add) as f64
    };
    let taken = sum(|p| p.alloc_fast) + sum(|p| p.alloc_slow) + sum(|p| p.alloc_slow_high_order);
    if taken <= 0.0 {
        return None;
    }
    let fresh = ((sum(|p| p.alloc_slow) + sum(|p| p.alloc_slow_high_order)) / taken).min(1.0);
    let cache = (sum(|p| p.recycle_cached) / taken).min(1.0 - fresh);
    let ring = (sum(|p| p.recycle_ring) / taken)
        .min(1.0 - fresh - cache)
        .max(0.0);
    Some(StackInputs {
        cache_share: Some(cache),
        ring_share: Some(ring),
        fresh_share: Some(fresh),
        ..StackInputs::default()
    })
}

#[cfg(test)]
mod tests {
    use super::{irq_queue, stack_inputs};
    use crate::snapshot::PagePoolStat;

    #[test]
    fn page_pool_counts_become_recycling_shares() {
        let pool = |fast, slow, cached, ring| PagePoolStat {
            id: 1,
            napi_id: None,
            alloc_fast: fast,
            alloc_slow: slow,
            alloc_slow_high_order: 0,
            alloc_empty: 0,
            alloc_refill: 0,
            alloc_waive: 0,
            recycle_cached: cached,
            recycle_cache_full: 0,
            recycle_ring: ring,
            recycle_ring_full: 0,
            recycle_released_refcnt: 0,
        };
        assert_eq!(stack_inputs(&[]), None);
        assert_eq!(stack_inputs(&[pool(0, 0, 0, 0)]), None);
        let st = stack_inputs(&[pool(800, 100, 500, 200), pool(100, 0, 100, 100)]).unwrap();
        let (c, r, f) = (
            st.cache_share.unwrap(),
            st.ring_share.unwrap(),
            st.fresh_share.unwrap(),
        );
        assert!(
            (f - 0.1).abs() < 1e-9 && (c - 0.6).abs() < 1e-9 && (r - 0.3).abs() < 1e-9,
            "{st:?}"
        );
        // Counts that overlap (a recycled page counted twice) never give shares over 1.
        let st = stack_inputs(&[pool(100, 50, 200, 200)]).unwrap();
        assert!(
            st.cache_share.unwrap() + st.ring_share.unwrap() + st.fresh_share.unwrap()
                <= 1.0 + 1e-9
        );
    }

    #[test]
    fn queue_numbers_from_irq_names() {
        assert_eq!(irq_queue("mlx5_comp3@pci:0000:5e:00.0"), Some(3));
        assert_eq!(irq_queue("ens1f0-TxRx-12"), Some(12));
        assert_eq!(irq_queue("ens1f0-TxRx-"), None);
    }
}
