//! The live sampler: opens every event on every box of a kind (or software events per CPU) with
//! perf_event_open, grouped where the counters allow, reads group values each interval, scales them for
//! multiplexing, and sums per socket. Also the open report and errno classification.

use anyhow::{anyhow, Result};
use perf_event_open_sys as sys;
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use super::events::{self, EventSet, Unit};
use super::platform::Platform;
use super::sysfs::{self, ConfigWords};
use super::{CounterReading, CounterSource};
use crate::sys::monotonic_ns;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplerMode {
    /// Uncore + core events of the platform's table.
    Hardware(Platform),
    /// cpu-clock, task-clock, page-faults, context-switches on every CPU through the same read path; for
    /// hosts without a hardware PMU and for testing.
    Software,
}

#[derive(Clone, Debug, Serialize)]
pub struct SamplerConfig {
    pub mode: SamplerMode,
    pub sysfs_root: PathBuf,
    pub event_set: EventSet,
    /// Also emit per-IIO-stack DATA_REQ rows (pmu = "uncore_iio_N") for per-port bandwidth.
    pub per_box_iio: bool,
}

impl SamplerConfig {
    pub fn hardware(platform: Platform) -> SamplerConfig {
        SamplerConfig {
            mode: SamplerMode::Hardware(platform),
            sysfs_root: PathBuf::from("/sys"),
            event_set: EventSet::Essential,
            per_box_iio: true,
        }
    }
    pub fn software() -> SamplerConfig {
        SamplerConfig {
            mode: SamplerMode::Software,
            sysfs_root: PathBuf::from("/sys"),
            event_set: EventSet::Essential,
            per_box_iio: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    NoPmu,
    Permission,
    TooManyFiles,
    Invalid,
    Busy,
    Unsupported,
    Encoding,
    Other,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpenFailure {
    pub pmu: String,
    pub event: String,
    pub kind: FailureKind,
    /// Without the PMU prefix, e.g. "permission denied opening perf event (...)".
    pub reason: String,
    /// One line: "<pmu>: <reason>".
    pub message: String,
}

impl OpenFailure {
    fn new(pmu: &str, event: &str, kind: FailureKind, reason: String) -> OpenFailure {
        OpenFailure {
            pmu: pmu.to_string(),
            event: event.to_string(),
            kind,
            message: format!("{pmu}: {reason}"),
            reason,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpenedEvent {
    /// Generic PMU name: "uncore_cha", "cpu", "software".
    pub pmu: String,
    pub event: String,
    /// Boxes x sockets (uncore) or CPUs (core, software) it was opened on.
    pub instances: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OpenReport {
    pub opened: Vec<OpenedEvent>,
    pub failed: Vec<OpenFailure>,
}

fn generic_pmu(name: &str) -> &str {
    match name.rsplit_once('_') {
        Some((head, tail))
            if name.starts_with("uncore_") && tail.chars().all(|c| c.is_ascii_digit()) =>
        {
            head
        }
        _ => name,
    }
}

impl OpenReport {
    /// One line per distinct (PMU kind, reason), e.g. "uncore_cha (40 boxes): permission denied ...".
    pub fn failure_lines(&self) -> Vec<String> {
        let mut groups: BTreeMap<(String, String), (std::collections::BTreeSet<String>, usize)> =
            BTreeMap::new();
        for f in &self.failed {
            let g = groups
                .entry((generic_pmu(&f.pmu).to_string(), f.reason.clone()))
                .or_default();
            g.0.insert(f.pmu.clone());
            g.1 += 1;
        }
        groups
            .into_iter()
            .map(|((pmu, reason), (boxes, _))| {
                if boxes.len() > 1 {
                    format!("{pmu} ({} boxes): {reason}", boxes.len())
                } else {
                    format!(
                        "{}: {reason}",
                        boxes.iter().next().map(String::as_str).unwrap_or(&pmu)
                    )
                }
            })
            .collect()
    }

    fn note_opened(&mut self, pmu: &str, event: &str) {
        let pmu = generic_pmu(pmu);
        match self
            .opened
            .iter_mut()
            .find(|o| o.pmu == pmu && o.event == event)
        {
            Some(o) => o.instances += 1,
            None => self.opened.push(OpenedEvent {
                pmu: pmu.to_string(),
                event: event.to_string(),
                instances: 1,
            }),
        }
    }
}

/// Maps an errno from perf_event_open to a kind and a one-line reason (no raw errno numbers).
pub fn classify_errno(errno: i32) -> (FailureKind, String) {
    match errno {
        libc::ENOENT | libc::ENODEV => (FailureKind::NoPmu, "no such PMU on this host (kernel does not know this PMU type)".into()),
        libc::EACCES | libc::EPERM => (
            FailureKind::Permission,
            "permission denied opening perf event (need root or perf_event_paranoid <= 0)".into(),
        ),
        libc::EMFILE | libc::ENFILE => (
            FailureKind::TooManyFiles,
            "too many open files (raise `ulimit -n`: one fd per event, box and socket)".into(),
        ),
        libc::EINVAL => (
            FailureKind::Invalid,
            "event rejected as invalid (encoding not valid for this PMU, or the group does not fit its counters)".into(),
        ),
        libc::EBUSY => (FailureKind::Busy, "counters busy (another tool such as PCM holds them)".into()),
        libc::EOPNOTSUPP | libc::ENOSPC => (FailureKind::Unsupported, "event not supported by this PMU".into()),
        e => (FailureKind::Other, format!("perf_event_open failed: {}", std::io::Error::from_raw_os_error(e))),
    }
}

#[derive(Clone, Debug)]
struct PlannedEvent {
    name: String,
    words: ConfigWords,
}

#[derive(Clone, Debug)]
struct PlannedGroup {
    /// Box name ("uncore_cha_3"), "cpu" or "software".
    pmu: String,
    /// CounterReading::pmu for the socket totals.
    label: String,
    type_: u32,
    cpu: u32,
    socket: u32,
    per_box: bool,
    events: Vec<PlannedEvent>,
}

/// Whether events with these counter masks can all be placed on distinct counters.
fn fits(masks: &[u8], ncounters: u32) -> bool {
    fn place(masks: &[u8], used: u8, n: u32) -> bool {
        let Some((&m, rest)) = masks.split_first() else {
            return true;
        };
        (0..n).any(|c| m & (1 << c) != 0 && used & (1 << c) == 0 && place(rest, used | (1 << c), n))
    }
    masks.len() as u32 <= ncounters && place(masks, 0, ncounters)
}

/// Packs (group key, counter mask, event) into perf groups that each fit the PMU's counters.
fn pack<T: Clone>(items: &[(String, u8, T)], ncounters: u32) -> Vec<Vec<T>> {
    let mut keys: Vec<&String> = Vec::new();
    for (k, _, _) in items {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut out = Vec::new();
    for k in keys {
        let mut cur: Vec<(u8, T)> = Vec::new();
        for (_, m, t) in items.iter().filter(|(kk, _, _)| kk == k) {
            let mut masks: Vec<u8> = cur.iter().map(|(m, _)| *m).collect();
            masks.push(*m);
            if !fits(&masks, ncounters) && !cur.is_empty() {
                out.push(cur.drain(..).map(|(_, t)| t).collect());
            }
            cur.push((*m, t.clone()));
        }
        if !cur.is_empty() {
            out.push(cur.into_iter().map(|(_, t)| t).collect());
        }
    }
    out
}

const SOFTWARE_EVENTS: [(&str, u64); 4] = [
    ("cpu-clock", sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64),
    ("task-clock", sys::bindings::PERF_COUNT_SW_TASK_CLOCK as u64),
    (
        "page-faults",
        sys::bindings::PERF_COUNT_SW_PAGE_FAULTS as u64,
    ),
    (
        "context-switches",
        sys::bindings::PERF_COUNT_SW_CONTEXT_SWITCHES as u64,
    ),
];

fn build_plan(cfg: &SamplerConfig) -> (Vec<PlannedGroup>, Vec<OpenFailure>) {
    let mut groups = Vec::new();
    let mut failed = Vec::new();
    let topo = sysfs::read_topology(&cfg.sysfs_root);
    match cfg.mode {
        SamplerMode::Software => {
            let topo = match topo {
                Ok(t) => t,
                Err(e) => {
                    failed.push(OpenFailure::new(
                        "software",
                        "*",
                        FailureKind::NoPmu,
                        format!("cannot list CPUs: {e:#}"),
                    ));
                    return (groups, failed);
                }
            };
            for &cpu in &topo.online {
                groups.push(PlannedGroup {
                    pmu: "software".into(),
                    label: "software".into(),
                    type_: sys::bindings::PERF_TYPE_SOFTWARE,
                    cpu,
                    socket: topo.socket_of(cpu),
                    per_box: false,
                    events: SOFTWARE_EVENTS
                        .iter()
                        .map(|(n, c)| PlannedEvent {
                            name: n.to_string(),
                            words: ConfigWords {
                                config: *c,
                                ..Default::default()
                            },
                        })
                        .collect(),
                });
            }
        }
        SamplerMode::Hardware(platform) => {
            // Without topology every box still opens; its counts land on socket 0.
            let topo = topo.unwrap_or_default();
            let inv = match sysfs::discover(&cfg.sysfs_root) {
                Ok(inv) => inv,
                Err(e) => {
                    failed.push(OpenFailure::new(
                        "sysfs",
                        "*",
                        FailureKind::NoPmu,
                        format!("cannot read PMUs: {e:#}"),
                    ));
                    return (groups, failed);
                }
            };
            let table = events::event_set(platform, cfg.event_set);
            for unit in [Unit::Cha, Unit::Iio, Unit::Imc, Unit::Core] {
                let evs: Vec<_> = table.iter().filter(|e| e.unit == unit).collect();
                if evs.is_empty() {
                    continue;
                }
                let boxes = inv.boxes(unit);
                if boxes.is_empty() {
                    for e in &evs {
                        failed.push(OpenFailure::new(
                            unit.pmu_prefix(),
                            &e.name,
                            FailureKind::NoPmu,
                            "no such PMU on this host (VM or non-Intel)".into(),
                        ));
                    }
                    continue;
                }
                for pmu in boxes {
                    let mut items = Vec::new();
                    for e in &evs {
                        match pmu.format.encode(&e.terms()) {
                            Ok(words) => items.push((
                                e.group.clone(),
                                e.counters,
                                PlannedEvent {
                                    name: e.name.clone(),
                                    words,
                                },
                            )),
                            Err(err) => failed.push(OpenFailure::new(
                                &pmu.name,
                                &e.name,
                                FailureKind::Encoding,
                                format!("cannot encode {}: {err:#}", e.name),
                            )),
                        }
                    }
                    let cpus: Vec<(u32, u32)> = if unit == Unit::Core {
                        topo.online
                            .iter()
                            .map(|&c| (topo.socket_of(c), c))
                            .collect()
                    } else {
                        pmu.socket_cpus(&topo)
                    };
                    if cpus.is_empty() {
                        for (_, _, e) in &items {
                            failed.push(OpenFailure::new(
                                &pmu.name,
                                &e.name,
                                FailureKind::NoPmu,
                                "empty cpumask (no online CPU to count on)".into(),
                            ));
                        }
                        continue;
                    }
                    for evgroup in pack(&items, unit.counters(platform)) {
                        for &(socket, cpu) in &cpus {
                            groups.push(PlannedGroup {
                                pmu: pmu.name.clone(),
                                label: unit.as_str().into(),
                                type_: pmu.type_,
                                cpu,
                                socket,
                                per_box: cfg.per_box_iio && unit == Unit::Iio,
                                events: evgroup.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    (groups, failed)
}

/// The open report a dry run would give: planned events as "opened", plan-time failures as failed.
pub fn plan_report(cfg: &SamplerConfig) -> OpenReport {
    let (groups, failed) = build_plan(cfg);
    let mut r = OpenReport {
        opened: Vec::new(),
        failed,
    };
    for g in &groups {
        for e in &g.events {
            r.note_opened(&g.pmu, &e.name);
        }
    }
    r
}

const READ_FORMAT: u64 = (sys::bindings::PERF_FORMAT_GROUP
    | sys::bindings::PERF_FORMAT_ID
    | sys::bindings::PERF_FORMAT_TOTAL_TIME_ENABLED
    | sys::bindings::PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;

fn open_one(
    type_: u32,
    words: &ConfigWords,
    cpu: u32,
    group_fd: i32,
) -> std::result::Result<OwnedFd, i32> {
    let mut attr = sys::bindings::perf_event_attr {
        type_,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        config: words.config,
        read_format: READ_FORMAT,
        ..Default::default()
    };
    attr.__bindgen_anon_3.config1 = words.config1;
    attr.__bindgen_anon_4.config2 = words.config2;
    attr.config3 = words.config3;
    // Members follow the leader's enable state; only the leader starts disabled.
    attr.set_disabled(u64::from(group_fd < 0));
    // SAFETY: attr is a fully initialised perf_event_attr; the syscall does not retain the pointer.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            -1,
            cpu as i32,
            group_fd,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL));
    }
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn event_id(fd: &OwnedFd) -> Option<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer.
    let rc = unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) };
    (rc == 0).then_some(id)
}

struct Member {
    name: String,
    id: u64,
    _fd: Option<OwnedFd>,
    /// (raw, enabled, running) at the previous read.
    prev: Option<(u64, u64, u64)>,
}

struct OpenGroup {
    pmu: String,
    label: String,
    socket: u32,
    per_box: bool,
    leader: OwnedFd,
    members: Vec<Member>,
}

impl OpenGroup {
    /// Current cumulative (raw, enabled, running) per member, in member order.
    fn read_values(&self) -> std::io::Result<Vec<Option<(u64, u64, u64)>>> {
        let n = self.members.len();
        let mut buf = vec![0u64; 3 + 2 * n];
        let bytes = buf.len() * 8;
        // SAFETY: buf is a writable region of `bytes` bytes.
        let got = unsafe { libc::read(self.leader.as_raw_fd(), buf.as_mut_ptr().cast(), bytes) };
        if got < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let nr = buf[0] as usize;
        if (got as usize) < 8 * (3 + 2 * nr.min(n)) {
            return Err(std::io::Error::other("short read from perf group"));
        }
        let (ena, run) = (buf[1], buf[2]);
        let mut by_id = BTreeMap::new();
        for i in 0..nr.min(n) {
            by_id.insert(buf[4 + 2 * i], buf[3 + 2 * i]);
        }
        Ok(self
            .members
            .iter()
            .map(|m| by_id.get(&m.id).map(|&v| (v, ena, run)))
            .collect())
    }
}

pub struct Sampler {
    groups: Vec<OpenGroup>,
    source: CounterSource,
    /// Problems from the last read (a group that could not be read is skipped, not fatal).
    pub read_warnings: Vec<String>,
}

/// Scaled delta for multiplexing: raw * enabled / running over the interval; 0 when never scheduled.
pub fn scale(d_raw: u64, d_enabled: u64, d_running: u64) -> f64 {
    if d_running == 0 {
        0.0
    } else {
        d_raw as f64 * d_enabled as f64 / d_running as f64
    }
}

impl Sampler {
    /// Opens what it can; Err only when nothing opened ("nothing opened: <why>").
    pub fn open(cfg: &SamplerConfig) -> Result<(Sampler, OpenReport)> {
        match Sampler::try_open(cfg) {
            (Some(s), r) => Ok((s, r)),
            (None, r) => {
                let why = r.failure_lines();
                Err(anyhow!(
                    "nothing opened: {}",
                    if why.is_empty() {
                        "no events planned".to_string()
                    } else {
                        why.join("; ")
                    }
                ))
            }
        }
    }

    pub fn try_open(cfg: &SamplerConfig) -> (Option<Sampler>, OpenReport) {
        let (plan, failed) = build_plan(cfg);
        let source = if cfg.mode == SamplerMode::Software {
            CounterSource::Software
        } else {
            CounterSource::Live
        };
        Sampler::open_plan(plan, failed, source)
    }

    fn open_plan(
        plan: Vec<PlannedGroup>,
        failed: Vec<OpenFailure>,
        source: CounterSource,
    ) -> (Option<Sampler>, OpenReport) {
        let mut report = OpenReport {
            opened: Vec::new(),
            failed,
        };
        let mut groups = Vec::new();
        for g in plan {
            let mut leader: Option<OwnedFd> = None;
            let mut members = Vec::new();
            for e in &g.events {
                let group_fd = leader.as_ref().map_or(-1, |l| l.as_raw_fd());
                match open_one(g.type_, &e.words, g.cpu, group_fd) {
                    Ok(fd) => {
                        let Some(id) = event_id(&fd) else {
                            report.failed.push(OpenFailure::new(
                                &g.pmu,
                                &e.name,
                                FailureKind::Other,
                                "cannot read perf event id".into(),
                            ));
                            continue;
                        };
                        report.note_opened(&g.pmu, &e.name);
                        if leader.is_none() {
                            leader = Some(fd);
                            members.push(Member {
                                name: e.name.clone(),
                                id,
                                _fd: None,
                                prev: None,
                            });
                        } else {
                            members.push(Member {
                                name: e.name.clone(),
                                id,
                                _fd: Some(fd),
                                prev: None,
                            });
                        }
                    }
                    Err(errno) => {
                        let (kind, reason) = classify_errno(errno);
                        report
                            .failed
                            .push(OpenFailure::new(&g.pmu, &e.name, kind, reason));
                    }
                }
            }
            if let Some(leader) = leader {
                // SAFETY: plain ioctl on an fd we own.
                unsafe {
                    sys::ioctls::ENABLE(leader.as_raw_fd(), sys::bindings::PERF_IOC_FLAG_GROUP)
                };
                groups.push(OpenGroup {
                    pmu: g.pmu,
                    label: g.label,
                    socket: g.socket,
                    per_box: g.per_box,
                    leader,
                    members,
                });
            }
        }
        if groups.is_empty() {
            return (None, report);
        }
        let mut s = Sampler {
            groups,
            source,
            read_warnings: Vec::new(),
        };
        // Baseline, so the first read() returns deltas since open.
        s.collect();
        (Some(s), report)
    }

    pub fn source(&self) -> CounterSource {
        self.source
    }

    /// Reads every group and updates baselines; returns per-key accumulators.
    fn collect(&mut self) -> (BTreeMap<(u32, String, String), Acc>, usize) {
        self.read_warnings.clear();
        let mut acc: BTreeMap<(u32, String, String), Acc> = BTreeMap::new();
        let mut ok = 0;
        for g in &mut self.groups {
            let vals = match g.read_values() {
                Ok(v) => v,
                Err(e) => {
                    self.read_warnings
                        .push(format!("{}: reading counters failed: {e}", g.pmu));
                    continue;
                }
            };
            ok += 1;
            for (m, v) in g.members.iter_mut().zip(vals) {
                let Some(cur) = v else { continue };
                let Some(prev) = m.prev.replace(cur) else {
                    continue;
                };
                // Counters are cumulative 64-bit; a decrease would be a kernel reset, counted as zero.
                let d = |a: u64, b: u64| a.saturating_sub(b);
                let (dr, de, dn) = (d(cur.0, prev.0), d(cur.1, prev.1), d(cur.2, prev.2));
                let value = scale(dr, de, dn);
                acc.entry((g.socket, g.label.clone(), m.name.clone()))
                    .or_default()
                    .add(value, dr, de, dn);
                if g.per_box && m.name.starts_with("UNC_IIO_DATA_REQ_OF_CPU") {
                    acc.entry((g.socket, g.pmu.clone(), m.name.clone()))
                        .or_default()
                        .add(value, dr, de, dn);
                }
            }
        }
        (acc, ok)
    }

    /// Deltas since the previous read (or open), summed per socket, stamped with CLOCK_MONOTONIC ns.
    pub fn read(&mut self) -> Result<Vec<CounterReading>> {
        let (acc, ok) = self.collect();
        let t_ns = monotonic_ns();
        if ok == 0 {
            return Err(anyhow!(
                "reading counters failed on every group: {}",
                self.read_warnings
                    .first()
                    .map(String::as_str)
                    .unwrap_or("no groups")
            ));
        }
        Ok(acc
            .into_iter()
            .map(|((socket, pmu, event), a)| a.reading(t_ns, socket, pmu, event))
            .collect())
    }
}

#[derive(Default, Clone, Copy)]
struct Acc {
    value: f64,
    raw: u64,
    enabled: u64,
    running: u64,
    n: u64,
}

impl Acc {
    fn add(&mut self, value: f64, raw: u64, enabled: u64, running: u64) {
        self.value += value;
        self.raw += raw;
        self.enabled += enabled;
        self.running += running;
        self.n += 1;
    }
    fn reading(self, t_ns: u64, socket: u32, pmu: String, event: String) -> CounterReading {
        let n = self.n.max(1);
        CounterReading {
            t_ns,
            socket,
            pmu,
            event,
            value: self.value,
            raw: self.raw,
            enabled_ns: self.enabled / n,
            running_ns: self.running / n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture_root(p: &str) -> PathBuf {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/sysfs"
        ))
        .join(p)
    }

    #[test]
    fn software_mode_reads_live_and_scales() {
        let before_open = monotonic_ns();
        let (mut s, report) =
            Sampler::open(&SamplerConfig::software()).expect("software events must open");
        let after_open = monotonic_ns();
        assert!(report.failed.is_empty(), "{:?}", report.failure_lines());
        let ncpus = sysfs::read_topology(Path::new("/sys"))
            .unwrap()
            .online
            .len() as f64;
        assert!(report.opened.iter().all(|o| o.instances as f64 == ncpus));

        std::thread::sleep(std::time::Duration::from_millis(300));
        let before_read = monotonic_ns();
        let r1 = s.read().unwrap();
        let after_read = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let r2 = s.read().unwrap();

        for r in r1.iter().chain(&r2) {
            assert!(r.value >= 0.0 && r.value.is_finite(), "{r:?}");
            assert!(r.running_ns <= r.enabled_ns, "{r:?}");
            assert_eq!(r.pmu, "software");
        }
        assert!(r2[0].t_ns > r1[0].t_ns);
        let sum = |rs: &[CounterReading], name: &str| {
            rs.iter()
                .filter(|r| r.event == name)
                .map(|r| r.value)
                .sum::<f64>()
        };
        // cpu-clock per CPU counts wall time whether busy or idle, from its enable (inside
        // open) to its read: between the time from open's end to the read's start and the time
        // from open's start to the read's end, on every CPU, whatever the load delays (1 ms
        // per CPU for the per-CPU clocks against CLOCK_MONOTONIC).
        let cpu_clock_ns = sum(&r1, "cpu-clock");
        let (least, most) = (
            (before_read - after_open) as f64 * ncpus,
            (after_read - before_open) as f64 * ncpus,
        );
        let slack = 1e6 * ncpus;
        assert!(
            cpu_clock_ns >= least - slack && cpu_clock_ns <= most + slack,
            "cpu-clock {cpu_clock_ns} ns on {ncpus} cpus, not within [{least}, {most}] ns"
        );
        assert!(
            sum(&r1, "context-switches") >= 1.0,
            "sleeping must context-switch"
        );
        for name in ["cpu-clock", "task-clock", "page-faults", "context-switches"] {
            assert!(r1.iter().any(|r| r.event == name), "{name} missing");
        }
    }

    #[test]
    fn bogus_pmu_type_is_classified_not_fatal() {
        let good = PlannedGroup {
            pmu: "software".into(),
            label: "software".into(),
            type_: sys::bindings::PERF_TYPE_SOFTWARE,
            cpu: 0,
            socket: 0,
            per_box: false,
            events: vec![PlannedEvent {
                name: "cpu-clock".into(),
                words: ConfigWords::default(),
            }],
        };
        let bogus = PlannedGroup {
            pmu: "uncore_cha_0".into(),
            label: "cha".into(),
            type_: 0x7fff_0000,
            events: vec![PlannedEvent {
                name: "UNC_CHA_CLOCKTICKS".into(),
                words: ConfigWords::default(),
            }],
            ..good.clone()
        };
        let (s, report) =
            Sampler::open_plan(vec![bogus.clone(), good], Vec::new(), CounterSource::Live);
        assert!(s.is_some(), "one good event keeps the run alive");
        assert_eq!(report.failed.len(), 1);
        let f = &report.failed[0];
        assert!(
            matches!(f.kind, FailureKind::NoPmu | FailureKind::Invalid),
            "{f:?}"
        );
        assert!(f.message.starts_with("uncore_cha_0: "), "{}", f.message);
        assert!(!f.message.contains("os error"), "{}", f.message);

        let (s, report) = Sampler::open_plan(vec![bogus], Vec::new(), CounterSource::Live);
        assert!(s.is_none() && report.opened.is_empty());
    }

    #[test]
    fn errno_classification() {
        assert_eq!(classify_errno(libc::EMFILE).0, FailureKind::TooManyFiles);
        assert_eq!(classify_errno(libc::ENFILE).0, FailureKind::TooManyFiles);
        let (k, why) = classify_errno(libc::EACCES);
        assert_eq!(k, FailureKind::Permission);
        let f = OpenFailure::new("uncore_cha_0", "UNC_CHA_CLOCKTICKS", k, why);
        assert_eq!(f.message, "uncore_cha_0: permission denied opening perf event (need root or perf_event_paranoid <= 0)");
        assert_eq!(classify_errno(libc::EPERM).0, FailureKind::Permission);
        assert_eq!(classify_errno(libc::ENOENT).0, FailureKind::NoPmu);
        assert_eq!(classify_errno(libc::EINVAL).0, FailureKind::Invalid);
        assert_eq!(classify_errno(libc::EBUSY).0, FailureKind::Busy);
        let (k, why) = classify_errno(libc::EIO);
        assert_eq!(k, FailureKind::Other);
        assert!(why.starts_with("perf_event_open failed: ") && !why.contains('\n'));
    }

    #[test]
    fn nothing_opened_says_why() {
        let empty = tempfile::tempdir().unwrap();
        let cfg = SamplerConfig {
            sysfs_root: empty.path().to_path_buf(),
            ..SamplerConfig::hardware(Platform::Spr)
        };
        let err = Sampler::open(&cfg).err().unwrap().to_string();
        assert!(err.starts_with("nothing opened: "), "{err}");
        assert!(
            err.contains("uncore_cha: no such PMU on this host (VM or non-Intel)"),
            "{err}"
        );
    }

    #[test]
    fn failure_lines_collapse_boxes() {
        let (k, why) = classify_errno(libc::EACCES);
        let r = OpenReport {
            opened: vec![],
            failed: (0..3)
                .map(|i| OpenFailure::new(&format!("uncore_cha_{i}"), "X", k, why.clone()))
                .collect(),
        };
        assert_eq!(
            r.failure_lines(),
            vec![format!("uncore_cha (3 boxes): {why}")]
        );
    }

    #[test]
    fn packing_respects_counter_constraints() {
        assert!(fits(&[0x3, 0x3, 0xF, 0xF], 4));
        assert!(
            !fits(&[0x3, 0x3, 0x3], 4),
            "DATA_REQ may only use counters 0-1"
        );
        assert!(!fits(&[0x1, 0x1], 4), "TOR_OCCUPANCY is counter 0 only");
        assert!(!fits(&[0xF; 5], 4));
        let items: Vec<(String, u8, u32)> = vec![
            ("a".into(), 0x3, 1),
            ("a".into(), 0x3, 2),
            ("a".into(), 0x3, 3),
            ("b".into(), 0xF, 4),
        ];
        assert_eq!(pack(&items, 4), vec![vec![1, 2], vec![3], vec![4]]);
    }

    #[test]
    fn hardware_plan_on_fixture_covers_boxes_and_sockets() {
        let cfg = SamplerConfig {
            sysfs_root: fixture_root("skx"),
            event_set: EventSet::Full,
            ..SamplerConfig::hardware(Platform::Skx)
        };
        let (groups, failed) = build_plan(&cfg);
        assert!(failed.is_empty(), "{failed:?}");
        for g in &groups {
            let masks: Vec<u8> = g
                .events
                .iter()
                .map(|e| events::find(Platform::Skx, &e.name).unwrap().counters)
                .collect();
            assert!(fits(&masks, 4), "{} {:?}", g.pmu, g.events);
        }
        // 2 CHA boxes × 2 sockets see every CHA event; cpumask "0,2" -> sockets 0 and 1.
        let itom: Vec<_> = groups
            .iter()
            .filter(|g| {
                g.events
                    .iter()
                    .any(|e| e.name == "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM")
            })
            .collect();
        assert_eq!(itom.len(), 4);
        assert_eq!(
            itom.iter()
                .map(|g| (g.cpu, g.socket))
                .filter(|&(c, s)| (c, s) == (2, 1))
                .count(),
            2
        );
        // HIT, MISS and TOTAL of one opcode share a group.
        let g = itom[0]
            .events
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>();
        assert!(
            g.contains(&"UNC_CHA_TOR_INSERTS.IO_HIT_ITOM")
                && g.contains(&"UNC_CHA_TOR_INSERTS.IO_ITOM"),
            "{g:?}"
        );
        let rep = plan_report(&cfg);
        let o = rep
            .opened
            .iter()
            .find(|o| o.event == "UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0")
            .unwrap();
        assert_eq!((o.pmu.as_str(), o.instances), ("uncore_iio", 6));
    }
}
