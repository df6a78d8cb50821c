#!/usr/bin/env bash
# bpf-arches.sh: compile every BPF object (bpf/*.bpf.c, tests/bpf/*.bpf.c) for every
# architecture with a pinned header (bpf/<arch>/vmlinux.h), as user/build.rs does for the
# target it builds: a probe that uses a type or field one architecture's kernel lacks fails
# here, not on that architecture's first build. Needs clang and a built tree (the libbpf
# headers come from the libbpf-sys build under user/target).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
inc=$(ls -d "$here"/user/target/release/build/libbpf-sys-*/out/include 2>/dev/null | head -1 || true)
[ -n "$inc" ] && [ -f "$inc/bpf/bpf_helpers.h" ] || {
    echo "bpf-arches: no libbpf headers under user/target (build the tree first)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0
for hdr in "$here"/bpf/*/vmlinux.h; do
    arch=$(basename "$(dirname "$hdr")")
    for src in "$here"/bpf/*.bpf.c "$here"/tests/bpf/*.bpf.c; do
        clang -g -O2 -target bpf -D__TARGET_ARCH_"$arch" -fno-stack-protector \
            -I "$here/bpf/$arch" -I "$here/bpf" -I "$inc" -Wall -Wno-unused-function \
            -Wno-pass-failed -c "$src" -o "$out/$(basename "$src" .c).$arch.o"
        n=$((n + 1))
    done
    echo "bpf-arches: $arch: every object builds"
done
[ "$n" -gt 0 ] || { echo "bpf-arches: no bpf/<arch>/vmlinux.h found" >&2; exit 1; }
