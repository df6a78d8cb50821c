//! The attribution evidence a recording holds, in the attribution module's terms (address
//! join and CPU-context samples, the regression's intervals, the model prior), and the
//! attribution `report` shows: the strongest method's answer with the notes that qualify it.
use std::collections::BTreeMap;

use serde::Serialize;

use super::summary::Summary;
use crate::advise::HostObservation;
use crate::counters::CounterSource;
use crate::model::analytic::{self, Dir as MDir};
use crate::recording::Recording;
use crate::snapshot::Dir;

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
    let life = q.dir.lifetime_stage();
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
/// what each method is given. `summary`: the recording's, built once; `obs`: the host as the
/// model sees it, for the model prior; without one (no LLC geometry) the measured methods
/// still get their evidence.
pub fn evidence(rec: &Recording, summary: &Summary, obs: Option<&HostObservation>) -> crate::attribution::Evidence {
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
    let m = &summary.l3miss;
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
    let live = rec.meta.counters_source == Some(CounterSource::Live);
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
        let measured = summary.counters.sockets.iter().find(|s| s.socket == socket).and_then(|_| {
            let live_or_imported = matches!(rec.meta.counters_source, Some(CounterSource::Live | CounterSource::Imported));
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

/// The attribution of a recording; `summary` and `obs` as for `evidence`.
pub fn attribution(rec: &Recording, summary: &Summary, obs: Option<&HostObservation>) -> AttributionReport {
    let ev = evidence(rec, summary, obs);
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
    let m = &summary.l3miss;
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

#[cfg(test)]
mod tests {
    use super::queue_features;
    use crate::snapshot::{Dir, QueueCounters, RX_DRIVER_TO_FREE};

    #[test]
    fn regression_features_of_a_queue() {
        let mut q = QueueCounters::new(Dir::Rx, 2);
        q.packets = 1_000;
        q.bytes = 1_000 * 1514;
        q.stage_count[RX_DRIVER_TO_FREE] = 100;
        q.stage_sum_ns[RX_DRIVER_TO_FREE] = 100 * 20_000; // 20 µs from DMA to free
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
        untimed.stage_count[RX_DRIVER_TO_FREE] = 0;
        assert_eq!(queue_features(&untimed, 1_000_000_000, Some(1024), Some(1514)).inflight_bytes, None);
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
