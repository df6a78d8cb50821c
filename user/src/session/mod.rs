//! The live Snapshot stream: resolve the interface, attach the probes (tier 0 always, the
//! detail hooks in windows or for the whole run) and the counter sampler, and produce one
//! Snapshot per interval. `record`, `top` and `serve` all consume it, so what they show is
//! one code path.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use serde::{Deserialize, Serialize};

use crate::counters::{self, CounterSource, CountersMode};
use crate::probe::features::Features;
use crate::probe::features::HookChoice;
use crate::probe::l3miss::L3missProbe;
use crate::probe::l3miss::MissSource;
use crate::probe::pktlife::{rx_queue_offset_for_driver, PktlifeProbe, ProbeConfig};
use crate::probe::qcount::{QcountConfig, QcountProbe, RxChoice};
use crate::probe::qcount_skel::types::qc_counter;
use crate::snapshot::{Dir, EventCounters, FlowCounters, QueueCounters, Snapshot, NSTAGES};
use crate::sys::{is_root, monotonic_ns};
use crate::topology::presence::LinkTotals;
use crate::topology::{self, HostInfo, IfaceInfo};

mod flowscale;
mod napiscale;
mod txsplit;
pub mod windows;

/// The flags `record`, `top` and `serve` share: which interface, where, and what else to open.
#[derive(Debug, Clone, clap::Args)]
pub struct SessionArgs {
    /// Interface to observe.
    #[arg(short, long)]
    pub iface: String,
    /// Named network namespace (from `ip netns list`) the interface lives in.
    #[arg(long)]
    pub netns: Option<String>,
    /// Hardware counters: auto (uncore PMUs when present), software (software
    /// perf events through the same path), off.
    #[arg(long, value_enum, default_value = "auto")]
    pub counters: CountersMode,
    /// Print the feature table and attach details (program ids) on stderr.
    #[arg(short, long)]
    pub verbose: bool,
}

/// How long the last read of a run waits for the close notifications of connections that
/// closed just before it (the kernel sends them once the socket is freed, within milliseconds).
const SOCKET_PATIENCE: Duration = Duration::from_millis(300);

/// How much per-packet detail a live session takes, beyond tier 0's exact counts.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum DetailMode {
    /// Tier 0 only: exact per-queue counts and sampled flows (no stages, records or attribution).
    Counts,
    /// Tier 1: stages, packet records, the buffer map and the L3-miss sampler in sampled
    /// windows (`--duty`), on top of tier 0.
    #[default]
    Windows,
    /// Tier 2: every detail hook for the whole run, flows counted exactly: for short deep dives.
    Full,
}

impl DetailMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DetailMode::Counts => "counts",
            DetailMode::Windows => "windows",
            DetailMode::Full => "full",
        }
    }
}

/// How much detail `record` takes beyond the exact counts, and how flows are counted.
#[derive(Debug, Clone, clap::Args)]
pub struct DetailArgs {
    /// Per-packet detail beyond the exact counts: counts (tier 0 alone), windows (stages,
    /// packet records and attribution in sampled windows, see --duty), or full (every
    /// detail hook for the whole run, flows exact; for short deep dives).
    #[arg(long = "detail", value_enum, default_value = "windows")]
    pub mode: DetailMode,
    /// With --detail windows: the detail hooks and the L3-miss sampler run 1/N of each
    /// second (one window at a random place, after a warm-up and before a drain of up to
    /// 10 ms each), the sampler at N times its rate inside, so the sample count stays about
    /// the same. A queue that carries traffic before any of its stages is timed gets a window
    /// opened for it at once. 1: always on.
    #[arg(long, value_name = "N", default_value_t = windows::DEFAULT_DUTY,
          value_parser = clap::value_parser!(u32).range(1..=windows::MAX_DUTY as i64))]
    pub duty: u32,
    /// Flows are estimated from skbs sampled in proportion to their size: an skb of d bytes
    /// with probability min(1, d / BYTES), so bulk flows come out nearly exact and a flood of
    /// small packets costs one sample per BYTES; each estimate carries its error bound (see
    /// also --flows). 1: every skb (exact); 0: no flows. Default: 65536, or 1 with
    /// --detail full.
    #[arg(long, value_name = "BYTES")]
    pub flow_sample: Option<u32>,
    /// Where the exact RX counts come from: auto (the driver's own per-queue counters where
    /// they count every packet; else a tcx program on the device, which sees its frames only,
    /// after GRO; else the driver hand-up tracepoints), tcx, handup (a program, always).
    #[arg(long, value_enum, default_value = "auto")]
    pub rx_counts: RxChoice,
    /// When flows are sampled where the driver counts a direction's queues: windows (inside
    /// the detail windows only, every skb there, scaled by the driver's counts: no program per
    /// packet outside the windows, for a wider error bound), or always (a program
    /// samples every skb all the time). Either way a TCP flow that ends in a local socket takes
    /// the socket's own exact counts. Directions the driver does not count are always sampled.
    #[arg(long, value_enum, default_value = "windows")]
    pub flows: FlowTiming,
    /// Former spelling of --flows windows.
    #[arg(long, hide = true)]
    pub flow_windows: bool,
}

/// When a flow program samples skbs (see --flows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FlowTiming {
    /// In the detail windows only, where the driver counts the direction.
    Windows,
    /// All the time.
    Always,
}

impl DetailArgs {
    /// The surfaces' detail (top, serve): the recorder's defaults. Their flow series take the
    /// totals as estimates (left out of a reading, revised down, replaced by a socket's own
    /// counts) and count only what passes the highest total seen.
    pub fn surface() -> DetailArgs {
        DetailArgs {
            mode: DetailMode::Windows,
            duty: windows::DEFAULT_DUTY,
            flow_sample: None,
            rx_counts: RxChoice::Auto,
            flows: FlowTiming::Windows,
            flow_windows: false,
        }
    }

    /// Whether flows are sampled in the windows only, where the driver counts.
    pub fn flows_in_windows(&self) -> bool {
        self.flows == FlowTiming::Windows || self.flow_windows
    }

    /// The flows' sampling threshold in bytes.
    pub fn flow_sample(&self) -> u32 {
        self.flow_sample.unwrap_or(match self.mode {
            DetailMode::Full => 1,
            _ => crate::probe::qcount::DEFAULT_FLOW_BYTES,
        })
    }
}

/// L3-miss sampling for attribution, as `record` is asked for it.
#[derive(Debug, Clone, clap::Args)]
pub struct MissArgs {
    /// L3-miss sampling for attribution: auto (PEBS where the CPU has it), pebs,
    /// software-clock / software-faults / software-copy (stand-ins on hosts
    /// without a PMU; software-copy gives clock samples inside a socket copy
    /// the address of the buffer being copied), off.
    #[arg(
        long = "miss-sampling",
        value_name = "MISS_SAMPLING",
        value_enum,
        default_value = "auto"
    )]
    pub source: MissSource,
    /// Sample period: 1 in N L3 misses (default 2000), N ns for software-clock
    /// and software-copy (default 1 ms), 1 in N page faults for software-faults (default 1).
    #[arg(long = "miss-period", value_name = "N")]
    pub period: Option<u64>,
    /// Address join on 1 in N packet-buffer pages, chosen by address (a power of two up
    /// to 16; 1: every page). The buffer map's per-packet cost falls with N; samples on
    /// the other pages are counted apart, and the join's shares and miss estimates
    /// come from the sampled pages (estimates scaled by N).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_join_sample)]
    pub join_sample: u32,
    /// Former name of --duty (the attribution's windows are the detail windows).
    #[arg(long = "miss-duty", value_name = "N", hide = true, value_parser = clap::value_parser!(u32).range(1..=windows::MAX_DUTY as i64))]
    pub duty: Option<u32>,
    /// Size of the in-kernel L3-miss flow map (default 4096): tests shrink it to check
    /// that charges lost to its evictions are counted.
    #[arg(long = "miss-flow-slots", value_name = "N", hide = true)]
    pub flow_slots: Option<u32>,
}

impl MissArgs {
    /// No sampler: the live surfaces (attribution belongs to recordings).
    pub fn off() -> MissArgs {
        MissArgs {
            source: MissSource::Off,
            period: None,
            join_sample: 1,
            duty: None,
            flow_slots: None,
        }
    }

    /// The period asked for, else the source's default.
    pub fn period(&self) -> u64 {
        self.period.unwrap_or(match self.source {
            MissSource::SoftwareClock | MissSource::SoftwareCopy => 1_000_000,
            MissSource::SoftwareFaults => 1,
            MissSource::Auto | MissSource::Pebs | MissSource::Off => 2000,
        })
    }
}

/// `--join-sample`: a power of two from 1 to MAX_JOIN_SAMPLE (the page subset is a mask
/// on the buffer table's set index).
fn parse_join_sample(s: &str) -> std::result::Result<u32, String> {
    let max = crate::probe::pktlife::MAX_JOIN_SAMPLE;
    match s.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= max => Ok(n),
        _ => Err(format!(
            "must be a power of two from 1 to {max} (1, 2, 4, ...)"
        )),
    }
}

/// Everything a session needs: the shared flags, and what its consumer sets.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub args: SessionArgs,
    pub interval_ms: u64,
    /// Send 1 in N packets' full life records to userspace (0: none).
    pub sample_every: u32,
    /// Time stage latencies on 1 in N packets.
    pub stage_every: u32,
    pub miss: MissArgs,
    pub detail: DetailArgs,
    /// Flows are read from the kernel every this many intervals (and on the last).
    pub flow_every: u64,
    /// Hook flavour: auto (tp_btf where the kernel allows, else raw_tp) or forced.
    pub hooks: HookChoice,
}

impl SessionOptions {
    /// The duty the detail windows run at (the former `--miss-duty` wins when given).
    pub fn duty(&self) -> u32 {
        self.miss.duty.unwrap_or(self.detail.duty)
    }

    /// A live surface (top, serve): tier 0 and the default windows, aggregates only, so no
    /// per-packet records cross to userspace, stage latencies on the default share of
    /// packets, and no L3-miss sampler (attribution belongs to recordings).
    pub fn surface(args: &SessionArgs, interval_ms: u64, flow_every: u64) -> SessionOptions {
        SessionOptions {
            args: args.clone(),
            interval_ms,
            sample_every: 0,
            stage_every: crate::probe::pktlife::DEFAULT_STAGE_EVERY,
            miss: MissArgs::off(),
            detail: DetailArgs::surface(),
            flow_every,
            hooks: HookChoice::Auto,
        }
    }
}

/// What drives a session's L3-miss samples as it turned out: the source asked for,
/// resolved (auto becomes PEBS or nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissSampling {
    Pebs,
    SoftwareClock,
    SoftwareFaults,
    SoftwareCopy,
    /// Turned off (--miss-sampling off).
    Off,
    /// Asked for, but the host has no event for it.
    Absent,
}

impl MissSampling {
    /// A software event standing in for L3-miss samples: its counts are samples, not misses.
    pub fn is_stand_in(self) -> bool {
        matches!(
            self,
            MissSampling::SoftwareClock | MissSampling::SoftwareFaults | MissSampling::SoftwareCopy
        )
    }

    /// The sampler that runs for `source` once its event opened.
    pub fn of(source: MissSource) -> MissSampling {
        match source {
            MissSource::Auto | MissSource::Pebs => MissSampling::Pebs,
            MissSource::SoftwareClock => MissSampling::SoftwareClock,
            MissSource::SoftwareFaults => MissSampling::SoftwareFaults,
            MissSource::SoftwareCopy => MissSampling::SoftwareCopy,
            MissSource::Off => MissSampling::Off,
        }
    }
}

impl std::fmt::Display for MissSampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            MissSampling::Pebs => "pebs",
            MissSampling::SoftwareClock => "software-clock",
            MissSampling::SoftwareFaults => "software-faults",
            MissSampling::SoftwareCopy => "software-copy",
            MissSampling::Off => "off",
            MissSampling::Absent => "absent",
        })
    }
}

/// A live session: tier 0 and the detail probes attached to one interface, the counter
/// sampler, and the state that turns their cumulative counts into one Snapshot per interval.
pub struct Session {
    pub iface: IfaceInfo,
    pub host: HostInfo,
    pub features: Features,
    /// Tier 0: exact counts, sampled flows.
    pub tier0: QcountProbe,
    /// The detail hooks (None with `--detail counts`).
    pub detail: Option<PktlifeProbe>,
    /// The L3-miss sample program and its sampler (None without a sampler).
    pub l3: Option<L3missProbe>,
    pub detail_mode: DetailMode,
    /// The duty the detail hooks run at (1: always).
    pub duty: u32,
    /// Address join on 1 in N buffer pages.
    pub join_sample: u32,
    /// The flows' sampling threshold in bytes (1: exact).
    pub flow_sample: u32,
    /// The threshold inside the detail windows of a direction sampled there alone.
    pub window_flow_sample: u32,
    /// Which uncore event table the host takes, or why none.
    pub platform: counters::Detection,
    pub counters_source: CounterSource,
    pub counter_notes: Vec<String>,
    /// What drives the L3-miss samples, or why there are none, in words.
    pub miss_label: String,
    /// What drives the L3-miss samples.
    pub miss_sampling: MissSampling,
    /// Which packet buffers the address join maps (linear data, frags), and
    /// where the page-to-address layout came from or why frags are left out.
    pub buffer_join: String,
    pub start_ns: u64,
    pub started: Instant,
    /// The sampler's period as opened (inside windows when attribution runs in them).
    pub miss_period: u64,
    /// The detail windows, when they run 1/N of the time.
    windows: Option<WindowDriver>,
    /// The driver's own counters, when they cover a direction ([RX, TX]): packets and bytes
    /// come from them there.
    kstats: Option<crate::probe::kstats::KernelStats>,
    pub kernel_counts: [bool; 2],
    /// Flows of the directions the driver counts, sampled in windows and scaled by its counts.
    flow_windows: Option<flowscale::WindowFlows>,
    /// NAPI polls counted in windows only, estimated for every interval.
    napi_windows: Option<napiscale::WindowNapi>,
    /// The namespace's TCP sockets, whose own counters stand in for the estimates of the
    /// flows that end in them (None: flows are counted exactly, or sock_diag is not there).
    sockets: Option<crate::probe::sockets::SocketFlows>,
    /// Reads of the sockets' close notifications that found them overflowed, so far.
    socket_overflows: u64,
    /// The interface's own totals, read just before and just after the driver's per-queue
    /// counters at the last interval's end, against which those are checked.
    prev_link: Option<(LinkTotals, LinkTotals)>,
    /// TX from the interface's totals, split across queues by the windows' TX program (the
    /// driver's counters do not count every TX path, and detail runs in windows).
    tx_split: Option<txsplit::TxSplit>,
    /// Spans in a row whose driver counts missed the interface's [RX, TX].
    kernel_misses: [u32; 2],
    /// [RX, TX]: the span being checked: the interface's totals (before, after) at its start,
    /// and what the driver's counters counted in it so far.
    check_spans: [Option<(u64, u64, u64)>; 2],
    /// The interface's totals when the recording began (after the baseline read).
    start_link: Option<LinkTotals>,
    /// [RX, TX]: packets and bytes the driver's counters missed before a program took over
    /// counting, for the next interval's queues.
    missed: [Option<(u64, u64)>; 2],
    /// Whether the interface is still there, asked every interval.
    watch: Option<topology::presence::DeviceWatch>,
    /// The recorded namespace, held open while the programs run: they know it by the address
    /// of its struct net once seen, which no other namespace can take while this one is held.
    _netns_held: Option<std::fs::File>,
    /// Why the session ended early: the interface or its namespace went away.
    gone: Option<String>,
    gone_how: Option<topology::presence::Gone>,
    sampler: Option<counters::Sampler>,
    interval: Duration,
    flow_every: u64,
    index: u64,
    /// Each queue's cumulative counters at the last snapshot (tier 0's and the detail's).
    prev_q: Vec<QueueCounters>,
    prev_e: EventCounters,
    prev_t: u64,
    prev_m: crate::snapshot::MissSnapshot,
}

impl Session {
    /// Everything that can fail for a bad argument fails here, before attaching.
    pub fn preflight(opts: &SessionOptions) -> Result<(Features, IfaceInfo)> {
        if opts.interval_ms < 10 {
            bail!("--interval must be at least 10 ms");
        }
        if opts.duty() == 0 || opts.duty() > windows::MAX_DUTY {
            bail!(
                "--duty must be from 1 to {}, not {}",
                windows::MAX_DUTY,
                opts.duty()
            );
        }
        if opts.detail.mode == DetailMode::Counts
            && !matches!(opts.miss.source, MissSource::Auto | MissSource::Off)
        {
            bail!("--miss-sampling needs the detail hooks' buffer map: use --detail windows or full, not counts");
        }
        if !is_root() {
            bail!("ddioscope needs root to load BPF programs: run it with sudo");
        }
        let features = Features::detect();
        if let Some(why) = features.fatal() {
            bail!(why);
        }
        if opts.args.verbose {
            eprintln!("features: {}", serde_json::to_string(&features)?);
        }
        let mut iface = topology::resolve_iface_live(&opts.args.iface, opts.args.netns.as_deref())?;
        crate::counters::sysfs::place_on_iio(&mut iface, std::path::Path::new("/sys"));
        Ok((features, iface))
    }

    /// After the interface went away: poll once a second until an interface of its name is
    /// there again (in its namespace), and return what a new session on it needs; None if
    /// `stop` is set or `give_up` says so first.
    pub fn await_return(
        opts: &SessionOptions,
        stop: &AtomicBool,
        give_up: impl Fn() -> bool,
    ) -> Result<Option<(Features, IfaceInfo)>> {
        while !stop.load(Ordering::Relaxed) && !give_up() {
            if let Ok(mut i) =
                topology::resolve_iface_live(&opts.args.iface, opts.args.netns.as_deref())
            {
                crate::counters::sysfs::place_on_iio(&mut i, std::path::Path::new("/sys"));
                let f = Features::detect();
                if let Some(why) = f.fatal() {
                    bail!(why);
                }
                return Ok(Some((f, i)));
            }
            for _ in 0..20 {
                if stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(None)
    }

    pub fn start(opts: &SessionOptions, features: Features, iface: IfaceInfo) -> Result<Session> {
        use crate::probe::l3miss::{event_attr, L3missConfig};
        let detection = counters::platform::detect_host();
        let platform = detection.platform();
        let netns_path = opts
            .args
            .netns
            .as_deref()
            .map(|n| std::path::Path::new(topology::NETNS_RUN_DIR).join(n));
        let netns_held = match &netns_path {
            Some(p) => Some(
                std::fs::File::open(p)
                    .with_context(|| format!("opening network namespace {}", p.display()))?,
            ),
            None => None,
        };
        // The driver's own per-queue counters, where it keeps them: exact at no per-packet
        // cost. A direction they cover needs no counting program unless flows are sampled.
        let mut kstats = crate::probe::kstats::KernelStats::open(
            netns_path.as_deref(),
            iface.ifindex,
            &iface.name,
            iface.driver.as_deref(),
        )
        .ok()
        .flatten();
        let first = kstats.as_mut().map(|k| k.queues()).unwrap_or_default();
        // Without a watch (no netlink socket could be made) a vanished device goes unnoticed:
        // said once, the session goes on.
        let mut watch = match topology::presence::DeviceWatch::open(&iface) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("ddioscope: cannot watch {} for removal ({e:#}); a removed device will not be noticed", iface.name);
                None
            }
        };
        let mut kernel_notes = Vec::new();
        let mut kernel_counts = [
            crate::probe::kstats::covers(&first, Dir::Rx)
                && opts.detail.rx_counts == RxChoice::Auto,
            crate::probe::kstats::covers(&first, Dir::Tx),
        ];
        // Windows of duty 1 are the whole run: full detail.
        let windowed = opts.detail.mode == DetailMode::Windows && opts.duty() > 1;
        // Counters that exist need not count every path (veth counts its NAPI path only):
        // what the device has carried so far must add up to the interface's own totals.
        if let Some(link) = watch.as_mut().and_then(|w| w.link_packets()) {
            let src = kstats
                .as_ref()
                .and_then(|k| k.source())
                .map_or("kernel", |k| k.as_str());
            for (d, dir) in [(0, Dir::Rx), (1, Dir::Tx)] {
                let by_queues: u64 = first
                    .iter()
                    .filter(|q| q.dir == dir)
                    .filter_map(|q| q.packets)
                    .sum();
                if kernel_counts[d]
                    && link[d] >= MIN_CHECKED_PACKETS
                    && by_queues.abs_diff(link[d]) > link[d] / 20
                {
                    kernel_counts[d] = false;
                    let what = dir.as_str().to_uppercase();
                    let instead = if dir == Dir::Tx && windowed {
                        TX_SPLIT_WORDS.to_string()
                    } else {
                        format!("a program counts {what} instead")
                    };
                    kernel_notes.push(format!(
                        "the driver's per-queue {what} counters ({src}) add up to {by_queues} packets where the interface counted {}: \
                         they miss a path, so {instead}",
                        link[d],
                    ));
                }
            }
        }
        let flows = opts.detail.flow_sample() > 0;
        // TX that the driver does not count on every path: the one hook that knows a packet's
        // TX queue fires for every device on the host, so with windows it runs in them alone
        // and the interface's own totals are split by what it counted there.
        let split_tx = windowed && !kernel_counts[1];
        let covered = [kernel_counts[0], kernel_counts[1] || split_tx];
        // Where a direction is counted without a program, its program is there for flows (and
        // the TX split, and learning which queue a NAPI instance serves): with windows and
        // --flows windows (the default) it runs inside the windows alone, and flows are scaled
        // by the counts.
        let window_only =
            [0, 1].map(|d| covered[d] && windowed && (!flows || opts.detail.flows_in_windows()));
        // A window-only direction samples 1/duty of the time, so it samples by size duty times
        // as densely inside its windows: as many samples per second as a program running all
        // the time would take. Every skb there would cost a header parse and a flow update per
        // 64 B frame (about 300 ns on a 2-vCPU VM); a bulk flow's GRO skbs are sampled either way.
        let window_flow_bytes = (opts.detail.flow_sample() / opts.duty().max(1)).max(1);
        // Which NAPI instance serves each RX queue, where the driver says.
        let napi_known = kstats.as_mut().map(|k| k.napi_queues()).unwrap_or_default();
        // napi_poll fires for every device's polls: with windows it counts in them alone, and
        // polls are estimated from them, charged to queues by the kernel's queue table or the
        // frames an RX program saw (in the windows, where nothing else needs one).
        let napi_window_only = windowed;
        let mut tier0 = QcountProbe::attach(
            &QcountConfig {
                ifindex: iface.ifindex,
                netns_inode: iface.netns_inode,
                netns_path: netns_path.clone(),
                rx_queue_offset: rx_queue_offset_for_driver(iface.driver.as_deref()),
                link_hdr_len: iface.link_hdr_len(),
                flow_bytes: window_only.map(|w| {
                    if w {
                        window_flow_bytes
                    } else {
                        opts.detail.flow_sample()
                    }
                }),
                rx: opts.detail.rx_counts,
                count_rx: !covered[0] || flows || (napi_window_only && napi_known.is_empty()),
                // With windows the TX program is there in them even without flows: a driver's
                // TX counters found to miss a path later are split by it.
                count_tx: !covered[1] || flows || windowed,
                window_only,
                napi_window_only,
            },
            &features,
            opts.hooks,
        )?;
        // Where the driver does not publish the NAPI instances (veth) and no RX program runs
        // outside windows, the first window begins at once and learns them from the frames,
        // so no early poll goes uncharged.
        tier0.map_napi(&napi_known)?;
        let learn_first = window_only[0] && napi_known.is_empty();
        if learn_first {
            tier0.set_window_hooks(true)?;
        }
        let miss_period =
            windows::window_period(opts.miss.period(), if windowed { opts.duty() } else { 1 });
        let miss_attr = match opts.detail.mode {
            DetailMode::Counts => None,
            _ => event_attr(
                opts.miss.source,
                platform,
                miss_period,
                std::path::Path::new("/sys"),
            )?,
        };
        // Frag pages need the page-to-address layout; without one, the join
        // covers linear data only and the recording says why.
        let layout = miss_attr
            .as_ref()
            .map(|_| crate::probe::memlayout::resolve_live());
        let buffer_join = match &layout {
            None => "off (no L3-miss sampler)".to_string(),
            Some(Ok(m)) => format!("linear data and page frags; page addresses: {}", m.source),
            Some(Err(why)) => why.clone(),
        };
        let detail = match opts.detail.mode {
            DetailMode::Counts => None,
            _ => Some(PktlifeProbe::load(
                &ProbeConfig {
                    ifindex: iface.ifindex,
                    netns_inode: iface.netns_inode,
                    sample_every: opts.sample_every,
                    stage_every: opts.stage_every,
                    rx_queue_offset: rx_queue_offset_for_driver(iface.driver.as_deref()),
                    join_buffers: miss_attr.is_some(),
                    mem_layout: layout.and_then(Result::ok),
                    copy_standin: opts.miss.source == MissSource::SoftwareCopy,
                    join_sample: opts.miss.join_sample,
                },
                &features,
                opts.hooks,
                !windowed,
            )?),
        };
        let (l3, miss_sampling, miss_label) = match (miss_attr, detail.as_ref()) {
            (Some((attr, label)), Some(d)) => {
                let cfg = L3missConfig {
                    join_sample: opts.miss.join_sample,
                    copy_standin: opts.miss.source == MissSource::SoftwareCopy,
                    flow_slots: opts.miss.flow_slots,
                };
                // In windows the sampler waits, disabled, for the first one.
                match L3missProbe::load(&cfg, d).and_then(|mut l| l.attach_sampler(attr, label, windowed).map(|desc| (l, desc))) {
                    Ok((l, desc)) => (Some(l), MissSampling::of(opts.miss.source), desc),
                    Err(e) if opts.miss.source == MissSource::Auto => (None, MissSampling::Absent, format!("absent: {e:#}")),
                    Err(e) => return Err(e),
                }
            }
            _ => match (opts.detail.mode, opts.miss.source) {
                (DetailMode::Counts, _) => (None, MissSampling::Off, "off (--detail counts)".to_string()),
                (_, MissSource::Off) => (None, MissSampling::Off, "off (--miss-sampling off)".to_string()),
                _ => (
                    None,
                    MissSampling::Absent,
                    "absent: no PEBS L3-miss event on this host (no Intel core PMU); attribution is model/regression-only".to_string(),
                ),
            },
        };
        let windows = if windowed {
            WindowDriver::new(
                windows::cycle(Duration::from_millis(opts.interval_ms)),
                opts.duty(),
                l3.as_ref().is_some_and(L3missProbe::has_sampler),
            )
            .map(|mut w| {
                if learn_first {
                    w.opened_at = Some(Duration::ZERO);
                    w.learning = true;
                }
                w
            })
        } else {
            None
        };
        let (sampler, counters_source, mut counter_notes) = counters::open(opts.args.counters)?;
        counter_notes.extend(kernel_notes);
        if opts.args.verbose {
            for n in &counter_notes {
                eprintln!("counters: {n}");
            }
            for h in &tier0.hooks {
                eprintln!(
                    "tier 0: {} as {}{}",
                    h.hook,
                    h.attach,
                    h.error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                );
            }
        }
        let mut sampler = sampler;
        if let Some(s) = sampler.as_mut() {
            // Counts since the counters were opened (before the probes attached)
            // belong to no interval: read them away so interval 0 starts here.
            let _ = s.read();
        }
        let start_ns = monotonic_ns();
        let mut live = Session {
            host: topology::host_live(),
            iface,
            features,
            tier0,
            detail,
            l3,
            detail_mode: if windowed || opts.detail.mode == DetailMode::Counts {
                opts.detail.mode
            } else {
                DetailMode::Full
            },
            duty: if windowed { opts.duty() } else { 1 },
            join_sample: opts.miss.join_sample,
            flow_sample: opts.detail.flow_sample(),
            window_flow_sample: window_flow_bytes,
            platform: detection,
            counters_source,
            counter_notes,
            miss_label,
            miss_sampling,
            buffer_join,
            start_ns,
            started: Instant::now(),
            miss_period,
            windows,
            kstats,
            kernel_counts,
            flow_windows: None,
            napi_windows: None,
            sockets: None,
            socket_overflows: 0,
            prev_link: None,
            tx_split: None,
            kernel_misses: [0; 2],
            check_spans: [None; 2],
            start_link: None,
            missed: [None; 2],
            watch,
            _netns_held: netns_held,
            gone: None,
            gone_how: None,
            sampler,
            interval: Duration::from_millis(opts.interval_ms),
            flow_every: opts.flow_every.max(1),
            index: 0,
            prev_q: Vec::new(),
            prev_e: EventCounters::default(),
            prev_t: start_ns,
            prev_m: Default::default(),
        };
        // Sampled flows that end in a local TCP socket take its exact counts, from here on.
        // Where sock_diag is missing or refused, they stay estimates, quietly.
        if opts.detail.flow_sample() > 1 {
            live.sockets = crate::probe::sockets::SocketFlows::open(netns_path.as_deref())
                .map_err(|e| {
                    if opts.args.verbose {
                        eprintln!("ddioscope: TCP flows stay estimates: {e:#}");
                    }
                })
                .ok();
        }
        // Counts already made (between attach and now) belong to no interval either.
        live.prev_q = live.tier0.read_queues()?;
        let before = live.watch.as_mut().and_then(|w| w.link_totals());
        if let Some(k) = live.kstats.as_mut() {
            overlay_kernel_counts(&mut live.prev_q, &k.queues(), live.kernel_counts);
        }
        let after = live.watch.as_mut().and_then(|w| w.link_totals());
        live.prev_link = before.zip(after);
        live.start_link = after;
        if split_tx {
            let link = after.unwrap_or_default();
            live.tx_split = Some(txsplit::TxSplit::new(
                &live.prev_q,
                &live.prev_q,
                (link.packets[1], link.bytes[1]),
                live.iface.tx_queues,
            ));
        }
        if live.tier0.napi_window_only() {
            live.napi_windows = Some(napiscale::WindowNapi::default());
        }
        if window_only.iter().any(|&w| w) {
            live.flow_windows = Some(flowscale::WindowFlows::new(window_only, &live.prev_q));
        }
        Ok(live)
    }

    pub fn index(&self) -> u64 {
        self.index
    }

    pub fn interval_ms(&self) -> u64 {
        self.interval.as_millis() as u64
    }

    /// Every hook this session attached (the packet hooks: the L3-miss sampler's program runs
    /// per sample), whose packets it sees and when it runs.
    pub fn hook_plan(&self) -> Vec<crate::probe::HookPlan> {
        let mut plan = self.tier0.plan();
        plan.extend(self.detail_plan());
        plan
    }

    /// The detail hooks attached, and when they run.
    pub fn detail_plan(&self) -> Vec<crate::probe::HookPlan> {
        use crate::probe::{HookPlan, When};
        let when = if self.windows.is_some() {
            When::Windows
        } else {
            When::Always
        };
        let Some(d) = self.detail.as_ref() else {
            return Vec::new();
        };
        let progs = d.hook_progs();
        d.hooks
            .iter()
            .filter(|h| h.error.is_none() && h.flavor.is_some())
            .map(|h| HookPlan {
                prog_id: progs
                    .iter()
                    .find(|p| p.tracepoint == h.tracepoint)
                    .map(|p| p.id),
                ..HookPlan::of_section(&format!("tp/{}", h.tracepoint), when)
            })
            .collect()
    }

    /// Every BPF program this session loaded (for leak checks and bpf_stats).
    pub fn prog_ids(&self) -> Vec<u32> {
        let mut ids = self.tier0.prog_ids();
        if let Some(d) = &self.detail {
            ids.extend(d.prog_ids());
        }
        if let Some(l) = &self.l3 {
            ids.extend(l.prog_ids());
        }
        ids
    }

    /// Where the RX and TX packet counts come from now (in words the recording keeps).
    pub fn count_sources(&self) -> (crate::probe::qcount::RxSource, &'static str) {
        use crate::probe::kstats::KernelSource;
        use crate::probe::qcount::RxSource;
        let kernel = self.kstats.as_ref().and_then(|k| k.source());
        let rx = match (self.kernel_counts[0], kernel) {
            (true, Some(KernelSource::Ethtool)) => RxSource::Ethtool,
            (true, _) => RxSource::Qstats,
            (false, _) => self.tier0.rx_source,
        };
        let tx = match (
            &self.tx_split,
            self.kstats.as_ref().and_then(|k| k.tx_source()),
        ) {
            (Some(s), _) if s.exact() => "link",
            (Some(_), _) => "link_split",
            (None, Some(k)) if self.kernel_counts[1] => k,
            _ => "xmit",
        };
        (rx, tx)
    }

    /// Whether NAPI polls are counted in the windows and estimated from them.
    pub fn napi_windowed(&self) -> bool {
        self.napi_windows.is_some()
    }

    /// Windows opened between the drawn ones for queues with a stage untimed (None: no windows).
    pub fn windows_opened(&self) -> Option<u64> {
        self.windows.as_ref().map(|w| w.opened)
    }

    /// The windows the flows of a driver-counted direction were sampled in so far (None: flows
    /// are not time-sampled).
    pub fn flow_windows(&self) -> Option<u64> {
        self.flow_windows
            .as_ref()
            .map(flowscale::WindowFlows::windows)
    }

    /// Put the local TCP sockets' own counts in place of the estimates of the flows that end
    /// in them; returns those flows. A read that fails (the namespace went away) ends them,
    /// said once in the notes.
    fn socket_counts(
        &mut self,
        flows: &mut [crate::probe::qcount::SampledFlow],
        last: bool,
    ) -> std::collections::HashSet<crate::snapshot::FlowKey> {
        let Some(s) = self.sockets.as_mut() else {
            return Default::default();
        };
        let read = if last {
            s.read_last(SOCKET_PATIENCE)
        } else {
            s.read()
        };
        if let Err(e) = read {
            self.counter_notes.push(format!(
                "interval {}: TCP sockets could not be read any more ({e:#}); their flows are estimates from here on",
                self.index
            ));
            self.sockets = None;
            return Default::default();
        }
        if s.overflows > self.socket_overflows {
            if self.socket_overflows == 0 {
                self.counter_notes.push(format!(
                    "interval {}: more TCP connections closed between two reads than their notifications had room for; \
                     those connections' last second is missing from their flows",
                    self.index
                ));
            }
            self.socket_overflows = s.overflows;
        }
        s.table().apply(flows)
    }

    /// A window of the window-only flow programs ended: its flows and counts, with the
    /// driver's counts of the stretch it stands for.
    fn flow_window_ended(&mut self, (from, to): (Duration, Duration)) -> Result<()> {
        let Some(f) = self.flow_windows.as_mut() else {
            return Ok(());
        };
        let program = self.tier0.read_queues()?;
        let mut driver = Vec::new();
        if let Some(k) = self.kstats.as_mut() {
            overlay_kernel_counts(&mut driver, &k.queues(), self.kernel_counts);
        }
        if let (Some(s), Some(link)) = (
            self.tx_split.as_mut(),
            self.watch.as_mut().and_then(|w| w.link_totals()),
        ) {
            overlay_kernel_counts(
                &mut driver,
                &s.interval(&program, (link.packets[1], link.bytes[1])),
                [false, true],
            );
        }
        let now = Instant::now()
            .saturating_duration_since(self.started)
            .as_secs_f64();
        f.window_ended(
            &self.tier0.read_flows()?,
            &program,
            &driver,
            (from.as_secs_f64(), to.as_secs_f64()),
            now,
        );
        Ok(())
    }

    /// Check the driver's per-queue counts of this interval against the interface's own
    /// totals: a driver whose queue counters miss a path (veth counts its NAPI path only) is
    /// found by trying, and its direction is counted by the program from then on.
    fn check_kernel_counts(
        &mut self,
        link: Option<(LinkTotals, LinkTotals)>,
        cur_q: &mut [QueueCounters],
        interval: &[QueueCounters],
    ) -> Result<()> {
        let Some(link) = link else { return Ok(()) };
        let Some(prev) = self.prev_link.replace(link) else {
            return Ok(());
        };
        let (before, after) = (link.0.packets, link.1.packets);
        for (d, dir) in [(0, Dir::Rx), (1, Dir::Tx)] {
            if !self.kernel_counts[d] {
                continue;
            }
            // A span is judged once the interface carried enough to judge by, however many
            // intervals that takes: a direction that carries a few hundred packets an interval
            // (a receiver's ACKs) is judged too.
            let (span_before, span_after, counted) =
                self.check_spans[d].unwrap_or((prev.0.packets[d], prev.1.packets[d], 0));
            let by_queues = counted
                + interval
                    .iter()
                    .filter(|q| q.dir == dir)
                    .map(|q| q.packets)
                    .sum::<u64>();
            if before[d].saturating_sub(span_after) < MIN_CHECKED_PACKETS {
                self.check_spans[d] = Some((span_before, span_after, by_queues));
                continue;
            }
            self.check_spans[d] = Some((before[d], after[d], 0));
            let by_link = after[d].saturating_sub(span_after);
            // Only a miss that lasts two spans in a row counts, so only a path the counters
            // miss shows.
            if driver_counts_fit(by_queues, (before[d], after[d]), (span_before, span_after)) {
                self.kernel_misses[d] = 0;
                continue;
            }
            // Counters that stood still while the interface carried a span's packets are no
            // timing artefact: one such span is enough.
            self.kernel_misses[d] += if by_queues == 0 { 2 } else { 1 };
            if self.kernel_misses[d] < 2 {
                continue;
            }
            let src = self
                .kstats
                .as_ref()
                .and_then(|k| k.source())
                .map_or("kernel", |k| k.as_str());
            let what = dir.as_str().to_uppercase();
            if dir == Dir::Tx && self.windows.is_some() && self.tier0.window_only(Dir::Tx) {
                // The interface's totals from here, split by the TX program the windows run
                // anyway; its flows stay window-sampled, scaled by the split.
                let program = self.tier0.read_queues()?;
                // What the counters missed since the recording began goes to the queues with
                // the first split, so the recording's TX adds up to the interface's.
                let so_far = cur_q
                    .iter()
                    .filter(|q| q.dir == Dir::Tx)
                    .fold((0, 0), |a, q| (a.0 + q.packets, a.1 + q.bytes));
                let start = self.start_link.unwrap_or_default();
                let missed = (
                    link.1.packets[1]
                        .saturating_sub(start.packets[1])
                        .saturating_sub(so_far.0),
                    link.1.bytes[1]
                        .saturating_sub(start.bytes[1])
                        .saturating_sub(so_far.1),
                );
                let mut split = txsplit::TxSplit::new(
                    cur_q,
                    &program,
                    (link.1.packets[1], link.1.bytes[1]),
                    self.iface.tx_queues,
                );
                split.add_unsplit(missed);
                self.tx_split = Some(split);
                self.kernel_counts[d] = false;
                self.counter_notes.push(format!(
                    "interval {}: the driver's per-queue TX counters ({src}) counted {by_queues} packets where the interface counted {by_link}; \
                     from the next interval on, {TX_SPLIT_WORDS}; the {} packets they missed before are in the first interval split",
                    self.index, missed.0
                ));
                continue;
            }
            if !self.tier0.counts(dir) {
                // No program for this direction (no flows asked for): nothing to switch to.
                self.counter_notes.push(format!(
                    "interval {}: the driver's per-queue {what} counters ({src}) counted {by_queues} packets where the interface counted {by_link}; \
                     its per-queue {what} counts are not exact (record with --flow-sample above 0 to let a program count them)",
                    self.index
                ));
                self.kernel_counts[d] = false;
                continue;
            }
            self.tier0.count_always(dir)?;
            self.kernel_counts[d] = false;
            if let Some(f) = self.flow_windows.as_mut() {
                f.stop_scaling(dir);
            }
            // What the counters missed since the recording began goes to the queues of the
            // next interval, so the recording's totals add up to the interface's.
            let so_far = cur_q
                .iter()
                .filter(|q| q.dir == dir)
                .fold((0, 0), |a, q| (a.0 + q.packets, a.1 + q.bytes));
            let start = self.start_link.unwrap_or_default();
            self.missed[d] = Some((
                link.1.packets[d]
                    .saturating_sub(start.packets[d])
                    .saturating_sub(so_far.0),
                link.1.bytes[d]
                    .saturating_sub(start.bytes[d])
                    .saturating_sub(so_far.1),
            ));
            // From here the program's cumulative counts are the direction's: the next interval
            // is their difference from now.
            let program = self.tier0.read_queues()?;
            for q in cur_q.iter_mut().filter(|q| q.dir == dir) {
                let p = program.iter().find(|p| p.dir == dir && p.queue == q.queue);
                q.packets = p.map_or(0, |p| p.packets);
                q.bytes = p.map_or(0, |p| p.bytes);
            }
            self.counter_notes.push(format!(
                "interval {}: the driver's per-queue {what} counters ({src}) counted {by_queues} packets where the interface counted {by_link}; \
                 {what} is counted by the {} program from the next interval on, and its flows from then on are sampled all the time",
                self.index,
                if dir == Dir::Rx { self.tier0.rx_source.as_str() } else { "net_dev_start_xmit" },
            ));
        }
        Ok(())
    }

    /// After an interval (`interval`; `cumulative`, every queue since the start): whether the
    /// device is idle, windows opened at once for what needs timing or splitting, and the
    /// first window's learning ended early on an idle device.
    fn plan_windows(
        &mut self,
        interval: &[QueueCounters],
        cumulative: &[QueueCounters],
    ) -> Result<()> {
        let Some(w) = self.windows.as_mut() else {
            return Ok(());
        };
        let at = Instant::now().saturating_duration_since(self.started);
        let unsplit = self.tx_split.as_ref().map_or(0, txsplit::TxSplit::unsplit);
        w.device_idle =
            interval.iter().map(|q| q.packets).sum::<u64>() + unsplit < IDLE_BELOW_PACKETS;
        w.time_untimed_queues(interval, cumulative, at);
        if self.tx_split.is_some() {
            if unsplit < OPEN_FOR_PACKETS {
                w.opened_for_split = 0;
            } else if w.opened_for_split < OPENED_FOR_SPLIT && w.schedule.open_at(at) {
                w.opened_for_split += 1;
                w.opened += 1;
            }
        }
        // The programs that learn which queue a NAPI instance serves have nothing to learn from
        // an idle device, and would bill the host's other devices until the first window
        // ends: they wait for the device to carry traffic.
        if !(w.learning && w.device_idle && w.phase == windows::Phase::Off) {
            return Ok(());
        }
        w.learning = false;
        let learned = w.opened_at.take();
        self.tier0.set_window_hooks(false)?;
        match learned {
            Some(from) => self.flow_window_ended((from, at)),
            None => Ok(()),
        }
    }

    /// Why the session ended early, if the interface or its namespace went away.
    pub fn gone(&self) -> Option<&str> {
        self.gone.as_deref()
    }

    /// How the interface went away, when it did.
    pub fn gone_how(&self) -> Option<topology::presence::Gone> {
        self.gone_how
    }

    pub fn has_miss_sampler(&self) -> bool {
        self.l3.as_ref().is_some_and(L3missProbe::has_sampler)
    }

    /// Wait (on the ring buffer's epoll, not a busy loop) until the next
    /// interval ends, `end` passes or `stop` is set; then take the snapshot.
    /// Returns the snapshot and whether this is the last one.
    pub fn next(&mut self, stop: &AtomicBool, end: Option<Instant>) -> Result<(Snapshot, bool)> {
        let interval_start = self.started + self.interval * self.index as u32;
        let mut deadline = interval_start + self.interval;
        if let Some(e) = end {
            deadline = deadline.min(e);
        }
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let mut wait = deadline
                .saturating_duration_since(now)
                .min(Duration::from_millis(200));
            if let (Some(w), Some(d)) = (self.windows.as_mut(), self.detail.as_mut()) {
                let at = now.saturating_duration_since(self.started);
                let tier0_windows = self.tier0.has_window_hooks();
                let closed = w.drive(d, self.l3.as_mut(), &mut self.tier0, tier0_windows, at)?;
                // Attaching and detaching take time (a tcx link waits for an RCU grace period),
                // and the schedule may have moved by it: the next change is reckoned from now.
                let now = Instant::now();
                wait = deadline
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(200));
                let at = now.saturating_duration_since(self.started);
                if let Some(c) = w.next_change(at) {
                    wait = wait.min(c - at);
                }
                if let Some(span) = closed {
                    self.flow_window_ended(span)?;
                }
                if let Some(why) = self.windows.as_mut().and_then(|w| w.flow_failure.take()) {
                    self.counter_notes.push(format!(
                        "interval {}: tier 0's window programs (flows, NAPI polls) did not attach for a window ({why}); such windows miss them",
                        self.index
                    ));
                }
            }
            if now >= deadline {
                break;
            }
            // Whole milliseconds: the ring's poll takes its timeout in ms, and a wait rounded
            // down to 0 would spin until a window's change.
            let wait = Duration::from_millis(wait.as_micros().div_ceil(1000) as u64);
            match &self.detail {
                Some(d) => d.poll(wait)?,
                None => std::thread::sleep(wait),
            }
        }
        let mut finishing =
            stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e);
        if let Some(w) = self.watch.as_mut() {
            // A check the kernel cannot answer says nothing: the next interval asks again.
            if let Ok(topology::presence::Presence::Gone(how, why)) = w.check() {
                self.gone = Some(why);
                self.gone_how = Some(how);
                finishing = true;
            }
        }

        let t_ns = monotonic_ns();
        // The counters are read at the interval's end as stamped, before the rest of the
        // snapshot is taken (reading the probes, closing a window can take tens of ms): read
        // after them, a reading spanned another length than the interval it was filed under.
        let mut counters = Vec::new();
        if let Some(s) = self.sampler.as_mut() {
            match s.read() {
                Ok(r) => counters = r,
                Err(e) => {
                    // Keep the software view going; say why counters stopped.
                    self.counter_notes.push(format!(
                        "counter reads stopped at interval {}: {e:#}",
                        self.index
                    ));
                    self.sampler = None;
                }
            }
        }
        let mut cur_q = self.tier0.read_queues()?;
        // The interface's totals just before and just after, to check the driver's counts
        // against (the counts were taken somewhere between the two) and to split TX by.
        let check = self.kstats.is_some() && self.kernel_counts.iter().any(|&c| c);
        let before = if check {
            self.watch.as_mut().and_then(|w| w.link_totals())
        } else {
            None
        };
        if let Some(k) = self.kstats.as_mut() {
            overlay_kernel_counts(&mut cur_q, &k.queues(), self.kernel_counts);
        }
        let after = if check || self.tx_split.is_some() {
            self.watch.as_mut().and_then(|w| w.link_totals())
        } else {
            None
        };
        if let (Some(s), Some(a)) = (self.tx_split.as_mut(), after) {
            let split = s.interval(&cur_q, (a.packets[1], a.bytes[1]));
            overlay_kernel_counts(&mut cur_q, &split, [false, true]);
        }
        let link = before.zip(after);
        // The window under way when the run ends is a window too.
        if finishing {
            let now = Instant::now().saturating_duration_since(self.started);
            if let Some(from) = self
                .windows
                .as_ref()
                .filter(|w| w.phase != windows::Phase::Off)
                .and_then(|w| w.opened_at)
            {
                self.flow_window_ended((from, now))?;
            }
        }
        if let Some(f) = self.flow_windows.as_mut() {
            f.driver_read(
                Instant::now()
                    .saturating_duration_since(self.started)
                    .as_secs_f64(),
                &cur_q,
            );
        }
        let (cur_s, mut cur_e, samples) = match self.detail.as_mut() {
            Some(d) => {
                let st = d.read_stages(finishing)?;
                let mut e = d.read_events()?;
                // The kernel wakes the ring's reader only once a quarter of it is full, so
                // most of an interval's records are still in it here: count them as received
                // once drained, like the records `sampled` counts.
                let samples = d.drain_samples();
                e.received = d.received();
                (st, e, samples)
            }
            None => (Vec::new(), EventCounters::default(), Vec::new()),
        };
        cur_e.queue_clamped += self.tier0.counter(qc_counter::QC_QUEUE_CLAMPED)?;
        let detail_ns = match self.windows.as_mut() {
            Some(w) => Some(w.take_detail(Instant::now().saturating_duration_since(self.started))),
            None if self.detail.is_some() => Some(t_ns - self.prev_t),
            None => Some(0),
        };
        let mut snap = Snapshot {
            index: self.index,
            t_ns,
            dur_ns: t_ns - self.prev_t,
            events: cur_e.delta(&self.prev_e),
            samples,
            detail_ns,
            ..Default::default()
        };
        let mut cur_q = combine(cur_q, &cur_s);
        snap.queues = interval_queues(&cur_q, &self.prev_q);
        for (d, dir) in [(0, Dir::Rx), (1, Dir::Tx)] {
            if let Some(m) = self.missed[d].take() {
                self.missed[d] = add_missed(&mut snap.queues, &mut cur_q, dir, m);
            }
        }
        // Not on the last snapshot: a window opened then would never run.
        if !finishing {
            self.plan_windows(&snap.queues, &cur_q)?;
        }
        if finishing {
            if let Some(n) = self
                .tx_split
                .as_ref()
                .map(txsplit::TxSplit::unsplit)
                .filter(|&n| n > 0)
            {
                self.counter_notes.push(format!(
                    "interval {}: {n} TX packets the interface counted at the end were in no window's split: they are in no TX queue",
                    self.index
                ));
            }
        }
        if let Some(n) = self.napi_windows.as_mut() {
            n.estimate(&mut snap.queues);
        }
        let flow_turn = finishing || self.index % self.flow_every == self.flow_every - 1;
        if !flow_turn {
            // Flows coming faster than a read per flow turn can take them: drained now.
            self.tier0.drain_flows_if_filling()?;
        }
        self.check_kernel_counts(link, &mut cur_q, &snap.queues)?;
        if flow_turn {
            let program = self.tier0.read_flows()?;
            snap.flow_overflow = self.tier0.flow_overflow().to_vec();
            let mut flows = flowscale::by_flow(match self.flow_windows.as_mut() {
                Some(f) => f.merge(program, &cur_q),
                None => program,
            });
            let from_sockets = self.socket_counts(&mut flows, finishing);
            snap.socket_queues = self
                .sockets
                .as_mut()
                .map(|s| s.table().queue_stats())
                .unwrap_or_default();
            snap.flows = flows
                .into_iter()
                .map(|f| {
                    let socket = from_sockets.contains(&f.key);
                    FlowCounters {
                        queue: f.queue,
                        packets: f.packets,
                        bytes: f.bytes,
                        payload_bytes: f.payload_bytes,
                        first_ns: f.first_ns,
                        last_ns: f.last_ns,
                        samples: (!socket).then_some(f.samples),
                        bytes_var: (!socket).then_some(f.bytes_var),
                        source: socket.then(|| "socket".to_string()),
                        key: f.key,
                    }
                })
                .collect();
            snap.drop_reasons = self.tier0.read_drop_reasons()?;
            if let Some(k) = self.kstats.as_mut() {
                snap.page_pools = k.page_pools();
                // Queues get new NAPI instances when the device is reconfigured.
                self.tier0.map_napi(&k.napi_queues())?;
            }
        }
        if let (Some(l3), Some(d)) = (self.l3.as_ref(), self.detail.as_ref()) {
            // A sample bumps the totals, then its queue's and flow's counts: one still being
            // taken while the maps are read lands in one and not the other. The last reading
            // is the recording's account, so the sampler stops before it.
            if finishing {
                l3.set_sampling(false)?;
            }
            let mut cur = l3.read_misses(flow_turn)?;
            let buf = d.read_buf_map()?;
            cur.buf = crate::snapshot::BufMapCounters {
                copy_linear_joined: cur.buf.copy_linear_joined,
                copy_frag_joined: cur.buf.copy_frag_joined,
                ..buf
            };
            let mut m = cur.delta(&self.prev_m);
            if let Some(w) = self.windows.as_mut() {
                m.sampled_ns =
                    Some(w.take_sampled(Instant::now().saturating_duration_since(self.started)));
            }
            m.flows = cur.flows.clone();
            m.regions = cur.regions.clone();
            self.prev_m = cur;
            snap.misses = Some(m);
        }
        snap.counters = counters;
        self.prev_q = cur_q;
        self.prev_e = cur_e;
        self.prev_t = t_ns;
        self.index += 1;
        Ok((snap, finishing))
    }
}

/// How the recording's notes say TX is counted once the interface's totals are split.
const TX_SPLIT_WORDS: &str = "TX totals come from the interface's own counters (exact), split across its queues by what the \
     net_dev_start_xmit program counted in the detail windows (estimated): that hook fires for every device on the host, \
     so it runs in the windows alone";

/// Fewer packets than this on the interface say nothing about whether the driver's per-queue
/// counters count them all (reads a moment apart already differ by a few).
const MIN_CHECKED_PACKETS: u64 = 1000;

/// The driver's packets and bytes in place of the programs' in the directions they cover
/// (NAPI and drop counts stay the programs').
fn overlay_kernel_counts(
    q: &mut Vec<QueueCounters>,
    kernel: &[crate::probe::kstats::QueueStat],
    covered: [bool; 2],
) {
    for k in kernel
        .iter()
        .filter(|k| covered[usize::from(k.dir == Dir::Tx)])
    {
        let (Some(packets), Some(bytes)) = (k.packets, k.bytes) else {
            continue;
        };
        match q.iter_mut().find(|c| c.dir == k.dir && c.queue == k.queue) {
            Some(c) => {
                c.packets = packets;
                c.bytes = bytes;
            }
            None => q.push(QueueCounters {
                packets,
                bytes,
                ..QueueCounters::new(k.dir, k.queue)
            }),
        }
    }
}

/// Packets and bytes counters missed, `missed`, given to the queues of `dir` that carried
/// traffic this interval (`interval`) in proportion to it, and to their cumulative counts
/// alike; None once given, else what is left for the next interval (none carried any).
fn add_missed(
    interval: &mut [QueueCounters],
    cumulative: &mut [QueueCounters],
    dir: Dir,
    missed: (u64, u64),
) -> Option<(u64, u64)> {
    let busy: Vec<usize> = (0..interval.len())
        .filter(|&i| interval[i].dir == dir && interval[i].packets > 0)
        .collect();
    if busy.is_empty() {
        return Some(missed);
    }
    let packets = txsplit::largest_remainder(
        missed.0,
        &busy
            .iter()
            .map(|&i| interval[i].packets)
            .collect::<Vec<_>>(),
    );
    let bytes = txsplit::largest_remainder(
        missed.1,
        &busy.iter().map(|&i| interval[i].bytes).collect::<Vec<_>>(),
    );
    for ((&i, p), b) in busy.iter().zip(packets).zip(bytes) {
        interval[i].packets += p;
        interval[i].bytes += b;
        if let Some(c) = cumulative
            .iter_mut()
            .find(|c| c.dir == dir && c.queue == interval[i].queue)
        {
            c.packets += p;
            c.bytes += b;
        }
    }
    None
}

/// Each queue's cumulative counters: tier 0's counts and the detail hooks' (disjoint fields).
fn combine(counts: Vec<QueueCounters>, stages: &[QueueCounters]) -> Vec<QueueCounters> {
    let mut out = counts;
    for s in stages {
        match out
            .iter_mut()
            .find(|q| q.dir == s.dir && q.queue == s.queue)
        {
            Some(q) => q.add(s),
            None => out.push(s.clone()),
        }
    }
    out
}

/// One interval's per-queue counters: the difference of two cumulative reads; queues with
/// nothing new are left out.
fn interval_queues(cur: &[QueueCounters], prev: &[QueueCounters]) -> Vec<QueueCounters> {
    let mut out: Vec<QueueCounters> = cur
        .iter()
        .map(
            |q| match prev.iter().find(|p| p.dir == q.dir && p.queue == q.queue) {
                Some(p) => q.delta(p),
                None => q.clone(),
            },
        )
        .filter(|d| !d.is_zero())
        .collect();
    out.sort_by_key(|q| (q.dir, q.queue));
    out
}

/// Whether the driver's per-queue counts of one direction over an interval, `by_queues`, fit
/// the interface's own totals. The driver's counters were read between the interface's totals
/// `now` = (before, after), and the last interval's between `prev` = (before, after), so what
/// they counted lies between the fewest and the most packets the interface can have carried
/// meanwhile, however far apart the reads were (a recorder descheduled between them on a busy
/// host). Judged on busy intervals only, with a margin of a twentieth.
fn driver_counts_fit(by_queues: u64, now: (u64, u64), prev: (u64, u64)) -> bool {
    let least = now.0.saturating_sub(prev.1);
    let most = now.1.saturating_sub(prev.0);
    let margin = least / 20;
    least < MIN_CHECKED_PACKETS || (by_queues + margin >= least && by_queues <= most + margin)
}

/// Drives the detail windows (crate::windows): attaches and detaches the detail hooks and
/// starts and stops the sampler as the recording passes through them, and measures how long
/// each ran.
struct WindowDriver {
    schedule: windows::Schedule<fn() -> f64>,
    phase: windows::Phase,
    /// Windows begun from all-off so far: the current one's number retires the packet states
    /// and CPU contexts of earlier ones.
    generation: u32,
    /// Time not yet reported that the sampler / the detail hooks ran, and since when they run
    /// (time since the start).
    sampled: Duration,
    sampling_since: Option<Duration>,
    detailed: Duration,
    detail_since: Option<Duration>,
    /// Windows the flow sampler could not attach for, and why the first could not (said once
    /// in the recording's notes; a device going away says so itself).
    flow_failures: u64,
    flow_failure: Option<String>,
    /// When the hooks last came on from all-off.
    opened_at: Option<Duration>,
    /// The window-only flow programs run from the start until the first window ends.
    learning: bool,
    /// Windows opened for each queue (direction, queue) that carried traffic with a stage
    /// untimed; at most `OPENED_PER_QUEUE` each.
    opened_for: std::collections::HashMap<(Dir, u32), u32>,
    /// Windows opened between the drawn ones so far.
    pub opened: u64,
    /// The drain under way.
    drain: Option<Drain>,
    /// The device carried fewer than `IDLE_BELOW_PACKETS` in the last interval.
    device_idle: bool,
    /// Windows opened at once for TX the interface counted that no window has split yet.
    opened_for_split: u32,
}

/// A drain under way, as last looked at.
struct Drain {
    began: Duration,
    /// The window's lives in flight.
    left: u64,
    /// Looks in a row at which no life had ended since the one before.
    idle: u32,
    /// Held on past the window's drain, with only the hooks that end a life.
    held: bool,
}

impl Drain {
    fn new(began: Duration, left: u64) -> Drain {
        Drain {
            began,
            left,
            idle: 0,
            held: false,
        }
    }

    /// A look at `at` found `left` of the window's lives in flight: until when the drain goes
    /// on, or None for it to end now.
    fn look(&mut self, left: u64, at: Duration) -> Option<Duration> {
        self.idle = if left < self.left { 0 } else { self.idle + 1 };
        self.left = left;
        let until = at + windows::DRAIN_STEP;
        (left > 0
            && self.idle < windows::DRAIN_PATIENCE
            && until <= self.began + windows::LONGEST_DRAIN)
            .then_some(until)
    }
}

/// Windows a queue may have opened for it while a stage of it is untimed: the cost of windows
/// stays near 1/duty whatever a queue does (one whose stages never get timed, such as a TX
/// queue of a driver without completion events, asks twice and stops).
const OPENED_PER_QUEUE: u32 = 2;

/// Packets a queue carries in an interval before a window is opened for it: a few packets of
/// a control connection are not traffic worth timing.
const OPEN_FOR_PACKETS: u64 = 100;

/// Below this many packets in an interval (both directions) the device is idle, and the
/// drawn windows are let pass (a busy neighbour would pay for them alone).
const IDLE_BELOW_PACKETS: u64 = 10;

/// Windows opened at once for TX that no window split yet, until one did: a path the TX
/// program cannot see asks this often and stops.
const OPENED_FOR_SPLIT: u32 = 2;

impl WindowDriver {
    fn new(cycle: Duration, duty: u32, sampled: bool) -> Option<WindowDriver> {
        let schedule = windows::Schedule::new(cycle, duty, sampled, fastrand::f64 as fn() -> f64)?;
        Some(WindowDriver {
            schedule,
            phase: windows::Phase::Off,
            generation: 0,
            sampled: Duration::ZERO,
            sampling_since: None,
            detailed: Duration::ZERO,
            detail_since: None,
            flow_failures: 0,
            flow_failure: None,
            opened_at: None,
            learning: false,
            opened_for: std::collections::HashMap::new(),
            opened: 0,
            drain: None,
            device_idle: false,
            opened_for_split: 0,
        })
    }

    /// Open a window now if a queue carried traffic this interval (`OPEN_FOR_PACKETS`) and a
    /// stage of it is untimed yet (`cumulative`: every queue's counters since the start): at
    /// 1/duty a queue busy for a few hundred milliseconds between two drawn windows would
    /// otherwise go without stage histograms. A stage no queue of its direction has timed is
    /// not asked for (a forwarding host copies nothing to sockets); one that others have is (a
    /// queue whose few timed packets were all coalesced away before their copy). Linear in
    /// the queues: this runs every interval.
    fn time_untimed_queues(
        &mut self,
        interval: &[QueueCounters],
        cumulative: &[QueueCounters],
        at: Duration,
    ) {
        let stages_of = |c: &QueueCounters| c.stage_count.map(|n| n > 0);
        // Per direction, the stages some queue has timed.
        let mut seen = [[false; NSTAGES]; 2];
        for c in cumulative {
            for (s, t) in seen[usize::from(c.dir == Dir::Tx)]
                .iter_mut()
                .zip(stages_of(c))
            {
                *s |= t;
            }
        }
        let own: std::collections::HashMap<(Dir, u32), [bool; NSTAGES]> = cumulative
            .iter()
            .map(|c| ((c.dir, c.queue), stages_of(c)))
            .collect();
        let untimed: Vec<(Dir, u32)> = interval
            .iter()
            .filter(|q| q.packets >= OPEN_FOR_PACKETS)
            .map(|q| (q.dir, q.queue))
            .filter(|k| self.opened_for.get(k).copied().unwrap_or(0) < OPENED_PER_QUEUE)
            .filter(|k| {
                let own = own.get(k).copied().unwrap_or_default();
                !own.contains(&true)
                    || seen[usize::from(k.0 == Dir::Tx)]
                        .iter()
                        .zip(own)
                        .any(|(&s, o)| s && !o)
            })
            .collect();
        if untimed.is_empty() || !self.schedule.open_at(at) {
            return;
        }
        self.opened += 1;
        for k in untimed {
            *self.opened_for.entry(k).or_insert(0) += 1;
        }
    }

    fn next_change(&mut self, at: Duration) -> Option<Duration> {
        self.schedule.next_change(at)
    }

    /// The time a span ran since the last call, up to `at`: the estimates scale by what it
    /// was, not by the nominal 1/duty (windows that overlap, a partial first or last cycle, a
    /// change made late).
    fn take(acc: &mut Duration, since: &mut Option<Duration>, at: Duration) -> u64 {
        let mut total = std::mem::take(acc);
        if let Some(s) = since.as_mut() {
            total += at.saturating_sub(*s);
            *s = at;
        }
        total.as_nanos() as u64
    }

    fn take_sampled(&mut self, at: Duration) -> u64 {
        Self::take(&mut self.sampled, &mut self.sampling_since, at)
    }

    fn take_detail(&mut self, at: Duration) -> u64 {
        Self::take(&mut self.detailed, &mut self.detail_since, at)
    }

    fn track(acc: &mut Duration, since: &mut Option<Duration>, was: bool, is: bool, at: Duration) {
        match (was, is) {
            (false, true) => *since = Some(at),
            (true, false) => {
                if let Some(s) = since.take() {
                    *acc += at.saturating_sub(s);
                }
            }
            _ => {}
        }
    }

    /// Whether a drain due to end at `at` is held on for another step: lives of the window
    /// ended within the last `DRAIN_PATIENCE` steps (a reader still copying them) and the drain
    /// is not at its longest. Those left when it stops are either waiting on a reader that has
    /// stalled or were freed where no hook sees, and are counted as cut.
    fn drain_goes_on(&mut self, detail: &mut PktlifeProbe, at: Duration) -> bool {
        let Some(drain) = self.drain.as_mut() else {
            return false;
        };
        let Some(until) = drain.look(detail.lives_in_flight(), at) else {
            return false;
        };
        if !drain.held {
            detail.keep_ends();
            drain.held = true;
        }
        self.schedule.hold_drain(until);
        true
    }

    /// Put the probes in the phase of `at` (time since the recording started).
    fn drive(
        &mut self,
        detail: &mut PktlifeProbe,
        mut l3: Option<&mut L3missProbe>,
        tier0: &mut QcountProbe,
        tier0_windows: bool,
        mut at: Duration,
    ) -> Result<Option<(Duration, Duration)>> {
        use windows::Phase;
        let mut phase = self.schedule.phase_at(at);
        if phase == Phase::Off && self.phase == Phase::Drain && self.drain_goes_on(detail, at) {
            phase = Phase::Drain;
        }
        // A device that carried next to nothing has nothing to time, and the detail hooks
        // would bill only the host's other devices: its drawn windows are let pass.
        if self.phase == Phase::Off && phase != Phase::Off && self.device_idle && !self.learning {
            phase = Phase::Off;
        }
        if phase == self.phase {
            return Ok(None);
        }
        let (was, is) = (self.phase, phase);
        // The sampler stops first and starts last: it never runs without the hooks.
        if was == Phase::Window {
            if let Some(l) = l3.as_deref() {
                l.set_sampling(false)?;
            }
        }
        match is {
            Phase::Off => {
                // The detail hooks and tier 0's programs ran until they are detached: the
                // window's time and the flow programs' span end then.
                let closing = Instant::now();
                detail.close_window();
                at += closing.elapsed();
                if tier0_windows {
                    tier0.set_window_hooks(false)?;
                }
            }
            Phase::Drain => {
                detail.stop_starts();
                self.drain = Some(Drain::new(at, detail.lives_in_flight()));
            }
            Phase::Warmup | Phase::Window if matches!(was, Phase::Off | Phase::Drain) => {
                // From all-off, a new generation: what the hooks left when they went away is
                // stale. From a drain the hooks never left, and the lives in it go on.
                if was == Phase::Off {
                    self.generation = self.generation.wrapping_add(1);
                }
                // Tier 0's window programs first and the detail hooks after them (they leave
                // in the opposite order): the detail hooks, the costly ones per packet, are
                // not held on while tier 0's tcx link waits for its grace period, and
                // detaching them never takes a tracepoint's first program from under
                // another's (which waits for one too).
                if tier0_windows && was == Phase::Off {
                    let attaching = Instant::now();
                    // A window without tier 0's programs (one would not attach) still has its detail.
                    if let Err(e) = tier0.set_window_hooks(true) {
                        self.flow_failures += 1;
                        if self.flow_failures == 1 {
                            self.flow_failure = Some(format!("{e:#}"));
                        }
                    }
                    // The window's time starts when the detail hooks come on.
                    let took = attaching.elapsed();
                    self.schedule.postpone(at, took);
                    at += took;
                }
                detail.open_window(self.generation)?;
                if let Some(l) = l3.as_deref_mut() {
                    l.set_window(monotonic_ns(), self.generation)?;
                }
            }
            _ => {}
        }
        if is != Phase::Drain {
            self.drain = None;
        }
        if is == Phase::Window {
            if let Some(l) = l3.as_deref() {
                l.set_sampling(true)?;
            }
        }
        // The span the window-only flow programs ran, once it ends.
        if was == Phase::Off && !self.learning {
            self.opened_at = Some(at);
        }
        if is == Phase::Off {
            self.learning = false;
        }
        let flow_span = self
            .opened_at
            .filter(|_| tier0_windows && is == Phase::Off)
            .map(|from| (from, at));
        Self::track(
            &mut self.sampled,
            &mut self.sampling_since,
            was == Phase::Window,
            is == Phase::Window,
            at,
        );
        Self::track(
            &mut self.detailed,
            &mut self.detail_since,
            was != Phase::Off,
            is != Phase::Off,
            at,
        );
        self.phase = phase;
        Ok(flow_span)
    }
}
#[cfg(test)]
mod tests {
    use super::{combine, driver_counts_fit, interval_queues, windows, Drain};
    use crate::snapshot::{Dir, QueueCounters};
    use std::time::Duration;

    /// A drain goes on while lives end, through a reader's pause shorter than its patience,
    /// and ends once none has ended for that long, none is left, or at its longest.
    #[test]
    fn a_drain_goes_on_while_lives_end_and_not_past_its_patience_or_length() {
        let ms = Duration::from_millis;
        let step = windows::DRAIN_STEP;
        // Lives still ending at the window's drain: held a step at a time; a pause of fewer
        // than DRAIN_PATIENCE looks is waited out; then as many looks without an end stop it.
        let mut d = Drain::new(ms(0), 100);
        let mut at = windows::MAX_DRAIN;
        assert_eq!(d.look(60, at), Some(at + step));
        for _ in 1..windows::DRAIN_PATIENCE {
            at += step;
            assert_eq!(
                d.look(60, at),
                Some(at + step),
                "a pause shorter than the patience"
            );
        }
        at += step;
        assert_eq!(d.look(40, at), Some(at + step), "lives end again");
        for _ in 1..windows::DRAIN_PATIENCE {
            at += step;
            assert!(d.look(40, at).is_some());
        }
        at += step;
        assert_eq!(
            d.look(40, at),
            None,
            "no life ended for the patience: the rest are cut"
        );
        // None left: over at once.
        assert_eq!(Drain::new(ms(0), 100).look(0, windows::MAX_DRAIN), None);
        // Lives ending steadily: held until the longest drain, not past it.
        let mut d = Drain::new(ms(0), 10_000);
        let (mut at, mut left) = (windows::MAX_DRAIN, 10_000);
        while let Some(until) = d.look(left, at) {
            assert!(until <= windows::LONGEST_DRAIN);
            (at, left) = (until, left - 1);
        }
        assert!(at + step > windows::LONGEST_DRAIN, "ended early at {at:?}");
    }

    /// The driver's counts are judged against the range the interface's totals around both
    /// reads allow: a recorder descheduled between its reads is no miss, a path the counters
    /// miss (or counts twice) still is, and a quiet interval is not judged.
    #[test]
    fn driver_counts_are_judged_against_the_interfaces_range() {
        // Read back to back: the counts match the interface's.
        assert!(driver_counts_fit(10_000, (11_000, 11_000), (1_000, 1_000)));
        // 50 000 packets arrived while the recorder was off the CPU between its two reads of
        // the interface's totals; the driver's counters, read in between, saw 40 000 of the
        // interval's. Judged against the totals after alone, that was a third short.
        assert!(driver_counts_fit(40_000, (10_000, 60_000), (0, 0)));
        // Half the packets on a path the counters miss, however close the reads.
        assert!(!driver_counts_fit(10_000, (20_000, 20_100), (0, 0)));
        // More than the interface can have carried.
        assert!(!driver_counts_fit(30_000, (20_000, 20_100), (0, 0)));
        // Within the margin of a twentieth either side.
        assert!(driver_counts_fit(19_100, (20_000, 20_000), (0, 0)));
        assert!(driver_counts_fit(20_900, (20_000, 20_000), (0, 0)));
        // Too few packets to judge.
        assert!(driver_counts_fit(0, (900, 900), (0, 0)));
    }

    /// Tier 0's counts and the detail's stages make one queue; an interval is the difference
    /// of two such reads, and a queue with nothing new is left out.
    #[test]
    fn counts_and_stages_combine_and_difference() {
        let counts = |p: u64| {
            vec![QueueCounters {
                packets: p,
                bytes: p * 100,
                ..QueueCounters::new(Dir::Rx, 1)
            }]
        };
        let mut st = QueueCounters::new(Dir::Rx, 1);
        st.handups = 5;
        st.stage_count[0] = 3;
        st.stage_max_ns[0] = 900;
        let a = combine(counts(10), &[st.clone()]);
        assert_eq!(
            (a[0].packets, a[0].handups, a[0].stage_count[0]),
            (10, 5, 3)
        );
        st.stage_count[0] = 4;
        let b = combine(
            counts(25),
            &[
                st.clone(),
                QueueCounters {
                    handups: 1,
                    ..QueueCounters::new(Dir::Tx, 0)
                },
            ],
        );
        let d = interval_queues(&b, &a);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (
                d[0].packets,
                d[0].bytes,
                d[0].stage_count[0],
                d[0].stage_max_ns[0]
            ),
            (15, 1500, 1, 900)
        );
        assert_eq!((d[1].dir, d[1].handups), (Dir::Tx, 1));
        assert!(interval_queues(&b, &b).is_empty());
    }

    /// The first instant from `t` with no drawn window on, nor one beginning within a window's
    /// length (a window opened for a queue would then wait for that one); `w` draws windows of
    /// 1/32 of a second.
    fn quiet(w: &mut super::WindowDriver, mut t: std::time::Duration) -> std::time::Duration {
        let window = std::time::Duration::from_secs(1) / 32;
        while w.schedule.phase_at(t) != super::windows::Phase::Off
            || w.schedule.next_change(t).is_some_and(|c| c <= t + window)
        {
            t += std::time::Duration::from_millis(1);
        }
        t
    }

    /// A queue with traffic and no stage timed gets a window at once, at most
    /// OPENED_PER_QUEUE times; a few packets, or a queue already timed, get none.
    #[test]
    fn a_busy_queue_without_stages_gets_a_window_opened_at_most_twice() {
        use super::{windows::Phase, WindowDriver, OPENED_PER_QUEUE, OPEN_FOR_PACKETS};
        use std::time::Duration;
        let ms = Duration::from_millis;
        let busy = |q: u32, n: u64| QueueCounters {
            packets: n,
            ..QueueCounters::new(Dir::Rx, q)
        };
        let mut timed = busy(1, 5000);
        timed.stage_count[0] = 7;
        let mut w =
            WindowDriver::new(Duration::from_secs(1), 32, false).expect("duty 32 has windows");
        let t = quiet(&mut w, ms(0));
        w.time_untimed_queues(
            &[busy(0, OPEN_FOR_PACKETS - 1), timed.clone()],
            &[timed.clone()],
            t,
        );
        assert_eq!(w.opened, 0);
        w.time_untimed_queues(&[busy(0, 500)], &[busy(0, 500)], t);
        assert_eq!(w.opened, 1);
        // No sampler, no warm-up: the window proper opens at once.
        assert_eq!(w.schedule.phase_at(t), Phase::Window);
        // Still untimed after its windows: it stops asking.
        let mut at = t;
        for _ in 0..10 {
            at = quiet(&mut w, at + Duration::from_secs(3));
            w.time_untimed_queues(&[busy(0, 500)], &[busy(0, 500)], at);
        }
        assert_eq!(w.opened, u64::from(OPENED_PER_QUEUE));
    }

    /// A busy queue is timed once it has every stage some queue of its direction has: one
    /// whose few timed packets never reached a copy that others reached gets a window, and a
    /// stage no queue has (nothing copied to sockets when forwarding) is not asked for.
    #[test]
    fn a_busy_queue_missing_a_stage_others_have_gets_a_window() {
        use super::WindowDriver;
        use std::time::Duration;
        let ms = Duration::from_millis;
        let queue = |q: u32, stages: &[usize]| {
            let mut c = QueueCounters {
                packets: 5000,
                ..QueueCounters::new(Dir::Rx, q)
            };
            for &s in stages {
                c.stage_count[s] = 3;
            }
            c
        };
        let mut w =
            WindowDriver::new(Duration::from_secs(1), 32, false).expect("duty 32 has windows");
        let t = quiet(&mut w, ms(0));
        // Forwarding: no queue has a copy stage, so stages 0 and 3 are all there is.
        let forwarded = [queue(0, &[0, 3]), queue(1, &[0, 3])];
        w.time_untimed_queues(&forwarded, &forwarded, t);
        assert_eq!(w.opened, 0);
        // Queue 1 lacks the copy stage that queue 0 has: it asks.
        let delivered = [queue(0, &[0, 1, 2, 3]), queue(1, &[0, 3])];
        w.time_untimed_queues(&delivered[1..], &delivered, t);
        assert_eq!(w.opened, 1);
    }

    #[test]
    fn join_sample_is_a_power_of_two_up_to_the_cap() {
        for ok in ["1", "2", "4", "16"] {
            assert!(super::parse_join_sample(ok).is_ok(), "{ok}");
        }
        for bad in ["0", "3", "32", "-4", "four"] {
            assert!(super::parse_join_sample(bad).is_err(), "{bad}");
        }
    }
}
