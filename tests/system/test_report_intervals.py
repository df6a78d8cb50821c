"""`report --intervals`, `-x ,`, `--every`, `--csv DIR` and the --queue/--dir/--flow filters on
the committed testbed recording: every row's counts sum back to the recording's own per-queue
totals (read from its tables by SQL here, not by ddioscope), the CSV is what Python's csv
module reads, and a bad filter or separator is refused in one line."""
import csv
import io
import json

from conftest import BIN, ROOT, queue_totals, run

REC = ROOT / "tests/fixtures/recordings/veth-tcp.ddio"


def rows(*args):
    return list(csv.DictReader(io.StringIO(run(BIN, "report", REC, "--intervals", "-x", ",", *args).stdout)))


def sums(rs):
    out = {}
    for r in rs:
        k = (r["dir"], int(r["queue"]))
        p, b = out.get(k, (0, 0))
        out[k] = (p + int(r["packets"]), b + int(r["bytes"]))
    return out


def test_interval_rows_sum_to_the_recordings_totals():
    truth = queue_totals(REC)
    per_interval = rows()
    assert sums(per_interval) == truth
    # One step per interval: a row for each queue the interval has a row for (idle intervals,
    # with none, print none).
    import sqlite3
    with sqlite3.connect(f"file:{REC}?mode=ro", uri=True) as db:
        busy = db.execute("select count(distinct interval) from queue_intervals").fetchone()[0]
    assert len({r["from_s"] for r in per_interval}) == busy
    stepped = rows("--every", "1s")
    assert sums(stepped) == truth
    assert {r["intervals"] for r in stepped} <= {"5"} | {str(n) for n in range(1, 5)}
    assert len({r["from_s"] for r in stepped}) == 3
    # Rates are the step's count over its length.
    for r in stepped:
        dur = float(r["to_s"]) - float(r["from_s"])
        assert float(r["packets_per_s"]) == __import__("pytest").approx(int(r["packets"]) / dur, rel=0.01)
    plain = run(BIN, "report", REC, "--intervals").stdout.splitlines()
    assert plain[0].split()[:5] == ["from_s", "to_s", "intervals", "dir", "queue"]
    assert len(plain) == len(per_interval) + 1


def test_filters_select_rows_and_say_what_they_left_out(tmp_path):
    truth = queue_totals(REC)
    only = rows("--queue", "rx0,rx2")
    assert set(sums(only)) == {("rx", 0), ("rx", 2)} and sums(only)[("rx", 0)] == truth[("rx", 0)]
    assert {r["dir"] for r in rows("--dir", "tx")} == {"tx"}
    rep = json.loads(run(BIN, "report", REC, "--json", "--flow", "tcp and dst port 5201", "--dir", "rx").stdout)
    assert rep["flows"] and all(f["dir"] == "rx" and f["dport"] == 5201 for f in rep["flows"])
    ex = rep["filter"]
    assert ex["filter"] == "--dir rx --flow 'tcp and dst port 5201'"
    # Every TX queue of the device, idle ones too (the report lists every queue).
    assert sorted(ex["queues"]) == ["tx 0", "tx 1", "tx 2", "tx 3"], ex
    assert ex["queue_packets"] == sum(p for (d, _), (p, _) in truth.items() if d == "tx")
    assert ex["flows"] > 0 and ex["notes"]
    text = run(BIN, "report", REC, "--queue", "rx2").stdout
    assert "filter --queue rx2: left out" in text
    for bad in (["--flow", "tcp and port"], ["--flow", "host not-an-address"], ["--queue", "rxq"],
                ["--dir", "up"], ["--intervals", "-x", ",,"]):
        p = run(BIN, "report", REC, *bad, check=False)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, (bad, p.stderr)


def test_csv_dir_writes_one_file_per_table(tmp_path):
    out = tmp_path / "tables"
    run(BIN, "report", REC, "--csv", out)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["intervals.csv", "sockets.csv", "queues.csv", "stages.csv", "flows.csv", "drops.csv",
                            "verdicts.csv", "recommendations.csv"])
    rep = json.loads(run(BIN, "report", REC, "--json").stdout)
    read = lambda n: list(csv.DictReader((out / n).open()))
    assert len(read("flows.csv")) == len(rep["flows"])
    assert sums(read("intervals.csv")) == queue_totals(REC)
    assert {(r["dir"], int(r["queue"])): int(r["packets"]) for r in read("queues.csv")} == \
        {(q["dir"], q["queue"]): q["packets"] for q in rep["queues"]}
    assert sum(int(r["count"]) for r in read("drops.csv")) == rep["drops"]["total"]
    # Files of ours already there: refused without --force, each left as it was.
    before = (out / "flows.csv").read_bytes()
    p = run(BIN, "report", REC, "--csv", out, check=False)
    assert p.returncode == 1 and "--force" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert (out / "flows.csv").read_bytes() == before
    run(BIN, "report", REC, "--csv", out, "--force")
    assert not [p for p in out.iterdir() if "tmp" in p.name]
