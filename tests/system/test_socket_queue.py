"""Socket-queue residence on the testbed: the receive queues the recorder reads through
sock_diag, checked against the kernel's own socket statistics (`ss -tmi`, sampled during the
run) and the reader's own count; and the socket-buffer recommendation, which appears for a
slow reader with a large SO_RCVBUF and not for a reader that keeps up."""
import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import BIN, Testbed, run

PORT = 5301
# The slow reader: 64 KiB every 20 ms, 3.3 MB/s, behind a 4 MiB receive buffer that the
# sender keeps full.
READER = r"""
import socket, sys, time
port, rcvbuf, chunk, pause, seconds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if rcvbuf:
    # SO_RCVBUFFORCE (33): past net.core.rmem_max, which is the host's and not ours to change.
    s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), rcvbuf)
s.bind(("0.0.0.0", port))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
got, t0 = 0, time.monotonic()
while time.monotonic() - t0 < seconds:
    b = c.recv(chunk)
    if not b:
        break
    got += len(b)
    if pause:
        time.sleep(pause)
print(got, time.monotonic() - t0, flush=True)
"""
SENDER = r"""
import socket, sys, time
dst, port, seconds, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = socket.create_connection((dst, port))
buf = b"x" * 65536
t0 = time.monotonic()
try:
    while time.monotonic() - t0 < seconds:
        s.send(buf)
        if pause:
            time.sleep(pause)
except OSError:
    pass
"""


@pytest.fixture
def bed():
    tb = Testbed("ddd" + uuid.uuid4().hex[:6])
    try:
        yield tb
    finally:
        tb.down()


def ss_samples(tb, stop, out):
    """`ss -tmi` of the receiver's sockets on PORT every 100 ms: (t, Recv-Q, skmem r, bytes_received)."""
    while not stop.is_set():
        text = tb.ns(tb.ns_rcv, "ss", "-tmiH", f"( sport = :{PORT} )", check=False).stdout
        m = re.search(r"^\S+\s+(\d+)\s+\d+\s+.*?skmem:\(r(\d+),rb(\d+).*?bytes_received:(\d+)", text, re.S | re.M)
        if m:
            out.append((time.monotonic(), int(m.group(1)), int(m.group(2)), int(m.group(4))))
        stop.wait(0.1)


def run_load(tb, recorder, rcvbuf, chunk, pause, send_pause=0.0, seconds=4.0):
    reader = subprocess.Popen(
        ["ip", "netns", "exec", tb.ns_rcv, sys.executable, "-c", READER, str(PORT), str(rcvbuf), str(chunk),
         str(pause), str(seconds + 2)], stdout=subprocess.PIPE, text=True)
    tb.servers.append(reader)
    assert reader.stdout.readline().strip() == "listening"
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv)
    samples, stop = [], threading.Event()
    sampler = threading.Thread(target=ss_samples, args=(tb, stop, samples))
    sampler.start()
    try:
        tb.ns(tb.ns_snd, sys.executable, "-c", SENDER, tb.ip_rcv, str(PORT), str(seconds), str(send_pause), timeout=60)
    finally:
        stop.set()
        sampler.join()
    rc, _, err = rec.stop()
    assert rc == 0, err
    reader.wait(timeout=30)
    return rec.out, samples


def recorded_queues(path):
    with sqlite3.connect(path) as c:
        return c.execute(
            "SELECT reads, rqueue_sum, rqueue_max, rmem_sum, rcvbuf_max, drained_bytes, span_ns FROM socket_queues WHERE sport != ?",
            (PORT,)).fetchall()


def test_socket_residence_matches_the_kernels_socket_statistics(bed, recorder):
    path, ss = run_load(bed, recorder, rcvbuf=4 << 20, chunk=65536, pause=0.02)
    rows = recorded_queues(path)
    assert len(rows) == 1, rows
    reads, rq_sum, rq_max, rmem_sum, rcvbuf, drained, span_ns = rows[0]
    assert reads >= 3, rows
    mean_q = rq_sum / reads
    drain = drained / (span_ns / 1e9)
    residence = mean_q / drain
    # The kernel's own view over the same run: ss's Recv-Q and bytes_received, sampled apart.
    assert len(ss) >= 10, ss
    full = [s for s in ss if s[1] > 0]
    ss_mean_q = sum(s[1] for s in full) / len(full)
    (t0, q0, _, b0), (t1, q1, _, b1) = full[0], full[-1]
    ss_drain = ((b1 - b0) - (q1 - q0)) / (t1 - t0)
    ss_residence = ss_mean_q / ss_drain
    print(f"recorded: mean queue {mean_q:.0f} B, drain {drain / 1e6:.2f} MB/s, residence {residence * 1e3:.1f} ms, "
          f"rcvbuf {rcvbuf}; ss: mean queue {ss_mean_q:.0f} B, drain {ss_drain / 1e6:.2f} MB/s, "
          f"residence {ss_residence * 1e3:.1f} ms over {len(full)} samples")
    # The queue stays full behind the slow reader, so both sample one level: within 20 %
    # (the recorder reads once a second, ss ten times; the reader's 64 KiB steps are 2-3 %
    # of the queue). The drain rates cover different stretches of one steady reader: 15 %.
    assert mean_q > 1 << 20, mean_q
    assert abs(mean_q - ss_mean_q) <= 0.2 * ss_mean_q, (mean_q, ss_mean_q)
    assert abs(drain - ss_drain) <= 0.15 * ss_drain, (drain, ss_drain)
    assert abs(residence - ss_residence) <= 0.3 * ss_residence, (residence, ss_residence)
    assert rcvbuf >= 4 << 20


def test_socket_buffer_advice_for_a_slow_reader_and_not_a_fast_one(bed, recorder):
    # An LLC small enough that 4 MiB of queued payload overflows its DDIO ways (2 MiB, 16
    # ways, 2 for DDIO: 115 KiB usable), and the same LLC for a reader that keeps up.
    llc = ["--llc-mib", "2", "--llc-ways", "16", "--ddio-ways", "2"]
    slow, _ = run_load(bed, recorder, rcvbuf=4 << 20, chunk=65536, pause=0.02)
    adv = json.loads(run(BIN, "recommend", slow, "--json", *llc).stdout)
    recs = [r for r in adv["recommendations"] if r["kind"] == "socket_buffer"]
    print(json.dumps(recs, indent=1))
    assert len(recs) == 1, adv["recommendations"]
    r = recs[0]
    cap = int(re.search(r'tcp_rmem="4096 131072 (\d+)"', r["command"]).group(1))
    assert cap < 4 << 20 and cap >= 131072
    assert r["predicted_before"] is not None and r["predicted_after"] is not None
    assert r["predicted_after"] >= r["predicted_before"], r
    assert any("predicted DRAM traffic" in e and "B/s" in e for e in r["evidence"]), r["evidence"]

    # 64 KiB a millisecond (65 MB/s) to a reader that takes whatever is there at once.
    fast, _ = run_load(bed, recorder, rcvbuf=0, chunk=1 << 20, pause=0, send_pause=0.001)
    rows = recorded_queues(fast)
    assert rows and all(r[1] / max(r[0], 1) < 1 << 20 for r in rows), rows
    adv = json.loads(run(BIN, "recommend", fast, "--json", *llc).stdout)
    assert not [r for r in adv["recommendations"] if r["kind"] == "socket_buffer"], adv["recommendations"]
