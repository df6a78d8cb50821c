//! Every committed corpus file (corpus/TARGET/*), seeds and the inputs of every bug the
//! fuzzers found, run once more through its target: a regression check on stable Rust
//! with no fuzzer installed. Seeds and bug inputs (`seed-*`, `crash-*`, `hang-*`) of the
//! recording targets also go through the attribution and the HTML page.
use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, target) in ddioscope_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no corpus", dir.display());
        for f in &files {
            let data = std::fs::read(f).unwrap();
            let started = std::time::Instant::now();
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                panic!("{} fails its target", f.display());
            }
            // Seeds and the inputs of fixed bugs also go through what is too slow to fuzz.
            let file_name = f.file_name().unwrap().to_string_lossy();
            if ["seed-", "crash-", "hang-"]
                .iter()
                .any(|p| file_name.starts_with(p))
                && std::panic::catch_unwind(|| ddioscope_fuzz::report_full(name, &data)).is_err()
            {
                panic!("{} fails the full report", f.display());
            }
            // Far above any input's normal time on a loaded machine: catches a hang, not a slowdown.
            assert!(
                started.elapsed().as_secs() < 20,
                "{} took {:?}",
                f.display(),
                started.elapsed()
            );
        }
        eprintln!("{name}: {} corpus files pass", files.len());
    }
}
