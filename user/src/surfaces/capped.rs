//! A bounded set of per-key counter series with an "other" bucket, for label
//! sets that grow with traffic (flows). The kernel's cumulative per-key counts
//! become deltas; at most `cap` keys are exported, each counting from when it
//! entered the set, and every other key's deltas go to `other`. So every
//! series only grows, and the series' increases add up to the kernel's total:
//! `sum(rate(...))` over the exported keys and `other` is the whole rate.
//!
//! A key keeps its place while it stays active; a place frees when its key
//! leaves the kernel's table or shows no increase for `IDLE_READINGS`
//! readings, and a waiting key takes a place from the smallest exported one
//! only when its increase is more than `DISPLACE_FACTOR` times as large, so
//! the exported set does not flap between keys of similar size.
//!
//! Readings of estimates take their increases from [`super::estimates::Increases`]
//! ([`CappedSeries::update_estimates`]).
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use super::estimates::Increases;

/// Readings without an increase after which an exported key gives up its place.
pub const IDLE_READINGS: u32 = 10;
/// How much larger (this reading's increase) a waiting key must be to displace an exported one.
pub const DISPLACE_FACTOR: u64 = 2;

/// N counters per key; the first ranks keys (bytes for flows).
pub type Values<const N: usize> = [u64; N];

#[derive(Debug, Clone)]
struct Exported<const N: usize> {
    total: Values<N>,
    idle: u32,
}

#[derive(Debug, Clone)]
pub struct CappedSeries<K, const N: usize> {
    cap: usize,
    /// The kernel's last cumulative reading per key: bounded by the kernel table's size.
    prev: HashMap<K, Values<N>>,
    /// The same for readings of estimates.
    estimates: Increases<K, N>,
    exported: BTreeMap<K, Exported<N>>,
    other: Values<N>,
    /// Whether any key ever went to `other` (the series appears from then on).
    other_used: bool,
}

impl<K: Clone + Ord + Hash, const N: usize> CappedSeries<K, N> {
    pub fn new(cap: usize) -> Self {
        CappedSeries {
            cap,
            prev: HashMap::new(),
            estimates: Increases::default(),
            exported: BTreeMap::new(),
            other: [0; N],
            other_used: false,
        }
    }

    /// One reading of the kernel's table: every key present with its cumulative counts. A
    /// key left out was dropped; counts that went backwards were dropped and re-created.
    pub fn update(&mut self, reading: &[(K, Values<N>)]) {
        let mut deltas: Vec<(K, Values<N>)> = Vec::with_capacity(reading.len());
        let mut next = HashMap::with_capacity(reading.len());
        for (k, v) in reading {
            let p = self.prev.get(k).copied().unwrap_or([0; N]);
            let reset = v.iter().zip(&p).any(|(v, p)| v < p);
            let mut d = [0; N];
            for i in 0..N {
                d[i] = if reset { v[i] } else { v[i] - p[i] };
            }
            next.insert(k.clone(), *v);
            deltas.push((k.clone(), d));
        }
        self.prev = next;
        self.apply(deltas);
    }

    /// One reading of estimates: keys with the incarnation of their entry (when it was first
    /// seen) and cumulative totals that may be revised down or left out for a while
    /// ([`Increases`]).
    pub fn update_estimates(&mut self, reading: &[(K, u64, Values<N>)]) {
        let deltas = self.estimates.read(reading.iter().cloned());
        self.apply(deltas);
    }

    /// This reading's increase per key into the exported series and `other`.
    fn apply(&mut self, deltas: Vec<(K, Values<N>)>) {
        let delta_of: HashMap<&K, Values<N>> = deltas.iter().map(|(k, d)| (k, *d)).collect();

        // Places free up: keys gone from the kernel's table, or idle too long.
        self.exported.retain(|k, e| match delta_of.get(k) {
            None => false,
            Some(d) if d[0] == 0 => {
                e.idle += 1;
                e.idle < IDLE_READINGS
            }
            Some(_) => {
                e.idle = 0;
                true
            }
        });
        // Waiting keys, largest increase first.
        let mut waiting: Vec<&(K, Values<N>)> = deltas
            .iter()
            .filter(|(k, d)| d[0] > 0 && !self.exported.contains_key(k))
            .collect();
        waiting.sort_by(|a, b| b.1[0].cmp(&a.1[0]).then_with(|| a.0.cmp(&b.0)));
        for (k, d) in waiting {
            if self.exported.len() < self.cap {
                self.exported.insert(
                    k.clone(),
                    Exported {
                        total: [0; N],
                        idle: 0,
                    },
                );
                continue;
            }
            let smallest = self
                .exported
                .keys()
                .map(|e| (delta_of.get(e).map_or(0, |d| d[0]), e))
                .min_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)));
            match smallest {
                Some((small, e)) if d[0] > small.saturating_mul(DISPLACE_FACTOR) => {
                    let e = e.clone();
                    self.exported.remove(&e);
                    self.exported.insert(
                        k.clone(),
                        Exported {
                            total: [0; N],
                            idle: 0,
                        },
                    );
                }
                // Sorted: no later key can displace either.
                _ => break,
            }
        }
        for (k, d) in &deltas {
            let target = match self.exported.get_mut(k) {
                Some(e) => &mut e.total,
                None => {
                    if d.iter().any(|&v| v > 0) {
                        self.other_used = true;
                    }
                    &mut self.other
                }
            };
            for i in 0..N {
                target[i] += d[i];
            }
        }
    }

    /// The exported keys with their counts since they were exported, largest first.
    pub fn exported(&self) -> Vec<(K, Values<N>)> {
        let mut v: Vec<(K, Values<N>)> = self
            .exported
            .iter()
            .map(|(k, e)| (k.clone(), e.total))
            .collect();
        v.sort_by(|a, b| b.1[0].cmp(&a.1[0]).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Everything not exported, once anything was.
    pub fn other(&self) -> Option<Values<N>> {
        self.other_used.then_some(self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(c: &CappedSeries<&'static str, 1>) -> u64 {
        c.exported().iter().map(|(_, v)| v[0]).sum::<u64>() + c.other().map_or(0, |o| o[0])
    }

    #[test]
    fn caps_the_series_and_the_rest_goes_to_other_without_losing_a_byte() {
        let mut c = CappedSeries::<&str, 1>::new(2);
        c.update(&[("a", [100]), ("b", [50]), ("c", [10])]);
        assert_eq!(c.exported(), vec![("a", [100]), ("b", [50])]);
        assert_eq!(c.other(), Some([10]));
        c.update(&[("a", [150]), ("b", [60]), ("c", [40]), ("d", [5])]);
        assert_eq!(c.exported().len(), 2);
        // c grew 30 against b's 10: it takes b's place, and b's 10 of this reading go to other.
        assert_eq!(c.exported(), vec![("a", [150]), ("c", [30])]);
        assert_eq!(c.other(), Some([10 + 10 + 5]));
        // Every byte the kernel counted is in exactly one series: b's first 50 in b's, now gone.
        assert_eq!(total(&c) + 50, 150 + 60 + 40 + 5);
    }

    #[test]
    fn every_series_only_grows_and_the_increases_add_up() {
        let mut c = CappedSeries::<&str, 1>::new(3);
        let mut kernel: BTreeMap<&str, u64> = BTreeMap::new();
        let keys = ["a", "b", "c", "d", "e", "f", "g"];
        let mut last: HashMap<&str, u64> = HashMap::new();
        let mut last_other = 0;
        let mut kernel_sum_prev = 0u64;
        let mut seen_sum_prev = 0u64;
        for round in 0..200u64 {
            for (i, k) in keys.iter().enumerate() {
                // Rates that shift over time so the exported set changes.
                let rate = (round * (i as u64 + 1) * 7919) % 97;
                *kernel.entry(k).or_default() += rate;
            }
            let reading: Vec<(&str, [u64; 1])> = kernel.iter().map(|(k, v)| (*k, [*v])).collect();
            c.update(&reading);
            let ex = c.exported();
            assert!(ex.len() <= 3);
            let mut seen_increase = 0;
            for (k, v) in &ex {
                let prev = last.get(k).copied().unwrap_or(0);
                assert!(v[0] >= prev || !last.contains_key(k), "{k} went backwards");
                seen_increase += v[0] - if last.contains_key(k) { prev } else { 0 };
            }
            let o = c.other().map_or(0, |o| o[0]);
            assert!(o >= last_other);
            seen_increase += o - last_other;
            last_other = o;
            last = ex.iter().map(|(k, v)| (*k, v[0])).collect();
            let kernel_sum: u64 = kernel.values().sum();
            assert_eq!(seen_increase, kernel_sum - kernel_sum_prev, "round {round}");
            kernel_sum_prev = kernel_sum;
            seen_sum_prev += seen_increase;
        }
        assert_eq!(seen_sum_prev, kernel.values().sum::<u64>());
    }

    #[test]
    fn idle_keys_give_their_place_and_resets_count_from_the_new_value() {
        let mut c = CappedSeries::<&str, 1>::new(1);
        c.update(&[("a", [10]), ("b", [5])]);
        assert_eq!(c.exported(), vec![("a", [10])]);
        for _ in 0..IDLE_READINGS {
            c.update(&[("a", [10]), ("b", [5])]);
        }
        assert!(c.exported().is_empty());
        c.update(&[("a", [10]), ("b", [6])]);
        assert_eq!(c.exported(), vec![("b", [1])]);
        // b's counter went backwards (evicted and re-created): counts from 3.
        c.update(&[("a", [10]), ("b", [3])]);
        assert_eq!(c.exported(), vec![("b", [4])]);
        assert_eq!(c.other(), Some([5]));
    }

    #[test]
    fn estimates_left_out_or_revised_down_are_not_counted_twice() {
        // What a scraper sums: every series' last value, including series that ended.
        struct Scraper {
            c: CappedSeries<&'static str, 1>,
            last: HashMap<&'static str, u64>,
            ended: u64,
        }
        impl Scraper {
            fn read(&mut self, reading: &[(&'static str, u64, [u64; 1])]) -> u64 {
                self.c.update_estimates(reading);
                let cur: HashMap<&str, u64> = self
                    .c
                    .exported()
                    .into_iter()
                    .map(|(k, v)| (k, v[0]))
                    .collect();
                for (k, v) in &self.last {
                    if cur.get(k).is_none_or(|c| c < v) {
                        self.ended += v;
                    }
                }
                self.last = cur;
                self.ended + self.last.values().sum::<u64>() + self.c.other().map_or(0, |o| o[0])
            }
        }
        let mut s = Scraper {
            c: CappedSeries::new(1),
            last: HashMap::new(),
            ended: 0,
        };
        assert_eq!(s.read(&[("a", 1, [100]), ("b", 1, [10])]), 110);
        // a is left out of two readings (no window saw it), then comes back with its total
        // carried on: only the 50 above what was read is new.
        s.read(&[("b", 1, [20])]);
        s.read(&[("b", 1, [30])]);
        assert_eq!(s.read(&[("a", 1, [150]), ("b", 1, [30])]), 180);
        // Revised down, then up past the highest total: only what passes it counts.
        assert_eq!(s.read(&[("a", 1, [140]), ("b", 1, [30])]), 180);
        assert_eq!(s.read(&[("a", 1, [160]), ("b", 1, [30])]), 190);
        // A later incarnation is a new entry: it counts from zero.
        assert_eq!(s.read(&[("a", 2, [5]), ("b", 1, [30])]), 195);
    }
}
