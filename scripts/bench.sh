#!/usr/bin/env bash
# make bench: what ddioscope costs, measured on the two-namespace testbed.
#
#   1. Per-program BPF cost: kernel.bpf_stats on, a recorder attached to the
#      receiver, run_cnt/run_time_ns read right before and right after a
#      small-packet UDP load and a TCP load: average ns per event per program,
#      and the event-weighted average of the hot RX/TX hooks against the target.
#      In the same windows, empty programs on the same tracepoints (`ddioscope
#      bench-floor`, same attach type) give the floor bpf_stats charges any
#      program: each hot hook's raw, floor and net (raw - floor) ns per event.
#   2. Throughput without vs with a recorder attached, alternating runs in one
#      session (ABBA order), TCP and small-packet UDP: mean ± stdev, overhead %.
#      bpf_stats is off for these runs, as in production use.
#   3. The simulator's own bench line, if `ddioscope simulate` exists.
#
# A benchmark, not a test: the hot-hook target is reported, never enforced.
# Raw results go to out/bench.json. Exit 0 on success, else a one-line reason.
# Traffic only flows between the testbed's namespaces. Needs root.
#
# Knobs (environment): BIN, OUT_JSON, BENCH_ROUNDS (3), BENCH_RUN_SECS (5),
# BENCH_UDP_RATE (iperf3 -b for the UDP loads, 0 = unlimited),
# BENCH_RECORD_ARGS (extra `ddioscope record` options, e.g. "--stage-sample 8"),
# BENCH_MISS_SAMPLING (the stand-in of the attribution-cost phase, software-clock),
# BENCH_MISS_DUTY (the attribution windows of its second run, `record --miss-duty`, 16).
set -Eeuo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-user/target/release/ddioscope}
OUT_JSON=${OUT_JSON:-out/bench.json}
NAME=bench$$
PORT=5201
ROUNDS=${BENCH_ROUNDS:-3}
T_RUN=${BENCH_RUN_SECS:-5}  # each throughput run
T_COST_UDP=8                # BPF cost windows
T_COST_TCP=6
UDP_LEN=64
UDP_STREAMS=2
UDP_RATE=${BENCH_UDP_RATE:-0}
TCP_STREAMS=4
TARGET_NS=50
HOT_RE='^(rx_gro|rx_stack|rx_copy|skb_consume|skb_kfree|tx_xmit|tx_queue|tx_done|napi_poll)'
STATS_SYSCTL=kernel.bpf_stats_enabled

REC_PID='' REC_FD='' DRAIN_PID='' REC_LOG='' ATTACHED_LINE=''
FLOOR_PID='' FLOOR_FD='' FLOOR_DRAIN=''
STATS_PREV='' TB_UP='' TMP=''
START=$SECONDS

die() {
    echo "bench: $*" >&2
    exit 1
}
log() { echo "bench: $*" >&2; }

# An unexpected failure (set -e) still ends with one line saying where.
on_err() {
    local rc=$? line=$1 cmd=$2
    [ "$BASH_SUBSHELL" -eq 0 ] || return 0
    echo "bench: line $line: '$cmd' failed (exit $rc)" >&2
}
trap 'on_err "$LINENO" "$BASH_COMMAND"' ERR

# Stop a child we started (SIGINT, SIGKILL after 10 s), its output drain, and
# close its pipe. Arguments: the names of its pid, drain-pid and fd variables.
stop_child() {
    local -n pid_=$1 drain_=$2 fd_=$3
    [ -n "$pid_" ] || return 0
    local pid=$pid_ deadline=$((SECONDS + 10))
    pid_=''
    kill -INT "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.05
    done
    wait "$pid" 2>/dev/null || true
    if [ -n "$drain_" ]; then
        wait "$drain_" 2>/dev/null || true
        drain_=''
    fi
    if [ -n "$fd_" ]; then
        exec {fd_}<&-
        fd_=''
    fi
}
stop_recorder() { stop_child REC_PID DRAIN_PID REC_FD; }
stop_floor() { stop_child FLOOR_PID FLOOR_DRAIN FLOOR_FD; }

cleanup() {
    local rc=$?
    set +e
    trap - ERR
    stop_floor
    stop_recorder
    if [ -n "$TMP" ] && [ -f "$TMP/iperf3.pid" ]; then
        kill "$(cat "$TMP/iperf3.pid")" 2>/dev/null
    fi
    [ -n "$STATS_PREV" ] && sysctl -qw "$STATS_SYSCTL=$STATS_PREV" >/dev/null
    [ -n "$TB_UP" ] && scripts/testbed.sh down "$NAME"
    [ -n "$TMP" ] && rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A recorder on the receiver; returns once its probes are attached.
# $1 = duration bound (s), $2 = tag for its files.
start_recorder() {
    local secs=$1 tag=$2 line=''
    REC_LOG=$TMP/$tag.rec.log
    exec {REC_FD}< <(exec "$BIN" record -i "$IF_RCV" --netns "$NS_RCV" -d "$secs" \
        -o "$TMP/$tag.ddio" --force --json-progress ${BENCH_RECORD_ARGS:-} 2>"$TMP/$tag.rec.err")
    REC_PID=$!
    if ! read -r -t 30 line <&"$REC_FD"; then
        die "recorder did not attach within 30 s: $(tail -n1 "$TMP/$tag.rec.err" 2>/dev/null)"
    fi
    case $line in
        *'"event":"attached"'*) ;;
        *) die "recorder: unexpected first line: $line" ;;
    esac
    printf '%s\n' "$line" >"$REC_LOG"
    printf '%s\n' "$line" >>"$TMP/attached.all"
    # Keep draining its progress lines so it never blocks on a full pipe.
    cat <&"$REC_FD" >>"$REC_LOG" &
    DRAIN_PID=$!
    ATTACHED_LINE=$line
}

# Stop the recorder after a measured run; it must have stayed up for all of it.
finish_recorder() {
    kill -0 "$REC_PID" 2>/dev/null || die "recorder exited during the run (interrupted or crashed): $(tail -n1 "$REC_LOG")"
    stop_recorder
    grep -q '"event":"done"' "$REC_LOG" || die "recorder did not stop cleanly: $(tail -n1 "$REC_LOG")"
}

# The floor programs (bench-floor) on the receiver, attached after the
# recorder's (so they run after them on each event) and with the attach type
# its hooks got. $1 = duration bound (s).
start_floor() {
    local secs=$1 hooks line=''
    hooks=$(python3 -c '
import json, sys
fl = {p["flavor"] for p in json.loads(open(sys.argv[1]).read()).get("progs", [])}
print({"tp_btf": "tp-btf", "raw_tp": "raw-tp"}.get(fl.pop(), "auto") if len(fl) == 1 else "auto")
' "$TMP/cost.attached") || die "cannot read the recorder's hook flavours"
    exec {FLOOR_FD}< <(exec "$BIN" bench-floor -i "$IF_RCV" --netns "$NS_RCV" -d "$secs" --hooks "$hooks" \
        2>"$TMP/floor.err")
    FLOOR_PID=$!
    if ! read -r -t 30 line <&"$FLOOR_FD"; then
        die "floor programs did not attach within 30 s: $(tail -n1 "$TMP/floor.err" 2>/dev/null)"
    fi
    case $line in
        *'"event":"attached"'*) ;;
        *) die "bench-floor: unexpected first line: $line" ;;
    esac
    printf '%s\n' "$line" >"$TMP/floor.attached"
    printf '%s\n' "$line" >>"$TMP/attached.all"
    cat <&"$FLOOR_FD" >"$TMP/floor.log" &
    FLOOR_DRAIN=$!
}

finish_floor() {
    kill -0 "$FLOOR_PID" 2>/dev/null || die "bench-floor exited during the run: $(tail -n1 "$TMP/floor.err" 2>/dev/null)"
    stop_floor
    grep -q '"event":"done"' "$TMP/floor.log" || die "bench-floor did not stop cleanly: $(tail -n1 "$TMP/floor.err" 2>/dev/null)"
}

jfield() { # FILE EXPR: print a field of a JSON file (python3: jq may be absent)
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$1" "$2" 2>/dev/null || true
}

# iperf3 client from the sender; JSON to $1, test length $2, then iperf3 options.
run_iperf() {
    local out=$1 secs=$2 try rc
    shift 2
    for try in 1 2 3; do
        rc=0
        ip netns exec "$NS_SND" timeout "$((secs + 20))" \
            iperf3 -c "$IP_RCV" -p "$PORT" --connect-timeout 3000 -t "$secs" -J "$@" >"$out" 2>&1 || rc=$?
        [ "$rc" -ne 0 ] || return 0
        # Ctrl-C reaches iperf3 first; it exits 1 and bash then skips our INT trap.
        grep -q '"error":[[:space:]]*"interrupt' "$out" && die "interrupted"
        [ "$rc" -ne 124 ] || die "iperf3 $* did not finish within $((secs + 20)) s"
        [ "$try" -lt 3 ] && sleep 1
    done
    die "iperf3 $* failed 3 times: $(jfield "$out" 'd.get("error", "no JSON")')"
}

snap() { bpftool prog show --json >"$TMP/$1.json" || die "bpftool prog show failed"; }
now_ns() { date +%s%N; }

# ---------------------------------------------------------------- checks
[ "$(id -u)" -eq 0 ] || die "needs root (BPF, network namespaces)"
[ -x "$BIN" ] || die "$BIN not built (make build)"
for c in ip ethtool iperf3 bpftool python3 sysctl timeout ping; do
    command -v "$c" >/dev/null || die "missing command: $c (make deps)"
done
case "$ROUNDS$T_RUN" in *[!0-9]*) die "BENCH_ROUNDS and BENCH_RUN_SECS must be integers" ;; esac
if [ "$ROUNDS" -lt 1 ] || [ "$T_RUN" -lt 1 ]; then die "BENCH_ROUNDS and BENCH_RUN_SECS must be >= 1"; fi
STATS_PREV=$(sysctl -n "$STATS_SYSCTL") || die "cannot read $STATS_SYSCTL"
TMP=$(mktemp -d /tmp/ddioscope-bench.XXXXXX)
: >"$TMP/attached.all"

CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)
CPU_MODEL=${CPU_MODEL:-$(uname -m)}
echo "ddioscope bench — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(nproc) CPUs, $CPU_MODEL, kernel $(uname -r)"
echo "binary:  $BIN ($("$BIN" --version 2>/dev/null || echo '?'))"
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
echo "load:    1-min load average $LOAD_START at start$(awk -v l="$LOAD_START" -v n="$(nproc)" \
    'BEGIN { if (l > n / 2) print " (busy machine: other work will skew the numbers)" }')"
echo

# ---------------------------------------------------------------- testbed
TB_UP=1
scripts/testbed.sh up "$NAME" >/dev/null
eval "$(scripts/testbed.sh env "$NAME")"
ip netns exec "$NS_RCV" iperf3 -s -D -p "$PORT" --idle-timeout 60 --pidfile "$TMP/iperf3.pid" >/dev/null
scripts/wait-port.sh "$NS_RCV" "$PORT" 10

UDP_ARGS=(-u -l "$UDP_LEN" -b "$UDP_RATE" -P "$UDP_STREAMS")
TCP_ARGS=(-P "$TCP_STREAMS")

# ---------------------------------------------------------------- 1. BPF cost
# The UDP then the TCP load of one cost phase, bpf_stats snapshots around each:
# $TMP/<phase>_<load>.{iperf.json,window_ns} and the snapshots <phase>_<load>_{before,after}.
measure_loads() {
    local phase=$1 load args secs t0 t1
    for load in udp tcp; do
        if [ "$load" = udp ]; then args=("${UDP_ARGS[@]}") secs=$T_COST_UDP; else args=("${TCP_ARGS[@]}") secs=$T_COST_TCP; fi
        snap "${phase}_${load}_before"
        t0=$(now_ns)
        run_iperf "$TMP/${phase}_$load.iperf.json" "$secs" "${args[@]}"
        t1=$(now_ns)
        snap "${phase}_${load}_after"
        echo "$((t1 - t0))" >"$TMP/${phase}_$load.window_ns"
    done
}

log "BPF cost: bpf_stats on, recorder attached, ${T_COST_UDP} s UDP ${UDP_LEN} B x$UDP_STREAMS then ${T_COST_TCP} s TCP x$TCP_STREAMS"
sysctl -qw "$STATS_SYSCTL=1" >/dev/null
start_recorder 90 cost
printf '%s\n' "$ATTACHED_LINE" >"$TMP/cost.attached"
start_floor 90
measure_loads cost
finish_floor
finish_recorder

# The same loads with attribution on: the L3-miss program on a software
# stand-in event (this host may have no PEBS) and the buffer-page map kept
# per packet (linear data and page frags; TCP payload arrives in frags).
# BENCH_MISS_SAMPLING picks the stand-in (software-clock, or software-copy for
# the address-join path).
MISS_SAMPLING=${BENCH_MISS_SAMPLING:-software-clock}
# Twice: always on, then in attribution windows (record --miss-duty), which keep
# the map and run the sampler (at the duty times its rate) 1/duty of the time.
MISS_DUTY=${BENCH_MISS_DUTY:-16}
SAVED_RECORD_ARGS=${BENCH_RECORD_ARGS:-}
for phase in attr attrw; do
    duty=1
    [ "$phase" = attrw ] && duty=$MISS_DUTY
    log "attribution cost: L3-miss program on --miss-sampling $MISS_SAMPLING, --miss-duty $duty, ${T_COST_UDP} s UDP then ${T_COST_TCP} s TCP"
    BENCH_RECORD_ARGS="$SAVED_RECORD_ARGS --miss-sampling $MISS_SAMPLING --miss-period 1000000 --miss-duty $duty"
    start_recorder 90 "$phase"
    printf '%s\n' "$ATTACHED_LINE" >"$TMP/$phase.attached"
    measure_loads "$phase"
    finish_recorder
done
BENCH_RECORD_ARGS=$SAVED_RECORD_ARGS
sysctl -qw "$STATS_SYSCTL=0" >/dev/null

# ---------------------------------------------------------------- 2. throughput
log "throughput: $ROUNDS rounds x {without, with} x {TCP, UDP}, ${T_RUN} s each (bpf_stats off)"
run_iperf "$TMP/warmup.json" 2 "${TCP_ARGS[@]}" # not counted
for r in $(seq 1 "$ROUNDS"); do
    # ABBA: odd rounds start without the recorder, even rounds with it.
    if [ $((r % 2)) -eq 1 ]; then order=(without with); else order=(with without); fi
    for proto in tcp udp; do
        if [ "$proto" = udp ]; then args=("${UDP_ARGS[@]}"); else args=("${TCP_ARGS[@]}"); fi
        for mode in "${order[@]}"; do
            if [ "$mode" = with ]; then start_recorder "$((T_RUN + 30))" "tp_${proto}_$r"; fi
            run_iperf "$TMP/tp_${proto}_${mode}_$r.json" "$T_RUN" "${args[@]}"
            if [ "$mode" = with ]; then finish_recorder; fi
        done
    done
    log "  round $r/$ROUNDS done"
done

# ---------------------------------------------------------------- 3. simulator
if "$BIN" simulate --help >/dev/null 2>&1; then
    if ! timeout 60 "$BIN" simulate --bench >"$TMP/sim.txt" 2>&1; then
        die "simulate --bench failed: $(tail -n1 "$TMP/sim.txt")"
    fi
else
    echo "simulator bench: not built yet" >"$TMP/sim.txt"
    touch "$TMP/sim.absent"
fi

# ---------------------------------------------------------------- leftovers
# Every program any recorder attached must be gone now that they all stopped.
left=$(python3 -c '
import json, sys
ids = set()
for l in open(sys.argv[1]):
    ids.update(json.loads(l).get("prog_ids", []))
live = {p.get("id") for p in json.load(open(sys.argv[2]))}
print(" ".join(str(i) for i in sorted(ids & live)))
' "$TMP/attached.all" <(bpftool prog show --json)) || die "cannot check for leftover BPF programs"
[ -z "$left" ] || die "BPF programs still loaded after the recorders stopped: $left"

# ---------------------------------------------------------------- report
mkdir -p "$(dirname "$OUT_JSON")"
TMP=$TMP OUT_JSON=$OUT_JSON ROUNDS=$ROUNDS T_RUN=$T_RUN T_COST_UDP=$T_COST_UDP \
    T_COST_TCP=$T_COST_TCP MISS_SAMPLING=$MISS_SAMPLING MISS_DUTY=$MISS_DUTY UDP_LEN=$UDP_LEN UDP_STREAMS=$UDP_STREAMS UDP_RATE=$UDP_RATE \
    TCP_STREAMS=$TCP_STREAMS TARGET_NS=$TARGET_NS HOT_RE=$HOT_RE CPU_MODEL=$CPU_MODEL \
    NPROC=$(nproc) KERNEL=$(uname -r) BIN=$BIN LOAD_START=$LOAD_START \
    LOAD_END=$(cut -d' ' -f1 /proc/loadavg) \
    python3 - <<'PY' || die "could not summarise the results"
import json, math, os, re, statistics, time

E = os.environ
tmp = E["TMP"]
rounds, t_run = int(E["ROUNDS"]), int(E["T_RUN"])
target = float(E["TARGET_NS"])
hot_re = re.compile(E["HOT_RE"])


def load(name):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)


# ---- 1. BPF cost
attached = json.loads(open(os.path.join(tmp, "cost.attached")).read())
ids = attached["prog_ids"]
loads = {
    "udp": f"UDP {E['UDP_LEN']} B x{E['UDP_STREAMS']} streams (-b {E['UDP_RATE']}), {E['T_COST_UDP']} s",
    "tcp": f"TCP x{E['TCP_STREAMS']} streams, {E['T_COST_TCP']} s",
}


def udp_rx(j):
    s = j["end"]["sum_received"]
    return (s["packets"] - s["lost_packets"]) / s["seconds"]


def udp_tx(j):
    s = j["end"]["sum_sent"]
    return s["packets"] / s["seconds"]


def tcp_gbps(j):
    return j["end"]["sum_received"]["bits_per_second"] / 1e9


def fmt_ns(v):
    return "n/a" if v is None else f"{v:.1f}"


# The floor programs: per tracepoint, the empty one and the device-read one.
rec_tp = {p["id"]: p["tracepoint"] for p in attached.get("progs", [])}
floor_att = json.loads(open(os.path.join(tmp, "floor.attached")).read())
floor_ids = {}
for p in floor_att.get("progs", []):
    floor_ids.setdefault(p["tracepoint"], {})["empty" if p["name"].startswith("e_") else "dev"] = p["id"]


def per_event(before, after, i):
    b, a = before.get(i, {}), after.get(i)
    if a is None:
        return None, 0, 0
    cnt = (a.get("run_cnt") or 0) - (b.get("run_cnt") or 0)
    ns = (a.get("run_time_ns") or 0) - (b.get("run_time_ns") or 0)
    return (ns / cnt if cnt else None), cnt, ns


def floor_table(progs, before, after):
    """Per hot hook with events: raw, floor (empty program, same tracepoint and
    window), net = raw - floor, and the device-read program; then the averages
    weighted by each hook's events, over the hooks that have a floor."""
    rows = []
    w = {"events": 0, "raw_ns": 0.0, "floor_ns": 0.0, "dev_events": 0, "dev_ns": 0.0}
    print(f"  {'program':<16} {'tracepoint':<24} {'events':>11} {'raw ns':>8} {'floor ns':>9} {'net ns':>8} {'dev-read ns':>12}")
    for p in progs:
        if not p["hot"] or not p["run_cnt"]:
            continue
        tp = rec_tp.get(p["id"], "?")
        ids = floor_ids.get(tp, {})
        fl = per_event(before, after, ids["empty"])[0] if "empty" in ids else None
        dev = per_event(before, after, ids["dev"])[0] if "dev" in ids else None
        net = None if fl is None else p["avg_ns"] - fl
        if fl is not None:
            w["events"] += p["run_cnt"]
            w["raw_ns"] += p["run_time_ns"]
            w["floor_ns"] += fl * p["run_cnt"]
        if dev is not None:
            w["dev_events"] += p["run_cnt"]
            w["dev_ns"] += dev * p["run_cnt"]
        rows.append({"name": p["name"], "tracepoint": tp, "run_cnt": p["run_cnt"], "raw_ns": p["avg_ns"],
                     "floor_ns": fl, "net_ns": net, "dev_read_ns": dev})
        print(f"  {p['name']:<16} {tp:<24} {p['run_cnt']:>11} {fmt_ns(p['avg_ns']):>8} {fmt_ns(fl):>9} "
              f"{fmt_ns(net):>8} {fmt_ns(dev):>12}")
    return rows, w


def weighted(w):
    if not w["events"]:
        return {"raw_ns": None, "floor_ns": None, "net_ns": None, "dev_read_ns": None, "events": 0}
    raw, fl = w["raw_ns"] / w["events"], w["floor_ns"] / w["events"]
    dev = w["dev_ns"] / w["dev_events"] if w["dev_events"] else None
    return {"raw_ns": raw, "floor_ns": fl, "net_ns": raw - fl, "dev_read_ns": dev, "events": w["events"]}


def print_weighted(label, a):
    print(f"  {label}: raw {fmt_ns(a['raw_ns'])}, floor {fmt_ns(a['floor_ns'])}, net {fmt_ns(a['net_ns'])} ns/event "
          f"(dev-read program {fmt_ns(a['dev_read_ns'])}; net vs target <= {target:.0f} ns: "
          f"{'n/a' if a['net_ns'] is None else ('PASS' if a['net_ns'] <= target else 'ABOVE target')})")


floor_sum = {"events": 0, "raw_ns": 0.0, "floor_ns": 0.0, "dev_events": 0, "dev_ns": 0.0}
cost = {}
print("1. BPF cost per event (kernel.bpf_stats, delta over the load window; recorder --sample 64)")
for key, title in loads.items():
    before = {p["id"]: p for p in load(f"cost_{key}_before.json")}
    after = {p["id"]: p for p in load(f"cost_{key}_after.json")}
    window_s = int(open(os.path.join(tmp, f"cost_{key}.window_ns")).read()) / 1e9
    ij = load(f"cost_{key}.iperf.json")
    rate = f"{udp_rx(ij)/1e3:.0f} kpkt/s received" if key == "udp" else f"{tcp_gbps(ij):.2f} Gbit/s"
    print(f"\n  {title}: {rate}, window {window_s:.2f} s")
    print(f"  {'id':>5}  {'program':<16} {'hot':<3} {'run_cnt':>11} {'run_time_ns':>13} {'ns/event':>9} {'events/s':>10}")
    progs = []
    hot_cnt = hot_ns = all_ns = 0
    for i in ids:
        b, a = before.get(i, {}), after.get(i)
        if a is None:
            raise SystemExit(f"program {i} vanished during the {key} window")
        name = a.get("name", "?")
        cnt = (a.get("run_cnt") or 0) - (b.get("run_cnt") or 0)
        ns = (a.get("run_time_ns") or 0) - (b.get("run_time_ns") or 0)
        hot = bool(hot_re.match(name))
        avg = ns / cnt if cnt else None
        if hot:
            hot_cnt += cnt
            hot_ns += ns
        all_ns += ns
        progs.append({"id": i, "name": name, "hot": hot, "run_cnt": cnt, "run_time_ns": ns, "avg_ns": avg})
        print(f"  {i:>5}  {name:<16} {'*' if hot else '':<3} {cnt:>11} {ns:>13} {fmt_ns(avg):>9} {cnt/window_s:>10.0f}")
    hot_avg = hot_ns / hot_cnt if hot_cnt else None
    verdict = "n/a (no events)" if hot_avg is None else ("PASS" if hot_avg <= target else "ABOVE target")
    cpu_pct = all_ns / 1e9 / window_s * 100
    print(f"  hot hooks (*): {hot_cnt} events, event-weighted avg {fmt_ns(hot_avg)} ns/event "
          f"vs target <= {target:.0f} ns: {verdict}")
    print(f"  all programs: {all_ns/1e6:.1f} ms of BPF run time = {cpu_pct:.2f}% of one CPU")
    print(f"\n  measurement floor: an empty program (and one reading skb->dev->ifindex) on each hot hook's "
          f"tracepoint, same window, run after the recorder's")
    frows, fw = floor_table(progs, before, after)
    for k in floor_sum:
        floor_sum[k] += fw[k]
    fa = weighted(fw)
    print_weighted("hot hooks, event-weighted", fa)
    cost[key] = {"load": title, "window_s": window_s, "iperf3_end": ij["end"].get("sum_received"),
                 "programs": progs, "hot_events": hot_cnt, "hot_run_time_ns": hot_ns,
                 "hot_avg_ns": hot_avg, "verdict": verdict, "bpf_cpu_pct_of_one_cpu": cpu_pct,
                 "floor": {"hooks": frows, "hot_weighted": fa}}
hc = sum(c["hot_events"] for c in cost.values())
hn = sum(c["hot_run_time_ns"] for c in cost.values())
overall = hn / hc if hc else None
overall_verdict = "n/a" if overall is None else ("PASS" if overall <= target else "ABOVE target")
print(f"\n  hot hooks, both loads: {fmt_ns(overall)} ns/event vs target <= {target:.0f} ns: {overall_verdict}")
floor_overall = weighted(floor_sum)
print_weighted("hot hooks, both loads, with floor", floor_overall)

# ---- 1b. attribution cost: always on, then in windows
for phase, mode in (("attr", "always on"), ("attrw", f"--miss-duty {E['MISS_DUTY']}")):
    attr_ids = json.loads(open(os.path.join(tmp, f"{phase}.attached")).read())["prog_ids"]
    attr_sum = {"events": 0, "raw_ns": 0.0, "floor_ns": 0.0}
    for key in ("udp", "tcp"):
        before = {p["id"]: p for p in load(f"{phase}_{key}_before.json")}
        after = {p["id"]: p for p in load(f"{phase}_{key}_after.json")}
        window_s = int(open(os.path.join(tmp, f"{phase}_{key}.window_ns")).read()) / 1e9
        ij = load(f"{phase}_{key}.iperf.json")
        rate = f"{udp_rx(ij)/1e3:.0f} kpkt/s received" if key == "udp" else f"{tcp_gbps(ij):.2f} Gbit/s"
        base = {p["name"]: p for p in cost[key]["programs"]}
        print(f"\n1b. attribution cost, {mode} ({loads[key]}: {rate}; --miss-sampling {E['MISS_SAMPLING']})")
        print(f"  {'program':<16} {'run_cnt':>11} {'ns/event':>9} {'without':>9} {'extra':>8}")
        attr_progs = []
        for i in attr_ids:
            b, a = before.get(i, {}), after.get(i, {})
            name = a.get("name", "?")
            cnt = (a.get("run_cnt") or 0) - (b.get("run_cnt") or 0)
            ns = (a.get("run_time_ns") or 0) - (b.get("run_time_ns") or 0)
            if not cnt:
                continue
            avg = ns / cnt
            was = base.get(name, {}).get("avg_ns")
            extra = "" if was is None else f"{avg - was:+.1f}"
            attr_progs.append({"name": name, "run_cnt": cnt, "avg_ns": avg, "without_ns": was})
            print(f"  {name:<16} {cnt:>11} {avg:>9.1f} {fmt_ns(was):>9} {extra:>8}")
        # The target applies to the hot hooks with attribution on too; this window
        # has no floor programs, so section 1's per-hook floor stands in for it.
        floors = {r["name"]: r["floor_ns"] for r in cost[key]["floor"]["hooks"] if r["floor_ns"] is not None}
        hot = [p for p in attr_progs if hot_re.match(p["name"]) and p["name"] in floors]
        ev = sum(p["run_cnt"] for p in hot)
        aw = {"events": ev, "raw_ns": None, "floor_ns": None, "net_ns": None, "sampler_ns_per_event": None}
        if ev:
            aw["raw_ns"] = sum(p["run_cnt"] * p["avg_ns"] for p in hot) / ev
            aw["floor_ns"] = sum(p["run_cnt"] * floors[p["name"]] for p in hot) / ev
            aw["net_ns"] = aw["raw_ns"] - aw["floor_ns"]
            aw["sampler_ns_per_event"] = sum(p["run_cnt"] * p["avg_ns"] for p in attr_progs
                                             if p["name"] == "l3miss_sample") / ev
            attr_sum["events"] += ev
            attr_sum["raw_ns"] += aw["raw_ns"] * ev
            attr_sum["floor_ns"] += aw["floor_ns"] * ev
            print(f"  hot hooks with attribution, event-weighted: raw {aw['raw_ns']:.1f}, net of section 1's floor "
                  f"{aw['net_ns']:.1f} ns/event vs target <= {target:.0f} ns: "
                  f"{'PASS' if aw['net_ns'] <= target else 'ABOVE target'}; the sampler adds "
                  f"{aw['sampler_ns_per_event']:.1f} ns per hot event at this period")
        cost[f"{'attribution' if phase == 'attr' else 'attribution_windows'}_{key}"] = {
            "window_s": window_s, "miss_sampling": E["MISS_SAMPLING"],
            "miss_duty": 1 if phase == "attr" else int(E["MISS_DUTY"]),
            "iperf3_end": ij["end"].get("sum_received"), "programs": attr_progs, "hot_weighted": aw}
    if attr_sum["events"]:
        raw, fl = attr_sum["raw_ns"] / attr_sum["events"], attr_sum["floor_ns"] / attr_sum["events"]
        print(f"\n  hot hooks with attribution {mode}, both loads: raw {raw:.1f}, net of the floor {raw - fl:.1f} ns/event "
              f"vs target <= {target:.0f} ns: {'PASS' if raw - fl <= target else 'ABOVE target'}")

# ---- 2. throughput
tests = {
    "tcp": (f"TCP -P {E['TCP_STREAMS']}, Gbit/s rx", tcp_gbps, "{:.3f}"),
    "udp": (f"UDP {E['UDP_LEN']} B -P {E['UDP_STREAMS']}, kpkt/s rx", lambda j: udp_rx(j) / 1e3, "{:.1f}"),
}


def ms(xs):
    m = statistics.mean(xs)
    return m, (statistics.stdev(xs) if len(xs) > 1 else 0.0)


print(f"\n2. Throughput without vs with a recorder attached "
      f"({rounds} rounds, alternating ABBA, {t_run} s each, bpf_stats off)\n")
print(f"  {'test':<26} {'without':>17} {'with':>17} {'overhead':>16}")
tput = {}
for key, (title, metric, f) in tests.items():
    runs = {m: [] for m in ("without", "with")}
    for r in range(1, rounds + 1):
        for m in runs:
            j = load(f"tp_{key}_{m}_{r}.json")
            runs[m].append(metric(j))
    (mo, so), (mw, sw) = ms(runs["without"]), ms(runs["with"])
    ovh = (mo - mw) / mo * 100 if mo else float("nan")
    ovh_err = 100 * (mw / mo) * math.hypot(so / mo, sw / mw) if mo and mw else float("nan")
    cell = lambda m_, s_: f"{f.format(m_)} ± {f.format(s_)}"
    print(f"  {title:<26} {cell(mo, so):>17} {cell(mw, sw):>17} {ovh:>+8.1f}% ±{ovh_err:4.1f}")
    tput[key] = {"metric": title, "without": runs["without"], "with": runs["with"],
                 "without_mean": mo, "without_stdev": so, "with_mean": mw, "with_stdev": sw,
                 "overhead_pct": ovh, "overhead_pct_err": ovh_err}
print("  (overhead = drop of the mean with the recorder, relative to without; ± propagated from the stdevs)")
for key, t in tests.items():
    w, o = tput[key]["with"], tput[key]["without"]
    fm = t[2]
    print(f"  {key} runs: without [{', '.join(fm.format(x) for x in o)}]  with [{', '.join(fm.format(x) for x in w)}]")

# ---- 3. simulator
sim_text = open(os.path.join(tmp, "sim.txt")).read().strip()
sim_absent = os.path.exists(os.path.join(tmp, "sim.absent"))
print()
if sim_absent:
    print(sim_text)
else:
    print("3. simulator bench (ddioscope simulate --bench):")
    for line in sim_text.splitlines():
        print(f"  {line}")

out = {
    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "machine": {"nproc": int(E["NPROC"]), "cpu_model": E["CPU_MODEL"], "kernel": E["KERNEL"],
                "loadavg_1min_start": float(E["LOAD_START"]), "loadavg_1min_end": float(E["LOAD_END"])},
    "binary": E["BIN"],
    "target_hot_ns_per_event": target,
    "bpf_cost": {"prog_ids": ids, "hooks": attached.get("hooks"), "loads": cost,
                 "hot_avg_ns_both_loads": overall, "verdict": overall_verdict,
                 "floor_prog_ids": floor_att.get("prog_ids", []), "floor_both_loads": floor_overall},
    "throughput": {"rounds": rounds, "secs_per_run": t_run, "order": "ABBA", "tests": tput},
    "simulator": None if sim_absent else sim_text,
}
with open(E["OUT_JSON"], "w") as fh:
    json.dump(out, fh, indent=2)
    fh.write("\n")
PY

echo
echo "bench: done in $((SECONDS - START)) s (1-min load average at end: $(cut -d' ' -f1 /proc/loadavg)); raw results in $OUT_JSON"
