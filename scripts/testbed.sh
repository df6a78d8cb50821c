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
# DDIO_TESTBED_SHAPE picks how the pair is made, as the hosts users have make it:
#   tuned    (the default) made in the namespaces; the receiver has GRO on, so veth runs
#            its per-queue NAPI poll and hands frames up one by one (with their RX queue),
#            and the sender has TSO/GSO off, so those frames are wire-sized, as from a NIC
#   default  veth's own defaults at both ends (TSO/GSO on, GRO off: no NAPI, frames of up
#            to 64 KiB), the pair made in the root namespace and each end then moved into
#            its namespace, as a container runtime's CNI plugin does for every pod
#   rootpeer as default, but the sender's end stays in the root namespace (named
#            dd-NAME, cut to 15 characters), as a host-side veth of a container
set -euo pipefail

QUEUES=${DDIO_TESTBED_QUEUES:-4}
SHAPE=${DDIO_TESTBED_SHAPE:-tuned}
case "$SHAPE" in
    tuned|default|rootpeer) ;;
    *) echo "testbed: DDIO_TESTBED_SHAPE must be tuned, default or rootpeer" >&2; exit 2 ;;
esac

usage() { echo "usage: $0 up|down|env NAME" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 name=$2
case "$name" in
    *[!A-Za-z0-9_-]*|"") echo "testbed: NAME must be letters, digits, - or _" >&2; exit 2 ;;
esac

NS_SND="ddio-$name-snd"
NS_RCV="ddio-$name-rcv"
IF_SND=ddsnd
# The root namespace's end has a name of its own: one per testbed there.
ROOT_IF=$(printf 'dd-%s' "$name" | cut -c1-15)
IF_RCV=ddrcv
IP_SND=10.77.0.1
IP_RCV=10.77.0.2
IP6_SND=fd77::1
IP6_RCV=fd77::2

down() {
    local ns
    # Only a link this script made: a veth of its name whose peer is in our namespace.
    if ip link show "$ROOT_IF" type veth >/dev/null 2>&1; then
        ip link delete "$ROOT_IF" 2>/dev/null || true
    fi
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
    case "$SHAPE" in
        tuned)
            ip -n "$NS_SND" link add "$IF_SND" numtxqueues "$QUEUES" numrxqueues "$QUEUES" type veth \
                peer name "$IF_RCV" netns "$NS_RCV" numtxqueues "$QUEUES" numrxqueues "$QUEUES"
            ;;
        default|rootpeer)
            # Made where a CNI plugin makes it, then each end moved (the root's end stays).
            local tmp_rcv
            tmp_rcv=$(printf 'dr-%s' "$name" | cut -c1-15)
            ip link add "$ROOT_IF" numtxqueues "$QUEUES" numrxqueues "$QUEUES" type veth \
                peer name "$tmp_rcv" numtxqueues "$QUEUES" numrxqueues "$QUEUES"
            ip link set "$tmp_rcv" netns "$NS_RCV"
            ip -n "$NS_RCV" link set "$tmp_rcv" name "$IF_RCV"
            if [ "$SHAPE" = default ]; then
                ip link set "$ROOT_IF" netns "$NS_SND"
                ip -n "$NS_SND" link set "$ROOT_IF" name "$IF_SND"
            fi
            ;;
    esac
    local snd=(ip -n "$NS_SND") snd_if=$IF_SND
    if [ "$SHAPE" = rootpeer ]; then
        snd=(ip) snd_if=$ROOT_IF
    fi
    "${snd[@]}" addr add "$IP_SND/24" dev "$snd_if"
    ip -n "$NS_RCV" addr add "$IP_RCV/24" dev "$IF_RCV"
    "${snd[@]}" addr add "$IP6_SND/64" dev "$snd_if" nodad
    ip -n "$NS_RCV" addr add "$IP6_RCV/64" dev "$IF_RCV" nodad
    if [ "$SHAPE" = tuned ]; then
        ip netns exec "$NS_SND" ethtool -K "$IF_SND" tso off gso off gro on >/dev/null
        ip netns exec "$NS_RCV" ethtool -K "$IF_RCV" tso off gso off gro on >/dev/null
    fi
    # No qdisc on the sender (veth's default noqueue): with one, veth's TX
    # queues stall once its NAPI ring fills. Per-queue truth comes from the
    # receiver driver's own counters (ethtool -S rx_queue_N_xdp_packets).
    for ns in "$NS_SND" "$NS_RCV"; do ip -n "$ns" link set lo up; done
    "${snd[@]}" link set "$snd_if" up
    ip -n "$NS_RCV" link set "$IF_RCV" up
    # Readiness, not a sleep: the link is usable once the receiver answers.
    local i ping=(ip netns exec "$NS_SND" ping)
    [ "$SHAPE" = rootpeer ] && ping=(ping -I "$ROOT_IF")
    for i in $(seq 1 100); do
        "${ping[@]}" -c1 -W1 "$IP_RCV" >/dev/null 2>&1 && return 0
        [ "$i" -lt 100 ] || { echo "testbed: $NS_RCV did not answer ping" >&2; down; exit 1; }
    done
}

case "$cmd" in
    up) up; echo "testbed $name up ($SHAPE): $NS_SND/$IF_SND $IP_SND -> $NS_RCV/$IF_RCV $IP_RCV" ;;
    down) down ;;
    env)
        cat <<EOF
NS_SND=$NS_SND
NS_RCV=$NS_RCV
IF_SND=$IF_SND
ROOT_IF=$ROOT_IF
SHAPE=$SHAPE
IF_RCV=$IF_RCV
IP_SND=$IP_SND
IP_RCV=$IP_RCV
IP6_SND=$IP6_SND
IP6_RCV=$IP6_RCV
EOF
        ;;
    *) usage ;;
esac
