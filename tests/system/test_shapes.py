"""Counts on host shapes the tuned testbed does not choose: a second driver (a multi-queue
TAP device with NAPI, whose queues the test feeds and drains itself), and veth with its own
default offloads, the pair moved into namespaces as a CNI plugin does."""
import time
import uuid

import pytest

from conftest import Bpftrace, Testbed, queue_totals, recording_meta, run, wait_until
from tapdev import TapDevice

# RX frames the test writes into each TAP queue (queue 2 gets none).
WRITTEN = {0: 300, 1: 1200, 3: 700}
TX_DATAGRAMS = 600


@pytest.fixture
def tap():
    t = TapDevice(4)
    try:
        yield t
    finally:
        t.down()


@pytest.mark.parametrize("detail", ["windows", "counts"])
def test_tap_counts_are_exact_per_queue(tap, recorder, detail):
    """Per-queue RX equals the frames the test wrote into each queue, per-queue TX the frames
    it read from each queue, and the totals the interface's own statistics taken just before
    the recorder started and just after it stopped, exactly: the device carries nothing but
    the test's frames (IPv6 off, a permanent neighbour)."""
    read0 = tap.read()
    before = tap.stats()
    rec = recorder("-i", tap.name, "--netns", tap.ns, "--detail", detail)
    for q, n in WRITTEN.items():
        tap.rx(q, n, sport=20000 + 1000 * q)
    tap.tx(TX_DATAGRAMS)
    # The kernel takes written frames in its NAPI poll: wait for all of them.
    wait_until(lambda: tap.stats()["rx_packets"] - before["rx_packets"] >= sum(WRITTEN.values()), 20, "the TAP's RX")
    read1 = tap.read()
    rc, _, err = rec.stop()
    assert rc == 0, err
    after = tap.stats()
    got = queue_totals(rec.out)
    meta = recording_meta(rec.out)
    assert (meta["rx_counts"], meta["tx_counts"]) == ("tcx", "qdisc"), meta

    frame = tap.frame_bytes
    assert after["rx_packets"] - before["rx_packets"] == sum(WRITTEN.values())
    for q in range(4):
        want = WRITTEN.get(q, 0)
        assert got.get(("rx", q), (0, 0)) == (want, want * frame), (q, got)
    tx_read = [(p1 - p0, b1 - b0) for (p0, b0), (p1, b1) in zip(read0, read1)]
    assert sum(p for p, _ in tx_read) == after["tx_packets"] - before["tx_packets"], (tx_read, before, after)
    for q in range(4):
        assert got.get(("tx", q), (0, 0)) == tx_read[q], (q, got, tx_read)
    assert sum(1 for p, _ in tx_read if p) >= 2, f"the datagrams left by one queue only: {tx_read}"
    for d, k in (("rx", "rx"), ("tx", "tx")):
        packets = sum(v[0] for (dd, _), v in got.items() if dd == d)
        nbytes = sum(v[1] for (dd, _), v in got.items() if dd == d)
        assert (packets, nbytes) == (after[f"{k}_packets"] - before[f"{k}_packets"], after[f"{k}_bytes"] - before[f"{k}_bytes"])


def test_veth_default_offloads_count_tx_exactly_and_split_it_by_the_windows(recorder):
    """veth with its own offloads, moved into namespaces: the receiver's ACKs leave with TSO
    on, skip the peer's NAPI, and so the peer's per-queue RX counters (which the kernel counts
    a veth's TX by) miss them. TX totals then come from the interface's own counters, exactly
    (bracketed by reads before start and after stop); the per-queue split, estimated from the
    windows, is held to a bpftrace count of net_dev_start_xmit per queue: within 5 % of the TX
    total plus 20 packets per queue (the windows see the flows' shares a few times a second;
    iperf3's streams keep theirs). RX frames arrive as GSO super-packets: the recorder counts
    the frames a NIC would have carried, whose bytes repeat each extra segment's headers (at
    most 66 B of Ethernet, IPv4 and TCP with timestamps per 1448 B of payload), so its RX bytes
    lie between the interface's and that much more."""
    tb = Testbed("t" + uuid.uuid4().hex[:8], shape="default")
    try:
        # A quiet link: nothing but the test's traffic crosses it while the recorder starts
        # (IPv6 would send its multicast reports and neighbour probes at any time).
        for ns, dev in ((tb.ns_rcv, tb.if_rcv), (tb.ns_snd, tb.if_snd)):
            tb.ns(ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
        tb.iperf3_server()
        before = tb.stats(tb.ns_rcv, tb.if_rcv)
        rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv)
        prog = (f'tracepoint:net:net_dev_start_xmit /str(args->name) == "{tb.if_rcv}"/ '
                '{ @q[args->queue_mapping] = count(); }')
        with Bpftrace(prog) as oracle:
            tb.iperf3("-t", "4", "-P", "4")
        rc, _, err = rec.stop()
        assert rc == 0, err
        after = tb.stats(tb.ns_rcv, tb.if_rcv)
    finally:
        tb.down()
    got = queue_totals(rec.out)
    meta = recording_meta(rec.out)
    assert meta["tx_counts"] == "link_split", meta
    tx = {q: v for (d, q), v in got.items() if d == "tx"}
    assert sum(p for p, _ in tx.values()) == after["tx_packets"] - before["tx_packets"], (tx, before, after)
    assert sum(b for _, b in tx.values()) == after["tx_bytes"] - before["tx_bytes"]
    truth = {int(q): n for q, n in oracle.maps.get("@q", {}).items()}
    total = sum(truth.values())
    assert total > 1000, truth
    for q in set(truth) | set(tx):
        est = tx.get(q, (0, 0))[0]
        assert abs(est - truth.get(q, 0)) <= 0.05 * total + 20, (q, tx, truth)
    rx_bytes = sum(b for (d, _), (_, b) in got.items() if d == "rx")
    link_rx = after["rx_bytes"] - before["rx_bytes"]
    assert link_rx <= rx_bytes <= link_rx * (1 + 66 / 1448), (rx_bytes, link_rx)
