#!/usr/bin/env bash
# Two network namespaces joined by a 4-queue veth pair: the stand-in NIC that
# ddioscope's demo, tests and benchmark run on. Nothing outside the two
# namespaces is touched.
#
#   scripts/testbed.sh up NAME      create  ddio-NAME-snd / ddio-NAME-rcv
#   scripts/testbed.sh down NAME    remove everything NAME made (safe to repeat)
#   scripts/testbed.sh env NAME     print the names as shell variables
#
# Sender side:   namespace ddio-NAME-snd, interface ddsnd, 10.77.0.1/24, fd77::1/64
# Receiver side: namespace ddio-NAME-rcv, interface ddrcv, 10.77.0.2/24, fd77::2/64
#
# The receiver has GRO on, so veth runs its per-queue NAPI poll and hands frames
# up one by one (net:napi_gro_receive_entry, with their RX queue); the sender has
# TSO/GSO off so those frames are wire-sized, as from a real NIC.
set -euo pipefail

QUEUES=${DDIO_TESTBED_QUEUES:-4}

usage() { echo "usage: $0 up|down|env NAME" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 name=$2
case "$name" in
    *[!A-Za-z0-9_-]*|"") echo "testbed: NAME must be letters, digits, - or _" >&2; exit 2 ;;
esac

NS_SND="ddio-$name-snd"
NS_RCV="ddio-$name-rcv"
IF_SND=ddsnd
IF_RCV=ddrcv
IP_SND=10.77.0.1
IP_RCV=10.77.0.2
IP6_SND=fd77::1
IP6_RCV=fd77::2

down() {
    local ns
    for ns in "$NS_SND" "$NS_RCV"; do
        if ip netns list | awk '{print $1}' | grep -qx "$ns"; then
            # Processes left in the namespace (iperf3 after a crash) would keep it alive.
            ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
            ip netns delete "$ns"
        fi
    done
}

up() {
    down
    ip netns add "$NS_SND"
    ip netns add "$NS_RCV"
    ip -n "$NS_SND" link add "$IF_SND" numtxqueues "$QUEUES" numrxqueues "$QUEUES" type veth \
        peer name "$IF_RCV" netns "$NS_RCV" numtxqueues "$QUEUES" numrxqueues "$QUEUES"
    ip -n "$NS_SND" addr add "$IP_SND/24" dev "$IF_SND"
    ip -n "$NS_RCV" addr add "$IP_RCV/24" dev "$IF_RCV"
    ip -n "$NS_SND" addr add "$IP6_SND/64" dev "$IF_SND" nodad
    ip -n "$NS_RCV" addr add "$IP6_RCV/64" dev "$IF_RCV" nodad
    ip netns exec "$NS_SND" ethtool -K "$IF_SND" tso off gso off gro on >/dev/null
    ip netns exec "$NS_RCV" ethtool -K "$IF_RCV" tso off gso off gro on >/dev/null
    # No qdisc on the sender (veth's default noqueue): with one, veth's TX
    # queues stall once its NAPI ring fills. Per-queue truth comes from the
    # receiver driver's own counters (ethtool -S rx_queue_N_xdp_packets).
    for ns in "$NS_SND" "$NS_RCV"; do ip -n "$ns" link set lo up; done
    ip -n "$NS_SND" link set "$IF_SND" up
    ip -n "$NS_RCV" link set "$IF_RCV" up
    # Readiness, not a sleep: the link is usable once the receiver answers.
    local i
    for i in $(seq 1 100); do
        ip netns exec "$NS_SND" ping -c1 -W1 "$IP_RCV" >/dev/null 2>&1 && return 0
        [ "$i" -lt 100 ] || { echo "testbed: $NS_RCV did not answer ping" >&2; down; exit 1; }
    done
}

case "$cmd" in
    up) up; echo "testbed $name up: $NS_SND/$IF_SND $IP_SND -> $NS_RCV/$IF_RCV $IP_RCV" ;;
    down) down ;;
    env)
        cat <<EOF
NS_SND=$NS_SND
NS_RCV=$NS_RCV
IF_SND=$IF_SND
IF_RCV=$IF_RCV
IP_SND=$IP_SND
IP_RCV=$IP_RCV
IP6_SND=$IP6_SND
IP6_RCV=$IP6_RCV
EOF
        ;;
    *) usage ;;
esac
