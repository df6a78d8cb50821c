#!/usr/bin/env bash
# rust-toolchain.sh find|install|clippy|fmt: the cargo that builds ddioscope.
#
#   find      print the path of a cargo whose rustc is new enough (exit 1, silent, if none)
#   install   the same, installing Debian's cargo/rustc packages when none is found and
#             Debian's are new enough; otherwise one line saying which version is needed
#   clippy    check that the cargo found has clippy (`make unit-test` runs it): Debian's
#             rust-clippy is installed for Debian's own cargo when its version matches
#             rustc's; otherwise one line saying what is missing
#   fmt       the same for rustfmt (`make unit-test` runs `cargo fmt --check`): Debian's
#             rustfmt package for Debian's cargo
#
# Looked for, in order: cargo on PATH, ~/.cargo/bin/cargo (rustup's place), /usr/bin/cargo.
# Nothing is downloaded from outside the package registries.
set -euo pipefail

# ddioscope's own code calls u32::is_multiple_of (stable in 1.87); its dependencies need
# 1.85 (clap 4.6, clap_complete, clap_mangen, tokio 1.54, getrandom 0.4 declare it).
# Checked with Debian's rustc-web 1.85: every dependency compiles, ddioscope fails at
# exactly those calls. Keep in step with rust-version in user/Cargo.toml.
MSRV=1.87

# "1.85.0" >= "1.85"?
new_enough() { printf '%s\n%s\n' "$MSRV" "$1" | sort -V -C; }

rustc_version() {  # the rustc next to a cargo: rustup's proxies and Debian's both keep it there
    local rustc; rustc="$(dirname "$1")/rustc"
    [ -x "$rustc" ] || rustc=rustc
    "$rustc" --version 2>/dev/null | awk '{print $2}'
}

find_cargo() {
    local c v
    for c in "$(command -v cargo 2>/dev/null || true)" "$HOME/.cargo/bin/cargo" /usr/bin/cargo; do
        [ -n "$c" ] && [ -x "$c" ] || continue
        v=$(rustc_version "$c")
        if [ -n "$v" ] && new_enough "$v"; then echo "$c"; return 0; fi
    done
    return 1
}

# Candidate version of a Debian package ("" when apt has none), without the epoch and revision.
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' | sed -e 's/^[0-9]*://' -e 's/[+~-].*//' | grep -v '^(none)$' || true; }

case "${1:-}" in
    find) find_cargo ;;
    install)
        find_cargo && exit 0
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq || true
        # Debian's own rustc first; bookworm's is 1.63, but its rustc-web (for the
        # browsers' builds) follows newer releases.
        for pair in cargo:rustc cargo-web:rustc-web; do
            cargo_pkg=${pair%%:*} rustc_pkg=${pair##*:}
            v=$(candidate "$rustc_pkg")
            if [ -n "$v" ] && new_enough "$v"; then
                echo "rust-toolchain: installing Debian's $cargo_pkg and $rustc_pkg $v" >&2
                apt-get install -y -qq --no-install-recommends "$cargo_pkg" "$rustc_pkg" >/dev/null
                find_cargo && exit 0
            fi
        done
        have=$(for p in rustc rustc-web; do v=$(candidate "$p"); [ -n "$v" ] && printf ' %s %s' "$p" "$v"; done)
        echo "rust-toolchain: ddioscope needs cargo and rustc >= $MSRV; none found on PATH or in ~/.cargo/bin, and Debian offers${have:- none}: install Rust >= $MSRV and re-run" >&2
        exit 1
        ;;
    clippy)
        c=$(find_cargo) || { echo "rust-toolchain: no cargo >= $MSRV found: run make deps" >&2; exit 1; }
        "$c" clippy --version >/dev/null 2>&1 && exit 0
        # Debian's clippy is built against Debian's rustc of the same version only.
        if [ "$c" = /usr/bin/cargo ]; then
            r=$(rustc_version "$c")
            [ -n "$(candidate rust-clippy)" ] || apt-get update -qq || true
            if [ "$(candidate rust-clippy | cut -d. -f1,2)" = "$(echo "$r" | cut -d. -f1,2)" ]; then
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rust-clippy >/dev/null || true
                "$c" clippy --version >/dev/null 2>&1 && exit 0
            fi
        fi
        echo "rust-toolchain: $c (rustc $(rustc_version "$c")) has no clippy: add its clippy component (rustup component add clippy where rustup manages it)" >&2
        exit 1
        ;;
    fmt)
        c=$(find_cargo) || { echo "rust-toolchain: no cargo >= $MSRV found: run make deps" >&2; exit 1; }
        "$c" fmt --version >/dev/null 2>&1 && exit 0
        if [ "$c" = /usr/bin/cargo ]; then
            [ -n "$(candidate rustfmt)" ] || apt-get update -qq || true
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rustfmt >/dev/null || true
            "$c" fmt --version >/dev/null 2>&1 && exit 0
        fi
        echo "rust-toolchain: $c (rustc $(rustc_version "$c")) has no rustfmt: add its rustfmt component (rustup component add rustfmt where rustup manages it)" >&2
        exit 1
        ;;
    *) echo "usage: $0 find|install|clippy|fmt" >&2; exit 2 ;;
esac
