//! The attribution evidence a recording holds, in the attribution module's terms (address
//! join and CPU-context samples, the regression's intervals, the model prior), and the
//! attribution `report` shows: the strongest method's answer with the notes that qualify it.
use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::summary::Summary;
use crate::advise::HostObservation;
use crate::advise::ModelRun;
use crate::attribution::{
    Evidence, FlowId, Interval, ModelPrediction, QueueId, RegressionInput, SampledCounts,
    SocketMisses,
};
use crate::counters::CounterSource;
use crate::model::analytic::{self, Dir as MDir};
use crate::model::sim::SimResult;
use crate::recording::reader::{GroupQueue, IntervalGroup};
use crate::recording::Recording;
use crate::snapshot::{Dir, FlowCounters};

/// Per interval group, the inbound DMA (write, read) bytes of the socket's IIO stacks other than the
/// NIC's: the driver of the I/O misses no queue causes. Trusted per direction only while the
/// NIC's stack carried what the traced device moved: no more than twice its packets plus a
/// descriptor line each (more: an untraced device behind the same stack, a second port, whose
/// misses would be charged to the queues), and at least half its packet bytes (less: the box
/// or socket is not the NIC's, and the "other" bytes would hold the NIC's own DMA). None: not
/// measured (the regression then takes the background as steady in time).
pub fn other_stacks_bytes(
    groups: &[IntervalGroup],
    socket: u32,
    nic_box: Option<&str>,
) -> Vec<(Option<f64>, Option<f64>)> {
    use crate::counters::metrics::stack_split;
    let splits: Vec<_> = groups
        .iter()
        .map(|s| nic_box.and_then(|b| stack_split(&s.counters, socket, b)))
        .collect();
    let (mut moved, mut payload, mut seen) = ([0.0f64; 2], [0.0f64; 2], [0.0f64; 2]);
    for (s, sp) in groups.iter().zip(&splits) {
        let Some(sp) = sp else { continue };
        let lines: f64 = s.queues.iter().map(|q| 64.0 * q.packets as f64).sum();
        let bytes = |d: Dir| {
            s.queues
                .iter()
                .filter(|q| q.dir == d)
                .map(|q| q.bytes as f64)
                .sum::<f64>()
        };
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
            Some(p) => (
                write_ok.then_some(p.other_write_bytes),
                read_ok.then_some(p.other_read_bytes),
            ),
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
    q: &GroupQueue,
    dur_ns: u64,
    ring: Option<u32>,
    mean_pkt: Option<u32>,
) -> crate::attribution::QueueFeatures {
    let inflight = if q.bytes == 0 {
        Some(0.0)
    } else {
        (q.life_count > 0 && dur_ns > 0).then(|| {
            analytic::inflight_bytes(
                q.bytes as f64 / (dur_ns as f64 / 1e9),
                q.life_sum_ns as f64 / q.life_count as f64,
            )
        })
    };
    let footprint = ring
        .zip(mean_pkt)
        .filter(|&(r, p)| r > 0 && p > 0)
        .map(|(r, p)| analytic::ring_footprint_bytes(r, p, analytic::DESC_BYTES_PER_PKT) as f64);
    crate::attribution::QueueFeatures {
        queue: crate::attribution::QueueId {
            dir: q.dir.as_str().to_string(),
            queue: q.queue,
        },
        inbound_bytes: q.bytes as f64,
        inflight_bytes: inflight,
        footprint_bytes: footprint,
    }
}

fn qid(d: Dir, q: u32) -> QueueId {
    QueueId {
        dir: d.as_str().to_string(),
        queue: q,
    }
}

fn fid(k: &crate::snapshot::FlowKey) -> FlowId {
    FlowId {
        proto: k.proto.clone(),
        src: k.src.clone(),
        sport: k.sport,
        dst: k.dst.clone(),
        dport: k.dport,
    }
}

/// The socket's total of the named events (any of the names: one event under two platforms'
/// spellings), if any reading has one.
fn sum_of(
    readings: &[crate::counters::CounterReading],
    socket: u32,
    names: &[&str],
) -> Option<f64> {
    let v: Vec<f64> = readings
        .iter()
        .filter(|r| {
            r.socket == socket
                && r.is_socket_total()
                && names.iter().any(|n| r.event.eq_ignore_ascii_case(n))
        })
        .map(|r| r.value)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// The L3-miss samples as one sampled method sees them: charged by address (`by_addr`) or by
/// CPU context, with `other` samples charged to nothing. None without samples.
fn sampled_counts(
    rec: &Recording,
    summary: &Summary,
    by_addr: bool,
    other: u64,
) -> Option<SampledCounts> {
    let m = &summary.l3miss;
    if m.samples == 0 {
        return None;
    }
    let period = rec.meta.miss_period.unwrap_or(0);
    let stand_in = rec.meta.miss_stand_in();
    Some(SampledCounts {
        period,
        stand_in,
        queues: m
            .queues
            .iter()
            .map(|q| {
                (
                    qid(q.dir, q.queue),
                    if by_addr { q.addr_join } else { q.cpu_ctx },
                )
            })
            .collect(),
        flows: m
            .flows
            .iter()
            .map(|f| {
                (
                    FlowId {
                        proto: f.proto.clone(),
                        src: f.src.clone(),
                        sport: f.sport,
                        dst: f.dst.clone(),
                        dport: f.dport,
                    },
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
            m.age_hist
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(b, &c)| (1u64 << (b + 1), c))
                .collect()
        } else {
            Vec::new()
        },
    })
}

/// The regression's input from live counters: every queue the recording saw, in each
/// interval group, with the socket's miss counts and the other IIO stacks' bytes.
fn regression_input(
    rec: &Recording,
    socket: u32,
    flows: &[FlowCounters],
) -> Result<RegressionInput> {
    let groups = rec.interval_groups(Some(CounterSource::Live.as_str()))?;
    let other_stacks = other_stacks_bytes(&groups, socket, rec.iface().iio_box.as_deref());
    // Every queue the recording saw, in every interval (a group leaves idle queues out),
    // with its mean packet over the recording, rounded up to whole bytes as the model does.
    let mut seen: BTreeMap<(Dir, u32), (u64, u64)> = BTreeMap::new();
    for q in groups.iter().flat_map(|g| g.queues.iter()) {
        let e = seen.entry((q.dir, q.queue)).or_default();
        e.0 += q.bytes;
        e.1 += q.packets;
    }
    let mean_pkt = |d: Dir, q: u32| -> Option<u32> {
        seen.get(&(d, q))
            .filter(|e| e.1 > 0)
            .map(|e| e.0.div_ceil(e.1).min(u32::MAX as u64) as u32)
    };
    Ok(RegressionInput {
        intervals: groups
            .iter()
            .zip(&other_stacks)
            .filter(|(g, _)| !g.counters.is_empty())
            .map(
                |(g, &(other_io_write_bytes, other_io_read_bytes))| Interval {
                    duration_ns: g.dur_ns,
                    queues: seen
                        .keys()
                        .map(|&(d, qn)| {
                            let idle = GroupQueue::empty(d, qn);
                            let q = g.queue(d, qn).unwrap_or(&idle);
                            let ring = if d == Dir::Rx {
                                rec.iface().rx_ring
                            } else {
                                rec.iface().tx_ring
                            };
                            queue_features(q, g.dur_ns, ring, mean_pkt(d, qn))
                        })
                        .collect(),
                    socket: SocketMisses {
                        io_write: sum_of(
                            &g.counters,
                            socket,
                            &["UNC_CHA_TOR_INSERTS.IO_MISS_ITOM"],
                        ),
                        io_read: sum_of(
                            &g.counters,
                            socket,
                            &[
                                "UNC_CHA_TOR_INSERTS.IO_MISS_PCIRDCUR",
                                "UNC_CHA_TOR_INSERTS.IO_MISS_RDCUR",
                            ],
                        ),
                        l3: sum_of(&g.counters, socket, &["MEM_LOAD_RETIRED.L3_MISS"]),
                        other_io_write_bytes,
                        other_io_read_bytes,
                    },
                },
            )
            .collect(),
        flow_bytes: flows
            .iter()
            .map(|f| (fid(&f.key), qid(f.key.dir, f.queue), f.bytes as f64))
            .collect(),
    })
}

/// The model prior: the simulator's per-queue misses (sim queue i is the i-th RX queue by
/// id), on the measured total's scale or else the window's, each split over its flows by
/// bytes.
fn model_prediction(
    obs: &HostObservation,
    r: &SimResult,
    measured_total: Option<f64>,
    dur: f64,
    flows: &[FlowCounters],
) -> ModelPrediction {
    let mut rx: Vec<&crate::advise::QueueObservation> =
        obs.queues.iter().filter(|q| q.dir == MDir::Rx).collect();
    rx.sort_by_key(|q| q.queue);
    let mut p = ModelPrediction::from_sim(r, None);
    p.measured_total = measured_total;
    for (i, (id, misses)) in p.queues.iter_mut().enumerate() {
        let Some(q) = rx.get(i) else { continue };
        id.queue = q.queue;
        // Without a measured total to scale to, the simulator's counts have no time base:
        // put them on the window's, as misses per DMA-written line times the lines the
        // queue wrote (its packets in whole lines, and a descriptor each).
        if p.measured_total.is_none() {
            let sim_lines =
                r.per_queue
                    .get(i)
                    .map_or(0, |h| h.io_write_hits + h.io_write_misses) as f64;
            let pkt = q.avg_pkt_bytes.round().clamp(1.0, u32::MAX as f64) as u32;
            let lines_per_pkt = (analytic::line_rounded(pkt) + analytic::DESC_BYTES_PER_PKT as u64)
                as f64
                / analytic::LINE as f64;
            let written = q.pkts_per_s * dur * lines_per_pkt;
            *misses = if sim_lines > 0.0 {
                *misses / sim_lines * written
            } else {
                0.0
            };
        }
    }
    for (id, misses) in &p.queues {
        let flows: Vec<_> = flows
            .iter()
            .filter(|f| f.key.dir == Dir::Rx && f.queue == id.queue)
            .collect();
        let total: f64 = flows.iter().map(|f| f.bytes as f64).sum();
        if total > 0.0 {
            for f in flows {
                p.flows.push((fid(&f.key), misses * f.bytes as f64 / total));
            }
        }
    }
    p
}

/// Every piece of attribution evidence the recording holds, in the attribution module's terms:
/// what each method is given. `summary`: the recording's, built once; `obs`: the host as the
/// model sees it, for the model prior; without one (no LLC geometry) the measured methods
/// still get their evidence.
pub fn evidence(
    rec: &Recording,
    summary: &Summary,
    model: Option<(&HostObservation, &ModelRun)>,
) -> Result<crate::attribution::Evidence> {
    let m = &summary.l3miss;
    let address_join = sampled_counts(rec, summary, true, m.other_addr);
    let cpu_context = sampled_counts(rec, summary, false, m.uncharged);

    // Regression needs socket miss counts in the recording's own intervals: live counters only.
    let socket = rec.iface().counter_socket();
    let live = rec.meta.counters_source == Some(CounterSource::Live);
    let flows = rec.flows()?;
    // A longer recording's intervals come summed in groups of consecutive ones (reader::
    // SERIES_POINTS at most): misses and features are sums, so the model is unchanged and
    // only its time resolution drops, which keeps its cost and memory flat.
    let regression = if live {
        Some(regression_input(rec, socket, &flows)?)
    } else {
        None
    };
    // The socket's measured I/O write misses over the window, for the model prior's scale.
    let measured_itom = match rec.meta.counters_source {
        Some(s @ (CounterSource::Live | CounterSource::Imported)) => sum_of(
            &rec.counter_totals(s.as_str())?.readings,
            socket,
            &["UNC_CHA_TOR_INSERTS.IO_MISS_ITOM"],
        ),
        _ => None,
    };
    let measured_total = summary
        .counters
        .sockets
        .iter()
        .find(|s| s.socket == socket)
        .and(measured_itom)
        .filter(|v: &f64| *v > 0.0);
    let dur = rec.duration_s();
    let model = model
        .and_then(|(obs, run)| run.result(None, None).map(|r| (obs, r)))
        .map(|(obs, r)| model_prediction(obs, &r, measured_total, dur, &flows));
    Ok(Evidence {
        address_join,
        cpu_context,
        regression,
        model,
    })
}

/// The attribution `report` shows: the strongest method the evidence
/// supports, plus every method's own answer for comparison.
#[derive(Debug, Serialize)]
pub struct AttributionReport {
    #[serde(flatten)]
    pub chosen: crate::attribution::Attribution,
    pub stand_in: bool,
    /// The stronger methods this recording has no evidence for, each with why.
    pub not_used: Vec<String>,
    pub all: Vec<crate::attribution::Attribution>,
}

/// Below this share of its CPU time stopped, the sampler's throttling is left out of the notes.
const THROTTLE_NOTE_PCT: f64 = 1.0;

/// The attribution of a recording; `summary` and `obs` as for `evidence`.
pub fn attribution(
    rec: &Recording,
    summary: &Summary,
    model: Option<(&HostObservation, &ModelRun)>,
) -> Result<AttributionReport> {
    let ev = evidence(rec, summary, model)?;
    let mut chosen = crate::attribution::attribute(&ev);
    let all = crate::attribution::attribute_all(&ev);
    // Software stand-in events measure where network CPU time goes, not L3 misses.
    let source = rec.meta.miss_sampling.clone().unwrap_or_default();
    let stand_in = rec.meta.miss_stand_in();
    if stand_in
        && matches!(
            chosen.method,
            crate::attribution::Method::AddressJoin | crate::attribution::Method::CpuContext
        )
    {
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
    if matches!(
        chosen.method,
        crate::attribution::Method::AddressJoin | crate::attribution::Method::CpuContext
    ) {
        if let Some(lost) = m.flow_charges_lost.filter(|&n| n > 0) {
            chosen.notes.push(format!(
                "{lost} charged samples belong to flows the probes' flow map lost (LRU eviction): they are missing from the flows"
            ));
        }
        if let Some(p) = m
            .throttle
            .as_ref()
            .and_then(|t| t.stopped_pct)
            .filter(|&p| p >= THROTTLE_NOTE_PCT)
        {
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
    // Why each stronger method was passed over: kept apart from the notes that qualify the
    // chosen method's numbers.
    let mut not_used = Vec::new();
    for a in all.iter().take_while(|a| a.method != chosen.method) {
        let line = format!("{} not used: {}", a.method.as_str(), a.notes.join("; "));
        chosen.notes.retain(|n| *n != line);
        not_used.push(format!("{}: {}", a.method.as_str(), a.notes.join("; ")));
    }
    Ok(AttributionReport {
        chosen,
        stand_in,
        not_used,
        all,
    })
}

#[cfg(test)]
mod tests {
    use super::queue_features;
    use crate::recording::reader::{GroupQueue, IntervalGroup};
    use crate::snapshot::Dir;

    #[test]
    fn regression_features_of_a_queue() {
        // 100 packets timed from DMA to free, 20 µs each.
        let q = GroupQueue {
            packets: 1_000,
            bytes: 1_000 * 1514,
            life_count: 100,
            life_sum_ns: 100 * 20_000,
            ..GroupQueue::empty(Dir::Rx, 2)
        };
        let f = queue_features(&q, 1_000_000_000, Some(1024), Some(1514));
        assert_eq!((f.queue.dir.as_str(), f.queue.queue), ("rx", 2));
        assert_eq!(f.inbound_bytes, 1_514_000.0);
        // Little's law: 1.514 MB/s for 20 µs.
        assert!(
            (f.inflight_bytes.unwrap() - 30.28).abs() < 1e-6,
            "{:?}",
            f.inflight_bytes
        );
        // 1024 entries × 24 lines (1514 B) + 1024 × 64 B of descriptors.
        assert_eq!(f.footprint_bytes, Some((1024 * 24 * 64 + 1024 * 64) as f64));
        // No ring size (veth, no ethtool -g) or a queue that never carried a packet: no footprint,
        // not a zero one.
        assert_eq!(
            queue_features(&q, 1_000_000_000, None, Some(1514)).footprint_bytes,
            None
        );
        assert_eq!(
            queue_features(&q, 1_000_000_000, Some(1024), None).footprint_bytes,
            None
        );
        // Idle this interval: nothing in flight, and its ring's footprint all the same.
        let idle = queue_features(
            &GroupQueue::empty(Dir::Tx, 0),
            1_000_000_000,
            Some(512),
            Some(64),
        );
        assert_eq!(
            (idle.inflight_bytes, idle.footprint_bytes),
            (Some(0.0), Some((512 * 64 + 512 * 64) as f64))
        );
        // Packets but none timed: in-flight unknown.
        let untimed = GroupQueue { life_count: 0, ..q };
        assert_eq!(
            queue_features(&untimed, 1_000_000_000, Some(1024), Some(1514)).inflight_bytes,
            None
        );
    }

    #[test]
    fn other_stacks_only_while_the_nic_stack_is_the_traced_device() {
        use crate::counters::CounterReading;
        use crate::snapshot::Dir;
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
        let (w, r) = (
            "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0",
            "UNC_IIO_DATA_REQ_OF_CPU.MEM_READ.PART0",
        );
        // 1000 RX packets of 1000 bytes: the NIC's stack writes 1.1 MB (data and completions).
        let snap = |nic_write_units: f64| IntervalGroup {
            queues: vec![GroupQueue {
                packets: 1000,
                bytes: 1_000_000,
                ..GroupQueue::empty(Dir::Rx, 0)
            }],
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
        assert_eq!(
            super::other_stacks_bytes(&traced, 0, None),
            vec![(None, None); 2]
        );
        assert_eq!(
            super::other_stacks_bytes(&traced, 0, Some("uncore_iio_7")),
            vec![(None, None); 2]
        );
        // The NIC's stack writes 4× what the device received: another device shares it, so its
        // writes are not known; reads still are.
        let shared = [snap(1_000_000.0)];
        assert_eq!(
            super::other_stacks_bytes(&shared, 0, Some("uncore_iio_2")),
            vec![(None, Some(120_000.0))]
        );
        // The box carries a tenth of what the device received: not the NIC's stack (wrong box or
        // socket), so the "other" bytes would hold the NIC's own DMA.
        let wrong = [snap(25_000.0)];
        assert_eq!(
            super::other_stacks_bytes(&wrong, 0, Some("uncore_iio_2")),
            vec![(None, Some(120_000.0))]
        );
    }
}
