#!/usr/bin/env python3
"""Writes rules_test.yml: promtool unit tests of packaging/prometheus-rules.yml whose
first test runs on series scraped from a live `ddioscope serve` (see README.md).

Run as root from the repository (needs the built binary, iperf3, prometheus):
    python3 tests/prometheus/capture.py              # capture anew (about 2.5 min)
    python3 tests/prometheus/capture.py --from-json  # rules_test.yml again from scrape.json

It brings up a testbed, runs `ddioscope serve --counters software --miss-sampling
software-copy` on the receiver, a Prometheus on loopback scraping it every second
and iperf3 -P 4 traffic for WINDOW_S seconds, then reads the series below back from
Prometheus at STEP_S resolution. The expected values of the recording rules are
computed here from those samples with Prometheus's own arithmetic (rate over
samples that span the whole range: (last - first) / range; histogram_quantile's
linear interpolation inside the bucket), and the alerts expected on the real data
are the ones its values call for. The second test group's series are synthetic
(marked so) to make each alert fire and stay silent around its threshold.
"""
import json
import math
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "system"))
from conftest import Testbed, wait_until  # noqa: E402
from test_serve import Prometheus, Serve, http_get  # noqa: E402

STEP_S = 15
WINDOW_S = 120
EVAL_S = [60, 120]
RATE_S = 60

SELECTORS = [
    'ddioscope_packets_total{direction="rx"}',
    'ddioscope_bytes_total{direction="rx"}',
    'ddioscope_stage_duration_seconds_bucket{direction="rx",queue="0",stage="driver_to_stack"}',
    'ddioscope_attributed_miss_samples_total{direction="rx"}',
    "ddioscope_state_evictions_total",
    "ddioscope_intervals_total",
    'ddioscope_model_verdict{direction="rx"}',
    "up",
]


def query_range(prom, q, start, end):
    params = urllib.parse.urlencode({"query": q, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{STEP_S}s"})
    status, _, body = http_get(f"{prom.url}/api/v1/query_range?{params}")
    r = json.loads(body)
    assert status == 200 and r["status"] == "success", body
    return r["data"]["result"]


def series_name(metric):
    name = metric["__name__"]
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}"


def selector(name, labels):
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def fmt(v):
    return repr(float(v)) if not math.isinf(v) else ("+Inf" if v > 0 else "-Inf")


def rate(values, t):
    """rate(x[RATE_S]) at t when samples lie exactly on the range's ends: no extrapolation,
    and Prometheus's order of operations (the delta times (1 / range))."""
    i, j = (t - RATE_S) // STEP_S, t // STEP_S
    factor = (RATE_S / RATE_S) / RATE_S
    return (values[j] - values[i]) * factor


def histogram_quantile(q, buckets):
    """Prometheus's bucketQuantile on (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    observations = buckets[-1][1]
    if observations == 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(buckets) - 1) if buckets[i][1] >= rank), len(buckets) - 1)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    start, end, count = 0.0, buckets[b][0], buckets[b][1]
    if b > 0:
        start = buckets[b - 1][0]
        count -= buckets[b - 1][1]
        rank -= buckets[b - 1][1]
    return start + (end - start) * (rank / count)


def capture():
    tb = Testbed("ddacap" + uuid.uuid4().hex[:4])
    srv = prom = traffic = None
    try:
        tb.iperf3_server()
        srv = Serve(tb, "--counters", "software", "--miss-sampling", "software-copy")
        prom = Prometheus(srv.port)
        wait_until(lambda: prom.scalar('up{job="ddioscope"}') == 1, timeout=20, what="the first scrape")
        traffic = subprocess.Popen(["ip", "netns", "exec", tb.ns_snd, "iperf3", "-c", tb.ip_rcv, "-P", "4",
                                    "-t", str(WINDOW_S + 20)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = math.ceil(time.time()) + 5
        end = start + WINDOW_S
        while time.time() < end + 3:
            time.sleep(1)
        out = {}
        for sel in SELECTORS:
            for s in query_range(prom, sel, start, end):
                vals = [float(v) for _, v in s["values"]]
                assert len(vals) == WINDOW_S // STEP_S + 1, (sel, len(vals))
                out[series_name(s["metric"])] = (s["metric"], vals)
        return out
    finally:
        if traffic:
            traffic.kill()
            traffic.wait()
        if prom:
            prom.close()
        if srv:
            srv.kill()
        tb.down()


def main():
    raw = HERE / "scrape.json"
    if "--from-json" in sys.argv:
        series = {k: (m, v) for k, (m, v) in json.loads(raw.read_text()).items()}
    else:
        series = capture()
        raw.write_text(json.dumps(series, indent=1, sort_keys=True) + "\n")
    lines = [
        "# promtool test rules rules_test.yml (from this directory). Generated by capture.py:",
        "# the first group's input series were scraped from ddioscope serve on the veth testbed",
        f"# (iperf3 -P 4, --counters software, --miss-sampling software-copy) at {STEP_S} s steps;",
        "# its expected values are computed from them. The second group's series are synthetic.",
        "rule_files:",
        "  - ../../packaging/prometheus-rules.yml",
        f"evaluation_interval: {STEP_S}s",
        "tests:",
        f"  - interval: {STEP_S}s",
        "    input_series:",
    ]
    for name, (_, vals) in sorted(series.items()):
        text = " ".join(str(int(v)) if v == int(v) else fmt(v) for v in vals)
        lines += [f"      - series: '{name}'", f"        values: '{text}'"]
    lines.append("    promql_expr_test:")
    keep = ("instance", "device", "direction", "queue")
    for t in EVAL_S:
        for rec, metric, scale in [("ddioscope:packets:rate1m", "ddioscope_packets_total", 1),
                                   ("ddioscope:bits:rate1m", "ddioscope_bytes_total", 8)]:
            exp = []
            for m, vals in series.values():
                if m["__name__"] == metric:
                    labels = {k: m[k] for k in keep if k in m}
                    exp.append((labels, scale * rate(vals, t)))
            lines += [f"      - expr: '{rec}'", f"        eval_time: {t}s", "        exp_samples:"]
            for labels, v in sorted(exp, key=lambda e: sorted(e[0].items())):
                lines += [f"          - labels: '{selector(rec, labels)}'",
                          f"            value: {fmt(v)}"]
        buckets = [(float(m["le"]), rate(vals, t)) for m, vals in series.values()
                   if m["__name__"] == "ddioscope_stage_duration_seconds_bucket"]
        p99 = histogram_quantile(0.99, buckets)
        m0 = next(m for m, _ in series.values() if m["__name__"] == "ddioscope_stage_duration_seconds_bucket")
        labels = {k: m0[k] for k in ("instance", "device", "direction", "queue", "stage")}
        rec = "ddioscope:stage_duration_seconds:p99_1m"
        lines += [f"      - expr: '{selector(rec, {'stage': 'driver_to_stack', 'queue': '0'})}'", f"        eval_time: {t}s",
                  "        exp_samples:",
                  f"          - labels: '{selector(rec, labels)}'",
                  f"            value: {fmt(p99)}"]
        exp = []
        for m, vals in series.values():
            if m["__name__"] == "ddioscope_attributed_miss_samples_total":
                labels = {k: m[k] for k in keep + ("method",) if k in m}
                exp.append((labels, rate(vals, t)))
        rec = "ddioscope:attributed_miss_samples:rate1m"
        lines += [f"      - expr: '{rec}'", f"        eval_time: {t}s", "        exp_samples:"]
        for labels, v in sorted(exp, key=lambda e: sorted(e[0].items())):
            lines += [f"          - labels: '{selector(rec, labels)}'",
                      f"            value: {fmt(v)}"]
    # No alert fires on this ordinary traffic, and none is even pending: every alert's
    # condition is empty at each evaluation (checked by promtool, not assumed here).
    rules = yaml.safe_load((HERE.parent.parent / "packaging/prometheus-rules.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    for t in EVAL_S:
        for r in alerts:
            lines += [f"      - expr: '{r['expr']}'", f"        eval_time: {t}s", "        exp_samples: []"]
    leaky = any(m.get("verdict") == "leaky" and any(v == 1 for v in vals)
                for m, vals in series.values() if m["__name__"] == "ddioscope_model_verdict")
    print(f"leaky verdicts in the capture (on an assumed ring, no alert): {leaky}")
    lines += ["    alert_rule_test:"]
    for r in alerts:
        lines += [f"      - eval_time: {WINDOW_S}s", f"        alertname: {r['alert']}", "        exp_alerts: []"]
    lines.append("")
    lines.append((HERE / "synthetic_tests.yml.in").read_text())
    (HERE / "rules_test.yml").write_text("\n".join(lines))
    print(f"wrote {HERE / 'rules_test.yml'} from {len(series)} series")


if __name__ == "__main__":
    main()
