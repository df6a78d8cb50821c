//! Compiles the BPF probe families in ../bpf and generates their libbpf-rs
//! skeletons (and the Rust types of their shared C structs) into OUT_DIR; tells
//! the crate its git commit and the build id of the BPF objects it embeds.
use std::collections::BTreeSet;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;
use sha2::{Digest, Sha256};

/// (name, directory under the repository): the probes, the bench's floor
/// programs, and the test-only objects: fragcheck, loaded by
/// examples/fragcheck.rs, and hashcheck, by the attribution ground-truth tests
/// (never by ddioscope).
const PROBES: &[(&str, &str)] = &[
    ("qcount", "bpf"),
    ("pktlife", "bpf"),
    ("l3miss", "bpf"),
    ("features", "bpf"),
    ("floor", "bpf"),
    ("fragcheck", "tests/bpf"),
    ("hashcheck", "tests/bpf"),
];

/// Whether the ddioscope binary embeds a probe (every one under bpf/; those under
/// tests/bpf are the tests' alone): their bytes make the BPF build id.
fn embedded(dir: &str) -> bool {
    dir == "bpf"
}

/// `git rev-parse HEAD` of the checkout being built, or DDIOSCOPE_GIT_COMMIT
/// when building from a tree without git (a source package); "unknown" when
/// neither says. Re-run when HEAD moves: a commit writes the worktree's
/// logs/HEAD and the branch's ref file.
fn git_commit(manifest: &Path) -> String {
    println!("cargo:rerun-if-env-changed=DDIOSCOPE_GIT_COMMIT");
    if let Some(c) = env::var("DDIOSCOPE_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
    {
        return c;
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(manifest)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "HEAD"]) else {
        return "unknown".into();
    };
    for (dir_arg, files) in [
        ("--git-dir", &["HEAD", "logs/HEAD"][..]),
        ("--git-common-dir", &["packed-refs"][..]),
    ] {
        if let Some(dir) = git(&["rev-parse", dir_arg]) {
            let dir = manifest.join(dir);
            for f in files {
                let p = dir.join(f);
                if p.is_file() {
                    println!("cargo:rerun-if-changed={}", p.display());
                }
            }
        }
    }
    if let (Some(dir), Some(head)) = (
        git(&["rev-parse", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        let p = manifest.join(dir).join(head);
        if p.is_file() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    commit
}

/// The directory under bpf/ holding the vmlinux.h of the architecture Cargo
/// builds for (libbpf-cargo defines the matching __TARGET_ARCH_ from the same
/// variable).
fn vmlinux_dir(bpf_dir: &Path) -> PathBuf {
    let target = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let arch = match target.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => panic!(
            "no vmlinux.h for target architecture {other:?}: the probes build for x86_64 and \
             aarch64 (bpf/VMLINUX.md says how each header was made)"
        ),
    };
    bpf_dir.join(arch)
}

/// The local headers `src` pulls in with `#include "…"`, followed through the
/// headers themselves, resolved as clang resolves them (next to the including
/// file, then in the -I directories in order). Taken from the sources rather than listed
/// by hand because cargo treats a rerun-if-changed path that does not exist as
/// changed: one wrong name re-runs this script, and clang, on every build.
fn local_headers(src: &Path, include_dirs: &[PathBuf], found: &mut BTreeSet<PathBuf>) {
    // An unreadable file is clang's to report; here it only means no headers to watch.
    let Ok(text) = fs::read_to_string(src) else {
        return;
    };
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix("include") else {
            continue;
        };
        let Some(name) = rest
            .trim_start()
            .strip_prefix('"')
            .and_then(|r| r.split('"').next())
        else {
            continue;
        };
        let beside = src.parent().map(|d| d.join(name));
        let Some(header) = beside
            .into_iter()
            .chain(include_dirs.iter().map(|d| d.join(name)))
            .find(|p| p.is_file())
        else {
            continue;
        };
        if found.insert(header.clone()) {
            local_headers(&header, include_dirs, found);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("..").join("bpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    // The target's vmlinux.h first, then the shared headers.
    let include_dirs = [vmlinux_dir(&bpf_dir), bpf_dir.clone()];
    let mut headers = BTreeSet::new();
    let mut bpf_hash = Sha256::new();
    for (name, dir) in PROBES {
        let src = manifest.join("..").join(dir).join(format!("{name}.bpf.c"));
        let obj = out.join(format!("{name}.bpf.o"));
        SkeletonBuilder::new()
            .source(&src)
            .obj(&obj)
            .clang_args([
                "-I".into(),
                include_dirs[0].clone().into_os_string(),
                "-I".into(),
                include_dirs[1].clone().into_os_string(),
                "-Wall".into(),
                "-Wno-unused-function".into(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building BPF probe {name}: {e:#}"));
        if embedded(dir) {
            // The skeleton embeds exactly this file's bytes.
            let bytes = fs::read(&obj).unwrap_or_else(|e| panic!("reading {}: {e}", obj.display()));
            bpf_hash.update(name.as_bytes());
            bpf_hash.update((bytes.len() as u64).to_le_bytes());
            bpf_hash.update(&bytes);
        }
        println!("cargo:rerun-if-changed={}", src.display());
        local_headers(&src, &include_dirs, &mut headers);
    }
    for h in headers {
        println!("cargo:rerun-if-changed={}", h.display());
    }
    let id: String = bpf_hash
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("cargo:rustc-env=DDIOSCOPE_BPF_BUILD_ID={id}");
    println!(
        "cargo:rustc-env=DDIOSCOPE_GIT_COMMIT={}",
        git_commit(&manifest)
    );
}
