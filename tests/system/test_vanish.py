"""A device or namespace that goes away mid-run: `record` stops within an interval or two
with one line, leaving a readable recording marked as stopped by the removal; `serve`
reports the device down (ddioscope_device_up 0) and takes it up again when it returns."""
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import BIN, report_json, run, wait_until


def connect(path):
    """Read-only: a plain connect would create an empty file at a path the recorder has
    not renamed its recording to yet, and the recorder (rightly) never replaces it."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def meta(path, key):
    row = connect(path).execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def intervals(path):
    try:
        return connect(path).execute("SELECT COUNT(*) FROM intervals").fetchone()[0]
    except sqlite3.Error:
        return 0


# How the device goes: the line record prints, and why the recording says it stopped.
GOES = {
    "interface": ("was removed", "device_removed"),
    "namespace": ("was deleted", "netns_deleted"),
    "moved": ("was moved to another network namespace", "device_moved"),
}


@pytest.mark.parametrize("what", list(GOES))
def test_record_stops_when_the_device_goes(testbed, recorder, what):
    """Deleting the interface, deleting its namespace and moving the interface to another
    namespace are told apart (all three were stored as device_removed)."""
    tb = testbed
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "-d", "30")
    # Readiness: a few intervals written before the device goes.
    wait_until(lambda: intervals(rec.out) >= 5, timeout=20, what="intervals in the recording")
    if what == "interface":
        run("ip", "-n", tb.ns_rcv, "link", "del", tb.if_rcv)
    elif what == "moved":
        # Into the testbed's other namespace, which it removes with everything in it.
        run("ip", "-n", tb.ns_rcv, "link", "set", tb.if_rcv, "netns", tb.ns_snd)
    else:
        run("ip", "netns", "delete", tb.ns_rcv)
    # The recorder stamps its intervals on CLOCK_MONOTONIC, as time.monotonic_ns() reads it.
    gone_ns = time.monotonic_ns()
    out, err = rec.proc.communicate(timeout=20)
    assert rec.proc.returncode == 1, (rec.proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "recording stopped" in lines[0], err
    said, stopped_by = GOES[what]
    assert said in lines[0], err
    # Noticed within an interval or two: the interval under way when the device went (its
    # check may have come just before), then the one that notices and ends the recording.
    # Counted on the recording's own stamps, not timed: a slow host writes fewer intervals.
    after = connect(rec.out).execute("SELECT COUNT(*) FROM intervals WHERE t_ns > ?", (gone_ns,)).fetchone()[0]
    assert after <= 2, after
    assert meta(rec.out, "stopped_by") in (f'"{stopped_by}"', stopped_by)
    assert meta(rec.out, "complete") == "true"
    r = report_json(rec.out)
    assert r["meta"]["stopped_by"] == stopped_by
    assert r["meta"]["duration_s"] < 25, r["meta"]


def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def device_up(port):
    for line in scrape(port).splitlines():
        if line.startswith("ddioscope_device_up{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def healthz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_serve_says_the_device_is_down_and_takes_it_up_again(testbed):
    tb = testbed
    port = 19561
    p = subprocess.Popen([str(BIN), "serve", "-i", tb.if_rcv, "--netns", tb.ns_rcv, "--listen", f"127.0.0.1:{port}",
                          "--interval", "200"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def ready():
            try:
                return device_up(port) == 1.0
            except OSError:
                assert p.poll() is None, p.stderr.read()
                return False
        wait_until(ready, timeout=30, what="serve to answer with the device up")
        run("ip", "-n", tb.ns_rcv, "link", "del", tb.if_rcv)
        wait_until(lambda: device_up(port) == 0.0, timeout=10, what="ddioscope_device_up 0")
        assert p.poll() is None, "serve must keep serving while the device is gone"
        # Nothing is counted while it is gone: not healthy, with the reason in one line.
        status, body = healthz(port)
        assert status == 503 and body == f"device {tb.if_rcv} is gone: waiting for it to return\n", (status, body)
        # The same pair again, by the testbed's names, in its namespaces.
        run("ip", "-n", tb.ns_snd, "link", "add", tb.if_snd, "numtxqueues", "4", "numrxqueues", "4", "type", "veth",
            "peer", "name", tb.if_rcv, "netns", tb.ns_rcv, "numtxqueues", "4", "numrxqueues", "4")
        run("ip", "-n", tb.ns_rcv, "link", "set", tb.if_rcv, "up")
        wait_until(lambda: device_up(port) == 1.0, timeout=15, what="ddioscope_device_up 1 again")
        assert p.poll() is None
        assert healthz(port) == (200, "ok\n")
    finally:
        p.terminate()
        out, err = p.communicate(timeout=30)
    assert "was removed" in err and "is back" in err, err
