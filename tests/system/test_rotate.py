"""`record --rotate`: a new file every period, each a complete recording, and `report` over
the files as one. The truth: the receiver's interface statistics bracketed around the run,
and a second recorder writing the same traffic into one file."""
import json
import signal

from conftest import BIN, report_json, run
from test_exact import diff, quiet_testbed, wait_still


def queue_counts(report):
    return {(q["dir"], q["queue"]): (q["packets"], q["bytes"]) for q in report["queues"] if q["packets"]}


def test_rotated_files_report_alone_and_as_one(testbed, recorder, tmp_path):
    tb = testbed
    quiet_testbed(tb)
    tb.iperf3_server()
    wait_still(tb)
    base = tmp_path / "run.ddio"
    rot = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--rotate", "2s", out=base)
    one = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, out=tmp_path / "one.ddio")
    k0 = tb.stats(tb.ns_rcv, tb.if_rcv)
    tb.iperf3("-t", "7")
    wait_still(tb)
    k1 = tb.stats(tb.ns_rcv, tb.if_rcv)
    rc, out, err = rot.stop(signal.SIGINT)
    assert rc == 0, err
    rc1, _, err1 = one.stop(signal.SIGINT)
    assert rc1 == 0, err1
    k2 = tb.stats(tb.ns_rcv, tb.if_rcv)
    # Nothing crossed the link while the recorders stopped.
    assert k1 == k2, (k1, k2)
    truth = diff(k0, k1)

    files = sorted(tmp_path.glob("run-*.ddio"))
    assert len(files) >= 3, files
    # Each close and open was said, in order, and names the files on disk.
    events = [json.loads(l) for l in out.splitlines()]
    rotated = [e for e in events if e.get("event") == "rotated"]
    assert len(rotated) == len(files) - 1, events
    assert [e["closed"] for e in rotated] + [rotated[-1]["opened"]] == [str(f) for f in files]
    assert events[-1]["event"] == "done" and events[-1]["files"] == [str(f) for f in files]

    # Each file reports alone, complete.
    per_file = []
    for f in files:
        r = report_json(f)
        assert r["meta"]["complete"], (f, r["meta"])
        per_file.append(queue_counts(r))
    summed = {}
    for c in per_file:
        for k, (p, b) in c.items():
            sp, sb = summed.get(k, (0, 0))
            summed[k] = (sp + p, sb + b)

    # The files as one, through a pattern ddioscope expands itself (quoted: no shell here).
    rep = run(BIN, "report", tmp_path / "run-*.ddio", "--json")
    assert f"{len(files)} files read as one recording" in rep.stderr, rep.stderr
    whole = queue_counts(json.loads(rep.stdout))
    assert whole == summed, (whole, summed)
    rx = sum(p for (d, _), (p, _) in whole.items() if d == "rx")
    tx = sum(p for (d, _), (p, _) in whole.items() if d == "tx")
    print(f"{len(files)} files; rx {rx} tx {tx} packets; kernel {truth}")
    assert (rx, tx) == (truth["rx_packets"], truth["tx_packets"]), (rx, tx, truth)
    # The same traffic written into one file reports the same counts.
    assert queue_counts(report_json(tmp_path / "one.ddio")) == whole
    # The text report reads them too.
    text = run(BIN, "report", *files)
    assert "ddioscope report" in text.stdout, text.stdout


def test_recordings_of_two_interfaces_are_refused_in_one_line(testbed, tmp_path):
    tb = testbed
    a, b = tmp_path / "rcv.ddio", tmp_path / "snd.ddio"
    run(BIN, "record", "-i", tb.if_rcv, "--netns", tb.ns_rcv, "-d", "1", "-o", a)
    run(BIN, "record", "-i", tb.if_snd, "--netns", tb.ns_snd, "-d", "1", "-o", b)
    r = run(BIN, "report", a, b, check=False)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "snd.ddio" in lines[0] and "report them apart" in lines[0], r.stderr
    assert r.stdout == ""
