//! NAPI polls of a device whose driver counts its queues, counted in the detail windows only
//! and estimated for every interval from them.
//!
//! A program per poll is, on a host with retpolines, most of what tier 0 costs (veth polls
//! about once per packet). In the windows it counts each queue's polls, the packets they
//! handled (their work), the polls that used their whole budget and the work histogram; per
//! packet handled, those are the queue's NAPI behaviour. Every interval's estimate is that
//! behaviour, as the latest window with work on the queue saw it, times the queue's exact
//! packet count. Rounding is carried from interval to interval, so totals do not drift.
use std::collections::HashMap;

use crate::snapshot::{Dir, QueueCounters, NAPI_BUCKETS};

/// Per packet handled: polls, budget-exhausted polls, and each work bucket's polls.
#[derive(Debug, Clone, Copy)]
struct PerPacket {
    polls: f64,
    exhausted: f64,
    hist: [f64; NAPI_BUCKETS],
}

/// A queue's estimates so far (unrounded) and what was handed out (rounded).
#[derive(Debug, Clone, Copy)]
struct Running {
    est: [f64; 2 + NAPI_BUCKETS],
    given: [u64; 2 + NAPI_BUCKETS],
}

#[derive(Debug, Default)]
pub struct WindowNapi {
    per_packet: HashMap<u32, PerPacket>,
    running: HashMap<u32, Running>,
}

impl WindowNapi {
    /// One interval's RX queues: the NAPI fields as the windows counted them in, the exact
    /// packets; out, the NAPI fields estimated for the whole interval (work = packets).
    pub fn estimate(&mut self, queues: &mut [QueueCounters]) {
        for q in queues.iter_mut().filter(|q| q.dir == Dir::Rx) {
            if q.napi_work > 0 && q.napi_polls > 0 {
                let w = q.napi_work as f64;
                let mut hist = [0.0; NAPI_BUCKETS];
                for (h, &n) in hist.iter_mut().zip(q.napi_work_hist.iter()) {
                    *h = n as f64 / w;
                }
                self.per_packet.insert(
                    q.queue,
                    PerPacket {
                        polls: q.napi_polls as f64 / w,
                        exhausted: q.napi_budget_exhausted as f64 / w,
                        hist,
                    },
                );
            }
            let Some(p) = self.per_packet.get(&q.queue).copied() else {
                // No window has seen this queue's polls yet: unknown, not zero.
                q.napi_polls = 0;
                q.napi_work = 0;
                q.napi_budget_exhausted = 0;
                q.napi_work_hist = [0; NAPI_BUCKETS];
                continue;
            };
            let r = self.running.entry(q.queue).or_insert(Running {
                est: [0.0; 2 + NAPI_BUCKETS],
                given: [0; 2 + NAPI_BUCKETS],
            });
            let n = q.packets as f64;
            let add: Vec<f64> = [p.polls, p.exhausted]
                .into_iter()
                .chain(p.hist)
                .map(|x| x * n)
                .collect();
            let mut out = [0u64; 2 + NAPI_BUCKETS];
            for i in 0..out.len() {
                r.est[i] += add[i];
                let total = r.est[i].round() as u64;
                out[i] = total.saturating_sub(r.given[i]);
                r.given[i] = r.given[i].max(total);
            }
            q.napi_polls = out[0];
            q.napi_budget_exhausted = out[1];
            q.napi_work_hist.copy_from_slice(&out[2..]);
            q.napi_work = q.packets;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(packets: u64, polls: u64, work: u64, exhausted: u64) -> QueueCounters {
        let mut q = QueueCounters {
            packets,
            napi_polls: polls,
            napi_work: work,
            napi_budget_exhausted: exhausted,
            ..QueueCounters::new(Dir::Rx, 0)
        };
        q.napi_work_hist[1] = polls;
        q
    }

    /// A queue that handles 4 packets a poll: a window sees it, and every interval after
    /// (windows or not) gets a quarter poll per packet, without drifting over many intervals.
    #[test]
    fn polls_per_packet_from_a_window_carry_to_every_interval() {
        let mut n = WindowNapi::default();
        let mut before = [rx(1000, 0, 0, 0)];
        n.estimate(&mut before);
        assert_eq!(
            (before[0].napi_polls, before[0].napi_work),
            (0, 0),
            "unknown before any window"
        );
        let mut w = [rx(1000, 25, 100, 1)];
        n.estimate(&mut w);
        assert_eq!(
            (w[0].napi_polls, w[0].napi_work, w[0].napi_budget_exhausted),
            (250, 1000, 10)
        );
        let mut total = 0;
        for _ in 0..1000 {
            let mut q = [rx(3, 0, 0, 0)];
            n.estimate(&mut q);
            total += q[0].napi_polls;
        }
        assert_eq!(total, 750);
    }
}
