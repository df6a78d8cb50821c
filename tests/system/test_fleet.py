"""The fleet view on real engines: the Grafana dashboard and the Prometheus rules in
packaging/ against a real Prometheus scraping `ddioscope serve` on the testbed
(every panel's PromQL returns data, every rule evaluates), promtool's checks and
unit tests of the rules (series from a real scrape: tests/prometheus/), and the
label-cardinality knobs: the flow cap with its "other" bucket, checked against the
kernel's byte counter, and the stage histograms per direction or off."""
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, run, wait_until
from test_serve import http_get, prometheus, serve  # noqa: F401  (fixtures)

DASHBOARD = ROOT / "packaging/grafana-dashboard.json"
RULES = ROOT / "packaging/prometheus-rules.yml"
RULES_TEST = ROOT / "tests/prometheus/rules_test.yml"


def panels():
    return json.loads(DASHBOARD.read_text())["panels"]


def expand(expr, instance, device):
    """Grafana's variables as Grafana substitutes them for one exporter (regex-escaped,
    with the backslashes doubled inside PromQL's string)."""
    esc = lambda v: re.escape(v).replace("\\", "\\\\")
    return expr.replace("$__rate_interval", "1m").replace("$instance", esc(instance)).replace("$device", esc(device))


def needs_uncore(panel):
    return "Needs uncore counters" in panel["description"]


def test_promtool_checks_and_unit_tests_the_rules():
    r = run("promtool", "check", "rules", RULES, check=False)
    assert r.returncode == 0 and "SUCCESS: 9 rules found" in r.stdout, r.stdout + r.stderr
    r = run("promtool", "test", "rules", RULES_TEST.name, check=False, cwd=RULES_TEST.parent)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_dashboard_panels_and_rules_on_a_real_prometheus(testbed, serve, prometheus):
    tb = testbed
    tb.iperf3_server()
    srv = serve(tb, "--counters", "software", "--miss-sampling", "software-copy", "--top-flows", "2")
    prom = prometheus(srv.port, [RULES])
    instance = f"127.0.0.1:{srv.port}"
    queries = [(p["title"], t["refId"], expand(t["expr"], instance, tb.if_rcv), needs_uncore(p))
               for p in panels() for t in p["targets"]]
    assert len(queries) >= 12
    traffic = subprocess.Popen(["ip", "netns", "exec", tb.ns_snd, "iperf3", "-c", tb.ip_rcv, "-P", "4", "-t", "60"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        empty = []

        def all_panels_have_data():
            empty[:] = [(t, r) for t, r, q, uncore in queries if not uncore and not prom.query(q)]
            return not empty

        wait_until(all_panels_have_data, timeout=60, what=f"data in every panel (still empty: {empty})")
        # The recording rules produce series too, and no rule fails to evaluate.
        for rec in ["ddioscope:packets:rate1m", "ddioscope:bits:rate1m", "ddioscope:stage_duration_seconds:p99_1m",
                    "ddioscope:attributed_miss_samples:rate1m"]:
            wait_until(lambda: prom.query(rec), timeout=20, what=f"the recording rule {rec}")
        groups = json.loads(http_get(prom.url + "/api/v1/rules")[2])["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) == 9 and all(r["health"] == "ok" for r in rules), rules
        # Ordinary testbed traffic: no alert fires, none is even pending.
        alerts = [(r["name"], r["state"]) for r in rules if r.get("type") == "alerting"]
        assert len(alerts) == 5 and all(st == "inactive" for _, st in alerts), alerts

        # Socket DDIO hit/miss needs the uncore PMU (the kernel's list of PMUs says whether there
        # is one): those panels are empty exactly when there is none, and the exporter says so.
        uncore_pmu = any(d.name.startswith("uncore_cha") for d in Path("/sys/bus/event_source/devices").iterdir())
        counters = prom.query(f'ddioscope_info{{instance="{instance}"}}')[0]["metric"]["counters"]
        assert (counters == "live") == uncore_pmu, (counters, uncore_pmu)
        for title, ref, q, uncore in queries:
            if uncore:
                assert bool(prom.query(q)) == uncore_pmu, (title, ref, counters)

        # The verdicts are a state set: one verdict at 1 per busy queue.
        verdicts = prom.query(f'ddioscope_model_verdict{{instance="{instance}"}}')
        per_queue = {}
        for v in verdicts:
            k = (v["metric"]["direction"], v["metric"]["queue"])
            per_queue[k] = per_queue.get(k, 0) + float(v["value"][1])
        assert per_queue and all(n == 1 for n in per_queue.values()), verdicts
        # Attribution from the software stand-in, labelled as such.
        info = prom.query(f'ddioscope_info{{instance="{instance}"}}')[0]["metric"]
        assert "stand-in" in info["miss_sampling"], info
    finally:
        traffic.kill()
        traffic.wait()


def scrape(url):
    status, _, body = http_get(url + "/metrics")
    assert status == 200
    return body


FLOW_LINE = re.compile(r'^ddioscope_flow_packets_total\{([^}]*)\} (\d+)$', re.M)


def rx_flow_series(body):
    out = {}
    for labels, v in FLOW_LINE.findall(body):
        if 'direction="rx"' in labels:
            out[labels] = int(v)
    return out


def intervals(body):
    return int(re.search(r"^ddioscope_intervals_total\{[^}]*\} (\d+)$", body, re.M).group(1))


def test_flow_cap_keeps_every_packet_in_exactly_one_series(testbed, serve):
    """--top-flows 2 with 7 TCP connections: at most 2 RX flow series and "other". Every
    series only grows while it exists; summed over every series' lifetime (polled faster
    than serve reads the flow table) they give the kernel's RX packet count."""
    tb = testbed
    tb.iperf3_server()
    before = tb.stats(tb.ns_rcv, tb.if_rcv)["rx_packets"]
    srv = serve(tb, "--top-flows", "2")
    closed, last, seen_other = 0, {}, False
    names_max = 0

    def poll():
        nonlocal closed, last, seen_other, names_max
        body = scrape(srv.url)
        cur = rx_flow_series(body)
        for k, v in last.items():
            if k not in cur or cur[k] < v:
                closed += v  # the series ended (left the set, or restarted on re-entry)
        last = cur
        named = [k for k in cur if 'proto="other"' not in k]
        names_max = max(names_max, len(named))
        seen_other |= len(named) < len(cur)
        return body

    traffic = subprocess.Popen(["ip", "netns", "exec", tb.ns_snd, "iperf3", "-c", tb.ip_rcv, "-P", "6", "-t", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while traffic.poll() is None:
            poll()
            time.sleep(0.05)
    finally:
        traffic.kill()
        traffic.wait()
    assert traffic.returncode == 0
    # The link is quiet now: wait for two flow readings (serve reads flows once a second).
    after = tb.stats(tb.ns_rcv, tb.if_rcv)["rx_packets"]
    start = intervals(poll())
    deadline = time.monotonic() + 15
    while intervals(poll()) < start + 9:
        assert time.monotonic() < deadline, "serve took no snapshots"
        time.sleep(0.05)
    body = poll()
    total = closed + sum(last.values())
    assert names_max <= 2 and seen_other, (names_max, last)
    # Against the exact per-queue count: flows are estimates from sampled skbs (a bulk TCP
    # flow's GRO skbs are nearly all sampled), summed over series that came and went (5 %).
    queues = sum(int(v) for v in re.findall(r'^ddioscope_packets_total\{[^}]*direction="rx"[^}]*\} (\d+)$', body, re.M))
    assert queues > 10000 and abs(total - queues) <= 0.05 * queues, (total, queues)
    # And the per-queue count against the kernel's interface counter (1 %).
    truth = after - before
    assert abs(queues - truth) <= 0.01 * truth, (queues, truth)


def test_stage_histograms_per_direction_or_off(testbed, serve):
    tb = testbed
    tb.iperf3_server()
    per_dir = serve(tb, "--stage-histograms", "per-direction")
    tb.iperf3("-t", "1")
    wait_until(lambda: "ddioscope_stage_duration_seconds_count" in scrape(per_dir.url), timeout=15,
               what="stage histograms")
    body = scrape(per_dir.url)
    counts = re.findall(r"^ddioscope_stage_duration_seconds_count\{([^}]*)\} (\d+)$", body, re.M)
    assert counts and all('queue="' not in labels for labels, _ in counts), counts
    # One series per direction and stage, at most; per-queue counters stay per queue.
    assert len(counts) <= 8 and len({l for l, _ in counts}) == len(counts)
    assert re.search(r'^ddioscope_packets_total\{[^}]*queue="\d+"\} [1-9]', body, re.M)
    assert 'stage_histograms="per-direction"' in body
    rc, err, _ = per_dir.stop()
    assert rc == 0, err

    off = serve(tb, "--stage-histograms", "off")
    tb.iperf3("-t", "1")
    wait_until(lambda: re.search(r'^ddioscope_packets_total\{[^}]*direction="rx"[^}]*\} [1-9]', scrape(off.url), re.M),
               timeout=15, what="packets counted")
    assert "ddioscope_stage_duration_seconds" not in scrape(off.url)
    rc, err, _ = off.stop()
    assert rc == 0, err
