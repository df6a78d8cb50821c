"""`report --json` and `recommend --json` against their documented schema (docs/report.schema.json),
on the fixture recording and on variants of it built in SQL: an Intel host with a NIC that reports
its rings, and a recording without an LLC description (no model). Also: `report` with no FILE
reads ddioscope.ddio, and --from/--to select a window."""
import json
import shutil
import sqlite3

import jsonschema
import pytest

from conftest import BIN, ROOT, run

FIXTURE = ROOT / "tests/fixtures/recordings/veth-tcp.ddio"
SCHEMA = json.loads((ROOT / "docs/report.schema.json").read_text())

VARIANTS = {
    "fixture": "",
    "intel-nic": """
        UPDATE meta SET value = json_set(value, '$.cpu_vendor', 'GenuineIntel', '$.cpu_model', 'Intel(R) Xeon(R) Gold 6140')
            WHERE key = 'host';
        UPDATE meta SET value = json_set(value, '$.rx_ring', 4096, '$.tx_ring', 4096, '$.rx_ring_max', 8192, '$.rss_table', 128,
                                         '$.driver', 'ice') WHERE key = 'iface';
        DELETE FROM meta WHERE key IN ('platform', 'platform_detection', 'counters_notes');""",
    # An Intel host whose LLC was not recorded (a host without DDIO is modelled as the
    # Intel stand-in whatever its LLC).
    "no-llc": """
        UPDATE meta SET value = json_set(value, '$.cpu_vendor', 'GenuineIntel') WHERE key = 'host';
        DELETE FROM meta WHERE key = 'geometry';
        UPDATE meta SET value = json_remove(value, '$.llc') WHERE key = 'host';""",
}


def variant(tmp_path, name):
    rec = tmp_path / f"{name}.ddio"
    shutil.copy(FIXTURE, rec)
    with sqlite3.connect(rec) as c:
        c.executescript(VARIANTS[name])
    return rec


def validator(ref=None):
    schema = SCHEMA if ref is None else {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{ref}"}
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_json_matches_its_schema(tmp_path, name):
    rec = variant(tmp_path, name)
    report = json.loads(run(BIN, "report", rec, "--json").stdout)
    errors = sorted(validator().iter_errors(report), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    assert report["schema_version"] == SCHEMA["properties"]["schema_version"]["const"]
    if name == "no-llc":
        assert "error" in report["model"] and report["verdicts"] == []
        assert report["answer"]["model_unavailable"] and report["answer"]["no_change"]["reasons"]
        return
    advice = json.loads(run(BIN, "recommend", rec, "--json").stdout)
    errors = list(validator("advice").iter_errors(advice))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    # One answer: the report's and recommend's agree.
    assert advice["answer"] == report["answer"]
    assert [r["command"] for r in advice["recommendations"]] == [c["command"] for c in report["answer"]["changes"]]


def test_the_schema_catches_a_wrong_report():
    """The checks above can fail: a renamed key, a Debug-spelled enum, a missing answer."""
    report = json.loads(run(BIN, "report", FIXTURE, "--json").stdout)
    assert validator().is_valid(report)
    bad = json.loads(json.dumps(report))
    bad["queues"][0]["pps"] = bad["queues"][0].pop("packets_per_s")
    assert not validator().is_valid(bad)
    bad = json.loads(json.dumps(report))
    bad["verdicts"][0]["verdict"] = "Leaky"
    assert not validator().is_valid(bad)
    bad = json.loads(json.dumps(report))
    del bad["answer"]
    assert not validator().is_valid(bad)


def test_report_reads_the_default_recording(tmp_path):
    """`ddioscope report` with no FILE reads ddioscope.ddio, the file `record` writes by default."""
    shutil.copy(FIXTURE, tmp_path / "ddioscope.ddio")
    p = run(BIN, "report", "--json", cwd=tmp_path)
    assert json.loads(p.stdout)["meta"]["file"] == "ddioscope.ddio"
    p = run(BIN, "report", cwd=tmp_path / "..", check=False)
    assert p.returncode == 1 and "ddioscope.ddio: no such file" in p.stderr


def test_from_to_selects_a_window():
    whole = json.loads(run(BIN, "report", FIXTURE, "--json").stdout)
    part = json.loads(run(BIN, "report", FIXTURE, "--json", "--from", "1", "--to", "2s").stdout)
    assert whole["window"]["whole"] and not part["window"]["whole"]
    assert part["meta"]["intervals"] == 5 and abs(part["meta"]["duration_s"] - 1.0) < 0.01
    rx = lambda r: sum(q["packets"] for q in r["queues"] if q["dir"] == "rx")
    assert 0 < rx(part) < rx(whole)
    p = run(BIN, "report", FIXTURE, "--from", "60", check=False)
    assert p.returncode == 1 and "no interval" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run(BIN, "report", FIXTURE, "--from", "soon", check=False)
    assert p.returncode == 1 and "not a time" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
