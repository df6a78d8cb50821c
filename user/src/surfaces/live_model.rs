//! The DDIO model's per-queue verdict on one live interval, for `serve` and `top`: the same
//! computation `report` makes on a recording (`advise::socket_verdicts`), fed with the
//! interval's packets, rates, average frame size and median buffer residence, the driver's
//! ring sizes and the host's LLC (or, on a host without DDIO, the same Intel stand-in the
//! report models). A prediction, not a measurement: DDIO ways are assumed (2) and a ring the
//! driver does not report is assumed to be `advise::ASSUMED_RING` entries.
use crate::advise::{socket_verdicts, QueueObservation, VerdictKind};
use crate::model::analytic::Dir as MDir;
use crate::model::geometry::{vendor_has_ddio, LlcGeometry};
use crate::snapshot::{hist_percentile, Dir, QueueCounters};
use crate::topology::{HostInfo, IfaceInfo};

/// The LLC the live verdicts are for, and where it comes from in words.
#[derive(Debug, Clone)]
pub struct LiveGeometry {
    pub geometry: LlcGeometry,
    pub origin: String,
}

/// The host's LLC as the model sees it (DDIO ways assumed), if sysfs describes one; on a
/// host without DDIO the named Intel stand-in, as `report` uses.
pub fn geometry(host: &HostInfo) -> Option<LiveGeometry> {
    if vendor_has_ddio(&host.cpu_vendor) == Some(false) {
        let s = LlcGeometry::intel_stand_in();
        return Some(LiveGeometry {
            origin: format!(
                "no DDIO on this host: the Intel stand-in, preset {}",
                s.preset
            ),
            geometry: s.geometry,
        });
    }
    let l = host.llc.as_ref()?;
    let g = LlcGeometry::new(l.size_bytes, l.ways, l.line_bytes.max(64)).ok()?;
    Some(LiveGeometry {
        origin: "this host's LLC, DDIO ways assumed".into(),
        geometry: g,
    })
}

/// The socket's RX rings against DDIO, and each queue's verdict, for one interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveVerdicts {
    /// Bytes the RX rings that carried traffic need in DDIO (as `report`'s "ring needs",
    /// summed), and DDIO's nominal capacity.
    pub rx_footprint_bytes: u64,
    pub ddio_capacity_bytes: u64,
    pub queues: Vec<(Dir, u32, VerdictKind)>,
}

/// One verdict per queue that carried packets in the interval (`queues` are its deltas).
pub fn verdicts(
    geom: &LlcGeometry,
    iface: &IfaceInfo,
    queues: &[QueueCounters],
    dur_ns: u64,
) -> LiveVerdicts {
    let dur_s = dur_ns as f64 / 1e9;
    if dur_s <= 0.0 {
        return LiveVerdicts::default();
    }
    let obs: Vec<QueueObservation> = queues
        .iter()
        .filter(|q| q.packets > 0)
        .map(|q| {
            let stage = q.dir.lifetime_stage();
            let (dir, ring) = match q.dir {
                Dir::Rx => (MDir::Rx, iface.rx_ring),
                Dir::Tx => (MDir::Tx, iface.tx_ring),
            };
            QueueObservation {
                dir,
                queue: q.queue,
                ring_entries: ring,
                pkts_per_s: q.packets as f64 / dur_s,
                bytes_per_s: q.bytes as f64 / dur_s,
                avg_pkt_bytes: q.bytes as f64 / q.packets as f64,
                residence_ns_p50: hist_percentile(
                    &q.stage_hist[stage],
                    50.0,
                    q.stage_max_ns[stage],
                )
                .map(|v| v as f64),
                residence_ns_p99: None,
                napi_polls: q.napi_polls,
                napi_budget_exhausted: q.napi_budget_exhausted,
                peak_inflight_pkts: None,
                drops: q.drops,
                // Live intervals carry no drop reasons; no rule reads them here.
                full_drops: Default::default(),
                packets: Some(q.packets),
                top_flow_bytes_per_s: None,
                nic_ring_drops: None,
                size_hist: Vec::new(),
                socket: None,
            }
        })
        .collect();
    // No simulation runs live: no queue has a predicted hit rate.
    let (sock, v) = socket_verdicts(geom, &obs, &[]);
    LiveVerdicts {
        rx_footprint_bytes: sock.rx_footprint_bytes,
        ddio_capacity_bytes: sock.ddio_capacity_bytes,
        queues: v
            .into_iter()
            .map(|(d, q, k)| (if d == MDir::Rx { Dir::Rx } else { Dir::Tx }, q, k))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(queue: u32, packets: u64, bytes: u64, residence_bucket: usize) -> QueueCounters {
        let mut q = QueueCounters::new(Dir::Rx, queue);
        q.packets = packets;
        q.bytes = bytes;
        q.stage_count[3] = packets;
        q.stage_hist[3][residence_bucket] = packets;
        q
    }

    #[test]
    fn a_small_ring_fits_and_a_huge_one_leaks() {
        let g = LlcGeometry::skx_gold_6140();
        let quiet = QueueCounters::new(Dir::Rx, 1);
        let busy = rx(0, 100_000, 100_000 * 1500, 12); // ~4-8 µs residence
        let small = IfaceInfo {
            rx_ring: Some(256),
            ..Default::default()
        };
        let v = verdicts(&g, &small, &[busy.clone(), quiet], 1_000_000_000);
        assert_eq!(
            v.queues,
            vec![(Dir::Rx, 0, VerdictKind::Fits)],
            "queues without packets get no verdict"
        );
        // 8192 entries x 1.5 KiB = 13 MiB against 4.5 MiB of DDIO capacity.
        let huge = IfaceInfo {
            rx_ring: Some(8192),
            ..Default::default()
        };
        let v = verdicts(&g, &huge, std::slice::from_ref(&busy), 1_000_000_000);
        assert_eq!(v.queues, vec![(Dir::Rx, 0, VerdictKind::Leaky)]);
        assert!(v.rx_footprint_bytes > v.ddio_capacity_bytes);
        // A handful of packets: no verdict, as in a report.
        let few = rx(2, 14, 14 * 1500, 12);
        let v = verdicts(&g, &huge, &[busy, few], 1_000_000_000);
        assert_eq!(v.queues[1], (Dir::Rx, 2, VerdictKind::Unknown));
    }

    #[test]
    fn a_host_without_ddio_is_modelled_as_the_stand_in() {
        let host = HostInfo {
            cpu_vendor: "AuthenticAMD".into(),
            ..Default::default()
        };
        let g = geometry(&host).expect("stand-in");
        assert_eq!(g.geometry, LlcGeometry::intel_stand_in().geometry);
        assert!(g.origin.contains("skx6140"), "{}", g.origin);
    }
}
