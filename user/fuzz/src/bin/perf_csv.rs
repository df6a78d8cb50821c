//! AFL++ entry point of the `perf_csv` target (see src/lib.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| ddioscope_fuzz::perf_csv(data));
}
