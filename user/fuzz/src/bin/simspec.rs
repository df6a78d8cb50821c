//! AFL++ entry point of the `simspec` target (see src/lib.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| ddioscope_fuzz::simspec(data));
}
