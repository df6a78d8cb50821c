//! Where a NIC sits: its namespace and ifindex, driver and PCI address, queue
//! counts and ring sizes, IRQ → CPU map, NUMA node; and the host it is on (CPU
//! model, LLC geometry). Parsers take text or a root directory, so unit tests
//! read fixtures; only the `*_live` functions touch the running host.
use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

pub mod ethtool;
pub mod netlink;
pub mod presence;
pub mod qdisc;
pub mod veth;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IfaceInfo {
    pub name: String,
    pub netns: Option<String>,
    pub netns_inode: u32,
    pub ifindex: u32,
    pub driver: Option<String>,
    pub bus_info: Option<String>,
    pub rx_queues: u32,
    pub tx_queues: u32,
    pub rx_ring: Option<u32>,
    pub tx_ring: Option<u32>,
    pub rx_ring_max: Option<u32>,
    pub tx_ring_max: Option<u32>,
    /// Entries of the RSS indirection table (ETHTOOL_GRXFHINDIR); None: the device has
    /// none, so `ethtool -X` cannot run on it.
    #[serde(default)]
    pub rss_table: Option<u32>,
    pub numa_node: Option<i32>,
    /// PCI root bus above the NIC ("0000:5d"): the IIO stack its DMA goes through.
    #[serde(default)]
    pub pci_root: Option<String>,
    /// The uncore IIO PMU box of that root bus, where one exists.
    #[serde(default)]
    pub iio_box: Option<String>,
    /// The CPU package (socket) the NIC's DMA goes to: its IIO stack's die (the uncore's die
    /// id, equal to the package on parts with one die per package, as the counter discovery
    /// assumes; not on two-die packages such as Cascade Lake-AP), else the package of its
    /// NUMA node's CPUs. Not the NUMA node itself: with sub-NUMA clustering a socket
    /// has several nodes, and the uncore counters are per package.
    #[serde(default)]
    pub socket: Option<u32>,
    /// IRQ number → (IRQ name, CPUs it may run on).
    pub irqs: BTreeMap<u32, IrqInfo>,
    /// The link-layer type (ARPHRD_*: 1 is Ethernet), None where it could not be read.
    #[serde(default)]
    pub link_type: Option<u16>,
    /// The interface MTU (SIOCGIFMTU), None where it could not be read or in recordings from
    /// before it: the buffer geometry rules take it.
    #[serde(default)]
    pub mtu: Option<u32>,
}

impl IfaceInfo {
    /// How many queues the device has in a direction.
    pub fn queues(&self, dir: crate::snapshot::Dir) -> u32 {
        match dir {
            crate::snapshot::Dir::Rx => self.rx_queues,
            crate::snapshot::Dir::Tx => self.tx_queues,
        }
    }

    /// Link-layer header bytes per frame: Ethernet's 14 (and where the type is unknown, the
    /// common case), none on L3 devices (tun, WireGuard, IP tunnels).
    pub fn link_hdr_len(&self) -> u32 {
        const ARPHRD_ETHER: u16 = 1;
        match self.link_type {
            Some(t) if t != ARPHRD_ETHER => 0,
            _ => 14,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IrqInfo {
    pub name: String,
    pub cpus: Vec<u32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpu_vendor: String,
    pub cpu_family: Option<u32>,
    pub cpu_model_id: Option<u32>,
    pub cpu_stepping: Option<u32>,
    pub ncpus: u32,
    pub llc: Option<CacheInfo>,
    /// CPU → NUMA node.
    pub cpu_node: BTreeMap<u32, i32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CacheInfo {
    pub level: u32,
    pub size_bytes: u64,
    pub ways: u32,
    pub sets: u32,
    pub line_bytes: u32,
    pub shared_cpus: String,
}

/// CPU ids at or above this are beyond any kernel's NR_CPUS (8192 at most today): a
/// list naming one is damaged, and expanding it could take all memory.
pub const MAX_CPUS: u32 = 1 << 16;

/// Parse a kernel CPU list such as "0-3,8,10-11"; parts naming CPUs past MAX_CPUS are
/// skipped, and the list stops at MAX_CPUS entries.
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                if b < MAX_CPUS {
                    out.extend(a..=b);
                }
            }
        } else if let Ok(v) = part.trim().parse() {
            if v < MAX_CPUS {
                out.push(v);
            }
        }
        if out.len() >= MAX_CPUS as usize {
            out.truncate(MAX_CPUS as usize);
            break;
        }
    }
    out
}

/// Parse sysfs cache sizes such as "36608K" or "2M".
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1024),
        'M' => (&s[..s.len() - 1], 1024 * 1024),
        'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().and_then(|n| n.checked_mul(mul))
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// The last-level (highest level, unified) cache of cpu0, from a sysfs root.
pub fn llc_from_sysfs(sys_root: &Path) -> Option<CacheInfo> {
    let dir = sys_root.join("devices/system/cpu/cpu0/cache");
    let mut best: Option<CacheInfo> = None;
    for entry in fs::read_dir(dir).ok()?.flatten() {
        let p = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let kind = read_trim(&p.join("type")).unwrap_or_default();
        if kind != "Unified" && kind != "Data" {
            continue;
        }
        let level: u32 = read_trim(&p.join("level"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let info = CacheInfo {
            level,
            size_bytes: read_trim(&p.join("size"))
                .and_then(|s| parse_size(&s))
                .unwrap_or(0),
            ways: read_trim(&p.join("ways_of_associativity"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            sets: read_trim(&p.join("number_of_sets"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            line_bytes: read_trim(&p.join("coherency_line_size"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(64),
            shared_cpus: read_trim(&p.join("shared_cpu_list")).unwrap_or_default(),
        };
        if best.as_ref().is_none_or(|b| level > b.level) {
            best = Some(info);
        }
    }
    best
}

/// Fields of the first processor block of /proc/cpuinfo.
pub fn parse_cpuinfo(text: &str) -> (String, String, Option<u32>, Option<u32>, Option<u32>, u32) {
    let mut model_name = String::new();
    let mut vendor = String::new();
    let (mut fam, mut model, mut step) = (None, None, None);
    let mut ncpus = 0;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "processor" => ncpus += 1,
            "model name" if model_name.is_empty() => model_name = v.to_string(),
            "vendor_id" if vendor.is_empty() => vendor = v.to_string(),
            "cpu family" if fam.is_none() => fam = v.parse().ok(),
            "model" if model.is_none() => model = v.parse().ok(),
            "stepping" if step.is_none() => step = v.parse().ok(),
            _ => {}
        }
    }
    (model_name, vendor, fam, model, step, ncpus)
}

/// IRQs whose /proc/interrupts name mentions the device or its PCI address.
pub fn parse_irqs(interrupts: &str, iface: &str, bus_info: Option<&str>) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for line in interrupts.lines().skip(1) {
        let Some((num, rest)) = line.split_once(':') else {
            continue;
        };
        let Ok(irq) = num.trim().parse::<u32>() else {
            continue;
        };
        let name = rest.split_whitespace().last().unwrap_or("");
        let matches_iface = name.starts_with(iface)
            && name[iface.len()..]
                .chars()
                .next()
                .is_none_or(|c| c == '-' || c == '_' || c == '@');
        let matches_bus = bus_info.is_some_and(|b| !b.is_empty() && name.contains(b));
        if matches_iface || matches_bus {
            out.push((irq, name.to_string()));
        }
    }
    out
}

pub fn host_live() -> HostInfo {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (cpu_model, cpu_vendor, cpu_family, cpu_model_id, cpu_stepping, ncpus) =
        parse_cpuinfo(&cpuinfo);
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct it is given.
    let (hostname, kernel) = if unsafe { libc::uname(&mut uts) } == 0 {
        let f = |b: &[libc::c_char]| {
            // SAFETY: uname NUL-terminates every field.
            unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        };
        (f(&uts.nodename), f(&uts.release))
    } else {
        (String::new(), String::new())
    };
    HostInfo {
        hostname,
        kernel,
        cpu_model,
        cpu_vendor,
        cpu_family,
        cpu_model_id,
        cpu_stepping,
        ncpus,
        llc: llc_from_sysfs(Path::new("/sys")),
        cpu_node: cpu_nodes(Path::new("/sys")),
    }
}

/// CPU → NUMA node from node*/cpulist under a sysfs root.
pub fn cpu_nodes(sys_root: &Path) -> BTreeMap<u32, i32> {
    let mut map = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(sys_root.join("devices/system/node")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(n) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if let Some(list) = read_trim(&e.path().join("cpulist")) {
                for c in parse_cpu_list(&list) {
                    map.insert(c, n);
                }
            }
        }
    }
    map
}

/// The package (physical_package_id) of a NUMA node's first CPU, under a sysfs root; None
/// for a node without CPUs or topology files.
pub fn package_of_node(sys_root: &Path, node: i32) -> Option<u32> {
    let cpus = read_trim(&sys_root.join(format!("devices/system/node/node{node}/cpulist")))?;
    let cpu = *parse_cpu_list(&cpus).first()?;
    read_trim(&sys_root.join(format!(
        "devices/system/cpu/cpu{cpu}/topology/physical_package_id"
    )))?
    .parse::<i64>()
    .ok()
    .filter(|p| *p >= 0)
    .map(|p| p as u32)
}

impl IfaceInfo {
    /// The socket whose counters describe the NIC's DMA. Recordings from before `socket` was
    /// stored name the NUMA node only, which is the package on hosts without sub-NUMA
    /// clustering; 0 when nothing is known.
    pub fn counter_socket(&self) -> u32 {
        self.socket
            .unwrap_or_else(|| self.numa_node.unwrap_or(0).max(0) as u32)
    }
}

/// The root bus of a PCI device from its sysfs path, e.g.
/// "/sys/devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0" → (0x0000, 0x5d).
pub fn pci_root_of(device_path: &str) -> Option<(u16, u8)> {
    let comp = device_path.split('/').find_map(|c| c.strip_prefix("pci"))?;
    let (seg, bus) = comp.split_once(':')?;
    Some((
        u16::from_str_radix(seg, 16).ok()?,
        u8::from_str_radix(bus, 16).ok()?,
    ))
}

/// Where named network namespaces live (iproute2's convention).
pub const NETNS_RUN_DIR: &str = "/run/netns";

pub fn netns_path(name: &str) -> Result<PathBuf> {
    if name.contains('/') || name.is_empty() {
        bail!("network namespace name '{name}' is not valid (use a name from `ip netns list`)");
    }
    let p = Path::new(NETNS_RUN_DIR).join(name);
    if !p.exists() {
        bail!("network namespace '{name}' does not exist (see `ip netns list`)");
    }
    Ok(p)
}

/// Resolve IFACE (inside NETNS when given) to everything the probes and the
/// recording need. Namespace-specific lookups run on a helper thread that
/// enters the namespace, so this process's own namespace never changes.
pub fn resolve_iface_live(iface: &str, netns: Option<&str>) -> Result<IfaceInfo> {
    if iface.is_empty() || iface.len() > 15 || iface.contains('/') {
        bail!("'{iface}' is not a valid interface name");
    }
    let ns_file = match netns {
        Some(n) => Some(
            fs::File::open(netns_path(n)?)
                .with_context(|| format!("opening network namespace '{n}'"))?,
        ),
        None => None,
    };
    let netns_inode = match &ns_file {
        Some(f) => f.metadata()?.ino() as u32,
        None => fs::metadata("/proc/self/ns/net")
            .context("reading /proc/self/ns/net")?
            .ino() as u32,
    };
    let name = iface.to_string();
    let ns_fd = ns_file.as_ref().map(|f| f.as_raw_fd());
    let info = std::thread::scope(|s| {
        s.spawn(move || -> Result<IfaceInfo> {
            if let Some(fd) = ns_fd {
                // SAFETY: fd is an open nsfs file; setns only affects this thread.
                if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                    let e = std::io::Error::last_os_error();
                    bail!(
                        "entering the network namespace: {} (need root / CAP_SYS_ADMIN)",
                        e
                    );
                }
            }
            ethtool::query(&name, netns)
        })
        .join()
        .map_err(|_| anyhow!("interface lookup thread panicked"))?
    })?;
    let mut info = info;
    info.netns = netns.map(str::to_string);
    info.netns_inode = netns_inode;
    if info.rx_queues == 0 && netns.is_none() {
        info.rx_queues = count_queues(Path::new("/sys"), iface, "rx-");
        info.tx_queues = count_queues(Path::new("/sys"), iface, "tx-");
    }
    if let Some(bus) = info.bus_info.clone().filter(|b| !b.is_empty()) {
        let dev = Path::new("/sys/bus/pci/devices").join(&bus);
        info.numa_node = read_trim(&dev.join("numa_node"))
            .and_then(|s| s.parse().ok())
            .filter(|n: &i32| *n >= 0);
        if let Some((seg, rb)) = fs::canonicalize(&dev)
            .ok()
            .and_then(|p| pci_root_of(&p.to_string_lossy()))
        {
            // The IIO stack behind this root bus (and its die) is the counters' to find:
            // `counters::sysfs::place_on_iio`.
            info.pci_root = Some(format!("{seg:04x}:{rb:02x}"));
        }
        if info.socket.is_none() {
            info.socket = info
                .numa_node
                .and_then(|n| package_of_node(Path::new("/sys"), n));
        }
    }
    let interrupts = fs::read_to_string("/proc/interrupts").unwrap_or_default();
    for (irq, irq_name) in parse_irqs(&interrupts, iface, info.bus_info.as_deref()) {
        let cpus = read_trim(Path::new(&format!(
            "/proc/irq/{irq}/effective_affinity_list"
        )))
        .or_else(|| read_trim(Path::new(&format!("/proc/irq/{irq}/smp_affinity_list"))))
        .map(|s| parse_cpu_list(&s))
        .unwrap_or_default();
        info.irqs.insert(
            irq,
            IrqInfo {
                name: irq_name,
                cpus,
            },
        );
    }
    Ok(info)
}

fn count_queues(sys_root: &Path, iface: &str, prefix: &str) -> u32 {
    fs::read_dir(sys_root.join("class/net").join(iface).join("queues"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .count() as u32
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sub-NUMA clustering (SNC2) on two sockets: four nodes, two per package. The NIC's
    /// socket is its node's package, not its node number.
    #[test]
    fn nic_socket_is_the_package_of_its_node() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for (node, cpus, pkg) in [
            (0, "0-3", 0),
            (1, "4-7", 0),
            (2, "8-11", 1),
            (3, "12-15", 1),
        ] {
            let nd = root.join(format!("devices/system/node/node{node}"));
            fs::create_dir_all(&nd).expect("node dir");
            fs::write(nd.join("cpulist"), format!("{cpus}\n")).expect("cpulist");
            for cpu in parse_cpu_list(cpus) {
                let td = root.join(format!("devices/system/cpu/cpu{cpu}/topology"));
                fs::create_dir_all(&td).expect("topology dir");
                fs::write(td.join("physical_package_id"), format!("{pkg}\n")).expect("package id");
            }
        }
        // A memory-only node (CXL, HBM) has no CPUs.
        fs::create_dir_all(root.join("devices/system/node/node4")).expect("node4");
        fs::write(root.join("devices/system/node/node4/cpulist"), "\n").expect("empty cpulist");
        let got: Vec<Option<u32>> = (0..6).map(|n| package_of_node(root, n)).collect();
        assert_eq!(got, vec![Some(0), Some(0), Some(1), Some(1), None, None]);

        let on_node = |numa_node: Option<i32>, socket: Option<u32>| IfaceInfo {
            numa_node,
            socket,
            ..Default::default()
        };
        // Recorded package first (here node 2 sits on package 1); older recordings: the node.
        assert_eq!(on_node(Some(2), Some(1)).counter_socket(), 1);
        assert_eq!(on_node(Some(1), None).counter_socket(), 1);
        assert_eq!(on_node(None, None).counter_socket(), 0);
    }

    fn fixture(p: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/topology")
            .join(p)
    }

    #[test]
    fn root_bus_of_a_nic() {
        assert_eq!(
            pci_root_of("/sys/devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0"),
            Some((0, 0x5d))
        );
        assert_eq!(
            pci_root_of("/sys/devices/pci0001:a0/0001:a0:02.0/0001:a1:00.1"),
            Some((1, 0xa0))
        );
        assert_eq!(pci_root_of("/sys/devices/virtual/net/veth0"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
        // Damaged lists (found by fuzzing): no CPU past any kernel's count, no unbounded list.
        assert_eq!(parse_cpu_list("0-3333333333,5"), vec![5]);
        assert_eq!(
            parse_cpu_list(&"0-65535,".repeat(100)).len(),
            MAX_CPUS as usize
        );
        assert_eq!(parse_size("99999999999999999999G"), None);
        assert_eq!(parse_size("99999999999G"), None);
        assert_eq!(parse_size("36608K"), Some(36608 * 1024));
    }

    #[test]
    fn llc_of_a_skylake_host() {
        let llc = llc_from_sysfs(&fixture("sys-skx6140")).expect("llc");
        assert_eq!(llc.level, 3);
        assert_eq!(llc.size_bytes, 25344 * 1024);
        assert_eq!(llc.ways, 11);
        assert_eq!(llc.sets, 36864);
        let nodes = cpu_nodes(&fixture("sys-skx6140"));
        assert_eq!(nodes.get(&0), Some(&0));
        assert_eq!(nodes.get(&18), Some(&1));
    }

    #[test]
    fn cpuinfo_fields() {
        let text = fs::read_to_string(fixture("cpuinfo-skx6140")).expect("fixture");
        let (model, vendor, fam, m, step, n) = parse_cpuinfo(&text);
        assert!(model.contains("Gold 6140"));
        assert_eq!(vendor, "GenuineIntel");
        assert_eq!((fam, m, step, n), (Some(6), Some(85), Some(4), 2));
    }

    #[test]
    fn irqs_by_name_or_pci_address() {
        let text = fs::read_to_string(fixture("interrupts-mlx5")).expect("fixture");
        let irqs = parse_irqs(&text, "ens1f0", Some("0000:5e:00.0"));
        let names: Vec<_> = irqs.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "mlx5_comp0@pci:0000:5e:00.0",
                "mlx5_comp1@pci:0000:5e:00.0",
                "ens1f0-TxRx-2"
            ]
        );
        assert!(
            parse_irqs(&text, "ens1", None).is_empty(),
            "a prefix of another name must not match"
        );
    }
}
