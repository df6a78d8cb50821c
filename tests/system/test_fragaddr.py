"""The page -> address conversion of the address join (bpf/fragaddr.h), checked
live against independent truth: the bytes the sender sent.

A sender writes a known pattern over TCP (on veth the payload stays in the
sender's page frags, so every frame reaches the receiver's hand-up with its
payload in frags). A test-only BPF program (tests/bpf/fragcheck.bpf.c) computes
each frag's kernel virtual address with the layout `ddioscope record` would
use, reads 32 bytes there, and reports them with the segment's sequence number
and the frag's place in the payload. The bytes must be the pattern at exactly
that stream offset; the same read one page further on (a conversion off by one
page) must not be."""
import json
import select
import signal
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, WAIT_PORT, run

FRAGCHECK = ROOT / "user/target/release/examples/fragcheck"
PORT = 5399
MAGIC = 0x5A17DD10
TOTAL = 8_000_000  # bytes sent


def pattern(offset, n):
    """The sender's bytes [offset, offset + n): 8-byte words (index, MAGIC), little-endian."""
    first = offset // 8
    words = b"".join(struct.pack("<II", k, MAGIC) for k in range(first, first + n // 8 + 2))
    skip = offset - first * 8
    return words[skip:skip + n]


SENDER = f"""
import socket, struct, sys
buf = b''.join(struct.pack('<II', k, {MAGIC}) for k in range({TOTAL} // 8))
s = socket.create_connection((sys.argv[1], {PORT}))
s.sendall(buf)
s.close()
"""

RECEIVER = f"""
import socket
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('0.0.0.0', {PORT}))
l.listen(1)
c, _ = l.accept()
n = 0
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    n += len(d)
print(n, flush=True)
"""


def read_json_line(proc, timeout):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        raise AssertionError("fragcheck did not become ready in time")
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"fragcheck exited: {proc.stderr.read()}")
    return json.loads(line)


def test_frag_addresses_hold_the_senders_bytes(testbed):
    assert FRAGCHECK.exists(), f"{FRAGCHECK} not built (make system-test builds it)"
    tb = testbed
    receiver = subprocess.Popen(["ip", "netns", "exec", tb.ns_rcv, "python3", "-c", RECEIVER],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tb.servers.append(receiver)
    run(WAIT_PORT, tb.ns_rcv, PORT, 20)
    fc = subprocess.Popen([str(FRAGCHECK), str(PORT), "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = read_json_line(fc, 30)
        assert ready["event"] == "ready", ready
        tb.ns(tb.ns_snd, "python3", "-c", SENDER, tb.ip_rcv, timeout=120)
        got, _ = receiver.communicate(timeout=60)
        assert int(got) == TOTAL
        fc.send_signal(signal.SIGINT)
        out, err = fc.communicate(timeout=30)
    finally:
        if fc.poll() is None:
            fc.kill()
            fc.wait()
    assert fc.returncode == 0, err
    lines = [json.loads(l) for l in out.splitlines()]
    done = lines[-1]
    assert done["event"] == "done", done
    syns = [l for l in lines if l.get("frag") == 0xFFFFFFFF]
    frags = [l for l in lines if l["event"] == "frag" and l.get("frag") != 0xFFFFFFFF]
    assert len(syns) == 1, syns
    start = (syns[0]["seq"] + 1) & 0xFFFFFFFF  # the first payload byte's sequence number

    # The sender's frames carry their payload in frags, and every frag was placed.
    assert done["segments_with_frags"] >= 0.95 * done["segments"] > 1000, done
    assert done["unplaced"] == 0, done
    assert len(frags) >= 1000, len(frags)
    assert any(f["frag"] > 0 for f in frags), "no skb with more than one frag: multi-frag indexing untested"

    checked = matched = control_matched = 0
    for f in frags:
        assert f["read_err"] == 0, f
        offset = (f["seq"] + f["pos"] - start) & 0xFFFFFFFF
        n = min(32, f["len"], TOTAL - offset)
        if n < 8:
            continue
        want = pattern(offset, n)
        checked += 1
        matched += bytes.fromhex(f["bytes"])[:n] == want
        control_matched += f["ctl_err"] == 0 and bytes.fromhex(f["ctl"])[:n] == want
    assert checked >= 1000
    # Every frag's computed address holds exactly the sender's bytes for its
    # place in the stream; one page off never does.
    assert matched == checked, f"{checked - matched} of {checked} frags hold other bytes than the sender sent"
    assert control_matched == 0, control_matched
