//! The LLC geometry a recording is evaluated for: the one recorded with the run, or the
//! recorded host's LLC with the default DDIO ways, or on a host without DDIO a named Intel
//! stand-in; then the command line's overrides.
use anyhow::{bail, Result};

use crate::model::geometry::{vendor_has_ddio, LlcGeometry, StandIn};
use crate::recording::Recording;

/// Command-line overrides, so a recording from one host can be evaluated for another cache
/// than the one it was taken on.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct GeometryOverrides {
    /// LLC size in MiB (default: the recording host's).
    #[arg(long, value_name = "MIB", value_parser = crate::model::spec::flag::llc_mib)]
    pub llc_mib: Option<f64>,
    /// LLC associativity (default: the recording host's).
    #[arg(long, value_name = "N", value_parser = crate::model::spec::flag::llc_ways)]
    pub llc_ways: Option<u32>,
    /// DDIO (IIO LLC WAYS) ways (default: read from MSR 0xC8B at record time, else 2).
    #[arg(long, value_name = "N", value_parser = crate::model::spec::flag::ddio_ways)]
    pub ddio_ways: Option<u32>,
}

impl GeometryOverrides {
    /// Any of the flags given: a geometry that fails is then the user's to fix, not a
    /// property of the recording to report around.
    pub fn any(&self) -> bool {
        self.llc_mib.is_some() || self.llc_ways.is_some() || self.ddio_ways.is_some()
    }
}

/// The Intel LLC the recording is modelled as when its host has no DDIO and the command
/// line names no LLC: predicting DDIO for a cache without it would describe nothing real.
pub fn stand_in(rec: &Recording, o: GeometryOverrides) -> Option<StandIn> {
    let no_ddio = vendor_has_ddio(&rec.host().cpu_vendor) == Some(false);
    (no_ddio && o.llc_mib.is_none() && o.llc_ways.is_none()).then(LlcGeometry::intel_stand_in)
}

/// Where the modelled LLC comes from, in words: the recording, the command line, or the
/// named stand-in and why it was picked.
pub fn origin(rec: &Recording, o: GeometryOverrides) -> String {
    if let Some(s) = stand_in(rec, o) {
        return format!("a stand-in, as this host has no DDIO: {}", s.describe());
    }
    let what = if rec.meta.geometry.is_some() {
        "the recording host's LLC (sysfs) and DDIO ways (MSR 0xC8B) at record time"
    } else {
        "the recording host's LLC (sysfs)"
    };
    if o.llc_mib.is_some() || o.llc_ways.is_some() {
        format!("--llc-mib/--llc-ways on the command line, in place of {what}")
    } else {
        what.to_string()
    }
}

/// The geometry recorded with the run (sysfs + MSR 0xC8B at record time),
/// else the recorded host's LLC with the default 2 DDIO ways; on a host without DDIO the
/// Intel stand-in; then overrides.
pub fn geometry(rec: &Recording, o: GeometryOverrides) -> Result<LlcGeometry> {
    let base = match (stand_in(rec, o), rec.meta.geometry.clone()) {
        (Some(s), _) => Some(s.geometry),
        (None, Some(g)) => Some(g),
        (None, None) => rec
            .host()
            .llc
            .and_then(|l| LlcGeometry::new(l.size_bytes, l.ways, l.line_bytes.max(64)).ok()),
    };
    let g = match base {
        Some(g) => g,
        None => match (o.llc_mib, o.llc_ways) {
            (Some(mib), Some(ways)) => LlcGeometry::new((mib * 1048576.0) as u64, ways, 64)?,
            _ => bail!(
                "{} records no LLC geometry; pass --llc-mib and --llc-ways",
                rec.path.display()
            ),
        },
    };
    Ok(g.with_overrides(o.llc_mib, o.llc_ways, o.ddio_ways)?)
}
