"""ddioscope serve scraped by a real Prometheus server, checked against the
kernel's own counters: veth's per-RX-queue driver counters (ethtool -S) and the
interface statistics. Also: promtool accepts the exposition, bad requests do
not kill the server, and it only listens beyond loopback when told to."""
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import BIN, live_prog_ids, run, wait_until

SERVE_INTERVAL_S = 0.25
SCRAPE_INTERVAL_S = 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, headers=None, timeout=3):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def wait_http_ok(url, proc, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if http_get(url, timeout=1)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what} not ready after {timeout} s")


class Serve:
    def __init__(self, tb, *extra, prefix=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [*prefix, str(BIN), "serve", "-i", tb.if_rcv, "--netns", tb.ns_rcv, "--listen", f"127.0.0.1:{self.port}",
             "--interval", str(int(SERVE_INTERVAL_S * 1000)), "-v", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # /healthz answers 200 only once the probes are attached.
        wait_http_ok(self.url + "/healthz", self.proc, 30, "ddioscope serve")

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=15)
        ids = next((l.split()[-1] for l in err.splitlines() if l.startswith("attached: prog ids")), "")
        return self.proc.returncode, err, {int(i) for i in ids.split(",") if i}

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Prometheus:
    """A real Prometheus on loopback with a temp config and storage, scraping every 1 s."""

    def __init__(self, target_port, rule_files=()):
        self.dir = Path(tempfile.mkdtemp(prefix="ddioscope-prom-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = "".join(f"  - {f}\n" for f in rule_files)
        (self.dir / "prometheus.yml").write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE_INTERVAL_S}s\n"
            f"  scrape_timeout: {SCRAPE_INTERVAL_S}s\n"
            f"  evaluation_interval: {SCRAPE_INTERVAL_S}s\n"
            + (f"rule_files:\n{rules}" if rules else "") +
            "scrape_configs:\n"
            "  - job_name: ddioscope\n"
            "    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = open(self.dir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        try:
            wait_http_ok(self.url + "/-/ready", self.proc, 60, "prometheus")
        except AssertionError:
            self.close()
            raise

    def query(self, q, at=None):
        params = {"query": q}
        if at is not None:
            params["time"] = f"{at:.3f}"
        status, _, body = http_get(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}")
        r = json.loads(body)
        assert status == 200 and r["status"] == "success", body
        return r["data"]["result"]

    def scalar(self, q, at=None):
        res = self.query(q, at)
        return float(res[0]["value"][1]) if res else None

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def serve():
    started = []

    def start(tb, *extra, prefix=()):
        s = Serve(tb, *extra, prefix=prefix)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


@pytest.fixture
def prometheus():
    started = []

    def start(port, rule_files=()):
        p = Prometheus(port, rule_files)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def settled_reading(tb, prom):
    """The kernel's truth now, and Prometheus's per-queue values from a scrape
    whose snapshot was taken after that truth (the link must be quiet)."""
    k, q = tb.stats(tb.ns_rcv, tb.if_rcv), tb.rx_queue_packets()
    t_truth = time.time()
    # A scrape at T shows the snapshot that ended at or after T - interval.
    need = t_truth + SERVE_INTERVAL_S + 0.2
    wait_until(lambda: (prom.scalar("timestamp(ddioscope_intervals_total)") or 0) > need,
               timeout=15, what="a Prometheus scrape after the truth reading")
    at = time.time()
    per_q = {int(r["metric"]["queue"]): float(r["value"][1])
             for r in prom.query('ddioscope_packets_total{direction="rx"}', at)}
    by = sum(float(r["value"][1]) for r in prom.query('ddioscope_bytes_total{direction="rx"}', at))
    return k, q, (per_q, by)


def test_prometheus_scrapes_per_queue_counts_that_match_the_kernel(testbed, serve, prometheus):
    tb = testbed
    tb.iperf3_server()
    srv = serve(tb, "--top-flows", "3")
    prom = prometheus(srv.port)
    wait_until(lambda: prom.scalar('up{job="ddioscope"}') == 1, timeout=20, what="Prometheus to scrape ddioscope")

    k0, q0, (p0, b0) = settled_reading(tb, prom)
    ip = tb.iperf3("-P", "4", "-t", "3")
    assert ip["end"]["sum_received"]["bytes"] > 0
    k1, q1, (p1, b1) = settled_reading(tb, prom)

    truth = {i: q1[i] - q0.get(i, 0) for i in q1}
    got = {i: p1.get(i, 0) - p0.get(i, 0) for i in set(p1) | set(p0)}
    total_truth = k1["rx_packets"] - k0["rx_packets"]
    assert total_truth > 10000
    assert sum(truth.values()) == pytest.approx(total_truth, rel=0.01)
    for i, n in truth.items():
        assert abs(got.get(i, 0) - n) <= max(0.02 * n, 10), f"queue {i}: prometheus {got.get(i, 0)} driver {n}"
    assert set(got) <= set(truth), (got, truth)
    assert abs(sum(got.values()) - total_truth) <= 0.02 * total_truth, (got, total_truth)

    # Bytes against the interface's byte counter too, over the same two readings, both ways.
    kb = k1["rx_bytes"] - k0["rx_bytes"]
    assert abs((b1 - b0) - kb) <= 0.02 * kb, (b1 - b0, kb)

    # The histograms are usable as histograms, and stages are ordered. Over the buckets as
    # they stand, not their increase: a 3 s burst can get a single window (the run budget
    # spaces windows after a costly first one), and a series that first appears in one scrape
    # and stays has no increase Prometheus can see.
    p99 = {stage: prom.scalar(
        'histogram_quantile(0.99, sum by (le) (ddioscope_stage_duration_seconds_bucket'
        f'{{direction="rx",stage="{stage}"}}))') for stage in ("driver_to_stack", "driver_to_free")}
    assert 0 < p99["driver_to_stack"] <= p99["driver_to_free"] < 10, p99

    # Flows are bounded to --top-flows per direction, plus "other" (iperf3 -P 4 makes 5 connections).
    flows = prom.query("ddioscope_flow_bytes_total")
    for d in ("rx", "tx"):
        named = {tuple(sorted(f["metric"].items())) for f in flows
                 if f["metric"]["direction"] == d and f["metric"]["proto"] != "other"}
        assert len(named) <= 3, flows
    assert any(f["metric"]["direction"] == "rx" and f["metric"]["proto"] != "other" for f in flows), flows
    assert all(f["metric"]["dport"] == "5201" or f["metric"]["sport"] == "5201"
               for f in flows if f["metric"]["proto"] != "other")

    # Prometheus took OpenMetrics and saw no scrape failures.
    targets = json.loads(http_get(prom.url + "/api/v1/targets")[2])["data"]["activeTargets"]
    assert [t["health"] for t in targets] == ["up"], targets

    # promtool accepts the plain (non-OpenMetrics) exposition served to clients like curl.
    status, ctype, body = http_get(srv.url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), ctype
    lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    status, ctype, om = http_get(srv.url + "/metrics", {"Accept": "application/openmetrics-text;version=1.0.0"})
    assert ctype.startswith("application/openmetrics-text") and om.endswith("# EOF\n")
    assert "ddioscope_stage_duration_seconds_bucket{le=\"+Inf\"" in om

    rc, err, ids = srv.stop()
    assert rc == 0, err
    assert ids
    wait_until(lambda: not (ids & live_prog_ids()), what="programs to be unloaded")


def raw_exchange(port, payload, timeout=5):
    """Send raw bytes, return whatever comes back until the server closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close before reading everything: that is fine
        chunks = []
        try:
            while True:
                c = s.recv(4096)
                if not c:
                    break
                chunks.append(c)
        except (socket.timeout, ConnectionResetError):
            pass
        return b"".join(chunks)


def test_serve_survives_bad_requests_and_stays_on_loopback(testbed, serve):
    tb = testbed
    tb.iperf3_server()
    srv = serve(tb)
    traffic = subprocess.Popen(["ip", "netns", "exec", tb.ns_snd, "iperf3", "-c", tb.ip_rcv, "-P", "4", "-t", "4"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert http_get(srv.url + "/no/such/path")[0] == 404
        # Garbage (a TLS ClientHello) gets a 400, a 2 MB header a 431: a reply, not a silent close.
        garbage = raw_exchange(srv.port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) * 4)
        assert garbage.startswith(b"HTTP/1.1 400 "), garbage[:80]
        huge = raw_exchange(srv.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2_000_000 + b"\r\n\r\n")
        assert huge.startswith(b"HTTP/1.1 431 "), huge[:80]
        # Half a request, then the client goes away.
        raw_exchange(srv.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", timeout=0.5)
        # Scrapes during heavy traffic keep working.
        for _ in range(10):
            status, _, body = http_get(srv.url + "/metrics")
            assert status == 200 and "ddioscope_packets_total" in body
        assert http_get(srv.url + "/healthz")[:1] == (200,)
        assert srv.proc.poll() is None
    finally:
        traffic.kill()
        traffic.wait()
    rc, err, _ = srv.stop()
    assert rc == 0, err

    # Non-loopback needs --allow-remote: one line and exit 1, before attaching.
    r = run(BIN, "serve", "-i", tb.if_rcv, "--netns", tb.ns_rcv, "--listen", "0.0.0.0:9436", check=False)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "--allow-remote" in r.stderr, r.stderr
    # A port in use fails before attaching.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run(BIN, "serve", "-i", tb.if_rcv, "--netns", tb.ns_rcv, "--listen", f"127.0.0.1:{port}", check=False)
    assert r.returncode == 1 and "in use" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_serve_duration_stops_serving_and_detaches(testbed):
    """`serve --duration`: it had none. Once the time is up it stops serving and detaches
    everything, exit 0."""
    before = live_prog_ids()
    s = Serve(testbed, "--duration", "3s")
    try:
        status, _, body = http_get(s.url + "/metrics")
        assert status == 200 and "ddioscope_" in body
        _, err = s.proc.communicate(timeout=60)
    finally:
        s.kill()
    assert s.proc.returncode == 0, err
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        http_get(s.url + "/metrics", timeout=1)
    wait_until(lambda: live_prog_ids() <= before, 10, "serve's programs detached")


IDLE_CONNECTIONS = 5000


def test_serve_answers_scrapes_past_5000_idle_connections(testbed, serve):
    """Under systemd's default 1,024-descriptor limit, about 1,090 idle connections (from
    any local user) made every scrape time out: serve took connections until it ran out of
    descriptors. Now it caps them at a quarter of its limit and closes the oldest idle one
    to make room, so with 5,000 idle connections held open a scrape is still answered,
    within a 30 s deadline (each try 5 s), and serve is still running."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE_CONNECTIONS + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the test itself needs {need} descriptors; its hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need if soft == resource.RLIM_INFINITY else max(soft, need), hard))
    socks = []
    try:
        srv = serve(testbed, prefix=("prlimit", "--nofile=1024:1024", "--"))
        for _ in range(IDLE_CONNECTIONS):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", srv.port))
            socks.append(s)
        deadline = time.monotonic() + 30
        answered = None
        while answered is None and time.monotonic() < deadline:
            assert srv.proc.poll() is None, srv.proc.stderr.read()
            try:
                status, _, body = http_get(srv.url + "/metrics", timeout=5)
                if status == 200 and "ddioscope_device_up" in body:
                    answered = body
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
        assert answered is not None, f"no scrape answered with {IDLE_CONNECTIONS} idle connections open"
        assert srv.proc.poll() is None
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    rc, err, _ = srv.stop()
    assert rc == 0, err
