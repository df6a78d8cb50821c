//! Exact flow sums for any number of flows: what userspace keeps of the drained BPF flow
//! tables, and when a table may be drained.
//!
//! The programs add a flow's sums to one of two flow tables (bpf/qcount.bpf.c: flow_gen
//! names it), and keep each CPU's recent flows in cache slots that move their sums into that
//! table when they change flows. A flow read flips flow_gen, waits until no program can still
//! be adding to the other table, then reads every entry of it into `FlowTotals` and deletes
//! it. A table thus holds only the flows active since it was last drained, and a flow that
//! leaves it is never lost: its sums went into the totals first.
//!
//! No sum is lost or counted twice:
//! * a program adds to a table only while the slot it empties has an odd seq, and reads
//!   flow_gen after making it odd (a locked add: a full barrier). Userspace writes flow_gen,
//!   fences, then snapshots the seqs: a program whose odd seq it did not see reads the new
//!   flow_gen; one it saw odd may be in the old table, and the old table is drained only once
//!   each such slot's seq has moved on (`quiescent`). So nothing writes a table while it is
//!   read and deleted, and every sum it held goes into the totals exactly once;
//! * the slots, and the table the programs add to now, are read as they stand and added to
//!   the totals in each answer, never into them: a slot's sums move into a table whole, and
//!   are counted from there once it is drained. A read during which a slot changed flows is
//!   taken again (the seqs before and after), as before.
use std::collections::HashMap;

use super::qcount::SampledFlow;
use super::qcount_skel::types::{pl_flow_key, qc_flow_stats};

/// A pl_flow_key's fields, queue slot included, as a hashable value.
pub(crate) type KeyFields = (u8, u8, u8, u8, u16, u16, [u8; 16], [u8; 16]);

pub(crate) fn key_fields(k: &pl_flow_key) -> KeyFields {
    (
        k.family, k.proto, k.dir, k.qslot, k.sport, k.dport, k.saddr, k.daddr,
    )
}

/// One copy of a flow's sums adds to another: counts add up; `first_ns` is the earliest a
/// copy has (a table copy that another CPU's update created has none), the queue that of the
/// latest sample.
pub(crate) fn add_sums(into: &mut qc_flow_stats, v: &qc_flow_stats) {
    into.samples += v.samples;
    into.packets_x256 += v.packets_x256;
    into.bytes += v.bytes;
    into.payload_x256 += v.payload_x256;
    into.bytes_var = into.bytes_var.saturating_add(v.bytes_var);
    if v.first_ns != 0 && (into.first_ns == 0 || v.first_ns < into.first_ns) {
        into.first_ns = v.first_ns;
    }
    if v.last_ns >= into.last_ns {
        into.last_ns = v.last_ns;
        into.queue = v.queue;
    }
}

/// Every drained flow's sums over the run, per flow and queue.
#[derive(Default)]
pub struct FlowTotals {
    drained: HashMap<KeyFields, (pl_flow_key, qc_flow_stats)>,
}

impl FlowTotals {
    /// A drained table's copies (each entry's per-CPU copies): theirs for good.
    pub fn drain(&mut self, copies: impl IntoIterator<Item = (pl_flow_key, qc_flow_stats)>) {
        for (k, v) in copies {
            let e = self
                .drained
                .entry(key_fields(&k))
                .or_insert_with(|| (k, qc_flow_stats::default()));
            add_sums(&mut e.1, &v);
        }
    }

    /// Flows drained so far.
    pub fn len(&self) -> usize {
        self.drained.len()
    }

    pub fn is_empty(&self) -> bool {
        self.drained.is_empty()
    }

    /// Every flow's sums now: the drained totals and the `live` copies (the slots, and the
    /// tables not drained yet, as they stand), one per flow and queue.
    pub fn view(&self, live: Vec<(pl_flow_key, qc_flow_stats)>) -> Vec<SampledFlow> {
        let mut all: HashMap<KeyFields, (pl_flow_key, qc_flow_stats)> = self.drained.clone();
        for (k, v) in live {
            let e = all
                .entry(key_fields(&k))
                .or_insert_with(|| (k, qc_flow_stats::default()));
            add_sums(&mut e.1, &v);
        }
        all.into_values()
            .filter_map(|(k, v)| sampled_flow(&k, &v))
            .collect()
    }
}

/// A flow's sums as the recorder keeps them (None: a key that names no TCP/UDP flow).
fn sampled_flow(k: &pl_flow_key, v: &qc_flow_stats) -> Option<SampledFlow> {
    let key = super::flow_key_of(
        k.family, k.proto, k.dir, &k.saddr, k.sport, &k.daddr, k.dport,
    )?;
    Some(SampledFlow {
        key,
        queue: v.queue,
        samples: v.samples,
        // The kernel keeps 1/256ths: rounded to whole packets and bytes here.
        packets: (v.packets_x256 + 128) >> 8,
        bytes: v.bytes,
        payload_bytes: (v.payload_x256 + 128) >> 8,
        bytes_var: v.bytes_var,
        first_ns: if v.first_ns == 0 {
            u64::MAX
        } else {
            v.first_ns
        },
        last_ns: v.last_ns,
    })
}

/// Whether no program can still be adding to the table flow_gen named before the flip: every
/// slot whose seq was odd just after the flip (`at_flip`) has moved on since (`now`).
pub fn quiescent(at_flip: &[u64], now: &[u64]) -> bool {
    at_flip.iter().zip(now).all(|(a, n)| a % 2 == 0 || a != n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sport: u16, qslot: u8) -> pl_flow_key {
        let mut k = pl_flow_key {
            family: 4,
            proto: 17,
            dir: 0,
            qslot,
            sport,
            dport: 9,
            ..Default::default()
        };
        k.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        k.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
        k
    }

    fn sums(samples: u64, first_ns: u64, last_ns: u64, queue: u32) -> qc_flow_stats {
        qc_flow_stats {
            samples,
            packets_x256: samples * 256,
            bytes: samples * 1042,
            payload_x256: samples * 1000 * 256,
            bytes_var: 0,
            first_ns,
            last_ns,
            queue,
            pad: 0,
        }
    }

    fn packets_of(flows: &[SampledFlow], sport: u16) -> u64 {
        flows
            .iter()
            .filter(|f| f.key.sport == sport)
            .map(|f| f.packets)
            .sum()
    }

    #[test]
    fn a_flow_drained_in_each_of_many_reads_adds_up_instead_of_restarting() {
        // 25,000 flows of 4 packets, one packet per drain: each drained table holds every
        // flow at 1, as the LRU table's survivors did; the totals must hold 4.
        let mut t = FlowTotals::default();
        for round in 0..4u64 {
            t.drain((0..25_000u16).map(|p| (key(p, 0), sums(1, 100 + round, 100 + round, 0))));
        }
        let flows = t.view(Vec::new());
        assert_eq!(flows.len(), 25_000);
        assert!(
            flows
                .iter()
                .all(|f| f.packets == 4 && f.bytes == 4 * 1042 && f.payload_bytes == 4000),
            "{:?}",
            &flows[..2]
        );
        assert!(flows.iter().all(|f| (f.first_ns, f.last_ns) == (100, 103)));
    }

    #[test]
    fn live_copies_count_in_each_view_but_never_into_the_totals() {
        let mut t = FlowTotals::default();
        t.drain([(key(1, 0), sums(2, 10, 20, 0))]);
        // A slot holds 3 more of the flow, the current table 1 of another: in the view.
        let live = vec![
            (key(1, 0), sums(3, 0, 30, 0)),
            (key(2, 0), sums(1, 5, 5, 0)),
        ];
        let v = t.view(live);
        assert_eq!((packets_of(&v, 1), packets_of(&v, 2)), (5, 1));
        // The slot moved its 3 (and one more) into a table, now drained: 2 + 4, not 2 + 3 + 4.
        t.drain([(key(1, 0), sums(4, 25, 40, 0))]);
        let v = t.view(Vec::new());
        assert_eq!((packets_of(&v, 1), packets_of(&v, 2)), (6, 0));
        let f = v.iter().find(|f| f.key.sport == 1).unwrap();
        assert_eq!((f.first_ns, f.last_ns, f.samples), (10, 40, 6));
    }

    #[test]
    fn a_flow_on_two_queues_stays_two_parts_and_per_cpu_copies_merge() {
        let mut t = FlowTotals::default();
        // Two CPUs' copies of one entry (the second created by the first's update: no first).
        t.drain([
            (key(7, 0), sums(1, 50, 60, 0)),
            (key(7, 0), sums(2, 0, 70, 0)),
            (key(7, 1), sums(1, 80, 80, 1)),
        ]);
        let mut v = t.view(Vec::new());
        v.sort_by_key(|f| f.queue);
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].packets, v[0].first_ns, v[0].last_ns), (3, 50, 70));
        assert_eq!((v[1].packets, v[1].queue), (1, 1));
    }

    #[test]
    fn a_table_is_drained_only_once_every_slot_odd_at_the_flip_has_moved_on() {
        // Slot 1 was changing flows at the flip (odd): it may be adding to the old table.
        let at_flip = [4, 7, 10];
        assert!(!quiescent(&at_flip, &[4, 7, 10]));
        assert!(
            !quiescent(&at_flip, &[6, 7, 12]),
            "slots even at the flip do not matter, the odd one does"
        );
        assert!(quiescent(&at_flip, &[4, 8, 10]));
        // Moved on and odd again: a later change, which read the new flow_gen.
        assert!(quiescent(&at_flip, &[4, 9, 10]));
        assert!(quiescent(&[2, 4], &[2, 4]));
    }
}
