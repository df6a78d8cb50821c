//! Every licence declaration in the repository says the same thing: the two Cargo manifests,
//! the Debian copyright file cargo-deb packages, each BPF source's SPDX line and `license`
//! section, the LICENSE file and the README's licence section.
use std::fs;
use std::path::{Path, PathBuf};

/// The licence, as SPDX spells it (Cargo, the SPDX lines, LICENSE).
const SPDX: &str = "LGPL-2.1-only OR BSD-2-Clause";
/// The same, in the Debian copyright format's short names.
const DEP5: &str = "LGPL-2.1 or BSD-2-clause";
/// What a BPF object declares to the kernel for it: the kernel's spelling of a BSD-or-GPL
/// choice, one of the strings its license_is_gpl_compatible() accepts (GPL-only helpers
/// need one of them).
const KERNEL: &str = "Dual BSD/GPL";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let p = repo().join(rel);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// The value of the first `key = "value"` line of a Cargo manifest's [package] table.
fn manifest_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .take_while(|l| !l.starts_with('[') || l.trim() == "[package]")
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
}

#[test]
fn the_cargo_manifests_declare_the_licence() {
    for m in ["user/Cargo.toml", "user/fuzz/Cargo.toml"] {
        let text = read(m);
        assert_eq!(
            manifest_value(&text, "license").as_deref(),
            Some(SPDX),
            "{m}"
        );
        assert_eq!(manifest_value(&text, "license-file"), None, "{m}");
    }
}

#[test]
fn the_debian_package_carries_the_licence_and_its_texts() {
    let manifest = read("user/Cargo.toml");
    assert!(
        manifest.contains(r#"license-file = ["../packaging/copyright", "0"]"#),
        "cargo-deb's license-file is not packaging/copyright"
    );
    let copyright = read("packaging/copyright");
    // The Files: * paragraph's licence, and a stand-alone paragraph for each of its terms.
    let files = copyright
        .split("\n\n")
        .find(|p| p.starts_with("Files: *"))
        .expect("packaging/copyright has no `Files: *` paragraph");
    assert!(
        files.lines().any(|l| l == format!("License: {DEP5}")),
        "{files}"
    );
    assert!(copyright.contains("\nLicense: LGPL-2.1\n On Debian systems"));
    assert!(copyright.contains("/usr/share/common-licenses/LGPL-2.1"));
    let bsd = copyright
        .split("\n\n")
        .find(|p| p.starts_with("License: BSD-2-clause\n"))
        .expect("no BSD-2-clause paragraph");
    assert!(bsd.contains("Redistributions in binary form must reproduce"));
    // Continuation lines only (a blank line would end the paragraph).
    assert!(bsd.lines().skip(1).all(|l| l.starts_with(' ')), "{bsd}");
}

#[test]
fn the_licence_file_holds_both_texts() {
    let text = read("LICENSE");
    assert!(text.contains(&format!("SPDX-License-Identifier: {SPDX}")));
    assert!(text.contains(&format!("\"{KERNEL}\"")));
    assert!(text.contains("BSD 2-Clause License"));
    assert!(text.contains("2. Redistributions in binary form must reproduce"));
    assert!(text.contains(
        "GNU LESSER GENERAL PUBLIC LICENSE\n                       Version 2.1, February 1999"
    ));
    assert!(text.contains("END OF TERMS AND CONDITIONS"));
}

#[test]
fn the_readme_names_the_licence() {
    let readme = read("README.md");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Licence\n"))
        .expect("README.md has no Licence section");
    assert!(section.contains(SPDX), "{section}");
    assert!(section.contains(KERNEL), "{section}");
    assert!(section.contains("(LICENSE)"), "{section}");
}

/// Each BPF source (the probes and the test-only objects): its first line is the SPDX line,
/// and every `license` section it defines says [`KERNEL`]. The vmlinux.h headers (bpf/x86/,
/// bpf/arm64/, not read here) are generated from the kernel's BTF and have none.
#[test]
fn every_bpf_source_declares_the_licence() {
    let mut sources = 0;
    let mut objects = 0;
    for dir in ["bpf", "tests/bpf"] {
        let mut entries: Vec<PathBuf> = fs::read_dir(repo().join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "h"))
            .collect();
        entries.sort();
        for p in entries {
            let name = p.display().to_string();
            let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
            let first = text.lines().next().unwrap_or("");
            let spdx = first
                .trim_start_matches("//")
                .trim_start_matches("/*")
                .trim_end_matches("*/")
                .trim();
            assert_eq!(spdx, format!("SPDX-License-Identifier: {SPDX}"), "{name}");
            assert_eq!(text.matches("SPDX-License-Identifier").count(), 1, "{name}");
            sources += 1;
            for line in text.lines().filter(|l| l.contains("SEC(\"license\")")) {
                assert!(
                    line.trim() == format!("char LICENSE[] SEC(\"license\") = \"{KERNEL}\";"),
                    "{name}: {line}"
                );
                objects += 1;
            }
            if name.ends_with(".bpf.c") {
                assert!(
                    text.contains("SEC(\"license\")"),
                    "{name} declares no licence to the kernel"
                );
            }
        }
    }
    // The probes (five objects) and fragcheck at least.
    assert!(
        sources >= 10 && objects >= 6,
        "{sources} sources, {objects} objects"
    );
}
