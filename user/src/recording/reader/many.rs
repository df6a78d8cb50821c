//! Several recordings of one interface read as one (`report A.ddio B.ddio`, the files of
//! `record --rotate`): each file is attached to one SQLite connection and every table is read
//! through a temporary view over all of them, so every query of the one-file reader, its
//! rollups included, runs unchanged and memory stays what one file's report needs. The
//! files' intervals keep their BPF-clock times: time between files is a gap (no intervals),
//! never filled in.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{bail, Result};
use rusqlite::{Connection, OpenFlags};

use super::{Recording, Rollups};
use crate::recording::RecordingMeta;

/// One file of a recording read from several: where it lies on the BPF clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub path: PathBuf,
    pub start_ns: u64,
    pub end_ns: u64,
    pub intervals: u64,
    /// Added to its interval indices to follow the file before's (0 within a rotated run).
    pub offset: i64,
}

/// The most files one report reads (SQLite's limit on attached databases, as built).
pub const MAX_FILES: usize = 125;

/// Tables with one row per key for the whole run rather than per interval: a rotated file
/// holds what its own period added (`record --rotate`), so the files' rows are summed per
/// key; page pools and socket queues are as last read (cumulative), so the latest is kept.
const WHOLE_RUN: &[(&str, &[&str])] = &[
    ("flows", &["dir", "proto", "src", "sport", "dst", "dport"]),
    (
        "miss_flows",
        &["dir", "proto", "src", "sport", "dst", "dport"],
    ),
    ("miss_regions", &["region"]),
    ("drop_reasons", &["reason"]),
    ("flow_overflow", &["dir", "queue"]),
    ("socket_queues", &["proto", "src", "sport", "dst", "dport"]),
    ("page_pools", &["pool"]),
];

/// Whole-run columns that are not sums.
fn whole_run_fold(table: &str, col: &str) -> &'static str {
    match (table, col) {
        ("socket_queues" | "page_pools", _) => "MAX",
        (_, "first_ns") => "MIN",
        (_, "queue" | "last_ns" | "bytes_var" | "source") => "MAX",
        _ => "SUM",
    }
}

/// Columns that hold an interval index, shifted when two files' indices overlap.
const INDEX_COLS: &[&str] = &["idx", "interval", "last"];

/// The files the arguments name, in argument order: each as given when it exists, else,
/// when it holds `*`, `?` or `[`, the files that pattern matches (sorted; the shell did not
/// expand it, as when it was quoted). A pattern that matches nothing is one line.
pub fn expand_patterns(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        let s = a.to_string_lossy();
        let pattern = s.contains(['*', '?', '[']);
        if !pattern || std::fs::symlink_metadata(a).is_ok() {
            out.push(a.clone());
            continue;
        }
        let paths = glob::glob(&s).map_err(|e| anyhow::anyhow!("{s}: not a valid pattern: {e}"))?;
        let mut found: Vec<PathBuf> = paths.filter_map(|p| p.ok()).collect();
        if found.is_empty() {
            bail!("{s}: no file matches");
        }
        found.sort();
        out.extend(found);
    }
    // The same file twice would count its traffic twice.
    let mut seen = BTreeSet::new();
    for p in &out {
        let key = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        if !seen.insert(key) {
            bail!("{} is named twice", p.display());
        }
    }
    Ok(out)
}

/// What is known of a file before it is attached.
struct Probe {
    path: PathBuf,
    meta: RecordingMeta,
    first: u64,
    last: u64,
    intervals: u64,
    start_ns: u64,
    end_ns: u64,
    rollups: bool,
}

/// The boot the file's BPF clock counts from, as wall-clock ns (None: not recorded).
fn boot_ns(m: &RecordingMeta) -> Option<i128> {
    Some(m.start_unix_ms? as i128 * 1_000_000 - m.start_ns? as i128)
}

impl Recording {
    /// One file as `open`, several as one recording (see the module). They must be of one
    /// interface (name, namespace, ifindex) on one host and boot, and may not overlap in
    /// time; else one line naming the file that differs.
    pub fn open_many(paths: &[PathBuf]) -> Result<Recording> {
        match paths {
            [] => bail!("no recording given"),
            [one] => return Recording::open(one),
            _ if paths.len() > MAX_FILES => bail!(
                "{} files given: a report reads at most {MAX_FILES} at once (narrow the pattern, or report them in parts)",
                paths.len()
            ),
            _ => {}
        }
        let mut probes = Vec::with_capacity(paths.len());
        for p in paths {
            // Each is checked, its interrupted interval rolled back and its rollups built
            // as when it is reported alone; only its metadata and bounds are kept.
            let r = Recording::open(p)?;
            probes.push(Probe {
                path: p.clone(),
                first: r.all.first,
                last: r.all.last,
                intervals: r.all.intervals,
                start_ns: r.all.start_ns,
                end_ns: r.all.end_ns,
                rollups: r.rollups,
                meta: r.meta,
            });
        }
        probes.sort_by_key(|p| (p.start_ns, p.end_ns));
        check_same_source(&probes)?;

        let conn = Connection::open_with_flags(
            ":memory:",
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| anyhow::anyhow!("cannot read several recordings: {e}"))?;
        let _ = conn.execute_batch("PRAGMA cache_size = -8192; PRAGMA temp_store = FILE;");
        for (i, p) in probes.iter().enumerate() {
            let path = p.path.to_string_lossy();
            conn.execute(&format!("ATTACH DATABASE ?1 AS f{i}"), [path.as_ref()])
                .map_err(|e| anyhow::anyhow!("{}: cannot attach it: {e}", p.path.display()))?;
        }
        let offsets = index_offsets(&probes);
        let rollups = probes.iter().all(|p| p.rollups);
        create_views(&conn, &probes, &offsets, rollups)?;
        let meta = merged_meta(&conn, &probes)?;
        let parts = probes
            .iter()
            .zip(&offsets)
            .map(|(p, &offset)| Part {
                offset,
                path: p.path.clone(),
                start_ns: p.start_ns,
                end_ns: p.end_ns,
                intervals: p.intervals,
            })
            .collect();
        let use_rollups = if rollups {
            Rollups::Use
        } else {
            Rollups::Ignore
        };
        Recording::assemble(&probes[0].path, conn, meta, use_rollups, parts)
    }
}

/// Every file against the first: interface name, namespace inode and ifindex, host, boot,
/// and no overlap with the one before.
fn check_same_source(probes: &[Probe]) -> Result<()> {
    let first = &probes[0];
    let name = |p: &Probe| p.path.display().to_string();
    let fi = first.meta.iface.clone().unwrap_or_default();
    let fh = first.meta.host.clone().unwrap_or_default();
    for (k, p) in probes.iter().enumerate().skip(1) {
        let i = p.meta.iface.clone().unwrap_or_default();
        let h = p.meta.host.clone().unwrap_or_default();
        if i.name != fi.name || i.netns_inode != fi.netns_inode || i.ifindex != fi.ifindex {
            bail!(
                "{} records {} (ifindex {}, netns inode {}), not {} (ifindex {}, netns inode {}) as {}: report them apart",
                name(p), i.name, i.ifindex, i.netns_inode, fi.name, fi.ifindex, fi.netns_inode, name(first)
            );
        }
        if h.hostname != fh.hostname || h.kernel != fh.kernel || h.cpu_model != fh.cpu_model {
            bail!(
                "{} was recorded on host {} ({}), not {} ({}) as {}: report them apart",
                name(p),
                h.hostname,
                h.kernel,
                fh.hostname,
                fh.kernel,
                name(first)
            );
        }
        // The BPF clock restarts at boot: times of two boots do not compare.
        if let (Some(a), Some(b)) = (boot_ns(&first.meta), boot_ns(&p.meta)) {
            if (a - b).abs() > 2_000_000_000 {
                bail!(
                    "{} was recorded after another boot than {}: report them apart",
                    name(p),
                    name(first)
                );
            }
        }
        let prev = &probes[k - 1];
        if p.intervals > 0 && prev.intervals > 0 && p.start_ns < prev.end_ns {
            bail!(
                "{} overlaps {} in time (two recorders of one interface?): report them apart",
                name(p),
                name(prev)
            );
        }
    }
    Ok(())
}

/// How far each file's interval indices are moved so that they follow the file before's:
/// zero for the files of one rotated run (their indices continue), more for files of
/// separate runs (each counts from 0).
fn index_offsets(probes: &[Probe]) -> Vec<i64> {
    let mut next = 0i64;
    probes
        .iter()
        .map(|p| {
            if p.intervals == 0 {
                return 0;
            }
            let off = (next - p.first as i64).max(0);
            next = p.last as i64 + off + 1;
            off
        })
        .collect()
}

/// The tables of file `i` and their columns.
fn tables_of(conn: &Connection, i: usize) -> Result<BTreeMap<String, Vec<String>>> {
    let mut st = conn.prepare(&format!(
        "SELECT m.name, c.name FROM f{i}.sqlite_master m, pragma_table_info(m.name, 'f{i}') c
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite%' ORDER BY m.name, c.cid"
    ))?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    for r in rows {
        let (t, c) = r?;
        out.entry(t).or_default().push(c);
    }
    Ok(out)
}

/// A temporary view per table over every file (the meta table is merged apart).
fn create_views(conn: &Connection, probes: &[Probe], offsets: &[i64], rollups: bool) -> Result<()> {
    let first = tables_of(conn, 0)?;
    for (i, p) in probes.iter().enumerate().skip(1) {
        let these = tables_of(conn, i)?;
        for (t, cols) in &first {
            if t.starts_with("rollup_") && !rollups {
                continue;
            }
            if these.get(t) != Some(cols) {
                bail!(
                    "{} was written by another ddioscope version than {} (its {t} table differs): report them apart",
                    p.path.display(),
                    probes[0].path.display()
                );
            }
        }
    }
    let mut sql = String::new();
    for (t, cols) in &first {
        if t == "meta" || (t.starts_with("rollup_") && !rollups) {
            continue;
        }
        let select = |i: usize| -> String {
            let list: Vec<String> = cols
                .iter()
                .map(|c| {
                    if offsets[i] != 0 && INDEX_COLS.contains(&c.as_str()) {
                        format!("\"{c}\" + {} AS \"{c}\"", offsets[i])
                    } else {
                        format!("\"{c}\"")
                    }
                })
                .collect();
            format!("SELECT {} FROM f{i}.\"{t}\"", list.join(","))
        };
        let union: Vec<String> = (0..probes.len()).map(select).collect();
        let union = union.join(" UNION ALL ");
        match WHOLE_RUN.iter().find(|(w, _)| w == t) {
            Some((_, key)) => {
                let list: Vec<String> = cols
                    .iter()
                    .map(|c| {
                        if key.contains(&c.as_str()) {
                            format!("\"{c}\"")
                        } else {
                            format!("{}(\"{c}\") AS \"{c}\"", whole_run_fold(t, c))
                        }
                    })
                    .collect();
                sql.push_str(&format!(
                    "CREATE TEMP VIEW \"{t}\" AS SELECT {} FROM ({union}) GROUP BY {};\n",
                    list.join(","),
                    key.join(",")
                ));
            }
            None => sql.push_str(&format!("CREATE TEMP VIEW \"{t}\" AS {union};\n")),
        }
    }
    conn.execute_batch(&sql)
        .map_err(|e| anyhow::anyhow!("cannot read the recordings as one: {e}"))?;
    Ok(())
}

/// The run's metadata as the first file says it, ended as the last file says: complete when
/// every file is.
fn merged_meta(conn: &Connection, probes: &[Probe]) -> Result<RecordingMeta> {
    let read = |i: usize| -> Result<BTreeMap<String, String>> {
        let mut st = conn.prepare(&format!("SELECT key, value FROM f{i}.meta"))?;
        let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    };
    let mut rows = read(0)?;
    let last = read(probes.len() - 1)?;
    for k in [
        "end_ns",
        "stopped_by",
        "flow_windows",
        "windows_opened",
        "windows_passed",
    ] {
        match last.get(k) {
            Some(v) => rows.insert(k.to_string(), v.clone()),
            None => rows.remove(k),
        };
    }
    let mut meta = RecordingMeta::from_rows(&rows);
    meta.complete = Some(probes.iter().all(|p| p.meta.complete()));
    // Mirrored in a temporary table, for readers of the meta table itself.
    conn.execute_batch("CREATE TEMP TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);")?;
    for (k, v) in meta.to_rows()? {
        conn.execute("INSERT INTO temp.meta(key, value) VALUES (?1, ?2)", [k, v])?;
    }
    Ok(meta)
}

/// The files' time line in one line per gap: where one file ends and the next begins later
/// than one interval after.
pub fn gaps(parts: &[Part], interval_ns: u64) -> Vec<(usize, f64)> {
    parts
        .windows(2)
        .enumerate()
        .filter_map(|(k, w)| {
            let gap = w[1].start_ns.saturating_sub(w[0].end_ns);
            (w[0].intervals > 0 && w[1].intervals > 0 && gap > interval_ns)
                .then_some((k + 1, gap as f64 / 1e9))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn touch(d: &Path, name: &str) -> PathBuf {
        let p = d.join(name);
        std::fs::write(&p, b"").unwrap();
        p
    }

    #[test]
    fn a_quoted_pattern_is_expanded_in_time_order() {
        let d = tempfile::tempdir().unwrap();
        let b = touch(d.path(), "run-20261128T100100Z.ddio");
        let a = touch(d.path(), "run-20261128T100000Z.ddio");
        touch(d.path(), "other-20261128T100000Z.ddio");
        let pat = d.path().join("run-*.ddio");
        assert_eq!(expand_patterns(&[pat]).unwrap(), vec![a.clone(), b.clone()]);
        // Names given one by one stay as given.
        assert_eq!(
            expand_patterns(&[b.clone(), a.clone()]).unwrap(),
            vec![b.clone(), a.clone()]
        );
    }

    #[test]
    fn a_pattern_that_matches_nothing_or_a_file_named_twice_is_one_line() {
        let d = tempfile::tempdir().unwrap();
        let e = expand_patterns(&[d.path().join("none-*.ddio")]).unwrap_err();
        assert!(
            format!("{e:#}").ends_with("none-*.ddio: no file matches"),
            "{e:#}"
        );
        let a = touch(d.path(), "a.ddio");
        let e = expand_patterns(&[a.clone(), d.path().join("*.ddio")]).unwrap_err();
        assert!(format!("{e:#}").contains("is named twice"), "{e:#}");
        // A file whose name holds a pattern character is itself.
        let odd = touch(d.path(), "x[1].ddio");
        assert_eq!(
            expand_patterns(std::slice::from_ref(&odd)).unwrap(),
            vec![odd]
        );
    }

    #[test]
    fn separate_runs_are_moved_to_follow_one_another() {
        let p = |first, last, intervals| Probe {
            path: PathBuf::new(),
            meta: RecordingMeta::default(),
            first,
            last,
            intervals,
            start_ns: 0,
            end_ns: 0,
            rollups: true,
        };
        // A rotated run continues its indices: nothing moves.
        assert_eq!(index_offsets(&[p(0, 9, 10), p(10, 19, 10)]), vec![0, 0]);
        // Two runs each from 0.
        assert_eq!(
            index_offsets(&[p(0, 9, 10), p(0, 4, 5), p(0, 0, 0), p(3, 5, 3)]),
            vec![0, 10, 0, 12]
        );
    }
}
