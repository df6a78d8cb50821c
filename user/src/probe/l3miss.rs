//! L3-miss sampling: opens the sampling perf event on every CPU (PEBS
//! MEM_LOAD_RETIRED.L3_MISS with data addresses on Intel; a software event
//! standing in where there is no PMU) and attaches pktlife's perf_event
//! program to each, which joins sample addresses to live packet buffers.
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{bail, Context, Result};
use perf_event_open_sys as sys;
use serde::Serialize;

use crate::counters::{self, events::Unit, Platform};

/// Which event drives the sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissSource {
    /// PEBS L3-miss samples where the platform has them; otherwise none, quietly.
    Auto,
    /// MEM_LOAD_RETIRED.L3_MISS with PEBS data addresses (Intel server cores).
    Pebs,
    /// cpu-clock samples: no addresses, exercises the CPU-context path.
    SoftwareClock,
    /// page-fault samples: carry (user) data addresses, exercises the address path.
    SoftwareFaults,
    /// cpu-clock samples that, inside a socket copy, take an address in the
    /// buffers being copied: exercises the address join on real packet-buffer
    /// addresses (linear data and frags).
    SoftwareCopy,
    Off,
}

/// The perf_event_attr for one source; `None` for off.
pub fn event_attr(source: MissSource, platform: Option<Platform>, period: u64, sys_root: &Path) -> Result<Option<(sys::bindings::perf_event_attr, String)>> {
    let mut attr = sys::bindings::perf_event_attr::default();
    attr.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
    attr.__bindgen_anon_1.sample_period = period.max(1);
    attr.sample_type = (sys::bindings::PERF_SAMPLE_IP
        | sys::bindings::PERF_SAMPLE_TID
        | sys::bindings::PERF_SAMPLE_TIME
        | sys::bindings::PERF_SAMPLE_ADDR
        | sys::bindings::PERF_SAMPLE_CPU) as u64;
    attr.set_exclude_hv(1);
    let label = match source {
        MissSource::Off => return Ok(None),
        MissSource::Auto | MissSource::Pebs => {
            let Some(p) = platform else {
                if source == MissSource::Auto {
                    return Ok(None);
                }
                bail!("--miss-sampling pebs: this CPU is not a supported Intel Xeon (see `ddioscope doctor`)");
            };
            let ev = counters::events::find(p, "MEM_LOAD_RETIRED.L3_MISS")
                .context("MEM_LOAD_RETIRED.L3_MISS is missing from the event table")?;
            let pmu_dir = sys_root.join("bus/event_source/devices/cpu");
            let pmu = match counters::sysfs::read_pmu(&pmu_dir, "cpu", Unit::Core, 0) {
                Ok(pmu) => pmu,
                Err(e) if source == MissSource::Auto => {
                    let _ = e;
                    return Ok(None);
                }
                Err(e) => return Err(e.context("--miss-sampling pebs: no core PMU (cpu) in sysfs")),
            };
            let words = pmu.format.encode(&ev.fields)?;
            attr.type_ = pmu.type_;
            attr.config = words.config;
            // PEBS: the precise data address is what the join needs.
            attr.set_precise_ip(2);
            format!("MEM_LOAD_RETIRED.L3_MISS (PEBS), 1 in {period}")
        }
        MissSource::SoftwareClock => {
            attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
            attr.config = sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64;
            format!("software cpu-clock (stand-in, no addresses), every {period} ns")
        }
        MissSource::SoftwareCopy => {
            attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
            attr.config = sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64;
            format!(
                "software cpu-clock taking the address of the buffer being copied to the socket (stand-in: copy addresses, not measured misses), every {period} ns"
            )
        }
        MissSource::SoftwareFaults => {
            attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
            attr.config = sys::bindings::PERF_COUNT_SW_PAGE_FAULTS as u64;
            format!("software page-faults (stand-in, user addresses), 1 in {period}")
        }
    };
    Ok(Some((attr, label)))
}

/// One sampling fd per CPU, each with the program attached through a link.
pub struct MissSampler {
    pub label: String,
    pub cpus: usize,
    _links: Vec<libbpf_rs::Link>,
    _fds: Vec<OwnedFd>,
}

impl MissSampler {
    pub fn open(prog: &libbpf_rs::ProgramMut<'_>, mut attr: sys::bindings::perf_event_attr, label: String) -> Result<MissSampler> {
        let ncpus = libbpf_rs::num_possible_cpus()?;
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
        let cpus: Vec<u32> = crate::topology::parse_cpu_list(&online);
        let cpus = if cpus.is_empty() { (0..ncpus as u32).collect() } else { cpus };
        let mut fds = Vec::new();
        let mut links = Vec::new();
        for cpu in cpus {
            // SAFETY: attr is a valid perf_event_attr; pid -1 + cpu = system-wide on that CPU.
            let fd = unsafe { sys::perf_event_open(&mut attr, -1, cpu as i32, -1, sys::bindings::PERF_FLAG_FD_CLOEXEC as u64) };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                let (_, why) = counters::live::classify_errno(e.raw_os_error().unwrap_or(0));
                bail!("opening the L3-miss sampler ({label}) on CPU {cpu}: {why}");
            }
            // SAFETY: fd was just returned by perf_event_open and is ours.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let link = prog
                .attach_perf_event(fd)
                .map_err(|e| anyhow::anyhow!(crate::probe::pktlife::explain_bpf_error(&e, "attaching the L3-miss program")))?;
            links.push(link);
            fds.push(owned);
        }
        Ok(MissSampler { label, cpus: fds.len(), _links: links, _fds: fds })
    }
}
