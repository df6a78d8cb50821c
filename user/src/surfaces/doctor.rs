//! `ddioscope doctor`: what this host offers each part of ddioscope, and what
//! every missing piece costs the user; with `-i IFACE`, what the device offers a recording
//! of it (its ring, RSS table, IRQs, per-queue counters and page pools) and which hooks the
//! recorder would put on it. Run without root it says what root would get.
use std::fs;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::probe::features::{Features, PKTLIFE_HOOKS};
use crate::probe::{HookPlan, Scope, When};
use crate::session::{Session, SessionOptions};
use crate::snapshot::Dir;
use crate::topology::IfaceInfo;

/// What doctor knows about one piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Present, and checked here.
    Ok,
    Missing,
    /// Taken for granted: nothing doctor can read confirms it; it is put to
    /// the test only at record time.
    Assumed,
    /// Not checked: only root can (the detail says what root would find out).
    Unchecked,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    /// `status == Ok` (kept for JSON readers that predate `status`).
    pub ok: bool,
    pub status: Status,
    pub detail: String,
    /// What the user loses when this is missing, or would lose if the
    /// assumption is wrong (empty when ok).
    pub impact: String,
}

#[derive(Debug, Serialize)]
pub struct Doctor {
    pub can_record: bool,
    pub fatal: Option<String>,
    pub checks: Vec<Check>,
    pub features: Features,
    pub pmus: Vec<String>,
    /// Which uncore/core events of this platform would open here, and why others would not.
    pub counters: crate::counters::DoctorReport,
    /// With `-i`: the device's checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceChecks>,
}

/// What one device offers a recording of it.
#[derive(Debug, Serialize)]
pub struct DeviceChecks {
    pub iface: String,
    pub netns: Option<String>,
    pub checks: Vec<Check>,
    /// The hooks the recorder attached for this device, as it would for `record -i`
    /// (None: not known without root).
    pub hooks: Option<Vec<HookPlan>>,
}

/// A check only root can make: what root would find out, and what is lost without it.
fn unchecked(name: &str, as_root: impl Into<String>, impact: &str) -> Check {
    Check {
        name: name.into(),
        ok: false,
        status: Status::Unchecked,
        detail: format!("needs root: {}", as_root.into()),
        impact: impact.into(),
    }
}

fn check(name: &str, ok: bool, detail: impl Into<String>, impact: &str) -> Check {
    let status = if ok { Status::Ok } else { Status::Missing };
    Check {
        name: name.into(),
        ok,
        status,
        detail: detail.into(),
        impact: if ok { String::new() } else { impact.into() },
    }
}

/// The page → address layout for frag pages. Bases read from kernel
/// variables are the kernel's own; x86-64 defaults are only assumed, since
/// with memory randomisation and no data symbols in /proc/kallsyms nothing
/// here can tell them wrong, and the probes find out per skb at record time.
fn frag_layout_check(layout: &Result<crate::probe::memlayout::MemLayout, String>) -> Check {
    const NAME: &str = "frag page addresses";
    match layout {
        Ok(m) if m.assumes_defaults() => Check {
            name: NAME.into(),
            ok: false,
            status: Status::Assumed,
            detail: format!("assumed, not verified here: {}", m.source),
            impact: "if this host randomises its memory layout, every frag fails the kernel's check at record time and the \
                     address join maps linear packet data only (the report counts them as frags without an address layout)"
                .into(),
        },
        Ok(m) => check(NAME, true, m.source.clone(), ""),
        Err(why) => check(
            NAME,
            false,
            why.clone(),
            "the address join maps linear packet data only: page frags (page_pool RX buffers, TCP payload) are not joined",
        ),
    }
}

/// PMUs registered with perf under a sysfs root.
pub fn list_pmus(sys_root: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(sys_root.join("bus/event_source/devices"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The host's checks, and with `device` (the options `record -i IFACE [--netns NS]` would
/// run with) the device's. An interface or namespace that does not exist is an error.
pub fn run(device: Option<&SessionOptions>) -> Result<Doctor> {
    let features = Features::detect();
    let pmus = list_pmus(Path::new("/sys"));
    let root = crate::sys::is_root();
    let mut checks = vec![
        check(
            "root",
            root,
            if root { "running as root" } else { "not root" },
            "cannot load BPF programs: run with sudo",
        ),
        check(
            "kernel BTF",
            features.vmlinux_btf,
            features
                .btf_error
                .clone()
                .unwrap_or_else(|| "/sys/kernel/btf/vmlinux".into()),
            "no CO-RE probes at all: recording cannot work",
        ),
    ];
    checks.extend(program_checks(&features, root));
    checks.push(hook_scope_check());
    checks.push(frag_layout_check(&crate::probe::memlayout::resolve_live()));
    checks.extend(pmu_checks(&pmus));
    let fatal = if root {
        features.fatal()
    } else {
        Some("not running as root: run it with sudo".to_string())
    };
    let detection = crate::counters::platform::detect_host();
    let counters = crate::counters::doctor(Path::new("/sys"), &detection, true);
    let device = match device {
        Some(opts) => Some(device_checks(opts, root, fatal.is_none())?),
        None => None,
    };
    Ok(Doctor {
        can_record: fatal.is_none(),
        fatal,
        checks,
        features,
        pmus,
        counters,
        device,
    })
}

/// What loading BPF programs of each kind shows, and how each packet hook would attach.
/// Without root nothing loads: the rows say what root would find out instead.
fn program_checks(features: &Features, root: bool) -> Vec<Check> {
    let mut checks = Vec::new();
    let programs = [
        (
            "tp_btf programs",
            features.tracing_prog,
            "a tp_btf program loads",
            "hooks fall back to raw_tp (same data, slightly costlier reads)",
        ),
        (
            "fentry programs",
            features.fentry_prog,
            "an fentry program loads",
            "not needed: every hook has a tracepoint (driver-function hooks unavailable)",
        ),
        (
            "raw_tp programs",
            features.raw_tracepoint_prog,
            "BPF_PROG_TYPE_RAW_TRACEPOINT loads",
            "no fallback when tp_btf is refused",
        ),
        (
            "ring buffer",
            features.ringbuf_map,
            "BPF_MAP_TYPE_RINGBUF",
            "no sampled packet records",
        ),
        (
            "perf_event programs",
            features.perf_event_prog,
            "BPF_PROG_TYPE_PERF_EVENT loads",
            "no in-kernel L3-miss sample joining",
        ),
    ];
    for (name, ok, what, impact) in programs {
        checks.push(if root {
            check(name, ok, what, impact)
        } else {
            unchecked(
                name,
                format!("as root, doctor tries whether {what}"),
                impact,
            )
        });
    }
    for h in PKTLIFE_HOOKS {
        let btf = features.btf_tracepoints.iter().any(|t| t == h.tracepoint);
        let name = format!("hook {}", h.tracepoint);
        checks.push(if root {
            check(
                &name,
                btf || features.raw_tracepoint_prog,
                format!(
                    "attaches as {}{}",
                    features.preferred(h).as_str(),
                    if btf { "" } else { " (no BTF type for tp_btf)" }
                ),
                h.without,
            )
        } else if btf {
            unchecked(
                &name,
                "as root it attaches as tp_btf where the kernel loads tp_btf programs (its BTF has the \
                 tracepoint's type), else as raw_tp",
                h.without,
            )
        } else {
            unchecked(
                &name,
                "as root it attaches as raw_tp (no BTF type for tp_btf) where the kernel loads raw_tp programs",
                h.without,
            )
        });
    }
    checks
}

/// What a recording costs the host's other devices in general: the hooks that see their
/// packets too (`-i` gives one device's own plan).
fn hook_scope_check() -> Check {
    check(
        "hook scope",
        true,
        format!(
            "device-scoped, all the time: tcx ingress (RX counts and flows where the driver counts no RX queue); \
             host-wide, all the time: kfree_skb (per drop, not per packet); host-wide, in the detail windows only \
             (1/{} of the time by default, only while the recorded device carries traffic, and all programs \
             together at most {} runs per packet of it, --run-budget): net_dev_start_xmit (TX split and flows), \
             napi_poll, and the detail hooks above; a window's coming and going patches kernel text (each \
             tracepoint's first attach and last detach), with IPIs to every CPU of the host, for windows drawn at most once a second",
            crate::session::windows::DEFAULT_DUTY,
            crate::session::windows::RUN_BUDGET
        ),
        "",
    )
}

fn pmu_checks(pmus: &[String]) -> Vec<Check> {
    let has = |prefix: &str| pmus.iter().filter(|p| p.starts_with(prefix)).count();
    let mut checks = Vec::new();
    let core = pmus.iter().any(|p| p == "cpu" || p == "cpu_core");
    checks.push(check(
        "core PMU",
        core,
        if core {
            "cpu PMU present".to_string()
        } else {
            "no hardware core PMU (a VM or a container without PMU passthrough)".to_string()
        },
        "no MEM_LOAD_RETIRED.L3_MISS sampling: attribution falls back to regression/model",
    ));
    for (kind, what) in [
        ("uncore_cha", "no socket DDIO hit/miss (TOR inserts): import counters captured elsewhere, or model-only"),
        ("uncore_iio", "no per-port inbound PCIe bandwidth"),
        ("uncore_imc", "no DRAM bandwidth"),
    ] {
        let n = has(kind);
        checks.push(check(kind, n > 0, format!("{n} boxes"), what));
    }
    let msr = Path::new("/dev/cpu/0/msr").exists();
    checks.push(check(
        "MSR 0xC8B (IIO LLC WAYS)",
        msr,
        if msr {
            "/dev/cpu/0/msr present (read only)"
        } else {
            "/dev/cpu/*/msr absent (msr module not loaded)"
        },
        "DDIO ways assumed to be the default 2 (a simulate spec can set ddio_ways)",
    ));
    checks
}

const RING_LOST: &str =
    "the model assumes 1024 descriptors per RX queue, and recommend makes no ring-size change";
const RING_SET_LOST: &str =
    "recommend offers no ring-size command: `ethtool -G` needs a driver that sets its rings";
const RSS_LOST: &str =
    "recommend offers no `ethtool -X`: flows cannot be moved between RX queues on this device";
const IRQ_LOST: &str = "no IRQ affinity or NUMA placement advice (a virtual device has no IRQs)";
const COUNTS_LOST: &str = "a BPF program counts every packet of that direction: exact, at a per-packet cost \
                           (docs/cost.md), where the driver's counters would cost nothing per packet";
const POOL_LOST: &str = "no page_pool allocation and recycling numbers in the recording";

/// The device's rows: each thing a recording of it uses, and what is lost without it.
fn device_checks(opts: &SessionOptions, root: bool, can_record: bool) -> Result<DeviceChecks> {
    let (name, netns) = (opts.args.iface.as_str(), opts.args.netns.as_deref());
    if let Some(ns) = netns {
        // An unknown namespace is refused the same with and without root.
        crate::topology::netns_path(ns)?;
    }
    let mut out = DeviceChecks {
        iface: name.to_string(),
        netns: netns.map(str::to_string),
        checks: Vec::new(),
        hooks: None,
    };
    if !root && netns.is_some() {
        // Looking into another namespace takes CAP_SYS_ADMIN: every row is what root would read.
        let ns = netns.unwrap_or_default();
        for (row, what, impact) in [
            (
                "ring size readable",
                "the RX and TX ring sizes (ethtool -g)",
                RING_LOST,
            ),
            (
                "ring size settable",
                "the rings' maximum (ethtool -g)",
                RING_SET_LOST,
            ),
            ("RSS indirection table", "its size (ethtool -x)", RSS_LOST),
            (
                "IRQs",
                "the device's IRQs and their CPUs (/proc/interrupts)",
                IRQ_LOST,
            ),
            (
                "per-queue counters",
                "the driver's per-queue counts (qstats, ethtool -S)",
                COUNTS_LOST,
            ),
            (
                "page_pool statistics",
                "the device's page pools (netdev page-pool-stats)",
                POOL_LOST,
            ),
        ] {
            out.checks.push(unchecked(
                row,
                format!("as root, doctor enters namespace {ns} and reads {what}"),
                impact,
            ));
        }
        out.checks.push(hook_plan_unchecked(name));
        return Ok(out);
    }
    let iface = crate::topology::resolve_iface_live(name, netns)?;
    out.checks.push(check(
        "device",
        true,
        format!(
            "{name}{}: {}, {} RX and {} TX queues",
            netns.map(|n| format!(" in {n}")).unwrap_or_default(),
            iface.driver.as_deref().unwrap_or("unknown driver"),
            iface.rx_queues,
            iface.tx_queues
        ),
        "",
    ));
    out.checks.extend(ring_checks(&iface));
    out.checks.push(rss_check(&iface, netns));
    out.checks.push(irq_check(&iface));
    out.checks.extend(kernel_stats_checks(&iface, netns));
    if root && can_record {
        let (check, plan) = hook_plan_check(opts);
        out.checks.push(check);
        out.hooks = plan;
    } else if !root {
        out.checks.push(hook_plan_unchecked(name));
    }
    Ok(out)
}

fn ring_checks(i: &IfaceInfo) -> [Check; 2] {
    let or = |v: Option<u32>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    let readable = i.rx_ring.is_some();
    let settable = readable && i.rx_ring_max.is_some();
    [
        check(
            "ring size readable",
            readable,
            if readable {
                format!(
                    "RX {}, TX {} descriptors per queue",
                    or(i.rx_ring),
                    or(i.tx_ring)
                )
            } else {
                format!(
                    "{} reports no ring size (ethtool -g)",
                    i.driver.as_deref().unwrap_or("the driver")
                )
            },
            RING_LOST,
        ),
        check(
            "ring size settable",
            settable,
            if settable {
                format!(
                    "the driver reports maxima RX {}, TX {} (ethtool -G; doctor changes nothing)",
                    or(i.rx_ring_max),
                    or(i.tx_ring_max)
                )
            } else {
                "the driver reports no ring maximum, so ethtool -G has nothing to set".to_string()
            },
            RING_SET_LOST,
        ),
    ]
}

fn rss_check(i: &IfaceInfo, netns: Option<&str>) -> Check {
    let name = i.name.clone();
    let path = netns.and_then(|n| crate::topology::netns_path(n).ok());
    let size = crate::probe::qcount::in_netns(path.as_deref(), move || {
        Ok(crate::topology::ethtool::rss_table_size(&name))
    });
    let (ok, detail) = match size {
        Ok(Ok(n)) if n > 0 => (
            true,
            format!("{n} entries over {} RX queues (ethtool -X)", i.rx_queues),
        ),
        Ok(Ok(_)) => (false, "the driver reports an empty table".to_string()),
        Ok(Err(e)) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => (
            false,
            format!(
                "{} has none (ethtool -x: not supported)",
                i.driver.as_deref().unwrap_or("the driver")
            ),
        ),
        Ok(Err(e)) => (false, format!("could not be read ({})", e.kind())),
        Err(e) => (false, format!("could not be read ({e:#})")),
    };
    check("RSS indirection table", ok, detail, RSS_LOST)
}

fn irq_check(i: &IfaceInfo) -> Check {
    let mut cpus: Vec<u32> = i
        .irqs
        .values()
        .flat_map(|q| q.cpus.iter().copied())
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    check(
        "IRQs",
        !i.irqs.is_empty(),
        if i.irqs.is_empty() {
            "none in /proc/interrupts: a virtual device, or one that polls".to_string()
        } else {
            format!(
                "{} IRQs on CPUs {}",
                i.irqs.len(),
                cpus.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        },
        IRQ_LOST,
    )
}

/// The driver's per-queue counters (by direction) and its page pools.
fn kernel_stats_checks(i: &IfaceInfo, netns: Option<&str>) -> [Check; 2] {
    let path = netns.and_then(|n| crate::topology::netns_path(n).ok());
    let mut k = crate::probe::kstats::KernelStats::open(
        path.as_deref(),
        i.ifindex,
        &i.name,
        i.driver.as_deref(),
    )
    .ok()
    .flatten();
    let counts = match k.as_mut() {
        Some(k) => {
            let q = k.queues();
            let src = k.source().map_or("none", |s| s.as_str());
            let covers = |d: Dir| crate::probe::kstats::covers(&q, d);
            let (rx, tx) = (covers(Dir::Rx), covers(Dir::Tx));
            let dirs = match (rx, tx) {
                (true, true) => "RX and TX".to_string(),
                (true, false) => "RX only (TX by a program)".to_string(),
                (false, true) => "TX only (RX by a program)".to_string(),
                (false, false) => "no direction".to_string(),
            };
            check(
                "per-queue counters",
                rx && tx,
                format!(
                    "{dirs} from the kernel (RX from {src}, TX from {}); the recorder checks them against the interface's totals at start",
                    k.tx_source().unwrap_or("none")
                ),
                COUNTS_LOST,
            )
        }
        None => check(
            "per-queue counters",
            false,
            "neither qstats nor ethtool -S could be asked",
            COUNTS_LOST,
        ),
    };
    let pools = match k.as_mut().map(|k| k.page_pools_or_why()) {
        Some(Ok(p)) if !p.is_empty() => check(
            "page_pool statistics",
            true,
            format!("{} page pools", p.len()),
            POOL_LOST,
        ),
        Some(Ok(_)) => check(
            "page_pool statistics",
            false,
            "the kernel keeps them, but this device has no page pool",
            POOL_LOST,
        ),
        Some(Err(why)) => check("page_pool statistics", false, why, POOL_LOST),
        None => check(
            "page_pool statistics",
            false,
            "the kernel's netdev family could not be asked",
            POOL_LOST,
        ),
    };
    [counts, pools]
}

fn hook_plan_unchecked(iface: &str) -> Check {
    unchecked(
        "hooks for this device",
        format!(
            "as root, doctor attaches the recorder's hooks to {iface} for a moment, as `record -i {iface}` \
             would, lists which are device-scoped and which host-wide and when each runs, and detaches them"
        ),
        "",
    )
}

/// The recorder's own decision: a session started with `record`'s options (no L3-miss
/// sampler), its hook plan read, and the session dropped, which detaches every hook.
fn hook_plan_check(opts: &SessionOptions) -> (Check, Option<Vec<HookPlan>>) {
    const NAME: &str = "hooks for this device";
    let started = Session::preflight(opts)
        .and_then(|(features, iface)| Session::start(opts, features, iface));
    let session = match started {
        Ok(s) => s,
        Err(e) => {
            return (
                check(
                    NAME,
                    false,
                    format!("the recorder could not attach: {e:#}"),
                    "recording this device fails the same way",
                ),
                None,
            )
        }
    };
    let plan = session.hook_plan();
    let (rx, tx) = session.count_sources();
    drop(session);
    (
        check(NAME, true, plan_words(&plan, rx.as_str(), tx), ""),
        Some(plan),
    )
}

/// The plan in words: device-scoped hooks, host-wide ones all the time, host-wide ones in
/// the detail windows only; and where the packet counts come from.
pub fn plan_words(plan: &[HookPlan], rx: &str, tx: &str) -> String {
    let list = |scope: Scope, when: When| {
        let mut v: Vec<&str> = plan
            .iter()
            .filter(|h| h.scope == scope && h.when == when)
            .map(|h| h.hook.as_str())
            .collect();
        v.sort_unstable();
        v.dedup();
        v.join(", ")
    };
    let mut parts = Vec::new();
    for (scope, when, words) in [
        (Scope::Device, When::Always, "device-scoped, all the time"),
        (
            Scope::Device,
            When::Windows,
            "device-scoped, in the detail windows only",
        ),
        (
            Scope::Host,
            When::Always,
            "host-wide (every device's packets), all the time",
        ),
        (
            Scope::Host,
            When::Windows,
            "host-wide, in the detail windows only",
        ),
    ] {
        let l = list(scope, when);
        if !l.is_empty() {
            parts.push(format!("{words}: {l}"));
        }
    }
    if parts.is_empty() {
        parts.push("no packet hook".into());
    }
    format!("{}; RX counts from {rx}, TX from {tx}", parts.join("; "))
}

/// The checks as text `width` columns wide: the host's, then the device's with `-i`.
pub fn render_text(d: &Doctor, width: usize) -> String {
    let mut o = String::new();
    for c in &d.checks {
        o.push_str(&render_check(c, width));
    }
    o.push_str(&fill("  perf PMUs: ", &d.pmus.join(" "), width));
    o.push_str("  counters:\n");
    for l in &d.counters.lines {
        o.push_str(&fill("    ", l, width));
    }
    if let Some(dev) = &d.device {
        o.push_str(&format!(
            "device {}{}:\n",
            dev.iface,
            dev.netns
                .as_deref()
                .map(|n| format!(" in namespace {n}"))
                .unwrap_or_default()
        ));
        for c in &dev.checks {
            o.push_str(&render_check(c, width));
        }
    }
    match &d.fatal {
        None => o.push_str("recording: possible\n"),
        Some(f) => o.push_str(&fill("recording: NOT possible — ", f, width)),
    }
    o
}

/// `text` after `head`, in lines of at most `width` columns (a longer word stands alone),
/// continuation lines indented to where the text starts.
fn fill(head: &str, text: &str, width: usize) -> String {
    let indent = head.chars().count();
    let mut out = String::new();
    let mut line = head.to_string();
    let mut len = indent;
    let mut empty = true;
    for w in text.split_whitespace() {
        let wl = w.chars().count();
        if !empty && len + 1 + wl > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            len = indent;
            empty = true;
        }
        if !empty {
            line.push(' ');
            len += 1;
        }
        line.push_str(w);
        len += wl;
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

fn render_check(c: &Check, width: usize) -> String {
    let tag = match c.status {
        Status::Ok => " ok ",
        Status::Missing => "MISS",
        Status::Assumed => " ?? ",
        Status::Unchecked => " -- ",
    };
    let mut o = fill(&format!("  [{tag}] {:<24} ", c.name), &c.detail, width);
    if !c.impact.is_empty() {
        let head = if c.status == Status::Unchecked {
            "         → without it: "
        } else {
            "         → "
        };
        o.push_str(&fill(head, &c.impact, width));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::memlayout::resolve;
    use std::path::PathBuf;

    fn fixture(name: &str) -> String {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/memlayout")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn layout(kallsyms: &str) -> Result<crate::probe::memlayout::MemLayout, String> {
        resolve(
            "x86_64",
            &fixture(kallsyms),
            &fixture("cpuinfo_4level.txt"),
            &fixture("zoneinfo.txt"),
        )
    }

    #[test]
    fn default_layout_is_assumed_not_ok() {
        let c = frag_layout_check(&layout("kallsyms_plain.txt"));
        assert_eq!((c.status, c.ok), (Status::Assumed, false));
        assert!(
            c.detail
                .starts_with("assumed, not verified here: x86-64 defaults"),
            "{}",
            c.detail
        );
        assert!(
            c.impact.contains("at record time") && c.impact.contains("linear packet data only"),
            "{}",
            c.impact
        );
        let text = render_check(&c, 100);
        assert!(
            text.starts_with("  [ ?? ] frag page addresses ")
                && text.contains("\n         → if this host randomises"),
            "{text}"
        );
    }

    #[test]
    fn kernel_bases_are_ok_and_refusals_missing() {
        let c = frag_layout_check(&layout("kallsyms_kaslr.txt"));
        assert_eq!((c.status, c.ok), (Status::Ok, true));
        assert!(c.impact.is_empty() && render_check(&c, 100).starts_with("  [ ok ] "));
        let c = frag_layout_check(&layout("kallsyms_hidden.txt"));
        assert_eq!((c.status, c.ok), (Status::Missing, false));
        assert!(
            render_check(&c, 100).starts_with("  [MISS] ")
                && c.impact.contains("linear packet data only")
        );
        let js = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(js["status"], "missing");
    }
}
