"""doctor against what the host itself shows: the frag page layout is "ok"
only where the kernel publishes its bases (/proc/kallsyms), and "assumed"
where doctor falls back to the x86-64 defaults it cannot check. `doctor -i`
on a veth pair and a TAP device against ethtool's own answers, /proc/interrupts
and the hooks a recording of the device reports; run without root, what root
would get."""
import json
import os
import platform
import shutil
import uuid

import pytest

from conftest import BIN, Testbed, live_prog_ids, report_json, run, wait_until
from tapdev import TapDevice


def kallsyms_bases():
    """The addresses /proc/kallsyms gives page_offset_base and vmemmap_base (0: hidden)."""
    found = {}
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] in ("page_offset_base", "vmemmap_base"):
                found[parts[2]] = int(parts[0], 16)
    return found


def test_frag_layout_status_matches_kallsyms():
    if platform.machine() != "x86_64":
        pytest.skip("frag pages are mapped on x86-64 only")
    d = json.loads(run(BIN, "doctor", "--json").stdout)
    c = next(c for c in d["checks"] if c["name"] == "frag page addresses")
    text = run(BIN, "doctor").stdout
    line = next(l for l in text.splitlines() if "frag page addresses" in l)
    bases = kallsyms_bases()
    if 0 in bases.values():
        assert (c["status"], c["ok"]) == ("missing", False) and "kptr_restrict" in c["detail"], c
    elif len(bases) == 2:
        assert (c["status"], c["ok"]) == ("ok", True), c
        assert line.startswith("  [ ok ] "), line
    else:
        assert (c["status"], c["ok"]) == ("assumed", False), c
        assert "defaults" in c["detail"] and "record time" in c["impact"], c
        assert line.startswith("  [ ?? ] ") and "assumed, not verified here" in line, line
    # Every other check is either present or missing; none says "(os error".
    assert all(x["status"] in ("ok", "missing", "assumed") for x in d["checks"]), d["checks"]
    assert "os error" not in text


DEVICE_ROWS = ["ring size readable", "ring size settable", "RSS indirection table", "IRQs",
               "per-queue counters", "page_pool statistics", "hooks for this device"]


@pytest.fixture
def pair():
    tb = Testbed("ddb" + uuid.uuid4().hex[:6])
    try:
        yield tb
    finally:
        tb.down()


def device_rows(*args, env=None):
    p = run(BIN, "doctor", "--json", *args, check=False, env=env)
    d = json.loads(p.stdout)
    return p, d, {c["name"]: c for c in d["device"]["checks"]}


def host_wide(text, when):
    """The hooks a recording's counts tier names as host-wide `when` ("all the time",
    "in the detail windows only")."""
    key = f"host-wide hooks {when}: "
    if key not in text:
        return set()
    return set(text.split(key, 1)[1].split(";", 1)[0].split(", "))


def test_doctor_checks_a_veth_device_as_ethtool_and_the_recorder_see_it(pair, tmp_path):
    tb = pair
    before = live_prog_ids()
    p, d, rows = device_rows("-i", tb.if_rcv, "--netns", tb.ns_rcv)
    assert p.returncode == 0, p.stderr
    assert set(DEVICE_ROWS) <= set(rows), rows.keys()
    # doctor detaches what it attached to learn the plan (the kernel frees a detached
    # tracing program after an RCU grace period, so this waits for it).
    wait_until(lambda: live_prog_ids() <= before, 10, "doctor's programs unloaded")

    # Rings and RSS: as ethtool itself answers on the device.
    g = tb.ns(tb.ns_rcv, "ethtool", "-g", tb.if_rcv, check=False)
    has_ring = g.returncode == 0 and "Current hardware settings" in g.stdout
    assert rows["ring size readable"]["ok"] == has_ring, (rows["ring size readable"], g.stdout, g.stderr)
    x = tb.ns(tb.ns_rcv, "ethtool", "-x", tb.if_rcv, check=False)
    assert rows["RSS indirection table"]["ok"] == (x.returncode == 0), (rows["RSS indirection table"], x.stderr)
    if x.returncode != 0:
        assert "not supported" in rows["RSS indirection table"]["detail"]
        assert "ethtool -X" in rows["RSS indirection table"]["impact"]
    # IRQs: /proc/interrupts names none for a veth.
    irqs = [l for l in open("/proc/interrupts") if tb.if_rcv in l.split()[-1:]]
    assert rows["IRQs"]["ok"] == bool(irqs) and (irqs or "virtual device" in rows["IRQs"]["impact"])
    # Per-queue counters: veth keeps its RX ones in ethtool -S.
    s = tb.ns(tb.ns_rcv, "ethtool", "-S", tb.if_rcv).stdout
    assert ("rx_queue_0_" in s) == rows["per-queue counters"]["detail"].startswith("RX"), rows
    # Every row missing something says what is lost.
    for name in DEVICE_ROWS:
        r = rows[name]
        assert r["status"] in ("ok", "missing"), r
        assert r["ok"] or r["impact"], r

    # The hooks: the plan a recording of the same device keeps (the same decision code,
    # read back from the recording).
    hooks = d["device"]["hooks"]
    assert hooks and {h["scope"] for h in hooks} <= {"device", "host"}
    rec = tmp_path / "r.ddio"
    run(BIN, "record", "-i", tb.if_rcv, "--netns", tb.ns_rcv, "-d", "1s", "-o", rec)
    counts = report_json(rec)["tiers"]["counts"]["text"]
    for when, word in (("always", "all the time"), ("windows", "in the detail windows only")):
        planned = {h["hook"] for h in hooks if h["scope"] == "host" and h["when"] == when}
        assert planned == host_wide(counts, word), (when, planned, counts)
    text = run(BIN, "doctor", "-i", tb.if_rcv, "--netns", tb.ns_rcv).stdout
    assert f"device {tb.if_rcv} in namespace {tb.ns_rcv}:" in text
    assert "host-wide" in text and "os error" not in text


def test_doctor_checks_a_tap_device():
    t = TapDevice(4)
    try:
        p, d, rows = device_rows("-i", t.name, "--netns", t.ns)
        assert p.returncode == 0, p.stderr
        dev = next(c for c in d["device"]["checks"] if c["name"] == "device")
        assert "tun" in dev["detail"] and "4 RX and 4 TX queues" in dev["detail"], dev
        assert set(DEVICE_ROWS) <= set(rows)
        assert rows["hooks for this device"]["ok"] and d["device"]["hooks"], rows["hooks for this device"]
    finally:
        t.down()


def test_doctor_refuses_an_unknown_device_or_namespace_in_one_line(pair):
    tb = pair
    for args, words in ((["-i", "ddbnosuch0", "--netns", tb.ns_rcv], ["ddbnosuch0", tb.ns_rcv]),
                        (["-i", tb.if_rcv, "--netns", "ddb-no-such-ns"], ["ddb-no-such-ns", "does not exist"]),
                        (["-i", "ddbnosuch0"], ["ddbnosuch0"])):
        p = run(BIN, "doctor", *args, check=False)
        assert p.returncode == 1 and p.stdout == "", (args, p.stdout)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and all(w in lines[0] for w in words), (args, p.stderr)


def as_nobody(*args):
    return run("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", *args, check=False)


def test_doctor_without_root_says_what_root_would_get(pair):
    if not shutil.which("setpriv"):
        pytest.skip("setpriv is not installed")
    tb = pair
    p = as_nobody(BIN, "doctor", "--json", "-i", tb.if_rcv, "--netns", tb.ns_rcv)
    assert p.returncode == 1, p.stderr  # cannot record without root
    d = json.loads(p.stdout)
    assert d["fatal"].startswith("not running as root")
    # No BPF program loads without root: the rows say what root would find, never that
    # something is missing or that the hooks fall back.
    for c in d["checks"]:
        hook = c["name"].startswith("hook ") and c["name"] != "hook scope"
        if c["name"].endswith("programs") or hook or c["name"] == "ring buffer":
            assert c["status"] == "unchecked" and c["detail"].startswith("needs root: as root"), c
    rows = {c["name"]: c for c in d["device"]["checks"]}
    for name in DEVICE_ROWS:
        assert rows[name]["status"] == "unchecked" and "as root" in rows[name]["detail"], rows[name]
    text = as_nobody(BIN, "doctor", "-i", tb.if_rcv, "--netns", tb.ns_rcv).stdout
    assert "[MISS] tp_btf" not in text and "[ -- ] tp_btf programs" in text, text
    # An unknown namespace is refused without root too.
    p = as_nobody(BIN, "doctor", "-i", tb.if_rcv, "--netns", "ddb-no-such-ns")
    assert p.returncode == 1 and "does not exist" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_doctor_text_fits_columns(pair):
    tb = pair
    for cols in (80, 100):
        p = run(BIN, "doctor", "-i", tb.if_rcv, "--netns", tb.ns_rcv, env={**os.environ, "COLUMNS": str(cols)})
        long = [l for l in p.stdout.splitlines() if len(l) > cols]
        assert p.returncode == 0 and not long, long
