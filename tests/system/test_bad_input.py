"""Bad input: one clear line naming the problem, a non-zero exit, nothing left attached."""
import os
import shutil
import signal
import sqlite3
import subprocess

import pytest

from conftest import BIN, ROOT, live_prog_ids, run

FIXTURE = ROOT / "tests/fixtures/recordings/veth-tcp.ddio"


def expect_error(args, *needles, user=None):
    before = live_prog_ids()
    cmd = [str(BIN), *map(str, args)]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    p = run(*cmd, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0, p
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert live_prog_ids() <= before, "a failed command left BPF programs loaded"
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
