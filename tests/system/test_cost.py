"""What the default recorder costs, counted in program invocations (kernel.bpf_stats_enabled
counts every run of every program exactly, whatever the host's speed): none all the time for
another device's packets, and a stated bound per packet of the recorded device."""
import json
import subprocess
import uuid

import pytest

from conftest import Bpftrace, Testbed, recording_meta, run

# The default's detail windows run 1/32 of the time.
DUTY = 32
# The span steady_invocations measures, in seconds (50 intervals of 100 ms).
SPAN_S = 5.0
# The default's run budget (`--run-budget`): the programs run at most this many times per
# packet of the device on average; drawn windows wait while they have run more.
RUN_BUDGET = 0.08


@pytest.fixture
def bpf_stats():
    was = run("sysctl", "-n", "kernel.bpf_stats_enabled").stdout.strip()
    run("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
    try:
        yield
    finally:
        run("sysctl", "-qw", f"kernel.bpf_stats_enabled={was or 0}", check=False)


def run_counts(ids):
    by = {p["id"]: p.get("run_cnt", 0) for p in json.loads(run("bpftool", "prog", "show", "-j").stdout)}
    return {i: by.get(i, 0) for i in ids}


def invocations(rec, load):
    """Each program's runs while `load` runs, and the kernel's count of drops meanwhile
    (bpftrace)."""
    ids = [p["id"] for p in rec.attached["progs"]]
    # The oracle's count brackets the programs': every drop they saw, it saw.
    with Bpftrace("tracepoint:skb:kfree_skb { @n = count(); }") as drops:
        before = run_counts(ids)
        load()
        after = run_counts(ids)
    return {i: after[i] - before[i] for i in ids}, drops.maps.get("@n", {}).get("", 0)


def steady_invocations(rec, tb, load, warm=30, span=50):
    """Each program's runs, the kernel's drops and the recorded interface's statistics over
    `span` intervals of the recorder's, taken once it has written `warm` intervals under the
    load (iperf3 `load` from the sender, in the background): the windows opened at once at
    the start (the first, learning which queue a NAPI instance serves; those for queues not yet
    timed) are the start's, not the steady state's."""
    ids = [p["id"] for p in rec.attached["progs"]]
    seconds = int((warm + span) * 0.1) + 4
    client = subprocess.Popen([*tb.snd, "iperf3", "-c", tb.ip_rcv, "-t", str(seconds), *load],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        intervals = lambda n: [rec._read_line(10) for _ in range(n)]
        intervals(warm)
        with Bpftrace("tracepoint:skb:kfree_skb { @n = count(); }") as drops:
            before, k0 = run_counts(ids), tb.stats(tb.ns_rcv, tb.if_rcv)
            intervals(span)
            after, k1 = run_counts(ids), tb.stats(tb.ns_rcv, tb.if_rcv)
        assert client.poll() is None, "the load ended before the span did"
    finally:
        client.wait(timeout=seconds + 30)
    return {i: after[i] - before[i] for i in ids}, drops.maps.get("@n", {}).get("", 0), k0, k1


def classified(rec, runs):
    """(hook, scope, when, runs) of each program, as the recording says it ran at the end (a
    direction whose driver counters were found to miss a path has its program on for good)."""
    plan = json.loads(recording_meta(rec.out)["hook_plan"])
    assert {h["prog_id"] for h in plan} == set(runs), (plan, runs)
    return [(h["hook"], h["scope"], h["when"], runs[h["prog_id"]]) for h in plan]


@pytest.mark.parametrize("detail", ["windows", "counts"])
def test_no_program_runs_all_the_time_for_another_devices_packets(recorder, bpf_stats, detail):
    """The recorded device (veth's own offloads, the CNI way) idle, a busy pair beside it
    (iperf3 TCP -P 4): no program that runs all the time runs for the neighbour's packets,
    but the drop counter, once per drop (at most the kernel's own count of kfree_skb events);
    the window programs at most 1/duty of each host-wide hook's share (here none: an idle
    device's windows are let pass). The default and `--detail counts` alike."""
    recorded = Testbed("t" + uuid.uuid4().hex[:8], shape="default")
    busy = Testbed("t" + uuid.uuid4().hex[:8])
    try:
        busy.iperf3_server()
        rec = recorder("-i", recorded.if_rcv, "--netns", recorded.ns_rcv, "--detail", detail)
        before = busy.stats(busy.ns_rcv, busy.if_rcv)
        runs, drops = invocations(rec, lambda: busy.iperf3("-t", "3", "-P", "4"))
        after = busy.stats(busy.ns_rcv, busy.if_rcv)
        rc, _, err = rec.stop()
        assert rc == 0, err
    finally:
        recorded.down()
        busy.down()
    packets = after["rx_packets"] - before["rx_packets"]
    assert packets > 10_000, packets
    hooks = classified(rec, runs)
    always = [(h, n) for h, scope, when, n in hooks if when == "always" and scope == "host"]
    # Not even kfree_skb: it runs in the windows, as the other host-wide hooks do.
    assert all(n == 0 for h, n in always), always
    windowed = [(h, n) for h, _, when, n in hooks if when == "windows"]
    assert sum(n for _, n in windowed) <= packets * len(windowed) / DUTY, (windowed, packets)


@pytest.mark.parametrize("shape,detail", [("tuned", "windows"), ("default", "windows"), ("rootpeer", "windows"),
                                          ("default", "counts")])
def test_the_defaults_invocations_per_recorded_packet(recorder, bpf_stats, shape, detail):
    """The recorded device busy (iperf3 TCP -P 4), 5 s of it once the recorder has run 3 s
    under it: all the time, no program but the drop
    counter's, once per drop; in the windows, at most each hook's run per packet for 1/duty
    of the time, twice over (the drain after each window, and windows opened at once for a
    busy queue not timed yet); and every program together at most the run budget per packet.
    Packets are the interface's own RX and TX counts. Before TX,
    RX and NAPI polls moved into the windows where the driver's counters miss a path, a veth
    with its own offloads ran 1.55 programs all the time per packet. `--detail counts` is held
    to the same bounds: its programs run in the same windows (it ran 2.58 programs per packet
    of such a veth all the time when it had none)."""
    tb = Testbed("t" + uuid.uuid4().hex[:8], shape=shape)
    try:
        tb.iperf3_server()
        rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--interval", "100", "--detail", detail)
        runs, drops, before, after = steady_invocations(rec, tb, ["-P", "4"])
        rc, _, err = rec.stop()
        assert rc == 0, err
    finally:
        tb.down()
    rx = after["rx_packets"] - before["rx_packets"]
    packets = rx + after["tx_packets"] - before["tx_packets"]
    assert rx > 10_000, rx
    hooks = classified(rec, runs)
    always = [(h, scope, n) for h, scope, when, n in hooks if when == "always"]
    device = sum(n for _, scope, n in always if scope == "device")
    host = [(h, n) for h, scope, n in always if scope == "host"]
    assert device == 0, (always, rx)
    assert all(n == 0 for h, n in host if h != "kfree_skb"), host
    assert sum(n for h, n in host if h == "kfree_skb") <= drops, (host, drops)
    windowed = [(h, n) for h, _, when, n in hooks if when == "windows"]
    hooks = len(windowed)
    per_packet = sum(n for _, n in windowed) / packets
    print(f"{shape}: {packets} packets; all the time {device / packets:.3f} device + "
          f"{sum(n for _, n in host) / packets:.4f} host per packet; windows {per_packet:.3f} per packet ({hooks} programs)")
    assert per_packet <= 2 * hooks / DUTY, (windowed, packets)
    # The budget holds every program's runs, the drop counter's too: over the span, at most
    # its share of the packets, the one cycle's credit it banks (a second of 5), and the one
    # window that may start on the last of it (each a few per cent of the span's packets).
    total = sum(n for *_, n in classified(rec, runs))
    print(f"{shape}: every program {total / packets:.3f} runs per packet (budget {RUN_BUDGET})")
    assert total / packets <= RUN_BUDGET * (1 + 1 / SPAN_S) + 0.03, (total, packets)
    meta = recording_meta(rec.out)
    assert float(meta["window_run_budget"]) == RUN_BUDGET, meta
    # A busy device's windows are cut to about `--window-packets` (the unit tests of
    # session::windows check the cut). What the cut saves in runs is not asserted here: each
    # window's programs also run through their attach and detach, which wait out RCU grace
    # periods as long as the host makes them, so runs per packet at a given cut are a time.
    # The budget above is what bounds them.
