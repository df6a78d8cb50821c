"""The L3-miss sample program, live: a software perf event stands in for PEBS
(cpu-clock for the CPU-context path, page faults for the address path), on
testbed traffic with two flows of very different rates pinned to different
queues. Truth: the rates the sender was told to send, and the queues XPS pinned."""
import subprocess

import pytest

from conftest import BIN, live_prog_ids, report_json, run, wait_until


def pin_tx_queues(tb):
    """XPS on our own sender veth: CPU0 sends on tx-0, CPU1 on tx-1."""
    for q, mask in ((0, "1"), (1, "2"), (2, "0"), (3, "0")):
        tb.ns(tb.ns_snd, "sh", "-c", f"echo {mask} > /sys/class/net/{tb.if_snd}/queues/tx-{q}/xps_cpus")


def two_flows(tb):
    heavy = subprocess.Popen(["ip", "netns", "exec", tb.ns_snd, "taskset", "-c", "0", "iperf3", "-c", tb.ip_rcv,
                              "-p", "5201", "-t", "3", "-b", "3G", "-J"], stdout=subprocess.PIPE, text=True)
    light = tb.ns(tb.ns_snd, "taskset", "-c", "1", "iperf3", "-c", tb.ip_rcv, "-p", "5202", "-t", "3", "-b", "150M", "-J")
    heavy.communicate(timeout=60)
    return light


def test_cpu_context_attribution_follows_rates(testbed, recorder):
    tb = testbed
    tb.iperf3_server(5201)
    tb.iperf3_server(5202)
    pin_tx_queues(tb)
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--miss-sampling", "software-clock", "--miss-period", "50000")
    two_flows(tb)
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)
    m = r["l3miss"]
    assert "cpu-clock" in m["source"]
    assert m["samples"] > 1000
    assert m["samples"] == m["on_packet_buffers"] + m["other_addr"] + m["no_addr"]
    assert m["ctx_charged"] + m["uncharged"] == m["samples"] - m["on_packet_buffers"]

    # The pinned queues carried the two flows (driver truth: the traffic report).
    rx = {q["queue"]: q["packets"] for q in r["queues"] if q["dir"] == "rx"}
    assert rx.get(0, 0) > 5 * rx.get(1, 0) > 0, rx
    charged = {q["queue"]: q["cpu_ctx"] for q in m["queues"] if q["dir"] == "rx"}
    assert charged.get(0, 0) > charged.get(1, 0) > 0, charged

    flows = {}
    for f in m["flows"]:
        if f["dir"] == "rx":
            flows[f["dport"]] = flows.get(f["dport"], 0) + f["cpu_ctx"]
    assert flows.get(5201, 0) > 2 * flows.get(5202, 0) > 0, flows
    # Bounded: the flow and region maps never exceed their sizes.
    assert len(m["flows"]) <= 4096 and len(m["regions"]) <= 32

    # The report's attribution: no addresses here, so CPU context is the
    # strongest method; it says so, and that the event is a stand-in.
    a = r["attribution"]
    assert a["method"] == "cpu_context" and a["confidence"] != "insufficient", a
    assert any("stand-in" in n for n in a["notes"])
    share = {q["queue"]: q["share_pct"] for q in a["queues"] if q["dir"] == "rx"}
    assert share.get(0, 0) > share.get(1, 0) > 0, share
    heavy = [f for f in a["flows"] if f["dport"] == 5201]
    light = [f for f in a["flows"] if f["dport"] == 5202]
    assert sum(f["share_pct"] for f in heavy) > sum(f["share_pct"] for f in light)


def test_address_path_loads_and_sees_addresses(testbed, recorder):
    tb = testbed
    tb.iperf3_server()
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--miss-sampling", "software-faults", "--miss-period", "1")
    ids = set(rec.prog_ids)
    tb.iperf3("-t", "1")
    # Page faults carry (user) data addresses: none is a packet buffer.
    run("sh", "-c", "head -c 20000000 /dev/zero | cat > /dev/null")
    rc, _, err = rec.stop()
    assert rc == 0, err
    m = report_json(rec.out)["l3miss"]
    assert "page-faults" in m["source"]
    assert m["other_addr"] > 0 and m["regions"], m
    assert m["on_packet_buffers"] == 0
    wait_until(lambda: not (ids & live_prog_ids()), what="programs to be unloaded")


def test_pebs_request_fails_loudly_without_pmu(testbed, tmp_path):
    p = run(BIN, "record", "-i", testbed.if_rcv, "--netns", testbed.ns_rcv, "-d", "1", "-o", tmp_path / "x.ddio",
            "--miss-sampling", "pebs", check=False)
    if "cpu" in run("ls", "/sys/bus/event_source/devices").stdout.split():
        pytest.skip("this host has a core PMU")
    assert p.returncode == 1
    assert len(p.stderr.strip().splitlines()) == 1 and "pebs" in p.stderr, p.stderr
