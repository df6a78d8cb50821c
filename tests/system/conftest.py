"""System-test fixtures: fresh testbeds, a recorder that reports readiness, iperf3.

Every fixture removes what it created, even when the test fails. Nothing here
sleeps for a fixed time: waits are on readiness (the recorder's "attached" line,
a listening port) with a deadline.
"""
import json
import os
import re
import select
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DDIOSCOPE", ROOT / "user/target/release/ddioscope"))
TESTBED = ROOT / "scripts/testbed.sh"
WAIT_PORT = ROOT / "scripts/wait-port.sh"


def run(*args, check=True, **kw):
    return subprocess.run([str(a) for a in args], check=check, capture_output=True, text=True, **kw)


def link_stats(ns, dev):
    """The interface's packets and bytes each way, from one netlink snapshot: reading the
    four sysfs files one after another tears (a frame between two reads is in one count and
    not the other)."""
    out = run("ip", "netns", "exec", ns, "ip", "-s", "-j", "link", "show", "dev", dev).stdout
    s = json.loads(out)[0]["stats64"]
    return {f"{d}_{k}": s[d][k] for d in ("rx", "tx") for k in ("packets", "bytes")}


class Testbed:
    __test__ = False  # a fixture helper, not a test class, when a test module imports it

    def __init__(self, name, shape="tuned"):
        """`shape`: how the pair is made (scripts/testbed.sh): tuned, default (veth's own
        offloads, the pair moved into namespaces the CNI way) or rootpeer (the sender's end in
        the root namespace)."""
        self.name = name
        self.env = {**os.environ, "DDIO_TESTBED_SHAPE": shape}
        run(TESTBED, "up", name, env=self.env)
        env = dict(l.split("=", 1) for l in run(TESTBED, "env", name, env=self.env).stdout.split())
        self.ns_snd, self.ns_rcv = env["NS_SND"], env["NS_RCV"]
        self.if_snd, self.if_rcv = env["IF_SND"], env["IF_RCV"]
        self.ip_snd, self.ip_rcv = env["IP_SND"], env["IP_RCV"]
        self.ip6_rcv = env["IP6_RCV"]
        self.shape = shape
        # Where the sender's commands run: its namespace, or the root one (rootpeer).
        self.snd = [] if shape == "rootpeer" else ["ip", "netns", "exec", self.ns_snd]
        if shape == "rootpeer":
            self.if_snd = env["ROOT_IF"]
        self.servers = []

    def down(self):
        for p in self.servers:
            p.kill()
            p.wait()
        run(TESTBED, "down", self.name, check=False, env=self.env)

    def ns(self, ns, *cmd, **kw):
        return run("ip", "netns", "exec", ns, *cmd, **kw)

    def stats(self, ns, dev):
        """The kernel's own interface statistics."""
        return link_stats(ns, dev)

    def rx_queue_packets(self):
        """veth's per-RX-queue driver counters on the receiver (ethtool -S)."""
        out = self.ns(self.ns_rcv, "ethtool", "-S", self.if_rcv).stdout
        return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"rx_queue_(\d+)_xdp_packets: (\d+)", out)}

    def iperf3_server(self, port=5201, cpu=None):
        """iperf3 -s in the receiver's namespace, on `cpu` when given."""
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.ns_rcv, *pin, "iperf3", "-s", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.servers.append(p)
        run(WAIT_PORT, self.ns_rcv, port, 20)
        return p

    def iperf3(self, *args, port=5201, dst=None):
        out = run(*self.snd, "iperf3", "-c", dst or self.ip_rcv, "-p", str(port), "-J", *args, timeout=120).stdout
        return json.loads(out)


@pytest.fixture
def testbed():
    tb = Testbed("t" + uuid.uuid4().hex[:8])
    try:
        yield tb
    finally:
        tb.down()


class Recorder:
    """`ddioscope record --json-progress`, started and waited on until attached."""

    def __init__(self, out, *args):
        self.out = out
        self.proc = subprocess.Popen(
            [str(BIN), "record", "-o", str(out), "--json-progress", *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.attached = self._read_line(30)
        assert self.attached.get("event") == "attached", self.attached
        self.prog_ids = self.attached["prog_ids"]

    def _read_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.proc.kill()
            raise AssertionError("recorder did not become ready in time")
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read()
            raise AssertionError(f"recorder exited before attaching: {err}")
        return json.loads(line)

    def stop(self, sig=signal.SIGINT, timeout=30):
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def recorder(tmp_path):
    started = []

    def start(*args, out=None):
        r = Recorder(out or tmp_path / f"rec{len(started)}.ddio", *args)
        started.append(r)
        return r

    yield start
    for r in started:
        r.kill()


def report_json(path):
    return json.loads(run(BIN, "report", path, "--json").stdout)


def bpftool_list(kind):
    """bpftool's JSON listing of every `kind` ("prog", "link") on the host. A listing stops
    with an error when an object it reached goes away before it was read (a link whose
    program is being freed): that is a race with some other process's exit, so the listing
    is taken again; one that keeps failing is reported with bpftool's own words."""
    for _ in range(5):
        r = run("bpftool", kind, "show", "--json", check=False)
        if r.returncode == 0:
            return json.loads(r.stdout or "[]")
    raise AssertionError(f"bpftool {kind} show failed 5 times: {r.stderr.strip() or r.stdout.strip()}")


def live_prog_ids():
    """Ids of every BPF program loaded on the host now."""
    return {p["id"] for p in bpftool_list("prog")}


def live_link_prog_ids():
    return {l.get("prog_id") for l in bpftool_list("link")}


def kernel_loads(section, tmp_dir):
    """Whether this kernel loads a do-nothing BPF program of `section` (e.g.
    "tp_btf/netif_receive_skb"): the kernel's own answer, independent of ddioscope's doctor.
    Built with clang and loaded by bpftool into a bpffs mounted in a private mount
    namespace (nothing stays pinned or mounted)."""
    src, obj = Path(tmp_dir) / "probe.bpf.c", Path(tmp_dir) / "probe.o"
    src.write_text('#define SEC(n) __attribute__((section(n), used))\n'
                   f'SEC("{section}") int probe(unsigned long long *ctx) {{ return 0; }}\n'
                   'char LICENSE[] SEC("license") = "GPL";\n')
    run("clang", "-target", "bpf", "-O2", "-g", "-c", src, "-o", obj)
    fs = Path(tmp_dir) / "bpffs"
    fs.mkdir(exist_ok=True)
    p = run("unshare", "-m", "sh", "-c", f'mount -t bpf bpf "{fs}" && bpftool prog load "{obj}" "{fs}/p"', check=False)
    return p.returncode == 0


def wait_until(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def end_bpftrace(proc, deadline=90):
    """Stop a bpftrace process as a user does, with SIGINT, and return what it printed (its
    maps). bpftrace now and then misses a SIGINT and stays in its event loop with its probes
    attached: another one a while later ends it, so one goes every 10 s until the deadline."""
    end = time.monotonic() + deadline
    while True:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=min(10, max(0.1, end - time.monotonic())))
            return out
        except subprocess.TimeoutExpired:
            if time.monotonic() >= end:
                raise


class Bpftrace:
    """The kernel's own count of events while the block runs, by a bpftrace program of the
    test's own (tracefs mounted for it, and unmounted after, where it was not mounted). `maps`
    holds each map's values after: {"@q": {"0": 12, ...}, "@n": {"": 5}}."""

    TRACEFS = "/sys/kernel/tracing"

    def __init__(self, program):
        self.program = program
        self.maps = {}

    def __enter__(self):
        self.mounted = not os.path.exists(f"{self.TRACEFS}/events")
        if self.mounted:
            run("mount", "-t", "tracefs", "nodev", self.TRACEFS)
        self.proc = subprocess.Popen(["bpftrace", "-e", self.program], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        # Attached once it says so (it prints nothing else before the end).
        line = self.proc.stdout.readline()
        assert line.startswith("Attaching"), line
        return self

    def __exit__(self, *exc):
        try:
            out = end_bpftrace(self.proc)
            for m in re.finditer(r"^(@\w+)(?:\[(.*?)\])?: (\d+)$", out, re.M):
                self.maps.setdefault(m.group(1), {})[m.group(2) or ""] = int(m.group(3))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            if self.mounted:
                run("umount", self.TRACEFS, check=False)


def queue_totals(path):
    """The recording's packets and bytes per (dir, queue), summed over its intervals."""
    import sqlite3
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("select dir, queue, sum(packets), sum(bytes) from queue_intervals group by dir, queue").fetchall()
    return {(d, q): (p, b) for d, q, p, b in rows}


def recording_meta(path):
    import sqlite3
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {k: v for k, v in db.execute("select key, value from meta")}
