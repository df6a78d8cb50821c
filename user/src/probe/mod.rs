//! Loads and attaches the BPF probe families, and reads what they aggregate.
pub mod features;
pub mod floor;
pub mod l3miss;
pub mod memlayout;
pub mod pktlife;
pub mod throttle;

use libbpf_rs::AsRawLibbpf;
use serde::Serialize;

use features::Flavor;

pub mod skel {
    #![allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals, unused)]
    include!(concat!(env!("OUT_DIR"), "/pktlife.skel.rs"));
}

pub mod feature_skel {
    #![allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals, unused)]
    include!(concat!(env!("OUT_DIR"), "/features.skel.rs"));
}

pub mod floor_skel {
    #![allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals, unused)]
    include!(concat!(env!("OUT_DIR"), "/floor.skel.rs"));
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

/// One loaded tracepoint program, as `record --json-progress` and
/// `bench-floor` report it.
#[derive(Debug, Clone, Serialize)]
pub struct AttachedProg {
    pub id: u32,
    pub name: String,
    pub tracepoint: String,
    pub flavor: Flavor,
}

impl AttachedProg {
    /// From a loaded program whose section is `tp_btf/<tracepoint>` or `raw_tp/<tracepoint>`.
    pub(crate) fn of(p: &libbpf_rs::Program<'_>) -> Option<AttachedProg> {
        let section = p.section().to_string_lossy();
        let (prefix, tp) = section.split_once('/')?;
        let flavor = match prefix {
            "tp_btf" => Flavor::TpBtf,
            "raw_tp" => Flavor::RawTp,
            _ => return None,
        };
        Some(AttachedProg {
            id: loaded_prog_id(p)?,
            name: p.name().to_string_lossy().into_owned(),
            tracepoint: tp.to_string(),
            flavor,
        })
    }
}
