//! AFL++ entry point of the `sysfs` target (see src/lib.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| ddioscope_fuzz::sysfs(data));
}
