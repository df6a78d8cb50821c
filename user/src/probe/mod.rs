//! Loads and attaches the BPF probe families, and reads what they aggregate.
pub mod features;
pub mod floor;
pub mod flowdrain;
pub mod handups;
pub mod hooks;
pub mod kstats;
pub mod l3miss;
pub mod memlayout;
pub mod pktlife;
pub mod qcount;
pub mod sockets;
pub mod throttle;

use libbpf_rs::AsRawLibbpf;
use serde::Serialize;

use features::Flavor;

pub mod skel {
    #![allow(
        clippy::all,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/pktlife.skel.rs"));
}

pub mod l3miss_skel {
    #![allow(
        clippy::all,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/l3miss.skel.rs"));
}

pub mod qcount_skel {
    #![allow(
        clippy::all,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/qcount.skel.rs"));
}

pub mod feature_skel {
    #![allow(
        clippy::all,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/features.skel.rs"));
}

pub mod floor_skel {
    #![allow(
        clippy::all,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/floor.skel.rs"));
}

/// A flow key as the probes store it (struct pl_flow_key in bpf/common.h, field by field:
/// each skeleton generates its own copy of the type).
pub(crate) fn flow_key_of(
    family: u8,
    proto: u8,
    dir: u8,
    saddr: &[u8; 16],
    sport: u16,
    daddr: &[u8; 16],
    dport: u16,
) -> Option<crate::snapshot::FlowKey> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let addr = |raw: &[u8; 16]| match family {
        4 => Some(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]).to_string()),
        6 => Some(Ipv6Addr::from(*raw).to_string()),
        _ => None,
    };
    let proto = match proto {
        6 => "tcp",
        17 => "udp",
        _ => return None,
    };
    Some(crate::snapshot::FlowKey {
        dir: crate::snapshot::Dir::from_u8(dir),
        proto: proto.to_string(),
        src: addr(saddr)?,
        sport,
        dst: addr(daddr)?,
        dport,
    })
}

/// Every entry of a per-CPU array, each as its CPUs' values, in one batch syscall where the
/// kernel has them (an interval's read of a queue table is one syscall, not one per queue: on
/// a host whose syscalls pay for mitigations, hundreds of them ten times a second cost the
/// traffic throughput); entry by entry where it has not.
pub(crate) fn percpu_array_all<M: libbpf_rs::MapCore>(
    map: &M,
    entries: u32,
    ncpus: usize,
) -> anyhow::Result<Vec<Vec<Vec<u8>>>> {
    if let Some(all) = array_batch(map, entries, ncpus) {
        return Ok(all);
    }
    (0..entries)
        .map(|k| {
            Ok(map
                .lookup_percpu(&k.to_ne_bytes(), libbpf_rs::MapFlags::ANY)?
                .unwrap_or_default())
        })
        .collect()
}

/// Sizes, before load, an array the programs index by CPU number: `per_cpu` entries for each
/// possible CPU (bpf_get_smp_processor_id() numbers the possible ones).
pub(crate) fn size_by_cpu(
    map: &mut libbpf_rs::OpenMapMut<'_>,
    per_cpu: u32,
    what: &str,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let cpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
    let entries = u32::try_from(cpus)
        .unwrap_or(u32::MAX)
        .saturating_mul(per_cpu);
    map.set_max_entries(entries)
        .map_err(|e| anyhow::anyhow!(explain_bpf_error(&e, &format!("sizing {what}"))))
}

/// An array map created `BPF_F_MMAPABLE`, mapped read-only into the recorder: an interval
/// reads its counters in place, with no syscall and no copy through the kernel (a batch
/// lookup of the queue tables, ten times a second, was a sixth of the recorder's own CPU time).
pub(crate) struct MappedArray {
    mmap: memmap2::Mmap,
    entries: usize,
    stride: usize,
}

impl MappedArray {
    /// Maps all of `map`'s entries (an mmapable array's values start on a page, each rounded
    /// up to 8 bytes).
    pub(crate) fn new<M: libbpf_rs::MapCore>(map: &M, what: &str) -> anyhow::Result<MappedArray> {
        use anyhow::Context;
        use std::os::fd::AsRawFd;
        let stride = (map.value_size() as usize + 7) & !7;
        let entries = map.max_entries() as usize;
        // SAFETY: a read-only shared mapping of the map's values; the kernel keeps them for
        // the mapping's life (it holds a reference to the map), and they are read volatile.
        let mmap = unsafe {
            memmap2::MmapOptions::new()
                .len(stride * entries)
                .map(map.as_fd().as_raw_fd())
        }
        .with_context(|| format!("mapping {what} into memory"))?;
        Ok(MappedArray {
            mmap,
            entries,
            stride,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    /// Entry `i` as it is now (None past the end, or for a type larger or more aligned than
    /// an entry). Volatile: the programs update it while it is read; each aligned 8-byte
    /// counter is read whole.
    pub(crate) fn get<T: Copy + plain::Plain>(&self, i: usize) -> Option<T> {
        if i >= self.entries
            || std::mem::size_of::<T>() > self.stride
            || std::mem::align_of::<T>() > 8
        {
            return None;
        }
        // SAFETY: in bounds (checked above), aligned (the mapping starts on a page and the
        // stride is a multiple of 8), and T is plain old data, valid for any bytes.
        Some(unsafe {
            std::ptr::read_volatile(self.mmap.as_ptr().add(i * self.stride).cast::<T>())
        })
    }
}

/// The first `entries` entries of an array map in one batch syscall, each as its `copies`
/// values (its CPUs' for a per-CPU array, one for a plain one); None where the kernel has no
/// batch lookup.
fn array_batch<M: libbpf_rs::MapCore>(
    map: &M,
    entries: u32,
    copies: usize,
) -> Option<Vec<Vec<Vec<u8>>>> {
    use std::os::fd::AsRawFd;
    let vsz = (map.value_size() as usize + 7) & !7;
    let mut keys = vec![0u32; entries as usize];
    let mut vals = vec![0u8; entries as usize * copies * vsz];
    let mut count = entries;
    let mut out_batch = 0u32;
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    // SAFETY: keys and vals hold `entries` keys and `entries` values of `copies` copies of the
    // map's sizes; count says so; out_batch is the u32 an array map's batch cursor is.
    let ret = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
            map.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            (&mut out_batch as *mut u32).cast(),
            keys.as_mut_ptr().cast(),
            vals.as_mut_ptr().cast(),
            &mut count,
            &opts,
        )
    };
    let errno = std::io::Error::last_os_error().raw_os_error();
    if !(ret == 0 || (errno == Some(libc::ENOENT) && count == entries)) {
        return None;
    }
    let mut out = vec![Vec::new(); entries as usize];
    for (i, k) in keys.iter().take(count as usize).enumerate() {
        let per_entry = &vals[i * copies * vsz..(i + 1) * copies * vsz];
        if let Some(slot) = out.get_mut(*k as usize) {
            *slot = per_entry.chunks(vsz).map(|c| c.to_vec()).collect();
        }
    }
    Some(out)
}

/// The kernel's id of a loaded program (None if it is not loaded).
pub(crate) fn loaded_prog_id(p: &libbpf_rs::Program<'_>) -> Option<u32> {
    // SAFETY: bpf_program__fd only reads the program's fd (negative when not loaded).
    let fd = unsafe { libbpf_rs::libbpf_sys::bpf_program__fd(p.as_libbpf_object().as_ptr()) };
    if fd < 0 {
        return None;
    }
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a properly sized, zeroed bpf_prog_info and fd a loaded program's.
    let r = unsafe {
        libbpf_rs::libbpf_sys::bpf_obj_get_info_by_fd(
            fd,
            (&mut info as *mut libbpf_rs::libbpf_sys::bpf_prog_info).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(info.id)
}

/// Whether a hook sees one device's packets or every device's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Attached to the device (tcx): runs for its packets alone.
    Device,
    /// A tracepoint: runs for every device's packets on the host, and returns early for
    /// the others'.
    Host,
}

/// When an attached program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// For the whole recording.
    Always,
    /// Inside the detail windows only (1/duty of the time, and only while the device carries
    /// traffic).
    Windows,
}

/// One attached hook: what it is, whose packets it sees and when it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HookPlan {
    /// The tracepoint, or `tcx_ingress`.
    pub hook: String,
    pub scope: Scope,
    pub when: When,
    /// The program's id while it is loaded (for bpf_stats readers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prog_id: Option<u32>,
}

impl HookPlan {
    /// From a program's section (`tp_btf/<tp>`, `raw_tp/<tp>`, `tcx/ingress`).
    pub fn of_section(section: &str, when: When) -> HookPlan {
        match section.split_once('/') {
            Some(("tcx", dir)) => HookPlan {
                hook: format!("tcx_{dir}"),
                scope: Scope::Device,
                when,
                prog_id: None,
            },
            Some((_, tp)) => HookPlan {
                hook: tp.to_string(),
                scope: Scope::Host,
                when,
                prog_id: None,
            },
            None => HookPlan {
                hook: section.to_string(),
                scope: Scope::Host,
                when,
                prog_id: None,
            },
        }
    }
}

/// One loaded tracepoint program, as `record --json-progress` and
/// `bench-floor` report it.
#[derive(Debug, Clone, Serialize)]
pub struct AttachedProg {
    pub id: u32,
    pub name: String,
    /// The tracepoint, or `tcx_ingress` for a tcx program.
    pub tracepoint: String,
    /// The tracepoint's attach flavour (None for tcx).
    pub flavor: Option<Flavor>,
}

impl AttachedProg {
    /// From a loaded program whose section is `tp_btf/<tracepoint>`, `raw_tp/<tracepoint>`
    /// or `tcx/ingress`.
    pub(crate) fn of(p: &libbpf_rs::Program<'_>) -> Option<AttachedProg> {
        let section = p.section().to_string_lossy();
        let (prefix, tp) = section.split_once('/')?;
        let (flavor, tracepoint) = match prefix {
            "tp_btf" => (Some(Flavor::TpBtf), tp.to_string()),
            "raw_tp" => (Some(Flavor::RawTp), tp.to_string()),
            "tcx" => (None, format!("tcx_{tp}")),
            _ => return None,
        };
        Some(AttachedProg {
            id: loaded_prog_id(p)?,
            name: p.name().to_string_lossy().into_owned(),
            tracepoint,
            flavor,
        })
    }
}

/// Turn libbpf errors into a sentence a user can act on.
pub fn explain_bpf_error(e: &libbpf_rs::Error, doing: &str) -> String {
    use libbpf_rs::ErrorKind;
    match e.kind() {
        ErrorKind::PermissionDenied => format!(
            "{doing}: permission denied — run as root (or with CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN)"
        ),
        ErrorKind::NotFound => format!("{doing}: a kernel hook or BTF type was not found ({})", without_errno(&e.to_string())),
        // Only a load goes through the verifier; an attach's EINVAL is its own story.
        ErrorKind::InvalidInput if doing.starts_with("loading") => format!(
            "{doing}: the kernel's verifier rejected a program ({}; `-v` prints its log)",
            without_errno(&e.to_string())
        ),
        _ if doing.starts_with("loading") && e.to_string().contains("Argument list too long") => {
            format!("{doing}: the kernel's verifier gave up on a program as too complex (`-v` prints its log)")
        }
        _ => format!("{doing}: {}", without_errno(&e.to_string())),
    }
}

/// An OS error's words without Rust's " (os error N)" suffix (the words already say it).
fn without_errno(msg: &str) -> String {
    match msg.find(" (os error ") {
        Some(i) => format!(
            "{}{}",
            &msg[..i],
            msg[i..].find(')').map_or("", |j| &msg[i + j + 1..])
        ),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod error_tests {
    use super::without_errno;

    #[test]
    fn os_error_suffix_is_dropped() {
        assert_eq!(
            without_errno("Argument list too long (os error 7)"),
            "Argument list too long"
        );
        assert_eq!(
            without_errno("No such file (os error 2): more"),
            "No such file: more"
        );
        assert_eq!(without_errno("plain words"), "plain words");
    }
}
