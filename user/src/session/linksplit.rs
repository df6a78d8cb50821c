//! Per-queue counts of a direction whose driver keeps no per-queue counters that see every
//! path (tun, a veth whose frames skip its NAPI, many virtual and some NIC drivers): the
//! interface's own totals, exact, split across its queues by the shares the direction's
//! program counted in the detail windows, estimated.
//!
//! The queue a packet leaves by is chosen only just before the driver's xmit, and the one
//! hook that sees it there (`net_dev_start_xmit`) fires for every device on the host: run all
//! the time it bills every neighbour's packets (a container node's pods). RX's tcx program is
//! the device's own, but runs once per skb: all the time it is most of what the default costs
//! a busy device. In the windows alone each costs 1/duty of that, and the interface's
//! counters, read once an interval, keep the totals exact. Each interval's totals are split by
//! the latest window that saw the direction, by the largest remainder, so the queues add up to
//! the interface's totals at every interval.
//!
//! The shares are the windows' counts with each older window's weight decayed by
//! `SHARE_DECAY`: a window of a few tens of ms holds few packets of a light direction (a
//! receiver's ACKs: tens), so one window alone splits by noise, while a mix that changes still
//! shows within a few windows.
use std::collections::BTreeMap;

use crate::probe::kstats::QueueStat;
use crate::snapshot::{Dir, QueueCounters};

/// The split so far: what the direction's program counted per queue, what the interface counted, and
/// what each queue was given.
#[derive(Debug, Clone)]
pub struct LinkSplit {
    dir: Dir,
    /// The program's cumulative (packets, bytes) per queue at the last interval.
    program: BTreeMap<u32, (u64, u64)>,
    /// The windows' packets and bytes per queue, older windows decayed (in 1/`SHARE_ONE`
    /// units): the shares the next totals go by.
    shares: BTreeMap<u32, (u64, u64)>,
    /// The interface's cumulative (packets, bytes) at the last interval.
    link: (u64, u64),
    /// The interface's packets since the last split that no window has shares for yet.
    pending: (u64, u64),
    /// Each queue's cumulative (packets, bytes) as given out.
    given: BTreeMap<u32, (u64, u64)>,
    /// Only one queue: the totals are its own, exactly.
    single: bool,
}

impl LinkSplit {
    /// From now on, for `dir`: the queues' counts so far (`so_far`, cumulative, as the
    /// recording has them), the program's and the interface's cumulative counts now, and how
    /// many queues the direction has.
    pub fn new(
        dir: Dir,
        so_far: &[QueueCounters],
        program: &[QueueCounters],
        link: (u64, u64),
        queues: u32,
    ) -> LinkSplit {
        let tx = |q: &[QueueCounters]| -> BTreeMap<u32, (u64, u64)> {
            q.iter()
                .filter(|c| c.dir == dir)
                .map(|c| (c.queue, (c.packets, c.bytes)))
                .collect()
        };
        LinkSplit {
            dir,
            program: tx(program),
            shares: BTreeMap::new(),
            link,
            pending: (0, 0),
            given: tx(so_far),
            single: queues <= 1,
        }
    }

    /// Packets the interface counted that no queue was given yet (packets and bytes the driver's
    /// counters missed before the split took over): it goes with the next split.
    pub fn add_unsplit(&mut self, (packets, bytes): (u64, u64)) {
        self.pending.0 += packets;
        self.pending.1 += bytes;
    }

    /// Whether the split is exact (one queue) rather than estimated.
    pub fn exact(&self) -> bool {
        self.single
    }

    /// Packets the interface counted that no window has split yet.
    pub fn unsplit(&self) -> u64 {
        self.pending.0
    }

    /// One interval: the program's cumulative counts (they move only in windows) and the
    /// interface's cumulative totals of the direction; out, every queue's cumulative counts.
    pub fn interval(&mut self, program: &[QueueCounters], link: (u64, u64)) -> Vec<QueueStat> {
        let mut window = BTreeMap::new();
        for c in program.iter().filter(|c| c.dir == self.dir) {
            let (p0, b0) = self.program.get(&c.queue).copied().unwrap_or((0, 0));
            let d = (c.packets.saturating_sub(p0), c.bytes.saturating_sub(b0));
            if d.0 > 0 {
                window.insert(c.queue, d);
            }
            self.program.insert(c.queue, (c.packets, c.bytes));
        }
        if !window.is_empty() {
            for s in self.shares.values_mut() {
                *s = (decay(s.0), decay(s.1));
            }
            for (q, (p, b)) in window {
                let s = self.shares.entry(q).or_insert((0, 0));
                s.0 = s.0.saturating_add(p.saturating_mul(SHARE_ONE));
                s.1 = s.1.saturating_add(b.saturating_mul(SHARE_ONE));
            }
            self.shares.retain(|_, s| *s != (0, 0));
        }
        self.pending.0 += link.0.saturating_sub(self.link.0);
        self.pending.1 += link.1.saturating_sub(self.link.1);
        self.link = (self.link.0.max(link.0), self.link.1.max(link.1));
        if self.single {
            self.shares = BTreeMap::from([(0, (1, 1))]);
        }
        if !self.shares.is_empty() && self.pending != (0, 0) {
            let weights: Vec<(u32, (u64, u64))> =
                self.shares.iter().map(|(&q, &w)| (q, w)).collect();
            let by_packets: Vec<u64> = weights.iter().map(|(_, w)| w.0).collect();
            let packets = largest_remainder(self.pending.0, &by_packets);
            // A queue's bytes go by its bytes in the window (packet sizes differ by queue),
            // among the queues given packets: bytes without a packet read as a frame of no
            // size on one queue and an outsized one on another.
            let by_bytes: Vec<u64> = weights
                .iter()
                .zip(&packets)
                .map(|((_, w), &p)| if p > 0 || self.pending.0 == 0 { w.1 } else { 0 })
                .collect();
            // Where no byte weighs (a window's program counted no length), the bytes go as
            // the packets just did, to no queue given none.
            let fallback = if self.pending.0 > 0 {
                &packets
            } else {
                &by_packets
            };
            let bytes = split_bytes(self.pending.1, &by_bytes, fallback);
            for (((q, _), p), b) in weights.iter().zip(packets).zip(bytes) {
                let g = self.given.entry(*q).or_insert((0, 0));
                g.0 += p;
                g.1 += b;
            }
            self.pending = (0, 0);
        }
        self.given
            .iter()
            .map(|(&queue, &(p, b))| QueueStat {
                dir: self.dir,
                queue,
                packets: Some(p),
                bytes: Some(b),
                hw_drops: None,
                alloc_fail: None,
            })
            .collect()
    }
}

/// The weight an older window keeps each time a newer one comes: about nine windows (nine
/// seconds at the default cycle) weigh in, (1 + d) / (1 - d) as many as one alone.
const SHARE_DECAY: (u64, u64) = (4, 5);

/// A window's packet counts in share units (fractions survive the decay).
const SHARE_ONE: u64 = 1 << 10;

fn decay(x: u64) -> u64 {
    x / SHARE_DECAY.1 * SHARE_DECAY.0 + x % SHARE_DECAY.1 * SHARE_DECAY.0 / SHARE_DECAY.1
}

/// `total` split in proportion to `weights`, whole numbers that add up to it exactly (the
/// largest remainders round up; ties to the lower index).
pub(crate) fn largest_remainder(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<(u64, u128)> = weights
        .iter()
        .map(|&w| {
            let x = u128::from(total) * u128::from(w);
            ((x / sum) as u64, x % sum)
        })
        .collect();
    let mut out: Vec<u64> = exact.iter().map(|e| e.0).collect();
    let short = total - out.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    for &i in order.iter().take(short as usize) {
        out[i] += 1;
    }
    out
}

/// `total` bytes split by `bytes`, or by `packets` where no byte weighs anything (shares
/// decayed to nothing in bytes before packets, or counts that carried no length): the bytes
/// must add up to the interface's all the same.
pub(crate) fn split_bytes(total: u64, bytes: &[u64], packets: &[u64]) -> Vec<u64> {
    if bytes.iter().any(|&b| b > 0) {
        largest_remainder(total, bytes)
    } else {
        largest_remainder(total, packets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(q: u32, packets: u64, bytes: u64) -> QueueCounters {
        QueueCounters {
            packets,
            bytes,
            ..QueueCounters::new(Dir::Tx, q)
        }
    }

    fn counts(v: &[QueueStat]) -> Vec<(u32, u64, u64)> {
        v.iter()
            .map(|q| (q.queue, q.packets.unwrap_or(0), q.bytes.unwrap_or(0)))
            .collect()
    }

    #[test]
    fn largest_remainders_add_up_to_the_total() {
        assert_eq!(largest_remainder(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(largest_remainder(7, &[0, 5, 0]), vec![0, 7, 0]);
        assert_eq!(largest_remainder(5, &[0, 0]), vec![0, 0]);
        assert_eq!(
            largest_remainder(u64::MAX, &[u64::MAX, u64::MAX])
                .iter()
                .map(|&x| u128::from(x))
                .sum::<u128>(),
            u128::from(u64::MAX)
        );
    }

    #[test]
    fn bytes_go_by_packets_where_no_byte_weighs() {
        assert_eq!(split_bytes(900, &[0, 0, 0], &[1, 0, 2]), vec![300, 0, 600]);
        assert_eq!(split_bytes(900, &[0, 1, 0], &[1, 0, 2]), vec![0, 900, 0]);
        // A window whose program counted packets but no bytes: the interface's bytes are
        // still all given out, none lost.
        let mut s = LinkSplit::new(Dir::Rx, &[], &[], (0, 0), 4);
        let v = s.interval(
            &[
                QueueCounters {
                    packets: 3,
                    ..QueueCounters::new(Dir::Rx, 1)
                },
                QueueCounters {
                    packets: 1,
                    ..QueueCounters::new(Dir::Rx, 2)
                },
            ],
            (400, 40_339),
        );
        assert_eq!(counts(&v), vec![(1, 300, 30_254), (2, 100, 10_085)]);
        // One packet among them: its bytes go with it, not by the window's shares.
        let v = s.interval(&[], (401, 41_339));
        assert_eq!(counts(&v), vec![(1, 301, 31_254), (2, 100, 10_085)]);
    }

    /// Totals are the interface's at every interval; the split follows the windows, and
    /// what came before any window waits for one rather than going to a queue by guess.
    #[test]
    fn totals_stay_the_interfaces_and_the_split_follows_the_windows() {
        let mut s = LinkSplit::new(Dir::Tx, &[], &[], (1000, 100_000), 4);
        // No window yet: nothing split, nothing lost.
        assert!(s.interval(&[], (1400, 140_000)).is_empty());
        assert_eq!(s.unsplit(), 400);
        // A window saw queues 1 and 3 at 1:3 in packets, 1:1 in bytes.
        let v = s.interval(&[tx(1, 10, 5000), tx(3, 30, 5000)], (1800, 180_000));
        assert_eq!(counts(&v), vec![(1, 200, 40_000), (3, 600, 40_000)]);
        assert_eq!(s.unsplit(), 0);
        // Between windows the program stands still: the last shares hold.
        let v = s.interval(&[tx(1, 10, 5000), tx(3, 30, 5000)], (2200, 220_000));
        assert_eq!(counts(&v), vec![(1, 300, 60_000), (3, 900, 60_000)]);
        // The next window saw queue 0 alone: it weighs in beside the older one, decayed to
        // 4/5 (packets 50 : 8 : 24, bytes 6000 : 4000 : 4000).
        let v = s.interval(
            &[tx(0, 50, 6000), tx(1, 10, 5000), tx(3, 30, 5000)],
            (2300, 230_000),
        );
        assert_eq!(
            counts(&v),
            vec![(0, 61, 4286), (1, 310, 62_857), (3, 929, 62_857)]
        );
        let total: u64 = v.iter().map(|q| q.packets.unwrap_or(0)).sum();
        assert_eq!(total, 2300 - 1000);
    }

    /// A few packets split among many queues: bytes go only with packets, and all of them.
    #[test]
    fn bytes_follow_the_packets_they_came_with() {
        let mut s = LinkSplit::new(Dir::Tx, &[], &[], (0, 0), 4);
        let v = s.interval(
            &[tx(0, 10, 10_000), tx(1, 10, 10_000), tx(2, 10, 10_000)],
            (1, 1042),
        );
        assert_eq!(counts(&v), vec![(0, 1, 1042), (1, 0, 0), (2, 0, 0)]);
        // Bytes with no packet (the interface's two stores read apart): shared by the window.
        let v = s.interval(&[], (1, 1045));
        assert_eq!(counts(&v), vec![(0, 1, 1043), (1, 0, 1), (2, 0, 1)]);
    }

    /// Taken over mid-run, the split goes on from the counts the recording already has; one
    /// TX queue is exact without a window.
    #[test]
    fn a_split_continues_the_counts_so_far_and_one_queue_is_exact() {
        let mut s = LinkSplit::new(
            Dir::Tx,
            &[tx(0, 70, 7000), tx(1, 30, 3000)],
            &[tx(0, 5, 500)],
            (100, 10_000),
            2,
        );
        let v = s.interval(&[tx(0, 5, 500), tx(1, 5, 500)], (200, 20_000));
        assert_eq!(counts(&v), vec![(0, 70, 7000), (1, 130, 13_000)]);
        let mut one = LinkSplit::new(Dir::Tx, &[], &[], (0, 0), 1);
        assert!(one.exact());
        assert_eq!(counts(&one.interval(&[], (9, 900))), vec![(0, 9, 900)]);
    }
}
