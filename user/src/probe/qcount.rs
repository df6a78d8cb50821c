//! Tier 0 of the recorder (bpf/qcount.bpf.c): exact per-queue packet, byte, NAPI and drop
//! counts at one program per packet per direction, and flows from sampled skbs with the sums
//! their estimates and error bounds need. Attached as links owned by this process.
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, Link, MapCore, MapFlags, OpenObject};
use serde::{Deserialize, Serialize};

use super::explain_bpf_error;
use super::features::{Features, Flavor, HookChoice};
use super::flowdrain::{quiescent, FlowTotals};
use super::hooks;
use super::qcount_skel::types::{
    pl_flow_key, qc_counter, qc_flow_slot, qc_flow_stats, qc_napi_slot, qc_queue_stats,
};
use super::qcount_skel::{QcountSkel, QcountSkelBuilder};
use crate::snapshot::{Dir, FlowKey, QueueCounters, NAPI_BUCKETS};

// SAFETY: generated from qcount.h: plain integer structs without padding invariants.
unsafe impl plain::Plain for qc_queue_stats {}
unsafe impl plain::Plain for qc_flow_stats {}
unsafe impl plain::Plain for pl_flow_key {}
unsafe impl plain::Plain for qc_napi_slot {}
unsafe impl plain::Plain for qc_flow_slot {}

/// Slots of the NAPI-to-queue table (a power of two; a NAPI id's slot is the id modulo it).
const NAPI_SLOTS: u32 = super::qcount_skel::types::qc_napi_slots::QC_NAPI_SLOTS.0;
const _: () = assert!(NAPI_SLOTS.is_power_of_two());

/// Flow cache slots per CPU and direction (see struct qc_flow_slot).
const FLOW_SLOTS: u32 = super::qcount_skel::types::qc_flow_cache_slots::QC_FLOW_SLOTS.0;
const _: () = assert!(FLOW_SLOTS.is_power_of_two());
const _: () = assert!(
    std::mem::offset_of!(qc_flow_slot, seq) == 0,
    "read_flows reads a slot's seq as its first 8 bytes"
);

/// Times a flow read starts over when a slot changed flows while it read (then it takes what
/// it read: at worst one sample's flow counted twice or not yet, until the next read).
const FLOW_READ_TRIES: usize = 4;

/// Entries of each flow table; a table is drained early once half of them may be taken.
pub const FLOW_TABLE_ENTRIES: u32 =
    super::qcount_skel::types::qc_flow_table_entries::QC_FLOW_ENTRIES.0;

/// How long a drain waits for the programs to leave the table flipped away from (a program
/// is in it for a hash update, well under a microsecond; one preempted there is waited for at
/// the next read instead).
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Queues per direction the kernel tables hold (MAX_QUEUES in bpf/common.h).
pub const MAX_QUEUES: u32 = super::qcount_skel::types::ddio_limits::DDIO_MAX_QUEUES.0;
const _: () =
    assert!(super::qcount_skel::types::ddio_limits::DDIO_NAPI_BUCKETS.0 as usize == NAPI_BUCKETS);
const _: () = assert!(
    std::mem::size_of::<qc_queue_stats>() == 24 * 8 && NAPI_BUCKETS == 12,
    "qc_queue_stats and QueueCounters disagree"
);

/// Flows sample an skb of d bytes with probability min(1, d / this) by default: a bulk flow's
/// GRO skbs (tens of KiB) are almost all sampled, so its estimate is near exact, while a flood
/// of small packets costs one sample per 64 KiB (about one in 600 minimum-size frames).
pub const DEFAULT_FLOW_BYTES: u32 = 65536;

/// Where the RX counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RxSource {
    /// A tcx ingress program on the device: its own frames only, one run per skb after GRO.
    Tcx,
    /// The driver hand-up tracepoints: every device's frames, one run per frame before GRO.
    Handup,
    /// The driver's own per-queue counters (netdev qstats): no per-packet program.
    Qstats,
    /// The driver's named per-queue statistics (`ethtool -S`): no per-packet program.
    Ethtool,
    /// The interface's own totals, the device having one RX queue: exact, no per-packet
    /// program outside the detail windows.
    Link,
    /// The interface's own totals split across queues by what the RX program counted in the
    /// detail windows: exact in total, estimated per queue.
    LinkSplit,
}

impl RxSource {
    pub fn as_str(self) -> &'static str {
        match self {
            RxSource::Tcx => "tcx",
            RxSource::Handup => "handup",
            RxSource::Qstats => "qstats",
            RxSource::Ethtool => "ethtool",
            RxSource::Link => "link",
            RxSource::LinkSplit => "link_split",
        }
    }
}

/// Which RX source to use: the cheapest that attaches (quietly), or one asked for (loudly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxChoice {
    #[default]
    Auto,
    Tcx,
    Handup,
}

#[derive(Debug, Clone)]
pub struct QcountConfig {
    pub ifindex: u32,
    pub netns_inode: u32,
    /// The namespace the device lives in (a file under /run/netns), for attaching tcx there.
    pub netns_path: Option<std::path::PathBuf>,
    pub rx_queue_offset: u8,
    /// Link-layer header bytes per frame: 14 on Ethernet, 0 on L3 devices.
    pub link_hdr_len: u32,
    /// Flows sample an skb of d bytes with probability min(1, d / flow_bytes) (1: every skb,
    /// exact; 0: no flows), [RX, TX].
    pub flow_bytes: [u32; 2],
    pub rx: RxChoice,
    /// Count RX / TX with a program per packet (false: the driver's own counters cover that
    /// direction and no flow is sampled there, so no per-packet program is needed).
    pub count_rx: bool,
    pub count_tx: bool,
    /// [RX, TX]: the direction's program runs only between `attach_window_hooks` and `detach_window_hooks` (the
    /// driver counts that direction; the program is there for flows, sampled in windows).
    pub window_only: [bool; 2],
    /// The NAPI poll counter runs in windows only too (its polls are then estimated from
    /// them: a program per poll is, on a host with retpolines, most of tier 0's cost).
    pub napi_window_only: bool,
    /// The drop counter (kfree_skb, which fires for every device's drops) runs in windows
    /// only too: a host dropping another device's packets by the million pays nothing for it.
    pub drop_window_only: bool,
}

/// A tracepoint or tc hook of tier 0 and how it attached.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tier0Hook {
    pub hook: String,
    pub attach: String,
    pub error: Option<String>,
}

/// A flow's estimates from its sampled skbs (all CPUs), cumulative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledFlow {
    pub key: FlowKey,
    pub queue: u32,
    pub samples: u64,
    pub packets: u64,
    pub bytes: u64,
    pub payload_bytes: u64,
    /// The estimated variance of `bytes`.
    pub bytes_var: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// A loaded program, by pointer, to attach from another thread (the object outlives it).
struct ProgPtr(*const libbpf_rs::libbpf_sys::bpf_program);
// SAFETY: libbpf's attach reads the program's fd and type only; the object is alive and not
// modified while the attaching thread runs (it is joined before anything else happens).
unsafe impl Send for ProgPtr {}

/// A tcx link made through libbpf directly (libbpf-rs has no tcx attach yet): at the head
/// of the device's chain when `first`, else at its end.
fn attach_tcx(prog: ProgPtr, ifindex: u32, first: bool) -> Result<Link> {
    let opts = libbpf_rs::libbpf_sys::bpf_tcx_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_tcx_opts>() as _,
        flags: if first {
            libbpf_rs::libbpf_sys::BPF_F_BEFORE
        } else {
            0
        },
        ..Default::default()
    };
    // SAFETY: prog is a loaded program of a live object; opts is a valid bpf_tcx_opts.
    let link =
        unsafe { libbpf_rs::libbpf_sys::bpf_program__attach_tcx(prog.0, ifindex as i32, &opts) };
    // libbpf returns NULL and sets errno on failure.
    match NonNull::new(link) {
        // SAFETY: a link libbpf just created, owned by nothing else.
        Some(p) => Ok(unsafe { Link::from_ptr(p) }),
        None => Err(anyhow::anyhow!(
            "tcx ingress on ifindex {ifindex}: {}",
            std::io::Error::last_os_error()
                .to_string()
                .split(" (os error")
                .next()
                .unwrap_or_default()
        )),
    }
}

/// A tcx link for `prog` on the device `ifindex` of the namespace `ns` (None: this process's),
/// made on a thread inside it (see `attach_tcx` for `first`).
pub(crate) fn attach_tcx_in(
    prog: &libbpf_rs::Program<'_>,
    ifindex: u32,
    ns: Option<&std::path::Path>,
    first: bool,
) -> Result<Link> {
    // The link outlives the thread: it is a kernel object held by its fd.
    struct SendLink(Link);
    // SAFETY: a bpf_link is an fd plus libbpf bookkeeping, not tied to a thread.
    unsafe impl Send for SendLink {}
    let ptr = ProgPtr(prog.as_libbpf_object().as_ptr());
    in_netns(ns, move || attach_tcx(ptr, ifindex, first).map(SendLink)).map(|l| l.0)
}

/// Run `f` on a thread inside the network namespace `ns` (this process's stays as it is): a
/// tcx link names its device by an index that only means something in its namespace.
pub(crate) fn in_netns<T: Send>(
    ns: Option<&std::path::Path>,
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    let file = match ns {
        Some(p) => Some(
            std::fs::File::open(p)
                .with_context(|| format!("opening network namespace {}", p.display()))?,
        ),
        None => None,
    };
    let fd = file.as_ref().map(|f| f.as_raw_fd());
    std::thread::scope(|s| {
        s.spawn(move || {
            if let Some(fd) = fd {
                // SAFETY: fd is an open nsfs file; setns affects this thread only.
                if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                    bail!(
                        "entering the network namespace: {}",
                        std::io::Error::last_os_error()
                    );
                }
            }
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("tcx attach thread panicked"))?
    })
}

/// Open and load the object: the tracepoint programs in the flavour chosen, the hand-up
/// programs unless tcx alone is asked for, and the tcx program when `with_tcx`.
fn load(
    cfg: &QcountConfig,
    features: &Features,
    choice: HookChoice,
    with_tcx: bool,
) -> Result<QcountSkel<'static>> {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = QcountSkelBuilder::default()
        .open(storage)
        .map_err(|e| anyhow::anyhow!(explain_bpf_error(&e, "opening the qcount BPF object")))?;
    let Some(ro) = open.maps.rodata_data.as_deref_mut() else {
        bail!("qcount BPF object has no read-only config section (build problem)");
    };
    ro.filter_ifindex = cfg.ifindex;
    ro.filter_netns = cfg.netns_inode;
    ro.rx_queue_offset = cfg.rx_queue_offset;
    ro.link_hdr_len = cfg.link_hdr_len;
    ro.flow_bytes = cfg.flow_bytes[0];
    ro.flow_bytes_tx = cfg.flow_bytes[1];
    ro.draw_seed = fastrand::u64(..);
    super::size_by_cpu(&mut open.maps.qc_cpu, 1, "the qcount per-CPU scratch")?;
    super::size_by_cpu(
        &mut open.maps.qc_queues,
        2 * MAX_QUEUES,
        "the qcount queue table",
    )?;
    super::size_by_cpu(
        &mut open.maps.qc_flow_cache,
        2 * FLOW_SLOTS,
        "the qcount flow cache",
    )?;
    for mut prog in open.open_object_mut().progs_mut() {
        let section = prog.section().to_string_lossy().into_owned();
        let keep = match section.split_once('/') {
            Some(("tcx", _)) => with_tcx && cfg.count_rx,
            Some((prefix, tp)) => {
                let wanted =
                    (RX_HANDUP_TPS.contains(&tp) && cfg.rx != RxChoice::Tcx && cfg.count_rx)
                        || (tp == hooks::NET_DEV_START_XMIT && cfg.count_tx)
                        || ALWAYS_TPS.contains(&tp);
                wanted && flavor_of(features, choice, tp).section_prefix() == format!("{prefix}/")
            }
            None => false,
        };
        prog.set_autoload(keep);
    }
    open.load()
        .map_err(|e| anyhow::anyhow!(explain_bpf_error(&e, "loading the qcount BPF programs")))
}

/// What a tier 0 program counts, for the ones that can run in windows only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Count(Dir),
    Napi,
    Drop,
}

/// The role of a tier 0 program's section.
fn role_of(section: &str) -> Option<Role> {
    let tp = section.split_once('/').map_or(section, |(_, t)| t);
    if section == "tcx/ingress" || RX_HANDUP_TPS.contains(&tp) {
        Some(Role::Count(Dir::Rx))
    } else if tp == hooks::NET_DEV_START_XMIT {
        Some(Role::Count(Dir::Tx))
    } else if tp == hooks::NAPI_POLL {
        Some(Role::Napi)
    } else if tp == hooks::KFREE_SKB {
        Some(Role::Drop)
    } else {
        None
    }
}

/// The attached `links` split into those that stay (the programs that run all the time) and
/// the window-only roles' hooks, let go now and made again in each window.
fn split_window_hooks(
    links: Vec<(String, Link)>,
    cfg: &QcountConfig,
) -> (Vec<(String, Link)>, Vec<WindowHook>) {
    let windowed = |role: Option<Role>| match role {
        Some(Role::Count(d)) => cfg.window_only[usize::from(d == Dir::Tx)],
        Some(Role::Napi) => cfg.napi_window_only,
        Some(Role::Drop) => cfg.drop_window_only,
        None => false,
    };
    let mut kept = Vec::new();
    let mut window_hooks = Vec::new();
    for (section, link) in links {
        let role = role_of(&section);
        match role {
            Some(role) if windowed(Some(role)) => window_hooks.push(WindowHook {
                role,
                section,
                link: None,
            }),
            _ => kept.push((section, link)),
        }
    }
    // The tcx link first: its attach and detach each wait out an RCU grace period (tens of
    // ms), so it comes on before the others and goes after them.
    window_hooks.sort_by_key(|h| h.section != "tcx/ingress");
    (kept, window_hooks)
}

/// The tracepoints tier 0 hooks, by role.
const RX_HANDUP_TPS: &[&str] = &super::handups::HANDUP_TPS;
const ALWAYS_TPS: &[&str] = &hooks::QCOUNT_ALWAYS;

/// A counting program that runs in windows only, and its link while it runs.
struct WindowHook {
    role: Role,
    /// Its section ("tcx/ingress", "tp_btf/net_dev_start_xmit", ...).
    section: String,
    link: Option<Link>,
}

/// The device's drops by kernel reason, cumulative, as (reason, count).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DropCounts {
    pub every: Vec<(u32, u64)>,
    /// Of them, RX packets dropped before the stack took them in (its skb_iif unset).
    pub before_stack: Vec<(u32, u64)>,
}

pub struct QcountProbe {
    skel: QcountSkel<'static>,
    links: Vec<Link>,
    /// The sections of `links`, in order: the programs that run all the time.
    always: Vec<String>,
    window_hooks: Vec<WindowHook>,
    /// [RX, TX]: a program counts the direction (always or in windows).
    counting: [bool; 2],
    ifindex: u32,
    netns_path: Option<std::path::PathBuf>,
    pub hooks: Vec<Tier0Hook>,
    pub rx_source: RxSource,
    ncpus: usize,
    /// The queue table, mapped (read every interval).
    queues: super::MappedArray,
    /// The CPUs' flow caches, mapped (read with the flow table).
    flow_cache: super::MappedArray,
    /// The flows drained from the flow tables, and the drain under way.
    flows: FlowDrain,
    /// Since when the window-only programs have been attached (None: they are not), and
    /// their attached time not yet taken: what they counted is over that time.
    window_since: Option<std::time::Instant>,
    window_ns: u64,
    /// When the window-only programs began to be attached, and how long they ran the last
    /// time (their attach waits out a grace period with them already running).
    attaching_since: Option<std::time::Instant>,
    last_on: std::time::Duration,
    /// The window-only links last let go, being detached off the recorder's loop: a tcx
    /// link, or a tracepoint's last program, waits out an RCU grace period (tens of ms) as it
    /// goes, and the loop would hold the drain's hooks on meanwhile. Joined before the
    /// programs attach again (a tcx program attaches to a device once) and when the probe goes.
    detaching: Option<std::thread::JoinHandle<()>>,
}

impl Drop for QcountProbe {
    fn drop(&mut self) {
        self.join_detaching();
    }
}

/// Userspace's side of the two flow tables (see probe::flowdrain).
#[derive(Default)]
struct FlowDrain {
    totals: FlowTotals,
    /// The table flipped away from and not drained yet, and the slots' seqs just after the
    /// flip (a drain waits for the odd ones to move on).
    pending: Option<(usize, Vec<u64>)>,
    /// QC_FLOW_INSERTS at the last flip.
    inserts_at_flip: u64,
    /// The queues' overflow buckets as of the last flow read.
    overflow: Vec<FlowOverflow>,
}

/// A queue's flow overflow bucket, cumulative: sampled sums no flow table entry could take
/// (estimated as a flow's are), and the sampled skbs that were no TCP/UDP flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowOverflow {
    pub dir: Dir,
    pub queue: u32,
    pub packets: u64,
    pub bytes: u64,
    pub unparsed: u64,
}

fn flavor_of(features: &Features, choice: HookChoice, tp: &str) -> Flavor {
    match choice {
        HookChoice::RawTp => Flavor::RawTp,
        HookChoice::TpBtf => Flavor::TpBtf,
        HookChoice::Auto => {
            if features.vmlinux_btf
                && features.tracing_prog
                && features.btf_tracepoints.iter().any(|t| t == tp)
            {
                Flavor::TpBtf
            } else {
                Flavor::RawTp
            }
        }
    }
}

impl QcountProbe {
    pub fn attach(
        cfg: &QcountConfig,
        features: &Features,
        choice: HookChoice,
    ) -> Result<QcountProbe> {
        // A tcx program is a network program: without CAP_NET_ADMIN the kernel refuses to load
        // it. Auto then counts at the hand-up tracepoints instead; asked for, tcx fails loudly.
        let want_tcx = cfg.rx != RxChoice::Handup && cfg.count_rx;
        let (skel, tcx_loaded, mut hooks) = match load(cfg, features, choice, want_tcx) {
            Ok(s) => (s, want_tcx, Vec::new()),
            Err(e) if cfg.rx == RxChoice::Auto => {
                let why = format!("{e:#}");
                let skel = load(cfg, features, choice, false)
                    .map_err(|e2| anyhow::anyhow!("{e2:#} (with tcx: {why})"))?;
                (
                    skel,
                    false,
                    vec![Tier0Hook {
                        hook: "tcx/ingress".into(),
                        attach: "none".into(),
                        error: Some(why),
                    }],
                )
            }
            Err(e) => return Err(e),
        };
        let ncpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        let mut links = Vec::new();

        // RX: tcx when it attaches (or is asked for), else the hand-up tracepoints.
        let mut rx_source = RxSource::Handup;
        if tcx_loaded {
            let prog = skel
                .object()
                .progs_mut()
                .find(|p| p.section() == "tcx/ingress");
            let attached = match prog {
                // First in the device's chain: it sees every frame the stack takes, whatever
                // programs attached before it decide, and it only ever continues the chain.
                Some(p) => attach_tcx_in(&p, cfg.ifindex, cfg.netns_path.as_deref(), true),
                None => Err(anyhow::anyhow!(
                    "the qcount object has no tcx program (build problem)"
                )),
            };
            match attached {
                Ok(link) => {
                    links.push(("tcx/ingress".to_string(), link));
                    hooks.push(Tier0Hook {
                        hook: "tcx/ingress".into(),
                        attach: "tcx".into(),
                        error: None,
                    });
                    rx_source = RxSource::Tcx;
                }
                Err(e) if cfg.rx == RxChoice::Tcx => return Err(e.context("--rx-counts tcx")),
                Err(e) => hooks.push(Tier0Hook {
                    hook: "tcx/ingress".into(),
                    attach: "none".into(),
                    error: Some(format!("{e:#}")),
                }),
            }
        }
        for prog in skel.object().progs_mut() {
            if !prog.autoload() || prog.section() == "tcx/ingress" {
                continue;
            }
            let section = prog.section().to_string_lossy().into_owned();
            let (prefix, tp) = section.split_once('/').unwrap_or(("", section.as_str()));
            if rx_source == RxSource::Tcx && RX_HANDUP_TPS.contains(&tp) {
                continue;
            }
            match prog.attach() {
                Ok(link) => {
                    links.push((section.clone(), link));
                    hooks.push(Tier0Hook {
                        hook: tp.to_string(),
                        attach: prefix.to_string(),
                        error: None,
                    });
                }
                Err(e) => {
                    hooks.push(Tier0Hook {
                        hook: tp.to_string(),
                        attach: "none".into(),
                        error: Some(explain_bpf_error(&e, &format!("attaching {section}"))),
                    });
                }
            }
        }
        // Which links are a window-only role's: let go now, made again in each window.
        let (links, window_hooks) = split_window_hooks(links, cfg);
        let always = links.iter().map(|(s, _)| s.clone()).collect();
        let links = links.into_iter().map(|(_, l)| l).collect();
        let attached = |tp: &str| hooks.iter().any(|h| h.hook == tp && h.error.is_none());
        if cfg.count_tx && !attached(hooks::NET_DEV_START_XMIT) {
            let why = hooks
                .iter()
                .find(|h| h.hook == hooks::NET_DEV_START_XMIT)
                .and_then(|h| h.error.clone())
                .unwrap_or_default();
            bail!("the TX counting hook net_dev_start_xmit could not attach: {why}");
        }
        if !cfg.count_rx {
            rx_source = RxSource::Qstats;
        } else if rx_source == RxSource::Handup && !RX_HANDUP_TPS.iter().any(|tp| attached(tp)) {
            bail!("no RX counting hook attached (neither tcx nor a driver hand-up tracepoint)");
        }
        let queues = super::MappedArray::new(&skel.maps.qc_queues, "the queue table")?;
        let flow_cache = super::MappedArray::new(&skel.maps.qc_flow_cache, "the flow cache")?;
        Ok(QcountProbe {
            queues,
            flow_cache,
            skel,
            links,
            always,
            window_hooks,
            counting: [cfg.count_rx, cfg.count_tx],
            ifindex: cfg.ifindex,
            netns_path: cfg.netns_path.clone(),
            hooks,
            rx_source,
            ncpus,
            flows: FlowDrain::default(),
            window_since: None,
            window_ns: 0,
            attaching_since: None,
            last_on: std::time::Duration::ZERO,
            detaching: None,
        })
    }

    /// Whether a direction's program runs in windows only.
    pub fn window_only(&self, dir: Dir) -> bool {
        self.window_hooks.iter().any(|h| h.role == Role::Count(dir))
    }

    /// Whether any program runs in windows only.
    pub fn has_window_hooks(&self) -> bool {
        !self.window_hooks.is_empty()
    }

    /// Whether NAPI polls are counted in windows only.
    pub fn napi_window_only(&self) -> bool {
        self.window_hooks.iter().any(|h| h.role == Role::Napi)
    }

    /// The time the window-only programs were attached since the last call.
    pub fn take_window_ns(&mut self) -> u64 {
        if let Some(t) = self.window_since.as_mut() {
            self.window_ns += t.elapsed().as_nanos() as u64;
            *t = std::time::Instant::now();
        }
        std::mem::take(&mut self.window_ns)
    }

    /// Whether drops are counted in windows only.
    pub fn drop_window_only(&self) -> bool {
        self.window_hooks.iter().any(|h| h.role == Role::Drop)
    }

    /// Attach the window-only programs. A failure to attach is the caller's to report: the
    /// window then has no flows from that direction.
    pub fn attach_window_hooks(&mut self) -> Result<()> {
        let mut err = None;
        self.join_detaching();
        if self.attaching_since.is_none() {
            self.attaching_since = Some(std::time::Instant::now());
        }
        for i in 0..self.window_hooks.len() {
            if self.window_hooks[i].link.is_none() {
                match self.attach_section(&self.window_hooks[i].section.clone()) {
                    Ok(l) => self.window_hooks[i].link = Some(l),
                    Err(e) => err = Some(e),
                }
            }
        }
        if self.window_since.is_none() && self.window_hooks.iter().any(|h| h.link.is_some()) {
            self.window_since = Some(std::time::Instant::now());
        }
        err.map_or(Ok(()), Err)
    }

    /// Let go the window-only programs, off the caller's thread (see `detaching`).
    pub fn detach_window_hooks(&mut self) {
        if let Some(t) = self.window_since.take() {
            self.window_ns += t.elapsed().as_nanos() as u64;
        }
        if let Some(t) = self.attaching_since.take() {
            self.last_on = t.elapsed();
        }
        // Last attached, first detached (see PktlifeProbe::detach).
        let links: Vec<Link> = self
            .window_hooks
            .iter_mut()
            .rev()
            .filter_map(|h| h.link.take())
            .collect();
        self.join_detaching();
        if !links.is_empty() {
            let spawned = std::thread::Builder::new()
                .name("tier0-detach".into())
                .spawn(move || drop(links));
            // Without a thread the links went with the error, here.
            self.detaching = spawned.ok();
        }
    }

    /// Whether the window programs let go last are all detached (none still runs).
    pub fn window_hooks_detached(&self) -> bool {
        self.detaching.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Wait for the links let go last to be detached.
    fn join_detaching(&mut self) {
        if let Some(t) = self.detaching.take() {
            // A detach that panicked has dropped its links all the same.
            let _ = t.join();
        }
    }

    /// Whether a program counts a direction, always or in windows.
    pub fn counts(&self, dir: Dir) -> bool {
        self.counting[usize::from(dir == Dir::Tx)]
    }

    /// A direction's program from now on for good (already so unless it ran in windows only):
    /// the driver's counters turned out not to count that direction.
    pub fn count_always(&mut self, dir: Dir) -> Result<()> {
        let mut keep = Vec::new();
        for mut h in std::mem::take(&mut self.window_hooks) {
            if h.role != Role::Count(dir) {
                keep.push(h);
                continue;
            }
            let link = match h.link.take() {
                Some(l) => l,
                None => self.attach_section(&h.section)?,
            };
            self.links.push(link);
            self.always.push(h.section.clone());
        }
        self.window_hooks = keep;
        // Running all the time, it samples flows as loaded.
        self.set_flow_cut(dir, 0)
    }

    /// How long the window-only programs ran the last time they were on, from the start of
    /// their attach to their detach (zero before the first).
    pub fn last_on(&self) -> std::time::Duration {
        self.last_on
    }

    /// Window-only directions sample flows `cut` times their loaded threshold (their programs
    /// on for that part of the duty's window, see `flow_cut` in qcount.bpf.c); the others as
    /// loaded.
    pub fn set_window_flow_cut(&mut self, cut: f64) -> Result<()> {
        let scaled = if cut > 0.0 && cut < 1.0 {
            ((cut * 65536.0).round() as u32).max(1)
        } else {
            0
        };
        for dir in [Dir::Rx, Dir::Tx] {
            let v = if self.window_only(dir) { scaled } else { 0 };
            self.set_flow_cut(dir, v)?;
        }
        Ok(())
    }

    fn set_flow_cut(&mut self, dir: Dir, v: u32) -> Result<()> {
        let b = self.bss_mut()?;
        // SAFETY: a u32 in the mapped .bss; the programs only read it.
        unsafe { std::ptr::write_volatile(&mut b.flow_cut[usize::from(dir == Dir::Tx)], v) };
        Ok(())
    }

    /// The object's mapped .bss, which this process writes and the programs read.
    fn bss_mut(&mut self) -> Result<&mut super::qcount_skel::types::bss> {
        self.skel
            .maps
            .bss_data
            .as_deref_mut()
            .context("the qcount object has no mapped .bss (build problem)")
    }

    fn attach_section(&self, section: &str) -> Result<Link> {
        let prog = self
            .skel
            .object()
            .progs_mut()
            .find(|p| p.section().to_string_lossy() == section)
            .ok_or_else(|| {
                anyhow::anyhow!("the qcount object has no {section} program (build problem)")
            })?;
        if section == "tcx/ingress" {
            attach_tcx_in(&prog, self.ifindex, self.netns_path.as_deref(), true)
        } else {
            prog.attach().map_err(|e| {
                anyhow::anyhow!(explain_bpf_error(&e, &format!("attaching {section}")))
            })
        }
    }

    /// Tell the NAPI poll counter which RX queue each NAPI instance serves (from the kernel's
    /// queue table), so polls are charged right even where no RX program runs to learn it.
    pub fn map_napi(&self, napi_queue: &[(u32, u32)]) -> Result<()> {
        for &(napi_id, queue) in napi_queue {
            let slot = qc_napi_slot { napi_id, queue };
            let key = (napi_id & (NAPI_SLOTS - 1)).to_ne_bytes();
            // SAFETY: qc_napi_slot is two plain u32s (Plain above).
            let value = unsafe { plain::as_bytes(&slot) };
            self.skel
                .maps
                .qc_napi_queue
                .update(&key, value, MapFlags::ANY)
                .context("writing qc_napi_queue")?;
        }
        Ok(())
    }

    /// Attached links (for tests and the bench's bookkeeping).
    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// Cumulative counts of every queue with any, summed over CPUs.
    /// Cumulative counts (packets, bytes, NAPI, drops) of every queue with any, summed over
    /// CPUs; the detail fields stay zero.
    pub fn read_queues(&self) -> Result<Vec<QueueCounters>> {
        // One entry per CPU, direction and queue (the CPU's block first), read in place.
        let per_cpu_block = 2 * MAX_QUEUES as usize;
        let table = &self.queues;
        let mut out = Vec::new();
        for idx in 0..per_cpu_block {
            let dir = if idx < MAX_QUEUES as usize {
                Dir::Rx
            } else {
                Dir::Tx
            };
            let mut q = QueueCounters::new(dir, idx as u32 % MAX_QUEUES);
            for entry in (idx..table.len()).step_by(per_cpu_block).take(self.ncpus) {
                let s: qc_queue_stats = table
                    .get(entry)
                    .context("qc_queues entries are smaller than their type")?;
                q.packets += s.packets;
                q.bytes += s.bytes;
                q.napi_polls += s.napi_polls;
                q.napi_work += s.napi_work;
                q.napi_budget_exhausted += s.napi_budget_exhausted;
                q.drops += s.drops;
                for (d, v) in q.napi_work_hist.iter_mut().zip(s.napi_work_hist.iter()) {
                    *d += v;
                }
            }
            if !q.is_zero() {
                out.push(q);
            }
        }
        Ok(out)
    }

    fn percpu_sum(map: &libbpf_rs::MapMut<'_>, key: u32) -> Result<u64> {
        let vals = map
            .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)?
            .unwrap_or_default();
        Ok(vals
            .iter()
            .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
            .map(u64::from_ne_bytes)
            .sum())
    }

    pub fn counter(&self, c: qc_counter) -> Result<u64> {
        Self::percpu_sum(&self.skel.maps.qc_counters, c.0)
    }

    /// The device's drops by reason, cumulative: every one, and those of RX packets its
    /// stack had not yet taken in (the driver's or the backlog's), each as (reason, count).
    pub fn read_drop_reasons(&self) -> Result<DropCounts> {
        let n = super::qcount_skel::types::ddio_limits::DDIO_MAX_DROP_REASONS.0;
        let all = super::percpu_array_all(&self.skel.maps.qc_drop_reasons, 2 * n, self.ncpus)
            .context("reading qc_drop_reasons")?;
        let sums: Vec<u64> = all
            .iter()
            .map(|per_cpu| {
                per_cpu
                    .iter()
                    .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                    .map(u64::from_ne_bytes)
                    .sum()
            })
            .collect();
        let nonzero = |half: &[u64]| -> Vec<(u32, u64)> {
            (0..n)
                .zip(half.iter().copied())
                .filter(|&(_, c)| c > 0)
                .collect()
        };
        let (every, before_stack) = sums.split_at(sums.len().min(n as usize));
        Ok(DropCounts {
            every: nonzero(every),
            before_stack: nonzero(before_stack),
        })
    }

    /// Every flow's sampled sums over the run on each queue it was sampled on (one entry per
    /// flow and queue): the drained tables' totals, and the current table and the CPUs' cache
    /// slots as they stand. Drains the table the programs added to since the last read first
    /// (see probe::flowdrain). A slot that changes flows moves its sums into a table, so the
    /// slots' change counts are taken before the tables are read and again after the slots
    /// are: a read that saw a move (the sums in both places, or in neither) starts over. The
    /// queues' overflow buckets are read with them (`flow_overflow`).
    pub fn read_flows(&mut self) -> Result<Vec<SampledFlow>> {
        self.drain_flows()?;
        let mut live = Vec::new();
        for _ in 0..FLOW_READ_TRIES {
            let before = self.slot_seqs();
            live.clear();
            for t in 0..2 {
                if t == self.flow_gen() & 1 || self.flows.pending.as_ref().is_some_and(|p| p.0 == t)
                {
                    live.extend(self.flow_table_copies(t, false)?);
                }
            }
            live.extend(
                (0..self.flow_cache.len())
                    .filter_map(|i| self.flow_cache.get::<qc_flow_slot>(i))
                    .filter(|slot| slot.stats.samples > 0)
                    .map(|slot| (slot.key, slot.stats)),
            );
            self.flows.overflow = self.read_overflow()?;
            if before.iter().all(|s| s % 2 == 0) && self.slot_seqs() == before {
                break;
            }
        }
        Ok(self.flows.totals.view(live))
    }

    /// The queues' flow overflow buckets as of the last `read_flows`.
    pub fn flow_overflow(&self) -> &[FlowOverflow] {
        &self.flows.overflow
    }

    /// Drain the current flow table now if it may be half full (between flow reads, when
    /// flows come faster than a read a second can take them): its flows go into the totals
    /// instead of the overflow bucket.
    pub fn drain_flows_if_filling(&mut self) -> Result<()> {
        let inserts = self.counter(qc_counter::QC_FLOW_INSERTS)?;
        if self.flows.pending.is_some()
            || inserts.saturating_sub(self.flows.inserts_at_flip)
                >= u64::from(FLOW_TABLE_ENTRIES / 2)
        {
            self.drain_flows()?;
        }
        Ok(())
    }

    /// Flip the programs to the other flow table (unless a flipped one still waits), wait for
    /// them to leave the one flipped away from, and move its entries into the totals. A table
    /// whose programs do not leave within DRAIN_WAIT waits for the next read, read as it
    /// stands meanwhile.
    fn drain_flows(&mut self) -> Result<()> {
        if self.flows.pending.is_none() {
            let gen = self.flow_gen();
            self.flows.inserts_at_flip = self.counter(qc_counter::QC_FLOW_INSERTS)?;
            self.set_flow_gen(gen + 1)?;
            self.flows.pending = Some((gen & 1, self.slot_seqs()));
        }
        let Some((table, at_flip)) = self.flows.pending.as_ref() else {
            return Ok(());
        };
        let (table, deadline) = (*table, std::time::Instant::now() + DRAIN_WAIT);
        while !quiescent(at_flip, &self.slot_seqs()) {
            if std::time::Instant::now() >= deadline {
                return Ok(());
            }
            std::thread::yield_now();
        }
        let copies = self.flow_table_copies(table, true)?;
        self.flows.totals.drain(copies);
        self.flows.pending = None;
        Ok(())
    }

    /// Which flow table the programs add to (its low bit).
    fn flow_gen(&self) -> usize {
        // SAFETY: flow_gen is a u32 in the mapped .bss, written by this process alone.
        self.skel
            .maps
            .bss_data
            .as_deref()
            .map_or(0, |b| unsafe { std::ptr::read_volatile(&b.flow_gen) }
                as usize)
    }

    fn set_flow_gen(&mut self, gen: usize) -> Result<()> {
        let b = self.bss_mut()?;
        // SAFETY: a u32 in the mapped .bss; the programs only read it.
        unsafe { std::ptr::write_volatile(&mut b.flow_gen, gen as u32) };
        // The store before the seqs' loads: with the programs' locked seq add before their
        // flow_gen load, one side sees the other (probe::flowdrain).
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Each cache slot's seq, its first field, which only ever grows.
    fn slot_seqs(&self) -> Vec<u64> {
        (0..self.flow_cache.len())
            .map(|i| self.flow_cache.get::<u64>(i).unwrap_or(0))
            .collect()
    }

    /// Each queue's overflow bucket, summed over CPUs (queues with none left out).
    fn read_overflow(&self) -> Result<Vec<FlowOverflow>> {
        let per_cpu_block = 2 * MAX_QUEUES as usize;
        let mut out = Vec::new();
        for idx in 0..per_cpu_block {
            let dir = if idx < MAX_QUEUES as usize {
                Dir::Rx
            } else {
                Dir::Tx
            };
            let (mut x256, mut bytes, mut unparsed) = (0u64, 0u64, 0u64);
            for entry in (idx..self.queues.len())
                .step_by(per_cpu_block)
                .take(self.ncpus)
            {
                let s: qc_queue_stats = self
                    .queues
                    .get(entry)
                    .context("qc_queues entries are smaller than their type")?;
                x256 += s.flow_overflow_x256;
                bytes += s.flow_overflow_bytes;
                unparsed += s.flow_unparsed;
            }
            if x256 > 0 || unparsed > 0 {
                out.push(FlowOverflow {
                    dir,
                    queue: idx as u32 % MAX_QUEUES,
                    packets: (x256 + 128) >> 8,
                    bytes,
                    unparsed,
                });
            }
        }
        Ok(out)
    }

    /// Each entry's per-CPU copies that hold samples, of flow table `t`; deleted as read when
    /// `take` (only for a table no program adds to any more).
    fn flow_table_copies(&self, t: usize, take: bool) -> Result<Vec<(pl_flow_key, qc_flow_stats)>> {
        let map = if t == 0 {
            &self.skel.maps.qc_flows0
        } else {
            &self.skel.maps.qc_flows1
        };
        let mut out = Vec::new();
        let keys: Vec<Vec<u8>> = map.keys().collect();
        for key in keys {
            let vals = map
                .lookup_percpu(&key, MapFlags::ANY)
                .context("reading the flow table")?;
            if take {
                map.delete(&key).context("draining the flow table")?;
            }
            let Some(vals) = vals else { continue };
            let mut k = pl_flow_key::default();
            if plain::copy_from_bytes(&mut k, &key).is_err() {
                continue;
            }
            for raw in vals.iter().take(self.ncpus) {
                let mut v = qc_flow_stats::default();
                if plain::copy_from_bytes(&mut v, raw).is_ok() && v.samples > 0 {
                    out.push((k, v));
                }
            }
        }
        Ok(out)
    }

    /// Each attached program (id, name, hook), for bpf_stats readers.
    pub fn attached_progs(&self) -> Vec<super::AttachedProg> {
        let attached = |tp: &str| {
            self.hooks.iter().any(|h| {
                h.error.is_none()
                    && (h.hook == tp || h.hook == format!("tcx/{}", tp.trim_start_matches("tcx_")))
            })
        };
        self.skel
            .object()
            .progs()
            .filter(|p| p.autoload())
            .filter_map(|p| super::AttachedProg::of(&p))
            .filter(|a| attached(&a.tracepoint))
            .collect()
    }

    /// Each attached program's hook and when it runs.
    pub fn plan(&self) -> Vec<super::HookPlan> {
        let of = |section: &str, when| super::HookPlan {
            prog_id: self
                .skel
                .object()
                .progs()
                .find(|p| p.section().to_string_lossy() == section)
                .and_then(|p| super::loaded_prog_id(&p)),
            ..super::HookPlan::of_section(section, when)
        };
        self.always
            .iter()
            .map(|s| of(s, super::When::Always))
            .chain(
                self.window_hooks
                    .iter()
                    .map(|h| of(&h.section, super::When::Windows)),
            )
            .collect()
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame of a UDP datagram with 64 bytes of payload, 106 bytes in all.
    fn udp_frame() -> Vec<u8> {
        let mut f = vec![0u8; 106];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&92u16.to_be_bytes());
        (ip[8], ip[9]) = (64, 17);
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&5201u16.to_be_bytes());
        f[38..40].copy_from_slice(&72u16.to_be_bytes());
        f
    }

    /// Samples and estimated packets (x256) in a loaded object's flow cache and tables.
    fn flow_sums(skel: &QcountSkel<'_>) -> (u64, u64) {
        let mut sum = (0, 0);
        let mut add = |v: &qc_flow_stats| {
            sum.0 += v.samples;
            sum.1 += v.packets_x256;
        };
        let cache = &skel.maps.qc_flow_cache;
        for i in 0..cache.max_entries() {
            let raw = cache
                .lookup(&i.to_ne_bytes(), MapFlags::ANY)
                .expect("reading the flow cache")
                .expect("an array has every entry");
            let mut slot = qc_flow_slot::default();
            plain::copy_from_bytes(&mut slot, &raw).expect("a flow cache slot");
            add(&slot.stats);
        }
        for table in [&skel.maps.qc_flows0, &skel.maps.qc_flows1] {
            for key in table.keys() {
                let copies = table
                    .lookup_percpu(&key, MapFlags::ANY)
                    .expect("reading a flow table");
                for raw in copies.into_iter().flatten() {
                    let mut v = qc_flow_stats::default();
                    plain::copy_from_bytes(&mut v, &raw).expect("a flow table entry");
                    add(&v);
                }
            }
        }
        sum
    }

    /// Each load of the object starts its flow-sampling draws afresh: with one start for
    /// every recording, every recording of a steady flow drew the same samples, and the
    /// first few thousand draws of that start fell 5 % short (each recording's first window
    /// charged a flow alone on its queue 95 % of it). Run on one CPU, a fixed start gives
    /// every load the same count; fresh ones scatter by the binomial's deviation, and their
    /// estimates add up to the frames that ran.
    #[test]
    #[ignore = "loads BPF: needs root and kernel BTF (make test runs it)"]
    fn each_load_draws_its_own_flow_samples_and_they_weigh_up_to_the_frames() {
        const LOADS: usize = 16;
        const FRAMES: u32 = 4096;
        // One in 16 frames: a 106-byte frame against a threshold of 16 times that.
        let p = 1.0 / 16.0;
        // SAFETY: a zeroed cpu_set_t filled by the libc macros, for this test's own thread.
        unsafe {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut one);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one),
                0,
                "pinning the test to CPU 0"
            );
        }
        let frame = udp_frame();
        let cfg = QcountConfig {
            ifindex: 1,
            netns_inode: 0,
            netns_path: None,
            rx_queue_offset: 1,
            link_hdr_len: 14,
            flow_bytes: [106 * 16, 0],
            rx: RxChoice::Tcx,
            count_rx: true,
            count_tx: false,
            window_only: [false; 2],
            napi_window_only: true,
            drop_window_only: true,
        };
        let features = Features::detect();
        let mut samples = Vec::new();
        let mut packets_x256 = 0;
        for _ in 0..LOADS {
            let skel = load(&cfg, &features, HookChoice::Auto, true).expect("loading qcount");
            let out = skel
                .progs
                .qc_rx_tc
                .test_run(libbpf_rs::ProgramInput {
                    data_in: Some(&frame),
                    repeat: FRAMES,
                    ..Default::default()
                })
                .expect("BPF_PROG_TEST_RUN of the tcx program");
            assert_eq!(out.return_value, 0xffff_ffff, "TCX_NEXT");
            let (n, x256) = flow_sums(&skel);
            samples.push(n as f64);
            packets_x256 += x256;
        }
        let frames = f64::from(FRAMES);
        let binomial_sd = (frames * p * (1.0 - p)).sqrt();
        let mean = samples.iter().sum::<f64>() / LOADS as f64;
        let sd =
            (samples.iter().map(|n| (n - mean).powi(2)).sum::<f64>() / (LOADS - 1) as f64).sqrt();
        // A sample deviation under 0.35 of the binomial's from 16 fresh starts: 1 in 50,000.
        assert!(
            sd > 0.35 * binomial_sd,
            "samples per load {samples:?}: sd {sd:.1}, binomial {binomial_sd:.1}"
        );
        // The estimate of all the loads' frames, within 4 of its standard deviations (6 %).
        let all = frames * LOADS as f64;
        let estimate = packets_x256 as f64 / 256.0;
        let tolerance = 4.0 * (all * (1.0 - p) / p).sqrt();
        assert!(
            (estimate - all).abs() < tolerance,
            "estimated {estimate:.0} frames of {all} (within {tolerance:.0}); samples {samples:?}"
        );
    }

    fn key(sport: u16, qslot: u8) -> pl_flow_key {
        let mut k = pl_flow_key {
            family: 4,
            proto: 6,
            dir: 0,
            qslot,
            sport,
            dport: 5201,
            ..Default::default()
        };
        k.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        k.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
        k
    }

    fn sums(samples: u64, bytes: u64, first_ns: u64, last_ns: u64, queue: u32) -> qc_flow_stats {
        qc_flow_stats {
            samples,
            packets_x256: samples * 256,
            bytes,
            payload_x256: bytes * 200,
            bytes_var: 7,
            first_ns,
            last_ns,
            queue,
            pad: 0,
        }
    }

    #[test]
    fn a_flows_table_copies_and_cache_slots_add_up_to_one_flow_per_queue() {
        let copies = vec![
            // Table: the creating CPU's copy, and another CPU's without a first.
            (key(4000, 0), sums(2, 3000, 100, 200, 0)),
            (key(4000, 0), sums(1, 1500, 0, 250, 0)),
            // A cache slot of the same flow and queue, sampled last.
            (key(4000, 0), sums(3, 4500, 150, 300, 0)),
            // The same flow on another queue stays apart, as another flow does.
            (key(4000, 1), sums(1, 1000, 400, 400, 1)),
            (key(4001, 0), sums(5, 50, 10, 20, 0)),
        ];
        let mut flows = FlowTotals::default().view(copies);
        flows.sort_by_key(|f| (f.key.sport, f.queue));
        assert_eq!(flows.len(), 3);
        let f = &flows[0];
        assert_eq!(
            (f.samples, f.packets, f.bytes, f.bytes_var),
            (6, 6, 9000, 21)
        );
        assert_eq!(f.payload_bytes, (9000 * 200 + 128) >> 8);
        assert_eq!((f.first_ns, f.last_ns, f.queue), (100, 300, 0));
        assert_eq!(
            (flows[1].queue, flows[1].bytes, flows[1].first_ns),
            (1, 1000, 400)
        );
        assert_eq!((flows[2].key.sport, flows[2].samples), (4001, 5));
    }
}
