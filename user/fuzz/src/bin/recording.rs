//! AFL++ entry point of the `recording` target (see src/lib.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| ddioscope_fuzz::recording(data));
}
