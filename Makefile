# ddioscope — build, demo, test, bench.  `make demo` and `make test` set up a
# fresh Debian machine by themselves (via `make deps`).
SHELL := /bin/bash
CARGO ?= cargo
BIN := user/target/release/ddioscope
# Each command the build or tests run, and the package that provides it.
NEEDED := clang:clang llvm-strip:llvm pkg-config:pkg-config bpftool:bpftool \
	iperf3:iperf3 ethtool:ethtool ip:iproute2 ping:iputils-ping sqlite3:sqlite3 \
	python3:python3 setpriv:util-linux chromium:chromium \
	prometheus:prometheus promtool:prometheus tmux:tmux

.PHONY: all build deps demo test unit-test system-test bench clean

all: build

build: $(BIN)

$(BIN): $(shell find user/src bpf -type f) user/Cargo.toml user/build.rs
	cd user && $(CARGO) build --release
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
	@command -v $(CARGO) >/dev/null || { echo "deps: Rust (cargo >= 1.82) is required: install it with rustup" >&2; exit 1; }
	@python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest

demo: deps build
	scripts/demo.sh

unit-test: deps
	cd user && $(CARGO) test --release

system-test: deps build
	python3 -m pytest -v tests/system

test: unit-test system-test

bench: deps build
	scripts/bench.sh

clean:
	cd user && $(CARGO) clean
