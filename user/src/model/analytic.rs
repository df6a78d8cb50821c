//! Analytic DDIO model: per-queue ring footprint, Little's-law in-flight bytes, share of DDIO capacity, fits / at-risk / leaky verdicts per queue and per socket.

use serde::{Deserialize, Serialize};

use super::geometry::LlcGeometry;

pub const LINE: u64 = 64;

pub use super::geometry::USABLE_DDIO_FRACTION;

/// A working set within nominal capacity is still "at risk" when this fraction of its DMA
/// writes is expected to find the set's DDIO ways full: one write in five leaking doubles
/// the memory traffic of a ring that otherwise fits. On the 6140 rows this is the line
/// between footprints that measured ≥80% hits (fits) and those at 63% (1024 B × 4096).
pub const AT_RISK_WRITE_MISS: f64 = 0.20;

/// Bytes of descriptor/completion state the NIC writes per received packet. One 64 B line
/// per packet (mlx5 CQE; conservative for Intel's 16-32 B write-back descriptors). With it
/// the ResQ footprints are reproduced exactly: 12×2048×(64+64) B = 3.0 MiB and
/// 12×2048×(1536+64) B = 37.5 MiB.
pub const DESC_BYTES_PER_PKT: u32 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Working set within nominal DDIO capacity; only hash-conflict misses (< 20% expected).
    Fits,
    /// Within nominal capacity but ≥ 20% of writes expected to conflict, or residence near
    /// the capacity's turnover time.
    AtRisk,
    /// Beyond nominal capacity or residence longer than the capacity's turnover time.
    Leaky,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Fits => "fits",
            Verdict::AtRisk => "at_risk",
            Verdict::Leaky => "leaky",
        }
    }
}

/// As in JSON: `fits`, `at_risk`, `leaky`.
impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Verdict::Fits => "fits",
            Verdict::AtRisk => "at_risk",
            Verdict::Leaky => "leaky",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    Rx,
    Tx,
}

/// As in JSON: `rx`, `tx`.
impl std::fmt::Display for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Dir::Rx => "rx",
            Dir::Tx => "tx",
        })
    }
}

/// Bytes a packet of `pkt_bytes` occupies in the LLC: the NIC writes whole lines.
pub fn line_rounded(pkt_bytes: u32) -> u64 {
    (pkt_bytes as u64).div_ceil(LINE) * LINE
}

/// Ring working set: every descriptor's buffer is rewritten once per ring turn.
/// `desc_bytes` is the descriptor/completion state written per packet.
pub fn ring_footprint_bytes(ring_entries: u32, pkt_bytes: u32, desc_bytes: u32) -> u64 {
    ring_entries as u64 * line_rounded(pkt_bytes)
        + (ring_entries as u64 * desc_bytes as u64).div_ceil(LINE) * LINE
}

/// Little's law: bytes waiting between DMA and the last CPU touch.
pub fn inflight_bytes(bytes_per_s: f64, residence_ns: f64) -> f64 {
    bytes_per_s.max(0.0) * residence_ns.max(0.0) / 1e9
}

/// Expected fraction of DMA writes that miss because their set's DDIO ways are already
/// full, for a working set of `working_set_bytes` spread by the slice/set hash over all
/// sets. Lines per set are Poisson(λ), λ = working-set lines / sets; a set holds at most
/// `ddio_ways` I/O lines, so the overflow is E[max(0, N − W)] / λ. Capacity alone (λ ≤ W)
/// does not prevent these conflict misses; ResQ's 3.0 MiB at 64 B (0.67 × DDIO) gives
/// 15.5% here and measured 8.5%.
pub fn expected_conflict_miss_fraction(working_set_bytes: f64, geom: &LlcGeometry) -> f64 {
    let sets = geom.sets.max(1) as f64;
    let lambda = working_set_bytes.max(0.0) / geom.line_bytes.max(1) as f64 / sets;
    if lambda <= 0.0 {
        return 0.0;
    }
    let w = geom.ddio_ways.max(1);
    // E[max(0, N − W)] = λ − W + Σ_{k<W} (W − k) P(N = k)
    let mut p = (-lambda).exp();
    let mut below = 0.0;
    for k in 0..w {
        below += (w - k) as f64 * p;
        p *= lambda / (k + 1) as f64;
    }
    ((lambda - w as f64 + below) / lambda).clamp(0.0, 1.0)
}

/// Verdict for a DDIO working set (bytes written by I/O and re-used) on `geom`:
/// * leaky — beyond the nominal DDIO capacity: capacity misses, most writes re-allocate;
/// * at-risk — within capacity, but ≥ `AT_RISK_WRITE_MISS` of writes expected to conflict;
/// * fits — within capacity with fewer conflict misses (the predicted hit rate says how many).
pub fn verdict_for(working_set_bytes: f64, geom: &LlcGeometry) -> Verdict {
    let nominal = geom.ddio_capacity_bytes() as f64;
    if working_set_bytes > nominal {
        Verdict::Leaky
    } else if expected_conflict_miss_fraction(working_set_bytes, geom) >= AT_RISK_WRITE_MISS {
        Verdict::AtRisk
    } else {
        Verdict::Fits
    }
}

/// Time the socket's I/O writes take to turn over the usable DDIO capacity: a packet that
/// waits longer than this is evicted before the CPU reads it (leaky DMA).
pub fn turnover_ns(geom: &LlcGeometry, socket_io_write_bytes_per_s: f64) -> f64 {
    if socket_io_write_bytes_per_s <= 0.0 {
        return f64::INFINITY;
    }
    geom.usable_ddio_bytes() as f64 / socket_io_write_bytes_per_s * 1e9
}

/// Inputs for one queue of one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueLoad {
    pub dir: Dir,
    pub queue: u32,
    pub ring_entries: u32,
    pub pkts_per_s: f64,
    pub bytes_per_s: f64,
    pub avg_pkt_bytes: f64,
    /// DMA → last CPU touch (RX) or CPU write → NIC read (TX), p50 or mean.
    pub residence_ns: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueAnalytic {
    pub dir: Dir,
    pub queue: u32,
    pub footprint_bytes: u64,
    pub inflight_bytes: f64,
    /// This queue's footprint over nominal DDIO capacity.
    pub capacity_share: f64,
    pub verdict: Verdict,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketAnalytic {
    pub ddio_capacity_bytes: u64,
    pub usable_ddio_bytes: u64,
    pub rx_footprint_bytes: u64,
    pub tx_footprint_bytes: u64,
    pub inflight_bytes: f64,
    pub io_write_bytes_per_s: f64,
    pub turnover_ns: f64,
    pub rx_verdict: Verdict,
    pub tx_verdict: Verdict,
    pub queues: Vec<QueueAnalytic>,
}

/// Analyse all queues sharing one socket's DDIO ways. A queue's verdict is the worse of
/// (a) the socket's summed ring footprint (every queue's writes evict every other's) and
/// (b) its own residence time against the socket's DDIO turnover time.
pub fn analyse_socket(geom: &LlcGeometry, loads: &[QueueLoad]) -> SocketAnalytic {
    let nominal = geom.ddio_capacity_bytes();
    let fp = |l: &QueueLoad| {
        ring_footprint_bytes(
            l.ring_entries,
            l.avg_pkt_bytes.ceil().max(1.0) as u32,
            DESC_BYTES_PER_PKT,
        )
    };
    let rx_fp: u64 = loads.iter().filter(|l| l.dir == Dir::Rx).map(fp).sum();
    let tx_fp: u64 = loads.iter().filter(|l| l.dir == Dir::Tx).map(fp).sum();
    // Both RX payload writes and TX-bound data the CPU wrote compete for the same ways;
    // only RX DMA writes allocate through DDIO, so turnover is driven by RX bytes.
    let io_w: f64 = loads
        .iter()
        .filter(|l| l.dir == Dir::Rx)
        .map(|l| l.bytes_per_s)
        .sum();
    let turn = turnover_ns(geom, io_w);
    let rx_v = verdict_for(rx_fp as f64, geom);
    let tx_v = verdict_for((rx_fp + tx_fp) as f64, geom).max(Verdict::Fits);
    let mut total_inflight = 0.0;
    let mut queues = Vec::new();
    for l in loads {
        let f = fp(l);
        let inflight = l
            .residence_ns
            .map(|r| inflight_bytes(l.bytes_per_s, r))
            .unwrap_or(0.0);
        total_inflight += inflight;
        let sock_v = if l.dir == Dir::Rx { rx_v } else { tx_v };
        let (time_v, why_time) = match l.residence_ns {
            Some(r) if r > turn => (
                Verdict::Leaky,
                format!(
                    "residence {:.1} us > DDIO turnover {:.1} us",
                    r / 1e3,
                    turn / 1e3
                ),
            ),
            Some(r) if r > turn * USABLE_DDIO_FRACTION => (
                Verdict::AtRisk,
                format!(
                    "residence {:.1} us is near DDIO turnover {:.1} us",
                    r / 1e3,
                    turn / 1e3
                ),
            ),
            _ => (Verdict::Fits, String::new()),
        };
        let v = sock_v.max(time_v);
        let reason =
            if time_v > sock_v {
                why_time
            } else {
                format!(
                "socket {} ring footprint {:.2} MiB vs DDIO {:.2} MiB nominal / {:.2} MiB usable",
                if l.dir == Dir::Rx { "RX" } else { "RX+TX" },
                (if l.dir == Dir::Rx { rx_fp } else { rx_fp + tx_fp }) as f64 / 1048576.0,
                nominal as f64 / 1048576.0,
                geom.usable_ddio_bytes() as f64 / 1048576.0
            )
            };
        queues.push(QueueAnalytic {
            dir: l.dir,
            queue: l.queue,
            footprint_bytes: f,
            inflight_bytes: inflight,
            capacity_share: f as f64 / nominal.max(1) as f64,
            verdict: v,
            reason,
        });
    }
    SocketAnalytic {
        ddio_capacity_bytes: nominal,
        usable_ddio_bytes: geom.usable_ddio_bytes(),
        rx_footprint_bytes: rx_fp,
        tx_footprint_bytes: tx_fp,
        inflight_bytes: total_inflight,
        io_write_bytes_per_s: io_w,
        turnover_ns: turn,
        rx_verdict: rx_v,
        tx_verdict: tx_v,
        queues,
    }
}

/// Largest ring (power of two, ≥ `min_ring`) such that `queues` rings of `pkt_bytes`
/// buffers stay within usable DDIO capacity; None when even `min_ring` does not fit.
pub fn max_ring_within_usable(
    geom: &LlcGeometry,
    queues: u32,
    pkt_bytes: u32,
    min_ring: u32,
) -> Option<u32> {
    let usable = geom.usable_ddio_bytes();
    let mut best = None;
    let mut r = min_ring.max(1).next_power_of_two();
    while r <= 1 << 16 {
        if queues as u64 * ring_footprint_bytes(r, pkt_bytes, DESC_BYTES_PER_PKT) <= usable {
            best = Some(r);
        } else {
            break;
        }
        r *= 2;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprint_arithmetic() {
        assert_eq!(line_rounded(1500), 1536);
        assert_eq!(line_rounded(64), 64);
        assert_eq!(ring_footprint_bytes(4096, 1024, 0), 4 << 20);
        assert_eq!(ring_footprint_bytes(4, 64, 16), 4 * 64 + 64);
        assert!((inflight_bytes(1e9, 10_000.0) - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn verdict_bands() {
        let g = LlcGeometry::skx_gold_6140();
        // 4.5 MiB nominal on the 6140: 0.22x, 0.67x, 0.93x, 1.3x.
        assert_eq!(verdict_for(1.0 * 1048576.0, &g), Verdict::Fits);
        assert_eq!(verdict_for(3.0 * 1048576.0, &g), Verdict::Fits);
        assert_eq!(verdict_for(4.2 * 1048576.0, &g), Verdict::AtRisk);
        assert_eq!(verdict_for(6.0 * 1048576.0, &g), Verdict::Leaky);
    }

    #[test]
    fn conflict_misses_follow_poisson_overflow() {
        let g = LlcGeometry::skx_gold_6140();
        let f = |mib: f64| expected_conflict_miss_fraction(mib * 1048576.0, &g);
        assert_eq!(f(0.0), 0.0);
        // λ = 1 line per set with 2 DDIO ways: E[max(0,N−2)] = 1 − 2 + 2/e + 1/e = 3/e − 1.
        let one_per_set = g.sets as f64 * 64.0 / 1048576.0;
        assert!((f(one_per_set) - (3.0 / std::f64::consts::E - 1.0)).abs() < 1e-9);
        let v: Vec<f64> = [0.5, 1.0, 2.0, 3.0, 4.5, 9.0]
            .iter()
            .map(|m| f(*m))
            .collect();
        assert!(v.windows(2).all(|w| w[1] > w[0]), "{v:?}");
        assert!(v[0] < 0.01 && v[5] > 0.4 && v[5] < 1.0, "{v:?}");
    }

    #[test]
    fn slow_consumer_is_leaky() {
        let g = LlcGeometry::skx_gold_6140();
        // 10 GB/s into 2 MiB usable turns over every ~0.2 ms; 1 ms residence is leaky.
        let l = QueueLoad {
            dir: Dir::Rx,
            queue: 0,
            ring_entries: 256,
            pkts_per_s: 6.6e6,
            bytes_per_s: 1e10,
            avg_pkt_bytes: 1500.0,
            residence_ns: Some(1e6),
        };
        let s = analyse_socket(&g, std::slice::from_ref(&l));
        assert_eq!(s.queues[0].verdict, Verdict::Leaky);
        let fast = QueueLoad {
            residence_ns: Some(5_000.0),
            ..l
        };
        assert_eq!(analyse_socket(&g, &[fast]).queues[0].verdict, Verdict::Fits);
    }
}
