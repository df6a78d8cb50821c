//! Each modelled queue's verdict with the reason behind it, and why there is nothing to change when the model finds nothing: what the answer and the advice both state.
use serde::Serialize;

use super::geometry::GeometryOverrides;
use crate::advise::{HostObservation, ModelView, QueueObservation, MIN_PACKETS_FOR_VERDICT};
use crate::model::analytic::{self, Dir as MDir, QueueAnalytic, SocketAnalytic, Verdict};
use crate::model::geometry::LlcGeometry;
use crate::snapshot::Dir;
use crate::units::{fmt_bytes, fmt_duration};

pub use crate::advise::VerdictKind;

/// One queue's verdict with the reason for it.
#[derive(Debug, Clone, Serialize)]
pub struct QueueVerdict {
    pub dir: Dir,
    pub queue: u32,
    pub verdict: VerdictKind,
    /// Why, in one sentence with the numbers behind it.
    pub reason: String,
    pub footprint_bytes: Option<u64>,
    pub inflight_bytes: Option<f64>,
    pub predicted_write_hit_pct: Option<f64>,
    pub predicted_read_hit_pct: Option<f64>,
    /// The copy's LLC read miss % and the DRAM traffic the queue's packets cause (GB/s).
    pub predicted_cpu_read_miss_pct: Option<f64>,
    pub predicted_dram_read_gbps: Option<f64>,
    pub predicted_dram_write_gbps: Option<f64>,
    /// The ring size was assumed: the driver reports none.
    pub ring_assumed: bool,
}

fn sdir(d: MDir) -> Dir {
    match d {
        MDir::Rx => Dir::Rx,
        MDir::Tx => Dir::Tx,
    }
}

/// Why the model gave a queue its verdict: the socket's rings together against DDIO's
/// capacity, or the queue's residence against the time DDIO takes to turn over.
fn reason(
    qa: &QueueAnalytic,
    sock: &SocketAnalytic,
    g: &LlcGeometry,
    o: Option<&QueueObservation>,
) -> String {
    let rx = qa.dir == MDir::Rx;
    let socket_verdict = if rx { sock.rx_verdict } else { sock.tx_verdict };
    let rings = if rx { "RX rings" } else { "RX and TX rings" };
    let need = if rx {
        sock.rx_footprint_bytes
    } else {
        sock.rx_footprint_bytes + sock.tx_footprint_bytes
    };
    let nominal = fmt_bytes(g.ddio_capacity_bytes() as f64);
    if qa.verdict > socket_verdict {
        let waits = o
            .and_then(|o| o.residence_ns_p50)
            .map_or_else(|| "?".into(), fmt_duration);
        return format!(
            "its buffers wait {waits} at p50 from DMA to the last CPU read, {} the {} in which the socket's DMA writes turn over the usable {} of DDIO",
            if qa.verdict == Verdict::Leaky { "longer than" } else { "close to" },
            fmt_duration(sock.turnover_ns),
            fmt_bytes(g.usable_ddio_bytes() as f64)
        );
    }
    match qa.verdict {
        Verdict::Leaky => format!(
            "the socket's {rings} together need {} of DDIO, more than its {nominal} in {} ways",
            fmt_bytes(need as f64),
            g.ddio_ways
        ),
        Verdict::AtRisk => format!(
            "the socket's {rings} together need {}: within DDIO's {nominal}, but about {:.0}% of DMA writes are expected to find their set's DDIO ways full",
            fmt_bytes(need as f64),
            100.0 * analytic::expected_conflict_miss_fraction(need as f64, g)
        ),
        Verdict::Fits => format!(
            "the socket's {rings} together need {}, within DDIO's {nominal}, and its buffers are read well before DDIO turns over",
            fmt_bytes(need as f64)
        ),
    }
}

/// Every modelled queue's verdict (the model view's, the one computation every surface
/// shows) with its reason.
pub fn verdicts(
    obs: &HostObservation,
    model: &ModelView,
    driver: Option<&str>,
) -> Vec<QueueVerdict> {
    model
        .queues
        .iter()
        .map(|q| {
            let o = obs.queues.iter().find(|o| o.dir == q.dir && o.queue == q.queue);
            let ring_assumed = o.is_none_or(|o| o.ring_entries.is_none());
            let qa = model.socket.queues.iter().find(|a| a.dir == q.dir && a.queue == q.queue);
            let few = o
                .and_then(|o| o.packets)
                .filter(|p| *p < MIN_PACKETS_FOR_VERDICT);
            let reason = match (q.verdict, qa) {
                (VerdictKind::Unknown, _) if few.is_some() => {
                    let n = few.unwrap_or(0);
                    format!(
                        "it carried {n} packet{}, too little traffic for a verdict (it takes {MIN_PACKETS_FOR_VERDICT})",
                        if n == 1 { "" } else { "s" }
                    )
                }
                (VerdictKind::Unknown, _) => format!(
                    "{} reports no TX ring size, and the model predicts no TX hit rate for this traffic",
                    driver.unwrap_or("the driver")
                ),
                (_, None) => "the model gives no reason for this queue".into(),
                (_, Some(qa)) => {
                    let mut r = reason(qa, &model.socket, &obs.geometry, o);
                    if ring_assumed {
                        r.push_str(&format!(
                            "; ring size assumed, {} descriptors: the driver reports none",
                            crate::advise::ASSUMED_RING
                        ));
                    }
                    r
                }
            };
            let known = q.verdict != VerdictKind::Unknown;
            QueueVerdict {
                dir: sdir(q.dir),
                queue: q.queue,
                verdict: q.verdict,
                reason,
                footprint_bytes: known.then_some(q.footprint_bytes),
                inflight_bytes: known.then_some(q.inflight_bytes),
                predicted_write_hit_pct: q.predicted_write_hit_pct,
                predicted_read_hit_pct: q.predicted_read_hit_pct,
                predicted_cpu_read_miss_pct: q.predicted_cpu_read_miss_pct,
                predicted_dram_read_gbps: q.predicted_dram_read_gbps,
                predicted_dram_write_gbps: q.predicted_dram_write_gbps,
                ring_assumed,
            }
        })
        .collect()
}

/// Why there is nothing to change, and what to do next.
#[derive(Debug, Clone, Serialize)]
pub struct NoChange {
    pub reasons: Vec<String>,
    pub next_steps: Vec<String>,
}

/// Why the recommendation engine found nothing, from what it was given. A next step never
/// repeats what was just run: `o` are the flags this answer was computed with.
pub fn no_change(
    obs: &HostObservation,
    verdicts: &[QueueVerdict],
    file: &str,
    driver: Option<&str>,
    o: GeometryOverrides,
) -> NoChange {
    let mut reasons = Vec::new();
    let mut next_steps = Vec::new();
    let rx: Vec<&QueueObservation> = obs.queues.iter().filter(|q| q.dir == MDir::Rx).collect();
    if rx.is_empty() {
        reasons.push("no RX traffic in the window: there is nothing to size".to_string());
        next_steps.push("record while the traffic of interest runs".into());
        return NoChange {
            reasons,
            next_steps,
        };
    }
    let no_ddio = obs.device.no_ddio;
    if no_ddio {
        reasons.push("this CPU has no DDIO: there is nothing on this host to tune".to_string());
        next_steps.push("record on an Intel Xeon host to measure DDIO there".to_string());
    }
    if !o.any() {
        next_steps.push(
            "to model another Intel LLC add --llc-mib, --llc-ways and --ddio-ways: the LLC's size and ways are the files size and ways_of_associativity in /sys/devices/system/cpu/cpu0/cache/index3/ (or lscpu -C) on that host, its DDIO ways are the bits set in MSR 0xC8B (rdmsr 0xc8b; 2 by default)"
            .to_string(),
        );
    }
    if rx.iter().all(|q| q.ring_entries.is_none()) {
        reasons.push(format!(
            "{} reports no RX ring size, so no ring or DDIO-way change can be worked out",
            driver.unwrap_or("the driver")
        ));
        next_steps.push(format!("see the model's hit rate at other ring sizes: ddioscope simulate {file} --ring 256,512,1024,2048"));
    } else if !no_ddio {
        let leaking = verdicts.iter().filter(|v| v.verdict.leaks()).count();
        reasons.push(if leaking == 0 {
            "every queue fits: its ring absorbs the observed bursts within DDIO's usable capacity".to_string()
        } else {
            "no ring both absorbs the observed bursts and leaves DDIO more room than now, and no counters measured significant misses".to_string()
        });
        if obs.counters.is_none() {
            next_steps.push("capture DDIO counters to measure the misses: scripts/capture-counters.sh, then ddioscope import-counters".into());
        }
    }
    NoChange {
        reasons,
        next_steps,
    }
}
