"""`ddioscope diff` on two testbed recordings, before and after a change this test makes: the
receiver's RX channels (ethtool -L, 4 → 2) and the sender's rate (iperf3 -b, 2 × 100M → 2 ×
300M). The diff must name the channel change, measure the rate delta that the receiver's own
interface statistics and iperf3's reports give, call it an effect, and set BEFORE's model's
predictions beside what AFTER shows. Two recordings of different devices, and a filter that
leaves nothing in common, are refused in one line."""
import json
import shutil
import sqlite3
import subprocess
import uuid

import jsonschema
import pytest

from conftest import BIN, ROOT, Testbed, run
from test_l3miss import flow_servers, pin_tx_queues


@pytest.fixture
def dde_testbed():
    tb = Testbed("dde" + uuid.uuid4().hex[:6])
    try:
        yield tb
    finally:
        tb.down()


def two_streams(tb, rate, secs=4):
    """Two streams pinned to RX queues 0 and 1 (XPS + CPU affinity); their iperf3 reports."""
    a = subprocess.Popen(["ip", "netns", "exec", tb.ns_snd, "taskset", "-c", "0", "iperf3", "-c", tb.ip_rcv,
                          "-p", "5201", "-t", str(secs), "-b", rate, "-J"], stdout=subprocess.PIPE, text=True)
    b = tb.ns(tb.ns_snd, "taskset", "-c", "1", "iperf3", "-c", tb.ip_rcv, "-p", "5202", "-t", str(secs), "-b", rate, "-J")
    out, _ = a.communicate(timeout=60)
    return json.loads(out), json.loads(b.stdout)


def recorded(tb, recorder, rate):
    """A recording of the two streams at `rate`, the receiver's rx_bytes over it (bracketed
    around the recorder), and iperf3's received rate summed over both streams (bit/s)."""
    s0 = tb.stats(tb.ns_rcv, tb.if_rcv)
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv)
    reports = two_streams(tb, rate)
    rc, _, err = rec.stop()
    assert rc == 0, err
    s1 = tb.stats(tb.ns_rcv, tb.if_rcv)
    iperf_bps = sum(r["end"]["sum_received"]["bits_per_second"] for r in reports)
    return rec.out, s1["rx_bytes"] - s0["rx_bytes"], iperf_bps


def entry(items, metric):
    return next(d for d in items if d["metric"] == metric)


def test_diff_names_the_change_and_measures_its_effect(dde_testbed, recorder, tmp_path):
    tb = dde_testbed
    flow_servers(tb)
    pin_tx_queues(tb)
    before, bytes_b, iperf_b = recorded(tb, recorder, "100M")
    # The change: fewer RX channels on the receiver (queues 0 and 1 stay), a faster sender.
    tb.ns(tb.ns_rcv, "ethtool", "-L", tb.if_rcv, "rx", "2")
    after, bytes_a, iperf_a = recorded(tb, recorder, "300M")

    d = json.loads(run(BIN, "diff", before, after, "--json").stdout)
    jsonschema.Draft202012Validator(json.loads((ROOT / "docs/diff.schema.json").read_text())).validate(d)
    config = {c["what"]: c for c in d["config"]}
    assert config["rx channels"]["changed"] and (config["rx channels"]["before"], config["rx channels"]["after"]) == ("4", "2"), config
    assert not config["kernel"]["changed"] and not config["driver"]["changed"]

    # The measured delta against the interface's own counters: the diff's pooled rate is the
    # recording's bytes over its duration, and the recording counted every packet the
    # interface received while it ran (nothing else is on the link).
    rx = entry(d["traffic"], "rx mbit_per_s")
    want_b = bytes_b * 8 / d["before"]["duration_s"] / 1e6
    want_a = bytes_a * 8 / d["after"]["duration_s"] / 1e6
    print(f"rx Mbit/s before {rx['before']:.1f} (interface {want_b:.1f}), after {rx['after']:.1f} "
          f"(interface {want_a:.1f}); delta {rx['delta']:.1f} ± {rx['ci95']:.1f}; "
          f"iperf3 {iperf_b / 1e6:.1f} → {iperf_a / 1e6:.1f}")
    # The recorder attaches after the bracket opens and detaches before it closes: only
    # packets outside the recording differ, and none flow then; 1 % covers the four-digit
    # rounding of the JSON.
    assert rx["before"] == pytest.approx(want_b, rel=0.01)
    assert rx["after"] == pytest.approx(want_a, rel=0.01)
    # Against iperf3: its rates are payload over its own 4 s; ours are frames (headers add
    # 66 B per 1448 B of payload, +4.6 %) over the recording, which also spans the idle time
    # around the streams. The delta is an effect, and its sign and size follow iperf3's within
    # its interval plus that framing and the idle share (≤ 40 % of a recording of a 4 s run).
    assert rx["effect"] and rx["basis"] == "steps", rx
    iperf_delta = (iperf_a - iperf_b) / 1e6
    assert rx["delta"] > 0 and iperf_delta > 0
    assert 0.6 * iperf_delta - rx["ci95"] <= rx["delta"] <= 1.1 * iperf_delta + rx["ci95"], (rx, iperf_delta)

    # Queue 0 carried one stream in both: its rate rose as the sender's did.
    q0 = next(q for q in d["queues"] if q["dir"] == "rx" and q["queue"] == 0)
    assert entry(q0["deltas"], "mbit_per_s")["delta"] > 0

    # Predicted beside measured: BEFORE's model given AFTER's inputs, with AFTER's value and
    # where it comes from (no DDIO counters on this host: AFTER's own model, said so).
    preds = [p for p in d["predictions"] if p["kind"] == "after_inputs"]
    assert preds, d["predictions"]
    for p in preds:
        print(f"{p['metric']}: BEFORE {p['predicted_before']} → predicted {p['predicted_after']}, "
              f"AFTER {p['after']} ({p['after_source']}), error {p['error']}, came true {p['came_true']}")
        assert p["predicted_after"] is not None and p["after"] is not None
        assert p["after_source"].startswith("modelled") or p["after_source"].startswith("measured")
        assert p["error"] == pytest.approx(p["after"] - p["predicted_after"], abs=0.01)
    assert d["counters_absent"]

    text = run(BIN, "diff", before, after).stdout
    assert "rx channels: 4 → 2" in text and "Predicted vs after" in text, text
    html = tmp_path / "diff.html"
    run(BIN, "diff", before, after, "--html", html)
    page = html.read_text()
    assert "<h2 id=\"predictions\">" in page and "rx channels" in page

    # Refusals, one line and exit 1: another device; a filter that leaves nothing.
    other = tmp_path / "other.ddio"
    shutil.copy(after, other)
    with sqlite3.connect(other) as c:
        iface = json.loads(c.execute("SELECT value FROM meta WHERE key='iface'").fetchone()[0])
        iface["name"] = "eth9"
        c.execute("UPDATE meta SET value=? WHERE key='iface'", (json.dumps(iface),))
    for args, says in (([before, other], "one device"), ([before, after, "--queue", "rx3"], "no packets")):
        p = run(BIN, "diff", *args, check=False)
        assert p.returncode == 1 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
