//! Increases of cumulative totals that are estimates (flows sampled in windows and scaled,
//! or replaced by a socket's own counts), for counters that must only grow and count nothing
//! twice.
//!
//! Unlike a kernel table's counts, a key may be left out of a reading (no window saw it) and
//! come back with its total carried on, and a total may be revised down. Only the part of a
//! total above the highest seen is new. Each key carries an incarnation (when its entry was
//! first seen): a later one whose total is below the highest seen is a new entry (the
//! kernel's table let the flow go and it came back) and starts the key over; a later one
//! whose total carried on is the same flow (a socket's count spans its entries, and a merged
//! flow's first sighting moves when one of its parts goes). A key left out of
//! `FORGET_READINGS` readings in a row is forgotten, and at most `MAX_KEYS` are kept (those
//! left out longest go first), which bounds what is kept.
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// Readings a key may be left out of and still carry its total on (a flow no window saw for
/// about a minute, at one reading a second).
pub const FORGET_READINGS: u32 = 60;

/// Keys kept at most: four times the flow table's entries (16384), so a reading's flows and
/// those of the readings just before are all there under churn.
pub const MAX_KEYS: usize = 65536;

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
        Increases {
            seen: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash, const N: usize> Increases<K, N> {
    /// One reading: (key, incarnation, cumulative totals) → each key's increase, in order.
    pub fn read(
        &mut self,
        reading: impl IntoIterator<Item = (K, u64, [u64; N])>,
    ) -> Vec<(K, [u64; N])> {
        let mut out = Vec::new();
        for (k, inc, v) in reading {
            let s = self.seen.entry(k.clone()).or_insert(Seen {
                highest: [0; N],
                incarnation: inc,
                absent: 0,
            });
            if inc > s.incarnation {
                if v[0] < s.highest[0] {
                    s.highest = [0; N];
                }
                s.incarnation = inc;
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
        if self.seen.len() > MAX_KEYS {
            let mut absent: Vec<(u32, K)> = self
                .seen
                .iter()
                .filter(|(_, s)| s.absent > 0)
                .map(|(k, s)| (s.absent, k.clone()))
                .collect();
            absent.sort_unstable_by_key(|(a, _)| std::cmp::Reverse(*a));
            for (_, k) in absent.into_iter().take(self.seen.len() - MAX_KEYS) {
                self.seen.remove(&k);
            }
        }
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
        // An earlier incarnation (a part seen earlier joined the total) is the same entry; so
        // is a later one whose total carried on (a socket's count, a merged part gone).
        assert_eq!(sum(e.read([("a", 0, [165])])), 5);
        assert_eq!(sum(e.read([("a", 3, [170])])), 5);
        // A later one below the highest is a new entry: it counts from zero.
        assert_eq!(sum(e.read([("a", 4, [5])])), 5);
        for _ in 0..=FORGET_READINGS {
            e.read([]);
        }
        assert!(!e.remembers(&"a"));
    }

    #[test]
    fn under_churn_the_keys_left_out_longest_go_first() {
        let mut e = Increases::<u32, 1>::default();
        e.read([(0, 1, [1]), (1, 1, [1])]);
        e.read([(1, 1, [1])]);
        // Key 0 left out twice, key 1 once: a reading of MAX_KEYS new keys drops 0, then 1.
        e.read((2..MAX_KEYS as u32 + 1).map(|k| (k, 1, [1])));
        assert!(!e.remembers(&0) && e.remembers(&1) && e.remembers(&(MAX_KEYS as u32)));
        assert_eq!(e.seen.len(), MAX_KEYS);
    }
}
