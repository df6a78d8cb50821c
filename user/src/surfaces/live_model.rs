//! The DDIO model's per-queue verdict (fits / at-risk / leaky) on one live
//! interval, for `serve`: the analytic model (`model::analytic`) fed with the
//! interval's rates, average frame size and median buffer residence, the
//! driver's ring sizes and the host's LLC. A prediction, not a measurement:
//! DDIO ways are assumed (2) and a ring the driver does not report is
//! assumed to be `ASSUMED_RING` entries, as `recommend` does.
use crate::model::analytic::{analyse_socket, Dir as MDir, QueueLoad, Verdict};
use crate::model::geometry::LlcGeometry;
use crate::snapshot::{hist_percentile, Dir, QueueCounters};
use crate::topology::{HostInfo, IfaceInfo};

/// Ring entries assumed when the driver reports none (the advice's default too).
pub const ASSUMED_RING: u32 = 1024;
/// The stage whose median is the buffer residence: RX driver hand-up → free,
/// TX driver xmit → completion free (the NIC's read window).
const RESIDENCE_STAGE: [usize; 2] = [3, 2];

/// The host's LLC as the model sees it (DDIO ways assumed), if sysfs describes one.
pub fn geometry(host: &HostInfo) -> Option<LlcGeometry> {
    let l = host.llc.as_ref()?;
    LlcGeometry::new(l.size_bytes, l.ways, l.line_bytes.max(64)).ok()
}

/// One verdict per queue that carried packets in the interval (`queues` are its deltas).
pub fn verdicts(
    geom: &LlcGeometry,
    iface: &IfaceInfo,
    queues: &[QueueCounters],
    dur_ns: u64,
) -> Vec<(Dir, u32, Verdict)> {
    let dur_s = dur_ns as f64 / 1e9;
    if dur_s <= 0.0 {
        return Vec::new();
    }
    let loads: Vec<QueueLoad> = queues
        .iter()
        .filter(|q| q.packets > 0)
        .map(|q| {
            let (mdir, ring, stage) = match q.dir {
                Dir::Rx => (MDir::Rx, iface.rx_ring, RESIDENCE_STAGE[0]),
                Dir::Tx => (MDir::Tx, iface.tx_ring, RESIDENCE_STAGE[1]),
            };
            QueueLoad {
                dir: mdir,
                queue: q.queue,
                ring_entries: ring.unwrap_or(ASSUMED_RING),
                pkts_per_s: q.packets as f64 / dur_s,
                bytes_per_s: q.bytes as f64 / dur_s,
                avg_pkt_bytes: q.bytes as f64 / q.packets as f64,
                residence_ns: hist_percentile(&q.stage_hist[stage], 50.0, q.stage_max_ns[stage])
                    .map(|v| v as f64),
            }
        })
        .collect();
    analyse_socket(geom, &loads)
        .queues
        .into_iter()
        .map(|q| {
            (
                if q.dir == MDir::Rx { Dir::Rx } else { Dir::Tx },
                q.queue,
                q.verdict,
            )
        })
        .collect()
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
            v,
            vec![(Dir::Rx, 0, Verdict::Fits)],
            "queues without packets get no verdict"
        );
        // 8192 entries x 1.5 KiB = 13 MiB against 4.5 MiB of DDIO capacity.
        let huge = IfaceInfo {
            rx_ring: Some(8192),
            ..Default::default()
        };
        assert_eq!(
            verdicts(&g, &huge, &[busy], 1_000_000_000),
            vec![(Dir::Rx, 0, Verdict::Leaky)]
        );
    }
}
