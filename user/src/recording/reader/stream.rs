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

/// A row's values, after its interval.
type QRow = (Dir, u32, [u64; 6]);
type SRow = (Dir, u32, [u64; 3]);
type HRow = (Dir, u32, usize, u64);

/// One query ordered by interval, read a row ahead, so each interval takes the rows of its
/// own index without holding the table.
struct Cursor<'s, T> {
    rows: rusqlite::Rows<'s>,
    ahead: Option<(i64, T)>,
    read: RowReader<T>,
}

/// Reads one row of a cursor's query: its interval and values.
type RowReader<T> = fn(&rusqlite::Row<'_>) -> rusqlite::Result<(i64, T)>;

impl<'s, T> Cursor<'s, T> {
    fn new(mut rows: rusqlite::Rows<'s>, read: RowReader<T>) -> rusqlite::Result<Self> {
        let ahead = match rows.next()? {
            Some(r) => Some(read(r)?),
            None => None,
        };
        Ok(Cursor { rows, ahead, read })
    }

    /// Hand `f` every row of interval `iv`. Rows of intervals not in `intervals` (a damaged
    /// file) are skipped, not summed.
    fn take_interval(&mut self, iv: i64, mut f: impl FnMut(T)) -> rusqlite::Result<()> {
        while let Some((at, x)) = self.ahead.take() {
            if at > iv {
                self.ahead = Some((at, x));
                break;
            }
            if at == iv {
                f(x);
            }
            self.ahead = match self.rows.next()? {
                Some(r) => Some((self.read)(r)?),
                None => None,
            };
        }
        Ok(())
    }
}

fn dir_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Dir> {
    Ok(dir_of(r.get_ref(i)?.as_str().unwrap_or("rx")))
}

/// A `queue_intervals` row: packets, bytes, drops and the NAPI counts.
fn queue_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, QRow)> {
    let mut v = [0u64; 6];
    for (i, slot) in v.iter_mut().enumerate() {
        *slot = count(r, i + 3)?;
    }
    Ok((r.get(0)?, (dir_at(r, 1)?, r.get(2)?, v)))
}

/// A `stage_stats` row of a life stage: count, sum and max.
fn life_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, SRow)> {
    let v = [count(r, 3)?, count(r, 4)?, count(r, 5)?];
    Ok((r.get(0)?, (dir_at(r, 1)?, r.get(2)?, v)))
}

/// A `stage_hist` row of a life stage: bucket and count.
fn hist_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, HRow)> {
    let bucket: i64 = r.get(3)?;
    Ok((
        r.get(0)?,
        (
            dir_at(r, 1)?,
            r.get(2)?,
            usize::try_from(bucket).unwrap_or(usize::MAX),
            count(r, 4)?,
        ),
    ))
}

/// A `counters` row.
fn counter_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, CounterReading)> {
    Ok((r.get(0)?, reading_at(r, 1)?))
}

/// The queries a step walk reads side by side, all over the window's intervals.
struct StepStatements<'c> {
    intervals: rusqlite::Statement<'c>,
    queues: rusqlite::Statement<'c>,
    lives: rusqlite::Statement<'c>,
    hist: rusqlite::Statement<'c>,
    counters: Option<rusqlite::Statement<'c>>,
}

fn queue_entry(
    queues: &mut BTreeMap<(Dir, u32), StepQueue>,
    dir: Dir,
    queue: u32,
) -> &mut StepQueue {
    queues
        .entry((dir, queue))
        .or_insert_with(|| StepQueue::new(dir, queue))
}

/// Add one interval's queue counts to the step's.
fn add_queue_counts(queues: &mut BTreeMap<(Dir, u32), StepQueue>, (dir, queue, v): QRow) {
    let q = queue_entry(queues, dir, queue);
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

/// Add one interval's life counts to the step's.
fn add_lives(queues: &mut BTreeMap<(Dir, u32), StepQueue>, (dir, queue, v): SRow) {
    let q = queue_entry(queues, dir, queue);
    q.life_count = q.life_count.saturating_add(v[0]);
    q.life_sum_ns = q.life_sum_ns.saturating_add(v[1]);
    q.life_max_ns = q.life_max_ns.max(v[2]);
}

/// Add one interval's life histogram bucket to the step's.
fn add_life_bucket(queues: &mut BTreeMap<(Dir, u32), StepQueue>, (dir, queue, bucket, n): HRow) {
    let q = queue_entry(queues, dir, queue);
    if let Some(slot) = q.life_hist.get_mut(bucket) {
        *slot = slot.saturating_add(n);
    }
}

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
        let start = self.start_ns()?;
        let mut st = self.step_statements(counters)?;
        let mut irows = st.intervals.query([]).map_err(e)?;
        let mut qc = Cursor::new(st.queues.query([]).map_err(e)?, queue_row).map_err(e)?;
        let mut sc = Cursor::new(st.lives.query([]).map_err(e)?, life_row).map_err(e)?;
        let mut hc = Cursor::new(st.hist.query([]).map_err(e)?, hist_row).map_err(e)?;
        let mut cc = match (&mut st.counters, counters) {
            (Some(s), Some(src)) => {
                Some(Cursor::new(s.query([src]).map_err(e)?, counter_row).map_err(e)?)
            }
            _ => None,
        };

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
            let t_ns = count(r, 1).map_err(e)?;
            let dur_ns = count(r, 2).map_err(e)?;
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
            qc.take_interval(iv, |x| add_queue_counts(&mut queues, x))
                .map_err(e)?;
            sc.take_interval(iv, |x| add_lives(&mut queues, x))
                .map_err(e)?;
            hc.take_interval(iv, |x| add_life_bucket(&mut queues, x))
                .map_err(e)?;
            if let Some(c) = &mut cc {
                c.take_interval(iv, |x| fold_reading(&mut readings, x))
                    .map_err(e)?;
            }
        }
        if let Some((_, mut done)) = cur.take() {
            emit(&mut done, &mut queues, &mut readings)?;
        }
        Ok(steps)
    }

    /// The step walk's queries over the window, the life stages only (the stages a packet
    /// buffer lives through), and the counters of `counters` when asked.
    fn step_statements(&self, counters: Option<&str>) -> Result<StepStatements<'_>> {
        let e = |e| self.corrupt(e);
        let (a, b) = self.range();
        let lives = "((dir = 'rx' AND stage = 'driver_to_free') OR (dir = 'tx' AND stage = 'xmit_to_free'))";
        let prepare = |sql: String| self.conn.prepare(&sql).map_err(e);
        Ok(StepStatements {
            intervals: prepare(format!(
                "SELECT idx,t_ns,dur_ns FROM intervals WHERE idx BETWEEN {a} AND {b} ORDER BY idx"
            ))?,
            queues: prepare(format!(
                "SELECT interval,dir,queue,packets,bytes,drops,napi_polls,napi_work,napi_budget_exhausted
                 FROM queue_intervals WHERE interval BETWEEN {a} AND {b} ORDER BY interval"
            ))?,
            lives: prepare(format!(
                "SELECT interval,dir,queue,count,sum_ns,max_ns FROM stage_stats
                 WHERE interval BETWEEN {a} AND {b} AND {lives} ORDER BY interval"
            ))?,
            hist: prepare(format!(
                "SELECT interval,dir,queue,bucket,count FROM stage_hist
                 WHERE interval BETWEEN {a} AND {b} AND {lives} ORDER BY interval"
            ))?,
            counters: counters
                .map(|s| {
                    prepare(format!(
                        "SELECT interval,t_ns,socket,pmu,event,value,raw,enabled_ns,running_ns FROM counters
                         WHERE {} ORDER BY interval",
                        self.counter_filter(s)
                    ))
                })
                .transpose()?,
        })
    }
}
