//! LLC geometry (size, ways, sets, slices) and the DDIO way mask (IIO LLC WAYS, MSR 0xC8B): sysfs/MSR readers, mask arithmetic, overrides.

use std::fmt;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Fraction of the nominal DDIO capacity a ring working set can fill and still see ≥97%
/// write hits — the target for *recommended* rings. Sets are hashed across slices, so a
/// working set smaller than the DDIO ways already overloads some sets, and the core's own
/// fills share those ways. Measured on Skylake-SP (Farshin et al., ATC'20, ddio-bench):
/// 97% needs footprint ≲ 0.45 × nominal.
pub const USABLE_DDIO_FRACTION: f64 = 0.45;

/// MSR holding the bitmask of LLC ways that DDIO write-allocates may fill (package scope).
pub const MSR_IIO_LLC_WAYS: u64 = 0xC8B;

/// Sets per LLC slice on the Xeon generations we model (SKX/CLX: 1.375 MiB, 11 ways;
/// SPR: 1.875 MiB, 15 ways). Used only to infer the slice count from sysfs, which does
/// not report slices.
pub const SETS_PER_SLICE_SKX: u32 = 2048;

/// DDIO ways when the MSR cannot be read: the SKX/CLX/ICX/SPR power-on default (0x600 on SKX).
pub const DEFAULT_DDIO_WAYS: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaysSource {
    /// Read from MSR 0xC8B.
    Measured,
    /// MSR unreadable (no msr module, not root, VM): platform default assumed.
    Assumed,
    /// Set by the user (`--ddio-ways`).
    Override,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlcGeometry {
    pub size_bytes: u64,
    pub ways: u32,
    pub sets: u32,
    pub line_bytes: u32,
    /// Number of LLC slices (CHAs) when known or inferable; sets are split evenly across them.
    pub slices: Option<u32>,
    pub ddio_ways: u32,
    pub ddio_ways_source: WaysSource,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GeometryError {
    #[error("no unified level-3 cache under {0}")]
    NoLlc(String),
    #[error("cannot read {path}: {msg}")]
    Io { path: String, msg: String },
    #[error("cannot parse {path}: {value:?}")]
    Parse { path: String, value: String },
    #[error("IIO LLC WAYS mask {mask:#x} is empty")]
    EmptyMask { mask: u64 },
    #[error("IIO LLC WAYS mask {mask:#x} has bits above the {ways} LLC ways")]
    MaskTooWide { mask: u64, ways: u32 },
    #[error("IIO LLC WAYS mask {mask:#x} is not contiguous from the top way of {ways}")]
    NotTopContiguous { mask: u64, ways: u32 },
    #[error("{n} DDIO ways requested but the LLC has {ways}")]
    TooManyWays { n: u32, ways: u32 },
    #[error("invalid geometry: {0}")]
    Invalid(String),
}

impl LlcGeometry {
    /// Build a geometry from size and associativity (64 B lines), inferring sets and
    /// slices; DDIO ways default (Assumed).
    pub fn new(size_bytes: u64, ways: u32, line_bytes: u32) -> Result<Self, GeometryError> {
        if ways == 0 || line_bytes == 0 || size_bytes < (ways as u64) * (line_bytes as u64) {
            return Err(GeometryError::Invalid(format!(
                "size {size_bytes} B, {ways} ways, {line_bytes} B lines"
            )));
        }
        let sets = (size_bytes / (ways as u64 * line_bytes as u64)) as u32;
        let mut g = LlcGeometry {
            size_bytes,
            ways,
            sets,
            line_bytes,
            slices: None,
            ddio_ways: DEFAULT_DDIO_WAYS.min(ways),
            ddio_ways_source: WaysSource::Assumed,
        };
        g.slices = g.infer_slices();
        Ok(g)
    }

    /// Xeon Gold 6140 (Skylake-SP), the ddio-bench testbed: 24.75 MiB, 11 ways, 18 slices.
    pub fn skx_gold_6140() -> Self {
        LlcGeometry {
            size_bytes: 24_750 * 1024 * 1024 / 1000,
            ways: 11,
            sets: 18 * 2048,
            line_bytes: 64,
            slices: Some(18),
            ddio_ways: 2,
            ddio_ways_source: WaysSource::Assumed,
        }
    }

    /// Xeon E5-2695 v4 (Broadwell-EP), the ResQ testbed: 45 MiB inclusive LLC, 20 ways,
    /// 18 slices of 2.5 MiB; DDIO ways 2 (10% of the LLC, ~4.5 MB as ResQ states).
    pub fn bdw_e5_2695v4() -> Self {
        LlcGeometry {
            size_bytes: 45 * 1024 * 1024,
            ways: 20,
            sets: 18 * 2048,
            line_bytes: 64,
            slices: Some(18),
            ddio_ways: 2,
            ddio_ways_source: WaysSource::Assumed,
        }
    }

    /// Xeon Platinum 8592+ (Emerald Rapids), one socket. ASSUMPTION (not in the paper's
    /// platform text): Intel lists 320 MB of L3 per processor (64 cores x 5 MiB slices);
    /// we take 20 ways (a 5 MiB slice = 4096 sets x 20 ways x 64 B, keeping a power-of-two
    /// set count per slice as on SKX/SPR) and the default 2 DDIO ways.
    pub fn emr_platinum_8592() -> Self {
        LlcGeometry {
            size_bytes: 320 * 1024 * 1024,
            ways: 20,
            sets: 64 * 4096,
            line_bytes: 64,
            slices: Some(64),
            ddio_ways: 2,
            ddio_ways_source: WaysSource::Assumed,
        }
    }

    /// The Intel LLC the model predicts for when the host has no DDIO: see [`StandIn`].
    pub fn intel_stand_in() -> StandIn {
        StandIn {
            preset: "skx6140",
            part: "Xeon Gold 6140 (Skylake-SP)",
            geometry: LlcGeometry::skx_gold_6140(),
            why: "the Intel part whose published DDIO hit rates (ddio-bench) the model is validated against",
        }
    }

    /// Nominal DDIO capacity: the bytes of the ways I/O writes may allocate into.
    pub fn ddio_capacity_bytes(&self) -> u64 {
        self.size_bytes * self.ddio_ways as u64 / self.ways.max(1) as u64
    }

    /// Capacity a ring working set can use before hash conflicts make writes miss
    /// (see [`USABLE_DDIO_FRACTION`]).
    pub fn usable_ddio_bytes(&self) -> u64 {
        (self.ddio_capacity_bytes() as f64 * USABLE_DDIO_FRACTION) as u64
    }

    pub fn lines(&self) -> u64 {
        self.sets as u64 * self.ways as u64
    }

    /// The IIO LLC WAYS mask for the current DDIO way count.
    pub fn ddio_mask(&self) -> u64 {
        ways_to_mask(self.ddio_ways, self.ways).unwrap_or(0)
    }

    fn infer_slices(&self) -> Option<u32> {
        // sysfs has no slice count; SKX-style slices hold 2048 sets, so a set count that
        // is a multiple of 2048 is split that way. Otherwise leave it unknown (the
        // simulator then hashes over a single "slice" of all sets).
        if self.sets >= SETS_PER_SLICE_SKX && self.sets.is_multiple_of(SETS_PER_SLICE_SKX) {
            Some(self.sets / SETS_PER_SLICE_SKX)
        } else {
            None
        }
    }

    /// Apply `--llc-mib`, `--llc-ways`, `--ddio-ways`. Sets and slices are recomputed when
    /// size or ways change.
    pub fn with_overrides(
        mut self,
        llc_mib: Option<f64>,
        llc_ways: Option<u32>,
        ddio_ways: Option<u32>,
    ) -> Result<Self, GeometryError> {
        if llc_mib.is_some() || llc_ways.is_some() {
            let size = llc_mib
                .map(|m| (m * 1024.0 * 1024.0).round() as u64)
                .unwrap_or(self.size_bytes);
            let ways = llc_ways.unwrap_or(self.ways);
            let g = LlcGeometry::new(size, ways, self.line_bytes)?;
            self.size_bytes = g.size_bytes;
            self.ways = g.ways;
            self.sets = g.sets;
            self.slices = g.slices;
            self.ddio_ways = self.ddio_ways.min(self.ways);
        }
        if let Some(n) = ddio_ways {
            if n == 0 || n > self.ways {
                return Err(GeometryError::TooManyWays { n, ways: self.ways });
            }
            self.ddio_ways = n;
            self.ddio_ways_source = WaysSource::Override;
        }
        Ok(self)
    }

    /// Read the LLC of `cpu` from `<sys_root>/devices/system/cpu/cpuN/cache/index*` and the
    /// DDIO ways from `<dev_root>/cpu/N/msr` (read-only). `sys_root` is normally `/sys`,
    /// `dev_root` `/dev`; tests pass fixture trees.
    pub fn detect(sys_root: &Path, dev_root: &Path, cpu: u32) -> Result<Self, GeometryError> {
        let mut g = Self::from_sysfs(sys_root, cpu)?;
        match read_iio_llc_ways_mask(dev_root, cpu) {
            Ok(mask) if mask_to_ways(mask, g.ways).is_ok() => {
                g.ddio_ways = mask.count_ones();
                g.ddio_ways_source = WaysSource::Measured;
            }
            _ => {
                // Unreadable MSR is the common case (no root, no msr module, VM), and a
                // malformed mask is no better: fall back to the power-on default and say
                // so through ddio_ways_source.
                g.ddio_ways = DEFAULT_DDIO_WAYS.min(g.ways);
                g.ddio_ways_source = WaysSource::Assumed;
            }
        }
        Ok(g)
    }

    /// LLC geometry from sysfs cacheinfo: the unified cache with the highest level.
    pub fn from_sysfs(sys_root: &Path, cpu: u32) -> Result<Self, GeometryError> {
        let dir = sys_root.join(format!("devices/system/cpu/cpu{cpu}/cache"));
        let rd = fs::read_dir(&dir).map_err(|e| GeometryError::Io {
            path: dir.display().to_string(),
            msg: e.to_string(),
        })?;
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("index"))
            .collect();
        names.sort();
        let mut best: Option<(u32, std::path::PathBuf)> = None;
        for n in names {
            let p = dir.join(&n);
            let Ok(level) = read_u64(&p.join("level")) else {
                continue;
            };
            let ty = fs::read_to_string(p.join("type")).unwrap_or_default();
            if ty.trim() != "Unified" {
                continue;
            }
            if best.as_ref().is_none_or(|(l, _)| (level as u32) > *l) {
                best = Some((level as u32, p));
            }
        }
        let (level, p) = best.ok_or_else(|| GeometryError::NoLlc(dir.display().to_string()))?;
        if level < 3 {
            return Err(GeometryError::NoLlc(dir.display().to_string()));
        }
        let size = parse_size(&p.join("size"))?;
        let ways = read_u64(&p.join("ways_of_associativity"))? as u32;
        let line = read_u64(&p.join("coherency_line_size")).unwrap_or(64) as u32;
        let mut g = LlcGeometry::new(size, ways, line)?;
        if let Ok(sets) = read_u64(&p.join("number_of_sets")) {
            if sets > 0 {
                g.sets = sets as u32;
                g.slices = g.infer_slices();
            }
        }
        Ok(g)
    }
}

impl fmt::Display for LlcGeometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LLC {:.2} MiB, {} ways x {} sets, DDIO {} ways ({:?}, mask {:#x}) = {:.2} MiB",
            self.size_bytes as f64 / 1048576.0,
            self.ways,
            self.sets,
            self.ddio_ways,
            self.ddio_ways_source,
            self.ddio_mask(),
            self.ddio_capacity_bytes() as f64 / 1048576.0
        )
    }
}

fn read_u64(p: &Path) -> Result<u64, GeometryError> {
    let s = fs::read_to_string(p).map_err(|e| GeometryError::Io {
        path: p.display().to_string(),
        msg: e.to_string(),
    })?;
    s.trim().parse::<u64>().map_err(|_| GeometryError::Parse {
        path: p.display().to_string(),
        value: s.trim().to_string(),
    })
}

/// sysfs cache `size` is like "25344K" (KiB) or occasionally "24M".
fn parse_size(p: &Path) -> Result<u64, GeometryError> {
    let s = fs::read_to_string(p).map_err(|e| GeometryError::Io {
        path: p.display().to_string(),
        msg: e.to_string(),
    })?;
    let t = s.trim();
    let bad = || GeometryError::Parse {
        path: p.display().to_string(),
        value: t.to_string(),
    };
    let (num, mult) = match t.chars().last() {
        Some('K') | Some('k') => (&t[..t.len() - 1], 1024u64),
        Some('M') | Some('m') => (&t[..t.len() - 1], 1024 * 1024),
        Some('G') | Some('g') => (&t[..t.len() - 1], 1024 * 1024 * 1024),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .map(|v| v * mult)
        .map_err(|_| bad())
}

/// pread 8 bytes at offset 0xC8B of `<dev_root>/cpu/N/msr`. Opened read-only: ddioscope
/// never writes MSRs.
pub fn read_iio_llc_ways_mask(dev_root: &Path, cpu: u32) -> Result<u64, GeometryError> {
    use std::os::unix::fs::FileExt;
    let path = dev_root.join(format!("cpu/{cpu}/msr"));
    let io = |e: std::io::Error| GeometryError::Io {
        path: path.display().to_string(),
        msg: e.to_string(),
    };
    let f = fs::OpenOptions::new().read(true).open(&path).map_err(io)?;
    let mut buf = [0u8; 8];
    f.read_exact_at(&mut buf, MSR_IIO_LLC_WAYS).map_err(io)?;
    Ok(u64::from_le_bytes(buf))
}

/// Number of DDIO ways in an IIO LLC WAYS mask. The set bits must be one contiguous run
/// within the LLC's ways. Intel programs the top ways (see [`is_top_contiguous`]), but
/// Haswell-EP's default 0x60000 on a 20-way LLC is not at the top, so position is not
/// enforced when reading a measured value.
pub fn mask_to_ways(mask: u64, ways: u32) -> Result<u32, GeometryError> {
    if mask == 0 {
        return Err(GeometryError::EmptyMask { mask });
    }
    if ways < 64 && mask >> ways != 0 {
        return Err(GeometryError::MaskTooWide { mask, ways });
    }
    let run = mask >> mask.trailing_zeros();
    if run & (run + 1) != 0 {
        return Err(GeometryError::NotTopContiguous { mask, ways });
    }
    Ok(mask.count_ones())
}

/// True when `mask` is the top-N-ways form the recommendations emit.
pub fn is_top_contiguous(mask: u64, ways: u32) -> bool {
    ways_to_mask(mask.count_ones(), ways).is_ok_and(|m| m == mask)
}

/// The top `n` bits of a `ways`-bit mask, e.g. 2 of 11 -> 0x600, 4 of 11 -> 0x780.
pub fn ways_to_mask(n: u32, ways: u32) -> Result<u64, GeometryError> {
    if n == 0 || n > ways || ways > 63 {
        return Err(GeometryError::TooManyWays { n, ways });
    }
    let low = (1u64 << n) - 1;
    Ok(low << (ways - n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(p: &str) -> std::path::PathBuf {
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/model"
        ))
        .join(p)
    }

    #[test]
    fn masks() {
        assert_eq!(ways_to_mask(2, 11).unwrap(), 0x600);
        assert_eq!(ways_to_mask(4, 11).unwrap(), 0x780);
        assert_eq!(ways_to_mask(11, 11).unwrap(), 0x7ff);
        assert_eq!(mask_to_ways(0x600, 11).unwrap(), 2);
        assert_eq!(mask_to_ways(0x780, 11).unwrap(), 4);
        assert_eq!(mask_to_ways(0x60000, 20).unwrap(), 2); // Haswell-EP default
        assert!(!is_top_contiguous(0x60000, 20));
        assert!(is_top_contiguous(0x780, 11));
        assert!(!is_top_contiguous(0x300, 11));
        assert!(matches!(
            mask_to_ways(0x500, 11),
            Err(GeometryError::NotTopContiguous { .. })
        ));
        assert!(matches!(
            mask_to_ways(0x1800, 11),
            Err(GeometryError::MaskTooWide { .. })
        ));
        assert!(mask_to_ways(0, 11).is_err());
        assert!(ways_to_mask(12, 11).is_err());
    }

    #[test]
    fn skx_capacity() {
        let g = LlcGeometry::skx_gold_6140();
        let c = g.ddio_capacity_bytes() as f64 / 1048576.0;
        assert!((c - 4.5).abs() < 0.01, "{c}");
        assert_eq!(g.lines(), 405_504);
    }

    #[test]
    fn sysfs_skx_with_msr() {
        let g =
            LlcGeometry::detect(&fixture("sysfs_skx6140"), &fixture("dev_msr_0x780"), 0).unwrap();
        assert_eq!(g.ways, 11);
        assert_eq!(g.sets, 36864);
        assert_eq!(g.size_bytes, 25344 * 1024);
        assert_eq!(g.slices, Some(18));
        assert_eq!(g.ddio_ways, 4);
        assert_eq!(g.ddio_ways_source, WaysSource::Measured);
    }

    #[test]
    fn sysfs_without_msr_assumes_default() {
        let g = LlcGeometry::detect(&fixture("sysfs_skx6140"), &fixture("no_such_dev"), 0).unwrap();
        assert_eq!(g.ddio_ways, 2);
        assert_eq!(g.ddio_ways_source, WaysSource::Assumed);
        let o = g.with_overrides(Some(16.0), Some(16), Some(3)).unwrap();
        assert_eq!(o.ways, 16);
        assert_eq!(o.size_bytes, 16 << 20);
        assert_eq!(o.ddio_ways, 3);
        assert_eq!(o.ddio_ways_source, WaysSource::Override);
        assert_eq!(o.ddio_mask(), 0xE000);
    }

    #[test]
    fn sysfs_missing_llc() {
        assert!(LlcGeometry::from_sysfs(&fixture("nonexistent"), 0).is_err());
    }
}

/// The named Intel LLC a host without DDIO is modelled as, and why that one: the model
/// would otherwise apply DDIO to a cache (an AMD L3) that has none.
#[derive(Debug, Clone)]
pub struct StandIn {
    /// As `simulate preset=` spells it.
    pub preset: &'static str,
    pub part: &'static str,
    pub geometry: LlcGeometry,
    pub why: &'static str,
}

impl StandIn {
    /// "preset skx6140, Xeon Gold 6140 (Skylake-SP): 24.75 MiB LLC, 11 ways, 2 DDIO ways,
    /// picked as WHY".
    pub fn describe(&self) -> String {
        let g = &self.geometry;
        format!(
            "preset {}, {}: {:.2} MiB LLC, {} ways, {} DDIO ways; picked as {}",
            self.preset,
            self.part,
            g.size_bytes as f64 / 1048576.0,
            g.ways,
            g.ddio_ways,
            self.why
        )
    }
}

/// Whether a CPU vendor's parts have DDIO (Intel's Xeons); None: the vendor is unknown.
pub fn vendor_has_ddio(vendor: &str) -> Option<bool> {
    (!vendor.is_empty()).then(|| vendor == "GenuineIntel")
}
