//! What this binary is: its version, the git commit it was built from and the
//! build id of the BPF objects it embeds (set by build.rs), for `--version`,
//! recordings and the metrics.

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `git rev-parse HEAD` at build time ("unknown" outside a git checkout).
pub const GIT_COMMIT: &str = env!("DDIOSCOPE_GIT_COMMIT");
/// First 16 hex digits of a SHA-256 over the embedded BPF objects (name, length,
/// bytes of each): two binaries with the same id load the same programs.
pub const BPF_BUILD_ID: &str = env!("DDIOSCOPE_BPF_BUILD_ID");

/// `ddioscope --version`: `0.1.0 (commit 565bae0…, bpf 1f2e…)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("DDIOSCOPE_GIT_COMMIT"),
    ", bpf ",
    env!("DDIOSCOPE_BPF_BUILD_ID"),
    ")"
);

#[cfg(test)]
mod tests {
    #[test]
    fn build_id_is_16_hex_digits_and_the_long_version_names_all_three() {
        assert_eq!(super::BPF_BUILD_ID.len(), 16);
        assert!(super::BPF_BUILD_ID.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(super::LONG_VERSION.starts_with(super::VERSION));
        assert!(
            super::LONG_VERSION.contains(super::GIT_COMMIT)
                && super::LONG_VERSION.contains(super::BPF_BUILD_ID)
        );
    }
}
