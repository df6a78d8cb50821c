"""`ddioscope report --html` on a fresh testbed recording, opened in headless Chromium:
no console messages, nothing fetched from the network, every chart section in the
rendered DOM, the per-queue table equal to the text report, and a screenshot
(out/report.png)."""
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import BIN, ROOT, report_json, run

OUT = ROOT / "out"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(url, *args, timeout=120):
    """Headless Chromium on `url` with a throw-away profile. The resolver maps every
    host to NOTFOUND, so neither the page nor the browser's own background services
    reach the network; the net log still records each request that was attempted."""
    if not CHROMIUM:
        pytest.fail("chromium is not installed: run `make deps`")
    prof = Path(tempfile.mkdtemp(prefix="ddio-chromium-"))
    netlog = prof / "netlog.json"
    try:
        p = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={prof}", "--host-resolver-rules=MAP * ~NOTFOUND",
             f"--log-net-log={netlog}", "--enable-logging=stderr", "--v=0", *args, url],
            capture_output=True, text=True, timeout=timeout)
        log = json.loads(netlog.read_text()) if netlog.exists() else {"events": []}
    finally:
        shutil.rmtree(prof, ignore_errors=True)
    return p, log


def page_fetches(netlog):
    """URLs the page itself asked for beyond file://. Page requests carry the page's
    (file://) site in their network isolation key; the browser's own background
    requests do not."""
    urls = set()
    for e in netlog.get("events", []):
        p = e.get("params") or {}
        url, nik = p.get("url", ""), p.get("network_isolation_key", "")
        if url and nik.startswith("file://") and not url.startswith("file://"):
            urls.add(url)
    return urls


def console_lines(stderr):
    # The page has no script, so any console message at all (Chromium logs them as
    # INFO:CONSOLE) is an error in the page.
    return [l for l in stderr.splitlines() if ":CONSOLE" in l or "Uncaught" in l]


class Dom(HTMLParser):
    """Tag counts, element ids, visible text and the cells of every table with an id."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.ids, self.text, self.tables, self.heads = {}, set(), [], {}, {}
        self._table, self._row, self._cell = None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "table":
            self._table = a.get("id")
            if self._table:
                self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._table and self._row and self._row[0] != "queue":
                self.tables[self._table].append(self._row)
            elif self._table and self._row:
                self.heads[self._table] = self._row
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def text_table_rows(text, title):
    """Data rows of one queue table of the text report ("RX queues" / "TX queues")."""
    lines = text.splitlines()
    i = lines.index(title)
    rows = []
    for l in lines[i + 2:]:
        if not l.startswith("  ") or not l.strip():
            break
        rows.append(l.split())
    return rows


def number(cell):
    """A table cell's count ("627.8k", "1.2M", "86") and its rounding half-unit."""
    m = re.fullmatch(r"([\d.]+)([kMG]?)", cell.strip())
    assert m, cell
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
    decimals = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
    return float(m.group(1)) * scale, 0.5 * scale * 10 ** -decimals


def queue_table(dom, direction):
    """{queue: {column: cell}} of a direction's per-queue table, by its header names (any
    table whose id names the direction and whose header has "queue" and "packets")."""
    for tid, head in dom.heads.items():
        if direction in tid.split("-") and "queue" in head and "packets" in head:
            return {int(row[0]): dict(zip(head, row)) for row in dom.tables[tid]}
    raise AssertionError(f"no {direction} queue table in {sorted(dom.heads)}")


def test_detectors_catch_a_bad_page(tmp_path):
    """The console and network checks below do see a script error and a fetch."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="https://example.invalid/a.png">'
                   '<script>console.error("boom"); undefinedFn();</script></body></html>')
    p, log = chromium(bad.as_uri(), "--dump-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    assert any("Uncaught" in l for l in console_lines(p.stderr)), p.stderr[-2000:]
    assert "https://example.invalid/a.png" in page_fetches(log)


def test_html_report_in_chromium(testbed, recorder, tmp_path):
    tb = testbed
    tb.iperf3_server()
    # No counters: the counters section must then say why, the same on every host.
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--interval", "100", "--counters", "off")
    k0, q0 = tb.stats(tb.ns_rcv, tb.if_rcv), tb.rx_queue_packets()
    tb.iperf3("-P", "4", "-t", "2")
    k1, q1 = tb.stats(tb.ns_rcv, tb.if_rcv), tb.rx_queue_packets()
    rc, _, err = rec.stop()
    assert rc == 0, err
    r = report_json(rec.out)

    html = tmp_path / "report.html"
    p = run(BIN, "report", rec.out, "--html", html)
    assert p.stdout == "" and html.stat().st_size > 10_000
    # Existing output: refused in one line, left alone; --force overwrites.
    before = html.read_bytes()
    p = run(BIN, "report", rec.out, "--html", html, check=False)
    assert p.returncode == 1 and "--force" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert html.read_bytes() == before
    run(BIN, "report", rec.out, "--html", html, "--force")

    page = html.read_text()
    for scheme in ("http://", "https://"):
        assert page.count(scheme) == page.count('xmlns="' + scheme), "URLs in the page"
    assert "<script" not in page

    p, log = chromium(html.as_uri(), "--dump-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    assert console_lines(p.stderr) == []
    assert page_fetches(log) == set()
    dom = Dom(p.stdout)

    sections = {"summary", "queues", "latency", "rates", "counters", "counters-absent", "whatif",
                "whatif-ring", "whatif-ways", "recommendations", "flows", "events", "queues-rx", "rates-rx"}
    assert sections <= dom.ids, sections - dom.ids
    # One histogram per queue x stage with data, one rate chart per direction with
    # traffic, two what-if curves.
    stage_ids = {f"lat-{q['dir']}-{q['queue']}-{s}" for q in r["queues"] for s in q["stages"]}
    assert stage_ids and stage_ids <= dom.ids, stage_ids - dom.ids
    dirs = {q["dir"] for q in r["queues"] if q["packets"] > 0}
    assert {f"rates-{d}" for d in dirs} <= dom.ids
    assert dom.tags.get("svg", 0) == len(stage_ids) + len(dirs) + 2, dom.tags
    assert dom.tags.get("polyline", 0) >= 2 and dom.tags.get("rect", 0) >= len(stage_ids)
    text = " ".join(dom.text)
    assert "model-only prediction" in text
    # The cards are the recommendations `recommend` gives for the same recording.
    recs = json.loads(run(BIN, "recommend", rec.out, "--json").stdout)["recommendations"]
    if recs:
        assert all(r["command"] in text and r["kind"] in text for r in recs), recs
    else:
        assert "No recommendations: the model finds nothing to change" in text
    rx_pk = sum(q["packets"] for q in r["queues"] if q["dir"] == "rx")
    assert rx_pk > 10000

    # The RX queue table against the kernel: each queue's packets against veth's own per-queue
    # counters, and packets × average size against the interface's byte count (1 %, plus the
    # cells' rounding and 10 packets for the edges of the recording).
    table = queue_table(dom, "rx")
    got_pk, got_by, slack_by = 0.0, 0.0, 0.0
    for q, n in ((q, q1[q] - q0.get(q, 0)) for q in q1):
        if n == 0 and q not in table:
            continue
        pk, half = number(table[q]["packets"])
        size, size_half = number(table[q]["avg B"])
        assert abs(pk - n) <= 0.01 * n + half + 10, (q, table[q], n)
        got_pk, got_by, slack_by = got_pk + pk, got_by + pk * size, slack_by + pk * size_half + half * size
    kpk, kby = k1["rx_packets"] - k0["rx_packets"], k1["rx_bytes"] - k0["rx_bytes"]
    assert kpk > 10000 and abs(got_pk - kpk) <= 0.01 * kpk + 10 * len(table) + sum(number(r["packets"])[1] for r in table.values()), (got_pk, kpk)
    assert abs(got_by - kby) <= 0.01 * kby + slack_by, (got_by, kby)

    # The per-queue tables hold the text report's numbers, cell for cell.
    txt = run(BIN, "report", rec.out).stdout
    for d in dirs:
        want = [[c.replace("us", "µs") for c in row] for row in text_table_rows(txt, f"{d.upper()} queues")]
        assert dom.tables[f"queues-{d}"] == want, (d, dom.tables[f"queues-{d}"], want)

    OUT.mkdir(exist_ok=True)
    shot = OUT / "report.png"
    shot.unlink(missing_ok=True)
    p, _ = chromium(html.as_uri(), f"--screenshot={shot}", "--window-size=1280,2000", "--hide-scrollbars")
    assert p.returncode == 0, p.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    shutil.copy(html, OUT / "report.html")
