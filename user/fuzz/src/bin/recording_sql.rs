//! AFL++ entry point of the `recording_sql` target (see src/lib.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| ddioscope_fuzz::recording_sql(data));
}
