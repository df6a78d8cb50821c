"""`report` does not hold a recording's intervals in memory: peak RSS of `report`, `--json` and
`--html` on an hour-long recording the test builds (scripts/long-recording.py repeats the
committed testbed recording's intervals: 18,000 intervals, 337,200 packet records, 160 MB).
Peak RSS is deterministic enough to assert where a time is not."""
import subprocess
import sys

import pytest

from conftest import BIN, ROOT

# Measured at this commit on the hour built below: report 29.9 MB, --json 29.5 MB, --html
# 31.1 MB (the 2 s source: 8.7, 8.8, 16.0 MB); --intervals 16.7 MB, --csv 30.5 MB. The bound is the largest plus 30 % for the
# allocator's and SQLite's page cache's variation between builds and hosts: 40 MB. A report that
# kept the intervals' queue rows (18,000 × 8 queues) or the packet records in memory would
# pass it by tens of MB.
PEAK_RSS_BOUND_KB = 40_000


def peak_rss_kb(*args):
    """GNU time's count (`make deps` installs it): wait4's for a child of this process would
    include the pytest process's own, which a forked child carries into its exec."""
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *map(str, args)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, (args, p.stderr)
    return int(p.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hour(tmp_path_factory):
    out = tmp_path_factory.mktemp("long") / "hour.ddio"
    subprocess.run([sys.executable, str(ROOT / "scripts/long-recording.py"),
                    str(ROOT / "tests/fixtures/recordings/veth-tcp.ddio"), str(out), "--seconds", "3600"],
                   check=True, capture_output=True)
    return out


@pytest.mark.parametrize("form", ["text", "json", "html", "intervals", "csv"])
def test_report_of_an_hour_stays_small(hour, tmp_path, form):
    # --intervals and --csv write a row per queue per interval (144,000 of them here) as
    # the steps stream by: kept, they would pass the bound as the intervals' rows would.
    extra = {"text": [], "json": ["--json"], "html": ["--html", tmp_path / "r.html"],
             "intervals": ["--intervals", "-x", ","], "csv": ["--csv", tmp_path / "csv"]}[form]
    kb = peak_rss_kb(BIN, "report", hour, *extra)
    print(f"report {form} of an hour: peak RSS {kb / 1000:.1f} MB")
    assert kb <= PEAK_RSS_BOUND_KB, (form, kb)
