//! A device's TX queues as its qdiscs count them: under an `mq` root (the default on a
//! multi-queue device that has a queue: most NICs, tun/tap) each TX queue has a qdisc of its
//! own, which counts every packet it passes on (a GSO packet as its segments), so the
//! per-queue TX counts come from the kernel at no per-packet cost. Asked with one
//! RTM_GETQDISC dump an interval; a device with `noqueue` (veth) or one root qdisc for all
//! its queues has none to give.
use crate::probe::kstats::QueueStat;
use crate::snapshot::Dir;

use super::netlink::{attrs, uint};

pub const RTM_GETQDISC: u16 = 38;
const TCMSG: usize = 20;
const TCA_KIND: u16 = 1;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_PKT64: u16 = 8;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;

/// The body of a qdisc dump request for one device (a struct tcmsg).
pub fn dump_body(ifindex: u32) -> [u8; TCMSG] {
    let mut m = [0u8; TCMSG];
    m[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    m
}

/// One qdisc of a dump: its parent handle, kind and (bytes, packets).
struct Qdisc<'a> {
    parent: u32,
    kind: &'a [u8],
    bytes: u64,
    packets: u64,
}

fn parse(msg: &[u8], ifindex: u32) -> Option<Qdisc<'_>> {
    let word = |i: usize| {
        msg.get(i..i + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    if word(4)? != ifindex {
        return None;
    }
    let parent = word(12)?;
    let a = attrs(msg.get(TCMSG..)?);
    let kind = a
        .iter()
        .find(|(t, _)| *t == TCA_KIND)
        .map(|(_, v)| v.split(|&b| b == 0).next().unwrap_or(v))?;
    let stats = a
        .iter()
        .find(|(t, _)| *t == TCA_STATS2)
        .map(|(_, v)| attrs(v))
        .unwrap_or_default();
    // gnet_stats_basic: u64 bytes, u32 packets (which wraps); the 64-bit count where the
    // kernel gives it.
    let basic = stats
        .iter()
        .find(|(t, _)| *t == TCA_STATS_BASIC)
        .map(|(_, v)| *v)?;
    let bytes = basic
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)?;
    let packets32 = basic
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes)
        .map(u64::from)?;
    let packets = stats
        .iter()
        .find(|(t, _)| *t == TCA_STATS_PKT64)
        .and_then(|(_, v)| uint(v))
        .unwrap_or(packets32);
    Some(Qdisc {
        parent,
        kind,
        bytes,
        packets,
    })
}

/// The per-queue TX counts of `ifindex` in a qdisc dump: the children of an `mq` root, whose
/// parent's minor number is the queue's number plus one. Empty without an `mq` root.
pub fn tx_queues(msgs: &[Vec<u8>], ifindex: u32) -> Vec<QueueStat> {
    let all: Vec<Qdisc> = msgs.iter().filter_map(|m| parse(m, ifindex)).collect();
    let Some(root) = all.iter().find(|q| q.parent == TC_H_ROOT) else {
        return Vec::new();
    };
    if root.kind != b"mq" {
        return Vec::new();
    }
    let mut out: Vec<QueueStat> = all
        .iter()
        .filter(|q| q.parent != TC_H_ROOT && q.parent >> 16 == 0 && q.parent & 0xFFFF > 0)
        .map(|q| QueueStat {
            dir: Dir::Tx,
            queue: (q.parent & 0xFFFF) - 1,
            packets: Some(q.packets),
            bytes: Some(q.bytes),
            hw_drops: None,
            alloc_fail: None,
        })
        .collect();
    out.sort_by_key(|q| q.queue);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::netlink::attr;

    fn qdisc(
        ifindex: u32,
        parent: u32,
        kind: &str,
        bytes: u64,
        packets: u32,
        pkt64: Option<u64>,
    ) -> Vec<u8> {
        let mut m = vec![0u8; TCMSG];
        m[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        m[12..16].copy_from_slice(&parent.to_ne_bytes());
        m.extend(attr(TCA_KIND, format!("{kind}\0").as_bytes()));
        let mut basic = bytes.to_ne_bytes().to_vec();
        basic.extend(packets.to_ne_bytes());
        basic.extend([0u8; 4]);
        let mut stats = attr(TCA_STATS_BASIC, &basic);
        if let Some(p) = pkt64 {
            stats.extend(attr(TCA_STATS_PKT64, &p.to_ne_bytes()));
        }
        m.extend(attr(TCA_STATS2, &stats));
        m
    }

    #[test]
    fn an_mq_roots_children_are_the_tx_queues() {
        let dump = [
            qdisc(5, TC_H_ROOT, "mq", 9000, 90, None),
            qdisc(5, 2, "pfifo_fast", 4000, 40, Some(40)),
            qdisc(5, 1, "fq_codel", 5000, 50, Some(5_000_000_000)),
            qdisc(6, 1, "pfifo_fast", 1, 1, None),
        ];
        let q = tx_queues(&dump, 5);
        assert_eq!(
            q.iter()
                .map(|q| (q.queue, q.packets, q.bytes))
                .collect::<Vec<_>>(),
            [
                (0, Some(5_000_000_000), Some(5000)),
                (1, Some(40), Some(4000))
            ]
        );
        // One root for all queues, or noqueue: nothing per queue.
        assert!(tx_queues(&[qdisc(5, TC_H_ROOT, "fq_codel", 1, 1, None)], 5).is_empty());
        assert!(tx_queues(&[qdisc(5, TC_H_ROOT, "noqueue", 0, 0, None)], 5).is_empty());
        assert!(tx_queues(&[], 5).is_empty());
    }
}
