//! What this kernel offers the probes, found by trying (BTF lookups, tiny
//! loads), never by kernel version; and the one place that picks each hook's
//! attach flavour along the fallback chain tp_btf → raw_tp.
use std::path::Path;

use libbpf_rs::btf::Btf;
use serde::Serialize;

/// How a hook is attached. fentry/kprobe are deliberately absent: every hook we
/// need is a stable tracepoint, and tp_btf gives the same typed access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavor {
    TpBtf,
    RawTp,
}

impl Flavor {
    pub fn section_prefix(self) -> &'static str {
        match self {
            Flavor::TpBtf => "tp_btf/",
            Flavor::RawTp => "raw_tp/",
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::TpBtf => "tp_btf",
            Flavor::RawTp => "raw_tp",
        }
    }
}

/// Which flavour to attach hooks with: `auto` walks the fallback chain and
/// degrades quietly; a named flavour is what the user asked for, so every hook
/// is loaded with it or the recording fails, saying why (hooks the kernel does
/// not have are skipped, as with auto).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookChoice {
    #[default]
    Auto,
    TpBtf,
    RawTp,
}

/// One tracepoint the pktlife family hooks, and what is lost without it.
#[derive(Debug, Clone, Copy)]
pub struct Hook {
    pub tracepoint: &'static str,
    pub required: bool,
    pub without: &'static str,
}

pub const PKTLIFE_HOOKS: &[Hook] = &[
    Hook {
        tracepoint: super::hooks::NAPI_GRO_RECEIVE_ENTRY,
        required: false,
        without: "no per-frame RX hand-up from GRO drivers",
    },
    Hook {
        tracepoint: super::hooks::NAPI_GRO_FRAGS_ENTRY,
        required: false,
        without: "no RX hand-up from page-frag GRO drivers",
    },
    Hook {
        tracepoint: super::hooks::NAPI_GRO_RECEIVE_EXIT,
        required: false,
        without: "states of GRO-merged frames end only when found stale",
    },
    Hook {
        tracepoint: super::hooks::NETIF_RECEIVE_SKB_ENTRY,
        required: false,
        without: "no RX hand-up from non-GRO drivers",
    },
    Hook {
        tracepoint: super::hooks::NETIF_RECEIVE_SKB_LIST_ENTRY,
        required: false,
        without: "no RX hand-up from list-receive drivers",
    },
    Hook {
        tracepoint: super::hooks::NETIF_RX_ENTRY,
        required: false,
        without: "no RX hand-up from netif_rx (backlog) drivers",
    },
    Hook {
        tracepoint: super::hooks::NETIF_RECEIVE_SKB,
        required: true,
        without: "no RX stack-entry stage",
    },
    Hook {
        tracepoint: super::hooks::NAPI_POLL,
        required: false,
        without: "no NAPI batch statistics",
    },
    Hook {
        tracepoint: super::hooks::SKB_COPY_DATAGRAM_IOVEC,
        required: false,
        without: "no socket-copy stage",
    },
    Hook {
        tracepoint: super::hooks::CONSUME_SKB,
        required: false,
        without: "no buffer free stage",
    },
    Hook {
        tracepoint: super::hooks::KFREE_SKB,
        required: false,
        without: "no drop counts or reasons",
    },
    Hook {
        tracepoint: super::hooks::NET_DEV_QUEUE,
        required: false,
        without: "no TX enqueue stage",
    },
    Hook {
        tracepoint: super::hooks::NET_DEV_START_XMIT,
        required: true,
        without: "no TX per-queue counts",
    },
    Hook {
        tracepoint: super::hooks::NET_DEV_XMIT,
        required: false,
        without: "no TX driver-xmit duration",
    },
];

/// The feature table `doctor` prints and `record -v` logs.
#[derive(Debug, Clone, Serialize)]
pub struct Features {
    pub vmlinux_btf: bool,
    pub btf_error: Option<String>,
    pub tracing_prog: bool,
    pub raw_tracepoint_prog: bool,
    /// fentry is probed for the feature table only: every hook has a tracepoint.
    pub fentry_prog: bool,
    pub load_errors: Vec<String>,
    pub perf_event_prog: bool,
    pub ringbuf_map: bool,
    pub lru_hash_map: bool,
    /// The verifier accepts pointer arguments to global BPF functions (the
    /// buffer-page walk is one).
    pub global_func_ptr_args: bool,
    /// Tracepoints that have a `btf_trace_<name>` type, i.e. can be tp_btf.
    pub btf_tracepoints: Vec<String>,
}

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Load one program of the features object alone; Ok(()) if the kernel took it.
fn try_load(prog_name: &str) -> Result<(), String> {
    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    let mut storage = std::mem::MaybeUninit::uninit();
    let mut open = super::feature_skel::FeaturesSkelBuilder::default()
        .open(&mut storage)
        .map_err(|e| e.to_string())?;
    for mut p in open.open_object_mut().progs_mut() {
        let keep = p.name() == prog_name;
        p.set_autoload(keep);
    }
    open.load().map(|_| ()).map_err(|e| match e.kind() {
        libbpf_rs::ErrorKind::PermissionDenied => "refused by the kernel (EPERM)".to_string(),
        _ => e.to_string(),
    })
}

fn probe_prog(t: libbpf_rs::libbpf_sys::bpf_prog_type) -> bool {
    // SAFETY: libbpf_probe_bpf_prog_type loads and frees a tiny program; no pointers kept.
    unsafe { libbpf_rs::libbpf_sys::libbpf_probe_bpf_prog_type(t, std::ptr::null()) == 1 }
}

fn probe_map(t: libbpf_rs::libbpf_sys::bpf_map_type) -> bool {
    // SAFETY: as above, a tiny map is created and closed.
    unsafe { libbpf_rs::libbpf_sys::libbpf_probe_bpf_map_type(t, std::ptr::null()) == 1 }
}

/// The kernel's names for kfree_skb drop reasons (enum skb_drop_reason), so the
/// report says "TCP_OLD_DATA" rather than a number that changes across kernels.
pub fn drop_reason_names() -> std::collections::BTreeMap<u32, String> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(btf) = Btf::from_vmlinux() else {
        return out;
    };
    if let Some(e) = btf.type_by_name::<libbpf_rs::btf::types::Enum<'_>>("skb_drop_reason") {
        for m in e.iter() {
            if let Some(n) = m.name {
                let n = n.to_string_lossy();
                out.insert(
                    m.value as u32,
                    n.strip_prefix("SKB_DROP_REASON_").unwrap_or(&n).to_string(),
                );
            }
        }
    }
    out
}

impl Features {
    pub fn detect() -> Features {
        use libbpf_rs::libbpf_sys as sys;
        let (btf, btf_error) = if Path::new(VMLINUX_BTF).exists() {
            match Btf::from_vmlinux() {
                Ok(b) => (Some(b), None),
                Err(e) => (None, Some(format!("cannot parse {VMLINUX_BTF}: {e}"))),
            }
        } else {
            (
                None,
                Some(format!(
                    "{VMLINUX_BTF} is missing: the kernel was built without CONFIG_DEBUG_INFO_BTF"
                )),
            )
        };
        let btf_tracepoints = match &btf {
            Some(b) => PKTLIFE_HOOKS
                .iter()
                .filter(|h| {
                    b.type_by_name::<libbpf_rs::btf::BtfType<'_>>(&format!(
                        "btf_trace_{}",
                        h.tracepoint
                    ))
                    .is_some()
                })
                .map(|h| h.tracepoint.to_string())
                .collect(),
            None => Vec::new(),
        };
        let mut load_errors = Vec::new();
        let mut probe = |name: &str, what: &str| match btf.is_some().then(|| try_load(name)) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                load_errors.push(format!("{what}: {e}"));
                false
            }
            None => false,
        };
        let tracing_prog = probe("feat_tp_btf", "tp_btf");
        let fentry_prog = probe("feat_fentry", "fentry");
        let global_func_ptr_args = probe(
            "feat_global_func",
            "global function with a pointer argument",
        );
        let raw_tracepoint_prog = probe_prog(sys::BPF_PROG_TYPE_RAW_TRACEPOINT);
        Features {
            vmlinux_btf: btf.is_some(),
            btf_error,
            tracing_prog,
            raw_tracepoint_prog,
            fentry_prog,
            load_errors,
            perf_event_prog: probe_prog(sys::BPF_PROG_TYPE_PERF_EVENT),
            ringbuf_map: probe_map(sys::BPF_MAP_TYPE_RINGBUF),
            lru_hash_map: probe_map(sys::BPF_MAP_TYPE_LRU_HASH),
            global_func_ptr_args,
            btf_tracepoints,
        }
    }

    /// First choice for a hook along tp_btf → raw_tp.
    pub fn preferred(&self, hook: &Hook) -> Flavor {
        if self.vmlinux_btf
            && self.tracing_prog
            && self.btf_tracepoints.iter().any(|t| t == hook.tracepoint)
        {
            Flavor::TpBtf
        } else {
            Flavor::RawTp
        }
    }

    /// Why recording cannot work at all on this host, if it cannot.
    pub fn fatal(&self) -> Option<String> {
        if !self.vmlinux_btf {
            return Some(format!(
                "{}; ddioscope's CO-RE probes need kernel BTF (a kernel with CONFIG_DEBUG_INFO_BTF=y)",
                self.btf_error.clone().unwrap_or_default()
            ));
        }
        if !self.raw_tracepoint_prog && !self.tracing_prog {
            return Some("this kernel loads neither tp_btf nor raw_tracepoint BPF programs (need root/CAP_BPF+CAP_PERFMON)".into());
        }
        if self.raw_tracepoint_prog && !self.global_func_ptr_args {
            return Some(
                "this kernel's BPF verifier refuses pointer arguments to global functions (Linux 5.12 added them); ddioscope's probes need them".into(),
            );
        }
        if !self.ringbuf_map {
            return Some(
                "BPF ring buffers are unavailable (kernel older than 5.8, or no permission)".into(),
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capable() -> Features {
        Features {
            vmlinux_btf: true,
            btf_error: None,
            tracing_prog: true,
            raw_tracepoint_prog: true,
            fentry_prog: false,
            load_errors: Vec::new(),
            perf_event_prog: true,
            ringbuf_map: true,
            lru_hash_map: true,
            global_func_ptr_args: true,
            btf_tracepoints: PKTLIFE_HOOKS
                .iter()
                .map(|h| h.tracepoint.to_string())
                .collect(),
        }
    }

    #[test]
    fn fatal_says_what_the_kernel_lacks() {
        assert_eq!(capable().fatal(), None);
        let old_verifier = Features {
            global_func_ptr_args: false,
            ..capable()
        };
        assert!(old_verifier
            .fatal()
            .is_some_and(|m| m.contains("global functions")));
        let no_btf = Features {
            vmlinux_btf: false,
            btf_error: Some("x".into()),
            ..capable()
        };
        assert!(no_btf.fatal().is_some_and(|m| m.contains("BTF")));
        let no_ringbuf = Features {
            ringbuf_map: false,
            ..capable()
        };
        assert!(no_ringbuf
            .fatal()
            .is_some_and(|m| m.contains("ring buffers")));
    }
}
