//! Fuzz targets: each takes untrusted bytes to one of ddioscope's parsers and everything
//! that consumes its result, and may fail only by returning an error. A panic, abort or
//! hang is a bug. AFL++ drives them through src/bin/*.rs (`make fuzz`); tests/corpus.rs
//! replays every committed corpus file through the same functions under `cargo test`.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ddioscope::recording::{Recording, APPLICATION_ID, SCHEMA, SCHEMA_VERSION};

/// A fuzz target: untrusted bytes in, nothing out; only a panic, abort or hang is a finding.
pub type Target = fn(&[u8]);

/// Every target by name, as the corpus directories and AFL binaries are named.
pub const TARGETS: &[(&str, Target)] = &[
    ("recording", recording),
    ("recording_sql", recording_sql),
    ("perf_csv", perf_csv),
    ("simspec", simspec),
    ("serve_http", serve_http),
    ("sysfs", sysfs),
];

/// The repository's fixtures (seed shapes, and the trees the sysfs target edits).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// A scratch directory of this process, under `$TMPDIR/ddioscope-fuzz/PID`. AFL++
/// restarts targets often and statics are never dropped, so each start removes the
/// directories of processes that are gone instead.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::temp_dir().join("ddioscope-fuzz");
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let gone = e
                    .file_name()
                    .to_str()
                    .and_then(|p| p.parse::<i32>().ok())
                    .is_some_and(|pid| {
                        // SAFETY: signal 0 sends nothing; it only asks whether `pid` exists.
                        unsafe { libc_kill(pid, 0) != 0 }
                    });
                if gone {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = base.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).expect("creating the fuzz scratch directory");
        dir
    })
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// What `ddioscope report` does with a recording it could open: the summary, its text and
/// JSON, the observation the model starts from and the workload spec derived from it
/// (checked and evaluated as the simspec target does). With `full`, also the attribution,
/// the whole text and JSON report and the HTML page, whose what-if curves run the LLC
/// simulator: seconds per recording, too slow to fuzz, so only the corpus replay runs
/// them (`report_full`).
fn report_all(rec: &Recording, full: bool) {
    use ddioscope::analysis;
    use ddioscope::report;
    let Ok(summary) = analysis::summary::build(rec) else {
        return;
    };
    let mut text = report::text::Out::new(100);
    report::text::render_evidence(&mut text, &summary, &report::text::TextOptions::default());
    let _ = serde_json::to_string(&summary);
    let obs = analysis::observation(rec, &summary, Default::default()).ok();
    if let Some(spec) = obs
        .as_ref()
        .and_then(|o| ddioscope::advise::spec_from_observation(o, None, None))
    {
        evaluate_spec(&spec);
    }
    if full {
        let Ok(outcome) = analysis::advise_or_explain(rec, &summary, Default::default()) else {
            return;
        };
        let _ =
            report::text::render_report(&summary, &outcome, &report::text::TextOptions::default());
        let _ = report::json::FullReport::new(&summary, &outcome).to_json();
        if let Ok(charts) = analysis::charts(rec, &summary, &outcome) {
            let _ = report::html::render_html(&summary, &outcome, &charts);
        }
    }
}

/// Opens `path` as a recording and reports it, as `report` would, and reads its page-pool
/// table (read on its own, not by `Recording::open`).
fn open_and_report(path: &Path, full: bool) {
    if let Ok(mut rec) = Recording::open(path) {
        report_all(&rec, full);
        let _ = ddioscope::recording::reader::page_pools(path);
        // A window of the first half, as `report --from 0 --to T/2` reads it.
        use ddioscope::recording::window::TimeSpec;
        let half = rec.window.to_s / 2.0;
        if half.is_finite()
            && half > 0.0
            && rec
                .set_window(Some(TimeSpec::Offset(0.0)), Some(TimeSpec::Offset(half)))
                .is_ok()
        {
            report_all(&rec, false);
        }
    }
}

/// The recording or recording_sql target (by `name`) with the attribution and the HTML
/// page too: what the corpus replay runs on seeds and regression inputs.
pub fn report_full(name: &str, data: &[u8]) {
    match name {
        "recording" => recording_with(data, true),
        "recording_sql" => recording_sql_with(data, true),
        _ => {}
    }
}

/// Removes what SQLite may have left beside a database file (a fuzzed header can ask
/// for WAL mode), so no run sees the last one's files.
fn remove_db(path: &Path) {
    for suffix in ["", "-journal", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// A recording file as bytes (a damaged, truncated or foreign SQLite file).
pub fn recording(data: &[u8]) {
    recording_with(data, false)
}

fn recording_with(data: &[u8], full: bool) {
    let path = scratch().join("bytes.ddio");
    remove_db(&path);
    if std::fs::write(&path, data).is_ok() {
        open_and_report(&path, full);
    }
    remove_db(&path);
}

/// The empty recording schema as a file image, made once.
fn empty_recording() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let path = scratch().join("schema.ddio");
        remove_db(&path);
        let c = rusqlite::Connection::open(&path).expect("creating the schema image");
        c.execute_batch(&format!(
            "PRAGMA page_size = 1024; PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};
             BEGIN; {SCHEMA} COMMIT;"
        ))
        .expect("creating the recording schema");
        drop(c);
        let image = std::fs::read(&path).expect("reading the schema image");
        remove_db(&path);
        image
    })
}

/// SQL is run with a deadline: a statement can loop (a recursive query) or multiply
/// rows without end, and that is the fuzzer's input misbehaving, not the reader.
struct Watchdog {
    deadline: Mutex<Option<(Instant, rusqlite::InterruptHandle)>>,
}

fn watchdog() -> &'static Watchdog {
    static W: OnceLock<Arc<Watchdog>> = OnceLock::new();
    W.get_or_init(|| {
        let w = Arc::new(Watchdog {
            deadline: Mutex::new(None),
        });
        let w2 = Arc::clone(&w);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(20));
            let guard = w2.deadline.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, h)) = guard.as_ref() {
                if Instant::now() >= *at {
                    h.interrupt();
                }
            }
        });
        w
    })
}

/// Words the SQL target refuses: they would write files outside the scratch database.
const SQL_REFUSED: &[&str] = &[
    "attach",
    "vacuum",
    "load_extension",
    "temp_store_directory",
    "data_store_directory",
];

/// SQL run on an empty recording (its schema, id and version), then the file is opened
/// and reported: reaches every value a damaged or hand-edited recording can hold (NULLs,
/// negative or huge numbers, wrong types, odd strings, missing rows) far faster than
/// flipping bytes in SQLite pages does.
pub fn recording_sql(data: &[u8]) {
    recording_sql_with(data, false)
}

fn recording_sql_with(data: &[u8], full: bool) {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let lower = sql.to_ascii_lowercase();
    if SQL_REFUSED.iter().any(|w| lower.contains(w)) {
        return;
    }
    let path = scratch().join("sql.ddio");
    remove_db(&path);
    if std::fs::write(&path, empty_recording()).is_err() {
        return;
    }
    if let Ok(c) = rusqlite::Connection::open(&path) {
        // Statements outside a transaction each commit: without these, every INSERT
        // waits for the disk.
        let _ = c.execute_batch("PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY;");
        let w = watchdog();
        *w.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some((
            Instant::now() + Duration::from_millis(250),
            c.get_interrupt_handle(),
        ));
        let _ = c.execute_batch(sql);
        *w.deadline.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(c);
        open_and_report(&path, full);
    }
    remove_db(&path);
}

/// A `perf stat -I … -x,` CSV (`import-counters`, `record --counters-from`), and the
/// per-socket metrics derived from every interval it yields.
pub fn perf_csv(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(intervals) = ddioscope::counters::import::parse_perf_stat_csv(text) {
        for iv in &intervals {
            let _ = ddioscope::counters::socket_metrics(iv, 1.0);
        }
    }
}

/// A `simulate --synthetic` spec: parsing and validation, then only evaluation whose
/// cost is bounded for every accepted spec (the simulator itself is not run here).
pub fn simspec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = ddioscope::model::spec::SimSpec::parse(text) {
        evaluate_spec(&spec);
    }
}

/// The analytic side of a spec, whose cost is bounded for every valid spec.
fn evaluate_spec(spec: &ddioscope::model::spec::SimSpec) {
    // The per-queue tables are O(queues); bounding the queue count is validation's job.
    if spec.validate().is_err() || spec.queues > 4096 {
        return;
    }
    let _ = spec.queue_pps();
    for q in 0..spec.queues.min(8) as usize {
        let _ = spec.mean_pkt_bytes(q);
        let _ = spec.ring_footprint_bytes(q);
        let _ = spec.service_ns(spec.mean_pkt_bytes(q) as u32);
    }
    let _ = spec.geometry.ddio_capacity_bytes();
    // What a run would be given (slice sampling, packet cap), and what the output reports.
    let _ = spec.bounded();
    let _ = (
        spec.layout(),
        spec.page_pool(),
        spec.inputs(),
        spec.cache_key(),
    );
    let _ = serde_json::to_string(&spec);
}

/// serve's router over a published value made from a fixture's counters: `ready`
/// false is the state before the probes attach (healthz 503).
fn serve_router(ready: bool) -> axum::Router {
    use ddioscope::snapshot::{Dir, FlowCounters, FlowKey, QueueCounters, Snapshot};
    use ddioscope::surfaces::serve::{Accumulator, Shared};
    let shared = Arc::new(Shared::default());
    if ready {
        let mut acc = Accumulator::new(
            "eth\"0\\\n",
            Some(12 << 20),
            4,
            vec![
                ("netns", "ddio-rcv".into()),
                ("driver", "veth".into()),
                ("version", "fuzz".into()),
            ],
        );
        let csv = std::fs::read_to_string(fixtures().join("counters/perf_stat_emr_per_socket.csv"))
            .unwrap_or_default();
        let counters = ddioscope::counters::import::parse_perf_stat_csv(&csv)
            .ok()
            .and_then(|v| v.into_iter().next())
            .unwrap_or_default();
        let mut queues = Vec::new();
        for (i, dir) in [Dir::Rx, Dir::Tx, Dir::Rx].into_iter().enumerate() {
            let mut q = QueueCounters::new(dir, i as u32);
            q.packets = 1000 * (i as u64 + 1);
            q.bytes = q.packets * 1500;
            q.stage_count[0] = q.packets;
            q.stage_sum_ns[0] = q.packets * 3000;
            q.stage_hist[0][11] = q.packets;
            queues.push(q);
        }
        let flow = |sport: u16| FlowCounters {
            key: FlowKey {
                dir: Dir::Rx,
                proto: "tcp".into(),
                src: "fd77::1".into(),
                sport,
                dst: "10.77.0.2".into(),
                dport: 5201,
            },
            queue: 1,
            packets: 10,
            bytes: 15000 + sport as u64,
            payload_bytes: 14000,
            first_ns: 1,
            last_ns: 2,
            samples: Some(3),
            bytes_var: Some(1 << 20),
            source: None,
        };
        let snap = Snapshot {
            dur_ns: 1_000_000_000,
            queues,
            flows: (1..6).map(flow).collect(),
            counters,
            ..Default::default()
        };
        acc.add(&snap);
        acc.add(&snap);
        shared.set(acc.publish());
    }
    ddioscope::surfaces::serve::router(shared)
}

/// A connection's bytes in memory: reads come from the input, writes are kept.
struct MemIo<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl hyper::rt::Read for MemIo<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.input.len().min(buf.remaining());
        buf.put_slice(&self.input[..n]);
        self.input = &self.input[n..];
        std::task::Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for MemIo<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.output.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Bytes a client sends to `serve` on one connection (any number of pipelined
/// requests, malformed or not), through hyper's HTTP/1 parser into serve's router.
/// The first byte picks the state: before the probes attach, or serving data.
pub fn serve_http(data: &[u8]) {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    static ROUTERS: OnceLock<[axum::Router; 2]> = OnceLock::new();
    let Some((&state, request)) = data.split_first() else {
        return;
    };
    let rt = RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime")
    });
    let routers = ROUTERS.get_or_init(|| [serve_router(false), serve_router(true)]);
    let router = routers[(state & 1) as usize].clone();
    let mut io = MemIo {
        input: request,
        output: Vec::new(),
    };
    let service = hyper_util::service::TowerToHyperService::new(router);
    // The input's end is the client's half-close: requests already sent are answered.
    let r = rt.block_on(
        hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(&mut io, service),
    );
    if std::env::var_os("FUZZ_DEBUG").is_some() {
        eprintln!("{r:?}");
    }
    if std::env::var_os("FUZZ_DEBUG").is_some() {
        eprintln!("{}", String::from_utf8_lossy(&io.output));
    }
    // Whatever was written is HTTP/1.x, and no request makes serve fail (a 500).
    let out = String::from_utf8_lossy(&io.output);
    assert!(out.is_empty() || out.starts_with("HTTP/1."), "{out:?}");
    assert!(!out.contains(" 500 Internal Server Error"), "{out:?}");
}

/// Count of runs of the sysfs target's tree mode, so its edits are undone in order.
static TREE_RUNS: AtomicU64 = AtomicU64::new(0);

/// Copies of the fixture sysfs trees that the tree mode edits one file of at a time.
struct Trees {
    counters: PathBuf,
    topology: PathBuf,
    model: PathBuf,
    files: Vec<PathBuf>,
}

fn copy_tree(from: &Path, to: &Path, files: &mut Vec<PathBuf>) {
    std::fs::create_dir_all(to).expect("creating a tree copy");
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .expect("reading a fixture tree")
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let t = e.file_type().expect("a fixture's file type");
        if t.is_dir() {
            copy_tree(&src, &dst, files);
        } else if t.is_file() {
            std::fs::copy(&src, &dst).expect("copying a fixture file");
            files.push(dst);
        }
    }
}

fn trees() -> &'static Trees {
    static T: OnceLock<Trees> = OnceLock::new();
    T.get_or_init(|| {
        let f = fixtures();
        let base = scratch().join("trees");
        let _ = std::fs::remove_dir_all(&base);
        let mut files = Vec::new();
        let t = Trees {
            counters: base.join("counters"),
            topology: base.join("topology"),
            model: base.join("model"),
            files: Vec::new(),
        };
        copy_tree(&f.join("counters/sysfs/spr"), &t.counters, &mut files);
        copy_tree(&f.join("topology/sys-skx6140"), &t.topology, &mut files);
        copy_tree(&f.join("model/sysfs_skx6140"), &t.model, &mut files);
        Trees { files, ..t }
    })
}

/// Text the kernel provides in /sys and /proc, to each parser of it. The first byte
/// picks the parser; the rest is its input. Mode 12 writes the text over one file (picked
/// by the next two bytes) of a fixture sysfs tree and reads the whole tree.
pub fn sysfs(data: &[u8]) {
    use ddioscope::{counters, probe::memlayout, topology};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let t = text.as_ref();
    match mode % 13 {
        0 => drop(topology::parse_cpu_list(t)),
        1 => drop(topology::parse_size(t)),
        2 => drop(topology::parse_irqs(t, "eth0", Some("0000:3b:00.0"))),
        3 => drop(topology::parse_cpuinfo(t)),
        4 => {
            if let Ok(ranges) = counters::sysfs::parse_format_spec(t) {
                let f =
                    counters::sysfs::PmuFormat::from_specs([("umask", t), ("event", "config:0-7")]);
                let _ = f.map(|f| f.encode(&[("umask", u64::MAX), ("event", 1)]));
                drop(ranges);
            }
        }
        5 => drop(counters::sysfs::parse_cpu_list(t)),
        6 => {
            let _ = counters::platform::parse_cpuinfo(t).map(|id| id.mapfile_key());
            let d = counters::platform::detect(t);
            let _ = (d.platform(), d.describe());
        }
        7 => {
            // kallsyms, cpuinfo and zoneinfo, separated by NUL bytes.
            let mut parts = t.split('\0');
            let (k, c, z) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            let _ = memlayout::resolve("x86_64", k, c, z);
        }
        8 => drop(memlayout::max_pfn(t)),
        9 => drop(topology::pci_root_of(t)),
        10 => drop(counters::import::resolve_event(t, None)),
        11 => {
            let _ = ddioscope::counters::platform::Platform::from_name(t);
            let _ = ddioscope::model::geometry::LlcGeometry::new(
                t.len() as u64 * 4096,
                (t.len() % 40) as u32,
                64,
            );
        }
        _ => sysfs_tree(rest),
    }
}

fn sysfs_tree(data: &[u8]) {
    let t = trees();
    if data.len() < 2 || t.files.is_empty() {
        return;
    }
    let file = &t.files[u16::from_le_bytes([data[0], data[1]]) as usize % t.files.len()];
    let original = std::fs::read(file).expect("a fixture copy");
    TREE_RUNS.fetch_add(1, Ordering::Relaxed);
    if std::fs::write(file, &data[2..]).is_ok() {
        if let Ok(inv) = ddioscope::counters::sysfs::discover(&t.counters) {
            if let Ok(topo) = ddioscope::counters::sysfs::read_topology(&t.counters) {
                let _ = topo.sockets();
                for pmu in &inv.pmus {
                    let _ = pmu.socket_cpus(&topo);
                }
            }
        }
        let _ = ddioscope::topology::llc_from_sysfs(&t.topology);
        // Once per node, as the host description asks (not once per CPU).
        let nodes: std::collections::BTreeSet<i32> = ddioscope::topology::cpu_nodes(&t.topology)
            .into_values()
            .collect();
        for node in nodes {
            let _ = ddioscope::topology::package_of_node(&t.topology, node);
        }
        let _ =
            ddioscope::model::geometry::LlcGeometry::detect(&t.model, Path::new("/nonexistent"), 0);
    }
    std::fs::write(file, original).expect("restoring a fixture copy");
}
