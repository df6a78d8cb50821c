//! The kernel's own per-queue and page_pool statistics (the netdev generic-netlink family:
//! `qstats-get` per queue, `page-pool-stats-get`), for drivers that keep them. Where a
//! driver counts its queues, tier 0 takes packets and bytes from here, at no per-packet
//! cost; page_pool recycling tells the model how buffers come back. Found by asking: a
//! kernel or driver without them answers with nothing, and the BPF counters stand in.
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

pub use crate::snapshot::PagePoolStat;
use crate::snapshot::Dir;
use crate::topology::netlink::{attr, attrs, uint, Netlink, NLM_F_DUMP};

// The netdev family's commands and attributes (include/uapi/linux/netdev.h).
const CMD_PAGE_POOL_STATS_GET: u8 = 9;
const CMD_QSTATS_GET: u8 = 12;
const A_QSTATS_IFINDEX: u16 = 1;
const A_QSTATS_QUEUE_TYPE: u16 = 2;
const A_QSTATS_QUEUE_ID: u16 = 3;
const A_QSTATS_SCOPE: u16 = 4;
const A_QSTATS_RX_PACKETS: u16 = 8;
const A_QSTATS_RX_BYTES: u16 = 9;
const A_QSTATS_TX_PACKETS: u16 = 10;
const A_QSTATS_TX_BYTES: u16 = 11;
const A_QSTATS_RX_ALLOC_FAIL: u16 = 12;
const A_QSTATS_RX_HW_DROPS: u16 = 13;
const A_QSTATS_TX_HW_DROPS: u16 = 24;
const QSTATS_SCOPE_QUEUE: u32 = 1;
const QUEUE_TYPE_RX: u64 = 0;
const QUEUE_TYPE_TX: u64 = 1;
const A_PP_STATS_INFO: u16 = 1;
const A_PP_ID: u16 = 1;
const A_PP_IFINDEX: u16 = 2;
const A_PP_NAPI_ID: u16 = 3;

/// One queue as the driver counts it (cumulative); None: the driver does not keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStat {
    pub dir: Dir,
    pub queue: u32,
    pub packets: Option<u64>,
    pub bytes: Option<u64>,
    pub hw_drops: Option<u64>,
    pub alloc_fail: Option<u64>,
}

/// The answer to a queue-scoped qstats dump, queue by queue.
pub fn parse_qstats(msgs: &[Vec<u8>], ifindex: u32) -> Vec<QueueStat> {
    let mut out = Vec::new();
    for m in msgs {
        let Some(body) = m.get(4..) else { continue };
        let a = attrs(body);
        let get = |k: u16| a.iter().find(|(t, _)| *t == k).and_then(|(_, v)| uint(v));
        if get(A_QSTATS_IFINDEX).is_some_and(|i| i != u64::from(ifindex)) {
            continue;
        }
        let (Some(kind), Some(queue)) = (get(A_QSTATS_QUEUE_TYPE), get(A_QSTATS_QUEUE_ID)) else { continue };
        let q = match kind {
            QUEUE_TYPE_RX => QueueStat {
                dir: Dir::Rx,
                queue: queue as u32,
                packets: get(A_QSTATS_RX_PACKETS),
                bytes: get(A_QSTATS_RX_BYTES),
                hw_drops: get(A_QSTATS_RX_HW_DROPS),
                alloc_fail: get(A_QSTATS_RX_ALLOC_FAIL),
            },
            QUEUE_TYPE_TX => QueueStat {
                dir: Dir::Tx,
                queue: queue as u32,
                packets: get(A_QSTATS_TX_PACKETS),
                bytes: get(A_QSTATS_TX_BYTES),
                hw_drops: get(A_QSTATS_TX_HW_DROPS),
                alloc_fail: None,
            },
            _ => continue,
        };
        out.push(q);
    }
    out
}

/// The answer to a page_pool stats dump: the pools of `ifindex`.
pub fn parse_page_pool_stats(msgs: &[Vec<u8>], ifindex: u32) -> Vec<PagePoolStat> {
    let mut out = Vec::new();
    for m in msgs {
        let Some(body) = m.get(4..) else { continue };
        let a = attrs(body);
        let Some((_, info)) = a.iter().find(|(t, _)| *t == A_PP_STATS_INFO) else { continue };
        let info = attrs(info);
        let iget = |k: u16| info.iter().find(|(t, _)| *t == k).and_then(|(_, v)| uint(v));
        if iget(A_PP_IFINDEX) != Some(u64::from(ifindex)) {
            continue;
        }
        let get = |k: u16| a.iter().find(|(t, _)| *t == k).and_then(|(_, v)| uint(v)).unwrap_or(0);
        out.push(PagePoolStat {
            id: iget(A_PP_ID).unwrap_or(0),
            napi_id: iget(A_PP_NAPI_ID),
            alloc_fast: get(8),
            alloc_slow: get(9),
            alloc_slow_high_order: get(10),
            alloc_empty: get(11),
            alloc_refill: get(12),
            alloc_waive: get(13),
            recycle_cached: get(14),
            recycle_cache_full: get(15),
            recycle_ring: get(16),
            recycle_ring_full: get(17),
            recycle_released_refcnt: get(18),
        });
    }
    out
}

/// The netdev family, asked from inside the device's namespace.
pub struct KernelStats {
    nl: Netlink,
    family: u16,
    ifindex: u32,
}

impl KernelStats {
    /// None: this kernel has no netdev family (older than 6.5), so no such statistics.
    pub fn open(netns: Option<&Path>, ifindex: u32) -> Result<Option<KernelStats>> {
        let mut nl = Netlink::open(libc::NETLINK_GENERIC, netns)?;
        Ok(nl.genl_family("netdev")?.map(|family| KernelStats { nl, family, ifindex }))
    }

    fn dump(&mut self, cmd: u8, body_attrs: &[u8]) -> std::io::Result<Vec<Vec<u8>>> {
        let mut body = vec![cmd, 1, 0, 0];
        body.extend_from_slice(body_attrs);
        self.nl.request(self.family, NLM_F_DUMP, &body)
    }

    /// The driver's per-queue counters (empty: the driver keeps none, or the kernel has no
    /// qstats).
    pub fn queues(&mut self) -> Vec<QueueStat> {
        let mut a = attr(A_QSTATS_IFINDEX, &self.ifindex.to_ne_bytes());
        a.extend(attr(A_QSTATS_SCOPE, &QSTATS_SCOPE_QUEUE.to_ne_bytes()));
        self.dump(CMD_QSTATS_GET, &a).map(|m| parse_qstats(&m, self.ifindex)).unwrap_or_default()
    }

    /// The device's page pools (empty: none, or no page_pool statistics in this kernel).
    pub fn page_pools(&mut self) -> Vec<PagePoolStat> {
        self.dump(CMD_PAGE_POOL_STATS_GET, &[]).map(|m| parse_page_pool_stats(&m, self.ifindex)).unwrap_or_default()
    }
}

/// Whether the driver's counters cover a direction: every queue it listed has packets and
/// bytes (then tier 0 needs no per-packet program to count that direction).
pub fn covers(stats: &[QueueStat], dir: Dir) -> bool {
    let mut of_dir = stats.iter().filter(|q| q.dir == dir).peekable();
    of_dir.peek().is_some() && of_dir.all(|q| q.packets.is_some() && q.bytes.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A genl message as the kernel sends it (after the netlink header): the genl header,
    /// then attributes.
    fn msg(attrs_: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = vec![CMD_QSTATS_GET, 1, 0, 0];
        for (k, v) in attrs_ {
            m.extend(attr(*k, v));
        }
        m
    }

    #[test]
    fn qstats_replies_become_queues() {
        let rx0 = msg(&[
            (A_QSTATS_IFINDEX, &3u32.to_ne_bytes()),
            (A_QSTATS_QUEUE_TYPE, &0u32.to_ne_bytes()),
            (A_QSTATS_QUEUE_ID, &0u32.to_ne_bytes()),
            (A_QSTATS_RX_PACKETS, &1000u64.to_ne_bytes()),
            (A_QSTATS_RX_BYTES, &1_514_000u64.to_ne_bytes()),
            (A_QSTATS_RX_HW_DROPS, &7u64.to_ne_bytes()),
        ]);
        let tx1 = msg(&[
            (A_QSTATS_IFINDEX, &3u32.to_ne_bytes()),
            (A_QSTATS_QUEUE_TYPE, &1u32.to_ne_bytes()),
            (A_QSTATS_QUEUE_ID, &1u32.to_ne_bytes()),
            (A_QSTATS_TX_PACKETS, &20u64.to_ne_bytes()),
        ]);
        let other = msg(&[(A_QSTATS_IFINDEX, &9u32.to_ne_bytes()), (A_QSTATS_QUEUE_TYPE, &0u32.to_ne_bytes()), (A_QSTATS_QUEUE_ID, &0u32.to_ne_bytes())]);
        let q = parse_qstats(&[rx0, tx1, other], 3);
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].dir, q[0].queue, q[0].packets, q[0].bytes, q[0].hw_drops), (Dir::Rx, 0, Some(1000), Some(1_514_000), Some(7)));
        assert_eq!((q[1].dir, q[1].queue, q[1].packets, q[1].bytes), (Dir::Tx, 1, Some(20), None));
        // RX is covered (packets and bytes on every RX queue); TX lacks bytes.
        assert!(covers(&q, Dir::Rx) && !covers(&q, Dir::Tx));
        assert!(!covers(&[], Dir::Rx));
    }

    #[test]
    fn page_pool_replies_keep_the_devices_pools() {
        let mut info = attr(A_PP_ID, &5u32.to_ne_bytes());
        info.extend(attr(A_PP_IFINDEX, &3u32.to_ne_bytes()));
        info.extend(attr(A_PP_NAPI_ID, &8193u32.to_ne_bytes()));
        let m = msg(&[(A_PP_STATS_INFO | 0x8000, &info), (8, &90u64.to_ne_bytes()), (9, &10u64.to_ne_bytes()), (14, &60u64.to_ne_bytes()), (16, &30u64.to_ne_bytes())]);
        let mut info2 = attr(A_PP_ID, &6u32.to_ne_bytes());
        info2.extend(attr(A_PP_IFINDEX, &4u32.to_ne_bytes()));
        let m2 = msg(&[(A_PP_STATS_INFO, &info2), (8, &1u64.to_ne_bytes())]);
        let p = parse_page_pool_stats(&[m, m2], 3);
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].id, p[0].napi_id, p[0].alloc_fast, p[0].recycle_ring), (5, Some(8193), 90, 30));
        assert_eq!(p[0].recycled_share(), Some(0.9));
    }
}
