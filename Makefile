# ddioscope — build, demo, test, bench.  `make demo` and `make test` set up a
# fresh Debian machine by themselves (via `make deps`).
SHELL := /bin/bash
# rustup's default place when cargo is not on PATH (e.g. right after `make deps` installed it).
CARGO ?= $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
BIN := user/target/release/ddioscope
# Test-only loader of tests/bpf/fragcheck.bpf.c (the frag-address check).
FRAGCHECK := user/target/release/examples/fragcheck
# Each command the build or tests run, and the package that provides it.
NEEDED := curl:curl clang:clang llvm-strip:llvm pkg-config:pkg-config bpftool:bpftool \
	iperf3:iperf3 ethtool:ethtool ip:iproute2 ping:iputils-ping sqlite3:sqlite3 \
	python3:python3 setpriv:util-linux chromium:chromium \
	prometheus:prometheus promtool:prometheus tmux:tmux

# `make fuzz`: each fuzz target for FUZZ_SECS seconds (docs/fuzzing.md).
FUZZ_SECS ?= 60
# `make test`: SIGKILLs of a recorder under load (scripts/kill-trials.sh).
KILL_TRIALS ?= 3

.PHONY: all build deps demo test unit-test system-test bench clean fuzz fuzz-deps

all: build

build: $(BIN)

$(BIN): $(shell find user/src bpf -type f) user/Cargo.toml user/build.rs
	cd user && $(CARGO) build --release
	@touch $@

$(FRAGCHECK): $(BIN) $(shell find user/examples tests/bpf -type f)
	cd user && $(CARGO) build --release --example fragcheck
	@touch $@

deps:
	@missing=""; \
	for pair in $(NEEDED); do cmd=$${pair%%:*}; pkg=$${pair##*:}; \
		command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	[ -f /usr/include/libelf.h ] || missing="$$missing libelf-dev"; \
	[ -f /usr/include/zlib.h ] || missing="$$missing zlib1g-dev"; \
	if [ -n "$$missing" ]; then \
		echo "deps: installing$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@command -v $(CARGO) >/dev/null 2>&1 || { \
		echo "deps: installing Rust (rustup, minimal stable toolchain) into $(HOME)/.cargo"; \
		tmp=$$(mktemp -d) && \
		curl -sSfL -o $$tmp/rustup-init https://static.rust-lang.org/rustup/dist/$$(uname -m)-unknown-linux-gnu/rustup-init && \
		chmod +x $$tmp/rustup-init && \
		$$tmp/rustup-init -y -q --profile minimal --component rustfmt --no-modify-path >/dev/null; \
		rc=$$?; rm -rf $$tmp; \
		[ $$rc -eq 0 ] && [ -x $(HOME)/.cargo/bin/cargo ] || { echo "deps: could not install Rust; install cargo >= 1.82 with rustup" >&2; exit 1; }; }
	@python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest

demo: deps build
	scripts/demo.sh

# The ground-truth tests print their accuracy tables: shown, not captured.
unit-test: deps
	cd user && $(CARGO) test --release -- --skip ground_truth
	cd user && $(CARGO) test --release --lib ground_truth -- --nocapture --test-threads 1
	cd user && $(CARGO) test --release -p ddioscope-fuzz

system-test: deps build $(FRAGCHECK)
	python3 -m pytest -v tests/system
	scripts/kill-trials.sh $(KILL_TRIALS)

test: unit-test system-test

# cargo-afl builds AFL++ from the source its crate ships (crates.io only).
fuzz-deps: deps
	@command -v cargo-afl >/dev/null 2>&1 || [ -x $(HOME)/.cargo/bin/cargo-afl ] || \
		$(CARGO) install cargo-afl --version 0.18.2 --locked

fuzz: fuzz-deps
	CARGO=$(CARGO) scripts/fuzz.sh $(FUZZ_SECS)

bench: deps build
	scripts/bench.sh

clean:
	cd user && $(CARGO) clean
