//! AFL++ entry point of the `serve_http` target (see src/lib.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| ddioscope_fuzz::serve_http(data));
}
