//! Packed histograms: schema 2 stores each interval's stage histogram in its `stage_stats`
//! row and its NAPI work histogram in its `queue_intervals` row, as one BLOB of
//! (bucket, count) pairs, rather than one row per non-empty bucket (a row cost about 30
//! bytes of key and record header for 2-3 bytes of data). `install` gives every reader the
//! old row shape back: the `hist_buckets(blob)` table-valued function and the temporary
//! views `stage_hist` and `napi_hist` over it, so every query reads the same rows from a
//! recording of either schema. The minute and hour rollups of the stage histograms are
//! packed the same way (`hist_sum` adds packed histograms), read through the view
//! `rollup_stage_hist`.
use std::collections::BTreeMap;
use std::ffi::c_int;
use std::marker::PhantomData;

use rusqlite::functions::{Aggregate, Context as FnContext, FunctionFlags};
use rusqlite::types::Type;
use rusqlite::vtab::{
    eponymous_only_module, Context, Filters, IndexConstraintOp, IndexInfo, VTab, VTabConfig,
    VTabConnection, VTabCursor,
};
use rusqlite::{ffi, Connection};

/// Packs the non-empty buckets of `counts` (index = bucket): for each, the bucket and its
/// count as LEB128 varints, buckets ascending. An empty histogram packs to no bytes.
pub fn pack(counts: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    for (b, &n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        put_varint(&mut out, b as u64);
        put_varint(&mut out, n);
    }
    out
}

/// The (bucket, count) pairs of a packed histogram; `None` when the bytes are not one (a
/// varint cut short or over 64 bits, a count without its bucket).
pub fn unpack(bytes: &[u8]) -> Option<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let b = get_varint(bytes, &mut at)?;
        let n = get_varint(bytes, &mut at)?;
        out.push((b, n));
    }
    Some(out)
}

// LEB128 by hand: two dozen lines against a dependency for them.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        let low = u64::from(byte & 0x7f);
        if shift == 63 && low > 1 {
            return None;
        }
        v |= low << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Whether the recording's connection reads schema 2's packed histograms: its
/// `stage_stats` (a table, or for several files a view over theirs) has the `hist` column.
pub fn is_packed(conn: &Connection) -> bool {
    conn.query_row(
        "SELECT 1 FROM pragma_table_info('stage_stats') WHERE name = 'hist'",
        [],
        |_| Ok(()),
    )
    .is_ok()
}

/// The old row shape over packed histograms, as temporary views (they live with the
/// connection and are never written to the file). Over an older recording, whose
/// histograms are tables of their own, nothing is done. For several files read as one
/// (`reader::many`), call it after their per-table views exist.
pub fn install(conn: &Connection) -> rusqlite::Result<()> {
    if !is_packed(conn) {
        return Ok(());
    }
    register(conn)?;
    conn.execute_batch(
        "CREATE TEMP VIEW IF NOT EXISTS stage_hist AS
           SELECT s.interval AS interval, s.dir AS dir, s.queue AS queue, s.stage AS stage,
                  h.bucket AS bucket, h.count AS count
           FROM stage_stats AS s, hist_buckets(s.hist) AS h;
         CREATE TEMP VIEW IF NOT EXISTS napi_hist AS
           SELECT q.interval AS interval, q.queue AS queue, h.bucket AS bucket, h.count AS count
           FROM queue_intervals AS q, hist_buckets(q.napi_hist) AS h;",
    )?;
    // The rollups of a packed recording pack their stage histograms too (about 70% of
    // their size otherwise); none yet: `rollup::backfill` calls this again once they are.
    let rollups = conn
        .query_row(
            "SELECT 1 FROM pragma_table_info('rollup_stage_stats') WHERE name = 'hist'",
            [],
            |_| Ok(()),
        )
        .is_ok();
    if rollups {
        conn.execute_batch(
            "CREATE TEMP VIEW IF NOT EXISTS rollup_stage_hist AS
               SELECT s.level AS level, s.interval AS interval, s.dir AS dir, s.queue AS queue,
                      s.stage AS stage, h.bucket AS bucket, h.count AS count
               FROM rollup_stage_stats AS s, hist_buckets(s.hist) AS h;",
        )?;
    }
    Ok(())
}

/// The bucket-by-bucket sum of packed histograms (NULL ones add nothing), packed.
struct HistSum;

impl Aggregate<BTreeMap<u64, u64>, Vec<u8>> for HistSum {
    fn init(&self, _: &mut FnContext<'_>) -> rusqlite::Result<BTreeMap<u64, u64>> {
        Ok(BTreeMap::new())
    }

    fn step(&self, ctx: &mut FnContext<'_>, sum: &mut BTreeMap<u64, u64>) -> rusqlite::Result<()> {
        let Some(bytes) = ctx.get::<Option<Vec<u8>>>(0)? else {
            return Ok(());
        };
        let pairs = unpack(&bytes).ok_or_else(|| {
            rusqlite::Error::UserFunctionError(
                format!(
                    "a packed histogram is damaged ({} bytes that are not bucket and count pairs)",
                    bytes.len()
                )
                .into(),
            )
        })?;
        for (b, n) in pairs {
            let slot = sum.entry(b).or_default();
            *slot = slot.saturating_add(n);
        }
        Ok(())
    }

    fn finalize(
        &self,
        _: &mut FnContext<'_>,
        sum: Option<BTreeMap<u64, u64>>,
    ) -> rusqlite::Result<Vec<u8>> {
        let mut out = Vec::new();
        for (b, n) in sum.unwrap_or_default().into_iter().filter(|(_, n)| *n > 0) {
            put_varint(&mut out, b);
            put_varint(&mut out, n);
        }
        Ok(out)
    }
}

/// Makes `hist_buckets(blob)` and `hist_sum(blob)` callable on the connection.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_module(
        c"hist_buckets",
        eponymous_only_module::<HistBuckets>(),
        None,
    )?;
    conn.create_aggregate_function(
        "hist_sum",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        HistSum,
    )
}

/// `hist_buckets(blob)`: one row (bucket, count) per pair of a packed histogram; none for
/// NULL or an empty one; an error naming the damage for bytes that are not one.
#[repr(C)]
struct HistBuckets {
    base: ffi::sqlite3_vtab,
}

const COL_PACKED: c_int = 2;

unsafe impl<'vtab> VTab<'vtab> for HistBuckets {
    type Aux = ();
    type Cursor = HistCursor<'vtab>;

    fn connect(
        db: &mut VTabConnection,
        _aux: Option<&()>,
        _args: &[&[u8]],
    ) -> rusqlite::Result<(String, Self)> {
        db.config(VTabConfig::Innocuous)?;
        Ok((
            "CREATE TABLE x(bucket INTEGER, count INTEGER, packed HIDDEN)".to_owned(),
            HistBuckets {
                base: ffi::sqlite3_vtab::default(),
            },
        ))
    }

    fn best_index(&self, info: &mut IndexInfo) -> rusqlite::Result<()> {
        let arg = info.constraints().position(|c| {
            c.column() == COL_PACKED
                && c.is_usable()
                && c.operator() == IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_EQ
        });
        match arg {
            Some(i) => {
                let mut usage = info.constraint_usage(i);
                usage.set_argv_index(1);
                usage.set_omit(true);
                info.set_idx_num(1);
                info.set_estimated_cost(1.0);
                info.set_estimated_rows(8);
            }
            // Without its argument the function has no rows: a plan that needs it is
            // priced out.
            None => {
                info.set_idx_num(0);
                info.set_estimated_cost(1e12);
            }
        }
        Ok(())
    }

    fn open(&mut self) -> rusqlite::Result<HistCursor<'_>> {
        Ok(HistCursor {
            base: ffi::sqlite3_vtab_cursor::default(),
            rows: Vec::new(),
            at: 0,
            phantom: PhantomData,
        })
    }
}

#[repr(C)]
struct HistCursor<'vtab> {
    base: ffi::sqlite3_vtab_cursor,
    rows: Vec<(u64, u64)>,
    at: usize,
    phantom: PhantomData<&'vtab HistBuckets>,
}

unsafe impl VTabCursor for HistCursor<'_> {
    fn filter(
        &mut self,
        idx_num: c_int,
        _idx_str: Option<&str>,
        args: &Filters<'_>,
    ) -> rusqlite::Result<()> {
        self.at = 0;
        self.rows.clear();
        if idx_num != 1 || args.is_empty() {
            return Ok(());
        }
        let bytes: Option<Vec<u8>> = match args.iter().next().map(|v| v.data_type()) {
            None | Some(Type::Null) => None,
            Some(_) => Some(args.get(0)?),
        };
        if let Some(bytes) = bytes {
            self.rows = unpack(&bytes).ok_or_else(|| {
                rusqlite::Error::ModuleError(format!(
                    "a packed histogram is damaged ({} bytes that are not bucket and count pairs)",
                    bytes.len()
                ))
            })?;
        }
        Ok(())
    }

    fn next(&mut self) -> rusqlite::Result<()> {
        self.at += 1;
        Ok(())
    }

    fn eof(&self) -> bool {
        self.at >= self.rows.len()
    }

    fn column(&self, ctx: &mut Context, i: c_int) -> rusqlite::Result<()> {
        let (b, n) = self.rows.get(self.at).copied().unwrap_or_default();
        match i {
            0 => ctx.set_result(&(b as i64)),
            1 => ctx.set_result(&(n as i64)),
            _ => ctx.set_result(&rusqlite::types::Null),
        }
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        Ok(self.at as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_packs_and_unpacks_to_its_buckets() {
        let mut h = [0u64; 32];
        h[0] = 1;
        h[11] = 127;
        h[12] = 128;
        h[31] = u64::MAX;
        let p = pack(&h);
        // 1+1, 1+1, 1+2, 1+10 bytes.
        assert_eq!(p.len(), 18);
        assert_eq!(
            unpack(&p).unwrap(),
            vec![(0, 1), (11, 127), (12, 128), (31, u64::MAX)]
        );
    }

    #[test]
    fn an_empty_histogram_is_no_bytes_and_no_rows() {
        assert!(pack(&[0u64; 12]).is_empty());
        assert_eq!(unpack(&[]).unwrap(), vec![]);
    }

    #[test]
    fn bytes_that_are_not_a_histogram_are_refused() {
        // A bucket without its count, a varint cut short, one over 64 bits.
        assert!(unpack(&[3]).is_none());
        assert!(unpack(&[3, 0x80]).is_none());
        assert!(unpack(&[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).is_none());
    }

    #[test]
    fn the_views_give_the_old_rows_and_name_damage() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE stage_stats (interval, dir, queue, stage, count, sum_ns, max_ns, hist BLOB);
             CREATE TABLE queue_intervals (interval, dir, queue, napi_hist BLOB);",
        )
        .unwrap();
        let mut h = [0u64; 32];
        h[3] = 5;
        h[7] = 2;
        c.execute(
            "INSERT INTO stage_stats VALUES (4, 'rx', 1, 'driver_to_free', 7, 70, 20, ?1)",
            [pack(&h)],
        )
        .unwrap();
        c.execute_batch(
            "INSERT INTO stage_stats VALUES (5, 'rx', 1, 'driver_to_free', 0, 0, 0, x'');
             INSERT INTO queue_intervals VALUES (4, 'rx', 1, x'0209'), (4, 'tx', 0, NULL);",
        )
        .unwrap();
        install(&c).unwrap();
        let rows: Vec<(i64, String, i64, String, i64, i64)> = c
            .prepare("SELECT * FROM stage_hist ORDER BY interval, bucket")
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let f = || "driver_to_free".to_string();
        assert_eq!(
            rows,
            vec![
                (4, "rx".into(), 1, f(), 3, 5),
                (4, "rx".into(), 1, f(), 7, 2)
            ]
        );
        let napi: (i64, i64, i64, i64) = c
            .query_row("SELECT * FROM napi_hist", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap();
        assert_eq!(napi, (4, 1, 2, 9));
        c.execute(
            "UPDATE queue_intervals SET napi_hist = x'0280' WHERE dir = 'rx'",
            [],
        )
        .unwrap();
        let e = c
            .query_row("SELECT COUNT(*) FROM napi_hist", [], |r| r.get::<_, i64>(0))
            .unwrap_err();
        assert!(e.to_string().contains("packed histogram is damaged"), "{e}");
    }

    #[test]
    fn packed_histograms_sum_bucket_by_bucket() {
        let c = Connection::open_in_memory().unwrap();
        register(&c).unwrap();
        let (mut a, mut b) = ([0u64; 32], [0u64; 32]);
        a[2] = 3;
        a[5] = 1;
        b[5] = 200;
        b[9] = 7;
        c.execute_batch("CREATE TABLE t (h BLOB)").unwrap();
        for h in [pack(&a), pack(&b), Vec::new()] {
            c.execute("INSERT INTO t VALUES (?1)", [h]).unwrap();
        }
        c.execute("INSERT INTO t VALUES (NULL)", []).unwrap();
        let sum: Vec<u8> = c
            .query_row("SELECT hist_sum(h) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(unpack(&sum).unwrap(), vec![(2, 3), (5, 201), (9, 7)]);
        let none: Vec<u8> = c
            .query_row("SELECT hist_sum(h) FROM t WHERE 0", [], |r| r.get(0))
            .unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn an_older_recording_keeps_its_tables() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE stage_stats (interval, dir, queue, stage, count, sum_ns, max_ns);
             CREATE TABLE stage_hist (interval, dir, queue, stage, bucket, count);",
        )
        .unwrap();
        install(&c).unwrap();
        let views: i64 = c
            .query_row("SELECT COUNT(*) FROM sqlite_temp_master", [], |r| r.get(0))
            .unwrap();
        assert_eq!(views, 0);
    }
}
