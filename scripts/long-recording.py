#!/usr/bin/env python3
"""Build a long recording from a short real one, for the report benchmark.

    scripts/long-recording.py SRC OUT [--seconds 3600]

Every per-interval row of SRC (intervals, queue counts, stage statistics and
histograms, NAPI histograms, packet records, L3-miss rows, buffer-map rows,
counter readings) is repeated back to back, each copy shifted by SRC's length
in interval numbers and in time, until OUT covers --seconds. The whole-run
tables (flows, drop reasons, miss flows and regions) are scaled by the number of
copies, so OUT reads as one long run of the same traffic; SRC's rollups are dropped
(the first report of OUT builds its own). SRC is not changed;
OUT is refused if it exists.
"""
import argparse
import math
import os
import shutil
import sqlite3
import sys

# Per-interval tables: (table, interval column, time columns shifted with it).
PER_INTERVAL = [
    ("intervals", "idx", ["t_ns"]),
    ("queue_intervals", "interval", []),
    ("stage_stats", "interval", []),
    ("stage_hist", "interval", []),
    ("napi_hist", "interval", []),
    ("samples", "interval", ["ts0", "ts1", "ts2", "ts3", "free_ns"]),
    ("miss_intervals", "interval", []),
    ("miss_queues", "interval", []),
    ("miss_age_hist", "interval", []),
    ("buf_map_intervals", "interval", []),
    ("counters", "interval", ["t_ns"]),
]
# Whole-run tables: their counts grow with the copies.
CUMULATIVE = [
    ("flows", ["packets", "bytes", "payload_bytes", "samples", "bytes_sq"]),
    ("drop_reasons", ["count"]),
    ("miss_flows", ["addr_join", "cpu_ctx"]),
    ("miss_regions", ["samples"]),
]


def columns(db, table):
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=3600.0)
    a = ap.parse_args()
    if os.path.exists(a.out):
        sys.exit(f"long-recording: {a.out} exists; remove it first")
    shutil.copyfile(a.src, a.out)
    db = sqlite3.connect(a.out)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    lo, hi, span_ns = db.execute("SELECT MIN(idx), MAX(idx), SUM(dur_ns) FROM intervals").fetchone()
    if lo is None or not span_ns:
        sys.exit(f"long-recording: {a.src} has no intervals")
    span_iv = hi - lo + 1
    copies = max(1, math.ceil(a.seconds * 1e9 / span_ns))
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute(f"CREATE TEMP TABLE k AS WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < {copies - 1}) SELECT n FROM c")
    for table, iv, times in PER_INTERVAL:
        if table not in tables:
            continue
        cols = columns(db, table)
        sel = []
        for c in cols:
            if c == iv:
                sel.append(f"{c} + k.n * {span_iv}")
            elif c in times:
                # Zero is "not seen" in the packet records: it stays zero.
                sel.append(f"CASE WHEN {c} = 0 THEN 0 ELSE {c} + k.n * {span_ns} END")
            else:
                sel.append(c)
        if copies > 1:
            db.execute(f"INSERT INTO {table} ({','.join(cols)}) SELECT {','.join(sel)} FROM main.{table}, k ORDER BY k.n, {iv}")
    for table, counts in CUMULATIVE:
        if table not in tables:
            continue
        have = set(columns(db, table))
        sets = [f"{c} = {c} * {copies}" for c in counts if c in have]
        if "last_ns" in have:
            sets.append(f"last_ns = last_ns + {(copies - 1) * span_ns}")
        db.execute(f"UPDATE {table} SET {', '.join(sets)}")
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'end_ns'", ((copies - 1) * span_ns,))
    # SRC's per-minute and per-hour rollups describe SRC alone: dropped, so the first report
    # of OUT builds its own (as for a recording written before rollups).
    for t in sorted(t for t in tables if t.startswith("rollup_")):
        db.execute(f"DROP TABLE {t}")
    db.commit()
    n = db.execute("SELECT COUNT(*), SUM(dur_ns) FROM intervals").fetchone()
    samples = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    db.close()
    print(f"long-recording: {a.out}: {copies} copies of {a.src}, {n[0]} intervals, {n[1] / 1e9:.0f} s, "
          f"{samples} packet records, {os.path.getsize(a.out) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
