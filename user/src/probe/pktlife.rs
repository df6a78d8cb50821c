//! The detail tiers (bpf/pktlife.bpf.c): packet lifetimes, sampled packet records and, with an
//! L3-miss sampler, the buffer-page map and CPU work context. Loaded once; its hooks are
//! attached as links owned by this process for the recorder's windows (tier 1) or the whole
//! run (tier 2), so nothing outlives the process, even after SIGKILL.
use super::explain_bpf_error;
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};
use serde::Serialize;

use super::features::{Features, Flavor, HookChoice, PKTLIFE_HOOKS};
use super::skel::types::{
    pl_buf_bucket, pl_buf_slot, pl_counter, pl_flow_key, pl_limits, pl_pkt_event, pl_queue_stats,
    pl_skb_state,
};
use super::skel::{PktlifeSkel, PktlifeSkelBuilder};
use crate::snapshot::{
    BufMapCounters, Dir, EventCounters, FlowKey, PacketSample, QueueCounters, NBUCKETS, NSTAGES,
};

// SAFETY: generated from pktlife.h: plain integer structs without padding invariants.
unsafe impl plain::Plain for pl_queue_stats {}
unsafe impl plain::Plain for pl_pkt_event {}
unsafe impl plain::Plain for pl_skb_state {}

/// Queues per direction the kernel tables hold (MAX_QUEUES in bpf/common.h).
pub const MAX_QUEUES: u32 = super::qcount::MAX_QUEUES;
const _: () = assert!(
    pl_limits::PL_NSTAGES.0 as usize == NSTAGES,
    "bpf/pktlife.h and snapshot disagree on stages"
);
const _: () = assert!(
    pl_limits::PL_SIZE_BUCKETS.0 as usize == crate::snapshot::SIZE_BUCKETS,
    "bpf/pktlife.h and snapshot disagree on size buckets"
);
const _: () = assert!(
    std::mem::size_of::<pl_queue_stats>() == (8 + NSTAGES * (8 + NBUCKETS)) * 8 && NBUCKETS == 32,
    "pl_queue_stats has fields userspace does not read"
);
/// Ways per set of the buffer-page map (PL_BUF_WAYS in attrib.h).
const BUF_WAYS: u32 =
    (std::mem::size_of::<pl_buf_bucket>() / std::mem::size_of::<pl_buf_slot>()) as u32;

/// Stage latencies on 1 in this many packets by default: the per-packet state and the clock
/// read are most of a hand-up's cost, and a quarter of the packets of any busy queue is
/// plenty for latency histograms and mean residence. Not fewer: residence is heavy-tailed,
/// and at 1 in 16 the in-flight bytes the DDIO model rests on (rate x mean residence) came
/// out 1.6-4x apart between two identical 3 s testbed runs, moving a queue's predicted write
/// hit rate by up to 14 points, though the hooks cost 3-7 ns less per event (raw, side by side).
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
    /// skb->queue_mapping - this = RX queue (see `rx_queue_offset_for_driver`).
    pub rx_queue_offset: u8,
    /// Keep the packet-buffer page map and CPU work context for an L3-miss sampler.
    pub join_buffers: bool,
    /// Map frag pages too, through this page-to-address layout (None: linear data only).
    pub mem_layout: Option<super::memlayout::MemLayout>,
    /// --miss-sampling software-copy: the copy hook remembers the buffers being copied.
    pub copy_standin: bool,
    /// Address join on 1 in N buffer pages, chosen by address hash (a power of two; 1: all).
    pub join_sample: u32,
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

/// Hooks that start a packet's life: detached first at a window's end, so the lives begun
/// inside it can still end (the other hooks stay for the drain).
const START_HOOKS: &[&str] = &super::hooks::PKTLIFE_START;

/// Hooks that end a life that has reached its socket: all a drain held on needs (a reader
/// copying the window's packets late), where the others pass every packet for nothing.
const END_HOOKS: &[&str] = &super::hooks::PKTLIFE_END;

pub struct PktlifeProbe {
    skel: PktlifeSkel<'static>,
    /// Attached links by program name; empty between windows.
    links: Vec<(String, Link)>,
    pub hooks: Vec<AttachedHook>,
    ring: Option<RingBuffer<'static>>,
    pending: Rc<RefCell<Vec<PacketSample>>>,
    received: Rc<RefCell<u64>>,
    ncpus: usize,
    /// The stage table, mapped (read at intervals while hooks ran since the last read).
    queue_stats: super::MappedArray,
    /// The in-flight packet states, mapped (swept when a window ends).
    states: super::MappedArray,
    /// The generation of the window under way (or the last one).
    generation: u32,
    /// Per direction and queue (as the stage table): lives still in the state table when their
    /// window's hooks went off, so their end was never seen.
    cut: Vec<u64>,
    /// The stage table's sums as last read, while they still hold: no hook has run since (most
    /// intervals fall between windows, and the table is hundreds of KiB).
    stages: Option<Vec<QueueCounters>>,
    /// The event counters as last read while every hook was off, held likewise: an interval
    /// between windows reads neither table.
    events: Option<EventCounters>,
    /// Which hand-up hooks the windows attach.
    handups: super::handups::HandupChoice,
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
        ro.rx_queue_offset = cfg.rx_queue_offset;
        ro.join_buffers = u8::from(cfg.join_buffers);
        ro.copy_standin = u8::from(cfg.join_buffers && cfg.copy_standin);
        if !cfg.join_sample.is_power_of_two() || cfg.join_sample > MAX_JOIN_SAMPLE {
            bail!(
                "join page sampling must be a power of two from 1 to {MAX_JOIN_SAMPLE}, not {}",
                cfg.join_sample
            );
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
    // One CPU context, and one block of queue stats, per possible CPU, by CPU number.
    super::size_by_cpu(&mut open.maps.cpu_ctx, 1, "the pktlife CPU contexts")?;
    super::size_by_cpu(
        &mut open.maps.queue_stats,
        2 * MAX_QUEUES,
        "the pktlife queue table",
    )?;
    for mut prog in open.open_object_mut().progs_mut() {
        let section = prog.section().to_string_lossy().into_owned();
        // The NAPI hook only ends the CPU context of the join.
        let keep = PKTLIFE_HOOKS
            .iter()
            .zip(flavors)
            .any(|(h, f)| section == format!("{}{}", f.section_prefix(), h.tracepoint))
            && (cfg.join_buffers || !section.ends_with("/napi_poll"));
        prog.set_autoload(keep);
    }
    open.load()
        .map_err(|e| anyhow::anyhow!(explain_bpf_error(&e, "loading the pktlife BPF programs")))
}

impl PktlifeProbe {
    /// Load along the fallback chain (or with the flavour the user asked for), attach every
    /// hook that exists to check that the required ones do, and leave them attached when
    /// `stay` (full detail), else detach them until the first window.
    pub fn load(
        cfg: &ProbeConfig,
        features: &Features,
        choice: HookChoice,
        stay: bool,
    ) -> Result<PktlifeProbe> {
        if let Some(why) = features.fatal() {
            bail!(why);
        }
        let preferred: Vec<Flavor> = PKTLIFE_HOOKS
            .iter()
            .map(|h| features.preferred(h))
            .collect();
        let forced = match choice {
            HookChoice::Auto => None,
            HookChoice::RawTp => Some(Flavor::RawTp),
            HookChoice::TpBtf => {
                if let Some(h) = PKTLIFE_HOOKS
                    .iter()
                    .zip(&preferred)
                    .find(|(_, f)| **f != Flavor::TpBtf)
                    .map(|(h, _)| h)
                {
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
                        Err(e) if format!("{e:#}") == format!("{first:#}") => {
                            bail!("{e:#} (as tp_btf and as raw_tp)")
                        }
                        Err(e) => bail!("{e:#} (as raw_tp; as tp_btf: {first:#})"),
                    }
                }
                Err(e) => return Err(e),
            },
        };
        let ncpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        let queue_stats =
            super::MappedArray::new(&skel.maps.queue_stats, "the pktlife stage table")?;
        let states = super::MappedArray::new(&skel.maps.skb_states, "the pktlife packet states")?;
        let mut probe = PktlifeProbe {
            queue_stats,
            states,
            generation: 0,
            cut: vec![0; 2 * MAX_QUEUES as usize],
            stages: None,
            events: None,
            handups: Default::default(),
            skel,
            links: Vec::new(),
            hooks: Vec::new(),
            ring: None,
            pending: Rc::new(RefCell::new(Vec::new())),
            received: Rc::new(RefCell::new(0)),
            ncpus,
        };
        probe.hooks = probe.attach_hooks(|_| true);
        for h in PKTLIFE_HOOKS.iter().filter(|h| h.required) {
            if let Some(a) = probe
                .hooks
                .iter()
                .find(|a| a.tracepoint == h.tracepoint && a.flavor.is_none())
            {
                bail!(
                    "required hook {} could not attach: {}",
                    h.tracepoint,
                    a.error.clone().unwrap_or_default()
                );
            }
        }
        if !stay {
            probe.detach(|_| true);
        }
        probe.build_ring()?;
        Ok(probe)
    }

    /// Attach every loaded hook `which` selects (by tracepoint) that is not attached yet.
    fn attach_hooks(&mut self, which: impl Fn(&str) -> bool) -> Vec<AttachedHook> {
        let mut hooks = Vec::new();
        for prog in self.skel.object().progs_mut() {
            if !prog.autoload() {
                continue;
            }
            let name = prog.name().to_string_lossy().into_owned();
            let section = prog.section().to_string_lossy().into_owned();
            let (prefix, tp) = section.split_once('/').unwrap_or(("", section.as_str()));
            if !which(tp) || self.links.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let flavor = if prefix == "tp_btf" {
                Flavor::TpBtf
            } else {
                Flavor::RawTp
            };
            match prog.attach() {
                Ok(link) => {
                    self.links.push((name, link));
                    hooks.push(AttachedHook {
                        tracepoint: tp.to_string(),
                        flavor: Some(flavor),
                        error: None,
                    });
                }
                Err(e) => hooks.push(AttachedHook {
                    tracepoint: tp.to_string(),
                    flavor: None,
                    error: Some(explain_bpf_error(&e, &format!("attaching {section}"))),
                }),
            }
        }
        hooks
    }

    /// Detach the hooks `which` selects (by tracepoint).
    fn detach(&mut self, which: impl Fn(&str) -> bool) {
        let sections: std::collections::HashMap<String, String> = self
            .skel
            .object()
            .progs()
            .map(|p| {
                (
                    p.name().to_string_lossy().into_owned(),
                    p.section().to_string_lossy().into_owned(),
                )
            })
            .collect();
        let (gone, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.links)
                .into_iter()
                .partition(|(name, _)| {
                    which(
                        sections
                            .get(name)
                            .and_then(|s| s.split_once('/'))
                            .map_or("", |(_, tp)| tp),
                    )
                });
        self.links = kept;
        // Last attached, first detached: a tracepoint that loses its first program while
        // others stay on it waits out an RCU grace period (tens of ms) before the call
        // returns, and every hook not yet detached keeps running meanwhile.
        for link in gone.into_iter().rev() {
            drop(link);
        }
    }

    /// A window begins: its number retires every state and CPU context of earlier windows;
    /// then every hook attaches, of the driver hand-up hooks those it uses (see
    /// [`super::handups`]). Hooks that fail now were found at load; they are skipped.
    pub fn open_window(&mut self, generation: u32) -> Result<()> {
        let Some(bss) = self.skel.maps.bss_data.as_deref_mut() else {
            bail!("pktlife BPF object has no writable data section (build problem)");
        };
        // SAFETY: a plain integer in the object's mmapped .bss, read by the programs as
        // volatile; no program runs that reads it while the hooks are detached.
        unsafe { std::ptr::addr_of_mut!(bss.join_generation).write_volatile(generation) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.generation = generation;
        self.stages = None;
        self.events = None;
        self.handups.open_window();
        let choice = &self.handups;
        let which: Vec<String> = PKTLIFE_HOOKS
            .iter()
            .map(|h| h.tracepoint.to_string())
            .filter(|tp| choice.attaches(tp))
            .collect();
        self.attach_hooks(|tp| which.iter().any(|w| w == tp));
        Ok(())
    }

    /// No more lives start (the drain: lives begun in the window can still end).
    pub fn stop_starts(&mut self) {
        self.detach(|tp| START_HOOKS.contains(&tp));
    }

    /// Only the hooks that end a life stay (a drain held on for a reader that lags).
    pub fn keep_ends(&mut self) {
        self.detach(|tp| !END_HOOKS.contains(&tp));
    }

    /// Every hook off; the lives of the window still in flight are counted as cut.
    pub fn close_window(&mut self) {
        self.detach(|_| true);
        match self.handup_counts() {
            Ok(timed) => self.handups.close_window(timed),
            // Unread, the next window attaches every hand-up hook: nothing is missed.
            Err(_) => self.handups = Default::default(),
        }
        let in_flight = self.in_flight();
        for (c, n) in self.cut.iter_mut().zip(in_flight) {
            *c += n;
        }
    }

    /// Lives of the window under way (or the last) still in flight, all queues together: while
    /// this falls in a drain, lives are still ending. A sweep of the table, as `in_flight`.
    pub fn lives_in_flight(&self) -> u64 {
        self.in_flight().iter().sum()
    }

    /// Lives of the current generation in the state table, per direction and queue: begun and
    /// neither freed nor taken over yet. A sweep of the mapped table (1 MiB), once a window and
    /// every step of its drain held on.
    fn in_flight(&self) -> Vec<u64> {
        let mut n = vec![0; 2 * MAX_QUEUES as usize];
        for i in 0..self.states.len() {
            let Some(st) = self.states.get::<pl_skb_state>(i) else {
                break;
            };
            if st.skb != 0 && st.r#gen == self.generation {
                let queue = u32::from(st.queue).min(MAX_QUEUES - 1) as usize;
                n[usize::from(Dir::from_u8(st.dir) == Dir::Tx) * MAX_QUEUES as usize + queue] += 1;
            }
        }
        n
    }

    /// Links attached now (0 between windows).
    pub fn attached_links(&self) -> usize {
        self.links.len()
    }

    fn build_ring(&mut self) -> Result<()> {
        let pending = Rc::clone(&self.pending);
        let received = Rc::clone(&self.received);
        let mut builder = RingBufferBuilder::new();
        // SAFETY of the 'static: the map lives in self.skel, which outlives the
        // ring (the ring is dropped first in Drop order: it is declared later
        // but we take it explicitly in drop()).
        let map: &'static libbpf_rs::MapMut<'static> =
            unsafe { &*(&self.skel.maps.events as *const _) };
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

    /// Cumulative per-queue detail (lives begun, copies, frees, lives whose end went unseen,
    /// stages), summed over CPUs; only queues with any. The counts tier 0 keeps stay zero.
    /// `last`: the run ends, and the lives still in flight (if the hooks are on) end unseen.
    pub fn read_stages(&mut self, last: bool) -> Result<Vec<QueueCounters>> {
        let mut out = match self.stages.take() {
            Some(kept) => kept,
            None => self.sum_stages()?,
        };
        // With every hook off, the sums hold until the next window.
        if self.links.is_empty() {
            self.stages = Some(out.clone());
        }
        let in_flight = if last && !self.links.is_empty() {
            self.in_flight()
        } else {
            vec![0; 2 * MAX_QUEUES as usize]
        };
        for (idx, (cut, flying)) in self.cut.iter().zip(in_flight).enumerate() {
            if cut + flying == 0 {
                continue;
            }
            let (dir, queue) = (
                if idx < MAX_QUEUES as usize {
                    Dir::Rx
                } else {
                    Dir::Tx
                },
                idx as u32 % MAX_QUEUES,
            );
            match out.iter_mut().find(|q| q.dir == dir && q.queue == queue) {
                Some(q) => q.unended += cut + flying,
                None => out.push(QueueCounters {
                    unended: cut + flying,
                    ..QueueCounters::new(dir, queue)
                }),
            }
        }
        Ok(out)
    }

    /// The stage table summed over CPUs, per direction and queue; only queues with any.
    fn sum_stages(&self) -> Result<Vec<QueueCounters>> {
        // One entry per CPU, direction and queue (the CPU's block first), read in place.
        let per_cpu_block = 2 * MAX_QUEUES as usize;
        let table = &self.queue_stats;
        let mut out = Vec::new();
        for idx in 0..per_cpu_block {
            let dir = if idx < MAX_QUEUES as usize {
                Dir::Rx
            } else {
                Dir::Tx
            };
            let mut q = QueueCounters::new(dir, idx as u32 % MAX_QUEUES);
            for entry in (idx..table.len()).step_by(per_cpu_block).take(self.ncpus) {
                let s: pl_queue_stats = table
                    .get(entry)
                    .context("queue_stats entries are smaller than their type")?;
                q.handups += s.handups;
                q.copies += s.copies;
                q.frees += s.frees;
                q.unended += s.unended;
                for (h, v) in q.size_hist.iter_mut().zip(s.size_hist.iter()) {
                    *h += u64::from(*v);
                }
                for (st, c) in s.stage.iter().enumerate() {
                    q.stage_count[st] += c.count;
                    q.stage_sum_ns[st] += c.sum_ns;
                    q.stage_max_ns[st] = q.stage_max_ns[st].max(c.max_ns);
                    for (h, v) in q.stage_hist[st].iter_mut().zip(c.hist.iter()) {
                        *h += v;
                    }
                }
            }
            if !q.is_zero() {
                out.push(q);
            }
        }
        Ok(out)
    }

    fn percpu_sum(map: &libbpf_rs::MapMut<'_>, key: pl_counter) -> Result<u64> {
        let vals = map
            .lookup_percpu(&key.0.to_ne_bytes(), MapFlags::ANY)?
            .unwrap_or_default();
        Ok(vals
            .iter()
            .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
            .map(u64::from_ne_bytes)
            .sum())
    }

    /// Each hand-up hook's timed frames of the device so far (by handups::HANDUP_TPS).
    fn handup_counts(&self) -> Result<[u64; 5]> {
        let m = &self.skel.maps.counters;
        let mut out = [0; 5];
        for (o, c) in out.iter_mut().zip([
            pl_counter::PLC_HANDUP_GRO,
            pl_counter::PLC_HANDUP_FRAGS,
            pl_counter::PLC_HANDUP_NRS,
            pl_counter::PLC_HANDUP_LIST,
            pl_counter::PLC_HANDUP_NETIF_RX,
        ]) {
            *o = Self::percpu_sum(m, c)?;
        }
        Ok(out)
    }

    /// Records taken from the ring buffer so far.
    pub fn received(&self) -> u64 {
        *self.received.borrow()
    }

    /// Runs of the detail hooks so far, all of them (what the windows' run budget holds).
    pub fn runs(&self) -> Result<u64> {
        Self::percpu_sum(&self.skel.maps.counters, pl_counter::PLC_RUNS)
    }

    pub fn read_events(&mut self) -> Result<EventCounters> {
        let mut e = match self.events.take() {
            Some(kept) => kept,
            None => {
                let m = &self.skel.maps.counters;
                EventCounters {
                    sampled: Self::percpu_sum(m, pl_counter::PLC_SAMPLED)?,
                    lost: Self::percpu_sum(m, pl_counter::PLC_LOST)?,
                    state_evicted: Self::percpu_sum(m, pl_counter::PLC_STATE_EVICT)?,
                    queue_clamped: Self::percpu_sum(m, pl_counter::PLC_QUEUE_CLAMPED)?,
                    state_stale: Self::percpu_sum(m, pl_counter::PLC_STATE_STALE)?,
                    received: 0,
                }
            }
        };
        // With every hook off, the counts hold until the next window.
        if self.links.is_empty() {
            self.events = Some(e);
        }
        e.received = *self.received.borrow();
        Ok(e)
    }

    /// What the probes wrote to the buffer-page map, cumulative.
    pub fn read_buf_map(&self) -> Result<BufMapCounters> {
        let c = &self.skel.maps.counters;
        let mut b = BufMapCounters {
            linear_pages: Self::percpu_sum(c, pl_counter::PLC_BUF_LINEAR)?,
            frag_pages: Self::percpu_sum(c, pl_counter::PLC_BUF_FRAG)?,
            frags_over_cap: Self::percpu_sum(c, pl_counter::PLC_FRAG_OVER_CAP)?,
            frags_no_page: Self::percpu_sum(c, pl_counter::PLC_FRAG_NO_PAGE)?,
            frags_no_layout: Self::percpu_sum(c, pl_counter::PLC_FRAG_NO_LAYOUT)?,
            slots_replaced: Self::percpu_sum(c, pl_counter::PLC_BUF_REPLACED)?,
            pages_over_cap: Self::percpu_sum(c, pl_counter::PLC_PAGES_OVER_CAP)?,
            ..Default::default()
        };
        // Ways are never emptied, so the fills of empty ways are the ways in use: a
        // counter read instead of sweeping the whole table through the cache.
        if b.linear_pages + b.frag_pages > 0 {
            b.entries = Some(Self::percpu_sum(c, pl_counter::PLC_BUF_FILLED)?);
        }
        Ok(b)
    }

    /// Pages the packet-buffer page map can hold (sets × ways: never more entries).
    pub fn buf_pages_capacity(&self) -> u32 {
        self.skel.maps.buf_pages.max_entries() * BUF_WAYS
    }

    /// The maps the L3-miss program shares (its buffer pages and CPU contexts are these).
    pub fn shared_maps(&self) -> (&libbpf_rs::MapMut<'static>, &libbpf_rs::MapMut<'static>) {
        (&self.skel.maps.buf_pages, &self.skel.maps.cpu_ctx)
    }

    /// BPF program ids of this probe (for leak checks and bpf_stats).
    pub fn prog_ids(&self) -> Vec<u32> {
        self.skel
            .object()
            .progs()
            .filter(|p| p.autoload())
            .filter_map(|p| super::loaded_prog_id(&p))
            .collect()
    }

    /// Each hook program that attaches (in windows, or for the whole run): id, name and
    /// tracepoint, so bpf_stats readers (the bench) can line a program up with others on the
    /// same tracepoint.
    pub fn hook_progs(&self) -> Vec<super::AttachedProg> {
        self.skel
            .object()
            .progs()
            .filter(|p| p.autoload())
            .filter_map(|p| super::AttachedProg::of(&p))
            .filter(|a| {
                self.hooks
                    .iter()
                    .any(|h| h.tracepoint == a.tracepoint && h.flavor == a.flavor)
            })
            .collect()
    }
}

impl Drop for PktlifeProbe {
    fn drop(&mut self) {
        // The ring refers to the skeleton's maps: drop it first.
        self.ring.take();
        self.links.clear();
    }
}

fn flow_key(k: &pl_flow_key) -> Option<FlowKey> {
    super::flow_key_of(
        k.family, k.proto, k.dir, &k.saddr, k.sport, &k.daddr, k.dport,
    )
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
        flow: if e.flow.family != 0 {
            flow_key(&e.flow)
        } else {
            None
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both hook flavours must pass the verifier with every option that adds
    /// code (records, stage state, the buffer map with frags, the copy
    /// stand-in, a layout read from kernel variables): the raw_tp fallback is
    /// otherwise only loaded on kernels that refuse tp_btf. Loads only. Needs root and
    /// kernel BTF: ignored (reported as such) by a plain `cargo test`; `make test` runs it.
    #[test]
    #[ignore = "loads BPF: needs root and kernel BTF (make test runs it)"]
    fn every_flavour_loads_with_every_option() {
        assert!(crate::sys::is_root(), "loading BPF needs root");
        assert!(
            std::path::Path::new(super::super::features::VMLINUX_BTF).exists(),
            "loading BPF needs kernel BTF"
        );
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
            for (join, standin, join_sample) in [
                (false, false, 1),
                (true, false, 1),
                (true, true, 1),
                (true, false, 4),
            ] {
                let cfg = ProbeConfig {
                    ifindex: 1,
                    netns_inode: 0,
                    sample_every: 64,
                    stage_every: 1,
                    rx_queue_offset: 1,
                    join_buffers: join,
                    mem_layout: Some(layout.clone()),
                    copy_standin: standin,
                    join_sample,
                };
                let flavors = vec![flavor; PKTLIFE_HOOKS.len()];
                if let Err(e) = open_and_load(&cfg, &flavors) {
                    panic!("{} with join_buffers={join} copy_standin={standin} join_sample={join_sample}: {e:#}", flavor.as_str());
                }
            }
        }
    }

    /// The L3-miss program loads on pktlife's shared maps, in every configuration that adds
    /// code (the copy stand-in, page sampling).
    #[test]
    #[ignore = "loads BPF: needs root and kernel BTF (make test runs it)"]
    fn the_miss_program_loads_on_the_shared_maps() {
        assert!(crate::sys::is_root(), "loading BPF needs root");
        let features = super::super::features::Features::detect();
        for (standin, join_sample) in [(false, 1), (true, 1), (false, 8)] {
            let cfg = ProbeConfig {
                ifindex: 1,
                netns_inode: 0,
                sample_every: 0,
                stage_every: 4,
                rx_queue_offset: 1,
                join_buffers: true,
                mem_layout: None,
                copy_standin: standin,
                join_sample,
            };
            let p = PktlifeProbe::load(&cfg, &features, HookChoice::Auto, false)
                .expect("pktlife loads");
            assert_eq!(p.attached_links(), 0, "windowed probes wait detached");
            let l3 = super::super::l3miss::L3missConfig {
                join_sample,
                copy_standin: standin,
                flow_slots: Some(64),
            };
            if let Err(e) = super::super::l3miss::L3missProbe::load(&l3, &p) {
                panic!("l3miss with copy_standin={standin} join_sample={join_sample}: {e:#}");
            }
        }
    }
}
