"""Bad input: one clear line naming the problem, a non-zero exit, nothing left attached."""
import datetime
import json
import os
import shutil
import signal
import sqlite3
import subprocess

import pytest

from conftest import BIN, ROOT, live_prog_ids, run, wait_until

FIXTURE = ROOT / "tests/fixtures/recordings/veth-tcp.ddio"


def expect_error(args, *needles, user=None, absent=()):
    before = live_prog_ids()
    cmd = [str(BIN), *map(str, args)]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    p = run(*cmd, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1, p
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    for n in absent:
        assert n not in lines[0] and n not in p.stdout, (n, lines[0])
    # A detached tracing program is freed after an RCU grace period: wait for it.
    wait_until(lambda: live_prog_ids() <= before, 10, "a failed command's BPF programs unloaded")
    return lines[0]


def test_record_bad_interface_and_namespace(testbed, tmp_path):
    out = tmp_path / "x.ddio"
    expect_error(["record", "-i", "nosuchif0", "-d", "1", "-o", out], "nosuchif0", "not found")
    expect_error(["record", "-i", testbed.if_rcv, "--netns", "no-such-ns", "-d", "1", "-o", out], "no-such-ns", "does not exist")
    # Right name, wrong namespace: ddrcv lives only inside the testbed.
    expect_error(["record", "-i", testbed.if_rcv, "-d", "1", "-o", out], testbed.if_rcv, "--netns")
    assert not out.exists()


def test_record_bad_output(testbed, tmp_path):
    base = ["record", "-i", testbed.if_rcv, "--netns", testbed.ns_rcv, "-d", "1"]
    expect_error(base + ["-o", tmp_path / "missing-dir" / "x.ddio"], "does not exist")
    existing = tmp_path / "exists.ddio"
    existing.write_text("keep me")
    expect_error(base + ["-o", existing], "already exists", "--force")
    assert existing.read_text() == "keep me"
    expect_error(base + ["-o", tmp_path], "is a directory")
    expect_error(base + ["--interval", "1", "-o", tmp_path / "y.ddio"], "--interval")


def test_record_names_the_namespace_it_looked_in(testbed, tmp_path):
    """With --netns given, a wrong name is not told to pass --netns: it hears where the name was
    looked for and what is there."""
    out = tmp_path / "x.ddio"
    line = expect_error(["record", "-i", testbed.if_snd, "--netns", testbed.ns_rcv, "-d", "1", "-o", out],
                        f"'{testbed.if_snd}' not found in network namespace '{testbed.ns_rcv}'", testbed.if_rcv,
                        absent=["pass --netns"])
    assert "lo" in line.split("which has", 1)[1], line
    assert not out.exists()


def test_record_needs_root(testbed, tmp_path):
    expect_error(["record", "-i", testbed.if_rcv, "--netns", testbed.ns_rcv, "-d", "1", "-o", "/tmp/ddioscope-nobody.ddio"],
                 "root", user=65534)


def test_report_rejects_non_recordings(tmp_path):
    garbage = tmp_path / "garbage.ddio"
    garbage.write_bytes(b"\x00not a database at all\n" * 200)
    expect_error(["report", garbage], "not a readable ddioscope recording")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE t(x)")
    expect_error(["report", other], "not a ddioscope recording")
    expect_error(["report", tmp_path / "absent.ddio"], "no such file")
    expect_error(["report", tmp_path], "directory")


def test_damaged_schema_is_one_line(tmp_path):
    """SQLite quotes the failing statement, which spans lines: the error is still one line."""
    rec = tmp_path / "damaged.ddio"
    shutil.copy(FIXTURE, rec)
    with sqlite3.connect(rec) as c:
        c.executescript("DROP TABLE IF EXISTS miss_intervals;"
                        "CREATE TABLE miss_intervals (interval INTEGER PRIMARY KEY, samples INTEGER NOT NULL,"
                        " on_packet_buffers INTEGER NOT NULL, other_addr INTEGER NOT NULL, no_addr INTEGER NOT NULL,"
                        " ctx_charged INTEGER NOT NULL, uncharged INTEGER NOT NULL);"
                        "DROP TABLE IF EXISTS buf_map_intervals;"
                        "CREATE TABLE buf_map_intervals (interval INTEGER PRIMARY KEY, linear_pages INTEGER);")
    expect_error(["report", rec], "damaged", "no such column")


@pytest.mark.parametrize("args", [
    ["report", FIXTURE], ["report", "--json", FIXTURE], ["recommend", FIXTURE], ["recommend", "--json", FIXTURE],
    ["simulate", FIXTURE], ["simulate", "--synthetic", "preset=skx6140,queues=1,ring=1024,pkt_bytes=1500"],
    ["doctor"], ["doctor", "--json"],
], ids=lambda a: " ".join(map(str, a)).replace(str(FIXTURE), "REC"))
def test_closed_stdout_exits_quietly(args):
    """`ddioscope report REC | head -1`: a reader that goes away ends the command quietly, exit 0."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        p = subprocess.run([str(BIN), *map(str, args)], stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert (p.returncode, p.stderr) == (0, b""), p


@pytest.fixture
def small_recording(testbed, recorder, tmp_path):
    testbed.iperf3_server()
    rec = recorder("-i", testbed.if_rcv, "--netns", testbed.ns_rcv)
    testbed.iperf3("-t", "1")
    rec._read_line(10)
    rc, _, err = rec.stop()
    assert rc == 0, err
    return rec.out


def test_report_truncated_recording(small_recording, tmp_path):
    """A file cut short (its pages lost) is refused in one line naming it; a recording cut off
    mid-run (its writer killed, every committed interval intact) is reported and says INCOMPLETE."""
    data = small_recording.read_bytes()
    for frac in (0.1, 0.5, 0.9):
        cut = tmp_path / f"cut{frac}.ddio"
        cut.write_bytes(data[: int(len(data) * frac) // 4096 * 4096 or 100])
        p = run(BIN, "report", cut, check=False)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, (frac, p.returncode, p.stderr)
        assert str(cut) in p.stderr and "not a readable ddioscope recording" in p.stderr, p.stderr
    intact = tmp_path / "intact.ddio"
    shutil.copy(small_recording, intact)
    p = run(BIN, "report", intact)
    assert "INCOMPLETE" not in p.stdout, p.stdout[:500]


def test_report_of_a_killed_recorder_says_incomplete(testbed, recorder):
    testbed.iperf3_server()
    rec = recorder("-i", testbed.if_rcv, "--netns", testbed.ns_rcv)
    testbed.iperf3("-t", "1")
    assert rec._read_line(10)["event"] == "interval"
    rec.stop(signal.SIGKILL)
    p = run(BIN, "report", rec.out)
    assert p.returncode == 0, p.stderr
    assert "INCOMPLETE" in p.stdout.splitlines()[0], p.stdout[:500]


# Each of these ran (for up to a minute) or was silently ignored, with exit 0.
SIMULATE = "preset=skx6140,queues=1,ring=1024,pkt_bytes=1500"


@pytest.mark.parametrize("flags,needles", [
    (["--queues", "100000"], ["--queues", "`queues` = 100000", "1..=4096"]),
    (["--pkt-bytes", "1000000"], ["--pkt-bytes", "`pkt_bytes` = 1000000", "1..=65535"]),
    (["--llc-mib", "NaN"], ["--llc-mib", "`llc_mib` = NaN", "0.25..=4096"]),
    (["--llc-mib", "1e12", "--llc-ways", "100000"], ["--llc-", "out of range"]),
    (["--llc-ways", "100000"], ["--llc-ways", "`ways` = 100000", "1..=32"]),
    (["--ring", "0"], ["--ring", "`ring` = 0", "1..=65536"]),
    (["--ring", ",".join(map(str, range(1, 1025)))], ["1024 runs", "at most 1000 M", "fewer --ring"]),
    (["--ring", ",".join(map(str, range(1, 4097))), "--ways", ",".join(map(str, range(1, 12)))], ["45056 points", "at most 4096"]),
    (["--ways", "12"], ["ddio_ways", "1..=11"]),
], ids=["queues", "pkt-bytes", "llc-mib-nan", "llc-huge", "llc-ways", "ring-0", "ring-grid-cost", "grid-points", "ways-over-llc"])
def test_simulate_flags_are_checked_as_the_spec_is(flags, needles):
    """simulate's flags go through the spec's own ranges, and a grid's total cost is bounded
    before anything runs (issue 45, defect 4)."""
    expect_error(["simulate", "--synthetic", SIMULATE, *flags], *needles)


def test_simulate_refuses_a_run_beyond_the_cost_bound():
    """An in-range spec whose other-core background alone would take half a minute."""
    expect_error(["simulate", "--synthetic", "bg_lines_per_sec=1e11,bg_working_set_mib=1048576"],
                 "one run", "at most 400 M", "bg_lines_per_sec")


def test_simulate_applies_geometry_flags_to_a_synthetic_spec():
    """--llc-mib/--llc-ways/--ddio-ways on a synthetic spec set its geometry (they were ignored)."""
    base = json.loads(run(BIN, "simulate", "--synthetic", SIMULATE, "--json").stdout)
    more = json.loads(run(BIN, "simulate", "--synthetic", SIMULATE, "--json", "--ddio-ways", "4").stdout)
    assert [p["ddio_ways"] for p in base] == [2] and [p["ddio_ways"] for p in more] == [4]
    assert more[0]["ddio_capacity_bytes"] == 2 * base[0]["ddio_capacity_bytes"]


@pytest.mark.parametrize("cmd", ["report", "recommend", "simulate"])
@pytest.mark.parametrize("flags,needle", [
    (["--llc-mib", "0"], "`llc_mib` = 0"),
    (["--ddio-ways", "99"], "`ddio_ways` = 99"),
    (["--llc-ways", "0"], "`ways` = 0"),
    (["--ddio-ways", "20"], "20 DDIO ways requested but the LLC has"),
], ids=["llc-mib-0", "ddio-ways-99", "llc-ways-0", "ddio-ways-above-llc"])
def test_bad_model_flags_are_refused_not_reported_around(cmd, flags, needle):
    """They printed a report saying the recording holds no evidence, with exit 0 (issue 41, item 5)."""
    expect_error([cmd, FIXTURE, *flags], needle, absent=["holds no evidence"])


def test_one_duration_syntax():
    """-d, --duration and --from/--to read durations the same way: `-d 10s` was refused."""
    # Parsed: the error is the interface's, not the duration's.
    for d in ["10s", "1h30m", "10", "250ms"]:
        expect_error(["record", "-i", "nosuchif0", "-d", d], "nosuchif0", absent=["--duration"])
    for cmd in (["record"], ["top"], ["serve"]):
        expect_error([*cmd, "-i", "nosuchif0", "--duration", "0"], "--duration", "more than 0")
        expect_error([*cmd, "-i", "nosuchif0", "--duration", "soon"], "--duration", "not a duration")
    whole = json.loads(run(BIN, "report", FIXTURE, "--json", "--from", "1s", "--to", "2000ms").stdout)
    assert whole["meta"]["intervals"] == 5, whole["meta"]


def start_unix_ms(rec):
    with sqlite3.connect(f"file:{rec}?mode=ro", uri=True) as c:
        meta = dict(c.execute("SELECT key, value FROM meta"))
    return int(meta["start_unix_ms"])


def test_a_wall_clock_window_is_echoed_as_wall_clock():
    """`--from 23:59` was echoed as seconds since the start ("between 72968.0 s and its end")."""
    env = {**os.environ, "TZ": "UTC"}
    start = datetime.datetime.fromtimestamp(start_unix_ms(FIXTURE) / 1e3, datetime.timezone.utc)
    later = (start + datetime.timedelta(minutes=2)).strftime("%H:%M")
    p = run(BIN, "report", FIXTURE, "--from", later, check=False, env=env)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"between {later}:00 and its end" in p.stderr and f"it ran from {start:%H:%M:%S}" in p.stderr, p.stderr
    # Off the recording's first day, the date is part of it.
    next_day = (start + datetime.timedelta(days=1)).strftime("%Y-%m-%d 00:30")
    p = run(BIN, "report", FIXTURE, "--from", next_day, check=False, env=env)
    assert p.returncode == 1 and f"between {next_day}:00 and its end" in p.stderr, p.stderr
    # Seconds from the start stay seconds.
    p = run(BIN, "report", FIXTURE, "--from", "60", check=False, env=env)
    assert p.returncode == 1 and "between 60.0 s from its start and its end (it covers 0 to 3.0 s)" in p.stderr, p.stderr


def test_html_dash_means_stdout(tmp_path):
    """`--html -` wrote a file named `-`."""
    p = run(BIN, "report", FIXTURE, "--html", "-", cwd=tmp_path)
    assert p.stdout.startswith("<!DOCTYPE html>") and p.stdout.rstrip().endswith("</html>"), p.stdout[:200]
    assert list(tmp_path.iterdir()) == []
    # A recording cannot stream: refused, nothing created.
    expect_error(["record", "-i", "lo", "-d", "1", "-o", "-"], "not a stream")
    assert not (ROOT / "-").exists()
