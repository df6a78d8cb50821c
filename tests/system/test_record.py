"""ddioscope record/report on a live testbed, checked against independent truth:
the kernel's interface statistics, veth's own per-queue driver counters, and
iperf3's report."""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time

import pytest

from conftest import BIN, WAIT_PORT, Bpftrace, kernel_loads, live_link_prog_ids, live_prog_ids, report_json, run, wait_until


def within(a, b, rel, slack=0):
    return abs(a - b) <= max(rel * max(a, b), slack)


def wait_quiet(tb):
    """Until the receiver has taken no packet for 100 ms: what the senders' sockets still
    held when iperf3 returned has arrived, so the recording holds all of iperf3's bytes."""
    last = [None]

    def quiet():
        n = tb.stats(tb.ns_rcv, tb.if_rcv)["rx_packets"]
        same, last[0] = n == last[0], n
        if not same:
            time.sleep(0.1)
        return same

    wait_until(quiet, what="the link to go quiet")


def test_tcp_counts_queues_flows_and_stages(testbed, recorder, tmp_path):
    tb = testbed
    tb.iperf3_server()
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--interval", "100")
    k0, q0 = tb.stats(tb.ns_rcv, tb.if_rcv), tb.rx_queue_packets()
    ip = tb.iperf3("-P", "4", "-t", "3")
    wait_quiet(tb)
    k1, q1 = tb.stats(tb.ns_rcv, tb.if_rcv), tb.rx_queue_packets()
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)

    # Totals against the kernel's interface statistics (1%).
    rx = [q for q in r["queues"] if q["dir"] == "rx"]
    tx = [q for q in r["queues"] if q["dir"] == "tx"]
    rx_pk, rx_by = sum(q["packets"] for q in rx), sum(q["bytes"] for q in rx)
    assert rx_pk > 10000
    assert within(rx_pk, k1["rx_packets"] - k0["rx_packets"], 0.01), (rx_pk, k1["rx_packets"] - k0["rx_packets"])
    assert within(rx_by, k1["rx_bytes"] - k0["rx_bytes"], 0.01), (rx_by, k1["rx_bytes"] - k0["rx_bytes"])
    tx_pk = sum(q["packets"] for q in tx)
    assert within(tx_pk, k1["tx_packets"] - k0["tx_packets"], 0.01, slack=5)

    # veth counts its queues (ethtool -S) on the NAPI path the testbed's GRO turns on, and
    # its TX queue N is its peer's RX queue N: the counts come from there with no counting
    # program; NAPI polls and flows are sampled in the windows.
    assert r["meta"]["rx_counts"] == "ethtool" and r["meta"]["tx_counts"] == "veth_peer", r["meta"]
    assert r["meta"]["napi_counts"] == "windows" and r["meta"]["flow_windows"] >= 1, r["meta"]

    # Per queue against the driver's own per-queue counters: every queue's
    # count and share, and the shares sum to the whole.
    per_q = {q["queue"]: q["packets"] for q in rx}
    truth = {i: q1[i] - q0.get(i, 0) for i in q1}
    truth_total = sum(truth.values())
    for i, n in truth.items():
        got = per_q.get(i, 0)
        assert within(got, n, 0.01, slack=10), f"queue {i}: ddioscope {got} driver {n}"
        assert abs(got / rx_pk - n / truth_total) < 0.01
    assert set(per_q) <= set(truth)

    # Flows: exactly iperf3's data streams, with iperf3's byte counts. They end in local
    # sockets, whose own counters the recorder reads: exact, where the claim at default
    # sampling is 5 %. The truth lies between iperf3's two counts: its receiver's stops at the
    # deadline with data still arriving, and its sender's includes what was still in the
    # socket when the receiver closed (with a reset) at the end, which never arrived. Above
    # both by iperf3's 37-byte cookie and the FIN.
    streams = {(c["local_host"], c["local_port"], c["remote_host"], c["remote_port"]) for c in ip["start"]["connected"]}
    # iperf3's sender count: what it wrote to the socket, the most that crossed the link (a
    # few MB short of it when the sender's CPU is busy). Its receiver count stops at the test
    # deadline with data still in flight, so it runs a few % short.
    by_port = {s["sender"]["socket"]: s["sender"]["bytes"] for s in ip["end"]["streams"]}
    received = {s["sender"]["socket"]: s["receiver"]["bytes"] for s in ip["end"]["streams"]}
    port_of_socket = {c["socket"]: c["local_port"] for c in ip["start"]["connected"]}
    data_flows = [f for f in r["flows"] if f["dir"] == "rx" and f["payload_bytes"] > 1_000_000]
    found = {(f["src"], f["sport"], f["dst"], f["dport"]) for f in data_flows}
    assert found == streams, (found, streams)
    assert all(f["proto"] == "tcp" for f in data_flows)
    for sock, nbytes in by_port.items():
        flow = next(f for f in data_flows if f["sport"] == port_of_socket[sock])
        assert flow["source"] == "socket" and flow["bytes_error"] is None, flow
        assert received[sock] <= flow["payload_bytes"] <= nbytes + 100, (flow, received[sock], nbytes)
        assert within(flow["payload_bytes"], nbytes, 0.05), (flow, nbytes)
        assert flow["rx_queue"] in per_q

    # Stage histograms: present on every queue the driver says carried traffic (at least
    # 1000 packets: four streams over four queues leave at least one such queue), and ordered.
    # The copy is timed only for a life copied while its window's hooks are still on: a
    # queue's few dozen timed lives can all sit behind a reader that lags past the drain, so
    # the copy stage is asked of the busy queues together.
    busy = [i for i, n in truth.items() if n >= 1000]
    assert busy, truth
    by_queue = {q["queue"]: q for q in rx}
    for i in busy:
        q = by_queue[i]
        for stage in ("driver_to_stack", "driver_to_free"):
            assert q["stages"].get(stage, {}).get("count", 0) > 0, (q["queue"], stage, q, r["meta"])
        assert q["napi"]["polls"] > 0
    copied = sum(by_queue[i]["stages"].get("stack_to_copy", {}).get("count", 0) for i in busy)
    assert copied > 0, ([by_queue[i] for i in busy], r["meta"])
    # Every RX life begun is accounted for: its free seen, or its end unseen (its state taken
    # by a later packet first, or still held when its window's drain ended; the sweep at a
    # window's end races only with programs still finishing). How many end unseen depends on
    # the reader: while it lags, TCP coalesces a segment into the one before it in the socket's
    # queue (or its backlog) and frees it where no tracepoint sees, up to four lives in five
    # with two CPU hogs beside the test.
    # A timed frame that GRO merges into another skb and frees begins no life of its own: a
    # life begins for an skb that goes up the stack or for a frame that rides on one's frag
    # list, about 2.5 lives begun per timed skb up the stack here, hogs or not. Were a life
    # begun for every frame, a TCP GRO skb here carries tens of them (lives begun came to
    # thirteen times those that ended).
    with sqlite3.connect(rec.out) as c:
        begun, ended, unended = c.execute(
            "SELECT SUM(handups), SUM(frees), SUM(unended) FROM queue_intervals WHERE dir = 'rx'").fetchone()
    assert within(ended + unended, begun, 0.01, slack=5), (begun, ended, unended)
    entered = sum(q["stages"].get("driver_to_stack", {}).get("count", 0) for q in rx)
    assert begun <= 6 * entered, (begun, entered)
    duration_ns = r["meta"]["duration_s"] * 1e9
    for q in r["queues"]:
        for name, s in q["stages"].items():
            assert s["p50_ns"] <= s["p99_ns"] <= s["max_ns"], (q["dir"], q["queue"], name, s)
            # A stage is measured on at most every packet of its queue, and
            # lasts no longer than the recording.
            assert s["count"] <= q["packets"], (q["dir"], q["queue"], name, s, q["packets"])
            assert s["max_ns"] < duration_ns, (q["dir"], q["queue"], name, s)
        assert q["drops"] <= q["packets"], q

    assert r["meta"]["iface"] == tb.if_rcv and r["meta"]["netns"] == tb.ns_rcv
    assert r["meta"]["rx_queues"] == 4 and r["meta"]["tx_queues"] == 4
    assert "napi_gro_receive_entry" in " ".join(r["meta"]["hooks"])
    # Where this kernel loads tp_btf programs (asked by loading one), the fallback to raw_tp
    # must not have been taken (it would hide a verifier regression behind slower hooks);
    # where it does not, every hook is the fallback.
    want = "tp_btf:" if kernel_loads("tp_btf/netif_receive_skb", tmp_path) else "raw_tp:"
    assert all(h.startswith(want) for h in r["meta"]["hooks"]), (want, r["meta"]["hooks"])
    assert r["events"]["lost"] == 0
    assert r["events"]["sampled"] == r["events"]["received"] > 0


def test_udp_small_packets_and_ipv6(testbed, recorder):
    """A steady flow of small UDP packets is estimated within its own bound, and the bound
    says something; IPv6 TCP streams are found, in a recording of their own. Not one after the
    other in one recording: the streams share the UDP flow's queue at ten times its rate, and
    where the switch falls between two windows the UDP flow's bound rightly takes in the
    stretch where either could have been, at that rate (a fifth of runs here, up to the
    flow's own size)."""
    tb = testbed
    tb.iperf3_server()
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--sample", "16")
    udp = tb.iperf3("-u", "-l", "64", "-b", "40M", "-t", "10")
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)
    rec6 = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--sample", "16")
    # Long enough to span two of the one-second cycles the flows are sampled in (a shorter
    # flow can fall between two windows).
    v6 = tb.iperf3("-P", "2", "-t", "2", dst=tb.ip6_rcv)
    rc, _, err = rec6.stop()
    assert rc == 0, err
    r6 = report_json(rec6.out)

    sent = udp["end"]["sum"]
    udp_flows = [f for f in r["flows"] if f["proto"] == "udp" and f["dir"] == "rx"]
    assert len(udp_flows) == 1, udp_flows
    f = udp_flows[0]
    assert (f["src"], f["dst"], f["dport"]) == (tb.ip_snd, tb.ip_rcv, 5201)
    # Small packets are sampled in proportion to their size: the estimate holds to its own 95 % bound, taken twice (4 standard deviations, so a
    # correct estimator fails 1 run in 16,000), plus 1 % for packets in flight at the ends.
    # The bound must itself be tight enough to say something (within a quarter).
    assert f["samples"] > 100, f
    rel = 2 * f["bytes_error"] / f["bytes"] + 0.01
    assert rel < 0.5, f
    assert within(f["packets"], sent["packets"], rel), (f, sent, rel)
    assert within(f["payload_bytes"], sent["bytes"], rel), (f, sent, rel)

    v6_streams = {(c["local_host"], c["local_port"]) for c in v6["start"]["connected"]}
    v6_flows = {(f["src"], f["sport"]) for f in r6["flows"]
                if f["dir"] == "rx" and ":" in f["src"] and f["payload_bytes"] > 100_000}
    assert v6_flows == v6_streams

    for x in (r, r6):
        assert x["events"]["sampled"] > 0 and x["events"]["lost"] == 0


@pytest.mark.parametrize("flows", ["windows", "always"])
def test_udp_flow_estimates_hold_to_their_bounds(testbed, recorder, flows):
    """Where the driver counts the queues, flows are sampled by default in the detail windows
    alone and scaled by its counts, so no program runs per packet outside them; with
    --flows always a program samples every skb's flow all the time. Either way a steady UDP
    flow of 64 B packets, ten seconds long, holds to its own bound, and that bound says
    something. Ten seconds: the run budget spaces the windows on this load to about one every
    two seconds, and the bound wants a few of them."""
    tb = testbed
    tb.iperf3_server()
    extra = [] if flows == "windows" else ["--flows", "always"]
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, *extra)
    k0 = tb.stats(tb.ns_rcv, tb.if_rcv)
    udp = tb.iperf3("-u", "-l", "64", "-b", "40M", "-t", "10")
    wait_quiet(tb)
    k1 = tb.stats(tb.ns_rcv, tb.if_rcv)
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)
    if flows == "windows":
        assert r["meta"]["flow_windows"] >= 3, r["meta"]
    else:
        assert r["meta"]["flow_windows"] is None, r["meta"]
    # Truth: what the receiving interface took in (the kernel's own count; besides the flow,
    # only iperf3's control connection, a few dozen packets), which is all the recorder can
    # see. The sender's count also holds what a veth drops when its peer's queue is full.
    received = k1["rx_packets"] - k0["rx_packets"]
    sent = udp["end"]["sum"]
    f = next(f for f in r["flows"] if f["proto"] == "udp" and f["dir"] == "rx")
    rel = 2 * f["bytes_error"] / f["bytes"] + 0.01
    assert rel < 0.5, f
    assert within(f["packets"], received, rel), (f, received, sent, rel)


def test_every_flow_of_many_is_counted_whole_when_every_skb_is_sampled(testbed, recorder):
    """With every skb sampled (--flow-sample 1) all the time, a flow's counts are exact. Far
    more flows than a CPU's flow cache has slots keep taking slots from one another, moving
    their sums into the flow table each time: each of 64 UDP streams still comes out at what
    iperf3 sent on it, and the RX flows add up to what the interface took in."""
    tb = testbed
    tb.iperf3_server()
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--flows", "always", "--flow-sample", "1")
    k0 = tb.stats(tb.ns_rcv, tb.if_rcv)
    udp = tb.iperf3("-u", "-P", "64", "-l", "200", "-b", "500K", "-t", "3")
    wait_quiet(tb)
    k1 = tb.stats(tb.ns_rcv, tb.if_rcv)
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)
    rx = [f for f in r["flows"] if f["dir"] == "rx"]
    streams = {c["local_port"]: c["socket"] for c in udp["start"]["connected"]}
    sent = {s["udp"]["socket"]: s["udp"]["packets"] for s in udp["end"]["streams"]}
    assert len(streams) == 64 and min(sent.values()) > 100, sent
    by_port = {f["sport"]: f for f in rx if f["proto"] == "udp"}
    assert set(by_port) == set(streams), (sorted(by_port), sorted(streams))
    for port, sock in streams.items():
        f = by_port[port]
        # Exact: every skb sampled, no estimate. iperf3 counts its test datagrams; the flow
        # also holds the 4-byte datagram that opened the stream (a stream can lose a
        # datagram on its way, never gain one).
        assert sent[sock] * 0.99 <= f["packets"] <= sent[sock] + 1, (port, f, sent[sock])
        assert f["bytes_error"] == 0, f
    received = k1["rx_packets"] - k0["rx_packets"]
    # Besides the streams, only iperf3's control connection and the odd neighbour packet.
    assert within(sum(f["packets"] for f in rx), received, 0.001, slack=20), (sum(f["packets"] for f in rx), received)


def test_driver_queue_counters_that_miss_a_path_are_not_trusted(testbed, recorder):
    """veth counts its queues on its NAPI path only: with GRO off on the receiver, frames
    arrive another way and its rx_queue_N_xdp_packets stand still. What the counters add up
    to is checked against the interface's own total, so the recorder takes RX from the
    interface's totals instead, split across queues by its program in the detail windows (and
    says why in the recording's notes), and its totals still match the kernel's."""
    tb = testbed
    tb.ns(tb.ns_rcv, "ethtool", "-K", tb.if_rcv, "gro", "off")
    tb.iperf3_server()
    # Traffic the driver's per-queue counters miss, before the recording starts.
    tb.iperf3("-u", "-l", "64", "-b", "20M", "-t", "1")
    assert sum(tb.rx_queue_packets().values()) < 100
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--interval", "100")
    k0 = tb.stats(tb.ns_rcv, tb.if_rcv)
    tb.iperf3("-P", "2", "-t", "2")
    k1 = tb.stats(tb.ns_rcv, tb.if_rcv)
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)
    # RX from the interface, split by the windows; TX still from the peer's counters (its GRO
    # is on).
    assert r["meta"]["rx_counts"] == "link_split" and r["meta"]["tx_counts"] == "veth_peer", r["meta"]
    rx_pk = sum(q["packets"] for q in r["queues"] if q["dir"] == "rx")
    truth = k1["rx_packets"] - k0["rx_packets"]
    assert rx_pk > 10000 and within(rx_pk, truth, 0.01), (rx_pk, truth)


def test_nothing_stays_attached_after_sigint_or_sigkill(testbed, recorder):
    tb = testbed
    tb.iperf3_server()
    for sig in (signal.SIGINT, signal.SIGKILL):
        rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv)
        ids = set(rec.prog_ids)
        assert ids and ids <= live_prog_ids()
        tb.iperf3("-t", "1")
        # At least one interval must be committed before the kill.
        line = rec._read_line(10)
        assert line["event"] == "interval"
        rc, _, err = rec.stop(sig)
        if sig == signal.SIGINT:
            assert rc == 0, err
        # The kernel frees programs once the last fd closes; links go with them.
        wait_until(lambda: not (ids & live_prog_ids()), what="programs to be unloaded")
        assert not (ids & live_link_prog_ids())
        r = report_json(rec.out)
        assert r["meta"]["complete"] == (sig == signal.SIGINT)
        assert r["meta"]["intervals"] >= 1
        assert sum(q["packets"] for q in r["queues"] if q["dir"] == "rx") > 0


def test_software_counters_and_import(testbed, recorder, tmp_path):
    """The live counter loop with software events writes sane, scaled values on
    the recording's clock; imported perf-stat CSV gives Intel's published metric."""
    import os
    from conftest import ROOT, run, BIN

    tb = testbed
    tb.iperf3_server()
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--counters", "software", "--interval", "200")
    tb.iperf3("-t", "1")
    rec._read_line(10)
    rc, _, err = rec.stop()
    assert rc == 0, err
    with sqlite3.connect(rec.out) as c:
        rows = c.execute("SELECT c.interval, c.value, c.enabled_ns, c.running_ns, i.dur_ns FROM counters c "
                         "JOIN intervals i ON i.idx = c.interval WHERE c.event = 'cpu-clock' ORDER BY c.interval").fetchall()
        start = int(c.execute("SELECT value FROM meta WHERE key='start_ns'").fetchone()[0])
        t = [r[0] for r in c.execute("SELECT t_ns FROM counters ORDER BY interval")]
    assert len(rows) >= 2
    ncpus = os.cpu_count()
    for _, value, enabled, running, dur in rows:
        # cpu-clock summed over all CPUs counts at most every CPU's wall time while it was
        # enabled: the counters' own window, read a moment apart from the interval's stamps
        # (which on a busy host can be a few per cent of a short last interval).
        assert 0 < value <= enabled * ncpus * 1.05, (value, enabled, ncpus)
        assert abs(enabled - dur) <= 0.1 * dur + 5e6, (enabled, dur)
        assert 0 < running <= enabled
    assert t == sorted(t) and t[0] >= start
    r = report_json(rec.out)
    assert r["counters"]["source"] == "software" and r["counters"]["readings"] > 0

    run(BIN, "import-counters", rec.out, ROOT / "tests/fixtures/counters/perf_stat_emr_per_socket.csv")
    r = report_json(rec.out)
    s0 = next(s for s in r["counters"]["sockets"] if s["socket"] == 0)
    assert r["counters"]["source"] == "imported"
    # Intel DDIO PerfMon paper, Table 7 (default_8096_desc): 85% of full-line writes miss.
    assert round(s0["write_miss_pct"]) == 85
    assert {"socket", "write_miss_pct", "read_miss_pct", "inbound_write_mbyte_per_s", "inbound_read_mbyte_per_s",
            "dram_read_mbyte_per_s", "dram_write_mbyte_per_s"} <= set(s0)
    assert any("PCIRdCur" in w for w in r["counters"]["warnings"])


def test_raw_tp_flavour_counts_and_joins_like_tp_btf(testbed, recorder):
    """--hooks raw-tp: the fallback flavour (probe reads instead of direct BTF
    loads) runs live, with every option that adds code (records, stage state,
    the buffer-page map with frags, the copy stand-in). Truth: the kernel's
    interface statistics, veth's per-queue counters, and the copy's own
    addresses found in the map."""
    tb = testbed
    tb.iperf3_server()
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--hooks", "raw-tp", "--duty", "1",
                   "--miss-sampling", "software-copy", "--miss-period", "50000")
    k0, q0 = tb.stats(tb.ns_rcv, tb.if_rcv), tb.rx_queue_packets()
    tb.iperf3("-P", "2", "-t", "2")
    k1, q1 = tb.stats(tb.ns_rcv, tb.if_rcv), tb.rx_queue_packets()
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)
    assert r["meta"]["hooks"] and all(h.startswith("raw_tp:") for h in r["meta"]["hooks"]), r["meta"]["hooks"]
    rx = [q for q in r["queues"] if q["dir"] == "rx"]
    rx_pk = sum(q["packets"] for q in rx)
    assert rx_pk > 10000
    assert within(rx_pk, k1["rx_packets"] - k0["rx_packets"], 0.01), (rx_pk, k1["rx_packets"] - k0["rx_packets"])
    per_q = {q["queue"]: q["packets"] for q in rx}
    for i in q1:
        assert within(per_q.get(i, 0), q1[i] - q0.get(i, 0), 0.01, slack=10), (i, per_q, q0, q1)
    m = r["l3miss"]
    with_addr = m["on_packet_buffers"] + m["other_addr"]
    assert m["on_packet_buffers"] > 100 and m["on_packet_buffers"] >= 0.95 * with_addr, m
    assert m["buffer_map"]["frag_pages"] > 1000, m["buffer_map"]
    assert r["events"]["sampled"] > 0 and r["events"]["lost"] == 0


def test_tp_btf_request_is_honoured_or_fails_in_one_line(testbed, tmp_path):
    """--hooks tp-btf: every hook as tp_btf where the kernel allows it (the kernel's answer:
    a tp_btf program of the test's own, loaded by bpftool), else one clear line and exit 1."""
    out = tmp_path / "t.ddio"
    p = run(BIN, "record", "-i", testbed.if_rcv, "--netns", testbed.ns_rcv, "-d", "0.5", "-o", out,
            "--hooks", "tp-btf", check=False)
    if kernel_loads("tp_btf/netif_receive_skb", tmp_path):
        assert p.returncode == 0, p.stderr
        r = report_json(out)
        assert all(h.startswith("tp_btf:") for h in r["meta"]["hooks"]), r["meta"]["hooks"]
    else:
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "tp-btf" in p.stderr, p.stderr


class KernelEventCount(Bpftrace):
    """The kernel's own count of a tracepoint's events on one CPU while the block runs, by
    bpftrace (`count` after the block)."""

    def __init__(self, tracepoint, cpu):
        super().__init__(f"tracepoint:{tracepoint} /cpu == {cpu}/ {{ @n = count(); }}")

    @property
    def count(self):
        return self.maps.get("@n", {}).get("", 0)


def _pinned_udp_run(tb, recorder, client_cpu, server_cpu, port):
    """Returns the recording's event counters and report text, the datagrams sent, and the
    skbs the kernel freed on the client's CPU (where veth's softirq runs) meanwhile."""
    server = subprocess.Popen(["ip", "netns", "exec", tb.ns_rcv, "taskset", "-c", str(server_cpu),
                               "iperf3", "-s", "-1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tb.servers.append(server)
    run(WAIT_PORT, tb.ns_rcv, port, 20)
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--detail", "full")
    with KernelEventCount("skb:consume_skb", client_cpu) as freed_there:
        out = tb.ns(tb.ns_snd, "taskset", "-c", str(client_cpu), "iperf3", "-c", tb.ip_rcv, "-p", str(port),
                    "-u", "-l", "64", "-b", "20M", "-t", "1", "-J", timeout=60).stdout
    rc, _, err = rec.stop()
    assert rc == 0, err
    sent = json.loads(out)["end"]["sum"]["packets"]
    return report_json(rec.out)["events"], run(BIN, "report", rec.out).stdout, sent, freed_there.count


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs a reader on another CPU than the softirq")
def test_untraced_frees_are_measured_and_explained(testbed, recorder):
    # On the same CPU (the test's own pinning) the kernel recycles the skb through the per-CPU
    # NAPI cache without a tracepoint (the README: 2 % seen): a low share, reported and explained.
    local, text, _, _ = _pinned_udp_run(testbed, recorder, 0, 0, 5212)
    assert local["frees_seen_pct"] is not None and local["frees_seen_pct"] < 50, local
    # The report wraps its notes at 120 columns: read the words, not the line breaks.
    words = " ".join(text.split())
    assert "were seen freed" in words and "no tracepoint reports" in words, text
    # The reader on another CPU than veth's softirq: the kernel defers the free to the
    # allocating CPU, through a path the free tracepoints see. The lives whose end goes unseen
    # are those still queued when the recording stops and those whose state a later packet
    # took: a tenth of them with two CPU hogs beside the test, where the reader lags.
    remote, remote_text, sent, freed_there = _pinned_udp_run(testbed, recorder, 0, 1, 5211)
    if freed_there < sent / 2:
        # Deferring stops while the softirq CPU's count of deferred skbs stands at
        # net.core.skb_defer_max (a count this kernel has been seen to leave there for good):
        # then the reader frees them itself, as in the run above, and nothing here tells
        # the recorder's matching apart from the kernel's choice.
        pytest.skip(f"the kernel did not defer the reader's frees to the softirq's CPU "
                    f"({freed_there} skbs freed there for {sent} datagrams)")
    assert remote["frees_seen_pct"] > 75, (remote, sent, freed_there)
    assert "no tracepoint reports" not in " ".join(remote_text.split()), remote_text


def test_a_disk_that_fills_stops_the_recording_and_says_so(testbed, recorder, tmp_path):
    """A file system that fills mid-recording stops it in one line, exit 1, and the file
    says why: stopped_by=disk_full, complete, every interval before readable, and the report
    says the disk filled (it said only complete=false, as after a SIGKILL). Truth: a 1 MiB
    tmpfs the test mounts, filled by the recording itself under traffic with every packet
    recorded."""
    tb = testbed
    small = tmp_path / "small"
    small.mkdir()
    run("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "ddioscope-test", small)
    try:
        tb.iperf3_server()
        traffic = subprocess.Popen(["ip", "netns", "exec", tb.ns_snd, "iperf3", "-c", tb.ip_rcv, "-t", "60"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "-d", "60", "--detail", "full", out=small / "r.ddio")
            _, err = rec.proc.communicate(timeout=90)
        finally:
            traffic.kill()
            traffic.wait()
        assert rec.proc.returncode == 1, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "the disk is full" in lines[0], err
        # Read a copy: reading in place needs room for SQLite's index of the log.
        kept = tmp_path / "kept"
        kept.mkdir()
        for f in small.iterdir():
            shutil.copy(f, kept / f.name)
    finally:
        run("umount", small)
    out = kept / "r.ddio"
    with sqlite3.connect(out) as c:
        meta = dict(c.execute("SELECT key, value FROM meta WHERE key IN ('stopped_by', 'complete')"))
        intervals = c.execute("SELECT COUNT(*) FROM intervals").fetchone()[0]
    assert meta == {"stopped_by": "disk_full", "complete": "true"}, meta
    assert intervals >= 1
    r = report_json(out)
    assert r["meta"]["stopped_by"] == "disk_full" and r["meta"]["complete"] and r["meta"]["intervals"] == intervals
    text = run(BIN, "report", out).stdout
    # The title, wrapped to the terminal's width, is the text's first paragraph.
    title = " ".join(text.split("\n\n")[0].split())
    assert "stopped: the disk filled" in title, title
