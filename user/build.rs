//! Compiles the BPF probe families in ../bpf and generates their libbpf-rs
//! skeletons (and the Rust types of their shared C structs) into OUT_DIR.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// (name, directory under the repository): the probes, and the test-only
/// fragcheck object loaded by examples/fragcheck.rs (never by ddioscope).
const PROBES: &[(&str, &str)] = &[("pktlife", "bpf"), ("features", "bpf"), ("fragcheck", "tests/bpf")];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("..").join("bpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
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
        println!("cargo:rerun-if-changed={}", bpf_dir.join(format!("{name}.h")).display());
    }
    println!("cargo:rerun-if-changed={}", bpf_dir.join("vmlinux.h").display());
    println!("cargo:rerun-if-changed={}", bpf_dir.join("fragaddr.h").display());
    println!("cargo:rerun-if-changed={}", bpf_dir.join("pktlife.hooks.h").display());
}
