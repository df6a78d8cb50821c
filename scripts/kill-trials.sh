#!/usr/bin/env bash
# kill-trials.sh N: N random SIGKILLs of `ddioscope record` under iperf3 load, on a
# testbed of its own, each followed by checks:
#   - nothing of that recorder stays loaded or attached: none of the prog ids its
#     --json-progress "attached" line named, and no XDP/tc program on the testbed;
#   - a recording that reached its first interval is readable at the output path
#     (`ddioscope report` exits 0 and says it was cut off), and at most one interval
#     is lost (its intervals against the time it ran / the interval);
#   - a recorder killed before its first interval left the previous recording
#     byte-identical (every trial writes the same path with --force);
#   - no temporary file of an earlier trial is left once a recorder got as far as
#     creating its output (each start removes those of dead writers).
# After the trials, no namespace of the script is left. One line per trial, a summary,
# exit 1 on any failure. DDIOSCOPE overrides the binary; KILL_MAX_S the longest delay.
set -euo pipefail

usage() { echo "usage: $0 N   (N random SIGKILLs of ddioscope record)" >&2; exit 2; }
[ $# -eq 1 ] && [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ] || usage
N=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DDIOSCOPE:-$ROOT/user/target/release/ddioscope}
MAX_S=${KILL_MAX_S:-6}
[ -x "$BIN" ] || { echo "kill-trials: $BIN not built (make build)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "kill-trials: needs root (BPF and network namespaces)" >&2; exit 1; }

NAME=kt$$
WORK=$(mktemp -d /tmp/ddioscope-kill-trials.XXXXXX)
SERVER_PID="" CLIENT_PID="" REC_PID=""
cleanup() {
    for p in $REC_PID $CLIENT_PID $SERVER_PID; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "$ROOT/scripts/testbed.sh" down "$NAME" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$ROOT/scripts/testbed.sh" up "$NAME" >/dev/null
eval "$("$ROOT/scripts/testbed.sh" env "$NAME")"
ip netns exec "$NS_RCV" iperf3 -s -p 5201 >/dev/null 2>&1 &
SERVER_PID=$!
"$ROOT/scripts/wait-port.sh" "$NS_RCV" 5201 20

OUT=$WORK/rec.ddio
# CLOCK_MONOTONIC (the recording's clock) at a bash $EPOCHREALTIME: offset measured once
# per trial, so the kill's time costs no process start.
mono_offset_ns() {
    python3 -c 'import time; print(time.clock_gettime_ns(time.CLOCK_MONOTONIC) - time.time_ns())'
}
now_real_ns() { local t=${EPOCHREALTIME/./}; echo $((10#$t * 1000)); }
file_hash() { if [ -e "$OUT" ]; then sha256sum "$OUT" | cut -d' ' -f1; else echo absent; fi; }
# Prog ids listed by bpftool (programs or links' programs) that are in the set given.
still_loaded() {
    local ids=$1
    { bpftool prog show --json; echo; bpftool link show --json; } 2>/dev/null | python3 -c '
import json, sys
want = set(json.loads(sys.argv[1]))
seen = set()
for line in sys.stdin.read().split("\n"):
    if line.strip():
        for o in json.loads(line):
            seen.add(o.get("prog_id", o.get("id")))
print(" ".join(str(i) for i in sorted(want & seen)))' "$ids"
}

failures=0
for trial in $(seq 1 "$N"); do
    before=$(file_hash)
    delay=$(python3 -c "import random; print(f'{random.uniform(0.01, $MAX_S):.3f}')")
    ip netns exec "$NS_SND" iperf3 -c "$IP_RCV" -p 5201 -t 60 >/dev/null 2>&1 &
    CLIENT_PID=$!
    offset=$(mono_offset_ns)
    "$BIN" record -i "$IF_RCV" --netns "$NS_RCV" -o "$OUT" --force --json-progress \
        >"$WORK/progress" 2>"$WORK/stderr" &
    REC_PID=$!
    sleep "$delay"
    kill_ns=$(( $(now_real_ns) + offset ))
    kill -9 "$REC_PID" 2>/dev/null || true
    wait "$REC_PID" 2>/dev/null || true
    pid=$REC_PID REC_PID=""
    kill -9 "$CLIENT_PID" 2>/dev/null || true
    wait "$CLIENT_PID" 2>/dev/null || true
    CLIENT_PID=""

    problems=()
    attached=$(grep -m1 '"event":"attached"' "$WORK/progress" || true)
    ids=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["prog_ids"]) if sys.argv[1] else "[]")' "$attached")
    # The kernel frees a dead process's programs once their last reference goes (RCU):
    # wait for that, with a deadline.
    left=""
    for _ in $(seq 1 100); do
        left=$(still_loaded "$ids")
        [ -z "$left" ] && break
        sleep 0.05
    done
    [ -z "$left" ] || problems+=("prog ids still loaded: $left")
    net=$(ip netns exec "$NS_RCV" bpftool net show 2>/dev/null | grep -E '^\S+\([0-9]+\) ' || true)
    [ -z "$net" ] || problems+=("programs attached on the testbed: $net")

    after=$(file_hash)
    intervals=0 lost=0
    if [ "$after" = "$before" ]; then
        outcome="before the first interval: previous file untouched"
        # Only a kill before the first commit may leave the file as it was.
        if [ -n "$attached" ] && grep -q '"event":"interval"' "$WORK/progress"; then
            problems+=("intervals were reported but $OUT did not change")
        fi
    else
        rep=$("$BIN" report "$OUT" 2>&1) && rc=0 || rc=$?
        if [ "$rc" -ne 0 ]; then
            problems+=("report exited $rc: $(echo "$rep" | tail -1)")
        elif ! grep -q "INCOMPLETE" <<<"$rep"; then
            problems+=("report does not say the recording is incomplete")
        fi
        read -r intervals start_ns interval_ms < <(sqlite3 -separator ' ' "$OUT" \
            "SELECT (SELECT count(*) FROM intervals), (SELECT value FROM meta WHERE key='start_ns'), (SELECT value FROM meta WHERE key='interval_ms')")
        expected=$(( (kill_ns - start_ns) / (interval_ms * 1000000) ))
        lost=$(( expected - intervals ))
        [ "$lost" -le 1 ] || problems+=("$lost intervals lost ($intervals recorded, $expected completed by the kill)")
        [ "$intervals" -ge 1 ] || problems+=("a recording at the final path with no interval")
        outcome="$intervals intervals readable, $((lost < 0 ? 0 : lost)) lost"
    fi
    # Temporary files: a recorder that got as far as creating its output removed those
    # of the earlier, dead ones; only its own may be left (the next start removes it).
    if [ "$after" != "$before" ] || [ -e "$WORK/.rec.ddio.$pid.ddioscope-tmp" ]; then
        temps=$(find "$WORK" -maxdepth 1 -name '.rec.ddio.*.ddioscope-tmp*' ! -name ".rec.ddio.$pid.*" | wc -l)
        [ "$temps" -eq 0 ] || problems+=("$temps temporary files of earlier writers left")
    fi

    if [ ${#problems[@]} -eq 0 ]; then
        printf 'trial %d: killed after %.2f s: %s; nothing left attached: ok\n' "$trial" "$delay" "$outcome"
    else
        failures=$((failures + 1))
        printf 'trial %d: killed after %.2f s: FAILED: %s\n' "$trial" "$delay" "$(IFS=';'; echo "${problems[*]}")"
        sed 's/^/    recorder: /' "$WORK/stderr" | tail -3
    fi
done

kill -9 "$SERVER_PID" 2>/dev/null || true
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""
"$ROOT/scripts/testbed.sh" down "$NAME"
left_ns=$(ip netns list | awk '{print $1}' | grep "^ddio-$NAME-" || true)
[ -z "$left_ns" ] || echo "kill-trials: FAILED: namespaces left: $(echo $left_ns)"
echo "kill-trials: $((N - failures)) passed, $failures failed"
[ "$failures" -eq 0 ] && [ -z "$left_ns" ]
