"""`ddioscope report --html` on a fresh testbed recording, opened in headless Chromium:
no console messages, nothing fetched from the network, the answer first and agreeing with
`recommend --json`, the per-queue verdicts and the attribution as `recommend --json` gives
them, every chart section in the rendered DOM, the per-queue table equal to the text
report's, and a screenshot (out/report.png)."""
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import BIN, ROOT, report_json, run
from test_recommend import with_rings

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
    """Tag counts, element ids, visible text, the cells of every table with an id, the text
    of every element with an id (ids in `texts`), and each element's attributes."""

    def __init__(self, text, texts=()):
        super().__init__()
        self.tags, self.ids, self.text, self.tables, self.attrs, self.heads = {}, set(), [], {}, [], {}
        self.texts = {i: [] for i in texts}
        self._open = []  # (tag, id) of the elements whose text is collected
        self._table, self._row, self._cell = None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.attrs.append((tag, a))
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if a.get("id"):
            self.ids.add(a["id"])
        if a.get("id") in self.texts:
            self._open.append((tag, a["id"], 0))
        elif self._open and self._open[-1][0] == tag:
            t, i, depth = self._open[-1]
            self._open[-1] = (t, i, depth + 1)
        if tag == "table":
            self._table = a.get("id")
            if self._table:
                self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if self._open and self._open[-1][0] == tag:
            t, i, depth = self._open[-1]
            if depth == 0:
                self._open.pop()
            else:
                self._open[-1] = (t, i, depth - 1)
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
        for _, i, _ in self._open:
            self.texts[i].append(data)
        if self._cell is not None:
            self._cell.append(data)


def text_table_rows(text, title):
    """Data rows of one queue table of the text report ("RX queues ..." / "TX queues ..."),
    each as its words joined by one space; queues without packets left out."""
    lines = text.splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith(title))
    rows = []
    for l in lines[i + 2:]:
        if not l.startswith("  ") or not l.strip() or l.strip().startswith("life:"):
            break
        if l.split()[1] not in ("idle", "0"):
            rows.append(" ".join(l.split()))
    return rows


def number(cell):
    """A table cell's count ("627.8k", "1.2M", "86") and its rounding half-unit; a dash (an
    idle queue's average size) is none."""
    if cell.strip() in ("-", "—"):
        return 0.0, 0.0
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


def text_of(dom):
    return " ".join(dom.text)


def answer_agrees_with_recommend(dom, path, *args):
    """The page's answer against `recommend --json` on the same recording and options: the
    same changes (or the same reasons for none), the queues its verdicts call leaky or at
    risk, its method and confidence. Returns recommend's answer."""
    adv = json.loads(run(BIN, "recommend", path, "--json", *args).stdout)
    recs = adv["recommendations"]
    # Words as the page shows them: a command's words are elements of their own, so the
    # text nodes are joined by a space that punctuation after an element does not have.
    words = lambda chunks: re.sub(r" ([,;.:)])", r"\1", " ".join(" ".join(chunks).split()))
    change = words(dom.texts["answer-change"])
    if recs:
        # A command of two lines is two code blocks: compared word by word.
        assert all(words([r["command"]]) in change for r in recs), (change, [r["command"] for r in recs])
        assert all(words([r["command"]]) in words(dom.text) and r["kind"] in text_of(dom) for r in recs), recs
    else:
        assert "nothing to run" in change and all(w in change for w in adv["no_change"]["reasons"]), (change, adv["no_change"])
        none = words(dom.texts["no-recommendations"])
        assert all(w in none for w in adv["no_change"]["reasons"] + adv["no_change"]["next_steps"]), none
    leaking = {a["data-queue"] for t, a in dom.attrs if t == "b" and "leak" in (a.get("class") or "")}
    want = {f"{v['dir']} {v['queue']}" for v in adv["verdicts"] if v["verdict"] in ("leaky", "at_risk")}
    assert leaking == want, (leaking, want)
    sure = next(a for t, a in dom.attrs if t == "b" and "data-method" in a)
    assert (sure["data-method"], sure["data-confidence"]) == (adv["attribution"]["method"], adv["attribution"]["confidence"])
    return adv


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
    dom = Dom(p.stdout, texts=("answer", "answer-leaking", "answer-change", "answer-confidence", "no-recommendations"))

    sections = {"summary", "answer", "verdicts", "verdicts-table", "attribution", "recommendations", "whatif", "whatif-ring",
                "whatif-ways", "evidence", "tiers", "queues", "latency", "rates", "counters", "counters-absent", "flows",
                "events", "queues-rx", "rates-rx"}
    assert sections <= dom.ids, sections - dom.ids
    # The answer first: before the verdicts, the attribution and every piece of evidence.
    order = [p.stdout.find(f'id="{i}"') for i in ("answer", "verdicts", "attribution", "recommendations", "evidence", "queues")]
    assert order == sorted(order), order

    # The answer agrees with `recommend --json`. veth reports no rings, so the recording as it
    # is gets no ring or way recommendation (on this host none at all: the page must give
    # recommend's reasons).
    adv = answer_agrees_with_recommend(dom, rec.out)
    # The same recording with a NIC's largest rings (8192 entries) and one DDIO way gets
    # recommendations: the page must give each one's command. Not 4096: this load's measured
    # residence times its rate can ask for 4096 entries of burst floor, and then no smaller
    # ring is on offer.
    ringed = with_rings(rec.out, 8192)
    ringed_html = tmp_path / "ringed.html"
    run(BIN, "report", ringed, "--html", ringed_html, "--ddio-ways", "1")
    p2, _ = chromium(ringed_html.as_uri(), "--dump-dom")
    assert p2.returncode == 0, p2.stderr[-2000:]
    ringed_dom = Dom(p2.stdout, texts=("answer", "answer-leaking", "answer-change", "answer-confidence", "no-recommendations"))
    assert answer_agrees_with_recommend(ringed_dom, ringed, "--ddio-ways", "1")["recommendations"]

    # The verdict section: one row per queue, with the verdict and reason recommend gives; a
    # reason the next queues share is given once, in the first row of their run.
    rows = dom.tables["verdicts-table"]
    verdicts = adv["verdicts"]
    assert [(r[0], r[1]) for r in rows] == [(f"{v['dir']} {v['queue']}", v["verdict"]) for v in verdicts]
    runs = [v["reason"] for i, v in enumerate(verdicts) if i == 0 or verdicts[i - 1]["reason"] != v["reason"]]
    # The last column, "why", only in the first row of a run.
    width = max(len(r) for r in rows)
    assert [r[-1] for r in rows if len(r) == width] == runs, rows
    # The attribution section: every queue's share as recommend gives it.
    att = dom.tables["attribution-queues"] if adv["attribution"]["queues"] else []
    # The page prints the share to 0.1 from the unrounded value, the JSON keeps 4 significant
    # digits: compare within the page's rounding, not by re-rounding the JSON's (25.85 → 25.9
    # where the page printed 25.849… as 25.8).
    want = adv["attribution"]["queues"]
    assert [r[0] for r in att] == [f"{q['dir']} {q['queue']}" for q in want], (att, want)
    for row, q in zip(att, want):
        assert row[1].endswith("%") and abs(float(row[1][:-1]) - q["share_pct"]) <= 0.05 + 1e-9 + 0.5e-4 * q["share_pct"], (row, q)

    # One histogram per queue x stage with data, one rate chart per direction with
    # traffic, two what-if curves.
    stage_ids = {f"lat-{q['dir']}-{q['queue']}-{s}" for q in r["queues"] for s in q["stages"]}
    assert stage_ids and stage_ids <= dom.ids, stage_ids - dom.ids
    dirs = {q["dir"] for q in r["queues"] if q["packets"] > 0}
    assert {f"rates-{d}" for d in dirs} <= dom.ids
    assert dom.tags.get("svg", 0) == len(stage_ids) + len(dirs) + 2, dom.tags
    assert dom.tags.get("polyline", 0) >= 2 and dom.tags.get("rect", 0) >= len(stage_ids)
    assert "model-only prediction" in text_of(dom)
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

    # The per-queue tables hold the wide text report's numbers, cell for cell.
    txt = run(BIN, "report", rec.out, "--wide").stdout
    for d in dirs:
        html_rows = [" ".join(row) for row in dom.tables[f"queues-{d}"] if row[1] != "0"]
        assert html_rows == text_table_rows(txt, f"{d.upper()} queues"), (d, html_rows)

    # The JSON of a live recording matches its documented schema too.
    import jsonschema
    schema = json.loads((ROOT / "docs/report.schema.json").read_text())
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(r))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:10]]

    OUT.mkdir(exist_ok=True)
    shot = OUT / "report.png"
    shot.unlink(missing_ok=True)
    p, _ = chromium(html.as_uri(), f"--screenshot={shot}", "--window-size=1280,2000", "--hide-scrollbars")
    assert p.returncode == 0, p.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    shutil.copy(html, OUT / "report.html")


# Run in a copy of the page only (the page itself has no script): for every command in code
# font, where the browser laid out each character; a line break anywhere but at a space
# splits the command inside a word (a flag at its hyphen, a path).
LAYOUT_PROBE = """<script>
addEventListener('load', () => {
  const broken = [], plain = [];
  for (const c of document.querySelectorAll('code')) {
    if (!/monospace/.test(getComputedStyle(c).fontFamily)) plain.push(c.textContent);
    const w = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
    let prev = null;
    while (w.nextNode()) {
      const t = w.currentNode;
      for (let i = 0; i < t.length; i++) {
        const r = document.createRange(); r.setStart(t, i); r.setEnd(t, i + 1);
        const box = r.getClientRects()[0];
        const ch = t.data[i];
        // A space the line broke at may have no box of its own: still a break at a space.
        if (!box) { if (prev) prev.ch = ch; continue; }
        if (prev && box.top > prev.top + 2 && prev.ch !== ' ' && ch !== ' ') broken.push(c.textContent);
        prev = {top: box.top, ch};
      }
    }
  }
  const next = [...document.querySelectorAll('#answer dd')].filter(
    d => /ddioscope |ethtool |ip netns /.test(d.textContent) && !d.querySelector('code')).map(d => d.textContent);
  document.body.setAttribute('data-probe', JSON.stringify({broken, plain, next,
    codes: document.querySelectorAll('#answer code').length,
    width: document.documentElement.getBoundingClientRect().width}));
});
</script></body>"""


def test_answer_commands_are_code_and_whole_at_420px(tmp_path):
    """At a phone's 420 px the answer's commands are in code font and wrap only between
    words: the fixture's answer (a Change command), and the fixture with two RX queues of
    equal load left on a host without DDIO (nothing to run: Next lines with a `ddioscope
    simulate` command)."""
    import sqlite3
    shutil.copy(ROOT / "tests/fixtures/recordings/veth-tcp.ddio", tmp_path / "run.ddio")
    shutil.copy(ROOT / "tests/fixtures/recordings/veth-tcp.ddio", tmp_path / "balanced-run-of-tuesday.ddio")
    # The fixture's veth on an AMD host has nothing to run: made an Intel host's ice device
    # with rings and an RSS table, its answer has an `ethtool` command.
    db = sqlite3.connect(tmp_path / "run.ddio")
    db.executescript("UPDATE meta SET value = json_set(value, '$.driver', 'ice', '$.rx_ring', 4096, "
                     "'$.tx_ring', 4096, '$.rx_ring_max', 8192, '$.rss_table', 128) WHERE key = 'iface';"
                     "UPDATE meta SET value = json_set(value, '$.cpu_vendor', 'GenuineIntel') WHERE key = 'host';")
    db.commit()
    db.close()
    db = sqlite3.connect(tmp_path / "balanced-run-of-tuesday.ddio")
    db.executescript("DELETE FROM queue_intervals WHERE dir = 'rx' AND queue IN (0, 1);"
                     "DELETE FROM stage_stats WHERE dir = 'rx' AND queue IN (0, 1);")
    db.commit()
    db.close()
    for name, words in (("run.ddio", "ethtool"), ("balanced-run-of-tuesday.ddio", "ddioscope simulate")):
        page = run(BIN, "report", name, "--html", "-", cwd=tmp_path).stdout
        probe = tmp_path / "probe.html"
        # Headless Chromium keeps its window at least 500 px wide: the page is laid out 420 px
        # wide by its root element instead (it has no media query a viewport would trigger).
        probe.write_text(page.replace("</head>", "<style>html{width:420px}</style></head>", 1)
                         .replace("</body>", LAYOUT_PROBE, 1))
        p, _ = chromium(probe.as_uri(), "--dump-dom", "--window-size=420,3000", "--virtual-time-budget=5000")
        assert p.returncode == 0, p.stderr[-2000:]
        m = re.search(r'data-probe="([^"]*)"', p.stdout)
        assert m, p.stdout[:2000]
        r = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                       .replace("&#39;", "'").replace("&amp;", "&"))
        assert r["width"] == 420, r
        assert r["codes"] >= 1 and r["broken"] == [] and r["plain"] == [] and r["next"] == [], (name, r)
        assert words in re.sub(r"<[^>]+>", "", page), name
