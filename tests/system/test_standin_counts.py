"""Software stand-in samples are counted as samples in the attribution: their
period is ns of CPU time, not L3-miss events, so scaling by it would invent
miss counts. Truth: the report's own per-queue sample counts (l3miss)."""
from conftest import live_prog_ids, report_json, wait_until


def test_standin_attribution_reports_samples_not_misses(testbed, recorder):
    tb = testbed
    tb.iperf3_server()
    # Windows 1/4 of the time: the copy stand-in samples only inside them, and a copy at
    # 1 Gbit/s takes about 1 % of a CPU, so 1/32 left a few dozen samples on buffers.
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--miss-sampling", "software-copy", "--miss-period", "50000",
                   "--duty", "4")
    ids = set(rec.prog_ids)
    tb.iperf3("-t", "2", "-b", "1G")
    rc, _, err = rec.stop()
    assert rc == 0, err
    wait_until(lambda: not (ids & live_prog_ids()), what="programs to be unloaded")
    r = report_json(rec.out)
    m, a = r["l3miss"], r["attribution"]
    assert "stand-in" in m["source"] and a["stand_in"], m["source"]
    assert a["method"] == "address_join" and a["confidence"] != "insufficient", a

    # Each method's per-queue and per-flow "misses" are its sample counts as they are. Both
    # answer here: the copy stand-in's samples inside a copy carry an address (join), the
    # others are charged to the CPU's network work (context), thousands of each in 2 s.
    for method, key in (("address_join", "addr_join"), ("cpu_context", "cpu_ctx")):
        res = next(x for x in a["all"] if x["method"] == method)
        assert res["confidence"] != "insufficient", (method, res["notes"], m)
        samples = {(q["dir"], q["queue"]): q[key] for q in m["queues"]}
        got = {(q["dir"], q["queue"]): q["misses"] for q in res["queues"]}
        assert got and all(got[k] == samples[k] for k in got), (method, got, samples)
        assert sum(f["misses"] for f in res["flows"]) <= sum(got.values()), (method, res["flows"])
        assert any("(stand-in; not scaled to misses)" in n for n in res["notes"]), res["notes"]
        assert res.get("counts_are_samples") is True, res
        assert not any("× period" in n or "≈" in n for n in res["notes"]), res["notes"]
    assert a["queues"] == next(x for x in a["all"] if x["method"] == "address_join")["queues"]
