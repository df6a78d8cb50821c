//! The LLC geometry a recording is evaluated for: the one recorded with the run, or the
//! recorded host's LLC with the default DDIO ways, then the command line's overrides.
use anyhow::{bail, Result};

use crate::model::geometry::LlcGeometry;
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

/// The geometry recorded with the run (sysfs + MSR 0xC8B at record time),
/// else the recorded host's LLC with the default 2 DDIO ways, then overrides.
pub fn geometry(rec: &Recording, o: GeometryOverrides) -> Result<LlcGeometry> {
    let base = match rec.meta.geometry.clone() {
        Some(g) => Some(g),
        None => rec
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
