"""The ring advice's inputs on a live veth pair: each RX queue's frame-size histogram from the
detail windows, checked against the frame size the sender chose (iperf3 UDP -l: payload + UDP,
IP and Ethernet headers), and the driver's per-queue drop counters (veth's rx_queue_N_drops),
every one listed on the recording's first interval and summed as `ethtool -S` counts them
around the run."""
import re
import sqlite3
import uuid

from conftest import Testbed, run

PAYLOAD = 200
FRAME = PAYLOAD + 8 + 20 + 14          # UDP, IPv4, Ethernet
BUCKET = 2                             # 129..256 bytes (snapshot::SIZE_BUCKETS)


def drops(tb):
    out = tb.ns(tb.ns_rcv, "ethtool", "-S", tb.if_rcv).stdout
    return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"rx_queue_(\d+)_drops: (\d+)", out)}


def test_frame_sizes_and_nic_drop_counters(recorder):
    tb = Testbed("ddf" + uuid.uuid4().hex[:6])
    try:
        tb.iperf3_server()
        before = drops(tb)
        rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--detail", "full")
        tb.iperf3("-u", "-l", str(PAYLOAD), "-b", "20M", "-t", "3")
        rc, _, err = rec.stop()
        assert rc == 0, err
        after = drops(tb)
    finally:
        tb.down()
    assert before, "veth names its queues' drops"
    with sqlite3.connect(f"file:{rec.out}?mode=ro", uri=True) as db:
        hist = dict(db.execute("select bucket, sum(count) from size_hist where dir='rx' group by bucket").fetchall())
        first = db.execute("select min(interval) from nic_drops").fetchone()[0]
        listed = {q for (q,) in db.execute("select queue from nic_drops where interval = ? and counter like 'rx_queue_%_drops'", (first,))}
        summed = dict(db.execute("select queue, sum(count) from nic_drops where counter like 'rx_queue_%_drops' group by queue").fetchall())
    total = sum(hist.values())
    print(f"frame sizes by bucket {hist}; {FRAME}-byte frames in bucket {BUCKET}: {hist.get(BUCKET, 0)} of {total}")
    assert total >= 1000, hist
    # The data frames are all one size; the rest (ARP, IPv6 ND) a few at most.
    assert hist.get(BUCKET, 0) >= 0.99 * total, hist
    assert listed == set(before), (listed, before)
    for q, n in before.items():
        assert summed.get(q, 0) == after[q] - n, (q, summed, before, after)
