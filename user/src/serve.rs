//! `ddioscope serve`: an OpenMetrics `/metrics` endpoint (and `/healthz`) fed by
//! the live Snapshot stream. The session samples on the main thread and
//! publishes cumulative totals as one immutable value; scrapes (axum on a
//! one-thread tokio runtime of their own) only take a pointer to the latest
//! value, so neither side blocks the other for longer than an Arc clone.
use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

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

use crate::live::{CountersMode, LiveOptions, LiveSession};
use crate::snapshot::{Dir, EventCounters, FlowCounters, QueueCounters, Snapshot, NBUCKETS, NSTAGES};
use crate::view;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub iface: String,
    pub netns: Option<String>,
    pub listen: String,
    pub allow_remote: bool,
    pub top_flows: usize,
    pub interval_ms: u64,
    pub counters: CountersMode,
    pub verbose: bool,
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
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| anyhow::anyhow!("--listen {listen}: expected IP:PORT, e.g. 127.0.0.1:9436 or [::1]:9436"))?;
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
    /// Top N flows by bytes (cumulative as the kernel counts them).
    pub flows: Vec<FlowCounters>,
    pub events: EventCounters,
    pub intervals: u64,
    /// (socket, event) → scaled cumulative value; per-socket totals only.
    pub counter_totals: BTreeMap<(u32, String, String), f64>,
    /// (socket, write miss ratio, read miss ratio) of the last interval.
    pub miss_ratios: Vec<(u32, Option<f64>, Option<f64>)>,
    pub info: Vec<(&'static str, String)>,
}

/// Accumulates the stream into totals; `publish` makes the immutable view.
pub struct Accumulator {
    current: Published,
    top_flows: usize,
}

impl Accumulator {
    pub fn new(device: &str, ddio_capacity_bytes: Option<u64>, top_flows: usize, info: Vec<(&'static str, String)>) -> Self {
        Accumulator {
            current: Published { device: device.to_string(), ddio_capacity_bytes, info, ..Default::default() },
            top_flows,
        }
    }

    pub fn add(&mut self, snap: &Snapshot) {
        let p = &mut self.current;
        p.intervals += 1;
        for d in &snap.queues {
            p.queues.entry((d.dir, d.queue)).or_insert_with(|| QueueCounters::new(d.dir, d.queue)).add(d);
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
        // The flow table is read only on some intervals: keep the last reading.
        if !snap.flows.is_empty() {
            let mut flows = snap.flows.clone();
            flows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.key.cmp(&b.key)));
            flows.truncate(self.top_flows);
            // Series of flows that left the top N disappear with this replacement.
            p.flows = flows;
        }
        for r in snap.counters.iter().filter(|r| r.is_socket_total()) {
            *p.counter_totals.entry((r.socket, r.pmu.clone(), r.event.clone())).or_default() += r.value;
        }
        let dur_s = snap.dur_ns as f64 / 1e9;
        if !snap.counters.is_empty() && dur_s > 0.0 {
            p.miss_ratios = crate::counters::socket_metrics(&snap.counters, dur_s)
                .into_iter()
                .map(|m| (m.socket, m.write_miss_pct.map(|v| v / 100.0), m.read_miss_pct.map(|v| v / 100.0)))
                .collect();
        }
    }

    pub fn publish(&self) -> Arc<Published> {
        let p = &self.current;
        Arc::new(Published {
            device: p.device.clone(),
            queues: p.queues.clone(),
            inflight: p.inflight.clone(),
            ddio_capacity_bytes: p.ddio_capacity_bytes,
            flows: p.flows.clone(),
            events: p.events,
            intervals: p.intervals,
            counter_totals: p.counter_totals.clone(),
            miss_ratios: p.miss_ratios.clone(),
            info: p.info.clone(),
        })
    }
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
        self.latest.lock().unwrap_or_else(|e| e.into_inner()).clone()
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

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, series: &[(Labels, f64)]) -> Result<(), std::fmt::Error> {
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
    let mut out: Vec<(f64, u64)> = hist.iter().enumerate().map(|(b, &c)| ((1u64 << (b + 1)) as f64 / 1e9, c)).collect();
    let in_buckets: u64 = hist.iter().sum();
    let total = count.max(in_buckets);
    out.push((f64::INFINITY, total - in_buckets));
    (out, total)
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = self.0.get() else { return Ok(()) };
        let dev = || ("device", p.device.clone());
        let qlabels = |q: &QueueCounters| -> Labels { vec![dev(), ("direction", q.dir.as_str().into()), ("queue", q.queue.to_string())] };
        let rx: Vec<&QueueCounters> = p.queues.values().filter(|q| q.dir == Dir::Rx).collect();
        let rxl = |q: &QueueCounters| -> Labels { vec![dev(), ("queue", q.queue.to_string())] };

        {
            let mut m = enc.encode_descriptor("ddioscope", "What ddioscope observes and how.", None, MetricType::Info)?;
            let mut labels: Labels = vec![dev()];
            labels.extend(p.info.iter().cloned());
            m.encode_info(&labels)?;
        }
        let qs: Vec<&QueueCounters> = p.queues.values().collect();
        counter(&mut enc, "ddioscope_packets", "Packets per queue and direction (frames as the interface counts them).",
            &qs.iter().map(|q| (qlabels(q), q.packets)).collect::<Vec<_>>())?;
        counter(&mut enc, "ddioscope_bytes", "Frame bytes (L2 header included) per queue and direction.",
            &qs.iter().map(|q| (qlabels(q), q.bytes)).collect::<Vec<_>>())?;
        counter(&mut enc, "ddioscope_drops", "Packets of the queue freed through kfree_skb (dropped).",
            &qs.iter().map(|q| (qlabels(q), q.drops)).collect::<Vec<_>>())?;
        counter(&mut enc, "ddioscope_napi_polls", "NAPI polls of the RX queue.",
            &rx.iter().map(|q| (rxl(q), q.napi_polls)).collect::<Vec<_>>())?;
        counter(&mut enc, "ddioscope_napi_packets", "Packets handled by the RX queue's NAPI polls (work).",
            &rx.iter().map(|q| (rxl(q), q.napi_work)).collect::<Vec<_>>())?;
        counter(&mut enc, "ddioscope_napi_budget_exhausted_polls", "NAPI polls that used their whole budget.",
            &rx.iter().map(|q| (rxl(q), q.napi_budget_exhausted)).collect::<Vec<_>>())?;

        {
            let mut m = enc.encode_descriptor(
                "ddioscope_stage_duration_seconds",
                "Time packets spend in each stage of their life (kernel log2 buckets: le = 2^(b+1) ns).",
                None,
                MetricType::Histogram,
            )?;
            for q in &qs {
                for (s, stage) in q.dir.stage_names().iter().enumerate().take(NSTAGES) {
                    if q.stage_count[s] == 0 {
                        continue;
                    }
                    let mut labels = qlabels(q);
                    labels.push(("stage", stage.to_string()));
                    let (buckets, count) = log2_buckets(&q.stage_hist[s], q.stage_count[s]);
                    m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(q.stage_sum_ns[s] as f64 / 1e9, count, &buckets, None)?;
                }
            }
        }

        gauge(&mut enc, "ddioscope_rx_inflight_bytes",
            "RX bytes alive in the last interval by Little's law: bytes/s x mean driver_to_free residence.",
            &p.inflight.iter().map(|(q, b)| (vec![dev(), ("queue", q.to_string())], *b)).collect::<Vec<_>>())?;
        gauge(&mut enc, "ddioscope_ddio_capacity_bytes",
            "LLC bytes DDIO may allocate into: LLC size x 2 / ways (assumed 2 DDIO ways).",
            &p.ddio_capacity_bytes.map(|c| vec![(vec![dev()], c as f64)]).unwrap_or_default())?;

        let flow_labels = |f: &FlowCounters| -> Labels {
            vec![
                dev(),
                ("direction", f.key.dir.as_str().into()),
                ("proto", f.key.proto.clone()),
                ("src", f.key.src.clone()),
                ("sport", f.key.sport.to_string()),
                ("dst", f.key.dst.clone()),
                ("dport", f.key.dport.to_string()),
            ]
        };
        counter(&mut enc, "ddioscope_flow_bytes", "Frame bytes of the top flows by bytes (see --top-flows).",
            &p.flows.iter().map(|f| (flow_labels(f), f.bytes)).collect::<Vec<_>>())?;
        counter(&mut enc, "ddioscope_flow_packets", "Packets of the top flows by bytes (see --top-flows).",
            &p.flows.iter().map(|f| (flow_labels(f), f.packets)).collect::<Vec<_>>())?;

        counter(&mut enc, "ddioscope_intervals", "Snapshot intervals taken since start.", &[(vec![dev()], p.intervals)])?;
        counter(&mut enc, "ddioscope_state_evictions",
            "In-flight packet states the kernel's LRU evicted (their stages go uncounted).",
            &[(vec![dev()], p.events.state_evicted)])?;

        counter(&mut enc, "ddioscope_counter_events",
            "Hardware (or software) counter events per socket, scaled for multiplexing.",
            &p.counter_totals
                .iter()
                .map(|((s, pmu, ev), v)| (vec![("socket", s.to_string()), ("pmu", pmu.clone()), ("event", ev.clone())], *v))
                .collect::<Vec<_>>())?;
        gauge(&mut enc, "ddioscope_ddio_write_miss_ratio", "Share of full-line inbound writes (ItoM) that missed the LLC, last interval.",
            &p.miss_ratios.iter().filter_map(|(s, w, _)| w.map(|w| (vec![("socket", s.to_string())], w))).collect::<Vec<_>>())?;
        gauge(&mut enc, "ddioscope_ddio_read_miss_ratio", "Share of inbound reads (PCIRdCur) that missed the LLC, last interval.",
            &p.miss_ratios.iter().filter_map(|(s, _, r)| r.map(|r| (vec![("socket", s.to_string())], r))).collect::<Vec<_>>())?;
        Ok(())
    }
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    shared: Arc<Shared>,
}

async fn metrics(State(s): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    let wants_openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("application/openmetrics-text")));
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
        Ok(()) if wants_openmetrics => ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Ok(()) => ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], openmetrics_to_classic(&body)).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "encoding the metrics failed\n").into_response(),
    }
}

async fn healthz(State(s): State<AppState>) -> Response {
    if s.shared.get().is_some() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found: try /metrics or /healthz\n").into_response()
}

/// Every route `serve` answers, over the latest published value.
pub fn router(shared: Arc<Shared>) -> Router {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(Arc::clone(&shared))));
    let state = AppState { registry: Arc::new(registry), shared };
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
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the HTTP runtime")?;
    let result = rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).context("registering the listener")?;
        tokio::select! {
            r = axum::serve(listener, app).into_future() => r.context("HTTP server"),
            _ = shutdown => Ok(()),
        }
    });
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}

pub fn run(opts: &ServeOptions) -> Result<()> {
    let addr = listen_addr(&opts.listen, opts.allow_remote)?;
    if opts.top_flows > 1000 {
        bail!("--top-flows {} is too many series: use at most 1000", opts.top_flows);
    }
    let flow_every = (1000 / opts.interval_ms.max(1)).max(1);
    let live_opts = LiveOptions::surface(
        &opts.iface,
        opts.netns.as_deref(),
        opts.interval_ms,
        opts.counters,
        flow_every,
        opts.verbose,
    );
    let (features, iface) = LiveSession::preflight(&live_opts)?;
    // Bind before attaching: a taken port fails without anything loaded.
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("--listen {addr}"))?;
    listener.set_nonblocking(true).context("making the listener non-blocking")?;
    let stop = crate::live::stop_flag()?;

    let shared = Arc::new(Shared::default());
    let app = router(Arc::clone(&shared));
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel();
    let http = std::thread::Builder::new()
        .name("http".into())
        .spawn(move || http_thread(listener, app, shutdown_rx))
        .context("starting the HTTP thread")?;

    let result = sample_loop(opts, &live_opts, features, iface, &shared, &stop, &http);
    let _ = shutdown_tx.send(());
    let http_result = http.join().map_err(|_| anyhow::anyhow!("the HTTP thread panicked"))?;
    result.and(http_result)
}

fn sample_loop(
    opts: &ServeOptions,
    live_opts: &LiveOptions,
    features: crate::probe::features::Features,
    iface: crate::topology::IfaceInfo,
    shared: &Shared,
    stop: &AtomicBool,
    http: &std::thread::JoinHandle<Result<()>>,
) -> Result<()> {
    let addr = listen_addr(&opts.listen, opts.allow_remote)?;
    let mut live = LiveSession::start(live_opts, features, iface)?;
    if opts.verbose {
        let ids: Vec<String> = live.probe.prog_ids().iter().map(|i| i.to_string()).collect();
        eprintln!("attached: prog ids {}", ids.join(","));
    }
    let info = vec![
        ("netns", live.iface.netns.clone().unwrap_or_default()),
        ("driver", live.iface.driver.clone().unwrap_or_default()),
        ("counters", live.counters_source.to_string()),
        ("version", env!("CARGO_PKG_VERSION").to_string()),
    ];
    let mut acc = Accumulator::new(&live.iface.name, view::ddio_capacity_bytes(&live.host), opts.top_flows, info);
    // Ready (healthz 200) once attached: from here every packet is counted.
    shared.set(acc.publish());
    eprintln!(
        "serving http://{}/metrics for {}{} (counters: {}); Ctrl-C to stop",
        addr,
        live.iface.name,
        live.iface.netns.as_deref().map(|n| format!(" in netns {n}")).unwrap_or_default(),
        live.counters_source
    );
    loop {
        let (snap, finishing) = live.next(stop, None)?;
        acc.add(&snap);
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
        use crate::snapshot::FlowKey;
        let mut acc = Accumulator::new("eth9", Some(1 << 20), 1, vec![]);
        let mut q = QueueCounters::new(Dir::Rx, 3);
        q.packets = 10;
        q.bytes = 1000;
        q.stage_count[0] = 10;
        q.stage_sum_ns[0] = 10_000;
        q.stage_hist[0][9] = 10;
        let flow = |sport, bytes| FlowCounters {
            key: FlowKey { dir: Dir::Rx, proto: "tcp".into(), src: "10.0.0.1".into(), sport, dst: "10.0.0.2".into(), dport: 80 },
            queue: 3,
            packets: 1,
            bytes,
            payload_bytes: 0,
            first_ns: 0,
            last_ns: 0,
        };
        let snap = Snapshot { dur_ns: 1_000_000_000, queues: vec![q.clone()], flows: vec![flow(1, 50), flow(2, 70)], ..Default::default() };
        acc.add(&snap);
        acc.add(&Snapshot { flows: vec![flow(1, 500), flow(2, 70)], ..snap.clone() });
        let shared = Arc::new(Shared::default());
        shared.set(acc.publish());
        let mut reg = Registry::default();
        reg.register_collector(Box::new(SnapshotCollector(Arc::clone(&shared))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(text.contains(r#"ddioscope_packets_total{device="eth9",direction="rx",queue="3"} 20"#), "{text}");
        // Bucket 9 holds [512, 1024) ns: le = 1024 ns; 2^9 ns is still below it.
        assert!(text.contains(r#"bucket{le="0.000001024",device="eth9",direction="rx",queue="3",stage="driver_to_stack"} 20"#), "{text}");
        assert!(text.contains(r#"bucket{le="5.12e-7",device="eth9",direction="rx",queue="3",stage="driver_to_stack"} 0"#), "{text}");
        assert!(text.contains(r#"ddioscope_stage_duration_seconds_count{device="eth9",direction="rx",queue="3",stage="driver_to_stack"} 20"#));
        // Only the top flow by bytes; flow 2 led first and is gone now.
        assert!(text.contains(r#"sport="1""#) && !text.contains(r#"sport="2""#), "{text}");
        assert!(text.contains("ddioscope_ddio_capacity_bytes{device=\"eth9\"} 1048576.0"), "{text}");
        assert!(text.ends_with("# EOF\n"));

        let classic = openmetrics_to_classic(&text);
        assert!(!classic.contains("# EOF") && !classic.contains(" info\n"), "{classic}");
        assert!(classic.contains("# HELP ddioscope_packets_total Packets per queue"), "{classic}");
        assert!(classic.contains("# TYPE ddioscope_packets_total counter\n"), "{classic}");
        assert!(classic.contains("# TYPE ddioscope_info gauge\nddioscope_info{device=\"eth9\"} 1\n"), "{classic}");
        assert!(classic.contains("# TYPE ddioscope_stage_duration_seconds histogram\n"), "{classic}");
    }
}
