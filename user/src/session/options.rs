//! The flags `record`, `top` and `serve` share and the options a session is started with:
//! which interface, how much detail, how L3 misses are sampled, and the label a recording
//! keeps for that.
use serde::{Deserialize, Serialize};

use crate::counters::CountersMode;
use crate::probe::features::HookChoice;
use crate::probe::l3miss::MissSource;
use crate::probe::qcount::RxChoice;

use super::windows;

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
    /// Tier 0 only: exact totals, per-queue counts and sampled flows (no stages, records or
    /// attribution); its sampling programs run in the windows of `--duty`, or all the time
    /// with `--duty 1`.
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

/// `--run-budget`: a finite number of runs per packet, 0 or more.
fn runs_per_packet(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of runs per packet (0 or more, e.g. 0.08)"
        )),
    }
}

/// How much detail `record` takes beyond the exact counts, and how flows are counted.
#[derive(Debug, Clone, clap::Args)]
pub struct DetailArgs {
    /// Per-packet detail beyond the exact counts: counts (tier 0 alone: its programs for
    /// flows, queue splits, NAPI polls and drops in the windows of --duty, or all the time
    /// with --duty 1 for exact polls and drops), windows (stages, packet records and
    /// attribution too, in the same windows), or full (every detail hook for the whole run,
    /// flows exact; for short deep dives).
    #[arg(long = "detail", value_enum, default_value = "windows")]
    pub mode: DetailMode,
    /// With --detail windows or counts: the window programs run 1/N of each second, in one
    /// window at a random place. With windows: the detail hooks and the L3-miss sampler (the
    /// sampler at N times its rate inside, so the sample count stays about the same), after a
    /// warm-up and before a drain of up to 10 ms each; a queue that carries traffic before
    /// any of its stages is timed gets a window opened for it at once. With counts: tier 0's
    /// programs for flows, queue splits, NAPI polls and drops alone, no warm-up or drain.
    /// 1: always on. Default: 32, with windows cut to --window-packets on a busy device;
    /// given, every window runs its 1/N of the second unless --window-packets is given too.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=windows::MAX_DUTY as i64))]
    pub duty: Option<u32>,
    /// With --detail windows or counts: on a busy device each window is cut to about this
    /// many packets (both directions, at the last interval's rate; at least 2 ms), so the
    /// window programs' runs stay near this many packets' worth a second however fast the
    /// device runs. 0: every window runs its 1/N of the second. Default: 1024, or 0 with
    /// --duty given.
    #[arg(long, value_name = "PACKETS")]
    pub window_packets: Option<u64>,
    /// With --detail windows or counts: the programs may run this many times per packet of
    /// the device (both directions), on average; a drawn window is let pass while they have
    /// run more.
    /// A packet inside a window passes every hook on its path, and a host-wide hook runs for
    /// the host's other packets too, so where many hooks fire per packet (a veth with its own
    /// offloads: 9 per GSO skb) the windows come less often than once a cycle. 0: no budget.
    /// Default: 0.08 (about 8 ns of BPF time per packet at 100 ns a run), or 0 with --duty
    /// given.
    #[arg(long, value_name = "RUNS", value_parser = runs_per_packet)]
    pub run_budget: Option<f64>,
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
            duty: None,
            window_packets: None,
            run_budget: None,
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
        self.miss
            .duty
            .or(self.detail.duty)
            .unwrap_or(windows::DEFAULT_DUTY)
    }

    /// Packets a detail window is cut to on a busy device: as given, else none when a duty
    /// was asked for (its 1/N of the time, as asked), else the default budget.
    pub fn window_packets(&self) -> u64 {
        let duty_asked = self.miss.duty.or(self.detail.duty).is_some();
        self.detail.window_packets.unwrap_or(if duty_asked {
            0
        } else {
            windows::WINDOW_PACKETS
        })
    }

    /// Program runs per packet the windows are held to: as given, else none when a duty was
    /// asked for (its 1/N of the time, as asked), else the default budget.
    pub fn run_budget(&self) -> f64 {
        let duty_asked = self.miss.duty.or(self.detail.duty).is_some();
        self.detail
            .run_budget
            .unwrap_or(if duty_asked { 0.0 } else { windows::RUN_BUDGET })
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

#[cfg(test)]
mod tests {
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
