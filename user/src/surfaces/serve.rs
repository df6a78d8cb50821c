//! `ddioscope serve`: an OpenMetrics `/metrics` endpoint (and `/healthz`) fed by
//! the live Snapshot stream. The session samples on the main thread and
//! publishes cumulative totals as one immutable value; scrapes (axum on a
//! one-thread tokio runtime of their own) only take a pointer to the latest
//! value, so neither side blocks the other for longer than an Arc clone.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::capped::CappedSeries;
use super::view;
use crate::advise::VerdictKind;
use crate::probe::l3miss::MissSource;
use crate::session::{MissArgs, Session, SessionArgs, SessionOptions};
use crate::snapshot::{Dir, EventCounters, FlowKey, QueueCounters, Snapshot, NBUCKETS, NSTAGES};

/// How the stage histograms are labelled: their series count is
/// queues × stages × (NBUCKETS + 3) per direction when per queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StageHistograms {
    /// One histogram per queue and stage.
    PerQueue,
    /// Queues summed: one histogram per direction and stage (no `queue` label).
    PerDirection,
    /// No stage histograms.
    Off,
}

impl StageHistograms {
    fn as_str(self) -> &'static str {
        match self {
            StageHistograms::PerQueue => "per-queue",
            StageHistograms::PerDirection => "per-direction",
            StageHistograms::Off => "off",
        }
    }
}

/// `ddioscope serve`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub session: SessionArgs,
    /// Address to listen on (loopback unless --allow-remote).
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9436")]
    pub listen: String,
    /// Allow a non-loopback --listen address.
    #[arg(long)]
    pub allow_remote: bool,
    /// Flow series cap per direction: the N busiest flows keep a series each, every
    /// other flow is counted under proto="other" (bounds the series count).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top_flows: usize,
    /// Stage histogram labels: per-queue, per-direction (queues summed: fewer
    /// series on hosts with many queues) or off.
    #[arg(long, value_enum, default_value = "per-queue")]
    pub stage_histograms: StageHistograms,
    /// L3-miss sampling for attributed misses per queue and flow (sources as for
    /// `record`, at its default period; off by default: the address join costs per packet).
    #[arg(long, value_enum, default_value = "off")]
    pub miss_sampling: MissSource,
    /// Sampling interval in milliseconds (metrics are cumulative since start).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub interval: u64,
    /// Stop after this long (seconds, or with units: 30s, 5m, 1h30m): stop serving, detach
    /// everything, exit status 0. Default: run until Ctrl-C or SIGTERM.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::duration_flag)]
    pub duration: Option<f64>,
}

/// The session serve runs: a live surface's, plus the L3-miss sampler when asked for
/// (at the source's default period, always on: no windows).
fn session_options(opts: &ServeArgs) -> SessionOptions {
    let flow_every = (1000 / opts.interval.max(1)).max(1);
    let mut live_opts = SessionOptions::surface(&opts.session, opts.interval, flow_every);
    // Tier 0 and the default detail windows, the sampler (when asked for) inside them.
    live_opts.miss = MissArgs {
        source: opts.miss_sampling,
        ..MissArgs::off()
    };
    live_opts
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The classic Prometheus text format (0.0.4) from the encoder's OpenMetrics
/// text, for clients that do not ask for OpenMetrics (curl, promtool, older
/// scrapers), as Prometheus' own client libraries negotiate. The two differ
/// only in metadata: counter families are named with their `_total` suffix,
/// `info` becomes a gauge named `_info`, and there is no `# UNIT`/`# EOF`.
pub fn openmetrics_to_classic(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<(&str, &str)> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, ty) = match ty {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_string(), "untyped"),
                t => (name.to_string(), t),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {ty}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Listen address, refusing non-loopback ones unless asked: the metrics name
/// hosts, ports and queue layout, which is not for every network by default.
pub fn listen_addr(listen: &str, allow_remote: bool) -> Result<SocketAddr> {
    let addr: SocketAddr = listen.parse().map_err(|_| {
        anyhow::anyhow!("--listen {listen}: expected IP:PORT, e.g. 127.0.0.1:9436 or [::1]:9436")
    })?;
    if !addr.ip().is_loopback() && !allow_remote {
        bail!("--listen {addr} is not a loopback address: add --allow-remote to serve metrics beyond this host");
    }
    Ok(addr)
}

/// Everything one scrape shows: totals since the session started, plus the
/// last interval's derived gauges.
#[derive(Debug, Default)]
pub struct Published {
    pub device: String,
    pub queues: BTreeMap<(Dir, u32), QueueCounters>,
    /// Last interval's RX in-flight bytes per queue (Little's law).
    pub inflight: BTreeMap<u32, f64>,
    pub ddio_capacity_bytes: Option<u64>,
    /// Flows exported (at most --top-flows per direction) with [bytes, packets]
    /// since each was exported, and the rest per direction (`capped`).
    pub flows: Vec<(FlowKey, [u64; 2])>,
    pub flows_other: Vec<(Dir, [u64; 2])>,
    pub stage_histograms: Option<StageHistograms>,
    /// The model's verdict per queue on the last interval with traffic.
    pub verdicts: Vec<(Dir, u32, VerdictKind)>,
    /// Whether the driver reports the RX and TX ring sizes the verdicts use.
    pub ring_known: [bool; 2],
    /// L3-miss samples: all, and those on packet buffers (None: no sampler).
    pub miss_totals: Option<(u64, u64)>,
    /// (dir, queue) → [address join, CPU context] samples charged, cumulative.
    pub miss_queues: BTreeMap<(Dir, u32), [u64; 2]>,
    /// Flows with [all, address join, CPU context] charged samples, capped like `flows`.
    pub miss_flows: Vec<(FlowKey, [u64; 3])>,
    pub miss_flows_other: Vec<(Dir, [u64; 3])>,
    pub events: EventCounters,
    pub intervals: u64,
    /// The interface exists now (false while it is gone; the counters keep their totals).
    pub device_up: bool,
    /// (socket, event) → scaled cumulative value; per-socket totals only.
    pub counter_totals: BTreeMap<(u32, String, String), f64>,
    /// (socket, write miss ratio, read miss ratio) of the last interval.
    pub miss_ratios: Vec<(u32, Option<f64>, Option<f64>)>,
    pub info: Vec<(&'static str, String)>,
}

/// Accumulates the stream into totals; `publish` makes the immutable view.
pub struct Accumulator {
    current: Published,
    /// Per direction (RX, TX): flows by [bytes, packets], and by charged miss samples.
    flows: [CappedSeries<FlowKey, 2>; 2],
    miss_flows: [CappedSeries<FlowKey, 3>; 2],
    /// The model's inputs (None: no LLC described, no verdicts).
    model: Option<(
        crate::model::geometry::LlcGeometry,
        crate::topology::IfaceInfo,
    )>,
}

impl Accumulator {
    pub fn new(
        device: &str,
        ddio_capacity_bytes: Option<u64>,
        top_flows: usize,
        info: Vec<(&'static str, String)>,
    ) -> Self {
        Accumulator {
            current: Published {
                device: device.to_string(),
                ddio_capacity_bytes,
                info,
                stage_histograms: Some(StageHistograms::PerQueue),
                device_up: true,
                ..Default::default()
            },
            flows: [CappedSeries::new(top_flows), CappedSeries::new(top_flows)],
            miss_flows: [CappedSeries::new(top_flows), CappedSeries::new(top_flows)],
            model: None,
        }
    }

    /// How stage histograms are labelled (per queue unless changed).
    pub fn with_stage_histograms(mut self, h: StageHistograms) -> Self {
        self.current.stage_histograms = (h != StageHistograms::Off).then_some(h);
        self
    }

    /// Publish the model's per-queue verdicts, computed on each interval with traffic.
    pub fn with_model(
        mut self,
        geom: crate::model::geometry::LlcGeometry,
        iface: crate::topology::IfaceInfo,
    ) -> Self {
        self.model = Some((geom, iface));
        self
    }

    pub fn add(&mut self, snap: &Snapshot) {
        let p = &mut self.current;
        p.intervals += 1;
        for d in &snap.queues {
            p.queues
                .entry((d.dir, d.queue))
                .or_insert_with(|| QueueCounters::new(d.dir, d.queue))
                .add(d);
        }
        p.inflight.clear();
        for v in view::queue_views(&snap.queues, snap.dur_ns) {
            if let (Dir::Rx, Some(b)) = (v.dir, v.inflight_bytes) {
                p.inflight.insert(v.queue, b);
            }
        }
        let e = &snap.events;
        p.events.sampled += e.sampled;
        p.events.lost += e.lost;
        p.events.received += e.received;
        p.events.state_evicted += e.state_evicted;
        p.events.queue_clamped += e.queue_clamped;
        // The flow table is read only on some intervals. Its totals are estimates (sampled in
        // windows, revised as the driver's counts come in, or a socket's own counts): the
        // series take them as such, with each flow's first sighting as its incarnation.
        if !snap.flows.is_empty() {
            for (i, dir) in [Dir::Rx, Dir::Tx].into_iter().enumerate() {
                let reading: Vec<(FlowKey, u64, [u64; 2])> = snap
                    .flows
                    .iter()
                    .filter(|f| f.key.dir == dir)
                    .map(|f| (f.key.clone(), f.first_ns, [f.bytes, f.packets]))
                    .collect();
                self.flows[i].update_estimates(&reading);
            }
            (p.flows, p.flows_other) = exported(&self.flows);
        }
        if let Some(m) = &snap.misses {
            let t = p.miss_totals.get_or_insert((0, 0));
            t.0 += m.samples;
            t.1 += m.on_packet_buffers;
            for &(dir, queue, addr, ctx) in &m.queues {
                let c = p.miss_queues.entry((dir, queue)).or_default();
                c[0] += addr;
                c[1] += ctx;
            }
            if !m.flows.is_empty() {
                for (i, dir) in [Dir::Rx, Dir::Tx].into_iter().enumerate() {
                    let reading: Vec<(FlowKey, [u64; 3])> = m
                        .flows
                        .iter()
                        .filter(|f| f.0.dir == dir)
                        .map(|(k, a, c)| (k.clone(), [a + c, *a, *c]))
                        .collect();
                    self.miss_flows[i].update(&reading);
                }
                (p.miss_flows, p.miss_flows_other) = exported(&self.miss_flows);
            }
        }
        if let Some((geom, iface)) = &self.model {
            if snap.queues.iter().any(|q| q.packets > 0) {
                p.verdicts =
                    super::live_model::verdicts(geom, iface, &snap.queues, snap.dur_ns).queues;
                p.ring_known = [iface.rx_ring.is_some(), iface.tx_ring.is_some()];
            }
        }
        for r in snap.counters.iter().filter(|r| r.is_socket_total()) {
            *p.counter_totals
                .entry((r.socket, r.pmu.clone(), r.event.clone()))
                .or_default() += r.value;
        }
        let dur_s = snap.dur_ns as f64 / 1e9;
        if !snap.counters.is_empty() && dur_s > 0.0 {
            p.miss_ratios = crate::counters::socket_metrics(&snap.counters, dur_s)
                .into_iter()
                .map(|m| {
                    (
                        m.socket,
                        m.write_miss_pct.map(|v| v / 100.0),
                        m.read_miss_pct.map(|v| v / 100.0),
                    )
                })
                .collect();
        }
    }

    /// The interface went away (false) or came back (true).
    pub fn set_device_up(&mut self, up: bool) {
        self.current.device_up = up;
    }

    pub fn publish(&self) -> Arc<Published> {
        let p = &self.current;
        Arc::new(Published {
            device: p.device.clone(),
            queues: p.queues.clone(),
            inflight: p.inflight.clone(),
            ddio_capacity_bytes: p.ddio_capacity_bytes,
            flows: p.flows.clone(),
            flows_other: p.flows_other.clone(),
            stage_histograms: p.stage_histograms,
            verdicts: p.verdicts.clone(),
            ring_known: p.ring_known,
            miss_totals: p.miss_totals,
            miss_queues: p.miss_queues.clone(),
            miss_flows: p.miss_flows.clone(),
            miss_flows_other: p.miss_flows_other.clone(),
            events: p.events,
            intervals: p.intervals,
            device_up: p.device_up,
            counter_totals: p.counter_totals.clone(),
            miss_ratios: p.miss_ratios.clone(),
            info: p.info.clone(),
        })
    }
}

/// The exported keys of both directions, and each direction's "other" when it has one.
#[allow(clippy::type_complexity)]
fn exported<const N: usize>(
    per_dir: &[CappedSeries<FlowKey, N>; 2],
) -> (Vec<(FlowKey, [u64; N])>, Vec<(Dir, [u64; N])>) {
    let keys = per_dir.iter().flat_map(|c| c.exported()).collect();
    let other = [Dir::Rx, Dir::Tx]
        .into_iter()
        .zip(per_dir)
        .filter_map(|(d, c)| c.other().map(|o| (d, o)))
        .collect();
    (keys, other)
}

/// The latest published value; None until the probes are attached.
#[derive(Debug, Default)]
pub struct Shared {
    latest: Mutex<Option<Arc<Published>>>,
}

impl Shared {
    pub fn set(&self, p: Arc<Published>) {
        // A panicked holder cannot leave an Option<Arc> half-written.
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
    }
    pub fn get(&self) -> Option<Arc<Published>> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[derive(Debug)]
struct SnapshotCollector(Arc<Shared>);

type Labels = Vec<(&'static str, String)>;

fn counter<N: prometheus_client::encoding::EncodeCounterValue + std::fmt::Debug + Copy>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, N)],
) -> Result<(), std::fmt::Error>
where
    ConstCounter<N>: EncodeMetric,
{
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// The kernel's log2 buckets as Prometheus buckets: bucket b holds
/// [2^b, 2^(b+1)) ns, so its upper bound `le` is 2^(b+1) ns in seconds.
/// Returns non-cumulative (upper bound, count) pairs ending with +Inf (the
/// encoder accumulates) and the count that makes `_count` match them.
pub fn log2_buckets(hist: &[u64; NBUCKETS], count: u64) -> (Vec<(f64, u64)>, u64) {
    let mut out: Vec<(f64, u64)> = hist
        .iter()
        .enumerate()
        .map(|(b, &c)| ((1u64 << (b + 1)) as f64 / 1e9, c))
        .collect();
    let in_buckets: u64 = hist.iter().sum();
    let total = count.max(in_buckets);
    out.push((f64::INFINITY, total - in_buckets));
    (out, total)
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = self.0.get() else { return Ok(()) };
        encode_queues(&mut enc, &p)?;
        encode_stages(&mut enc, &p)?;
        encode_flows(&mut enc, &p)?;
        encode_misses(&mut enc, &p)?;
        encode_host(&mut enc, &p)
    }
}

/// Every series' device label.
fn dev(p: &Published) -> (&'static str, String) {
    ("device", p.device.clone())
}

fn qlabels(p: &Published, q: &QueueCounters) -> Labels {
    vec![
        dev(p),
        ("direction", q.dir.as_str().into()),
        ("queue", q.queue.to_string()),
    ]
}

/// An RX queue's labels (the NAPI series have no direction).
fn rxl(p: &Published, q: &QueueCounters) -> Labels {
    vec![dev(p), ("queue", q.queue.to_string())]
}

fn flow_labels(p: &Published, k: &FlowKey) -> Labels {
    vec![
        dev(p),
        ("direction", k.dir.as_str().into()),
        ("proto", k.proto.clone()),
        ("src", k.src.clone()),
        ("sport", k.sport.to_string()),
        ("dst", k.dst.clone()),
        ("dport", k.dport.to_string()),
    ]
}

/// Every flow label "other": the flows not exported, per direction.
fn other_labels(p: &Published, d: Dir) -> Labels {
    let mut l = vec![dev(p), ("direction", d.as_str().into())];
    l.extend(["proto", "src", "sport", "dst", "dport"].map(|n| (n, "other".to_string())));
    l
}

/// The info series and the per-queue packet, byte, drop and NAPI counters.
fn encode_queues(enc: &mut DescriptorEncoder, p: &Published) -> Result<(), std::fmt::Error> {
    let rx: Vec<&QueueCounters> = p.queues.values().filter(|q| q.dir == Dir::Rx).collect();
    {
        let mut m = enc.encode_descriptor(
            "ddioscope",
            "What ddioscope observes and how.",
            None,
            MetricType::Info,
        )?;
        let mut labels: Labels = vec![dev(p)];
        labels.extend(p.info.iter().cloned());
        m.encode_info(&labels)?;
    }
    let qs: Vec<&QueueCounters> = p.queues.values().collect();
    counter(
        enc,
        "ddioscope_packets",
        "Packets per queue and direction (frames as the interface counts them).",
        &qs.iter()
            .map(|q| (qlabels(p, q), q.packets))
            .collect::<Vec<_>>(),
    )?;
    counter(
        enc,
        "ddioscope_bytes",
        "Frame bytes (L2 header included) per queue and direction.",
        &qs.iter()
            .map(|q| (qlabels(p, q), q.bytes))
            .collect::<Vec<_>>(),
    )?;
    counter(
        enc,
        "ddioscope_drops",
        "Packets of the queue freed through kfree_skb (dropped).",
        &qs.iter()
            .map(|q| (qlabels(p, q), q.drops))
            .collect::<Vec<_>>(),
    )?;
    counter(
        enc,
        "ddioscope_napi_polls",
        "NAPI polls of the RX queue.",
        &rx.iter()
            .map(|q| (rxl(p, q), q.napi_polls))
            .collect::<Vec<_>>(),
    )?;
    counter(
        enc,
        "ddioscope_napi_packets",
        "Packets handled by the RX queue's NAPI polls (work).",
        &rx.iter()
            .map(|q| (rxl(p, q), q.napi_work))
            .collect::<Vec<_>>(),
    )?;
    counter(
        enc,
        "ddioscope_napi_budget_exhausted_polls",
        "NAPI polls that used their whole budget.",
        &rx.iter()
            .map(|q| (rxl(p, q), q.napi_budget_exhausted))
            .collect::<Vec<_>>(),
    )?;

    Ok(())
}

/// The stage-duration histograms, per queue or per direction.
fn encode_stages(enc: &mut DescriptorEncoder, p: &Published) -> Result<(), std::fmt::Error> {
    let qs: Vec<&QueueCounters> = p.queues.values().collect();
    if let Some(mode) = p.stage_histograms {
        let mut m = enc.encode_descriptor(
            "ddioscope_stage_duration_seconds",
            "Time packets spend in each stage of their life (kernel log2 buckets: le = 2^(b+1) ns).",
            None,
            MetricType::Histogram,
        )?;
        // Per direction: the queues' counters summed, labelled without the queue.
        let summed: Vec<QueueCounters>;
        let (hists, per_queue): (Vec<&QueueCounters>, bool) = match mode {
            StageHistograms::PerDirection => {
                summed = [Dir::Rx, Dir::Tx]
                    .into_iter()
                    .filter_map(|d| {
                        let mut sum = QueueCounters::new(d, 0);
                        qs.iter().filter(|q| q.dir == d).for_each(|q| sum.add(q));
                        qs.iter().any(|q| q.dir == d).then_some(sum)
                    })
                    .collect();
                (summed.iter().collect(), false)
            }
            _ => (qs.clone(), true),
        };
        for q in hists {
            for (s, stage) in q.dir.stage_names().iter().enumerate().take(NSTAGES) {
                if q.stage_count[s] == 0 {
                    continue;
                }
                let mut labels = if per_queue {
                    qlabels(p, q)
                } else {
                    vec![dev(p), ("direction", q.dir.as_str().into())]
                };
                labels.push(("stage", stage.to_string()));
                let (buckets, count) = log2_buckets(&q.stage_hist[s], q.stage_count[s]);
                m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    q.stage_sum_ns[s] as f64 / 1e9,
                    count,
                    &buckets,
                    None,
                )?;
            }
        }
    }

    Ok(())
}

/// In-flight bytes, DDIO capacity, the flows, lost records and the model's verdicts.
fn encode_flows(enc: &mut DescriptorEncoder, p: &Published) -> Result<(), std::fmt::Error> {
    gauge(enc, "ddioscope_rx_inflight_bytes",
        "RX bytes alive in the last interval by Little's law: bytes/s x mean driver_to_free residence.",
        &p.inflight.iter().map(|(q, b)| (vec![dev(p), ("queue", q.to_string())], *b)).collect::<Vec<_>>())?;
    gauge(
        enc,
        "ddioscope_ddio_capacity_bytes",
        "LLC bytes DDIO may allocate into: LLC size x 2 / ways (assumed 2 DDIO ways).",
        &p.ddio_capacity_bytes
            .map(|c| vec![(vec![dev(p)], c as f64)])
            .unwrap_or_default(),
    )?;

    let flow_series = |i: usize| -> Vec<(Labels, u64)> {
        p.flows
            .iter()
            .map(|(k, v)| (flow_labels(p, k), v[i]))
            .chain(
                p.flows_other
                    .iter()
                    .map(|(d, v)| (other_labels(p, *d), v[i])),
            )
            .collect()
    };
    counter(enc, "ddioscope_flow_bytes",
        "Frame bytes per flow, counted from when the flow entered the exported set (at most --top-flows per direction); the rest under proto=\"other\".",
        &flow_series(0))?;
    counter(enc, "ddioscope_flow_packets",
        "Packets per flow, counted from when the flow entered the exported set (at most --top-flows per direction); the rest under proto=\"other\".",
        &flow_series(1))?;
    counter(enc, "ddioscope_events_lost", "Per-packet records the BPF ring buffer had no room for. serve asks for none today (no per-packet sampling), so this stays 0; recordings count theirs too.",
        &[(vec![dev(p)], p.events.lost)])?;

    // Whether the verdict rests on the driver's ring or an assumed one: the alert rules act
    // only on the former.
    let ring_label = |d: Dir| {
        let known = match d {
            Dir::Rx => p.ring_known[0],
            Dir::Tx => p.ring_known[1],
        };
        if known {
            "reported"
        } else {
            "assumed"
        }
    };
    let verdict_series: Vec<(Labels, f64)> = p
        .verdicts
        .iter()
        .flat_map(|&(d, q, v)| {
            VerdictKind::ALL.map(|state| {
                let labels = vec![
                    dev(p),
                    ("direction", d.as_str().into()),
                    ("queue", q.to_string()),
                    ("verdict", state.as_str().into()),
                    ("ring", ring_label(d).into()),
                ];
                (labels, if state == v { 1.0 } else { 0.0 })
            })
        })
        .collect();
    gauge(enc, "ddioscope_model_verdict",
        "The DDIO model's verdict for the queue on the last interval with traffic (1 for the current one), as report gives it: fits, at_risk, leaky, or unknown (too little traffic, or a TX ring the driver does not report); ring=assumed when the driver reports no ring size. Model-only: 2 DDIO ways assumed, ring assumed 1024 entries when the driver reports none; on a host without DDIO, the Intel stand-in's LLC.",
        &verdict_series)?;

    Ok(())
}

/// The L3-miss samples and what they were charged to, when a sampler runs.
fn encode_misses(enc: &mut DescriptorEncoder, p: &Published) -> Result<(), std::fmt::Error> {
    if let Some((all, on_buffers)) = p.miss_totals {
        counter(enc, "ddioscope_miss_samples", "L3-miss samples taken (or the software stand-in's, see ddioscope_info's miss_sampling).",
            &[(vec![dev(p)], all)])?;
        counter(
            enc,
            "ddioscope_miss_samples_on_packet_buffers",
            "L3-miss samples whose data address was on a packet buffer.",
            &[(vec![dev(p)], on_buffers)],
        )?;
        let method = |i: usize| {
            if i == 0 {
                "address_join"
            } else {
                "cpu_context"
            }
        };
        counter(
            enc,
            "ddioscope_attributed_miss_samples",
            "L3-miss samples charged to the queue, by method (samples, not scaled by the period).",
            &p.miss_queues
                .iter()
                .flat_map(|(&(d, q), v)| {
                    (0..2).map(move |i| {
                        (
                            vec![
                                ("direction", d.as_str().into()),
                                ("queue", q.to_string()),
                                ("method", method(i).into()),
                            ],
                            v[i],
                        )
                    })
                })
                .map(|(mut l, v): (Labels, u64)| {
                    l.insert(0, dev(p));
                    (l, v)
                })
                .collect::<Vec<_>>(),
        )?;
        let miss_flow = |l: Labels, v: [u64; 3]| {
            (0..2).map(move |i| {
                let mut l = l.clone();
                l.push(("method", method(i).into()));
                (l, v[i + 1])
            })
        };
        counter(enc, "ddioscope_flow_attributed_miss_samples",
            "L3-miss samples charged to the flow, by method, from when the flow entered the exported set (at most --top-flows per direction; the rest under proto=\"other\").",
            &p.miss_flows
                .iter()
                .flat_map(|(k, v)| miss_flow(flow_labels(p, k), *v))
                .chain(p.miss_flows_other.iter().flat_map(|(d, v)| miss_flow(other_labels(p, *d), *v)))
                .collect::<Vec<_>>())?;
    }

    Ok(())
}

/// Intervals, the device's presence, state evictions and the hardware counters.
fn encode_host(enc: &mut DescriptorEncoder, p: &Published) -> Result<(), std::fmt::Error> {
    counter(
        enc,
        "ddioscope_intervals",
        "Snapshot intervals taken since start.",
        &[(vec![dev(p)], p.intervals)],
    )?;
    gauge(enc, "ddioscope_device_up",
        "1 while the observed interface exists, 0 while it (or its namespace) is gone; the counters keep their totals.",
        &[(vec![dev(p)], if p.device_up { 1.0 } else { 0.0 })])?;
    counter(enc, "ddioscope_state_evictions",
        "In-flight packet states overwritten in the kernel's direct-mapped table by a newer packet's (their stages go uncounted).",
        &[(vec![dev(p)], p.events.state_evicted)])?;

    counter(
        enc,
        "ddioscope_counter_events",
        "Hardware (or software) counter events per socket, scaled for multiplexing.",
        &p.counter_totals
            .iter()
            .map(|((s, pmu, ev), v)| {
                (
                    vec![
                        ("socket", s.to_string()),
                        ("pmu", pmu.clone()),
                        ("event", ev.clone()),
                    ],
                    *v,
                )
            })
            .collect::<Vec<_>>(),
    )?;
    gauge(
        enc,
        "ddioscope_ddio_write_miss_ratio",
        "Share of full-line inbound writes (ItoM) that missed the LLC, last interval.",
        &p.miss_ratios
            .iter()
            .filter_map(|(s, w, _)| w.map(|w| (vec![("socket", s.to_string())], w)))
            .collect::<Vec<_>>(),
    )?;
    gauge(
        enc,
        "ddioscope_ddio_read_miss_ratio",
        "Share of inbound reads (PCIRdCur) that missed the LLC, last interval.",
        &p.miss_ratios
            .iter()
            .filter_map(|(s, _, r)| r.map(|r| (vec![("socket", s.to_string())], r)))
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    shared: Arc<Shared>,
}

async fn metrics(State(s): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    let wants_openmetrics = headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.contains("application/openmetrics-text"))
    });
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
        Ok(()) if wants_openmetrics => {
            ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response()
        }
        Ok(()) => (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            openmetrics_to_classic(&body),
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed\n",
        )
            .into_response(),
    }
}

/// 200 while the probes count the device; 503 with the reason while starting, and while
/// the device is gone (the totals so far are still served, but nothing new is counted).
async fn healthz(State(s): State<AppState>) -> Response {
    match s.shared.get() {
        Some(p) if p.device_up => (StatusCode::OK, "ok\n").into_response(),
        Some(p) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("device {} is gone: waiting for it to return\n", p.device),
        )
            .into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found: try /metrics or /healthz\n",
    )
        .into_response()
}

/// Every route `serve` answers, over the latest published value.
pub fn router(shared: Arc<Shared>) -> Router {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(Arc::clone(&shared))));
    let state = AppState {
        registry: Arc::new(registry),
        shared,
    };
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .with_state(state)
}

/// The HTTP side, on its own thread; returns when `shutdown` fires (in-flight
/// connections are dropped with the runtime: a stuck client cannot hold us).
fn http_thread(
    listener: std::net::TcpListener,
    app: Router,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    let result = rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).context("registering the listener")?;
        tokio::select! {
            r = super::conns::accept_loop(listener, app, super::conns::connection_cap()) => r.context("HTTP server"),
            _ = shutdown => Ok(()),
        }
    });
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}

pub fn run(opts: &ServeArgs) -> Result<()> {
    let addr = listen_addr(&opts.listen, opts.allow_remote)?;
    if opts.top_flows > 1000 {
        bail!(
            "--top-flows {} is too many series: use at most 1000",
            opts.top_flows
        );
    }
    let live_opts = session_options(opts);
    let (features, iface) = Session::preflight(&live_opts)?;
    // Bind before attaching: a taken port fails without anything loaded.
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("--listen {addr}"))?;
    listener
        .set_nonblocking(true)
        .context("making the listener non-blocking")?;
    let stop = crate::sys::stop_flag()?;

    let shared = Arc::new(Shared::default());
    let app = router(Arc::clone(&shared));
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel();
    let http = std::thread::Builder::new()
        .name("http".into())
        .spawn(move || http_thread(listener, app, shutdown_rx))
        .context("starting the HTTP thread")?;

    let result = sample_loop(opts, &live_opts, features, iface, &shared, &stop, &http);
    let _ = shutdown_tx.send(());
    let http_result = http
        .join()
        .map_err(|_| anyhow::anyhow!("the HTTP thread panicked"))?;
    result.and(http_result)
}

fn sample_loop(
    opts: &ServeArgs,
    live_opts: &SessionOptions,
    features: crate::probe::features::Features,
    iface: crate::topology::IfaceInfo,
    shared: &Shared,
    stop: &AtomicBool,
    http: &std::thread::JoinHandle<Result<()>>,
) -> Result<()> {
    let addr = listen_addr(&opts.listen, opts.allow_remote)?;
    let mut live = Session::start(live_opts, features, iface)?;
    let end = opts
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    if opts.session.verbose {
        let ids: Vec<String> = live.prog_ids().iter().map(|i| i.to_string()).collect();
        eprintln!("attached: prog ids {}", ids.join(","));
    }
    let info = vec![
        ("netns", live.iface.netns.clone().unwrap_or_default()),
        ("driver", live.iface.driver.clone().unwrap_or_default()),
        ("counters", live.counters_source.to_string()),
        ("miss_sampling", live.miss_label.clone()),
        (
            "stage_histograms",
            opts.stage_histograms.as_str().to_string(),
        ),
        ("version", crate::build_info::VERSION.to_string()),
        ("git_commit", crate::build_info::GIT_COMMIT.to_string()),
        ("bpf_build_id", crate::build_info::BPF_BUILD_ID.to_string()),
    ];
    // The capacity and verdicts of the same LLC report models.
    let model = super::live_model::geometry(&live.host);
    let mut acc = Accumulator::new(
        &live.iface.name,
        model.as_ref().map(|g| g.geometry.ddio_capacity_bytes()),
        opts.top_flows,
        info,
    )
    .with_stage_histograms(opts.stage_histograms);
    if let Some(g) = model {
        acc = acc.with_model(g.geometry, live.iface.clone());
    }
    // Ready (healthz 200) once attached: from here every packet is counted.
    shared.set(acc.publish());
    eprintln!(
        "serving http://{}/metrics for {}{} (counters: {}); Ctrl-C to stop",
        addr,
        live.iface.name,
        live.iface
            .netns
            .as_deref()
            .map(|n| format!(" in netns {n}"))
            .unwrap_or_default(),
        live.counters_source
    );
    loop {
        let (snap, finishing) = live.next(stop, end)?;
        acc.add(&snap);
        if let Some(why) = live.gone().map(str::to_string) {
            // Keep serving what was counted, say the device is down, and take it up again
            // when an interface of that name is back (a new session on the new device).
            drop(live);
            acc.set_device_up(false);
            shared.set(acc.publish());
            eprintln!(
                "ddioscope serve: {why}; serving the totals so far, waiting for it to return"
            );
            let Some((features, back)) = Session::await_return(live_opts, stop, || {
                http.is_finished() || end.is_some_and(|e| Instant::now() >= e)
            })?
            else {
                return Ok(());
            };
            live = Session::start(live_opts, features, back)?;
            acc.set_device_up(true);
            shared.set(acc.publish());
            eprintln!(
                "ddioscope serve: {} is back; observing it again",
                live.iface.name
            );
            continue;
        }
        shared.set(acc.publish());
        if finishing {
            break;
        }
        if http.is_finished() {
            // The join in `run` reports the HTTP thread's error.
            break;
        }
    }
    // Detach before anything else can fail.
    drop(live);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only_unless_allowed() {
        assert!(listen_addr("127.0.0.1:9436", false).is_ok());
        assert!(listen_addr("[::1]:9436", false).is_ok());
        let e = listen_addr("0.0.0.0:9436", false).unwrap_err().to_string();
        assert!(e.contains("--allow-remote"), "{e}");
        assert!(listen_addr("0.0.0.0:9436", true).is_ok());
        assert!(listen_addr("localhost", false).is_err());
    }

    #[test]
    fn log2_buckets_have_power_of_two_bounds_and_inf() {
        let mut h = [0u64; NBUCKETS];
        h[0] = 1; // [1, 2) ns
        h[10] = 5; // [1024, 2048) ns
        let (b, count) = log2_buckets(&h, 7);
        assert_eq!(b.len(), NBUCKETS + 1);
        assert_eq!(b[0], (2e-9, 1));
        assert_eq!(b[10], (2048e-9, 5));
        assert_eq!(b[NBUCKETS], (f64::INFINITY, 1));
        assert_eq!(count, 7);
    }

    #[test]
    fn encodes_totals_top_flows_and_removes_stale_series() {
        use crate::snapshot::FlowCounters;
        let mut acc = Accumulator::new("eth9", Some(1 << 20), 1, vec![]);
        let mut q = QueueCounters::new(Dir::Rx, 3);
        q.packets = 10;
        q.bytes = 1000;
        q.stage_count[0] = 10;
        q.stage_sum_ns[0] = 10_000;
        q.stage_hist[0][9] = 10;
        let flow = |sport, bytes| FlowCounters {
            key: FlowKey {
                dir: Dir::Rx,
                proto: "tcp".into(),
                src: "10.0.0.1".into(),
                sport,
                dst: "10.0.0.2".into(),
                dport: 80,
            },
            queue: 3,
            packets: 1,
            bytes,
            payload_bytes: 0,
            first_ns: 0,
            last_ns: 0,
            samples: None,
            bytes_var: None,
            source: None,
        };
        let snap = Snapshot {
            dur_ns: 1_000_000_000,
            queues: vec![q.clone()],
            flows: vec![flow(1, 50), flow(2, 70)],
            ..Default::default()
        };
        acc.add(&snap);
        acc.add(&Snapshot {
            flows: vec![flow(1, 500), flow(2, 70)],
            ..snap.clone()
        });
        let shared = Arc::new(Shared::default());
        shared.set(acc.publish());
        let mut reg = Registry::default();
        reg.register_collector(Box::new(SnapshotCollector(Arc::clone(&shared))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(
            text.contains(r#"ddioscope_packets_total{device="eth9",direction="rx",queue="3"} 20"#),
            "{text}"
        );
        // Bucket 9 holds [512, 1024) ns: le = 1024 ns; 2^9 ns is still below it.
        assert!(text.contains(r#"bucket{le="0.000001024",device="eth9",direction="rx",queue="3",stage="driver_to_stack"} 20"#), "{text}");
        assert!(text.contains(r#"bucket{le="5.12e-7",device="eth9",direction="rx",queue="3",stage="driver_to_stack"} 0"#), "{text}");
        assert!(text.contains(r#"ddioscope_stage_duration_seconds_count{device="eth9",direction="rx",queue="3",stage="driver_to_stack"} 20"#));
        // One flow series (cap 1): flow 2 led first, flow 1 then grew 450 bytes against
        // flow 2's none and took its place, counting from there; the rest is "other".
        assert!(text.contains(r#"ddioscope_flow_bytes_total{device="eth9",direction="rx",proto="tcp",src="10.0.0.1",sport="1",dst="10.0.0.2",dport="80"} 450"#), "{text}");
        assert!(!text.contains(r#"sport="2""#), "{text}");
        assert!(text.contains(r#"ddioscope_flow_bytes_total{device="eth9",direction="rx",proto="other",src="other",sport="other",dst="other",dport="other"} 50"#), "{text}");
        assert!(
            text.contains("ddioscope_ddio_capacity_bytes{device=\"eth9\"} 1048576.0"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));

        // No LLC in the test accumulator: no verdicts; no sampler: no miss series.
        assert!(
            !text.contains("ddioscope_model_verdict{") && !text.contains("miss_samples"),
            "{text}"
        );

        let classic = openmetrics_to_classic(&text);
        assert!(
            !classic.contains("# EOF") && !classic.contains(" info\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# HELP ddioscope_packets_total Packets per queue"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE ddioscope_packets_total counter\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE ddioscope_info gauge\nddioscope_info{device=\"eth9\"} 1\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE ddioscope_stage_duration_seconds histogram\n"),
            "{classic}"
        );
    }

    fn encode(acc: &Accumulator) -> String {
        let shared = Arc::new(Shared::default());
        shared.set(acc.publish());
        let mut reg = Registry::default();
        reg.register_collector(Box::new(SnapshotCollector(shared)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        text
    }

    fn two_queues() -> Snapshot {
        let q = |n| {
            let mut q = QueueCounters::new(Dir::Rx, n);
            q.packets = 1000;
            q.bytes = 1000 * 1500;
            q.stage_count[3] = 1000;
            q.stage_sum_ns[3] = 1000 * 6000;
            q.stage_hist[3][12] = 1000;
            q
        };
        Snapshot {
            dur_ns: 1_000_000_000,
            queues: vec![q(0), q(1)],
            ..Default::default()
        }
    }

    #[test]
    fn stage_histograms_per_direction_sum_the_queues_and_off_drops_them() {
        let per_dir = {
            let mut acc = Accumulator::new("eth9", None, 10, vec![])
                .with_stage_histograms(StageHistograms::PerDirection);
            acc.add(&two_queues());
            encode(&acc)
        };
        let line = r#"ddioscope_stage_duration_seconds_count{device="eth9",direction="rx",stage="driver_to_free"} 2000"#;
        assert!(per_dir.contains(line), "{per_dir}");
        assert!(!per_dir.contains(r#"queue="0",stage"#), "{per_dir}");
        // Packet counters stay per queue.
        assert!(
            per_dir.contains(
                r#"ddioscope_packets_total{device="eth9",direction="rx",queue="1"} 1000"#
            ),
            "{per_dir}"
        );
        let off = {
            let mut acc = Accumulator::new("eth9", None, 10, vec![])
                .with_stage_histograms(StageHistograms::Off);
            acc.add(&two_queues());
            encode(&acc)
        };
        assert!(!off.contains("ddioscope_stage_duration_seconds"), "{off}");
        let per_queue = {
            let mut acc = Accumulator::new("eth9", None, 10, vec![]);
            acc.add(&two_queues());
            encode(&acc)
        };
        assert_eq!(
            per_queue
                .matches("ddioscope_stage_duration_seconds_count{")
                .count(),
            2,
            "{per_queue}"
        );
    }

    #[test]
    fn verdicts_are_a_state_set_per_busy_queue() {
        let iface = crate::topology::IfaceInfo {
            rx_ring: Some(8192),
            ..Default::default()
        };
        let mut acc = Accumulator::new("eth9", None, 10, vec![])
            .with_model(crate::model::geometry::LlcGeometry::skx_gold_6140(), iface);
        acc.add(&two_queues());
        let text = encode(&acc);
        // Two rings of 8192 x 1.5 KiB: 26 MiB against 4.5 MiB of DDIO capacity.
        for q in ["0", "1"] {
            for (v, x) in [
                ("fits", "0.0"),
                ("at_risk", "0.0"),
                ("leaky", "1.0"),
                ("unknown", "0.0"),
            ] {
                let l = format!(
                    r#"ddioscope_model_verdict{{device="eth9",direction="rx",queue="{q}",verdict="{v}",ring="reported"}} {x}"#
                );
                assert!(text.contains(&l), "{l}\n{text}");
            }
        }
    }

    #[test]
    fn miss_samples_by_queue_and_flow_with_other() {
        use crate::snapshot::MissSnapshot;
        let key = |sport| FlowKey {
            dir: Dir::Rx,
            proto: "udp".into(),
            src: "10.0.0.1".into(),
            sport,
            dst: "10.0.0.2".into(),
            dport: 9,
        };
        let mut acc = Accumulator::new("eth9", None, 1, vec![]);
        let m = MissSnapshot {
            samples: 10,
            on_packet_buffers: 7,
            queues: vec![(Dir::Rx, 2, 5, 2)],
            flows: vec![(key(1), 4, 1), (key(2), 1, 1)],
            ..Default::default()
        };
        acc.add(&Snapshot {
            misses: Some(m),
            ..two_queues()
        });
        let text = encode(&acc);
        for l in [
            r#"ddioscope_miss_samples_total{device="eth9"} 10"#,
            r#"ddioscope_miss_samples_on_packet_buffers_total{device="eth9"} 7"#,
            r#"ddioscope_attributed_miss_samples_total{device="eth9",direction="rx",queue="2",method="address_join"} 5"#,
            r#"ddioscope_attributed_miss_samples_total{device="eth9",direction="rx",queue="2",method="cpu_context"} 2"#,
            r#"ddioscope_flow_attributed_miss_samples_total{device="eth9",direction="rx",proto="udp",src="10.0.0.1",sport="1",dst="10.0.0.2",dport="9",method="address_join"} 4"#,
            r#"ddioscope_flow_attributed_miss_samples_total{device="eth9",direction="rx",proto="other",src="other",sport="other",dst="other",dport="other",method="cpu_context"} 1"#,
        ] {
            assert!(text.contains(l), "{l}\n{text}");
        }
    }
}
