//! Drops of a device whose windows run, counted by kfree_skb in the detail windows only and
//! estimated for the rest of every interval from them.
//!
//! kfree_skb fires for every drop on the host, whatever the device: a program there all the
//! time makes a host that drops another device's packets by the million pay for each (about
//! 90 ns a drop on a 2-vCPU VM). In the windows it counts each queue's drops; per packet the
//! queue carried while the window was open, that is the queue's drop rate. An interval's
//! drops are those the window counted plus that rate, as the latest window that saw the queue
//! carry packets measured it, times the packets of the part of the interval no window
//! covered; the packets before the first window are charged at its rate when it comes.
//! Rounding is carried from interval to interval, so totals do not drift.
use std::collections::HashMap;

use crate::snapshot::{Dir, QueueCounters};

#[derive(Debug, Default)]
pub struct WindowDrops {
    /// Drops per packet, per (direction, queue), as the latest window with traffic saw it.
    per_packet: HashMap<(Dir, u32), f64>,
    /// Unrounded estimate so far and what was handed out, per (direction, queue).
    running: HashMap<(Dir, u32), (f64, u64)>,
    /// Packets carried outside windows before any window measured the queue's rate: charged
    /// at the first rate measured, in the interval that measures it.
    unrated: HashMap<(Dir, u32), f64>,
}

impl WindowDrops {
    /// One interval's queues, with the drops the windows counted in `drops`; `covered` is the
    /// share of the interval (0 to 1) the windows were open. Out: drops for the whole
    /// interval, estimated where no window was open.
    pub fn estimate(&mut self, queues: &mut [QueueCounters], covered: f64) {
        let covered = covered.clamp(0.0, 1.0);
        for q in queues.iter_mut() {
            let key = (q.dir, q.queue);
            let in_window = q.packets as f64 * covered;
            if covered > 0.0 && in_window >= 1.0 {
                // A packet is dropped once. The window's packets are the interval's times the
                // time it was open, a guess for a quiet queue whose few frames came in bursts:
                // more drops than that guess says the rate, at most one a packet.
                self.per_packet
                    .insert(key, (q.drops as f64 / in_window).min(1.0));
            }
            let mut outside = q.packets as f64 * (1.0 - covered);
            let rate = match self.per_packet.get(&key) {
                Some(&r) => {
                    outside += self.unrated.remove(&key).unwrap_or(0.0);
                    r
                }
                None => {
                    *self.unrated.entry(key).or_insert(0.0) += outside;
                    0.0
                }
            };
            let (est, given) = self.running.entry(key).or_insert((0.0, 0));
            *est += q.drops as f64 + rate * outside;
            let total = est.round().max(0.0) as u64;
            q.drops = total.saturating_sub(*given);
            *given = total.max(*given);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(dir: Dir, queue: u32, packets: u64, drops: u64) -> QueueCounters {
        QueueCounters {
            dir,
            queue,
            packets,
            drops,
            ..QueueCounters::new(dir, queue)
        }
    }

    #[test]
    fn a_window_measures_the_rate_the_other_intervals_are_estimated_by() {
        let mut w = WindowDrops::default();
        // A whole-interval window: 1000 packets, 100 dropped (10 %).
        let mut a = vec![q(Dir::Rx, 0, 1000, 100)];
        w.estimate(&mut a, 1.0);
        assert_eq!(a[0].drops, 100);
        // No window: 2000 packets at the window's rate.
        let mut b = vec![q(Dir::Rx, 0, 2000, 0)];
        w.estimate(&mut b, 0.0);
        assert_eq!(b[0].drops, 200);
        // Half an interval in a window: what it counted, and the rest at its rate.
        let mut c = vec![q(Dir::Rx, 0, 1000, 30)];
        w.estimate(&mut c, 0.5);
        assert_eq!(c[0].drops, 30 + 30);
    }

    #[test]
    fn packets_before_the_first_window_are_charged_at_its_rate_and_rounding_carries() {
        let mut w = WindowDrops::default();
        let mut a = vec![q(Dir::Tx, 1, 500, 0)];
        w.estimate(&mut a, 0.0);
        // Not known yet: none given, none lost.
        assert_eq!(a[0].drops, 0);
        let mut first = vec![q(Dir::Tx, 1, 100, 10)];
        w.estimate(&mut first, 1.0);
        assert_eq!(first[0].drops, 10 + 50);
        // 1 drop in 3 packets, then three intervals of 1 packet: 1/3 each, 1 in total.
        let mut b = vec![q(Dir::Tx, 1, 3, 1)];
        w.estimate(&mut b, 1.0);
        let mut total = 0;
        for _ in 0..3 {
            let mut c = vec![q(Dir::Tx, 1, 1, 0)];
            w.estimate(&mut c, 0.0);
            total += c[0].drops;
        }
        assert_eq!(total, 1);
    }

    /// A quiet queue whose window counted more drops than the packets it is taken to have
    /// seen (its few frames came while the window was open): the rest of the interval is
    /// charged at most a drop a packet.
    #[test]
    fn a_window_rate_is_at_most_one_drop_a_packet() {
        let mut w = WindowDrops::default();
        // 3 packets, the window open a third of the time and counting 2 drops.
        let mut a = vec![q(Dir::Rx, 2, 3, 2)];
        w.estimate(&mut a, 1.0 / 3.0);
        assert_eq!(a[0].drops, 2 + 2);
        let mut b = vec![q(Dir::Rx, 2, 10, 0)];
        w.estimate(&mut b, 0.0);
        assert_eq!(b[0].drops, 10);
    }
}
