//! `replay TARGET FILE...`: runs files through a target without a fuzzer, to reproduce
//! and debug what AFL++ saved (a panic prints its message and location as usual).
fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_default();
    let Some((_, target)) = ddioscope_fuzz::TARGETS.iter().find(|(n, _)| *n == name) else {
        let names: Vec<_> = ddioscope_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
        eprintln!(
            "usage: replay TARGET FILE...  (targets: {})",
            names.join(", ")
        );
        std::process::exit(2);
    };
    for f in args {
        let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let t0 = std::time::Instant::now();
        target(&data);
        eprintln!("{f}: ok in {:?}", t0.elapsed());
    }
}
