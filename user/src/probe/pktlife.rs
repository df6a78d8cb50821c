//! The pktlife probe family: load with the chosen hook flavours, attach as BPF
//! links owned by this process (so nothing outlives it, even after SIGKILL),
//! and read the kernel's per-queue aggregates, flows and sampled records.
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};
use serde::Serialize;

use super::features::{Features, Flavor, HookChoice, PKTLIFE_HOOKS};
use super::skel::types::{
    pl_buf_bucket, pl_buf_slot, pl_cpu_ctx, pl_flow_key, pl_flow_stats, pl_miss_count, pl_miss_totals, pl_pkt_event,
    pl_queue_stats,
};
use super::skel::{PktlifeSkel, PktlifeSkelBuilder};
use crate::snapshot::{
    Dir, EventCounters, FlowCounters, FlowKey, MissSnapshot, PacketSample, QueueCounters, NAPI_BUCKETS, NBUCKETS,
    NSTAGES,
};

// SAFETY: generated from pktlife.h: plain integer structs without padding invariants.
unsafe impl plain::Plain for pl_queue_stats {}
unsafe impl plain::Plain for pl_flow_key {}
unsafe impl plain::Plain for pl_flow_stats {}
unsafe impl plain::Plain for pl_pkt_event {}
unsafe impl plain::Plain for pl_cpu_ctx {}
unsafe impl plain::Plain for pl_miss_totals {}
unsafe impl plain::Plain for pl_miss_count {}

pub const MAX_QUEUES: u32 = 64;
const PLC_SAMPLED: u32 = 0;
const PLC_LOST: u32 = 1;
const PLC_STATE_EVICT: u32 = 2;
const PLC_QUEUE_CLAMPED: u32 = 3;
const PLC_STATE_STALE: u32 = 4;
const PLC_BUF_LINEAR: u32 = 5;
const PLC_BUF_FRAG: u32 = 6;
const PLC_FRAG_OVER_CAP: u32 = 7;
const PLC_FRAG_NO_PAGE: u32 = 8;
const PLC_FRAG_NO_LAYOUT: u32 = 9;
const PLC_BUF_REPLACED: u32 = 10;
const PLC_PAGES_OVER_CAP: u32 = 11;
const PLC_BUF_FILLED: u32 = 12;
/// Ways per set of the buffer-page map (PL_BUF_WAYS in pktlife.h).
const BUF_WAYS: u32 = (std::mem::size_of::<pl_buf_bucket>() / std::mem::size_of::<pl_buf_slot>()) as u32;

/// Stage latencies on 1 in this many packets by default: the per-packet state and the clock
/// read are most of a hand-up's cost, and a quarter of the packets of any busy queue is
/// plenty for latency histograms and mean residence (counts, bytes and flows still cover
/// every packet).
pub const DEFAULT_STAGE_EVERY: u32 = 4;

/// Largest `--join-sample`. A queue whose buffers are a fixed set of recurring pages (a
/// page_pool of P pages) is seen through a fixed draw of about P/N of them, an error more
/// samples do not shrink (≈ 1/√(P/N) relative): at 16, ±13 % for a 1000-page pool.
pub const MAX_JOIN_SAMPLE: u32 = 16;

#[derive(Debug, Clone)]
pub struct ProbeConfig {
    pub ifindex: u32,
    pub netns_inode: u32,
    pub sample_every: u32,
    /// Stage latencies for 1 in N packets (1: every packet).
    pub stage_every: u32,
    pub track_flows: bool,
    /// skb->queue_mapping - this = RX queue (see `rx_queue_offset_for_driver`).
    pub rx_queue_offset: u8,
    /// Keep the packet-buffer page map and CPU work context for an L3-miss sampler.
    pub join_buffers: bool,
    /// Map frag pages too, through this page-to-address layout (None: linear data only).
    pub mem_layout: Option<super::memlayout::MemLayout>,
    /// --miss-sampling software-copy: clock samples inside a socket copy take
    /// an address in the buffers being copied.
    pub copy_standin: bool,
    /// Address join on 1 in N buffer pages, chosen by address hash (a power of two; 1: all).
    pub join_sample: u32,
    /// The L3-miss flow map's size (None: the built-in 4096); tests shrink it to make it evict.
    pub miss_flow_slots: Option<u32>,
}

/// Drivers that do not store RX queue + 1 in skb->queue_mapping. veth passes
/// the peer's TX queue (which selects its RX queue) through unchanged; checked
/// against veth's own per-queue counters by the system tests.
pub fn rx_queue_offset_for_driver(driver: Option<&str>) -> u8 {
    match driver {
        Some("veth") => 0,
        _ => 1,
    }
}

/// What got attached, for the recording and the report.
#[derive(Debug, Clone, Serialize)]
pub struct AttachedHook {
    pub tracepoint: String,
    pub flavor: Option<Flavor>,
    pub error: Option<String>,
}

pub struct PktlifeProbe {
    skel: PktlifeSkel<'static>,
    _links: Vec<Link>,
    pub hooks: Vec<AttachedHook>,
    ring: Option<RingBuffer<'static>>,
    miss_sampler: Option<super::l3miss::MissSampler>,
    pending: Rc<RefCell<Vec<PacketSample>>>,
    /// Last flow totals reported: counters never go backwards.
    flow_floor: RefCell<std::collections::HashMap<FlowKey, (u64, u64, u64)>>,
    received: Rc<RefCell<u64>>,
    ncpus: usize,
}

fn open_and_load(cfg: &ProbeConfig, flavors: &[Flavor]) -> Result<PktlifeSkel<'static>> {
    // The skeleton borrows its object storage for its whole life; the probe
    // lives until exit, so a leaked box is the honest lifetime.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = PktlifeSkelBuilder::default()
        .open(storage)
        .context("opening the pktlife BPF object")?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.filter_ifindex = cfg.ifindex;
        ro.filter_netns = cfg.netns_inode;
        ro.sample_every = cfg.sample_every;
        ro.stage_every = cfg.stage_every;
        ro.track_flows = u8::from(cfg.track_flows);
        ro.rx_queue_offset = cfg.rx_queue_offset;
        ro.join_buffers = u8::from(cfg.join_buffers);
        ro.copy_standin = u8::from(cfg.join_buffers && cfg.copy_standin);
        if !cfg.join_sample.is_power_of_two() || cfg.join_sample > MAX_JOIN_SAMPLE {
            bail!("join page sampling must be a power of two from 1 to {MAX_JOIN_SAMPLE}, not {}", cfg.join_sample);
        }
        ro.join_page_mask = cfg.join_sample - 1;
        if let (true, Some(m)) = (cfg.join_buffers, &cfg.mem_layout) {
            ro.join_frags = 1;
            ro.mem_page_offset = m.page_offset;
            ro.mem_page_offset_addr = m.page_offset_base_addr;
            ro.mem_vmemmap = m.vmemmap;
            ro.mem_vmemmap_addr = m.vmemmap_base_addr;
            ro.mem_max_pfn = m.max_pfn;
        }
    } else {
        bail!("pktlife BPF object has no read-only config section (build problem)");
    }
    if let Some(n) = cfg.miss_flow_slots {
        open.maps.miss_flows.set_max_entries(n.max(1)).context("sizing the L3-miss flow map")?;
    }
    for mut prog in open.open_object_mut().progs_mut() {
        let section = prog.section().to_string_lossy().into_owned();
        let keep = (section == "perf_event" && cfg.join_buffers)
            || PKTLIFE_HOOKS.iter().zip(flavors).any(|(h, f)| section == format!("{}{}", f.section_prefix(), h.tracepoint));
        prog.set_autoload(keep);
    }
    open.load().map_err(|e| anyhow::anyhow!(explain_bpf_error(&e, "loading the pktlife BPF programs")))
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
        Some(i) => format!("{}{}", &msg[..i], msg[i..].find(')').map_or("", |j| &msg[i + j + 1..])),
        None => msg.to_string(),
    }
}

impl PktlifeProbe {
    /// Load along the fallback chain (or with the flavour the user asked for)
    /// and attach every hook that exists.
    pub fn attach(cfg: &ProbeConfig, features: &Features, choice: HookChoice) -> Result<PktlifeProbe> {
        if let Some(why) = features.fatal() {
            bail!(why);
        }
        let preferred: Vec<Flavor> = PKTLIFE_HOOKS.iter().map(|h| features.preferred(h)).collect();
        let forced = match choice {
            HookChoice::Auto => None,
            HookChoice::RawTp => Some(Flavor::RawTp),
            HookChoice::TpBtf => {
                if let Some(h) = PKTLIFE_HOOKS.iter().zip(&preferred).find(|(_, f)| **f != Flavor::TpBtf).map(|(h, _)| h) {
                    bail!(
                        "--hooks tp-btf: this kernel cannot attach tp_btf to {} (no BTF for the tracepoint, or tracing programs refused); use --hooks auto",
                        h.tracepoint
                    );
                }
                Some(Flavor::TpBtf)
            }
        };
        let skel = match forced {
            Some(f) => open_and_load(cfg, &vec![f; PKTLIFE_HOOKS.len()])
                .with_context(|| format!("--hooks {}", f.as_str().replace('_', "-")))?,
            None => match open_and_load(cfg, &preferred) {
            Ok(s) => s,
            Err(first) if preferred.contains(&Flavor::TpBtf) => {
                // tp_btf can be refused where raw_tp is not (LSM policy, verifier
                // differences): the one fallback step of the chain.
                let raw = vec![Flavor::RawTp; PKTLIFE_HOOKS.len()];
                match open_and_load(cfg, &raw) {
                    Ok(s) => s,
                    Err(e) if format!("{e:#}") == format!("{first:#}") => bail!("{e:#} (as tp_btf and as raw_tp)"),
                    Err(e) => bail!("{e:#} (as raw_tp; as tp_btf: {first:#})"),
                }
            }
            Err(e) => return Err(e),
            },
        };

        let mut links = Vec::new();
        let mut hooks = Vec::new();
        for prog in skel.object().progs_mut() {
            // perf_event programs attach to sampling fds (attach_miss_sampler), not by section.
            if !prog.autoload() || prog.section() == "perf_event" {
                continue;
            }
            let section = prog.section().to_string_lossy().into_owned();
            let (prefix, tp) = section.split_once('/').unwrap_or(("", section.as_str()));
            let flavor = if prefix == "tp_btf" { Flavor::TpBtf } else { Flavor::RawTp };
            match prog.attach() {
                Ok(link) => {
                    links.push(link);
                    hooks.push(AttachedHook { tracepoint: tp.to_string(), flavor: Some(flavor), error: None });
                }
                Err(e) => hooks.push(AttachedHook {
                    tracepoint: tp.to_string(),
                    flavor: None,
                    error: Some(explain_bpf_error(&e, &format!("attaching {section}"))),
                }),
            }
        }
        for h in PKTLIFE_HOOKS.iter().filter(|h| h.required) {
            if let Some(a) = hooks.iter().find(|a| a.tracepoint == h.tracepoint && a.flavor.is_none()) {
                bail!("required hook {} could not attach: {}", h.tracepoint, a.error.clone().unwrap_or_default());
            }
        }

        let ncpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        let mut probe = PktlifeProbe {
            skel,
            _links: links,
            hooks,
            ring: None,
            miss_sampler: None,
            pending: Rc::new(RefCell::new(Vec::new())),
            flow_floor: RefCell::new(std::collections::HashMap::new()),
            received: Rc::new(RefCell::new(0)),
            ncpus,
        };
        probe.build_ring()?;
        Ok(probe)
    }

    fn build_ring(&mut self) -> Result<()> {
        let pending = Rc::clone(&self.pending);
        let received = Rc::clone(&self.received);
        let mut builder = RingBufferBuilder::new();
        // SAFETY of the 'static: the map lives in self.skel, which outlives the
        // ring (the ring is dropped first in Drop order: it is declared later
        // but we take it explicitly in drop()).
        let map: &'static libbpf_rs::MapMut<'static> = unsafe { &*(&self.skel.maps.events as *const _) };
        builder
            .add(map, move |data: &[u8]| {
                *received.borrow_mut() += 1;
                if let Some(s) = parse_sample(data) {
                    pending.borrow_mut().push(s);
                }
                0
            })
            .context("setting up the BPF ring buffer")?;
        self.ring = Some(builder.build().context("setting up the BPF ring buffer")?);
        Ok(())
    }

    /// Wait (epoll) up to `timeout` for sampled records; returns when the
    /// timeout passes or a signal interrupts the wait.
    pub fn poll(&self, timeout: Duration) -> Result<()> {
        if let Some(r) = &self.ring {
            match r.poll(timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
                Err(e) => return Err(anyhow::anyhow!("reading the BPF ring buffer: {e}")),
            }
        }
        Ok(())
    }

    pub fn drain_samples(&self) -> Vec<PacketSample> {
        if let Some(r) = &self.ring {
            let _ = r.consume();
        }
        std::mem::take(&mut *self.pending.borrow_mut())
    }

    /// Cumulative per-queue counters, summed over CPUs; only queues with activity.
    pub fn read_queues(&self) -> Result<Vec<QueueCounters>> {
        let map = &self.skel.maps.queue_stats;
        let mut out = Vec::new();
        for idx in 0..(2 * MAX_QUEUES) {
            let per_cpu = map
                .lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY)
                .context("reading queue_stats")?
                .unwrap_or_default();
            let dir = if idx < MAX_QUEUES { Dir::Rx } else { Dir::Tx };
            let mut q = QueueCounters::new(dir, idx % MAX_QUEUES);
            for raw in per_cpu.iter().take(self.ncpus) {
                let mut s = pl_queue_stats::default();
                plain::copy_from_bytes(&mut s, raw).map_err(|_| anyhow::anyhow!("queue_stats value too short"))?;
                add_kernel_stats(&mut q, &s);
            }
            if !q.is_zero() {
                out.push(q);
            }
        }
        Ok(out)
    }

    fn percpu_sum(map: &libbpf_rs::MapMut<'_>, key: u32) -> Result<u64> {
        let vals = map.lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        Ok(vals
            .iter()
            .map(|v| v.get(..8).map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))).unwrap_or(0))
            .sum())
    }

    /// Records taken from the ring buffer so far.
    pub fn received(&self) -> u64 {
        *self.received.borrow()
    }

    pub fn read_events(&self) -> Result<EventCounters> {
        let m = &self.skel.maps.counters;
        Ok(EventCounters {
            sampled: Self::percpu_sum(m, PLC_SAMPLED)?,
            lost: Self::percpu_sum(m, PLC_LOST)?,
            state_evicted: Self::percpu_sum(m, PLC_STATE_EVICT)?,
            queue_clamped: Self::percpu_sum(m, PLC_QUEUE_CLAMPED)?,
            state_stale: Self::percpu_sum(m, PLC_STATE_STALE)?,
            received: *self.received.borrow(),
        })
    }

    pub fn read_drop_reasons(&self) -> Result<Vec<(u32, u64)>> {
        let mut out = Vec::new();
        for r in 0..256u32 {
            let c = Self::percpu_sum(&self.skel.maps.drop_reasons, r)?;
            if c > 0 {
                out.push((r, c));
            }
        }
        Ok(out)
    }

    /// Flows, summed over the per-CPU copies of each entry.
    pub fn read_flows(&self) -> Result<Vec<FlowCounters>> {
        let map = &self.skel.maps.flows;
        let mut out = Vec::new();
        for key in map.keys() {
            let Some(vals) = map.lookup_percpu(&key, MapFlags::ANY).context("reading flows")? else { continue };
            let mut k = pl_flow_key::default();
            if plain::copy_from_bytes(&mut k, &key).is_err() {
                continue;
            }
            let Some(key) = flow_key(&k) else { continue };
            let mut f = empty_flow(key);
            for raw in vals.iter().take(self.ncpus) {
                let mut v = pl_flow_stats::default();
                if plain::copy_from_bytes(&mut v, raw).is_err() || v.packets == 0 {
                    continue;
                }
                add_flow_stats(&mut f, &v);
            }
            if f.packets > 0 {
                out.push(f);
            }
        }
        // Counts each CPU still holds for its current flows. Read after the map:
        // a flush in between can only delay packets to the next read, never
        // count them twice.
        let ctx = self.skel.maps.cpu_ctx.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY).context("reading cpu_ctx")?;
        for raw in ctx.unwrap_or_default().iter().take(self.ncpus) {
            let mut c = pl_cpu_ctx::default();
            if plain::copy_from_bytes(&mut c, raw).is_err() {
                continue;
            }
            for pending in c.pend.iter().filter(|p| p.stats.packets > 0) {
                let Some(key) = flow_key(&pending.key) else { continue };
                match out.iter_mut().find(|f| f.key == key) {
                    Some(f) => add_flow_stats(f, &pending.stats),
                    None => {
                        let mut f = empty_flow(key);
                        add_flow_stats(&mut f, &pending.stats);
                        out.push(f);
                    }
                }
            }
        }
        // A flush between the two reads above can hide packets from this read
        // (they show up in the next): hold every total at its last value.
        let mut floor = self.flow_floor.borrow_mut();
        for f in &mut out {
            let e = floor.entry(f.key.clone()).or_insert((0, 0, 0));
            f.packets = f.packets.max(e.0);
            f.bytes = f.bytes.max(e.1);
            f.payload_bytes = f.payload_bytes.max(e.2);
            *e = (f.packets, f.bytes, f.payload_bytes);
        }
        // Bounded like the kernel's LRU: forget flows it has dropped.
        let live: std::collections::HashSet<&FlowKey> = out.iter().map(|f| &f.key).collect();
        floor.retain(|k, _| live.contains(k));
        Ok(out)
    }

    /// Attach the L3-miss program to a sampling event on every CPU (the probe
    /// must have been loaded with `join_buffers`).
    /// `stopped`: leave it disabled (attribution windows start it).
    pub fn attach_miss_sampler(&mut self, attr: perf_event_open_sys::bindings::perf_event_attr, label: String, stopped: bool) -> Result<String> {
        let prog = &self.skel.progs.l3miss_sample;
        let sampler = super::l3miss::MissSampler::open(prog, attr, label, stopped)?;
        let desc = format!("{} on {} CPUs", sampler.label, sampler.cpus);
        self.miss_sampler = Some(sampler);
        Ok(desc)
    }

    /// Attribution windows (`record --miss-duty`): `join` turns the buffer map and the CPU
    /// context on or off; `sample` starts or stops the sampler; `window` (when the join
    /// comes on: the window's start, CLOCK_MONOTONIC, and its number) dates what the window
    /// keeps and retires every CPU context of earlier windows. On: join first, so the map has
    /// been filling before the first sample; off: the sampler first.
    pub fn set_attribution(&mut self, join: bool, sample: bool, window: Option<(u64, u32)>) -> Result<()> {
        let Some(sampler) = &self.miss_sampler else { return Ok(()) };
        if !sample {
            sampler.set_enabled(false)?;
        }
        let Some(bss) = self.skel.maps.bss_data.as_deref_mut() else {
            bail!("pktlife BPF object has no writable data section (build problem)");
        };
        // SAFETY: plain integers in the BPF object's mmapped .bss, read by the programs as
        // volatile; the volatile stores keep the order and keep them from being elided, and
        // the fence orders them for the programs on any architecture (x86 already does).
        unsafe {
            if let Some((start_ns, generation)) = window {
                std::ptr::addr_of_mut!(bss.join_window_start).write_volatile(start_ns);
                std::ptr::addr_of_mut!(bss.join_generation).write_volatile(generation);
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            std::ptr::addr_of_mut!(bss.join_paused).write_volatile(u32::from(!join));
        }
        if sample {
            sampler.set_enabled(true)?;
        }
        Ok(())
    }

    pub fn has_miss_sampler(&self) -> bool {
        self.miss_sampler.is_some()
    }

    /// CPUs the sampler runs on (one event each).
    pub fn miss_sampler_cpus(&self) -> Option<usize> {
        self.miss_sampler.as_ref().map(|s| s.cpus)
    }

    /// Why the sampler's throttling is not measured, when a sampler runs and it is not.
    pub fn miss_throttle_unavailable(&self) -> Option<String> {
        self.miss_sampler.as_ref().and_then(|s| s.throttle_unavailable()).map(str::to_string)
    }

    /// (by address join, by CPU context) summed over the per-CPU copies.
    fn sum_miss_counts(&self, per_cpu: &[Vec<u8>]) -> (u64, u64) {
        per_cpu.iter().take(self.ncpus).fold((0, 0), |(a, c), raw| {
            let mut v = pl_miss_count::default();
            match plain::copy_from_bytes(&mut v, raw) {
                Ok(()) => (a + v.addr_join, c + v.cpu_ctx),
                Err(_) => (a, c),
            }
        })
    }

    /// Cumulative L3-miss sample counts; flows and regions only when `with_flows`.
    pub fn read_misses(&self, with_flows: bool) -> Result<MissSnapshot> {
        let mut m = MissSnapshot { age_hist: vec![0; NBUCKETS], ..Default::default() };
        let tot = self.skel.maps.miss_totals.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        for raw in tot.iter().take(self.ncpus) {
            let mut t = pl_miss_totals::default();
            if plain::copy_from_bytes(&mut t, raw).is_err() {
                continue;
            }
            m.samples += t.c[0];
            m.on_packet_buffers += t.c[1];
            m.other_addr += t.c[2];
            m.no_addr += t.c[3];
            m.ctx_charged += t.c[4];
            m.uncharged += t.c[5];
            m.buf.copy_linear_joined += t.c[6];
            m.buf.copy_frag_joined += t.c[7];
            m.out_of_subset += t.c[8];
            m.no_flow = Some(m.no_flow.unwrap_or(0) + t.c[9]);
            m.queue_clamped += t.c[10];
            m.before_window += t.c[11];
            for (i, v) in t.age_hist.iter().enumerate() {
                m.age_hist[i] += v;
            }
        }
        if let Some(s) = &self.miss_sampler {
            m.throttle = s.throttling(crate::sys::monotonic_ns()).ok();
        }
        for idx in 0..(2 * MAX_QUEUES) {
            let vals = self.skel.maps.miss_queues.lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
            let (a, c) = self.sum_miss_counts(&vals);
            if a + c > 0 {
                let dir = if idx < MAX_QUEUES { Dir::Rx } else { Dir::Tx };
                m.queues.push((dir, idx % MAX_QUEUES, a, c));
            }
        }
        if with_flows {
            let map = &self.skel.maps.miss_flows;
            for key in map.keys() {
                let Some(vals) = map.lookup_percpu(&key, MapFlags::ANY)? else { continue };
                let mut k = pl_flow_key::default();
                if plain::copy_from_bytes(&mut k, &key).is_err() {
                    continue;
                }
                let Some(fk) = flow_key(&k) else { continue };
                let (a, c) = self.sum_miss_counts(&vals);
                if a + c > 0 {
                    m.flows.push((fk, a, c));
                }
            }
            let map = &self.skel.maps.miss_regions;
            for key in map.keys() {
                let Some(vals) = map.lookup_percpu(&key, MapFlags::ANY)? else { continue };
                let n: u64 = vals
                    .iter()
                    .take(self.ncpus)
                    .map(|v| v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0))
                    .sum();
                let region = key.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0);
                m.regions.push((region, n));
            }
            m.regions.sort_by_key(|r| std::cmp::Reverse(r.1));
            m.regions.truncate(32);
        }
        let c = &self.skel.maps.counters;
        m.buf.linear_pages = Self::percpu_sum(c, PLC_BUF_LINEAR)?;
        m.buf.frag_pages = Self::percpu_sum(c, PLC_BUF_FRAG)?;
        m.buf.frags_over_cap = Self::percpu_sum(c, PLC_FRAG_OVER_CAP)?;
        m.buf.frags_no_page = Self::percpu_sum(c, PLC_FRAG_NO_PAGE)?;
        m.buf.frags_no_layout = Self::percpu_sum(c, PLC_FRAG_NO_LAYOUT)?;
        m.buf.slots_replaced = Self::percpu_sum(c, PLC_BUF_REPLACED)?;
        m.buf.pages_over_cap = Self::percpu_sum(c, PLC_PAGES_OVER_CAP)?;
        // Ways are never emptied, so the fills of empty ways are the ways in use: a
        // counter read instead of sweeping the whole table through the cache.
        if m.buf.linear_pages + m.buf.frag_pages > 0 {
            m.buf.entries = Some(Self::percpu_sum(c, PLC_BUF_FILLED)?);
        }
        Ok(m)
    }

    /// Pages the packet-buffer page map can hold (sets × ways: never more entries).
    pub fn buf_pages_capacity(&self) -> u32 {
        self.skel.maps.buf_pages.max_entries() * BUF_WAYS
    }

    /// BPF program ids of this probe (for leak checks and bpf_stats).
    pub fn prog_ids(&self) -> Vec<u32> {
        self.skel.object().progs().filter(|p| p.autoload()).filter_map(|p| super::loaded_prog_id(&p)).collect()
    }

    /// Each attached hook program: id, name and tracepoint, so bpf_stats
    /// readers (the bench) can line a program up with others on the same tracepoint.
    pub fn attached_progs(&self) -> Vec<super::AttachedProg> {
        self.skel
            .object()
            .progs()
            .filter(|p| p.autoload() && p.section() != "perf_event")
            .filter_map(|p| super::AttachedProg::of(&p))
            .filter(|a| self.hooks.iter().any(|h| h.tracepoint == a.tracepoint && h.flavor == Some(a.flavor)))
            .collect()
    }
}

impl Drop for PktlifeProbe {
    fn drop(&mut self) {
        // Both refer to the skeleton's maps and programs: drop them first.
        self.miss_sampler.take();
        self.ring.take();
    }
}

fn add_kernel_stats(q: &mut QueueCounters, s: &pl_queue_stats) {
    q.packets += s.packets;
    q.bytes += s.bytes;
    q.napi_polls += s.napi_polls;
    q.napi_work += s.napi_work;
    q.napi_budget_exhausted += s.napi_budget_exhausted;
    q.copies += s.copies;
    q.frees += s.frees;
    q.drops += s.drops;
    for st in 0..NSTAGES {
        q.stage_count[st] += s.stage_count[st];
        q.stage_sum_ns[st] += s.stage_sum_ns[st];
        q.stage_max_ns[st] = q.stage_max_ns[st].max(s.stage_max_ns[st]);
        for b in 0..NBUCKETS {
            q.stage_hist[st][b] += s.stage_hist[st][b];
        }
    }
    for b in 0..NAPI_BUCKETS {
        q.napi_work_hist[b] += s.napi_work_hist[b];
    }
}

fn addr_string(family: u8, raw: &[u8; 16]) -> Option<String> {
    match family {
        4 => Some(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]).to_string()),
        6 => Some(Ipv6Addr::from(*raw).to_string()),
        _ => None,
    }
}

fn empty_flow(key: FlowKey) -> FlowCounters {
    FlowCounters { key, queue: 0, packets: 0, bytes: 0, payload_bytes: 0, first_ns: u64::MAX, last_ns: 0 }
}

/// One CPU's counts of a flow (a per-CPU map copy or a pending slot) added to its totals; the
/// queue is the one its latest packet used.
fn add_flow_stats(f: &mut FlowCounters, v: &pl_flow_stats) {
    f.packets += v.packets;
    f.bytes += v.bytes;
    f.payload_bytes += v.payload_bytes;
    f.first_ns = f.first_ns.min(v.first_ns);
    if v.last_ns >= f.last_ns {
        f.last_ns = v.last_ns;
        f.queue = v.queue;
    }
}

fn flow_key(k: &pl_flow_key) -> Option<FlowKey> {
    let proto = match k.proto {
        6 => "tcp",
        17 => "udp",
        _ => return None,
    };
    Some(FlowKey {
        dir: Dir::from_u8(k.dir),
        proto: proto.to_string(),
        src: addr_string(k.family, &k.saddr)?,
        sport: k.sport,
        dst: addr_string(k.family, &k.daddr)?,
        dport: k.dport,
    })
}

fn parse_sample(data: &[u8]) -> Option<PacketSample> {
    let mut e = pl_pkt_event::default();
    plain::copy_from_bytes(&mut e, data).ok()?;
    Some(PacketSample {
        dir: Dir::from_u8(e.dir),
        queue: u32::from(e.queue),
        cpu: e.cpu,
        len: e.len,
        skb_addr: e.skb_addr,
        data_addr: e.data_addr,
        ts: e.ts,
        free_ns: e.free_ns,
        dropped: e.dropped != 0,
        drop_reason: e.drop_reason,
        flow: if e.flow.family != 0 { flow_key(&e.flow) } else { None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_suffix_is_dropped() {
        assert_eq!(without_errno("Argument list too long (os error 7)"), "Argument list too long");
        assert_eq!(without_errno("No such file (os error 2): more"), "No such file: more");
        assert_eq!(without_errno("plain words"), "plain words");
    }

    /// Both hook flavours must pass the verifier with every option that adds
    /// code (records, stage state, the buffer map with frags, the copy
    /// stand-in, a layout read from kernel variables): the raw_tp fallback is
    /// otherwise only loaded on kernels that refuse tp_btf. Loads only; needs
    /// root and BTF, and says so when it cannot run.
    #[test]
    fn every_flavour_loads_with_every_option() {
        if !crate::sys::is_root() || !std::path::Path::new(super::super::features::VMLINUX_BTF).exists() {
            eprintln!("skipped: loading BPF needs root and kernel BTF");
            return;
        }
        let layout = crate::probe::memlayout::MemLayout {
            page_offset: 0,
            // Read from a kernel address at run time: the verifier sees the probe read either way.
            page_offset_base_addr: 0xffff_ffff_8100_0000,
            vmemmap: crate::probe::memlayout::X86_64_L4_VMEMMAP,
            vmemmap_base_addr: 0,
            max_pfn: 1 << 20,
            source: "test".into(),
        };
        for flavor in [Flavor::TpBtf, Flavor::RawTp] {
            for (join, standin, join_sample) in [(false, false, 1), (true, false, 1), (true, true, 1), (true, false, 4)] {
                let cfg = ProbeConfig {
                    ifindex: 1,
                    netns_inode: 0,
                    sample_every: 64,
                    stage_every: 1,
                    track_flows: true,
                    rx_queue_offset: 1,
                    join_buffers: join,
                    mem_layout: Some(layout.clone()),
                    copy_standin: standin,
                    join_sample,
                    miss_flow_slots: None,
                };
                let flavors = vec![flavor; PKTLIFE_HOOKS.len()];
                if let Err(e) = open_and_load(&cfg, &flavors) {
                    panic!("{} with join_buffers={join} copy_standin={standin} join_sample={join_sample}: {e:#}", flavor.as_str());
                }
            }
        }
    }
}
