#!/usr/bin/env bash
# fuzz.sh SECONDS [TARGET...]: build the fuzz targets (user/fuzz) with cargo-afl and run
# AFL++ on each for SECONDS, seeded from its committed corpus. Prints each target's
# executions, paths found, crashes and hangs; exits 1 if any target crashed or hung
# (the inputs are in the output directory it names).
#   fuzz.sh cmin TARGET...  merge the queue of the last run into the committed corpus,
#                           minimised by afl-cmin, then capped in size by greedy edge
#                           cover (user/fuzz/seeds/cap_corpus.py).
# FUZZ_OUT: output directory (default user/target/afl/out); FUZZ_NICE: nice level (19);
# FUZZ_PARALLEL=1: run the targets at the same time rather than one after another.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
TARGET_DIR=$ROOT/user/target/afl
OUT=${FUZZ_OUT:-$TARGET_DIR/out}
CORPUS=$ROOT/user/fuzz/corpus
NICE=${FUZZ_NICE:-19}
ALL=(recording recording_sql perf_csv simspec serve_http sysfs)

# Unattended runs on a shared machine: no UI, no CPU pinning, no core-dump or
# CPU-governor demands on the host's settings (AFL++ only warns of them then).
export AFL_NO_UI=1 AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1

build() {
    (cd "$ROOT/user" && CARGO_TARGET_DIR=$TARGET_DIR nice -n "$NICE" "$CARGO" afl build --release -p ddioscope-fuzz --features afl --bins)
}

stat_of() { sed -n "s/^$2 *: //p" "$1/default/fuzzer_stats" 2>/dev/null || echo 0; }

if [ "${1:-}" = cmin ]; then
    shift
    [ $# -gt 0 ] || set -- "${ALL[@]}"
    build
    for t in "$@"; do
        tmp=$(mktemp -d)
        cp "$CORPUS/$t"/* "$tmp/"
        [ -d "$OUT/$t/default/queue" ] && find "$OUT/$t/default/queue" -maxdepth 1 -type f -exec cp {} "$tmp/" \;
        min=$(mktemp -d) && rmdir "$min"
        # The shell variant: the Python afl-cmin of AFL++ 4.40c finds no coverage in these targets.
        aflbin=$(dirname "$(find "${XDG_DATA_HOME:-$HOME/.local/share}/afl.rs" -name afl-cmin.bash | sort | tail -1)")
        AFL_PATH=$aflbin PATH=$aflbin:$PATH nice -n "$NICE" "$aflbin/afl-cmin.bash" -i "$tmp" -o "$min" -- "$TARGET_DIR/release/$t" >/dev/null 2>&1
        # Seeds keep their names; everything else is named by its content.
        find "$CORPUS/$t" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'crash-*' ! -name 'hang-*' -delete
        for f in "$min"/*; do
            kept=""
            for s in "$CORPUS/$t"/seed-* "$CORPUS/$t"/crash-* "$CORPUS/$t"/hang-*; do
                if [ -f "$s" ] && cmp -s "$s" "$f"; then kept=y; fi
            done
            [ -n "$kept" ] || cp "$f" "$CORPUS/$t/$(sha1sum "$f" | cut -c1-16)"
        done
        rm -rf "$tmp" "$min"
        # Then within a size budget that keeps the repository small, by greedy edge cover.
        case $t in recording) kib=2048 ;; recording_sql) kib=1024 ;; *) kib=512 ;; esac
        nice -n "$NICE" python3 "$ROOT/user/fuzz/seeds/cap_corpus.py" "$aflbin/afl-showmap" "$TARGET_DIR/release/$t" \
            "$CORPUS/$t" $((kib * 1024))
    done
    exit 0
fi

SECS=${1:?usage: fuzz.sh SECONDS [TARGET...] | fuzz.sh cmin [TARGET...]}
shift
[ $# -gt 0 ] || set -- "${ALL[@]}"
command -v cargo-afl >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo-afl" ] || {
    echo "fuzz: cargo-afl is not installed (make fuzz-deps)" >&2; exit 1; }
build
run_one() {
    local t=$1
    # Each run starts from the committed corpus.
    rm -rf "${OUT:?}/$t"
    mkdir -p "$OUT/$t"
    # -V: stop after SECONDS; -t: 10 s per input is a hang (the slowest seed takes ~0.1 s;
    # at nice 19 on a busy shared machine, 2 s was crossed by inputs that take 0.1 s).
    nice -n "$NICE" "$CARGO" afl fuzz -V "$SECS" -t 10000 -i "$CORPUS/$t" -o "$OUT/$t" "$OUT/bin/$t" >"$OUT/$t.log" 2>&1 || {
        echo "fuzz: afl-fuzz failed on $t; see $OUT/$t.log" >&2; tail -5 "$OUT/$t.log" >&2; return 1; }
}

# The binaries run from a copy: a rebuild during a long run must not swap them under it.
mkdir -p "$OUT/bin"
for t in "$@"; do cp "$TARGET_DIR/release/$t" "$OUT/bin/$t"; done
bad=0 total=0
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
    # All targets at once (a long campaign on an otherwise idle or niced machine).
    pids=()
    for t in "$@"; do run_one "$t" & pids+=($!); done
    for p in "${pids[@]}"; do wait "$p" || bad=1; done
else
    for t in "$@"; do run_one "$t" || bad=1; done
fi
for t in "$@"; do
    d=$OUT/$t
    execs=$(stat_of "$d" execs_done) crashes=$(stat_of "$d" saved_crashes) hangs=$(stat_of "$d" saved_hangs)
    printf '%-14s %12s execs  %9s/s  %6s paths  %s crashes  %s hangs\n' "$t" "$execs" "$(stat_of "$d" execs_per_sec)" \
        "$(stat_of "$d" corpus_count)" "$crashes" "$hangs"
    total=$((total + execs))
    if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
        echo "  inputs: $d/default/crashes $d/default/hangs"
        bad=1
    fi
done
echo "fuzz: $total executions in all"
exit $bad
