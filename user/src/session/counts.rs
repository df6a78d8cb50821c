//! The exact counts per queue: the driver's own counters where they count every path, checked
//! against the interface's totals span by span; the interface's totals split by the windows'
//! programs where they do not; and the cumulative reads turned into one interval's counts.
use std::path::Path;

use anyhow::Result;

use crate::probe::qcount::RxChoice;
use crate::snapshot::{Dir, QueueCounters};
use crate::topology::presence::{DeviceWatch, LinkTotals};
use crate::topology::IfaceInfo;

use super::{dropscale, flowscale, linksplit, napiscale, DetailMode, Session, SessionOptions};

/// The interface's totals read just before and just after the driver's per-queue counters.
pub(super) type LinkSpan = (LinkTotals, LinkTotals);

impl Session {
    /// Check the driver's per-queue counts of this interval against the interface's own
    /// totals: a driver whose queue counters miss a path (veth counts its NAPI path only) is
    /// found by trying, and its direction is counted by the program from then on.
    pub(super) fn check_kernel_counts(
        &mut self,
        link: Option<(LinkTotals, LinkTotals)>,
        cur_q: &mut [QueueCounters],
        interval: &[QueueCounters],
    ) -> Result<()> {
        let Some(link) = link else { return Ok(()) };
        let Some(prev) = self.prev_link.replace(link) else {
            return Ok(());
        };
        let (before, after) = (link.0.packets, link.1.packets);
        for (d, dir) in [(0, Dir::Rx), (1, Dir::Tx)] {
            if !self.kernel_counts[d] {
                continue;
            }
            // A span is judged once the interface carried enough to judge by, however many
            // intervals that takes: a direction that carries a few hundred packets an interval
            // (a receiver's ACKs) is judged too.
            let (span_before, span_after, counted) =
                self.check_spans[d].unwrap_or((prev.0.packets[d], prev.1.packets[d], 0));
            let by_queues = counted
                + interval
                    .iter()
                    .filter(|q| q.dir == dir)
                    .map(|q| q.packets)
                    .sum::<u64>();
            if before[d].saturating_sub(span_after) < MIN_CHECKED_PACKETS {
                self.check_spans[d] = Some((span_before, span_after, by_queues));
                continue;
            }
            self.check_spans[d] = Some((before[d], after[d], 0));
            let by_link = after[d].saturating_sub(span_after);
            // Only a miss that lasts two spans in a row counts, so only a path the counters
            // miss shows.
            if driver_counts_fit(by_queues, (before[d], after[d]), (span_before, span_after)) {
                self.kernel_misses[d] = 0;
                continue;
            }
            // Counters that stood still while the interface carried a span's packets are no
            // timing artefact: one such span is enough.
            self.kernel_misses[d] += if by_queues == 0 { 2 } else { 1 };
            if self.kernel_misses[d] < 2 {
                continue;
            }
            let src = self
                .kstats
                .as_ref()
                .and_then(|k| k.source())
                .map_or("kernel", |k| k.as_str());
            let what = dir.as_str().to_uppercase();
            if self.windows.is_some() && self.tier0.window_only(dir) {
                // The interface's totals from here, split by the program the windows run
                // anyway; its flows stay window-sampled, scaled by the split.
                let program = self.tier0.read_queues()?;
                // What the counters missed since the recording began goes to the queues with
                // the first split, so the recording's TX adds up to the interface's.
                let so_far = cur_q
                    .iter()
                    .filter(|q| q.dir == dir)
                    .fold((0, 0), |a, q| (a.0 + q.packets, a.1 + q.bytes));
                let start = self.start_link.unwrap_or_default();
                let missed = (
                    link.1.packets[d]
                        .saturating_sub(start.packets[d])
                        .saturating_sub(so_far.0),
                    link.1.bytes[d]
                        .saturating_sub(start.bytes[d])
                        .saturating_sub(so_far.1),
                );
                let mut split = linksplit::LinkSplit::new(
                    dir,
                    cur_q,
                    &program,
                    (link.1.packets[d], link.1.bytes[d]),
                    self.iface.queues(dir),
                );
                split.add_unsplit(missed);
                self.splits[d] = Some(split);
                self.kernel_counts[d] = false;
                self.counter_notes.push(format!(
                    "interval {}: the driver's per-queue {what} counters ({src}) counted {by_queues} packets where the interface counted {by_link}; \
                     from the next interval on, {}; the {} packets they missed before are in the first interval split",
                    self.index, split_words(dir), missed.0
                ));
                continue;
            }
            if !self.tier0.counts(dir) {
                // No program for this direction (no flows asked for): nothing to switch to.
                self.counter_notes.push(format!(
                    "interval {}: the driver's per-queue {what} counters ({src}) counted {by_queues} packets where the interface counted {by_link}; \
                     its per-queue {what} counts are not exact (record with --flow-sample above 0 to let a program count them)",
                    self.index
                ));
                self.kernel_counts[d] = false;
                continue;
            }
            self.tier0.count_always(dir)?;
            self.kernel_counts[d] = false;
            if let Some(f) = self.flow_windows.as_mut() {
                f.stop_scaling(dir);
            }
            // What the counters missed since the recording began goes to the queues of the
            // next interval, so the recording's totals add up to the interface's.
            let so_far = cur_q
                .iter()
                .filter(|q| q.dir == dir)
                .fold((0, 0), |a, q| (a.0 + q.packets, a.1 + q.bytes));
            let start = self.start_link.unwrap_or_default();
            self.missed[d] = Some((
                link.1.packets[d]
                    .saturating_sub(start.packets[d])
                    .saturating_sub(so_far.0),
                link.1.bytes[d]
                    .saturating_sub(start.bytes[d])
                    .saturating_sub(so_far.1),
            ));
            // From here the program's cumulative counts are the direction's: the next interval
            // is their difference from now.
            let program = self.tier0.read_queues()?;
            for q in cur_q.iter_mut().filter(|q| q.dir == dir) {
                let p = program.iter().find(|p| p.dir == dir && p.queue == q.queue);
                q.packets = p.map_or(0, |p| p.packets);
                q.bytes = p.map_or(0, |p| p.bytes);
            }
            self.counter_notes.push(format!(
                "interval {}: the driver's per-queue {what} counters ({src}) counted {by_queues} packets where the interface counted {by_link}; \
                 {what} is counted by the {} program from the next interval on, and its flows from then on are sampled all the time",
                self.index,
                if dir == Dir::Rx { self.tier0.rx_source.as_str() } else { "net_dev_start_xmit" },
            ));
        }
        Ok(())
    }
}

/// How a session counts each direction, decided before anything attaches: from the driver's
/// own counters where they count every path, else from the interface's totals split by the
/// windows, else by a program all the time.
pub(super) struct CountPlan {
    pub(super) kstats: Option<crate::probe::kstats::KernelStats>,
    /// [RX, TX]: the driver's per-queue counters count them.
    pub(super) kernel_counts: [bool; 2],
    /// Why the driver's counters were set aside, for the recording's notes.
    pub(super) notes: Vec<String>,
    /// Whether the detail windows run (1/duty of the time).
    pub(super) windowed: bool,
    /// [RX, TX]: the interface's totals split by the windows' program.
    pub(super) split: [bool; 2],
    /// [RX, TX]: counted without a program all the time.
    pub(super) covered: [bool; 2],
    /// [RX, TX]: the direction's program runs in the windows alone.
    pub(super) window_only: [bool; 2],
}

impl CountPlan {
    pub(super) fn decide(
        opts: &SessionOptions,
        iface: &IfaceInfo,
        netns_path: Option<&Path>,
        watch: Option<&mut DeviceWatch>,
    ) -> CountPlan {
        // The driver's own per-queue counters, where it keeps them: exact at no per-packet
        // cost. A direction they cover needs no counting program unless flows are sampled.
        let mut kstats = crate::probe::kstats::KernelStats::open(
            netns_path,
            iface.ifindex,
            &iface.name,
            iface.driver.as_deref(),
        )
        .ok()
        .flatten();
        let first = kstats.as_mut().map(|k| k.queues()).unwrap_or_default();
        let mut kernel_notes = Vec::new();
        let mut kernel_counts = [
            crate::probe::kstats::covers(&first, Dir::Rx)
                && opts.detail.rx_counts == RxChoice::Auto,
            crate::probe::kstats::covers(&first, Dir::Tx),
        ];
        // Windows of duty 1 are the whole run: full detail, or tier 0 all the time. With
        // `--detail counts` the windows carry tier 0's window programs alone.
        let windowed = opts.detail.mode != DetailMode::Full && opts.duty() > 1;
        // Counters that exist need not count every path (veth counts its NAPI path only):
        // what the device has carried so far must add up to the interface's own totals.
        if let Some(link) = watch.and_then(|w| w.link_packets()) {
            let src = kstats
                .as_ref()
                .and_then(|k| k.source())
                .map_or("kernel", |k| k.as_str());
            for (d, dir) in [(0, Dir::Rx), (1, Dir::Tx)] {
                let by_queues: u64 = first
                    .iter()
                    .filter(|q| q.dir == dir)
                    .filter_map(|q| q.packets)
                    .sum();
                if kernel_counts[d]
                    && link[d] >= MIN_CHECKED_PACKETS
                    && by_queues.abs_diff(link[d]) > link[d] / 20
                {
                    kernel_counts[d] = false;
                    let what = dir.as_str().to_uppercase();
                    let instead = if windowed && splittable(dir, opts.detail.rx_counts) {
                        split_words(dir)
                    } else {
                        format!("a program counts {what} instead")
                    };
                    kernel_notes.push(format!(
                    "the driver's per-queue {what} counters ({src}) add up to {by_queues} packets where the interface counted {}: \
                     they miss a path, so {instead}",
                    link[d],
                ));
                }
            }
        }
        let flows = opts.detail.flow_sample() > 0;
        // A direction the driver does not count on every path: with windows its program runs
        // in them alone (TX's hook fires for every device on the host; RX's runs per skb) and
        // the interface's own totals are split by what it counted there.
        let split = [Dir::Rx, Dir::Tx].map(|dir| {
            windowed
                && !kernel_counts[usize::from(dir == Dir::Tx)]
                && splittable(dir, opts.detail.rx_counts)
        });
        let covered = [0, 1].map(|d| kernel_counts[d] || split[d]);
        // Where a direction is counted without a program, its program is there for flows (and
        // the TX split, and learning which queue a NAPI instance serves): with windows and
        // --flows windows (the default) it runs inside the windows alone, and flows are scaled
        // by the counts.
        let window_only =
            [0, 1].map(|d| covered[d] && windowed && (!flows || opts.detail.flows_in_windows()));
        CountPlan {
            kstats,
            kernel_counts,
            notes: kernel_notes,
            windowed,
            split,
            covered,
            window_only,
        }
    }
}

impl Session {
    /// Each queue's cumulative counts at the interval's end, from whichever source counts
    /// each direction, and the interface's totals around the read (to check the driver's by).
    pub(super) fn read_counts(
        &mut self,
        finishing: bool,
    ) -> Result<(Vec<QueueCounters>, Option<LinkSpan>)> {
        let mut cur_q = self.tier0.read_queues()?;
        // The interface's totals just before and just after, to check the driver's counts
        // against (the counts were taken somewhere between the two) and to split TX by.
        let check = self.kstats.is_some() && self.kernel_counts.iter().any(|&c| c);
        let before = if check {
            self.watch
                .as_mut()
                .and_then(|w| w.take_checked_totals().or_else(|| w.link_totals()))
        } else {
            None
        };
        // Only a direction the driver's counters still count needs them read: on a device
        // whose counts come from elsewhere, each read is an interval's syscalls for nothing.
        if let Some(k) = self
            .kstats
            .as_mut()
            .filter(|_| self.kernel_counts.contains(&true))
        {
            overlay_kernel_counts(&mut cur_q, &k.queues(), self.kernel_counts);
        }
        let after = if check || self.splits.iter().any(Option::is_some) {
            // The last reading is the recording's total: settled, so it holds whole frames.
            self.watch.as_mut().and_then(|w| {
                if finishing {
                    w.link_totals_settled()
                } else {
                    w.link_totals()
                }
            })
        } else {
            None
        };
        for (d, split) in self.splits.iter_mut().enumerate() {
            if let (Some(s), Some(a)) = (split.as_mut(), after) {
                let split = s.interval(&cur_q, (a.packets[d], a.bytes[d]));
                overlay_kernel_counts(&mut cur_q, &split, [d == 0, d == 1]);
            }
        }
        let link = before.zip(after);
        Ok((cur_q, link))
    }

    /// Counts already made (between attach and now) belong to no interval: the cumulative
    /// counts interval 0 starts from, and the splits and window estimates that go on from them.
    pub(super) fn baseline(&mut self, split: [bool; 2], window_only: [bool; 2]) -> Result<()> {
        // Counts already made (between attach and now) belong to no interval either.
        self.prev_q = self.tier0.read_queues()?;
        let before = self.watch.as_mut().and_then(|w| w.link_totals());
        if let Some(k) = self.kstats.as_mut() {
            overlay_kernel_counts(&mut self.prev_q, &k.queues(), self.kernel_counts);
            // The NIC's drop counters count from here, as the queues do.
            k.ring_drop_deltas();
        }
        let after = self.watch.as_mut().and_then(|w| w.link_totals_settled());
        self.prev_link = before.zip(after);
        self.start_link = after;
        for (d, dir) in [(0, Dir::Rx), (1, Dir::Tx)] {
            if split[d] {
                let link = after.unwrap_or_default();
                self.splits[d] = Some(linksplit::LinkSplit::new(
                    dir,
                    &self.prev_q,
                    &self.prev_q,
                    (link.packets[d], link.bytes[d]),
                    self.iface.queues(dir),
                ));
            }
        }
        if self.tier0.napi_window_only() {
            self.napi_windows = Some(napiscale::WindowNapi::default());
        }
        if self.tier0.drop_window_only() {
            self.drop_windows = Some(dropscale::WindowDrops::default());
        }
        if window_only.iter().any(|&w| w) {
            self.flow_windows = Some(flowscale::WindowFlows::new(window_only, &self.prev_q));
        }
        Ok(())
    }
}

/// Whether a direction's totals can be split by its program in the windows: TX always (its
/// hook is there in every window); RX where the program is tier 0's choice, since a hook asked
/// for by `--rx-counts` is asked for to count.
pub(super) fn splittable(dir: Dir, rx: RxChoice) -> bool {
    dir == Dir::Tx || rx == RxChoice::Auto
}

/// How the recording's notes say a direction is counted once the interface's totals are split.
pub(super) fn split_words(dir: Dir) -> String {
    let (what, program, why) = match dir {
        Dir::Rx => (
            "RX",
            "RX",
            "run all the time it would cost every received skb",
        ),
        Dir::Tx => (
            "TX",
            "net_dev_start_xmit",
            "that hook fires for every device on the host",
        ),
    };
    format!(
        "{what} totals come from the interface's own counters (exact), split across its queues by what the \
         {program} program counted in the detail windows (estimated): {why}, so it runs in the windows alone"
    )
}

/// Fewer packets than this on the interface say nothing about whether the driver's per-queue
/// counters count them all (reads a moment apart already differ by a few).
pub(super) const MIN_CHECKED_PACKETS: u64 = 1000;

/// The driver's packets and bytes in place of the programs' in the directions they cover
/// (NAPI and drop counts stay the programs').
pub(super) fn overlay_kernel_counts(
    q: &mut Vec<QueueCounters>,
    kernel: &[crate::probe::kstats::QueueStat],
    covered: [bool; 2],
) {
    for k in kernel
        .iter()
        .filter(|k| covered[usize::from(k.dir == Dir::Tx)])
    {
        let (Some(packets), Some(bytes)) = (k.packets, k.bytes) else {
            continue;
        };
        match q.iter_mut().find(|c| c.dir == k.dir && c.queue == k.queue) {
            Some(c) => {
                c.packets = packets;
                c.bytes = bytes;
            }
            None => q.push(QueueCounters {
                packets,
                bytes,
                ..QueueCounters::new(k.dir, k.queue)
            }),
        }
    }
}

/// Packets and bytes counters missed, `missed`, given to the queues of `dir` that carried
/// traffic this interval (`interval`) in proportion to it, and to their cumulative counts
/// alike; None once given, else what is left for the next interval (none carried any).
pub(super) fn add_missed(
    interval: &mut [QueueCounters],
    cumulative: &mut [QueueCounters],
    dir: Dir,
    missed: (u64, u64),
) -> Option<(u64, u64)> {
    let busy: Vec<usize> = (0..interval.len())
        .filter(|&i| interval[i].dir == dir && interval[i].packets > 0)
        .collect();
    if busy.is_empty() {
        return Some(missed);
    }
    let by_packets: Vec<u64> = busy.iter().map(|&i| interval[i].packets).collect();
    let packets = linksplit::largest_remainder(missed.0, &by_packets);
    let bytes = linksplit::split_bytes(
        missed.1,
        &busy.iter().map(|&i| interval[i].bytes).collect::<Vec<_>>(),
        &by_packets,
    );
    for ((&i, p), b) in busy.iter().zip(packets).zip(bytes) {
        interval[i].packets += p;
        interval[i].bytes += b;
        if let Some(c) = cumulative
            .iter_mut()
            .find(|c| c.dir == dir && c.queue == interval[i].queue)
        {
            c.packets += p;
            c.bytes += b;
        }
    }
    None
}

/// Each queue's cumulative counters: tier 0's counts and the detail hooks' (disjoint fields).
pub(super) fn combine(counts: Vec<QueueCounters>, stages: &[QueueCounters]) -> Vec<QueueCounters> {
    let mut out = counts;
    for s in stages {
        match out
            .iter_mut()
            .find(|q| q.dir == s.dir && q.queue == s.queue)
        {
            Some(q) => q.add(s),
            None => out.push(s.clone()),
        }
    }
    out
}

/// One interval's per-queue counters: the difference of two cumulative reads; queues with
/// nothing new are left out.
pub(super) fn interval_queues(cur: &[QueueCounters], prev: &[QueueCounters]) -> Vec<QueueCounters> {
    let mut out: Vec<QueueCounters> = cur
        .iter()
        .map(
            |q| match prev.iter().find(|p| p.dir == q.dir && p.queue == q.queue) {
                Some(p) => q.delta(p),
                None => q.clone(),
            },
        )
        .filter(|d| !d.is_zero())
        .collect();
    out.sort_by_key(|q| (q.dir, q.queue));
    out
}

/// Whether the driver's per-queue counts of one direction over an interval, `by_queues`, fit
/// the interface's own totals. The driver's counters were read between the interface's totals
/// `now` = (before, after), and the last interval's between `prev` = (before, after), so what
/// they counted lies between the fewest and the most packets the interface can have carried
/// meanwhile, however far apart the reads were (a recorder descheduled between them on a busy
/// host). Judged on busy intervals only, with a margin of a twentieth.
pub(super) fn driver_counts_fit(by_queues: u64, now: (u64, u64), prev: (u64, u64)) -> bool {
    let least = now.0.saturating_sub(prev.1);
    let most = now.1.saturating_sub(prev.0);
    let margin = least / 20;
    least < MIN_CHECKED_PACKETS || (by_queues + margin >= least && by_queues <= most + margin)
}

impl Session {
    /// Where the RX and TX packet counts come from now (in words the recording keeps).
    pub fn count_sources(&self) -> (crate::probe::qcount::RxSource, &'static str) {
        use crate::probe::kstats::KernelSource;
        use crate::probe::qcount::RxSource;
        let kernel = self.kstats.as_ref().and_then(|k| k.source());
        let rx = match (&self.splits[0], self.kernel_counts[0], kernel) {
            (Some(s), _, _) if s.exact() => RxSource::Link,
            (Some(_), _, _) => RxSource::LinkSplit,
            (None, true, Some(KernelSource::Ethtool)) => RxSource::Ethtool,
            (None, true, _) => RxSource::Qstats,
            (None, false, _) => self.tier0.rx_source,
        };
        let tx = match (
            &self.splits[1],
            self.kstats.as_ref().and_then(|k| k.tx_source()),
        ) {
            (Some(s), _) if s.exact() => "link",
            (Some(_), _) => "link_split",
            (None, Some(k)) if self.kernel_counts[1] => k,
            _ => "xmit",
        };
        (rx, tx)
    }
    /// Whether NAPI polls are counted in the windows and estimated from them.
    pub fn napi_windowed(&self) -> bool {
        self.napi_windows.is_some()
    }

    /// Whether drops are estimated from the windows.
    pub fn drops_windowed(&self) -> bool {
        self.drop_windows.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::{add_missed, combine, driver_counts_fit, interval_queues};
    use crate::snapshot::{Dir, QueueCounters};

    /// What the driver's counters missed goes to the busy queues whole, bytes too where the
    /// interval's counts carried none.
    #[test]
    fn missed_counts_are_given_out_whole() {
        let q = |queue, packets, bytes| QueueCounters {
            packets,
            bytes,
            ..QueueCounters::new(Dir::Rx, queue)
        };
        let mut interval = vec![q(0, 0, 0), q(1, 3, 0), q(2, 1, 0)];
        let mut cumulative = interval.clone();
        assert_eq!(
            add_missed(&mut interval, &mut cumulative, Dir::Rx, (8, 1001)),
            None
        );
        let got: Vec<(u64, u64)> = interval.iter().map(|c| (c.packets, c.bytes)).collect();
        assert_eq!(got, vec![(0, 0), (9, 751), (3, 250)]);
        assert_eq!(cumulative[1].bytes + cumulative[2].bytes, 1001);
        // No queue busy: all of it waits.
        let mut idle = vec![q(0, 0, 0)];
        assert_eq!(
            add_missed(&mut idle.clone(), &mut idle, Dir::Rx, (8, 1001)),
            Some((8, 1001))
        );
    }

    /// The driver's counts are judged against the range the interface's totals around both
    /// reads allow: a recorder descheduled between its reads is no miss, a path the counters
    /// miss (or counts twice) still is, and a quiet interval is not judged.
    #[test]
    fn driver_counts_are_judged_against_the_interfaces_range() {
        // Read back to back: the counts match the interface's.
        assert!(driver_counts_fit(10_000, (11_000, 11_000), (1_000, 1_000)));
        // 50 000 packets arrived while the recorder was off the CPU between its two reads of
        // the interface's totals; the driver's counters, read in between, saw 40 000 of the
        // interval's. Judged against the totals after alone, that was a third short.
        assert!(driver_counts_fit(40_000, (10_000, 60_000), (0, 0)));
        // Half the packets on a path the counters miss, however close the reads.
        assert!(!driver_counts_fit(10_000, (20_000, 20_100), (0, 0)));
        // More than the interface can have carried.
        assert!(!driver_counts_fit(30_000, (20_000, 20_100), (0, 0)));
        // Within the margin of a twentieth either side.
        assert!(driver_counts_fit(19_100, (20_000, 20_000), (0, 0)));
        assert!(driver_counts_fit(20_900, (20_000, 20_000), (0, 0)));
        // Too few packets to judge.
        assert!(driver_counts_fit(0, (900, 900), (0, 0)));
    }

    /// Tier 0's counts and the detail's stages make one queue; an interval is the difference
    /// of two such reads, and a queue with nothing new is left out.
    #[test]
    fn an_interval_keeps_bytes_that_came_without_packets() {
        let prev = [QueueCounters {
            packets: 5,
            bytes: 500,
            ..QueueCounters::new(Dir::Rx, 2)
        }];
        let cur = [QueueCounters {
            packets: 5,
            bytes: 526,
            ..QueueCounters::new(Dir::Rx, 2)
        }];
        let d = interval_queues(&cur, &prev);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].packets, d[0].bytes), (0, 26));
    }

    #[test]
    fn counts_and_stages_combine_and_difference() {
        let counts = |p: u64| {
            vec![QueueCounters {
                packets: p,
                bytes: p * 100,
                ..QueueCounters::new(Dir::Rx, 1)
            }]
        };
        let mut st = QueueCounters::new(Dir::Rx, 1);
        st.handups = 5;
        st.stage_count[0] = 3;
        st.stage_max_ns[0] = 900;
        let a = combine(counts(10), &[st.clone()]);
        assert_eq!(
            (a[0].packets, a[0].handups, a[0].stage_count[0]),
            (10, 5, 3)
        );
        st.stage_count[0] = 4;
        let b = combine(
            counts(25),
            &[
                st.clone(),
                QueueCounters {
                    handups: 1,
                    ..QueueCounters::new(Dir::Tx, 0)
                },
            ],
        );
        let d = interval_queues(&b, &a);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (
                d[0].packets,
                d[0].bytes,
                d[0].stage_count[0],
                d[0].stage_max_ns[0]
            ),
            (15, 1500, 1, 900)
        );
        assert_eq!((d[1].dir, d[1].handups), (Dir::Tx, 1));
        assert!(interval_queues(&b, &b).is_empty());
    }
}
