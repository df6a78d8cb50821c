"""`ddioscope bench-floor`, the measurement floor of `make bench`: empty and
device-read programs on the recorder's hot tracepoints, with the recorder's
attach type, gone when the process ends however it ends."""
import json
import select
import signal
import subprocess

from conftest import BIN, live_link_prog_ids, live_prog_ids, run, wait_until


def start_floor(tb, *args):
    p = subprocess.Popen([str(BIN), "bench-floor", "-i", tb.if_rcv, "--netns", tb.ns_rcv, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], 30)
    if not ready:
        p.kill()
        raise AssertionError("bench-floor did not attach in time")
    line = p.stdout.readline()
    if not line:
        raise AssertionError(f"bench-floor exited before attaching: {p.stderr.read()}")
    return p, json.loads(line)


def test_floor_matches_the_recorders_hooks_and_detaches(testbed, recorder):
    tb = testbed
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv)
    progs = rec.attached["progs"]
    # Every attached hook is listed with its tracepoint (the bench lines floors up by it).
    assert len(progs) == rec.attached["hooks"] and {p["id"] for p in progs} <= set(rec.prog_ids), (progs, rec.attached)
    # Tier 0's tcx counter has no tracepoint flavour; every tracepoint hook has the same one.
    rec_flavor = {p["tracepoint"]: p["flavor"] for p in progs}
    (flavor,) = {f for f in rec_flavor.values() if f}
    hot = {"napi_gro_receive_entry", "napi_gro_receive_exit", "netif_receive_skb", "skb_copy_datagram_iovec",
           "consume_skb", "kfree_skb", "net_dev_queue", "net_dev_start_xmit", "net_dev_xmit", "napi_poll",
           "tcx_ingress"}
    for sig in (signal.SIGINT, signal.SIGKILL):
        p, att = start_floor(tb, "--hooks", flavor.replace("_", "-"))
        try:
            assert att["event"] == "attached" and not att["skipped"], att
            ids = set(att["prog_ids"])
            assert ids and ids <= live_prog_ids()
            by_tp = {}
            for f in att["progs"]:
                assert f["flavor"] == rec_flavor[f["tracepoint"]], (f, rec_flavor)
                by_tp.setdefault(f["tracepoint"], set()).add(f["name"][0])
            # An empty program on every hot tracepoint the recorder hooks.
            assert {tp for tp, kinds in by_tp.items() if "e" in kinds} == hot & set(rec_flavor), by_tp
            p.send_signal(sig)
            out, err = p.communicate(timeout=30)
            if sig == signal.SIGINT:
                assert p.returncode == 0, err
                assert json.loads(out.splitlines()[-1]) == {"event": "done"}, out
            wait_until(lambda: not (ids & live_prog_ids()), what="floor programs to be unloaded")
            assert not (ids & live_link_prog_ids())
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert set(rec.prog_ids) <= live_prog_ids()


def test_floor_bad_interface_fails_in_one_line(testbed):
    p = run(BIN, "bench-floor", "-i", "nosuchif0", "--netns", testbed.ns_rcv, "-d", "1", check=False)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stdout == ""
