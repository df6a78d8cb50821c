//! A disk cache of the model's results keyed by [`SimSpec::cache_key`], so re-reading a recording does not re-simulate it; an optimisation only, silent when the cache cannot be used.
//!
//! Where: `$DDIOSCOPE_CACHE_DIR` (empty: no cache), else `$XDG_CACHE_HOME/ddioscope/model`,
//! else `~/.cache/ddioscope/model`, in a directory per build. One small JSON file per key, written to a temporary
//! name and renamed, so a reader never sees half a file and concurrent writers agree (the
//! same key always holds the same numbers). Past [`MAX_ENTRIES`] files the directory
//! is pruned to its newest half.

use std::fs;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::drive::simulate;
use super::sim::SimResult;
use super::spec::SimSpec;

/// Files kept; the oldest go first beyond this (a file is a few KiB).
pub const MAX_ENTRIES: usize = 4096;

fn dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DDIOSCOPE_CACHE_DIR") {
        return (!d.is_empty()).then(|| PathBuf::from(d).join(BUILD));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("ddioscope").join("model").join(BUILD))
}

/// Entries are kept per build: a simulator change that forgot to bump `MODEL_VERSION` still
/// never reads another build's numbers.
const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "-", env!("DDIOSCOPE_GIT_COMMIT"));

/// The value stored under `key`, if any and readable.
pub fn get<T: DeserializeOwned>(key: &str) -> Option<T> {
    get_in(&dir()?, key)
}

/// Store `value` under `key`; failures (read-only home, full disk) are ignored.
pub fn put<T: Serialize>(key: &str, value: &T) {
    if let Some(d) = dir() {
        put_in(&d, key, value);
    }
}

fn get_in<T: DeserializeOwned>(d: &Path, key: &str) -> Option<T> {
    let text = fs::read(d.join(format!("{key}.json"))).ok()?;
    serde_json::from_slice(&text).ok()
}

fn put_in<T: Serialize>(d: &Path, key: &str, value: &T) {
    let Ok(json) = serde_json::to_vec(value) else {
        return;
    };
    if fs::create_dir_all(d).is_err() {
        return;
    }
    let tmp = d.join(format!(".{key}.{}.tmp", std::process::id()));
    if fs::write(&tmp, json).is_ok() && fs::rename(&tmp, d.join(format!("{key}.json"))).is_ok() {
        prune(d);
    } else {
        let _ = fs::remove_file(&tmp);
    }
}

fn prune(d: &Path) {
    let Ok(rd) = fs::read_dir(d) else { return };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ddio-model-"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= MAX_ENTRIES {
        return;
    }
    files.sort();
    for (_, p) in &files[..files.len() - MAX_ENTRIES / 2] {
        let _ = fs::remove_file(p);
    }
}

/// [`simulate`], through the cache. The miss and hand-up logs are not kept (predictions do
/// not ask for them).
pub fn simulate_cached(spec: &SimSpec) -> SimResult {
    simulate_in(dir().as_deref(), spec)
}

fn simulate_in(d: Option<&Path>, spec: &SimSpec) -> SimResult {
    let key = spec.cache_key();
    if let Some(r) = d.and_then(|d| get_in::<SimResult>(d, &key)) {
        return r;
    }
    let mut r = simulate(spec);
    r.misses.clear();
    r.handups.clear();
    if let Some(d) = d {
        put_in(d, &key, &r);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_result_is_the_simulated_one() {
        let d = tempfile::tempdir().unwrap();
        let simulate_cached = |s: &SimSpec| simulate_in(Some(d.path()), s);
        let s = SimSpec::parse("queues=2,ring=256,pkt_bytes=1024,rate_gbps=20,max_packets=40000")
            .unwrap();
        let first = simulate_cached(&s);
        assert!(d.path().join(format!("{}.json", s.cache_key())).exists());
        let again = simulate_cached(&s);
        assert_eq!(
            first.total.io_write_hit_pct(),
            again.total.io_write_hit_pct()
        );
        assert_eq!(first.per_queue, again.per_queue);
        assert_eq!(
            first.total.io_write_hit_pct(),
            simulate(&s).total.io_write_hit_pct()
        );
        // A damaged entry is simulated again, not trusted.
        fs::write(
            d.path().join(format!("{}.json", s.cache_key())),
            b"{garbage",
        )
        .unwrap();
        assert_eq!(simulate_cached(&s).per_queue, first.per_queue);
    }
}
