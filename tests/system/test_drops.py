"""Drops are charged to the recorded interface only: checked against the
receiver namespace's own UDP NoPorts counter while another namespace, whose
veth has the same interface index, drops many more packets."""
import sys

from conftest import BIN, Testbed, report_json, run

SEND_UDP = "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n" \
           "for _ in range(int(sys.argv[2])): s.sendto(b'x'*100,(sys.argv[1],9))"


def no_ports(tb):
    """Udp NoPorts of the receiver namespace (/proc/net/snmp is per namespace)."""
    lines = [l.split() for l in tb.ns(tb.ns_rcv, "cat", "/proc/net/snmp").stdout.splitlines() if l.startswith("Udp:")]
    return int(lines[1][lines[0].index("NoPorts")])


def ifindex(tb):
    return int(tb.ns(tb.ns_rcv, "cat", f"/sys/class/net/{tb.if_rcv}/ifindex").stdout)


def blast_closed_port(tb, n):
    tb.ns(tb.ns_snd, sys.executable, "-c", SEND_UDP, tb.ip_rcv, str(n))


def test_drops_in_another_namespace_with_the_same_ifindex_are_not_ours(testbed, recorder):
    tb = testbed
    other = Testbed(tb.name + "o")
    try:
        # The case this guards: per-namespace interface indexes collide.
        assert ifindex(other) == ifindex(tb)
        # Drops counted at every drop (--detail counts: the default counts them in the
        # detail windows only and estimates the rest, see the test below).
        rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--detail", "counts")
        own0, other0 = no_ports(tb), no_ports(other)
        blast_closed_port(other, 3000)
        blast_closed_port(tb, 400)
        own, foreign = no_ports(tb) - own0, no_ports(other) - other0
        rc, _, err = rec.stop()
    finally:
        other.down()
    assert rc == 0, err
    assert own == 400 and foreign == 3000, (own, foreign)
    r = report_json(rec.out)
    reasons = {d["name"]: d["count"] for d in r["drops"]["reasons"]}
    assert reasons.get("NO_SOCKET") == own, r["drops"]
    rx = [q for q in r["queues"] if q["dir"] == "rx"]
    assert sum(q["drops"] for q in rx) >= own
    for q in rx:
        assert q["drops"] <= q["packets"], q


PACED_UDP = "import socket,sys,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n" \
            "for _ in range(int(sys.argv[2])):\n s.sendto(b'x'*100,(sys.argv[1],9)); time.sleep(0.001)"


def test_default_drops_are_estimated_from_the_windows_and_say_so(testbed, recorder):
    """kfree_skb runs in the detail windows only by default. A steady stream to a closed port
    (every datagram dropped, about 1000 a second for 3 s) with a window every fourth of the
    time: the windows see the rate, the estimate is the kernel's count (NoPorts) within 10 %
    (the windows' edges: a window's share of an interval is its time, not its packets), and
    the recording and its report say the drops were estimated from the windows."""
    tb = testbed
    rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv, "--duty", "4")
    own0 = no_ports(tb)
    tb.ns(tb.ns_snd, sys.executable, "-c", PACED_UDP, tb.ip_rcv, "3000")
    own = no_ports(tb) - own0
    rc, _, err = rec.stop()
    assert rc == 0, err
    assert own == 3000, own
    r = report_json(rec.out)
    assert r["meta"]["drop_counts"] == "windows", r["meta"]
    estimated = sum(q["drops"] for q in r["queues"] if q["dir"] == "rx")
    assert abs(estimated - own) <= 0.1 * own, (estimated, own)
    # The reasons are what the windows counted: some, and no more than there were.
    reasons = {d["name"]: d["count"] for d in r["drops"]["reasons"]}
    assert 0 < reasons.get("NO_SOCKET", 0) <= own, r["drops"]
    text = run(BIN, "report", rec.out).stdout
    assert "drops estimated from the detail windows" in " ".join(text.split()), text
