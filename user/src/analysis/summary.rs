//! The summary of a recording: the per-queue, per-flow, event-loss, counter and L3-miss
//! numbers every report shows, built once per command (`report` prints it, and the
//! observation and the attribution evidence read its counters and misses).
use anyhow::Result;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::recording::Recording;
use crate::snapshot::{hist_percentile, Dir, QueueCounters, NSTAGES};
use crate::units::fmt_duration;

#[derive(Debug, Serialize)]
pub struct Summary {
    pub meta: Meta,
    /// The part of the recording reported on.
    pub window: crate::recording::window::Window,
    /// Which tier of the recorder each kind of number comes from.
    pub tiers: Tiers,
    pub queues: Vec<QueueReport>,
    /// Every flow, the largest first (serialized element by element: see report::json).
    #[serde(serialize_with = "crate::report::json::deferred_field")]
    pub flows: Vec<FlowReport>,
    /// Each queue's flow overflow bucket over the whole run: what no BPF flow table entry
    /// could take (in no flow above), and sampled skbs that were no TCP/UDP flow.
    pub flow_overflow: Vec<crate::probe::qcount::FlowOverflow>,
    pub events: Events,
    pub drops: Drops,
    pub counters: CountersReport,
    pub l3miss: MissReport,
    /// Every queue's totals with their histograms, for the charts and the model's input.
    #[serde(skip)]
    pub totals: Vec<QueueCounters>,
    /// What `--queue`, `--dir` and `--flow` left out (absent without a filter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<super::filter::Excluded>,
}

/// The sampler stopped by the kernel (perf_event_max_sample_rate): misses in those windows
/// were not sampled. A rough indicator of what the counts miss: nothing for stops in idle time
/// (a CPU without ticks), more than `stopped_pct` for stops in the bursts that trigger them.
#[derive(Debug, Clone, Serialize)]
pub struct ThrottleReport {
    pub throttles: u64,
    pub stopped_ms: f64,
    /// Of the sampler's CPU time (CPUs × recording length); None when the CPU count is unknown.
    pub stopped_pct: Option<f64>,
    /// Throttle records the ring dropped: the figures are then approximate.
    pub records_lost: u64,
}

/// L3-miss samples and how they were charged, with the event behind them.
#[derive(Debug, Serialize)]
pub struct MissReport {
    /// The sampling event, or why there is none.
    pub source: String,
    pub samples: u64,
    pub on_packet_buffers: u64,
    pub other_addr: u64,
    /// Samples on pages outside the join's sampled subset (`--join-sample`): not looked up,
    /// so charged by CPU context (or left uncharged) like any unjoined sample.
    pub out_of_subset: u64,
    /// The join's page sampling: 1 in this many buffer pages (1: every page).
    pub join_sample: u64,
    /// Attribution windows (`record --miss-duty`): the sampler ran 1/this many of each
    /// interval (1: always on).
    pub duty: u64,
    /// The sampler's span in each window, the cycle holding one window and the warm-up before
    /// it (ms), when in windows.
    pub window_ms: Option<f64>,
    pub cycle_ms: Option<f64>,
    /// How long the sampler ran in all, measured by the recorder (None: always on, or not
    /// measured), and what that makes the duty: the recording's length over it.
    pub sampled_ms: Option<f64>,
    pub duty_measured: Option<f64>,
    pub warmup_ms: Option<f64>,
    /// Joined samples on pages last kept before their window: owner from an earlier window,
    /// age unknown.
    pub before_window: u64,
    pub no_addr: u64,
    pub ctx_charged: u64,
    pub uncharged: u64,
    /// Charged samples with no flow key (None: a recording from before this count).
    pub no_flow: Option<u64>,
    /// Charged samples lost to the flow view: their flow was evicted from the probes' LRU flow
    /// map (charges to queues − charges to the flows read back − charges without a flow).
    pub flow_charges_lost: Option<u64>,
    /// Charged samples whose queue number exceeded the probes' table, counted on its last queue.
    pub queue_clamped: u64,
    /// The kernel's throttling of the sampler over the recording (absent: not measured, see
    /// `throttle_unmeasured`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleReport>,
    /// Why throttling was not measured, when a sampler ran and it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle_unmeasured: Option<String>,
    /// Joined samples: p50/p99 ns between the buffer's hand-up and the miss.
    pub age_p50_ns: Option<u64>,
    pub age_p99_ns: Option<u64>,
    /// Joined samples against their packets' own lifetime (absent without joined samples or
    /// timed packets).
    pub age_split: Option<AgeSplit>,
    /// Joined samples per log2 age bucket (bucket b: [2^b, 2^(b+1)) ns since hand-up).
    #[serde(skip)]
    pub age_hist: Vec<u64>,
    pub queues: Vec<MissQueue>,
    pub flows: Vec<MissFlow>,
    /// (2 MiB region start address, samples), busiest first.
    pub regions: Vec<(String, u64)>,
    /// Which packet buffers the join maps, and how the frag pages' addresses are known (or why not).
    pub buffer_join: String,
    pub buffer_map: BufferMapReport,
}

/// When a joined miss came, relative to the life of a packet buffer (hand-up to free, p99 over
/// every queue's timed packets: RX driver → free, TX xmit → free). Within it, the buffer's lines
/// were evicted while its packet was still being handled: DMA leaked before use. After it, the page
/// was read again once its packet had gone: late reuse of the memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AgeSplit {
    pub life_p99_ns: u64,
    pub within_life: u64,
    pub after_life: u64,
}

/// Split a log2 age histogram at `bound` ns; a bucket that straddles it is split in proportion
/// to the part of its range on each side (as `hist_percentile` interpolates).
fn split_ages(age: &[u64], bound: u64) -> (u64, u64) {
    let mut within = 0.0;
    for (b, &c) in age.iter().enumerate() {
        let lo = if b == 0 { 0.0 } else { (1u64 << b) as f64 };
        let hi = (1u64 << (b + 1)) as f64;
        within += c as f64 * ((bound as f64 - lo) / (hi - lo)).clamp(0.0, 1.0);
    }
    let total: u64 = age.iter().sum();
    let within = (within.round() as u64).min(total);
    (within, total - within)
}

/// The lifetime histogram the joined ages are set against: each direction's (RX driver → free,
/// TX xmit → free) as a distribution, mixed in proportion to that direction's joined samples, so
/// slow TX completions do not stretch the bound for RX buffers (log2 buckets, counts scaled to
/// the joined samples).
fn life_mixture(life: &[[u64; crate::snapshot::NBUCKETS]; 2], joined: [u64; 2]) -> Vec<u64> {
    let mut mix = vec![0.0; crate::snapshot::NBUCKETS];
    for (h, &w) in life.iter().zip(&joined) {
        let n: u64 = h.iter().sum();
        if n == 0 || w == 0 {
            continue;
        }
        for (m, &c) in mix.iter_mut().zip(h) {
            *m += w as f64 * c as f64 / n as f64;
        }
    }
    // Scaled up so that rounding keeps the shape of a small histogram.
    mix.iter().map(|m| (m * 1000.0).round() as u64).collect()
}

/// The packet-buffer page map over the recording.
#[derive(Debug, Default, Serialize)]
pub struct BufferMapReport {
    /// Pages the table holds (sets × ways; a new page takes the way with the older hand-up).
    pub capacity: Option<u64>,
    /// Largest and last entry count read during the recording.
    pub entries_max: Option<u64>,
    pub entries_last: Option<u64>,
    /// Pages written and left out over the recording (the snapshot counters, summed).
    #[serde(flatten)]
    pub pages: crate::snapshot::BufMapCounters,
}

#[derive(Debug, Serialize)]
pub struct MissQueue {
    pub dir: Dir,
    pub queue: u32,
    pub addr_join: u64,
    pub cpu_ctx: u64,
}

#[derive(Debug, Serialize)]
pub struct MissFlow {
    pub dir: Dir,
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    pub addr_join: u64,
    pub cpu_ctx: u64,
}

fn miss_report(rec: &Recording, totals: &[QueueCounters]) -> Result<MissReport> {
    let mut m = empty_miss_report(rec);
    let life = life_hists(totals);
    let Some(t) = rec.miss_totals()? else {
        return Ok(m);
    };
    take_miss_totals(&mut m, &t);
    take_sampler_time(&mut m, rec, &t);
    let charged: u64 = m.queues.iter().map(|q| q.addr_join + q.cpu_ctx).sum();
    let to_flows: u64 = m.flows.iter().map(|f| f.addr_join + f.cpu_ctx).sum();
    // The queue counts and the flow map are read one after the other while samples keep
    // coming, queues first: a difference within 0.1 % is that, not loss.
    m.flow_charges_lost = m
        .no_flow
        .map(|n| charged.saturating_sub(to_flows + n))
        .map(|d| if d * 1000 <= charged { 0 } else { d });
    take_ages(&mut m, t.totals.age_hist.clone(), &life);
    Ok(m)
}

/// The report as the recording's metadata alone describes it: what a recording without
/// miss rows shows.
fn empty_miss_report(rec: &Recording) -> MissReport {
    MissReport {
        source: rec
            .meta
            .miss_sampling
            .clone()
            .unwrap_or_else(|| "absent (not recorded)".into()),
        samples: 0,
        on_packet_buffers: 0,
        other_addr: 0,
        out_of_subset: 0,
        join_sample: rec.meta.join_sample.filter(|n| *n >= 1).unwrap_or(1),
        duty: rec.meta.miss_duty.filter(|n| *n >= 1).unwrap_or(1),
        window_ms: rec.meta.miss_window_ms,
        cycle_ms: rec.meta.miss_cycle_ms,
        sampled_ms: None,
        duty_measured: None,
        warmup_ms: rec.meta.miss_warmup_ms,
        before_window: 0,
        no_addr: 0,
        ctx_charged: 0,
        uncharged: 0,
        no_flow: None,
        flow_charges_lost: None,
        queue_clamped: 0,
        throttle: None,
        throttle_unmeasured: rec.meta.miss_throttle.clone(),
        age_p50_ns: None,
        age_p99_ns: None,
        age_split: None,
        age_hist: Vec::new(),
        queues: Vec::new(),
        flows: Vec::new(),
        regions: Vec::new(),
        buffer_join: rec
            .meta
            .buffer_join
            .clone()
            .unwrap_or_else(|| "not recorded".into()),
        buffer_map: BufferMapReport {
            capacity: rec.meta.buf_pages_capacity,
            ..Default::default()
        },
    }
}

/// The life histograms per direction (RX, TX) the sample ages are held against: stage 3
/// (RX driver → free) and 2 (TX xmit → free), from the time the join dates a buffer by to
/// the free.
fn life_hists(totals: &[QueueCounters]) -> [[u64; crate::snapshot::NBUCKETS]; 2] {
    let mut life = [[0u64; crate::snapshot::NBUCKETS]; 2];
    for q in totals {
        let (d, stage) = if q.dir == Dir::Rx { (0, 3) } else { (1, 2) };
        for (l, c) in life[d].iter_mut().zip(&q.stage_hist[stage]) {
            *l += c;
        }
    }
    life
}

/// The recorded sample counts, queue and flow charges and buffer-map state, as summed.
fn take_miss_totals(m: &mut MissReport, t: &crate::recording::reader::MissTotals) {
    let x = &t.totals;
    m.samples = x.samples;
    m.on_packet_buffers = x.on_packet_buffers;
    m.other_addr = x.other_addr;
    m.out_of_subset = x.out_of_subset;
    m.before_window = x.before_window;
    m.no_flow = x.no_flow;
    m.queue_clamped = x.queue_clamped;
    m.no_addr = x.no_addr;
    m.ctx_charged = x.ctx_charged;
    m.uncharged = x.uncharged;
    m.buffer_map.pages = x.buf.clone();
    m.buffer_map.entries_max = t.entries_max;
    m.buffer_map.entries_last = x.buf.entries;
    m.buffer_map.pages.entries = None;
    m.queues = x
        .queues
        .iter()
        .map(|&(dir, queue, a, c)| MissQueue {
            dir,
            queue,
            addr_join: a,
            cpu_ctx: c,
        })
        .collect();
    m.flows = x
        .flows
        .iter()
        .map(|(k, a, c)| MissFlow {
            dir: k.dir,
            proto: k.proto.clone(),
            src: k.src.clone(),
            sport: k.sport,
            dst: k.dst.clone(),
            dport: k.dport,
            addr_join: *a,
            cpu_ctx: *c,
        })
        .collect();
    m.regions = x
        .regions
        .iter()
        .map(|(r, n)| (format!("{:#x}", r << 21), *n))
        .collect();
    m.flows
        .sort_by_key(|f| std::cmp::Reverse(f.addr_join + f.cpu_ctx));
    if m.samples == 0 {
        m.no_flow = None;
    }
}

/// How long the sampler ran and how long the kernel throttled it: what scales the samples
/// to misses.
fn take_sampler_time(
    m: &mut MissReport,
    rec: &Recording,
    t: &crate::recording::reader::MissTotals,
) {
    let x = &t.totals;
    let cpus: Option<f64> = rec.meta.miss_sampler_cpus.map(|n| n as f64);
    let span_s = rec.duration_s();
    if m.duty > 1 {
        m.sampled_ms = x.sampled_ns.map(|ns| ns as f64 / 1e6);
        m.duty_measured = x
            .sampled_ns
            .filter(|&ns| ns > 0)
            .map(|ns| t.span_ns as f64 / ns as f64);
    }
    // The time the sampler ran: measured, else the nominal share.
    let sampler_s = m.sampled_ms.map_or(span_s / m.duty as f64, |ms| ms / 1e3);
    m.throttle = x.throttle.map(|t| ThrottleReport {
        throttles: t.throttles,
        stopped_ms: t.throttled_ns as f64 / 1e6,
        // Of the time the sampler ran (in windows, a part of the recording).
        stopped_pct: cpus
            .filter(|c| *c > 0.0 && sampler_s > 0.0)
            .map(|c| (100.0 * t.throttled_ns as f64 / 1e9 / (c * sampler_s)).min(100.0)),
        records_lost: t.records_lost,
    });
}

/// The samples' ages since their buffer's hand-up, and how many lie past the p99 of the
/// packet lives (a mixture of the directions by the samples joined to each).
fn take_ages(m: &mut MissReport, age: Vec<u64>, life: &[[u64; crate::snapshot::NBUCKETS]; 2]) {
    m.age_p50_ns = hist_percentile(&age, 50.0, 0);
    m.age_p99_ns = hist_percentile(&age, 99.0, 0);
    let joined = [Dir::Rx, Dir::Tx].map(|d| {
        m.queues
            .iter()
            .filter(|q| q.dir == d)
            .map(|q| q.addr_join)
            .sum::<u64>()
    });
    if age.iter().any(|&c| c > 0) {
        m.age_split = hist_percentile(&life_mixture(life, joined), 99.0, 0).map(|p99| {
            let (within_life, after_life) = split_ages(&age, p99);
            AgeSplit {
                life_p99_ns: p99,
                within_life,
                after_life,
            }
        });
    }
    m.age_hist = age;
}

/// Queues listed per direction at most, idle or not (the probes count up to 64).
const MAX_LISTED_QUEUES: u32 = 64;

/// The socket DDIO view, with where its numbers came from.
#[derive(Debug, Serialize)]
pub struct CountersReport {
    pub platform: String,
    /// live | software | imported | absent
    pub source: String,
    pub sockets: Vec<crate::counters::SocketMetrics>,
    pub warnings: Vec<String>,
    pub notes: Vec<String>,
    pub readings: usize,
    /// The NIC's own IIO port (its root bus's IIO box), when known.
    pub nic_port: Option<NicPort>,
    /// False when the recording host's CPU has no DDIO (not an Intel Xeon server part); None
    /// when not known.
    pub cpu_has_ddio: Option<bool>,
    /// Why there are no DDIO numbers (None: there are).
    pub absent_why: Option<String>,
    /// How to get them, where this host can.
    pub next_step: Option<String>,
    /// Counters that measure the same DMA checked against one another (None: no check could
    /// be made: no DDIO counters).
    pub self_checks: Option<SelfCheckReport>,
    /// Inbound bandwidth per PCIe stack and per socket, as pcm-iio shows it (empty: no IIO or
    /// CHA write/read counts).
    pub stacks: Vec<crate::counters::stacks::StackRow>,
}

#[derive(Debug, Serialize)]
pub struct SelfCheckReport {
    /// False when a check failed in more than `selfcheck::UNTRUSTED_SHARE` of its intervals.
    pub trusted: bool,
    pub checks: Vec<crate::counters::selfcheck::CheckSummary>,
    /// How the checks were made (per recording interval, or over an imported capture's span).
    pub note: String,
}

/// The counter self-checks over the window: per group of recording intervals for live
/// readings (with the NIC's RX from tier 0), over the whole span for an imported capture
/// (whose intervals are not the recording's: no RX check then).
fn self_checks(
    rec: &Recording,
    source: &str,
    totals: &[crate::counters::CounterReading],
) -> Result<Option<SelfCheckReport>> {
    use crate::counters::selfcheck::{check_interval, Nic, NicRx, SelfChecks};
    let iface = rec.iface();
    let nic = Nic {
        socket: iface.counter_socket(),
        iio_box: iface.iio_box.as_deref(),
    };
    let mut checks = SelfChecks::default();
    let note = if source == crate::counters::CounterSource::Live.as_str() {
        for g in rec.interval_groups(Some(source))? {
            if g.counters.is_empty() {
                continue;
            }
            let rx = g
                .queues
                .iter()
                .filter(|q| q.dir == crate::snapshot::Dir::Rx)
                .fold(
                    NicRx {
                        bytes: 0.0,
                        packets: 0.0,
                    },
                    |a, q| NicRx {
                        bytes: a.bytes + q.bytes as f64,
                        packets: a.packets + q.packets as f64,
                    },
                );
            checks.add(g.first, &check_interval(&g.counters, nic, Some(rx)));
        }
        "each recording interval (or group of them), with the NIC's RX bytes from tier 0"
    } else {
        checks.add(0, &check_interval(totals, nic, None));
        "over the imported capture's whole span; its intervals are not the recording's, so not against the NIC's RX"
    };
    Ok((!checks.checks.is_empty()).then(|| SelfCheckReport {
        trusted: checks.trusted(),
        note: note.into(),
        checks: checks.checks.clone(),
    }))
}

#[derive(Debug, Serialize)]
pub struct NicPort {
    pub pci_root: Option<String>,
    pub iio_box: Option<String>,
    #[serde(rename = "inbound_write_mbyte_per_s")]
    pub inbound_write_mbps: Option<f64>,
    #[serde(rename = "inbound_read_mbyte_per_s")]
    pub inbound_read_mbps: Option<f64>,
    pub note: String,
}

fn counters_report(rec: &Recording) -> Result<CountersReport> {
    let source = rec
        .meta
        .counters_source
        .unwrap_or(crate::counters::CounterSource::Absent)
        .to_string();
    // A recording can hold several sources (software live + imported): report the current one.
    let totals = rec.counter_totals(&source)?;
    let (readings, dur) = (totals.readings, totals.duration_s);
    let sockets = if readings.is_empty() || dur <= 0.0 {
        Vec::new()
    } else {
        crate::counters::socket_metrics(&readings, dur)
    };
    let mut warnings: Vec<String> = sockets
        .iter()
        .flat_map(|s| {
            s.warnings
                .iter()
                .map(move |w| format!("socket {}: {w}", s.socket))
        })
        .collect();
    let (skipped, named) = rec.unreadable_counter_rows(&source)?;
    if skipped > 0 {
        warnings.push(format!(
            "skipped {skipped} stored counter row{} with a count out of range or a value that is not a number ({}{}): the file was damaged",
            if skipped == 1 { "" } else { "s" },
            named.join("; "),
            if skipped > named.len() as u64 { "; …" } else { "" }
        ));
    }
    let self_checks = self_checks(rec, &source, &readings)?;
    if let Some(c) = &self_checks {
        let sc = crate::counters::selfcheck::SelfChecks {
            checks: c.checks.clone(),
        };
        warnings.extend(sc.lines());
    }
    let iface = rec.iface();
    let nic_port = iface.pci_root.as_ref().map(|root| {
        let boxed = iface.iio_box.clone();
        // All partitions of the NIC's box: which lanes of the stack the NIC
        // uses is not visible from sysfs.
        let ports: Vec<_> = sockets
            .iter()
            .flat_map(|s| s.ports.iter())
            .filter(|p| Some(&p.pmu) == boxed.as_ref())
            .collect();
        let sum = |f: &dyn Fn(&crate::counters::metrics::PortBandwidth) -> f64| {
            (!ports.is_empty()).then(|| ports.iter().map(|p| f(p)).sum::<f64>())
        };
        NicPort {
            pci_root: Some(root.clone()),
            iio_box: boxed.clone(),
            inbound_write_mbps: sum(&|p| p.write_mbps),
            inbound_read_mbps: sum(&|p| p.read_mbps),
            note: match (&boxed, ports.is_empty()) {
                (None, _) => {
                    format!("root bus {root}: no uncore IIO box maps to it on the recording host")
                }
                (Some(b), true) => {
                    format!("{b} (root bus {root}): no per-box IIO readings in this recording")
                }
                (Some(b), false) => format!("{b} (root bus {root}), all partitions summed"),
            },
        }
    });
    let have = sockets.iter().any(|s| {
        s.write_miss_pct.is_some() || s.inbound_write_mbps.is_some() || s.dram_read_mbps.is_some()
    });
    let (cpu_has_ddio, absent, next) = counters_absent(rec, &source, totals.rows);
    let (absent_why, next_step) = if have {
        (None, None)
    } else {
        (Some(absent), next)
    };
    let stacks = crate::counters::stacks::stack_view(
        &readings,
        dur,
        rec.meta
            .platform
            .as_deref()
            .and_then(crate::counters::Platform::from_name),
        iface
            .iio_box
            .as_deref()
            .map(|b| (iface.counter_socket(), b)),
    );
    Ok(CountersReport {
        stacks,
        self_checks,
        cpu_has_ddio,
        absent_why,
        next_step,
        nic_port,
        platform: rec
            .meta
            .platform
            .clone()
            .unwrap_or_else(|| "unknown".into()),
        source,
        sockets,
        warnings,
        notes: rec.meta.counters_notes.clone().unwrap_or_default(),
        readings: totals.rows as usize,
    })
}

/// Whether the recording host has DDIO at all, why a recording has no DDIO numbers, and
/// the next step where there is one: DDIO exists on Intel Xeon server parts only, and
/// `scripts/capture-counters.sh` captures its counters there.
fn counters_absent(
    rec: &Recording,
    source: &str,
    rows: u64,
) -> (Option<bool>, String, Option<String>) {
    use crate::counters::Detection;
    let capture = "capture on the host with scripts/capture-counters.sh, then `ddioscope import-counters REC FILE`".to_string();
    let vendor = rec.host().cpu_vendor;
    let non_intel = !vendor.is_empty() && vendor != "GenuineIntel";
    match rec.meta.platform_detection() {
        Some(Detection::Unsupported { reason, .. }) if non_intel => (
            Some(false),
            format!("no DDIO on this CPU; model only: {reason}"),
            None,
        ),
        Some(Detection::Unsupported { reason, .. }) => (
            Some(false),
            format!("no DDIO counters for this CPU; model only: {reason}"),
            None,
        ),
        _ if non_intel => (
            Some(false),
            format!("no DDIO on this CPU; model only: {vendor} has no DDIO"),
            None,
        ),
        detected => {
            let has = detected.map(|_| true);
            if source == "software" {
                (has, format!("software events only, {rows} readings: this host has no uncore PMU, so no DDIO numbers"), Some(capture))
            } else {
                let why = rec
                    .meta
                    .counters_notes
                    .as_ref()
                    .and_then(|n| n.first().cloned())
                    .unwrap_or_else(|| "no counters in this recording".into());
                (has, why, Some(capture))
            }
        }
    }
}

/// Where each kind of number comes from: which tier of the recorder measured it, and how
/// much of the traffic stands behind it.
#[derive(Debug, Serialize)]
pub struct Tiers {
    /// Per-queue packets, bytes, NAPI polls and drops.
    pub counts: Provenance,
    /// Per-flow packets and bytes.
    pub flows: Provenance,
    /// Stage latencies and their histograms.
    pub stages: Provenance,
    /// Packet records (whole packet lives), the residence times' source.
    pub records: Provenance,
}

#[derive(Debug, Serialize)]
pub struct Provenance {
    /// exact | estimated | windowed | continuous | absent
    pub kind: &'static str,
    /// Stages and records: 1 in this many packets. Flows: the sampling threshold in bytes, an
    /// skb of d bytes sampled with probability min(1, d / every).
    pub every: Option<u32>,
    /// Packets (stages, records) or skbs (flows) that stand behind the numbers.
    pub samples: Option<u64>,
    /// In words, as the reports print it.
    pub text: String,
}

/// When the detail hooks ran, in the report's words: its provenance kind ("absent",
/// "windowed", "continuous") and, for windows, their length, cycle and the time they ran.
fn detail_timing(
    m: &crate::recording::meta::RecordingMeta,
    detail_s: Option<f64>,
    duration_s: f64,
) -> (&'static str, String) {
    use crate::session::DetailMode;
    match (m.detail, m.window_ms, m.window_cycle_ms) {
        (Some(DetailMode::Counts), _, _) => ("absent", String::new()),
        (Some(DetailMode::Windows), Some(w), Some(c)) => (
            "windowed",
            format!(
                "in windows of {}{} every {}{}{}",
                fmt_duration(w * 1e6),
                m.window_packets
                    .filter(|&n| n > 0)
                    .map_or(String::new(), |n| format!(
                        " (cut to about {n} packets on a busy device)"
                    )),
                fmt_duration(c * 1e6),
                run_budget(m),
                detail_s.map_or(String::new(), |d| format!(
                    ", {} of {} in all",
                    fmt_duration(d * 1e9),
                    fmt_duration(duration_s * 1e9)
                ))
            ),
        ),
        _ => ("continuous", "all the time".to_string()),
    }
}

/// The windows' run budget in the report's words, where one held them.
fn run_budget(m: &crate::recording::meta::RecordingMeta) -> String {
    match (m.window_run_budget.filter(|&b| b > 0.0), m.windows_passed) {
        (Some(b), Some(n)) if n > 0 => format!(
            " (at most {b} program runs per packet: {n} drawn {} let pass for it)",
            if n == 1 { "window" } else { "windows" }
        ),
        (Some(b), _) => format!(" (at most {b} program runs per packet)"),
        _ => String::new(),
    }
}

fn tiers(
    rec: &Recording,
    totals: &[QueueCounters],
    flows: &[crate::snapshot::FlowCounters],
    overflow: &[crate::probe::qcount::FlowOverflow],
    records: u64,
) -> Result<Tiers> {
    let m = &rec.meta;
    let counts = Provenance {
        kind: "exact",
        every: None,
        samples: None,
        text: match m.rx_counts {
            Some(src) => format!(
                "exact: every packet, counted by tier 0; RX at {}{}{}{}{}",
                match src {
                    crate::probe::qcount::RxSource::Tcx => "tcx ingress, after GRO",
                    crate::probe::qcount::RxSource::Handup => "the driver hand-up tracepoints",
                    crate::probe::qcount::RxSource::Qstats => "the driver's own per-queue counters, netdev qstats",
                    crate::probe::qcount::RxSource::Ethtool => "the driver's own per-queue counters, ethtool -S",
                    crate::probe::qcount::RxSource::Link => "the interface's own counters (one RX queue)",
                    crate::probe::qcount::RxSource::LinkSplit => "the interface's own counters in total, split across queues by the detail windows (per-queue RX estimated)",
                },
                if m.napi_counts.as_deref() == Some("windows") {
                    "; NAPI polls estimated from the detail windows (polls per packet there times the exact packets)"
                } else {
                    ""
                },
                if m.drop_counts.as_deref() == Some("windows") {
                    "; drops estimated from the detail windows (kfree_skb's drops per packet there times the exact packets)"
                } else {
                    ""
                },
                match m.tx_counts.as_deref() {
                    Some("qstats") => "; TX from the driver's qstats",
                    Some("ethtool") => "; TX from the driver's ethtool -S counters",
                    Some("veth_peer") => "; TX from the veth peer's per-queue RX counters (ethtool -S), which the kernel counts it by",
                    Some("qdisc") => "; TX from the qdisc of each TX queue (under the device's mq root)",
                    Some("link") => "; TX from the interface's own counters (one TX queue)",
                    Some("link_split") => "; TX totals from the interface's own counters, split across queues by the detail windows (per-queue TX estimated)",
                    Some(_) => "; TX at net_dev_start_xmit",
                    None => "",
                },
                host_wide_words(m.hook_plan.as_deref()),
            ),
            None => "exact: every packet, counted by the detail hooks, always on".into(),
        },
    };
    let threshold = m.flow_sample_bytes.unwrap_or(1);
    let skbs: u64 = flows.iter().filter_map(|f| f.samples).sum();
    let from_sockets = flows
        .iter()
        .filter(|f| f.source.as_deref() == Some("socket"))
        .count();
    let sockets_note = match from_sockets {
        0 => String::new(),
        n => format!("; {n} TCP flow{} ending in a local socket counted exactly by the socket's own counters", if n == 1 { "" } else { "s" }),
    };
    // What the flow table could not take is said, never left out quietly.
    let overflowed: u64 = overflow.iter().map(|b| b.packets).sum();
    let overflow_note = match overflowed {
        0 => String::new(),
        n => format!("; {n} packets in the queues' overflow buckets, in no flow: the BPF flow table was full when they came"),
    };
    let flows = match threshold {
        0 => Provenance { kind: "absent", every: None, samples: None, text: "not recorded: --flow-sample 0".into() },
        1 => Provenance { kind: "exact", every: None, samples: None, text: format!("exact: every skb counted{overflow_note}") },
        n => Provenance {
            kind: "estimated",
            every: Some(n),
            samples: Some(skbs),
            text: match m.flow_windows {
                Some(w) => format!(
                    "estimated from {}, scaled by each queue's exact packet count: {skbs} sampled; each flow \
                     gives its 95% error bound (size sampling and the spread between windows; a flow shorter \
                     than a cycle can be missed){sockets_note}{overflow_note}",
                    match m.flow_window_sample_bytes {
                        Some(1) | None => format!("every skb of {w} detail windows"),
                        Some(b) => format!("the skbs of {w} detail windows, one of d bytes with probability d/{b} up to 1"),
                    }
                ),
                None => format!(
                    "estimated from sampled skbs, one of d bytes with probability d/{n} up to 1: {skbs} sampled; each flow gives its 95% error bound{sockets_note}{overflow_note}"
                ),
            },
        },
    };
    let timed: u64 = totals
        .iter()
        .map(|q| q.stage_count[q.dir.lifetime_stage()].max(q.stage_count[0]))
        .sum();
    let stage_every = m.stage_every.unwrap_or(1).max(1);
    let detail_s = rec.detail_ns()?.map(|ns| ns as f64 / 1e9);
    let on_packets = if stage_every > 1 {
        format!("1 in {stage_every} packets")
    } else {
        "every packet".into()
    };
    let (kind, when) = detail_timing(m, detail_s, rec.duration_s());
    let stages = Provenance {
        kind,
        every: Some(stage_every),
        samples: Some(timed),
        text: if kind == "absent" {
            "not measured: recorded with --detail counts".into()
        } else {
            format!("timed {when} on {on_packets}: {timed} packets")
        },
    };
    let rec_every = m.sample_every.unwrap_or(0);
    let records = Provenance {
        kind: if rec_every == 0 || kind == "absent" {
            "absent"
        } else {
            kind
        },
        every: (rec_every > 0).then_some(rec_every),
        samples: Some(records),
        text: if rec_every == 0 || kind == "absent" {
            "none recorded".into()
        } else {
            format!("1 in {rec_every} packets' lives, {when}: {records} records")
        },
    };
    Ok(Tiers {
        counts,
        flows,
        stages,
        records,
    })
}

#[derive(Debug, Serialize)]
pub struct Meta {
    pub file: String,
    pub complete: bool,
    /// Why the recording ended (None: cut off, or written before it was stored).
    pub stopped_by: Option<crate::recording::meta::StoppedBy>,
    pub iface: String,
    pub netns: Option<String>,
    pub ifindex: u32,
    pub driver: Option<String>,
    pub duration_s: f64,
    pub intervals: usize,
    pub interval_ms: Option<u64>,
    pub sample_every: Option<u32>,
    /// Stage latencies measured on 1 in this many packets (absent in older recordings).
    pub stage_every: Option<u32>,
    pub host: String,
    pub kernel: String,
    pub cpu_model: String,
    pub llc_bytes: Option<u64>,
    pub llc_ways: Option<u32>,
    pub numa_node: Option<i32>,
    pub rx_queues: u32,
    pub tx_queues: u32,
    pub rx_ring: Option<u32>,
    pub tx_ring: Option<u32>,
    pub irqs: usize,
    pub hooks: Vec<String>,
    pub hooks_missing: Vec<String>,
    /// Where the exact RX and TX counts came from: tcx, handup, qstats or ethtool (RX);
    /// xmit, qstats, ethtool or veth_peer (TX); None in recordings from before tier 0.
    pub rx_counts: Option<crate::probe::qcount::RxSource>,
    pub tx_counts: Option<String>,
    /// Flows of the driver-counted directions were sampled in this many detail windows and
    /// scaled by the driver's counts (None: sampled all the time).
    pub flow_windows: Option<u64>,
    /// Detail windows opened between the drawn ones for queues with traffic and a stage
    /// untimed yet (None: no windows, or an older recording).
    pub windows_opened: Option<u64>,
    /// "windows": NAPI polls counted in the detail windows and estimated from them (polls per
    /// packet there times the exact packets); "exact": every poll; None: older recordings.
    pub napi_counts: Option<String>,
    /// "windows": drops counted by kfree_skb in the detail windows and estimated from them
    /// (drops per packet there times the exact packets); "exact": every drop; None: older.
    pub drop_counts: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    /// Packets timed: the histogram's samples.
    pub count: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: u64,
    pub mean_ns: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct NapiReport {
    pub polls: u64,
    pub avg_work: Option<f64>,
    pub budget_exhausted: u64,
    /// bucket 0: empty polls; bucket b>0: work in [2^(b-1), 2^b).
    pub work_hist: Vec<u64>,
}

/// One queue over the window. Every queue the device has is listed, idle ones with zeros.
#[derive(Debug, Serialize)]
pub struct QueueReport {
    pub dir: Dir,
    pub queue: u32,
    pub packets: u64,
    pub bytes: u64,
    pub packets_per_s: f64,
    pub mbit_per_s: f64,
    pub avg_pkt_bytes: Option<f64>,
    pub drops: u64,
    pub napi: Option<NapiReport>,
    /// Stage name → its latencies, for the stages that timed a packet.
    pub stages: BTreeMap<String, StageReport>,
}

impl QueueReport {
    pub fn stage(&self, name: &str) -> Option<&StageReport> {
        self.stages.get(name)
    }
}

#[derive(Debug, Serialize)]
pub struct FlowReport {
    pub dir: Dir,
    pub proto: String,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    pub rx_queue: Option<u32>,
    pub tx_queue: Option<u32>,
    /// Counted, or estimated from sampled skbs (`samples` of them): see `bytes_error`.
    pub packets: u64,
    pub bytes: u64,
    pub payload_bytes: u64,
    /// The skbs sampled for the estimates above (None: counted exactly).
    pub samples: Option<u64>,
    /// The 95 % error bound of `bytes`, in bytes (0: every skb sampled; None: counted exactly).
    pub bytes_error: Option<u64>,
    /// Counted exactly elsewhere than by the probes: "socket" (the local TCP socket's own
    /// counters). None: by the probes.
    pub source: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Events {
    pub sampled: u64,
    pub lost: u64,
    pub received: u64,
    pub state_evicted: u64,
    pub queue_clamped: u64,
    /// States discarded because their packet's free went unseen (GRO merge, coalescing).
    pub state_stale: u64,
    /// Tracked lives whose end went unseen: evicted, stale, or still in flight when their
    /// window's hooks went off (recordings from before the last were counted: evicted + stale).
    pub lives_unended: u64,
    /// Tracked packets whose free was seen, % of the lives that ended seen or unseen; None
    /// when no tracked packet ended.
    pub frees_seen_pct: Option<f64>,
}

impl Events {
    fn frees_seen_pct(freed: u64, unended: u64) -> Option<f64> {
        let ended = freed.saturating_add(unended);
        (ended > 0).then(|| 100.0 * freed as f64 / ended as f64)
    }
}

#[derive(Debug, Serialize)]
pub struct Drops {
    pub total: u64,
    pub reasons: Vec<DropReason>,
}

#[derive(Debug, Serialize)]
pub struct DropReason {
    pub reason: u32,
    pub name: Option<String>,
    pub count: u64,
    /// Of them, RX packets dropped before the stack took them in (None: not recorded).
    pub before_stack: Option<u64>,
}

fn stage_report(q: &QueueCounters, s: usize) -> StageReport {
    let h = &q.stage_hist[s];
    let max = q.stage_max_ns[s];
    StageReport {
        count: q.stage_count[s],
        p50_ns: hist_percentile(h, 50.0, max),
        p99_ns: hist_percentile(h, 99.0, max),
        max_ns: max,
        mean_ns: (q.stage_count[s] > 0).then(|| q.stage_sum_ns[s] / q.stage_count[s]),
    }
}

pub fn build(rec: &Recording) -> Result<Summary> {
    let totals = rec.queue_totals()?;
    let iface = rec.iface();
    let dur = rec.duration_s();
    let meta = meta_of(rec, dur);
    let queues = queue_reports(&iface, &totals, dur);
    let recorded_flows = rec.flows()?;
    let flows = flow_reports(&recorded_flows);
    let flow_overflow = rec.flow_overflow()?;
    let e = rec.event_totals()?;
    // Every tracked packet whose free was seen completed its whole-life stage.
    let freed: u64 = totals.iter().map(|q| q.stage_count[NSTAGES - 1]).sum();
    let unended = totals
        .iter()
        .map(|q| q.unended)
        .sum::<u64>()
        .max(e.state_evicted.saturating_add(e.state_stale));
    let drops = drops_of(rec)?;
    let counters = counters_report(rec)?;
    let l3miss = miss_report(rec, &totals)?;
    let tiers = tiers(rec, &totals, &recorded_flows, &flow_overflow, e.sampled)?;
    Ok(Summary {
        meta,
        window: rec.window.clone(),
        tiers,
        queues,
        flows,
        flow_overflow,
        events: Events {
            sampled: e.sampled,
            lost: e.lost,
            received: e.received,
            state_evicted: e.state_evicted,
            queue_clamped: e.queue_clamped,
            state_stale: e.state_stale,
            lives_unended: unended,
            frees_seen_pct: Events::frees_seen_pct(freed, unended),
        },
        drops,
        counters,
        l3miss,
        totals,
        filter: None,
    })
}

/// The recording's header: file, device, host, how it was recorded, which hooks ran.
fn meta_of(rec: &Recording, dur: f64) -> Meta {
    let iface = rec.iface();
    let host = rec.host();
    let hooks: Vec<serde_json::Value> = rec
        .meta
        .hooks
        .clone()
        .and_then(|h| serde_json::from_value(h).ok())
        .unwrap_or_default();
    let hook_name = |h: &serde_json::Value| {
        format!(
            "{}:{}",
            h.get("flavor").and_then(|v| v.as_str()).unwrap_or("none"),
            h.get("tracepoint").and_then(|v| v.as_str()).unwrap_or("?")
        )
    };
    Meta {
        file: rec.path.display().to_string(),
        complete: rec.complete(),
        stopped_by: rec.meta.stopped_by,
        iface: iface.name.clone(),
        netns: iface.netns.clone(),
        ifindex: iface.ifindex,
        driver: iface.driver.clone(),
        duration_s: dur,
        intervals: rec.window.intervals as usize,
        interval_ms: rec.meta.interval_ms,
        sample_every: rec.meta.sample_every,
        stage_every: rec.meta.stage_every,
        host: host.hostname.clone(),
        kernel: host.kernel.clone(),
        cpu_model: host.cpu_model.clone(),
        llc_bytes: host.llc.as_ref().map(|l| l.size_bytes),
        llc_ways: host.llc.as_ref().map(|l| l.ways),
        numa_node: iface.numa_node,
        rx_queues: iface.rx_queues,
        tx_queues: iface.tx_queues,
        rx_ring: iface.rx_ring,
        tx_ring: iface.tx_ring,
        irqs: iface.irqs.len(),
        rx_counts: rec.meta.rx_counts,
        tx_counts: rec.meta.tx_counts.clone(),
        flow_windows: rec.meta.flow_windows,
        windows_opened: rec.meta.windows_opened,
        napi_counts: rec.meta.napi_counts.clone(),
        drop_counts: rec.meta.drop_counts.clone(),
        hooks: hooks
            .iter()
            .filter(|h| !h["flavor"].is_null())
            .map(hook_name)
            .collect(),
        hooks_missing: hooks
            .iter()
            .filter(|h| h["flavor"].is_null())
            .map(|h| {
                h.get("tracepoint")
                    .and_then(|v| v.as_str())
                    .unwrap_or("?")
                    .to_string()
            })
            .collect(),
    }
}

/// A row per queue: every queue the device has, and any other the probes counted on (an
/// idle queue is a finding too).
fn queue_reports(
    iface: &crate::topology::IfaceInfo,
    totals: &[QueueCounters],
    dur: f64,
) -> Vec<QueueReport> {
    let mut all: BTreeMap<(Dir, u32), QueueCounters> = totals
        .iter()
        .map(|q| ((q.dir, q.queue), q.clone()))
        .collect();
    for (dir, n) in [(Dir::Rx, iface.rx_queues), (Dir::Tx, iface.tx_queues)] {
        for q in 0..n.min(MAX_LISTED_QUEUES) {
            all.entry((dir, q))
                .or_insert_with(|| QueueCounters::new(dir, q));
        }
    }
    all.values()
        .map(|q| {
            let mut stages = BTreeMap::new();
            for (s, name) in q.dir.stage_names().iter().enumerate().take(NSTAGES) {
                if q.stage_count[s] > 0 {
                    stages.insert(name.to_string(), stage_report(q, s));
                }
            }
            QueueReport {
                dir: q.dir,
                queue: q.queue,
                packets: q.packets,
                bytes: q.bytes,
                packets_per_s: if dur > 0.0 {
                    q.packets as f64 / dur
                } else {
                    0.0
                },
                mbit_per_s: if dur > 0.0 {
                    q.bytes as f64 * 8.0 / dur / 1e6
                } else {
                    0.0
                },
                avg_pkt_bytes: (q.packets > 0).then(|| q.bytes as f64 / q.packets as f64),
                drops: q.drops,
                napi: (q.dir == Dir::Rx && q.napi_polls > 0).then(|| NapiReport {
                    polls: q.napi_polls,
                    avg_work: Some(q.napi_work as f64 / q.napi_polls as f64),
                    budget_exhausted: q.napi_budget_exhausted,
                    work_hist: q.napi_work_hist.to_vec(),
                }),
                stages,
            }
        })
        .collect()
}

/// The recorded flows, largest first.
fn flow_reports(recorded: &[crate::snapshot::FlowCounters]) -> Vec<FlowReport> {
    let mut flows: Vec<FlowReport> = recorded
        .iter()
        .map(|f| FlowReport {
            dir: f.key.dir,
            proto: f.key.proto.clone(),
            src: f.key.src.clone(),
            sport: f.key.sport,
            dst: f.key.dst.clone(),
            dport: f.key.dport,
            rx_queue: (f.key.dir == Dir::Rx).then_some(f.queue),
            tx_queue: (f.key.dir == Dir::Tx).then_some(f.queue),
            packets: f.packets,
            bytes: f.bytes,
            payload_bytes: f.payload_bytes,
            samples: f.samples,
            bytes_error: f.bytes_var.map(|_| f.bytes_error().round() as u64),
            source: f.source.clone(),
        })
        .collect();
    flows.sort_by_key(|f| std::cmp::Reverse(f.bytes));
    flows
}

/// The drop reasons with the names the kernel gave them at recording time.
fn drops_of(rec: &Recording) -> Result<Drops> {
    let drop_names = rec.meta.drop_reason_names.clone().unwrap_or_default();
    let drop_reasons = rec.drop_reasons()?;
    Ok(Drops {
        total: drop_reasons.iter().map(|(_, c, _)| c).sum(),
        reasons: drop_reasons
            .iter()
            .map(|(r, c, early)| DropReason {
                reason: *r,
                name: drop_names.get(r).cloned(),
                count: *c,
                before_stack: *early,
            })
            .collect(),
    })
}

/// Which hooks saw every device's packets on the host, and when: what the recording cost the
/// host's other devices ("" for recordings from before the plan was kept).
fn host_wide_words(plan: Option<&[crate::probe::HookPlan]>) -> String {
    use crate::probe::{Scope, When};
    let Some(plan) = plan else {
        return String::new();
    };
    let named = |when: When| {
        let mut v: Vec<&str> = plan
            .iter()
            .filter(|h| h.scope == Scope::Host && h.when == when)
            .map(|h| h.hook.as_str())
            .collect();
        v.sort_unstable();
        v.dedup();
        v.join(", ")
    };
    let (always, windows) = (named(When::Always), named(When::Windows));
    let mut out = String::new();
    if !always.is_empty() {
        out += &format!("; host-wide hooks all the time: {always}");
    }
    if !windows.is_empty() {
        out += &format!("; host-wide hooks in the detail windows only: {windows}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::split_ages;

    #[test]
    fn ages_split_at_the_packets_life() {
        let mut age = vec![0u64; 32];
        age[10] = 100; // [1024, 2048) ns
        age[12] = 40; // [4096, 8192)
        age[20] = 7; // ~1 ms
                     // A bound on a bucket edge splits nothing.
        assert_eq!(split_ages(&age, 4096), (100, 47));
        // Inside a bucket: its share on each side, by range.
        assert_eq!(split_ages(&age, 6144), (120, 27));
        assert_eq!(split_ages(&age, 0), (0, 147));
        assert_eq!(split_ages(&age, u64::MAX >> 1), (147, 0));
        // Bucket 0 holds [0, 2) ns.
        assert_eq!(split_ages(&[4], 1), (2, 2));
        // Three buckets split in thirds: the parts always add up to the total.
        let (w, a) = split_ages(&[3, 3, 3], 3);
        assert_eq!(w + a, 9);
    }

    #[test]
    fn life_bound_follows_the_joined_direction() {
        use super::{hist_percentile, life_mixture};
        let mut life = [[0u64; 32]; 2];
        life[0][10] = 1000; // RX buffers live ~1-2 µs
        life[1][20] = 10; // TX completions take ~1-2 ms
                          // Only RX joins: the TX lives do not stretch the bound, however few RX lives there are.
        let p99 = hist_percentile(&life_mixture(&life, [500, 0]), 99.0, 0).unwrap();
        assert!((1024..2048).contains(&p99), "{p99}");
        let p99 = hist_percentile(&life_mixture(&life, [1, 1]), 99.0, 0).unwrap();
        assert!(p99 >= 1 << 20, "{p99}");
        assert!(life_mixture(&life, [0, 0]).iter().all(|&c| c == 0));
    }
}
