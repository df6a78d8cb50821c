#!/usr/bin/env bash
# make demo: a testbed, 10 s of iperf3 traffic (TCP streams, then small UDP
# packets), a recording of the receiver, its report; the testbed is always removed.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-user/target/release/ddioscope}
NAME=demo$$
OUT=${OUT:-out/demo.ddio}
mkdir -p "$(dirname "$OUT")"

cleanup() {
    [ -n "${REC_PID:-}" ] && kill -INT "$REC_PID" 2>/dev/null && wait "$REC_PID" 2>/dev/null || true
    scripts/testbed.sh down "$NAME"
}
trap cleanup EXIT
scripts/testbed.sh up "$NAME"
eval "$(scripts/testbed.sh env "$NAME")"

ip netns exec "$NS_RCV" iperf3 -s -D -p 5201 --pidfile "/tmp/ddioscope-$NAME-iperf3.pid" >/dev/null
scripts/wait-port.sh "$NS_RCV" 5201

# The recorder says when its probes are attached (first JSON line): start traffic then.
exec {REC_FD}< <("$BIN" record -i "$IF_RCV" --netns "$NS_RCV" -d 11 -o "$OUT" --force --json-progress)
REC_PID=$!
read -r -t 30 line <&"$REC_FD" || { echo "demo: recorder did not attach" >&2; exit 1; }
echo "demo: $line"

echo "demo: 6 s of TCP (4 streams), then 4 s of UDP with 64-byte payloads"
ip netns exec "$NS_SND" iperf3 -c "$IP_RCV" -p 5201 -P 4 -t 6 | tail -4
ip netns exec "$NS_SND" iperf3 -c "$IP_RCV" -p 5201 -u -b 100M -l 64 -t 4 | tail -4
wait "$REC_PID" || true
REC_PID=
cat <&"$REC_FD" >/dev/null || true

echo
"$BIN" report "$OUT"
echo
echo "demo: recording kept in $OUT (try: $BIN report $OUT --json)"
