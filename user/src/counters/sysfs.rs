//! PMU discovery under a sysfs root: uncore boxes, their `format/` fields, cpumasks, IIO stack -> PCI root bus
//! mapping, CPU -> socket topology, and the generic "set field NAME to VALUE" config encoder.

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::platform::Platform;

/// The kind of PMU box a counter lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Cha,
    Iio,
    Imc,
    Irp,
    Core,
}

impl Unit {
    /// Short label used in `CounterReading::pmu`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Cha => "cha",
            Unit::Iio => "iio",
            Unit::Imc => "imc",
            Unit::Irp => "irp",
            Unit::Core => "core",
        }
    }

    /// sysfs PMU name (boxes append `_N`).
    pub fn pmu_prefix(self) -> &'static str {
        match self {
            Unit::Cha => "uncore_cha",
            Unit::Iio => "uncore_iio",
            Unit::Imc => "uncore_imc",
            Unit::Irp => "uncore_irp",
            Unit::Core => "cpu",
        }
    }

    pub fn from_label(s: &str) -> Option<Unit> {
        [Unit::Cha, Unit::Iio, Unit::Imc, Unit::Irp, Unit::Core]
            .into_iter()
            .find(|u| u.as_str() == s)
    }

    /// Programmable counters per box (uncore) or per logical CPU with HT on (core).
    pub fn counters(self, platform: Platform) -> u32 {
        match (self, platform) {
            (
                Unit::Irp,
                Platform::Skx | Platform::Clx | Platform::Icx | Platform::Spr | Platform::Emr,
            ) => 2,
            _ => 4,
        }
    }
}

/// The perf_event_attr config words a format field can live in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConfigWords {
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    pub config3: u64,
}

impl ConfigWords {
    fn word_mut(&mut self, w: usize) -> &mut u64 {
        match w {
            0 => &mut self.config,
            1 => &mut self.config1,
            2 => &mut self.config2,
            _ => &mut self.config3,
        }
    }
    fn word(&self, w: usize) -> u64 {
        match w {
            0 => self.config,
            1 => self.config1,
            2 => self.config2,
            _ => self.config3,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BitRange {
    /// 0 = config, 1 = config1, 2 = config2, 3 = config3.
    pub word: usize,
    pub lo: u32,
    pub hi: u32,
}

/// One PMU's `format/` directory: field name -> bit ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PmuFormat {
    pub fields: BTreeMap<String, Vec<BitRange>>,
}

/// Parses a format file's content, e.g. `config:8-15,32-57`, `config1:32`, `config2:0-63`.
pub fn parse_format_spec(spec: &str) -> Result<Vec<BitRange>> {
    let spec = spec.trim();
    let (word, ranges) = spec
        .split_once(':')
        .ok_or_else(|| anyhow!("format spec {spec:?} has no ':'"))?;
    let word = match word {
        "config" => 0,
        "config1" => 1,
        "config2" => 2,
        "config3" => 3,
        other => bail!("format spec {spec:?}: unknown config word {other:?}"),
    };
    let mut out = Vec::new();
    for r in ranges.split(',') {
        let (lo, hi) = match r.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>(), b.trim().parse::<u32>()),
            None => (r.trim().parse::<u32>(), r.trim().parse::<u32>()),
        };
        let (lo, hi) = (
            lo.with_context(|| format!("format spec {spec:?}"))?,
            hi.with_context(|| format!("format spec {spec:?}"))?,
        );
        if lo > hi || hi > 63 {
            bail!("format spec {spec:?}: bad bit range {r:?}");
        }
        out.push(BitRange { word, lo, hi });
    }
    // The kernel fills a split field's bits in ascending bit order; sorting makes that explicit.
    out.sort_by_key(|r| r.lo);
    Ok(out)
}

impl PmuFormat {
    pub fn from_specs<'a>(
        specs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<PmuFormat> {
        let mut fields = BTreeMap::new();
        for (name, spec) in specs {
            fields.insert(name.to_string(), parse_format_spec(spec)?);
        }
        Ok(PmuFormat { fields })
    }

    pub fn has(&self, field: &str) -> bool {
        self.fields.contains_key(field)
    }

    /// Total width of a field in bits.
    pub fn width(&self, field: &str) -> Option<u32> {
        self.fields
            .get(field)
            .map(|rs| rs.iter().map(|r| r.hi - r.lo + 1).sum())
    }

    /// Writes `value` into field `name`, spreading its low bits over the field's ranges in order.
    pub fn set(&self, words: &mut ConfigWords, name: &str, value: u64) -> Result<()> {
        let ranges = self.fields.get(name).ok_or_else(|| {
            anyhow!("no format field {name:?} on this PMU (kernel too old or wrong platform?)")
        })?;
        let width: u32 = ranges.iter().map(|r| r.hi - r.lo + 1).sum();
        if width < 64 && value >> width != 0 {
            bail!("value {value:#x} does not fit format field {name:?} ({width} bits)");
        }
        let mut rest = value;
        for r in ranges {
            let n = r.hi - r.lo + 1;
            let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            let w = words.word_mut(r.word);
            *w = (*w & !(mask << r.lo)) | ((rest & mask) << r.lo);
            rest = if n == 64 { 0 } else { rest >> n };
        }
        Ok(())
    }

    /// Reads field `name` back out of config words (inverse of `set`).
    pub fn get(&self, words: &ConfigWords, name: &str) -> Option<u64> {
        let ranges = self.fields.get(name)?;
        let mut out = 0u64;
        let mut shift = 0u32;
        for r in ranges {
            let n = r.hi - r.lo + 1;
            let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            out |= ((words.word(r.word) >> r.lo) & mask) << shift;
            shift += n;
        }
        Some(out)
    }

    pub fn encode(&self, terms: &[(&str, u64)]) -> Result<ConfigWords> {
        let mut words = ConfigWords::default();
        for (name, value) in terms {
            self.set(&mut words, name, *value)?;
        }
        Ok(words)
    }
}

/// One IIO stack's PCI root bus on one die, from `uncore_iio_N/dieX` ("0000:16").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IioStack {
    pub die: u32,
    pub segment: u16,
    pub bus: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pmu {
    /// sysfs directory name, e.g. `uncore_cha_3` or `cpu`.
    pub name: String,
    pub unit: Unit,
    pub index: u32,
    /// perf_event_attr.type
    pub type_: u32,
    pub format: PmuFormat,
    /// One CPU per socket for uncore boxes; empty for the core PMU (it counts on every CPU).
    pub cpumask: Vec<u32>,
    pub stacks: Vec<IioStack>,
}

impl Pmu {
    /// (socket, cpu to open on) for each socket this box is replicated on.
    pub fn socket_cpus(&self, topo: &Topology) -> Vec<(u32, u32)> {
        self.cpumask
            .iter()
            .map(|&cpu| (topo.socket_of(cpu), cpu))
            .collect()
    }

    /// This IIO stack's PCI root bus on the given socket (die ids equal package ids on these parts).
    pub fn root_bus(&self, socket: u32) -> Option<IioStack> {
        self.stacks.iter().copied().find(|s| s.die == socket)
    }
}

/// CPU -> package map from `devices/system/cpu/cpuN/topology/physical_package_id`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Topology {
    pub cpu_socket: BTreeMap<u32, u32>,
    pub online: Vec<u32>,
}

impl Topology {
    /// Unknown CPUs count as socket 0: a missing topology file must not drop a counter.
    pub fn socket_of(&self, cpu: u32) -> u32 {
        self.cpu_socket.get(&cpu).copied().unwrap_or(0)
    }
    pub fn sockets(&self) -> Vec<u32> {
        let mut s: Vec<u32> = self.cpu_socket.values().copied().collect();
        s.sort_unstable();
        s.dedup();
        s
    }
}

/// Parses a kernel cpu list such as `0,36`, `0-3,8-11` or an empty string.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (
                    a.parse().with_context(|| format!("cpu list {s:?}"))?,
                    b.parse().with_context(|| format!("cpu list {s:?}"))?,
                );
                if a > b {
                    bail!("cpu list {s:?}: reversed range");
                }
                if b >= crate::topology::MAX_CPUS {
                    bail!("cpu list {s:?}: CPU {b} is past any kernel's CPU count");
                }
                out.extend(a..=b);
            }
            None => {
                let cpu: u32 = part.parse().with_context(|| format!("cpu list {s:?}"))?;
                if cpu >= crate::topology::MAX_CPUS {
                    bail!("cpu list {s:?}: CPU {cpu} is past any kernel's CPU count");
                }
                out.push(cpu);
            }
        }
        if out.len() > crate::topology::MAX_CPUS as usize {
            bail!("cpu list {s:?}: more CPUs than any kernel has");
        }
    }
    Ok(out)
}

pub fn read_topology(root: &Path) -> Result<Topology> {
    let cpu_dir = root.join("devices/system/cpu");
    let online = match std::fs::read_to_string(cpu_dir.join("online")) {
        Ok(s) => parse_cpu_list(&s)?,
        Err(e) => bail!("{}: {e}", cpu_dir.join("online").display()),
    };
    let mut cpu_socket = BTreeMap::new();
    for &cpu in &online {
        let p = cpu_dir.join(format!("cpu{cpu}/topology/physical_package_id"));
        if let Ok(s) = std::fs::read_to_string(&p) {
            if let Ok(pkg) = s.trim().parse::<i64>() {
                cpu_socket.insert(cpu, pkg.max(0) as u32);
            }
        }
    }
    Ok(Topology { cpu_socket, online })
}

/// Everything under `bus/event_source/devices` that ddioscope can use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Inventory {
    pub root: PathBuf,
    pub pmus: Vec<Pmu>,
}

impl Inventory {
    pub fn boxes(&self, unit: Unit) -> Vec<&Pmu> {
        self.pmus.iter().filter(|p| p.unit == unit).collect()
    }

    /// The IIO box whose stack owns PCI root bus `segment:bus` (e.g. from a NIC's `pci0000:16` ancestor).
    pub fn iio_for_root_bus(&self, segment: u16, bus: u8) -> Option<(&Pmu, IioStack)> {
        self.boxes(Unit::Iio).into_iter().find_map(|p| {
            p.stacks
                .iter()
                .find(|s| s.segment == segment && s.bus == bus)
                .map(|s| (p, *s))
        })
    }
}

/// `uncore_cha_12` -> (Cha, 12); `uncore_imc` (single box) -> (Imc, 0); `cpu` -> (Core, 0).
fn classify_pmu_name(name: &str) -> Option<(Unit, u32)> {
    if name == "cpu" {
        return Some((Unit::Core, 0));
    }
    for unit in [Unit::Cha, Unit::Iio, Unit::Imc, Unit::Irp] {
        let prefix = unit.pmu_prefix();
        if name == prefix {
            return Some((unit, 0));
        }
        if let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('_')) {
            // Rejects uncore_iio_free_running_0 and friends: only a plain box number is a box.
            if let Ok(i) = rest.parse() {
                return Some((unit, i));
            }
        }
    }
    None
}

fn read_trim(p: &Path) -> Result<String> {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .with_context(|| format!("reading {}", p.display()))
}

pub fn read_pmu(dir: &Path, name: &str, unit: Unit, index: u32) -> Result<Pmu> {
    let type_: u32 = read_trim(&dir.join("type"))?
        .parse()
        .with_context(|| format!("{name}/type is not a number"))?;
    let mut specs = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir.join("format")) {
        for e in rd.flatten() {
            let fname = e.file_name().to_string_lossy().to_string();
            specs.push((fname, read_trim(&e.path())?));
        }
    }
    let format = PmuFormat::from_specs(specs.iter().map(|(a, b)| (a.as_str(), b.as_str())))
        .with_context(|| format!("{name}: bad format file"))?;
    let cpumask = match std::fs::read_to_string(dir.join("cpumask")) {
        Ok(s) => parse_cpu_list(&s).with_context(|| format!("{name}/cpumask"))?,
        Err(_) => Vec::new(),
    };
    let mut stacks = Vec::new();
    if unit == Unit::Iio {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let fname = e.file_name().to_string_lossy().to_string();
                let Some(die) = fname
                    .strip_prefix("die")
                    .and_then(|d| d.parse::<u32>().ok())
                else {
                    continue;
                };
                let content = read_trim(&e.path())?;
                let (seg, bus) = content.split_once(':').ok_or_else(|| {
                    anyhow!("{name}/{fname}: expected segment:bus, got {content:?}")
                })?;
                stacks.push(IioStack {
                    die,
                    segment: u16::from_str_radix(seg, 16)
                        .with_context(|| format!("{name}/{fname}: {content:?}"))?,
                    bus: u8::from_str_radix(bus, 16)
                        .with_context(|| format!("{name}/{fname}: {content:?}"))?,
                });
            }
        }
        stacks.sort_by_key(|s| s.die);
    }
    Ok(Pmu {
        name: name.to_string(),
        unit,
        index,
        type_,
        format,
        cpumask,
        stacks,
    })
}

/// Name the IIO stack (uncore box) behind the interface's PCIe root bus, and take the
/// socket its counters count on from that stack's die; an interface without a root bus, or a
/// host whose uncore PMUs say nothing of it, keeps what topology found (its NUMA package).
pub fn place_on_iio(info: &mut crate::topology::IfaceInfo, root: &Path) {
    let Some((seg, bus)) = info.pci_root.as_deref().and_then(|r| {
        let (s, b) = r.split_once(':')?;
        Some((
            u16::from_str_radix(s, 16).ok()?,
            u8::from_str_radix(b, 16).ok()?,
        ))
    }) else {
        return;
    };
    let Ok(inv) = discover(root) else { return };
    if let Some((pmu, stack)) = inv.iio_for_root_bus(seg, bus) {
        info.iio_box = Some(pmu.name.clone());
        info.socket = Some(stack.die);
    }
}

/// Scans `<root>/bus/event_source/devices`. A missing directory yields an empty inventory, not an error,
/// because "no PMUs here" is a normal answer on VMs.
pub fn discover(root: &Path) -> Result<Inventory> {
    let dir = root.join("bus/event_source/devices");
    let mut pmus = Vec::new();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(_) => {
            return Ok(Inventory {
                root: root.to_path_buf(),
                pmus,
            })
        }
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some((unit, index)) = classify_pmu_name(&name) else {
            continue;
        };
        pmus.push(read_pmu(&e.path(), &name, unit, index)?);
    }
    pmus.sort_by_key(|p| (p.unit, p.index));
    Ok(Inventory {
        root: root.to_path_buf(),
        pmus,
    })
}

#[cfg(test)]
mod tests {
    use super::super::events::{self, reference_format};
    use super::super::platform::Platform;
    use super::super::testutil::{expected_for, perfmon_records};
    use super::*;

    fn fixture_root(p: &str) -> PathBuf {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/sysfs"
        ))
        .join(p)
    }

    #[test]
    fn parses_split_and_single_bit_specs() {
        let r = parse_format_spec("config:8-15,32-57\n").unwrap();
        assert_eq!(
            r,
            vec![
                BitRange {
                    word: 0,
                    lo: 8,
                    hi: 15
                },
                BitRange {
                    word: 0,
                    lo: 32,
                    hi: 57
                }
            ]
        );
        assert_eq!(
            parse_format_spec("config1:32").unwrap(),
            vec![BitRange {
                word: 1,
                lo: 32,
                hi: 32
            }]
        );
        assert!(parse_format_spec("config9:1").is_err());
        assert!(parse_format_spec("config:9-3").is_err());
        assert!(parse_format_spec("config:0-64").is_err());
    }

    #[test]
    fn split_field_encoder_spreads_bits_and_round_trips() {
        let f = PmuFormat::from_specs([
            ("event", "config:0-7"),
            ("umask", "config:8-15,32-57"),
            ("filter_tid", "config1:0-9"),
        ])
        .unwrap();
        let w = f.encode(&[("event", 0x35), ("umask", 0xCC43FE04)]).unwrap();
        assert_eq!(w.config, 0x35 | 0x04 << 8 | 0xCC43FE << 32);
        assert_eq!(f.get(&w, "umask"), Some(0xCC43FE04));
        assert!(
            f.encode(&[("umask", 1u64 << 34)]).is_err(),
            "34-bit field must reject bit 34"
        );
        let e = f.encode(&[("ch_mask", 1)]).unwrap_err().to_string();
        assert!(e.contains("no format field \"ch_mask\""), "{e}");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0,36\n").unwrap(), vec![0, 36]);
        assert_eq!(parse_cpu_list("0-2,8").unwrap(), vec![0, 1, 2, 8]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("0-3333333333").is_err());
        assert!(parse_cpu_list(&"0-65535,".repeat(3)).is_err());
    }

    #[test]
    fn discovers_skx_tree_with_sockets_and_root_buses() {
        let inv = discover(&fixture_root("skx")).unwrap();
        let topo = read_topology(&fixture_root("skx")).unwrap();
        assert_eq!(inv.boxes(Unit::Cha).len(), 2);
        assert_eq!(
            inv.boxes(Unit::Iio).len(),
            3,
            "iio_free_running must not count as a box"
        );
        assert_eq!(inv.boxes(Unit::Imc).len(), 2);
        assert_eq!(inv.boxes(Unit::Core).len(), 1);
        let cha0 = inv.boxes(Unit::Cha)[0];
        assert_eq!(cha0.name, "uncore_cha_0");
        assert_eq!(cha0.socket_cpus(&topo), vec![(0, 0), (1, 2)]);
        assert_eq!(topo.sockets(), vec![0, 1]);
        let iio1 = inv.boxes(Unit::Iio)[1];
        assert_eq!(
            iio1.root_bus(0),
            Some(IioStack {
                die: 0,
                segment: 0,
                bus: 0x16
            })
        );
        assert_eq!(iio1.root_bus(1).map(|s| s.bus), Some(0x85));
        let (p, s) = inv.iio_for_root_bus(0, 0xae).unwrap();
        assert_eq!((p.name.as_str(), s.die), ("uncore_iio_2", 1));
    }

    #[test]
    fn spr_tree_without_die_files_still_discovers() {
        let inv = discover(&fixture_root("spr")).unwrap();
        assert!(inv.boxes(Unit::Iio).iter().all(|p| p.stacks.is_empty()));
        assert_eq!(inv.boxes(Unit::Cha)[0].format.fields["umask"].len(), 2);
        assert!(discover(Path::new("/nonexistent-ddioscope"))
            .unwrap()
            .pmus
            .is_empty());
    }

    /// The fixture trees' format files must equal the reference formats the event table is checked with.
    #[test]
    fn fixture_formats_equal_reference_formats() {
        for (tree, plat) in [
            ("skx", Platform::Skx),
            ("icx", Platform::Icx),
            ("spr", Platform::Spr),
        ] {
            let inv = discover(&fixture_root(tree)).unwrap();
            for unit in [Unit::Cha, Unit::Iio, Unit::Imc, Unit::Irp, Unit::Core] {
                let reference = reference_format(plat, unit);
                for pmu in inv.boxes(unit) {
                    assert_eq!(pmu.format, reference, "{tree}/{}", pmu.name);
                }
            }
        }
    }

    /// For every event in each platform's table, the config computed from the fixture's sysfs format files
    /// equals what Intel's perfmon record implies.
    #[test]
    fn sysfs_encoding_matches_intel_records() {
        for (tree, plats) in [
            ("skx", &[Platform::Skx, Platform::Clx][..]),
            ("icx", &[Platform::Icx][..]),
            ("spr", &[Platform::Spr, Platform::Emr, Platform::Gnr][..]),
        ] {
            let inv = discover(&fixture_root(tree)).unwrap();
            for &plat in plats {
                let records = perfmon_records(plat);
                let mut checked = 0;
                for ev in events::events(plat) {
                    let pmu = inv.boxes(ev.unit)[0];
                    let got = pmu
                        .format
                        .encode(&ev.terms())
                        .unwrap_or_else(|e| panic!("{plat} {}: {e}", ev.name));
                    let want = expected_for(plat, &ev, &records);
                    assert_eq!(got, want, "{plat} {} via {tree}/{}", ev.name, pmu.name);
                    checked += 1;
                }
                assert!(checked > 30, "{plat}: only {checked} events");
            }
        }
    }
}
