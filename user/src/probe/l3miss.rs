//! L3-miss sampling (bpf/l3miss.bpf.c): opens the sampling perf event on every CPU (PEBS
//! MEM_LOAD_RETIRED.L3_MISS with data addresses on Intel; a software event standing in where
//! there is no PMU) and attaches the sample program to each, which joins sample addresses to
//! the live packet buffers pktlife's hooks keep, and reads what it charged.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use memmap2::{MmapMut, MmapOptions};
use perf_event_open_sys as sys;
use serde::Serialize;

use super::l3miss_skel::types::{pl_flow_key, pl_miss_count, pl_miss_counter, pl_miss_totals};
use super::l3miss_skel::{L3missSkel, L3missSkelBuilder};
use super::throttle::{page_size, ThrottleRing, ThrottleTotals, RING_DATA_PAGES};
use crate::counters::{self, events::Unit, Platform};
use crate::snapshot::{Dir, MissSnapshot, NBUCKETS};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};

// SAFETY: generated from l3miss.h: plain integer structs without padding invariants.
unsafe impl plain::Plain for pl_miss_totals {}
unsafe impl plain::Plain for pl_miss_count {}
unsafe impl plain::Plain for pl_flow_key {}
const _: () = assert!(
    std::mem::size_of::<pl_miss_totals>() == (pl_miss_counter::PLM_NR.0 as usize + NBUCKETS) * 8
);

/// Which event drives the sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
pub fn event_attr(
    source: MissSource,
    platform: Option<Platform>,
    period: u64,
    sys_root: &Path,
) -> Result<Option<(sys::bindings::perf_event_attr, String)>> {
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
    unsafe {
        MmapOptions::new()
            .len((1 + RING_DATA_PAGES) * page_size())
            .map_mut(fd)
    }
}

impl MissSampler {
    /// `stopped`: disable each event as soon as it is attached (libbpf enables it on attach).
    pub fn open(
        prog: &libbpf_rs::ProgramMut<'_>,
        mut attr: sys::bindings::perf_event_attr,
        label: String,
        stopped: bool,
    ) -> Result<MissSampler> {
        let ncpus = libbpf_rs::num_possible_cpus()?;
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
        let cpus: Vec<u32> = crate::topology::parse_cpu_list(&online);
        let cpus = if cpus.is_empty() {
            (0..ncpus as u32).collect()
        } else {
            cpus
        };
        let mut fds = Vec::new();
        let mut links = Vec::new();
        let mut rings = Ok(Vec::new());
        for cpu in cpus {
            // SAFETY: attr is a valid perf_event_attr; pid -1 + cpu = system-wide on that CPU.
            let fd = unsafe {
                sys::perf_event_open(
                    &mut attr,
                    -1,
                    cpu as i32,
                    -1,
                    sys::bindings::PERF_FLAG_FD_CLOEXEC as u64,
                )
            };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                let (_, why) = counters::live::classify_errno(e.raw_os_error().unwrap_or(0));
                bail!("opening the L3-miss sampler ({label}) on CPU {cpu}: {why}");
            }
            // SAFETY: fd was just returned by perf_event_open and is ours.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let link = prog.attach_perf_event(fd).map_err(|e| {
                anyhow::anyhow!(super::explain_bpf_error(
                    &e,
                    "attaching the L3-miss program"
                ))
            })?;
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
                    Err(e) => {
                        rings = Err(format!(
                            "the sampler's ring buffer on CPU {cpu} could not be mapped: {}",
                            ring_error(&e)
                        ))
                    }
                }
            }
            fds.push(owned);
        }
        let throttle = rings.map(|rings| {
            Mutex::new(ThrottleLog {
                rings,
                totals: ThrottleTotals::default(),
            })
        });
        Ok(MissSampler {
            label,
            cpus: fds.len(),
            throttle,
            _links: links,
            fds,
        })
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
                bail!(
                    "{} the L3-miss sampler: {why}",
                    if on { "enabling" } else { "disabling" }
                );
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

/// How the sample program is set up (must agree with pktlife's ProbeConfig).
#[derive(Debug, Clone)]
pub struct L3missConfig {
    /// Address join on 1 in N buffer pages (as pktlife keeps them).
    pub join_sample: u32,
    /// --miss-sampling software-copy: clock samples inside a socket copy take an address in
    /// the buffers being copied.
    pub copy_standin: bool,
    /// The L3-miss flow map's size (None: the built-in 4096); tests shrink it to make it evict.
    pub flow_slots: Option<u32>,
}

/// The sample program, its maps, and the sampler it runs on.
pub struct L3missProbe {
    skel: L3missSkel<'static>,
    sampler: Option<MissSampler>,
    ncpus: usize,
}

impl L3missProbe {
    /// Load the sample program on pktlife's buffer-page map and CPU contexts.
    pub fn load(cfg: &L3missConfig, pktlife: &super::pktlife::PktlifeProbe) -> Result<L3missProbe> {
        use std::os::fd::AsFd;
        let storage: &'static mut std::mem::MaybeUninit<OpenObject> =
            Box::leak(Box::new(std::mem::MaybeUninit::uninit()));
        let mut open = L3missSkelBuilder::default().open(storage).map_err(|e| {
            anyhow::anyhow!(super::explain_bpf_error(
                &e,
                "opening the l3miss BPF object"
            ))
        })?;
        let Some(ro) = open.maps.rodata_data.as_deref_mut() else {
            bail!("l3miss BPF object has no read-only config section (build problem)");
        };
        ro.join_page_mask = cfg.join_sample.max(1) - 1;
        ro.copy_standin = u8::from(cfg.copy_standin);
        let (pages, ctx) = pktlife.shared_maps();
        open.maps
            .buf_pages
            .reuse_fd(pages.as_fd())
            .context("sharing the buffer-page map with the L3-miss program")?;
        open.maps
            .cpu_ctx
            .reuse_fd(ctx.as_fd())
            .context("sharing the CPU contexts with the L3-miss program")?;
        if let Some(n) = cfg.flow_slots {
            open.maps
                .miss_flows
                .set_max_entries(n.max(1))
                .context("sizing the L3-miss flow map")?;
        }
        let skel = open.load().map_err(|e| {
            anyhow::anyhow!(super::explain_bpf_error(&e, "loading the L3-miss program"))
        })?;
        let ncpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        Ok(L3missProbe {
            skel,
            sampler: None,
            ncpus,
        })
    }

    /// Attach the program to a sampling event on every CPU. `stopped`: leave it disabled
    /// (windows start it).
    pub fn attach_sampler(
        &mut self,
        attr: sys::bindings::perf_event_attr,
        label: String,
        stopped: bool,
    ) -> Result<String> {
        let sampler = MissSampler::open(&self.skel.progs.l3miss_sample, attr, label, stopped)?;
        let desc = format!("{} on {} CPUs", sampler.label, sampler.cpus);
        self.sampler = Some(sampler);
        Ok(desc)
    }

    pub fn has_sampler(&self) -> bool {
        self.sampler.is_some()
    }

    /// CPUs the sampler runs on (one event each).
    pub fn sampler_cpus(&self) -> Option<usize> {
        self.sampler.as_ref().map(|s| s.cpus)
    }

    /// Why the sampler's throttling is not measured, when a sampler runs and it is not.
    pub fn throttle_unavailable(&self) -> Option<String> {
        self.sampler
            .as_ref()
            .and_then(|s| s.throttle_unavailable())
            .map(str::to_string)
    }

    /// A window's join began at `start_ns` (CLOCK_MONOTONIC): what it keeps from then on is
    /// current; `generation` retires the CPU contexts of earlier windows.
    pub fn set_window(&mut self, start_ns: u64, generation: u32) -> Result<()> {
        let Some(bss) = self.skel.maps.bss_data.as_deref_mut() else {
            bail!("l3miss BPF object has no writable data section (build problem)");
        };
        // SAFETY: plain integers in the object's mmapped .bss, read by the program as volatile;
        // the sampler is stopped while they change, and the fence orders them for it.
        unsafe {
            std::ptr::addr_of_mut!(bss.join_window_start).write_volatile(start_ns);
            std::ptr::addr_of_mut!(bss.join_generation).write_volatile(generation);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Start or stop the sampler.
    pub fn set_sampling(&self, on: bool) -> Result<()> {
        match &self.sampler {
            Some(s) => s.set_enabled(on),
            None => Ok(()),
        }
    }

    /// (by address join, by CPU context) summed over the per-CPU copies.
    fn sum_counts(&self, per_cpu: &[Vec<u8>]) -> (u64, u64) {
        per_cpu.iter().take(self.ncpus).fold((0, 0), |(a, c), raw| {
            let mut v = pl_miss_count::default();
            match plain::copy_from_bytes(&mut v, raw) {
                Ok(()) => (a + v.addr_join, c + v.cpu_ctx),
                Err(_) => (a, c),
            }
        })
    }

    /// Cumulative L3-miss sample counts (the buffer map's own counts are pktlife's); flows and
    /// regions only when `with_flows`.
    pub fn read_misses(&self, with_flows: bool) -> Result<MissSnapshot> {
        use pl_miss_counter as C;
        let mut m = MissSnapshot {
            age_hist: vec![0; NBUCKETS],
            ..Default::default()
        };
        let tot = self
            .skel
            .maps
            .miss_totals
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?
            .unwrap_or_default();
        let mut no_flow = 0;
        for raw in tot.iter().take(self.ncpus) {
            let mut t = pl_miss_totals::default();
            if plain::copy_from_bytes(&mut t, raw).is_err() {
                continue;
            }
            let c = |k: C| t.c[k.0 as usize];
            m.samples += c(C::PLM_SAMPLES);
            m.on_packet_buffers += c(C::PLM_ON_PACKET);
            m.other_addr += c(C::PLM_OTHER_ADDR);
            m.no_addr += c(C::PLM_NO_ADDR);
            m.ctx_charged += c(C::PLM_CTX_CHARGED);
            m.uncharged += c(C::PLM_UNCHARGED);
            m.buf.copy_linear_joined += c(C::PLM_COPY_LINEAR_JOINED);
            m.buf.copy_frag_joined += c(C::PLM_COPY_FRAG_JOINED);
            m.out_of_subset += c(C::PLM_OUT_OF_SUBSET);
            no_flow += c(C::PLM_NO_FLOW);
            m.queue_clamped += c(C::PLM_QUEUE_CLAMPED);
            m.before_window += c(C::PLM_BEFORE_WINDOW);
            for (i, v) in t.age_hist.iter().enumerate() {
                m.age_hist[i] += v;
            }
        }
        m.no_flow = Some(no_flow);
        if let Some(s) = &self.sampler {
            m.throttle = s.throttling(crate::sys::monotonic_ns()).ok();
        }
        let max_queues = super::qcount::MAX_QUEUES;
        for idx in 0..(2 * max_queues) {
            let vals = self
                .skel
                .maps
                .miss_queues
                .lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY)?
                .unwrap_or_default();
            let (a, c) = self.sum_counts(&vals);
            if a + c > 0 {
                let dir = if idx < max_queues { Dir::Rx } else { Dir::Tx };
                m.queues.push((dir, idx % max_queues, a, c));
            }
        }
        if with_flows {
            let map = &self.skel.maps.miss_flows;
            for key in map.keys() {
                let Some(vals) = map.lookup_percpu(&key, MapFlags::ANY)? else {
                    continue;
                };
                let mut k = pl_flow_key::default();
                if plain::copy_from_bytes(&mut k, &key).is_err() {
                    continue;
                }
                let Some(fk) = super::flow_key_of(
                    k.family, k.proto, k.dir, &k.saddr, k.sport, &k.daddr, k.dport,
                ) else {
                    continue;
                };
                let (a, c) = self.sum_counts(&vals);
                if a + c > 0 {
                    m.flows.push((fk, a, c));
                }
            }
            let map = &self.skel.maps.miss_regions;
            for key in map.keys() {
                let Some(vals) = map.lookup_percpu(&key, MapFlags::ANY)? else {
                    continue;
                };
                let n: u64 = vals
                    .iter()
                    .take(self.ncpus)
                    .map(|v| {
                        v.get(..8)
                            .and_then(|b| b.try_into().ok())
                            .map(u64::from_ne_bytes)
                            .unwrap_or(0)
                    })
                    .sum();
                let region = key
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
                    .unwrap_or(0);
                m.regions.push((region, n));
            }
            m.regions.sort_by_key(|r| std::cmp::Reverse(r.1));
            m.regions.truncate(32);
        }
        Ok(m)
    }

    pub fn prog_ids(&self) -> Vec<u32> {
        self.skel
            .object()
            .progs()
            .filter_map(|p| super::loaded_prog_id(&p))
            .collect()
    }
}

impl Drop for L3missProbe {
    fn drop(&mut self) {
        // The sampler's links refer to the program: drop them first.
        self.sampler.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sample must reach the program (no large PEBS batching past it), and throttle
    /// records must be on the BPF clock.
    #[test]
    fn sampler_attr_keeps_samples_in_the_program() {
        let (attr, _) = event_attr(
            MissSource::SoftwareClock,
            None,
            50_000,
            Path::new("/nonexistent"),
        )
        .expect("attr")
        .expect("some");
        // SAFETY: reading a plain integer field of a union written by event_attr.
        let wakeup = unsafe { attr.__bindgen_anon_2.wakeup_events };
        assert_eq!((wakeup, attr.watermark(), attr.freq()), (1, 0, 0));
        assert_eq!(
            (attr.use_clockid(), attr.clockid),
            (1, libc::CLOCK_MONOTONIC)
        );
    }

    /// The PEBS path where a core PMU exists (a Sapphire Rapids sysfs tree): the event is
    /// MEM_LOAD_RETIRED.L3_MISS as Intel's perfmon record encodes it (EventCode 0xd1, UMask
    /// 0x20, placed by the PMU's own format files), on the PMU's type, precise with data
    /// addresses. Without a supported Xeon or without a core PMU, `pebs` fails naming which.
    #[test]
    fn pebs_attr_where_a_core_pmu_exists() {
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/counters/sysfs/spr");
        let pmu_type: u32 = std::fs::read_to_string(root.join("bus/event_source/devices/cpu/type"))
            .expect("fixture")
            .trim()
            .parse()
            .expect("type");
        let (attr, label) = event_attr(MissSource::Pebs, Some(Platform::Spr), 2000, &root)
            .expect("attr")
            .expect("some");
        assert_eq!((attr.type_, attr.config), (pmu_type, 0x20d1));
        assert_eq!(attr.precise_ip(), 2);
        assert_ne!(attr.sample_type & sys::bindings::PERF_SAMPLE_ADDR as u64, 0);
        // SAFETY: reading a plain integer field of a union written by event_attr.
        assert_eq!(unsafe { attr.__bindgen_anon_1.sample_period }, 2000);
        assert!(label.contains("PEBS"), "{label}");
        // auto takes the same event where it can, and is quiet where it cannot.
        let (auto, _) = event_attr(MissSource::Auto, Some(Platform::Spr), 2000, &root)
            .expect("attr")
            .expect("some");
        assert_eq!(
            (auto.type_, auto.config, auto.precise_ip()),
            (pmu_type, 0x20d1, 2)
        );
        assert!(event_attr(MissSource::Auto, None, 2000, &root)
            .expect("quiet")
            .is_none());
        let no_xeon =
            event_attr(MissSource::Pebs, None, 2000, &root).expect_err("no supported Xeon");
        assert!(
            format!("{no_xeon:#}").contains("not a supported Intel Xeon"),
            "{no_xeon:#}"
        );
        let no_pmu = event_attr(
            MissSource::Pebs,
            Some(Platform::Spr),
            2000,
            Path::new("/nonexistent"),
        )
        .expect_err("no core PMU");
        assert!(
            format!("{no_pmu:#}").contains("no core PMU (cpu) in sysfs"),
            "{no_pmu:#}"
        );
    }
}
