//! Compiles the BPF probe families in ../bpf and generates their libbpf-rs
//! skeletons (and the Rust types of their shared C structs) into OUT_DIR.
use std::collections::BTreeSet;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

/// (name, directory under the repository): the probes, the bench's floor
/// programs, and the test-only fragcheck object loaded by
/// examples/fragcheck.rs (never by ddioscope).
const PROBES: &[(&str, &str)] = &[("qcount", "bpf"), ("pktlife", "bpf"), ("l3miss", "bpf"), ("features", "bpf"), ("floor", "bpf"), ("fragcheck", "tests/bpf")];

/// The local headers `src` pulls in with `#include "…"`, followed through the
/// headers themselves, resolved as clang resolves them (next to the including
/// file, then in the -I directory). Taken from the sources rather than listed
/// by hand because cargo treats a rerun-if-changed path that does not exist as
/// changed: one wrong name re-runs this script, and clang, on every build.
fn local_headers(src: &Path, include_dir: &Path, found: &mut BTreeSet<PathBuf>) {
    // An unreadable file is clang's to report; here it only means no headers to watch.
    let Ok(text) = fs::read_to_string(src) else { return };
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('#') else { continue };
        let Some(rest) = rest.trim_start().strip_prefix("include") else { continue };
        let Some(name) = rest.trim_start().strip_prefix('"').and_then(|r| r.split('"').next()) else { continue };
        let beside = src.parent().map(|d| d.join(name));
        let Some(header) = beside.into_iter().chain([include_dir.join(name)]).find(|p| p.is_file()) else { continue };
        if found.insert(header.clone()) {
            local_headers(&header, include_dir, found);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("..").join("bpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let mut headers = BTreeSet::new();
    for (name, dir) in PROBES {
        let src = manifest.join("..").join(dir).join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                "-I".into(),
                bpf_dir.clone().into_os_string(),
                "-Wall".into(),
                "-Wno-unused-function".into(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building BPF probe {name}: {e:#}"));
        println!("cargo:rerun-if-changed={}", src.display());
        local_headers(&src, &bpf_dir, &mut headers);
    }
    for h in headers {
        println!("cargo:rerun-if-changed={}", h.display());
    }
}
