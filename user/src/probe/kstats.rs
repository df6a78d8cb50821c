//! The kernel's own per-queue and page_pool statistics, for drivers that keep them: the netdev
//! generic-netlink family (`qstats-get` per queue, `page-pool-stats-get`), else the driver's
//! named statistics (`ethtool -S`: veth, mlx5, ice, i40e, ixgbe, virtio_net, ena name their
//! queues' packets and bytes). Where a driver counts its queues, tier 0 takes packets and
//! bytes from here, at no per-packet cost; page_pool recycling tells the model how buffers
//! come back. Found by asking: a driver without them answers with nothing, and the BPF
//! counters stand in.
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::snapshot::Dir;
pub use crate::snapshot::{NicDrop, PagePoolStat};
use crate::topology::netlink::{attr, attrs, uint, Netlink, NLM_F_DUMP};

// The netdev family's commands and attributes (include/uapi/linux/netdev.h).
const CMD_PAGE_POOL_STATS_GET: u8 = 9;
const CMD_QUEUE_GET: u8 = 10;
const CMD_QSTATS_GET: u8 = 12;
const A_QUEUE_ID: u16 = 1;
const A_QUEUE_IFINDEX: u16 = 2;
const A_QUEUE_TYPE: u16 = 3;
const A_QUEUE_NAPI_ID: u16 = 4;
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
        let (Some(kind), Some(queue)) = (get(A_QSTATS_QUEUE_TYPE), get(A_QSTATS_QUEUE_ID)) else {
            continue;
        };
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

/// The answer to a queue dump: each RX queue of `ifindex` the driver tied to a NAPI instance,
/// as (napi id, queue).
pub fn parse_napi_queues(msgs: &[Vec<u8>], ifindex: u32) -> Vec<(u32, u32)> {
    msgs.iter()
        .filter_map(|m| {
            let a = attrs(m.get(4..)?);
            let get = |k: u16| a.iter().find(|(t, _)| *t == k).and_then(|(_, v)| uint(v));
            (get(A_QUEUE_IFINDEX) == Some(u64::from(ifindex))
                && get(A_QUEUE_TYPE) == Some(QUEUE_TYPE_RX))
            .then(|| Some((get(A_QUEUE_NAPI_ID)? as u32, get(A_QUEUE_ID)? as u32)))
            .flatten()
        })
        .collect()
}

/// The answer to a page_pool stats dump: the pools of `ifindex`.
pub fn parse_page_pool_stats(msgs: &[Vec<u8>], ifindex: u32) -> Vec<PagePoolStat> {
    let mut out = Vec::new();
    for m in msgs {
        let Some(body) = m.get(4..) else { continue };
        let a = attrs(body);
        let Some((_, info)) = a.iter().find(|(t, _)| *t == A_PP_STATS_INFO) else {
            continue;
        };
        let info = attrs(info);
        let iget = |k: u16| {
            info.iter()
                .find(|(t, _)| *t == k)
                .and_then(|(_, v)| uint(v))
        };
        if iget(A_PP_IFINDEX) != Some(u64::from(ifindex)) {
            continue;
        }
        let get = |k: u16| {
            a.iter()
                .find(|(t, _)| *t == k)
                .and_then(|(_, v)| uint(v))
                .unwrap_or(0)
        };
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

/// Which of the kernel's sources gave a queue's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelSource {
    /// The netdev family's `qstats-get`.
    Qstats,
    /// The driver's named statistics (`ethtool -S`).
    Ethtool,
}

impl KernelSource {
    pub fn as_str(self) -> &'static str {
        match self {
            KernelSource::Qstats => "qstats",
            KernelSource::Ethtool => "ethtool",
        }
    }
}

/// The device's kernel statistics, asked from inside its namespace.
pub struct KernelStats {
    netdev: Option<(Netlink, u16)>,
    ethtool: Option<crate::topology::ethtool::DriverStats>,
    /// A veth's peer's statistics: its RX queue N is this device's TX queue N (the kernel
    /// counts a veth's TX from them too).
    peer: Option<crate::topology::ethtool::DriverStats>,
    ifindex: u32,
    /// The source the first answer came from: a driver keeps one set of counters for good.
    source: Option<KernelSource>,
    /// A route socket in the device's namespace, for its qdiscs.
    route: Option<Netlink>,
    /// TX per queue from the qdiscs under an mq root, where the source above has no TX.
    qdisc_tx: bool,
    driver: Option<String>,
    /// The NIC's drop counters at the last read, to difference the next one by.
    ring_drops_prev: Vec<NicDrop>,
    /// The netdev commands this kernel or driver does not support: asked once.
    unsupported: Unsupported,
}

/// The commands the kernel answered with EOPNOTSUPP. That answer holds for good (a driver
/// without queue stats, a kernel without page_pool statistics), so such a command is not
/// sent again each interval; any other failure is asked again next time.
#[derive(Debug, Default)]
struct Unsupported(Vec<u8>);

impl Unsupported {
    fn ask<T>(
        &mut self,
        cmd: u8,
        request: impl FnOnce() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        if self.0.contains(&cmd) {
            return Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let answer = request();
        if let Err(e) = &answer {
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                self.0.push(cmd);
            }
        }
        answer
    }
}

impl KernelStats {
    /// The sources that exist here (None: none: no netdev family, no driver statistics).
    pub fn open(
        netns: Option<&Path>,
        ifindex: u32,
        name: &str,
        driver: Option<&str>,
    ) -> Result<Option<KernelStats>> {
        let netdev = match Netlink::open(libc::NETLINK_GENERIC, netns) {
            Ok(mut nl) => nl.genl_family("netdev").ok().flatten().map(|f| (nl, f)),
            Err(_) => None,
        };
        let owned = name.to_string();
        // The ioctl socket keeps the namespace it was made in.
        let ethtool = crate::probe::qcount::in_netns(netns, move || {
            Ok(crate::topology::ethtool::DriverStats::open(&owned))
        })?;
        let route = Netlink::open(libc::NETLINK_ROUTE, netns).ok();
        if netdev.is_none() && ethtool.is_none() && route.is_none() {
            return Ok(None);
        }
        let peer = match driver {
            Some("veth") => crate::topology::veth::peer(netns, ifindex).and_then(|p| {
                let name = p.name.clone();
                crate::probe::qcount::in_netns(p.netns.as_deref(), move || {
                    Ok(crate::topology::ethtool::DriverStats::open(&name))
                })
                .ok()
                .flatten()
            }),
            _ => None,
        };
        let mut k = KernelStats {
            netdev,
            ethtool,
            peer,
            ifindex,
            source: None,
            route,
            qdisc_tx: false,
            driver: driver.map(str::to_string),
            ring_drops_prev: Vec::new(),
            unsupported: Unsupported::default(),
        };
        k.ring_drops_prev = k.ring_drop_counters();
        let q = k.qstats();
        k.source = if !q.is_empty() {
            Some(KernelSource::Qstats)
        } else if k
            .ethtool
            .as_mut()
            .and_then(|e| e.read())
            .is_some_and(|v| !parse_ethtool_stats(&v).is_empty())
        {
            Some(KernelSource::Ethtool)
        } else {
            None
        };
        // A device whose driver names no TX queue counts may still have a qdisc per TX queue.
        if !covers(&k.queues(), Dir::Tx) {
            k.qdisc_tx = !k.qdisc_queues().is_empty();
        }
        Ok(Some(k))
    }

    /// Where the queue counts come from (None: this driver keeps none).
    pub fn source(&self) -> Option<KernelSource> {
        self.source
    }

    /// Where the TX queue counts come from, in the recording's words.
    pub fn tx_source(&self) -> Option<&'static str> {
        if self.qdisc_tx {
            return Some("qdisc");
        }
        match self.source? {
            KernelSource::Ethtool if self.peer.is_some() => Some("veth_peer"),
            s => Some(s.as_str()),
        }
    }

    fn dump(&mut self, cmd: u8, body_attrs: &[u8]) -> std::io::Result<Vec<Vec<u8>>> {
        let Some((nl, family)) = self.netdev.as_mut() else {
            return Ok(Vec::new());
        };
        let mut body = vec![cmd, 1, 0, 0];
        body.extend_from_slice(body_attrs);
        self.unsupported
            .ask(cmd, || nl.request(*family, NLM_F_DUMP, &body))
    }

    fn qstats(&mut self) -> Vec<QueueStat> {
        let mut a = attr(A_QSTATS_IFINDEX, &self.ifindex.to_ne_bytes());
        a.extend(attr(A_QSTATS_SCOPE, &QSTATS_SCOPE_QUEUE.to_ne_bytes()));
        let ifindex = self.ifindex;
        self.dump(CMD_QSTATS_GET, &a)
            .map(|m| parse_qstats(&m, ifindex))
            .unwrap_or_default()
    }

    /// The TX queues' qdisc counts (empty: no mq root, or the kernel could not be asked).
    fn qdisc_queues(&mut self) -> Vec<QueueStat> {
        let ifindex = self.ifindex;
        let Some(nl) = self.route.as_mut() else {
            return Vec::new();
        };
        nl.request(
            crate::topology::qdisc::RTM_GETQDISC,
            NLM_F_DUMP,
            &crate::topology::qdisc::dump_body(ifindex),
        )
        .map(|m| crate::topology::qdisc::tx_queues(&m, ifindex))
        .unwrap_or_default()
    }

    /// The driver's per-queue counters, and the TX qdiscs' where they stand in for the
    /// driver's (empty: none, or they could not be asked this time).
    pub fn queues(&mut self) -> Vec<QueueStat> {
        // The drops that follow are read with these counts, from the same statistics.
        if let Some(e) = self.ethtool.as_mut() {
            e.forget_last();
        }
        let mut q = self.driver_queues();
        if self.qdisc_tx {
            q.retain(|q| q.dir != Dir::Tx);
            q.extend(self.qdisc_queues());
        }
        q
    }

    fn driver_queues(&mut self) -> Vec<QueueStat> {
        match self.source {
            Some(KernelSource::Qstats) => self.qstats(),
            Some(KernelSource::Ethtool) => {
                let mut q = self
                    .ethtool
                    .as_mut()
                    .and_then(|e| e.read())
                    .map(|v| parse_ethtool_stats(&v))
                    .unwrap_or_default();
                if let Some(p) = self.peer.as_mut() {
                    let rx = p
                        .read()
                        .map(|v| parse_ethtool_stats(&v))
                        .unwrap_or_default();
                    q.extend(peer_rx_as_tx(&rx));
                }
                q
            }
            None => Vec::new(),
        }
    }

    /// Which NAPI instance serves each RX queue, where the driver says (empty: it does not,
    /// as veth does not, or the kernel has no queue table).
    pub fn napi_queues(&mut self) -> Vec<(u32, u32)> {
        let ifindex = self.ifindex;
        let a = attr(A_QUEUE_IFINDEX, &ifindex.to_ne_bytes());
        self.dump(CMD_QUEUE_GET, &a)
            .map(|m| parse_napi_queues(&m, ifindex))
            .unwrap_or_default()
    }

    /// The device's page pools, or why the kernel cannot say: it has no netdev family, or
    /// keeps no page_pool statistics (Ok(empty): it keeps them, and the device has no pool).
    pub fn page_pools_or_why(&mut self) -> Result<Vec<PagePoolStat>, String> {
        if self.netdev.is_none() {
            return Err("the kernel has no netdev netlink family".into());
        }
        let ifindex = self.ifindex;
        self.dump(CMD_PAGE_POOL_STATS_GET, &[])
            .map(|m| parse_page_pool_stats(&m, ifindex))
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => {
                    "the kernel keeps no page_pool statistics (CONFIG_PAGE_POOL_STATS is off)"
                        .into()
                }
                Some(libc::EPERM) => "reading them was not permitted".into(),
                _ => format!("the kernel refused the request ({})", e.kind()),
            })
    }

    /// The NIC's own counters of packets it dropped for want of RX descriptors or buffers,
    /// cumulative: the driver's named statistics that count them, and qstats' per-queue
    /// `rx-hw-drops` / `rx-alloc-fail` where the driver reports them (empty: none). The
    /// driver's statistics are the ones the last `queues` read, where that read is unused.
    fn ring_drop_counters(&mut self) -> Vec<NicDrop> {
        let driver = self.driver.clone();
        // A driver none of whose statistics counts ring drops (veth) is not asked each interval.
        let counts_drops = |e: &crate::topology::ethtool::DriverStats| {
            e.names()
                .iter()
                .any(|n| ring_drop_counter(n, driver.as_deref()).is_some())
        };
        let mut out = self
            .ethtool
            .as_mut()
            .filter(|e| counts_drops(e))
            .and_then(|e| e.last_or_read())
            .map(|v| ring_drops_from_ethtool(&v, driver.as_deref()))
            .unwrap_or_default();
        if self.netdev.is_some() {
            out.extend(ring_drops_from_qstats(&self.qstats()));
        }
        out
    }

    /// What the NIC's drop counters counted since the last call (the first call: since
    /// open). A counter that went backwards (a driver reset) counts from zero again.
    pub fn ring_drop_deltas(&mut self) -> Vec<NicDrop> {
        let cur = self.ring_drop_counters();
        let d = cur
            .iter()
            .map(|c| {
                let before = self
                    .ring_drops_prev
                    .iter()
                    .find(|p| p.counter == c.counter && p.queue == c.queue)
                    .map_or(0, |p| p.count);
                NicDrop {
                    count: if c.count >= before {
                        c.count - before
                    } else {
                        c.count
                    },
                    ..c.clone()
                }
            })
            .collect();
        // A read that failed keeps the last good one to difference against.
        if !cur.is_empty() {
            self.ring_drops_prev = cur;
        }
        d
    }

    /// The device's page pools (empty: none, or no page_pool statistics in this kernel).
    pub fn page_pools(&mut self) -> Vec<PagePoolStat> {
        let ifindex = self.ifindex;
        self.dump(CMD_PAGE_POOL_STATS_GET, &[])
            .map(|m| parse_page_pool_stats(&m, ifindex))
            .unwrap_or_default()
    }
}

/// What a driver statistic's name says: a queue's packets or bytes, in one of the forms drivers
/// use (veth counts its NAPI path as `xdp_packets`; elsewhere `xdp_*` is a subset, so a plain
/// count wins where both exist).
fn ethtool_queue_field(name: &str) -> Option<(Dir, u32, bool, bool)> {
    let dir_of = |d: &str| match d {
        "rx" => Some(Dir::Rx),
        "tx" => Some(Dir::Tx),
        _ => None,
    };
    let field = |f: &str| match f {
        "packets" | "cnt" => Some((true, false)),
        "bytes" => Some((false, false)),
        "xdp_packets" => Some((true, true)),
        "xdp_bytes" => Some((false, true)),
        _ => None,
    };
    let num = |n: &str| {
        (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| n.parse::<u32>().ok())
            .flatten()
    };
    // ena: queue_N_rx_cnt, queue_N_rx_bytes
    if let Some(rest) = name.strip_prefix("queue_") {
        let (n, rest) = rest.split_once('_')?;
        let (d, f) = rest.split_once('_')?;
        let (packets, xdp) = field(f)?;
        return Some((dir_of(d)?, num(n)?, packets, xdp));
    }
    let (d, rest) = (name.get(..2)?, name.get(2..)?);
    let dir = dir_of(d)?;
    // ixgbe, ice, igb, virtio_net, veth: rx_queue_N_packets; i40e: rx-N.packets; mlx5: rxN_packets
    let (n, f) = if let Some(r) = rest.strip_prefix("_queue_") {
        r.split_once('_')?
    } else if let Some(r) = rest.strip_prefix('-') {
        r.split_once('.')?
    } else {
        rest.split_once('_')?
    };
    let (packets, xdp) = field(f)?;
    Some((dir, num(n)?, packets, xdp))
}

/// A veth peer's RX queues as this device's TX queues (queue N to queue N).
fn peer_rx_as_tx(peer: &[QueueStat]) -> Vec<QueueStat> {
    peer.iter()
        .filter(|q| q.dir == Dir::Rx)
        .map(|q| QueueStat { dir: Dir::Tx, ..*q })
        .collect()
}

/// A driver's named statistics as per-queue counters: the queues whose packets and bytes it
/// names, plain counts before veth's `xdp_` ones.
pub fn parse_ethtool_stats(stats: &[(&str, u64)]) -> Vec<QueueStat> {
    // (dir, queue) -> [plain packets, plain bytes, xdp packets, xdp bytes]
    let mut by: std::collections::BTreeMap<(Dir, u32), [Option<u64>; 4]> = Default::default();
    for (name, v) in stats {
        let Some((dir, queue, packets, xdp)) = ethtool_queue_field(name) else {
            continue;
        };
        let slot = usize::from(!packets) + 2 * usize::from(xdp);
        by.entry((dir, queue)).or_default()[slot] = Some(*v);
    }
    by.into_iter()
        .filter_map(|((dir, queue), f)| {
            let (packets, bytes) = match (f[0], f[1]) {
                (Some(p), Some(b)) => (p, b),
                _ => (f[2]?, f[3]?),
            };
            Some(QueueStat {
                dir,
                queue,
                packets: Some(packets),
                bytes: Some(bytes),
                hw_drops: None,
                alloc_fail: None,
            })
        })
        .collect()
}

/// The per-queue ring drops the netdev family reports (qstats `rx-hw-drops`: the device
/// dropped the packet, most often for want of a posted descriptor; `rx-alloc-fail`: the
/// driver could not allocate a buffer to refill a descriptor).
pub fn ring_drops_from_qstats(q: &[QueueStat]) -> Vec<NicDrop> {
    let mut out = Vec::new();
    for s in q.iter().filter(|s| s.dir == Dir::Rx) {
        for (name, v) in [("rx-hw-drops", s.hw_drops), ("rx-alloc-fail", s.alloc_fail)] {
            if let Some(count) = v {
                out.push(NicDrop {
                    counter: name.into(),
                    queue: Some(s.queue),
                    count,
                });
            }
        }
    }
    out
}

/// Which of a driver's named statistics count RX packets dropped for want of descriptors or
/// buffers, and whether per queue (Some(queue)) or for the whole device (None). Only names
/// whose meaning is documented by their driver: mlx5's `rx_out_of_buffer` (no receive WQE
/// posted) and per-channel `rxN_buff_alloc_err`; Intel's `rx_missed_errors` (packet buffer
/// full), `rx_no_buffer_count` (igb, e1000e: no descriptor), `rx_no_dma_resources` (ixgbe);
/// ice/i40e's VSI `rx_dropped` (no descriptor) and port `rx_dropped.nic` / `port.rx_dropped`
/// (packet buffer); veth's `rx_queue_N_drops` (no buffer for the frame).
pub fn ring_drop_counter(name: &str, driver: Option<&str>) -> Option<Option<u32>> {
    let num = |n: &str| {
        (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| n.parse::<u32>().ok())
            .flatten()
    };
    match name {
        "rx_out_of_buffer"
        | "rx_missed_errors"
        | "rx_no_buffer_count"
        | "rx_no_dma_resources"
        | "rx_dropped.nic"
        | "port.rx_dropped" => return Some(None),
        "rx_dropped" if matches!(driver, Some("ice" | "i40e")) => return Some(None),
        _ => {}
    }
    if let Some(n) = name
        .strip_prefix("rx_queue_")
        .and_then(|r| r.strip_suffix("_drops"))
    {
        return num(n).map(Some);
    }
    if let Some(n) = name
        .strip_prefix("rx")
        .and_then(|r| r.strip_suffix("_buff_alloc_err"))
    {
        return num(n).map(Some);
    }
    None
}

/// A driver's named statistics as its ring-drop counters.
pub fn ring_drops_from_ethtool(stats: &[(&str, u64)], driver: Option<&str>) -> Vec<NicDrop> {
    stats
        .iter()
        .filter_map(|(name, v)| {
            ring_drop_counter(name, driver).map(|queue| NicDrop {
                counter: (*name).to_string(),
                queue,
                count: *v,
            })
        })
        .collect()
}

/// `ethtool -S` output as (name, value) pairs, for fixtures and bundles (lines "name: value";
/// the "NIC statistics:" header and anything else is skipped).
pub fn parse_ethtool_s_text(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().rsplit_once(':')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
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

    #[test]
    fn a_command_refused_as_unsupported_is_not_sent_again_and_other_failures_are() {
        let mut u = Unsupported::default();
        let mut sent = [0; 2];
        for _ in 0..3 {
            let got = u.ask(CMD_QSTATS_GET, || -> std::io::Result<()> {
                sent[0] += 1;
                Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP))
            });
            assert_eq!(got.unwrap_err().raw_os_error(), Some(libc::EOPNOTSUPP));
            let got = u.ask(CMD_PAGE_POOL_STATS_GET, || -> std::io::Result<()> {
                sent[1] += 1;
                Err(std::io::Error::from_raw_os_error(libc::ENOBUFS))
            });
            assert_eq!(got.unwrap_err().raw_os_error(), Some(libc::ENOBUFS));
        }
        assert_eq!(sent, [1, 3]);
        // Another command is still asked.
        assert_eq!(u.ask(CMD_QUEUE_GET, || Ok(7)).unwrap(), 7);
    }

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
        let other = msg(&[
            (A_QSTATS_IFINDEX, &9u32.to_ne_bytes()),
            (A_QSTATS_QUEUE_TYPE, &0u32.to_ne_bytes()),
            (A_QSTATS_QUEUE_ID, &0u32.to_ne_bytes()),
        ]);
        let q = parse_qstats(&[rx0, tx1, other], 3);
        assert_eq!(q.len(), 2);
        assert_eq!(
            (
                q[0].dir,
                q[0].queue,
                q[0].packets,
                q[0].bytes,
                q[0].hw_drops
            ),
            (Dir::Rx, 0, Some(1000), Some(1_514_000), Some(7))
        );
        assert_eq!(
            (q[1].dir, q[1].queue, q[1].packets, q[1].bytes),
            (Dir::Tx, 1, Some(20), None)
        );
        // RX is covered (packets and bytes on every RX queue); TX lacks bytes.
        assert!(covers(&q, Dir::Rx) && !covers(&q, Dir::Tx));
        assert!(!covers(&[], Dir::Rx));
    }

    #[test]
    fn queue_replies_tie_rx_queues_to_napi_instances() {
        let q = |id: u32, kind: u32, napi: Option<u32>, ifindex: u32| {
            let mut a = vec![
                (A_QUEUE_ID, id.to_ne_bytes().to_vec()),
                (A_QUEUE_TYPE, kind.to_ne_bytes().to_vec()),
            ];
            a.push((A_QUEUE_IFINDEX, ifindex.to_ne_bytes().to_vec()));
            if let Some(n) = napi {
                a.push((A_QUEUE_NAPI_ID, n.to_ne_bytes().to_vec()));
            }
            let refs: Vec<(u16, &[u8])> = a.iter().map(|(k, v)| (*k, v.as_slice())).collect();
            msg(&refs)
        };
        // RX queue 1 on NAPI 8194; a TX queue, a queue without NAPI (veth) and another device's are not.
        let m = [
            q(1, 0, Some(8194), 3),
            q(1, 1, Some(8194), 3),
            q(2, 0, None, 3),
            q(0, 0, Some(9000), 4),
        ];
        assert_eq!(parse_napi_queues(&m, 3), vec![(8194, 1)]);
    }

    #[test]
    fn driver_statistics_name_their_queues() {
        // veth: NAPI-path counts per RX queue; TX names only XDP transmits, which are no count.
        let veth = [
            ("peer_ifindex", 2),
            ("rx_queue_0_xdp_packets", 10),
            ("rx_queue_0_xdp_bytes", 840),
            ("rx_queue_0_drops", 1),
            ("rx_queue_1_xdp_packets", 5),
            ("rx_queue_1_xdp_bytes", 420),
            ("tx_queue_0_xdp_xmit", 3),
        ];
        let q = parse_ethtool_stats(&veth);
        assert_eq!(q.len(), 2);
        assert_eq!(
            (q[1].dir, q[1].queue, q[1].packets, q[1].bytes),
            (Dir::Rx, 1, Some(5), Some(420))
        );
        assert!(covers(&q, Dir::Rx) && !covers(&q, Dir::Tx));
        // mlx5, i40e, ena, and virtio_net (whose xdp_ counts are a subset: the plain ones win).
        let mlx5 = [
            ("rx_packets", 99),
            ("rx0_packets", 7),
            ("rx0_bytes", 700),
            ("tx3_packets", 2),
            ("tx3_bytes", 128),
            ("rx0_xdp_drop", 1),
        ];
        let q = parse_ethtool_stats(&mlx5);
        assert_eq!(
            q.iter()
                .map(|q| (q.dir, q.queue, q.packets))
                .collect::<Vec<_>>(),
            [(Dir::Rx, 0, Some(7)), (Dir::Tx, 3, Some(2))]
        );
        let i40e = [
            ("rx-2.packets", 4),
            ("rx-2.bytes", 400),
            ("tx-0.packets", 1),
        ];
        let q = parse_ethtool_stats(&i40e);
        assert_eq!(q.len(), 1, "tx-0 has no bytes: not a count");
        assert_eq!((q[0].queue, q[0].bytes), (2, Some(400)));
        let ena = [
            ("queue_1_rx_cnt", 8),
            ("queue_1_rx_bytes", 800),
            ("queue_1_tx_cnt", 3),
            ("queue_1_tx_bytes", 300),
        ];
        assert_eq!(parse_ethtool_stats(&ena).len(), 2);
        let virtio = [
            ("rx_queue_0_packets", 9),
            ("rx_queue_0_bytes", 900),
            ("rx_queue_0_xdp_packets", 1),
            ("rx_queue_0_xdp_bytes", 60),
        ];
        let q = parse_ethtool_stats(&virtio);
        assert_eq!((q[0].packets, q[0].bytes), (Some(9), Some(900)));
        assert!(
            parse_ethtool_stats(&[("rx_queue_x_packets", 1), ("rxq_bytes", 2), ("tx_", 3)])
                .is_empty()
        );
    }

    #[test]
    fn page_pool_replies_keep_the_devices_pools() {
        let mut info = attr(A_PP_ID, &5u32.to_ne_bytes());
        info.extend(attr(A_PP_IFINDEX, &3u32.to_ne_bytes()));
        info.extend(attr(A_PP_NAPI_ID, &8193u32.to_ne_bytes()));
        let m = msg(&[
            (A_PP_STATS_INFO | 0x8000, &info),
            (8, &90u64.to_ne_bytes()),
            (9, &10u64.to_ne_bytes()),
            (14, &60u64.to_ne_bytes()),
            (16, &30u64.to_ne_bytes()),
        ]);
        let mut info2 = attr(A_PP_ID, &6u32.to_ne_bytes());
        info2.extend(attr(A_PP_IFINDEX, &4u32.to_ne_bytes()));
        let m2 = msg(&[(A_PP_STATS_INFO, &info2), (8, &1u64.to_ne_bytes())]);
        let p = parse_page_pool_stats(&[m, m2], 3);
        assert_eq!(p.len(), 1);
        assert_eq!(
            (p[0].id, p[0].napi_id, p[0].alloc_fast, p[0].recycle_ring),
            (5, Some(8193), 90, 30)
        );
        assert_eq!(p[0].recycled_share(), Some(0.9));
    }

    fn fixture_drops(name: &str, driver: &str) -> Vec<NicDrop> {
        let p = format!(
            "{}/../tests/fixtures/topology/ethtool-S/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&p).unwrap();
        let stats = parse_ethtool_s_text(&text);
        let refs: Vec<(&str, u64)> = stats.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        ring_drops_from_ethtool(&refs, Some(driver))
    }

    #[test]
    fn mlx5_ring_drops_are_the_devices_out_of_buffer_and_each_channels_alloc_errors() {
        let d = fixture_drops("mlx5.txt", "mlx5_core");
        let got: Vec<(&str, Option<u32>, u64)> = d
            .iter()
            .map(|d| (d.counter.as_str(), d.queue, d.count))
            .collect();
        // rx_discards_phy (the port's buffer) and rx_buff_alloc_err (the channels' sum) are
        // not ring drops of a queue; rx_out_of_buffer is (no WQE posted).
        assert_eq!(
            got,
            vec![
                ("rx_out_of_buffer", None, 48213),
                ("rx0_buff_alloc_err", Some(0), 0),
                ("rx1_buff_alloc_err", Some(1), 17),
                ("rx2_buff_alloc_err", Some(2), 0),
                ("rx3_buff_alloc_err", Some(3), 0),
            ]
        );
    }

    #[test]
    fn ice_ring_drops_are_the_vsis_and_the_ports() {
        let d = fixture_drops("ice.txt", "ice");
        let got: Vec<(&str, Option<u32>, u64)> = d
            .iter()
            .map(|d| (d.counter.as_str(), d.queue, d.count))
            .collect();
        assert_eq!(
            got,
            vec![("rx_dropped", None, 3310), ("rx_dropped.nic", None, 0)]
        );
        // Another driver's plain rx_dropped is no ring counter.
        assert_eq!(ring_drop_counter("rx_dropped", Some("virtio_net")), None);
        assert_eq!(
            ring_drop_counter("rx_queue_3_drops", Some("veth")),
            Some(Some(3))
        );
        assert_eq!(ring_drop_counter("rx_queue_x_drops", None), None);
    }

    #[test]
    fn qstats_hw_drops_and_alloc_failures_are_per_queue() {
        let q = [
            QueueStat {
                dir: Dir::Rx,
                queue: 2,
                packets: Some(10),
                bytes: Some(1000),
                hw_drops: Some(5),
                alloc_fail: None,
            },
            QueueStat {
                dir: Dir::Tx,
                queue: 2,
                packets: Some(10),
                bytes: Some(1000),
                hw_drops: Some(9),
                alloc_fail: None,
            },
        ];
        assert_eq!(
            ring_drops_from_qstats(&q),
            vec![NicDrop {
                counter: "rx-hw-drops".into(),
                queue: Some(2),
                count: 5
            }]
        );
    }
}
