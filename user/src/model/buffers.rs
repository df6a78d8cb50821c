//! Receive buffer geometry from the driver's rules: how many bytes of memory a received frame occupies, where in its buffer it starts, and how many of the ring's descriptors it takes, for mlx5 (striding and legacy RQ), Intel's page split/flip (ice, i40e, ixgbe), virtio-net mergeable buffers, generic page_pool frags, and DPDK mbufs.
//!
//! A ring of N descriptors is not N × packet bytes of memory: mlx5's striding RQ posts
//! multi-packet WQEs sized for N MTU frames and packs packets into 256 B strides; Intel
//! drivers split pages in halves and chain 3 KiB buffers for a jumbo frame; virtio sizes its
//! mergeable buffers by the average packet. Each rule below cites the kernel source it
//! follows (file and function; x86-64: PAGE_SIZE 4096, NET_SKB_PAD 64, NET_IP_ALIGN 0,
//! SKB_DATA_ALIGN to 64 B, `sizeof(struct skb_shared_info)` 320).

use serde::{Deserialize, Serialize};

const PAGE: u32 = 4096;
/// NET_SKB_PAD on x86-64: max(32, L1_CACHE_BYTES).
const SKB_PAD: u32 = 64;
/// SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) on x86-64.
const SHINFO: u32 = 320;
/// XDP_PACKET_HEADROOM, the headroom page_pool drivers reserve.
const XDP_HEADROOM: u32 = 256;
/// Ethernet header + VLAN tag + FCS the NIC may write beyond the MTU (mlx5 `hard_mtu`).
const HARD_MTU: u32 = 14 + 4 + 4;

/// A driver's receive buffer scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// mlx5 striding RQ (multi-packet WQEs; the default on ConnectX-5 and later).
    Mlx5,
    /// mlx5 legacy (cyclic) RQ: one WQE of up to four frags per packet.
    Mlx5Legacy,
    /// ice / i40e / ixgbe: half-page buffers flipped between uses.
    Intel,
    /// virtio-net with mergeable receive buffers.
    Virtio,
    /// A page_pool driver that allocates one frag per frame with XDP headroom.
    PagePool,
    /// The kernel default when the driver is not known: 2048 B half-page chunks, 256 B
    /// headroom in the first.
    HalfPage,
    /// DPDK mbufs (2048 B data room, 320 B before it), chained for larger frames.
    Dpdk,
}

impl Driver {
    /// The rule for a kernel driver name as `ethtool -i` reports it; None: no rule known.
    pub fn from_name(name: &str) -> Option<Driver> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "mlx5" | "mlx5_core" => Driver::Mlx5,
            "mlx5_legacy" => Driver::Mlx5Legacy,
            "intel" | "ice" | "i40e" | "ixgbe" | "igb" | "igc" | "iavf" => Driver::Intel,
            "virtio" | "virtio_net" => Driver::Virtio,
            "page_pool" => Driver::PagePool,
            "half_page" | "kernel" => Driver::HalfPage,
            "dpdk" => Driver::Dpdk,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Driver::Mlx5 => "mlx5",
            Driver::Mlx5Legacy => "mlx5_legacy",
            Driver::Intel => "intel",
            Driver::Virtio => "virtio",
            Driver::PagePool => "page_pool",
            Driver::HalfPage => "half_page",
            Driver::Dpdk => "dpdk",
        }
    }
}

/// Where one frame lives and what it costs the ring.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BufLayout {
    /// Memory one frame occupies (its buffers or strides together), consecutive frames
    /// `bytes_per_pkt` apart.
    pub bytes_per_pkt: u32,
    /// Offset of the first frame byte in that memory.
    pub data_offset: u32,
    /// Ring descriptors (as `ethtool -g` counts them) one frame takes; under 1 where a
    /// descriptor holds several frames (mlx5 striding RQ).
    pub descs_per_pkt: f64,
    /// The rule and its kernel source, for output.
    pub rule: &'static str,
}

fn align(x: u32, a: u32) -> u32 {
    x.div_ceil(a) * a
}

/// MLX5_SKB_FRAG_SZ: SKB_DATA_ALIGN(len) + SKB_DATA_ALIGN(sizeof(skb_shared_info)).
fn mlx5_frag_sz(len: u32) -> u32 {
    align(len, 64) + SHINFO
}

/// The layout of a `pkt_bytes` frame on a link of `mtu` under `driver`.
pub fn layout(driver: Driver, mtu: u32, pkt_bytes: u32) -> BufLayout {
    let pkt = pkt_bytes.max(1);
    match driver {
        Driver::Mlx5 => {
            // en/params.c: mlx5e_rx_mpwqe_is_linear_skb / mlx5e_rx_get_linear_stride_sz: a
            // frame whose MLX5_SKB_FRAG_SZ(headroom + hw_mtu) fits a page takes one stride of
            // that size rounded up to a power of two, at MLX5_RX_HEADROOM (NET_SKB_PAD);
            // otherwise mlx5e_mpwqe_get_log_stride_size gives MLX5_MPWRQ_DEF_LOG_STRIDE_SZ
            // (order_base_2(MLX5E_RX_MAX_HEAD) = 256 B strides, no headroom) and a frame
            // takes the strides it fills (en_rx.c: mpwrq_get_cqe_consumed_strides). Ring
            // size: mlx5e_mpwqe_get_log_rq_size posts log_rq_mtu_frames (ethtool's number)
            // frames of the linear stride size, so a descriptor is that many bytes.
            let hw_mtu = mtu + HARD_MTU;
            let linear = mlx5_frag_sz(SKB_PAD + hw_mtu);
            let desc_bytes = linear.next_power_of_two();
            if linear <= PAGE {
                BufLayout {
                    bytes_per_pkt: desc_bytes,
                    data_offset: SKB_PAD,
                    descs_per_pkt: 1.0,
                    rule: "mlx5 striding RQ, linear: one power-of-two stride per frame at 64 B headroom (en/params.c mlx5e_rx_get_linear_stride_sz)",
                }
            } else {
                let b = align(pkt, 256);
                BufLayout {
                    bytes_per_pkt: b,
                    data_offset: 0,
                    descs_per_pkt: b as f64 / desc_bytes as f64,
                    rule: "mlx5 striding RQ, non-linear: frames packed in 256 B strides, ring = MTU frames of the linear stride (en/params.c mlx5e_mpwqe_get_log_stride_size, mlx5e_mpwqe_get_log_rq_size)",
                }
            }
        }
        Driver::Mlx5Legacy => {
            // en/params.c mlx5e_build_rq_frags_info: linear when it fits a page (one
            // power-of-two stride); otherwise DEFAULT_FRAG_SIZE 2048 B frags, the first
            // SKB_WITH_OVERHEAD(2048 - headroom), the last (the fourth,
            // MLX5E_MAX_RX_FRAGS) unbounded; each frag's stride its size rounded up to a
            // power of two, the first including headroom and shared info.
            let hw_mtu = mtu + HARD_MTU;
            let linear = mlx5_frag_sz(SKB_PAD + hw_mtu);
            if linear <= PAGE {
                return BufLayout {
                    bytes_per_pkt: linear.next_power_of_two(),
                    data_offset: SKB_PAD,
                    descs_per_pkt: 1.0,
                    rule: "mlx5 legacy RQ, linear: one power-of-two stride per frame (en/params.c mlx5e_build_rq_frags_info)",
                };
            }
            let first_max = 2048 - SKB_PAD - SHINFO;
            let (mut done, mut bytes, mut i) = (0u32, 0u32, 0u32);
            while done < hw_mtu {
                let mut f = hw_mtu - done;
                if i == 0 {
                    f = f.min(first_max);
                } else if i < 3 {
                    f = f.min(2048);
                }
                done += f;
                let with = if i == 0 { f + SKB_PAD + SHINFO } else { f };
                bytes += with.next_power_of_two();
                i += 1;
            }
            BufLayout {
                bytes_per_pkt: bytes,
                data_offset: SKB_PAD,
                descs_per_pkt: 1.0,
                rule: "mlx5 legacy RQ, non-linear: up to four frags of 2048 B strides per WQE (en/params.c mlx5e_build_rq_frags_info, DEFAULT_FRAG_SIZE)",
            }
        }
        Driver::Intel => {
            // ice_base.c ice_vsi_cfg_frame_size (i40e_main.c i40e_calculate_vsi_rx_buf_len,
            // ixgbe_main.c ixgbe_set_rx_buffer_len alike): MTU <= 1500 gives 1536 B
            // buffers in a 2048 B half page; larger MTUs 3072 B buffers in a half of an
            // order-1 page (ice_txrx.h ice_rx_pg_order). A frame spans
            // ceil(frame / buffer) descriptors (EOP chaining); each buffer's half page is
            // its truesize (ice_txrx.c ice_rx_buf_adjust_pg_offset flips halves), headroom
            // ICE_SKB_PAD (NET_SKB_PAD + NET_IP_ALIGN) for build_skb.
            let (buf, half) = if mtu <= 1500 {
                (1536, 2048)
            } else {
                (3072, 4096)
            };
            let n = pkt.div_ceil(buf).max(1);
            BufLayout {
                bytes_per_pkt: n * half,
                data_offset: SKB_PAD,
                descs_per_pkt: n as f64,
                rule: if mtu <= 1500 {
                    "Intel page split: 1536 B buffers in flipped 2 KiB half pages (ice_base.c ice_vsi_cfg_frame_size, ice_txrx.c ice_rx_buf_adjust_pg_offset)"
                } else {
                    "Intel page split: 3072 B buffers in flipped 4 KiB halves of order-1 pages, chained per frame (ice_base.c ice_vsi_cfg_frame_size, ice_txrx.h ice_rx_pg_order)"
                },
            }
        }
        Driver::Virtio => {
            // virtio_net.c get_mergeable_buf_len: the buffer is the header (12 B,
            // virtio_net_hdr_mrg_rxbuf) plus the average packet clamped to
            // [GOOD_PACKET_LEN 1518, PAGE_SIZE - header], aligned to L1_CACHE_BYTES; buffers
            // are carved one after another from page frags (skb_page_frag_refill, 32 KiB
            // compound pages) and a frame spans as many as it needs (num_buffers).
            let hdr = 12;
            let buf = align(hdr + pkt.clamp(1518, PAGE - hdr), 64);
            let n = (pkt + hdr).div_ceil(buf).max(1);
            BufLayout {
                bytes_per_pkt: n * buf,
                data_offset: hdr,
                descs_per_pkt: n as f64,
                rule: "virtio-net mergeable buffers sized by the average packet from page frags (virtio_net.c get_mergeable_buf_len)",
            }
        }
        Driver::PagePool => {
            // A page_pool frag per frame (page_pool_alloc_frag): XDP_PACKET_HEADROOM, the
            // frame, and the shared info build_skb needs, SKB_DATA_ALIGNed; frags packed in
            // pages (net/core/page_pool.c page_pool_alloc_frag_netmem).
            let b = align(XDP_HEADROOM + pkt, 64) + SHINFO;
            BufLayout {
                bytes_per_pkt: b,
                data_offset: XDP_HEADROOM,
                descs_per_pkt: 1.0,
                rule: "page_pool frag per frame: 256 B XDP headroom + frame + skb_shared_info (net/core/page_pool.c page_pool_alloc_frag)",
            }
        }
        Driver::HalfPage => {
            let n = (256 + pkt).div_ceil(2048).max(1);
            BufLayout {
                bytes_per_pkt: n * 2048,
                data_offset: 256,
                descs_per_pkt: 1.0,
                rule: "kernel default (driver unknown): 2048 B half-page chunks, 256 B headroom, as many chunks as the frame needs",
            }
        }
        Driver::Dpdk => {
            // rte_mbuf: 64 B mempool header + 128 B rte_mbuf + 128 B headroom before a
            // 2048 B data room (RTE_MBUF_DEFAULT_BUF_SIZE); larger frames chain mbufs, one
            // descriptor each (scattered RX).
            let n = pkt.div_ceil(2048).max(1);
            BufLayout {
                bytes_per_pkt: n * 2368,
                data_offset: 320,
                descs_per_pkt: n as f64,
                rule: "DPDK mbufs: 2368 B objects, frame at 320, chained for frames over 2048 B (RTE_MBUF_DEFAULT_BUF_SIZE)",
            }
        }
    }
}

/// The MTU a frame of `pkt_bytes` implies when none is given: the Ethernet payload, at
/// least the standard 1500.
pub fn mtu_for(pkt_bytes: u32) -> u32 {
    pkt_bytes.saturating_sub(14).max(1500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlx5_striding_rq_at_1500_and_9000() {
        // 64 + 1522 → 1600 + 320 = 1920: one 2 KiB stride per frame.
        let l = layout(Driver::Mlx5, 1500, 1514);
        assert_eq!(
            (l.bytes_per_pkt, l.data_offset, l.descs_per_pkt),
            (2048, 64, 1.0)
        );
        // 64 + 9022 → 9088 + 320 = 9408 → 16 KiB per MTU frame of ring; a 9014 B frame fills
        // 36 strides of 256 B: 9216 B, 0.5625 of a descriptor.
        let l = layout(Driver::Mlx5, 9000, 9014);
        assert_eq!(l.bytes_per_pkt, 9216);
        assert!((l.descs_per_pkt - 9216.0 / 16384.0).abs() < 1e-12);
    }

    #[test]
    fn mlx5_legacy_rq_frags_at_9000() {
        // Frags 1664 (stride 2048 with headroom and shared info), 2048, 2048, then 3262
        // (stride 4096): 10240 B per WQE.
        let l = layout(Driver::Mlx5Legacy, 9000, 9014);
        assert_eq!(l.bytes_per_pkt, 10240);
        assert_eq!(layout(Driver::Mlx5Legacy, 1500, 1514).bytes_per_pkt, 2048);
    }

    #[test]
    fn intel_split_virtio_and_page_pool() {
        let l = layout(Driver::Intel, 1500, 1514);
        assert_eq!((l.bytes_per_pkt, l.descs_per_pkt), (2048, 1.0));
        let l = layout(Driver::Intel, 9000, 9014);
        assert_eq!((l.bytes_per_pkt, l.descs_per_pkt), (3 * 4096, 3.0));
        let l = layout(Driver::Virtio, 1500, 1514);
        assert_eq!((l.bytes_per_pkt, l.descs_per_pkt), (1536, 1.0));
        let l = layout(Driver::Virtio, 9000, 9014);
        assert_eq!((l.bytes_per_pkt, l.descs_per_pkt), (3 * 4096, 3.0));
        assert_eq!(
            layout(Driver::PagePool, 1500, 1514).bytes_per_pkt,
            1792 + 320
        );
        // The unknown-driver default keeps 2048 B at 256 for standard frames.
        let l = layout(Driver::HalfPage, 1500, 1500);
        assert_eq!((l.bytes_per_pkt, l.data_offset), (2048, 256));
        assert_eq!(layout(Driver::HalfPage, 9000, 9000).bytes_per_pkt, 5 * 2048);
    }

    #[test]
    fn every_layout_holds_its_frame() {
        for d in [
            Driver::Mlx5,
            Driver::Mlx5Legacy,
            Driver::Intel,
            Driver::Virtio,
            Driver::PagePool,
            Driver::HalfPage,
            Driver::Dpdk,
        ] {
            for pkt in [64u32, 1500, 4000, 9000, 9014, 9216] {
                let l = layout(d, mtu_for(pkt), pkt);
                assert!(l.data_offset + pkt <= l.bytes_per_pkt, "{d:?} {pkt}: {l:?}");
                assert!(l.descs_per_pkt > 0.0);
                assert_eq!(Driver::from_name(d.name()), Some(d));
            }
        }
    }
}
