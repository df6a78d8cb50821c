//! L3-miss sampling: opens the sampling perf event on every CPU (PEBS
//! MEM_LOAD_RETIRED.L3_MISS with data addresses on Intel; a software event
//! standing in where there is no PMU) and attaches pktlife's perf_event
//! program to each, which joins sample addresses to live packet buffers.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use memmap2::{MmapMut, MmapOptions};
use perf_event_open_sys as sys;
use serde::Serialize;

use super::throttle::{page_size, ThrottleRing, ThrottleTotals, RING_DATA_PAGES};
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
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = period.max(1);
    attr.sample_type = (sys::bindings::PERF_SAMPLE_IP
        | sys::bindings::PERF_SAMPLE_TID
        | sys::bindings::PERF_SAMPLE_TIME
        | sys::bindings::PERF_SAMPLE_ADDR
        | sys::bindings::PERF_SAMPLE_CPU) as u64;
    attr.set_exclude_hv(1);
    // Every sample through the program: a fixed-period PEBS event without wakeup_events may be
    // put in large-PEBS mode, where the kernel writes all but the last record of each PEBS drain
    // straight to the ring buffer, past the program (an event with wakeup_events and no
    // watermark never is). Samples are not written to the ring, so this wakes nobody.
    attr.__bindgen_anon_2.wakeup_events = 1;
    // Throttle records (probe::throttle) stamped on the BPF clock.
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
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

/// One sampling fd per CPU, each with the program attached through a link, and the ring
/// that receives the kernel's throttle records for it.
pub struct MissSampler {
    pub label: String,
    pub cpus: usize,
    /// One per fd, or why the throttling cannot be read.
    throttle: Result<Mutex<ThrottleLog>, String>,
    _links: Vec<libbpf_rs::Link>,
    fds: Vec<OwnedFd>,
}

fn ring_error(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EAGAIN) => "over the locked-memory allowance for perf buffers (kernel.perf_event_mlock_kb, RLIMIT_MEMLOCK)",
        Some(libc::ENOMEM) => "out of memory",
        _ => "the kernel refused the mapping",
    }
}

/// Every fd's ring, and what they said so far.
struct ThrottleLog {
    rings: Vec<ThrottleRing<MmapMut>>,
    totals: ThrottleTotals,
}

/// A ring of 1 + RING_DATA_PAGES pages on a sampling fd.
fn map_ring(fd: &OwnedFd) -> std::io::Result<MmapMut> {
    // SAFETY: a perf event fd mapped shared: the kernel owns the layout, ThrottleRing follows
    // its protocol (data_head / data_tail), and nothing else maps it.
    unsafe { MmapOptions::new().len((1 + RING_DATA_PAGES) * page_size()).map_mut(fd) }
}

impl MissSampler {
    /// `stopped`: disable each event as soon as it is attached (libbpf enables it on attach).
    pub fn open(prog: &libbpf_rs::ProgramMut<'_>, mut attr: sys::bindings::perf_event_attr, label: String, stopped: bool) -> Result<MissSampler> {
        let ncpus = libbpf_rs::num_possible_cpus()?;
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
        let cpus: Vec<u32> = crate::topology::parse_cpu_list(&online);
        let cpus = if cpus.is_empty() { (0..ncpus as u32).collect() } else { cpus };
        let mut fds = Vec::new();
        let mut links = Vec::new();
        let mut rings = Ok(Vec::new());
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
            // SAFETY: an open perf event fd of ours; DISABLE takes no pointer argument.
            if stopped && unsafe { sys::ioctls::DISABLE(fd, 0) } < 0 {
                let e = std::io::Error::last_os_error();
                let (_, why) = counters::live::classify_errno(e.raw_os_error().unwrap_or(0));
                bail!("stopping the L3-miss sampler on CPU {cpu} until its first window: {why}");
            }
            if let Ok(r) = rings.as_mut() {
                match map_ring(&owned) {
                    Ok(m) => r.push(ThrottleRing::new(m)),
                    Err(e) => rings = Err(format!("the sampler's ring buffer on CPU {cpu} could not be mapped: {}", ring_error(&e))),
                }
            }
            fds.push(owned);
        }
        let throttle = rings.map(|rings| Mutex::new(ThrottleLog { rings, totals: ThrottleTotals::default() }));
        Ok(MissSampler { label, cpus: fds.len(), throttle, _links: links, fds })
    }

    /// The kernel's throttling of the sampler so far, read from the rings; Err: not readable.
    pub fn throttling(&self, now_ns: u64) -> Result<ThrottleTotals, String> {
        let m = self.throttle.as_ref().map_err(Clone::clone)?;
        let mut g = m.lock().map_err(|_| "throttle log poisoned".to_string())?;
        let log = &mut *g;
        for r in log.rings.iter_mut() {
            r.drain(now_ns, &mut log.totals);
        }
        Ok(log.totals)
    }

    /// Start or stop sampling on every CPU (attribution windows, `record --miss-duty`).
    pub fn set_enabled(&self, on: bool) -> Result<()> {
        for fd in &self.fds {
            // SAFETY: an open perf event fd of ours; ENABLE/DISABLE take no pointer argument.
            let rc = unsafe {
                if on {
                    sys::ioctls::ENABLE(fd.as_raw_fd(), 0)
                } else {
                    sys::ioctls::DISABLE(fd.as_raw_fd(), 0)
                }
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                let (_, why) = counters::live::classify_errno(e.raw_os_error().unwrap_or(0));
                bail!("{} the L3-miss sampler: {why}", if on { "enabling" } else { "disabling" });
            }
        }
        if !on {
            // A stop the kernel had in progress ends with the sampler, not at its next start.
            if let Ok(m) = self.throttle.as_ref() {
                if let Ok(mut g) = m.lock() {
                    let log = &mut *g;
                    let now = crate::sys::monotonic_ns();
                    for r in log.rings.iter_mut() {
                        r.disabled(now, &mut log.totals);
                    }
                }
            }
        }
        Ok(())
    }

    /// Why throttling is not measured, if it is not.
    pub fn throttle_unavailable(&self) -> Option<&str> {
        self.throttle.as_ref().err().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sample must reach the program (no large PEBS batching past it), and throttle
    /// records must be on the BPF clock.
    #[test]
    fn sampler_attr_keeps_samples_in_the_program() {
        let (attr, _) = event_attr(MissSource::SoftwareClock, None, 50_000, Path::new("/nonexistent")).expect("attr").expect("some");
        // SAFETY: reading a plain integer field of a union written by event_attr.
        let wakeup = unsafe { attr.__bindgen_anon_2.wakeup_events };
        assert_eq!((wakeup, attr.watermark(), attr.freq()), (1, 0, 0));
        assert_eq!((attr.use_clockid(), attr.clockid), (1, libc::CLOCK_MONOTONIC));
    }
}
