"""Drops are charged to the recorded interface only: checked against the
receiver namespace's own UDP NoPorts counter while another namespace, whose
veth has the same interface index, drops many more packets."""
import sys

from conftest import Testbed, report_json

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
        rec = recorder("-i", tb.if_rcv, "--netns", tb.ns_rcv)
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
