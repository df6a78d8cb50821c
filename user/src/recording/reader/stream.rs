//! The window's intervals one step at a time (`report --intervals`, `report --csv`, `diff`):
//! each step sums consecutive intervals (one, or as many as fit in `every`) per queue, with
//! the queue's lifetime-stage histogram and the step's counter readings, and is handed to
//! the caller before the next is read. Cursors over the per-interval tables advance together
//! in interval order (their primary keys start with the interval), so memory holds one
//! step whatever the recording's length.
use std::collections::BTreeMap;

use anyhow::Result;

use super::{count, dir_of, fold_reading, reading_at, Recording};
use crate::counters::CounterReading;
use crate::snapshot::{Dir, NBUCKETS};

/// One queue in a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepQueue {
    pub dir: Dir,
    pub queue: u32,
    pub packets: u64,
    pub bytes: u64,
    pub drops: u64,
    pub napi_polls: u64,
    pub napi_work: u64,
    pub napi_budget_exhausted: u64,
    /// The lifetime stage (`Dir::lifetime_stage`): timed packets, their summed and largest
    /// ns, and their log2 histogram.
    pub life_count: u64,
    pub life_sum_ns: u64,
    pub life_max_ns: u64,
    pub life_hist: [u64; NBUCKETS],
}

impl StepQueue {
    fn new(dir: Dir, queue: u32) -> StepQueue {
        StepQueue {
            dir,
            queue,
            packets: 0,
            bytes: 0,
            drops: 0,
            napi_polls: 0,
            napi_work: 0,
            napi_budget_exhausted: 0,
            life_count: 0,
            life_sum_ns: 0,
            life_max_ns: 0,
            life_hist: [0; NBUCKETS],
        }
    }
}

/// Consecutive intervals summed.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// Interval numbers, first and last.
    pub first: u64,
    pub last: u64,
    pub intervals: u64,
    /// Seconds from the recording's start to the step's start and end.
    pub from_s: f64,
    pub to_s: f64,
    /// The intervals' summed length.
    pub dur_ns: u64,
    /// Queues with rows in these intervals, by direction and number.
    pub queues: Vec<StepQueue>,
    /// Counter readings of the asked source, summed per socket, PMU and event.
    pub counters: Vec<CounterReading>,
}

/// Row read ahead from one cursor: its interval and values.
type QRow = (i64, Dir, u32, [u64; 6]);
type SRow = (i64, Dir, u32, [u64; 3]);
type HRow = (i64, Dir, u32, usize, u64);

impl Recording {
    /// Hand each step of the window to `f`, in order: one interval a step (`every_ns` None)
    /// or the intervals that start in each `every_ns` from the window's start. `counters`:
    /// the counter source whose per-interval readings (live or software) the steps carry.
    /// Returns the steps handed over.
    pub fn for_each_step(
        &self,
        every_ns: Option<u64>,
        counters: Option<&str>,
        mut f: impl FnMut(&Step) -> Result<()>,
    ) -> Result<u64> {
        let e = |e| self.corrupt(e);
        let (a, b) = self.range();
        let start = self.start_ns()?;
        let lives = "((dir = 'rx' AND stage = 'driver_to_free') OR (dir = 'tx' AND stage = 'xmit_to_free'))";
        let mut ist = self
            .conn
            .prepare(&format!(
                "SELECT idx,t_ns,dur_ns FROM intervals WHERE idx BETWEEN {a} AND {b} ORDER BY idx"
            ))
            .map_err(e)?;
        let mut qst = self
            .conn
            .prepare(&format!(
                "SELECT interval,dir,queue,packets,bytes,drops,napi_polls,napi_work,napi_budget_exhausted
                 FROM queue_intervals WHERE interval BETWEEN {a} AND {b} ORDER BY interval"
            ))
            .map_err(e)?;
        let mut sst = self
            .conn
            .prepare(&format!(
                "SELECT interval,dir,queue,count,sum_ns,max_ns FROM stage_stats
                 WHERE interval BETWEEN {a} AND {b} AND {lives} ORDER BY interval"
            ))
            .map_err(e)?;
        let mut hst = self
            .conn
            .prepare(&format!(
                "SELECT interval,dir,queue,bucket,count FROM stage_hist
                 WHERE interval BETWEEN {a} AND {b} AND {lives} ORDER BY interval"
            ))
            .map_err(e)?;
        let cfilter = counters.map(|s| self.counter_filter(s));
        let mut cst = match &cfilter {
            Some(w) => Some(
                self.conn
                    .prepare(&format!(
                        "SELECT interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns FROM counters
                         WHERE {w} ORDER BY interval"
                    ))
                    .map_err(e)?,
            ),
            None => None,
        };
        let mut irows = ist.query([]).map_err(e)?;
        let mut qrows = qst.query([]).map_err(e)?;
        let mut srows = sst.query([]).map_err(e)?;
        let mut hrows = hst.query([]).map_err(e)?;
        let mut crows = match (&mut cst, counters) {
            (Some(st), Some(src)) => Some(st.query([src]).map_err(e)?),
            _ => None,
        };
        let g = |r: &rusqlite::Row<'_>, i: usize| -> Result<u64> { count(r, i).map_err(e) };
        let dir_at = |r: &rusqlite::Row<'_>, i: usize| -> Result<Dir> {
            Ok(dir_of(r.get_ref(i).map_err(e)?.as_str().unwrap_or("rx")))
        };
        let next_q = |rows: &mut rusqlite::Rows<'_>| -> Result<Option<QRow>> {
            let Some(r) = rows.next().map_err(e)? else {
                return Ok(None);
            };
            let mut v = [0u64; 6];
            for (i, slot) in v.iter_mut().enumerate() {
                *slot = g(r, i + 3)?;
            }
            Ok(Some((
                r.get(0).map_err(e)?,
                dir_at(r, 1)?,
                r.get(2).map_err(e)?,
                v,
            )))
        };
        let next_s = |rows: &mut rusqlite::Rows<'_>| -> Result<Option<SRow>> {
            let Some(r) = rows.next().map_err(e)? else {
                return Ok(None);
            };
            Ok(Some((
                r.get(0).map_err(e)?,
                dir_at(r, 1)?,
                r.get(2).map_err(e)?,
                [g(r, 3)?, g(r, 4)?, g(r, 5)?],
            )))
        };
        let next_h = |rows: &mut rusqlite::Rows<'_>| -> Result<Option<HRow>> {
            let Some(r) = rows.next().map_err(e)? else {
                return Ok(None);
            };
            let bucket: i64 = r.get(3).map_err(e)?;
            Ok(Some((
                r.get(0).map_err(e)?,
                dir_at(r, 1)?,
                r.get(2).map_err(e)?,
                usize::try_from(bucket).unwrap_or(usize::MAX),
                g(r, 4)?,
            )))
        };
        let next_c =
            |rows: &mut Option<rusqlite::Rows<'_>>| -> Result<Option<(i64, CounterReading)>> {
                let Some(rows) = rows else { return Ok(None) };
                let Some(r) = rows.next().map_err(e)? else {
                    return Ok(None);
                };
                Ok(Some((r.get(0).map_err(e)?, reading_at(r, 1).map_err(e)?)))
            };
        let mut q_ahead = next_q(&mut qrows)?;
        let mut s_ahead = next_s(&mut srows)?;
        let mut h_ahead = next_h(&mut hrows)?;
        let mut c_ahead = next_c(&mut crows)?;

        let mut steps = 0u64;
        let mut cur: Option<(u64, Step)> = None;
        let mut queues: BTreeMap<(Dir, u32), StepQueue> = BTreeMap::new();
        let mut readings: BTreeMap<(u32, String, String), CounterReading> = BTreeMap::new();
        let mut emit = |step: &mut Step,
                        queues: &mut BTreeMap<(Dir, u32), StepQueue>,
                        readings: &mut BTreeMap<(u32, String, String), CounterReading>|
         -> Result<()> {
            step.queues = std::mem::take(queues).into_values().collect();
            step.counters = std::mem::take(readings).into_values().collect();
            steps += 1;
            f(step)
        };
        while let Some(r) = irows.next().map_err(e)? {
            let iv: i64 = r.get(0).map_err(e)?;
            let t_ns = g(r, 1)?;
            let dur_ns = g(r, 2)?;
            let begin = t_ns.saturating_sub(dur_ns);
            let key = match every_ns {
                Some(every) if every > 0 => begin.saturating_sub(self.window.start_ns) / every,
                _ => iv as u64,
            };
            let s_of = |ns: u64| ns.saturating_sub(start) as f64 / 1e9;
            match &mut cur {
                Some((k, step)) if *k == key => {
                    step.last = iv as u64;
                    step.intervals += 1;
                    step.to_s = s_of(t_ns);
                    step.dur_ns = step.dur_ns.saturating_add(dur_ns);
                }
                _ => {
                    if let Some((_, mut done)) = cur.take() {
                        emit(&mut done, &mut queues, &mut readings)?;
                    }
                    cur = Some((
                        key,
                        Step {
                            first: iv as u64,
                            last: iv as u64,
                            intervals: 1,
                            from_s: s_of(begin),
                            to_s: s_of(t_ns),
                            dur_ns,
                            ..Default::default()
                        },
                    ));
                }
            }
            // Rows of intervals not in `intervals` (a damaged file) are skipped, not summed.
            while let Some((qi, dir, queue, v)) = q_ahead.filter(|x| x.0 <= iv) {
                if qi == iv {
                    let q = queues
                        .entry((dir, queue))
                        .or_insert_with(|| StepQueue::new(dir, queue));
                    for (slot, x) in [
                        &mut q.packets,
                        &mut q.bytes,
                        &mut q.drops,
                        &mut q.napi_polls,
                        &mut q.napi_work,
                        &mut q.napi_budget_exhausted,
                    ]
                    .into_iter()
                    .zip(v)
                    {
                        *slot = slot.saturating_add(x);
                    }
                }
                q_ahead = next_q(&mut qrows)?;
            }
            while let Some((si, dir, queue, v)) = s_ahead.filter(|x| x.0 <= iv) {
                if si == iv {
                    let q = queues
                        .entry((dir, queue))
                        .or_insert_with(|| StepQueue::new(dir, queue));
                    q.life_count = q.life_count.saturating_add(v[0]);
                    q.life_sum_ns = q.life_sum_ns.saturating_add(v[1]);
                    q.life_max_ns = q.life_max_ns.max(v[2]);
                }
                s_ahead = next_s(&mut srows)?;
            }
            while let Some((hi, dir, queue, bucket, n)) = h_ahead.filter(|x| x.0 <= iv) {
                if hi == iv {
                    let q = queues
                        .entry((dir, queue))
                        .or_insert_with(|| StepQueue::new(dir, queue));
                    if let Some(slot) = q.life_hist.get_mut(bucket) {
                        *slot = slot.saturating_add(n);
                    }
                }
                h_ahead = next_h(&mut hrows)?;
            }
            while let Some((ci, reading)) = c_ahead.take() {
                if ci > iv {
                    c_ahead = Some((ci, reading));
                    break;
                }
                if ci == iv {
                    fold_reading(&mut readings, reading);
                }
                c_ahead = next_c(&mut crows)?;
            }
        }
        if let Some((_, mut done)) = cur.take() {
            emit(&mut done, &mut queues, &mut readings)?;
        }
        Ok(steps)
    }
}
