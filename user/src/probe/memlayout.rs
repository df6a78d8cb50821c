//! Where the kernel keeps the direct map and the memory map (vmemmap), so the
//! probes can turn a packet frag's `struct page` into the kernel virtual
//! address a PEBS sample would carry (bpf/fragaddr.h does the arithmetic).
//!
//! Resolved here, once, from text the host provides (`/proc/kallsyms`,
//! `/proc/cpuinfo`, `/proc/zoneinfo`), so the rules are unit-tested on
//! fixtures. Without a layout the probes map linear data only, and the
//! recording says why.
use serde::Serialize;

/// x86-64 defaults without memory randomisation (Documentation/arch/x86/x86_64/mm.rst).
pub const X86_64_L4_PAGE_OFFSET: u64 = 0xffff_8880_0000_0000;
pub const X86_64_L4_VMEMMAP: u64 = 0xffff_ea00_0000_0000;
pub const X86_64_L5_PAGE_OFFSET: u64 = 0xff11_0000_0000_0000;
pub const X86_64_L5_VMEMMAP: u64 = 0xffd4_0000_0000_0000;

/// The page → address layout handed to the probes (`const volatile` config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemLayout {
    /// Direct-map base (PAGE_OFFSET); 0 when the probes read it at `page_offset_base_addr`.
    pub page_offset: u64,
    pub page_offset_base_addr: u64,
    /// Base of the struct page array; 0 when the probes read it at `vmemmap_base_addr`.
    pub vmemmap: u64,
    pub vmemmap_base_addr: u64,
    /// One past the highest page frame of RAM: pages beyond it are not in the memory map.
    pub max_pfn: u64,
    /// Where the bases come from, in words.
    pub source: String,
}

impl MemLayout {
    /// Does the layout rest on an x86-64 default base rather than one the
    /// kernel publishes? Nothing checks a default before recording: the
    /// probes only test it per skb, against the direct map and `max_pfn`.
    pub fn assumes_defaults(&self) -> bool {
        self.page_offset != 0 || self.vmemmap != 0
    }
}

/// Symbol address in `/proc/kallsyms` text: Some(0) when listed but hidden (kptr_restrict).
fn kallsyms_addr(kallsyms: &str, name: &str) -> Option<u64> {
    kallsyms.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let (addr, _kind, sym) = (it.next()?, it.next()?, it.next()?);
        (sym == name && it.next().is_none())
            .then(|| u64::from_str_radix(addr, 16).ok())
            .flatten()
    })
}

/// Does the CPU run with 5-level page tables? The kernel clears `la57` from
/// the flags when it does not use them.
fn la57(cpuinfo: &str) -> bool {
    cpuinfo.lines().filter(|l| l.starts_with("flags")).any(|l| {
        l.split_once(':')
            .is_some_and(|(_, f)| f.split_whitespace().any(|x| x == "la57"))
    })
}

/// One past the highest page frame of any populated zone in `/proc/zoneinfo`.
pub fn max_pfn(zoneinfo: &str) -> u64 {
    let mut best = 0u64;
    let (mut spanned, mut start) = (None::<u64>, None::<u64>);
    let mut close = |spanned: &mut Option<u64>, start: &mut Option<u64>| {
        if let (Some(sp), Some(st)) = (spanned.take(), start.take()) {
            if sp > 0 {
                best = best.max(st.saturating_add(sp));
            }
        }
    };
    for l in zoneinfo.lines() {
        let t = l.trim();
        if t.starts_with("Node ") {
            close(&mut spanned, &mut start);
        } else if let Some(v) = t.strip_prefix("spanned") {
            spanned = v.trim().parse().ok();
        } else if let Some(v) = t.strip_prefix("start_pfn:") {
            start = v.trim().parse().ok();
        }
    }
    close(&mut spanned, &mut start);
    best
}

/// The layout for a host, or why frags cannot be mapped there.
pub fn resolve(
    arch: &str,
    kallsyms: &str,
    cpuinfo: &str,
    zoneinfo: &str,
) -> Result<MemLayout, String> {
    if arch != "x86_64" {
        return Err(format!("frag pages are not mapped on {arch}: no page-to-address layout for this architecture (linear data only)"));
    }
    let max_pfn = max_pfn(zoneinfo);
    if max_pfn == 0 {
        return Err("frag pages are not mapped: /proc/zoneinfo shows no populated memory zone (linear data only)".into());
    }
    let (def_po, def_vm, levels) = if la57(cpuinfo) {
        (X86_64_L5_PAGE_OFFSET, X86_64_L5_VMEMMAP, 5)
    } else {
        (X86_64_L4_PAGE_OFFSET, X86_64_L4_VMEMMAP, 4)
    };
    let po_sym = kallsyms_addr(kallsyms, "page_offset_base");
    let vm_sym = kallsyms_addr(kallsyms, "vmemmap_base");
    if po_sym == Some(0) || vm_sym == Some(0) {
        return Err("frag pages are not mapped: /proc/kallsyms hides the addresses of page_offset_base/vmemmap_base \
                    (kptr_restrict; run as root) (linear data only)"
            .into());
    }
    let mut layout = MemLayout {
        page_offset: def_po,
        page_offset_base_addr: 0,
        vmemmap: def_vm,
        vmemmap_base_addr: 0,
        max_pfn,
        source: String::new(),
    };
    let mut read = Vec::new();
    if let Some(a) = po_sym {
        layout.page_offset = 0;
        layout.page_offset_base_addr = a;
        read.push("page_offset_base");
    }
    if let Some(a) = vm_sym {
        layout.vmemmap = 0;
        layout.vmemmap_base_addr = a;
        read.push("vmemmap_base");
    }
    layout.source = match read.len() {
        0 => format!(
            "x86-64 defaults for {levels}-level paging (PAGE_OFFSET {def_po:#x}, vmemmap {def_vm:#x}; \
             /proc/kallsyms lists no page_offset_base/vmemmap_base), checked in the kernel against the direct map"
        ),
        2 => "page_offset_base and vmemmap_base read by the probes at their /proc/kallsyms addresses".into(),
        _ => format!(
            "{} read by the probes at its /proc/kallsyms address, the other base the {levels}-level x86-64 default",
            read.join("")
        ),
    };
    Ok(layout)
}

/// Why a /proc file could not be read, in words: io::Error's own text ends in
/// "(os error N)", which tells the user nothing more.
fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => "not found".into(),
        ErrorKind::PermissionDenied => "permission denied".into(),
        ErrorKind::InvalidData => "not text".into(),
        // The system's wording ("input/output error") without the errno number:
        // ErrorKind's own text for the rest is often just "uncategorized error".
        _ => {
            let text = e.to_string();
            text.split(" (os error")
                .next()
                .unwrap_or_default()
                .to_lowercase()
        }
    }
}

/// The message when a /proc file cannot be read.
fn unreadable(path: &str, e: &std::io::Error) -> String {
    format!(
        "frag pages are not mapped: cannot read {path}: {} (linear data only)",
        io_words(e)
    )
}

/// The layout of this host.
pub fn resolve_live() -> Result<MemLayout, String> {
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| unreadable(p, &e));
    let kallsyms = read("/proc/kallsyms")?;
    let cpuinfo = read("/proc/cpuinfo")?;
    let zoneinfo = read("/proc/zoneinfo")?;
    resolve(std::env::consts::ARCH, &kallsyms, &cpuinfo, &zoneinfo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> String {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/memlayout")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn defaults_when_kallsyms_has_no_bases() {
        let l = resolve(
            "x86_64",
            &fixture("kallsyms_plain.txt"),
            &fixture("cpuinfo_4level.txt"),
            &fixture("zoneinfo.txt"),
        )
        .unwrap();
        assert_eq!(
            (l.page_offset, l.vmemmap),
            (X86_64_L4_PAGE_OFFSET, X86_64_L4_VMEMMAP)
        );
        assert_eq!((l.page_offset_base_addr, l.vmemmap_base_addr), (0, 0));
        assert_eq!(l.max_pfn, 1_048_576 + 5_505_024);
        assert!(
            l.source.contains("4-level") && l.source.contains("defaults"),
            "{}",
            l.source
        );
        assert!(l.assumes_defaults());
    }

    #[test]
    fn five_level_defaults_with_la57() {
        let l = resolve(
            "x86_64",
            &fixture("kallsyms_plain.txt"),
            &fixture("cpuinfo_5level.txt"),
            &fixture("zoneinfo.txt"),
        )
        .unwrap();
        assert_eq!(
            (l.page_offset, l.vmemmap),
            (X86_64_L5_PAGE_OFFSET, X86_64_L5_VMEMMAP)
        );
        assert!(l.source.contains("5-level"));
    }

    #[test]
    fn randomised_bases_are_read_at_their_addresses() {
        let l = resolve(
            "x86_64",
            &fixture("kallsyms_kaslr.txt"),
            &fixture("cpuinfo_4level.txt"),
            &fixture("zoneinfo.txt"),
        )
        .unwrap();
        assert_eq!((l.page_offset, l.vmemmap), (0, 0));
        assert_eq!(l.page_offset_base_addr, 0xffff_ffff_a2a1_0b08);
        assert_eq!(l.vmemmap_base_addr, 0xffff_ffff_a2a1_0af8);
        assert!(l.source.contains("read by the probes"), "{}", l.source);
        assert!(!l.assumes_defaults());
    }

    #[test]
    fn hidden_kallsyms_addresses_refuse() {
        let e = resolve(
            "x86_64",
            &fixture("kallsyms_hidden.txt"),
            &fixture("cpuinfo_4level.txt"),
            &fixture("zoneinfo.txt"),
        )
        .unwrap_err();
        assert!(
            e.contains("kptr_restrict") && e.contains("linear data only"),
            "{e}"
        );
    }

    #[test]
    fn other_architectures_and_empty_zoneinfo_refuse() {
        let e = resolve("aarch64", "", "", &fixture("zoneinfo.txt")).unwrap_err();
        assert!(e.contains("aarch64"), "{e}");
        let e = resolve("x86_64", "", "", "Node 0, zone DMA\n  spanned 0\n").unwrap_err();
        assert!(e.contains("zoneinfo"), "{e}");
    }

    #[test]
    fn unreadable_files_are_named_in_words() {
        let m = unreadable(
            "/proc/kallsyms",
            &std::io::Error::from_raw_os_error(libc::EACCES),
        );
        assert_eq!(m, "frag pages are not mapped: cannot read /proc/kallsyms: permission denied (linear data only)");
        let m = unreadable(
            "/proc/zoneinfo",
            &std::io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert!(m.contains("/proc/zoneinfo: not found"), "{m}");
        let m = unreadable(
            "/proc/cpuinfo",
            &std::io::Error::from_raw_os_error(libc::EIO),
        );
        assert!(
            m.contains("/proc/cpuinfo: input/output error (linear"),
            "{m}"
        );
    }

    #[test]
    fn max_pfn_skips_empty_zones() {
        let z =
            "Node 0, zone DMA\n  pages free 1\n        spanned  4095\n  start_pfn:           1\n\
                 Node 0, zone Movable\n        spanned  0\n  start_pfn:           0\n\
                 Node 1, zone Normal\n        spanned  100\n  start_pfn:           9000\n";
        assert_eq!(max_pfn(z), 9100);
    }
}
