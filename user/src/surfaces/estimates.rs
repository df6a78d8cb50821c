//! Increases of cumulative totals that are estimates (flows sampled in windows and scaled,
//! or replaced by a socket's own counts), for counters that must only grow and count nothing
//! twice.
//!
//! Unlike a kernel table's counts, a key may be left out of a reading (no window saw it) and
//! come back with its total carried on, and a total may be revised down. Each key carries an
//! incarnation (when its entry was first seen): a later one is a new entry and starts the key
//! over; otherwise only the part of a total above the highest seen is new. A key left out of
//! `FORGET_READINGS` readings in a row is forgotten, which bounds what is kept.
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// Readings a key may be left out of and still carry its total on (a flow no window saw for
/// about a minute, at one reading a second).
pub const FORGET_READINGS: u32 = 60;

#[derive(Debug, Clone, Copy)]
struct Seen<const N: usize> {
    highest: [u64; N],
    incarnation: u64,
    /// Readings in a row the key was left out of.
    absent: u32,
}

#[derive(Debug, Clone)]
pub struct Increases<K, const N: usize> {
    seen: HashMap<K, Seen<N>>,
}

impl<K, const N: usize> Default for Increases<K, N> {
    fn default() -> Self {
        Increases { seen: HashMap::new() }
    }
}

impl<K: Clone + Eq + Hash, const N: usize> Increases<K, N> {
    /// One reading: (key, incarnation, cumulative totals) → each key's increase, in order.
    pub fn read(&mut self, reading: impl IntoIterator<Item = (K, u64, [u64; N])>) -> Vec<(K, [u64; N])> {
        let mut out = Vec::new();
        for (k, inc, v) in reading {
            let s = self.seen.entry(k.clone()).or_insert(Seen { highest: [0; N], incarnation: inc, absent: 0 });
            if inc > s.incarnation {
                *s = Seen { highest: [0; N], incarnation: inc, absent: 0 };
            }
            let mut d = [0; N];
            for i in 0..N {
                d[i] = v[i].saturating_sub(s.highest[i]);
                s.highest[i] = s.highest[i].max(v[i]);
            }
            s.absent = 0;
            out.push((k, d));
        }
        let read: HashSet<&K> = out.iter().map(|(k, _)| k).collect();
        self.seen.retain(|k, s| {
            if !read.contains(k) {
                s.absent += 1;
            }
            s.absent <= FORGET_READINGS
        });
        out
    }

    /// Whether the key is still remembered.
    pub fn remembers(&self, k: &K) -> bool {
        self.seen.contains_key(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_out_revised_down_or_reborn_counts_nothing_twice() {
        let mut e = Increases::<&str, 1>::default();
        let sum = |d: Vec<(&str, [u64; 1])>| d.iter().map(|x| x.1[0]).sum::<u64>();
        assert_eq!(sum(e.read([("a", 1, [100])])), 100);
        assert_eq!(sum(e.read([])), 0);
        // Back with its total carried on: only what is above 100 is new.
        assert_eq!(sum(e.read([("a", 1, [150])])), 50);
        // Revised down, then up past the highest: only what passes it.
        assert_eq!(sum(e.read([("a", 1, [140])])), 0);
        assert_eq!(sum(e.read([("a", 1, [160])])), 10);
        // An earlier incarnation (a part seen earlier joined the total) is the same entry;
        // a later one is a new entry.
        assert_eq!(sum(e.read([("a", 0, [165])])), 5);
        assert_eq!(sum(e.read([("a", 2, [5])])), 5);
        for _ in 0..=FORGET_READINGS {
            e.read([]);
        }
        assert!(!e.remembers(&"a"));
    }
}
