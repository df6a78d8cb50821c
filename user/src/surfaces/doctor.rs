//! `ddioscope doctor`: what this host offers each part of ddioscope, and what
//! every missing piece costs the user.
use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::probe::features::{Features, PKTLIFE_HOOKS};

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

pub fn run() -> Doctor {
    let features = Features::detect();
    let pmus = list_pmus(Path::new("/sys"));
    let has = |prefix: &str| pmus.iter().filter(|p| p.starts_with(prefix)).count();
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
        check(
            "tp_btf programs",
            features.tracing_prog,
            "a tp_btf program loads",
            "hooks fall back to raw_tp (same data, slightly costlier reads)",
        ),
        check(
            "fentry programs",
            features.fentry_prog,
            "an fentry program loads",
            "not needed: every hook has a tracepoint (driver-function hooks unavailable)",
        ),
        check(
            "raw_tp programs",
            features.raw_tracepoint_prog,
            "BPF_PROG_TYPE_RAW_TRACEPOINT loads",
            "no fallback when tp_btf is refused",
        ),
        check(
            "ring buffer",
            features.ringbuf_map,
            "BPF_MAP_TYPE_RINGBUF",
            "no sampled packet records",
        ),
        check(
            "perf_event programs",
            features.perf_event_prog,
            "BPF_PROG_TYPE_PERF_EVENT loads",
            "no in-kernel L3-miss sample joining",
        ),
    ];
    for h in PKTLIFE_HOOKS {
        let btf = features.btf_tracepoints.iter().any(|t| t == h.tracepoint);
        checks.push(check(
            &format!("hook {}", h.tracepoint),
            btf || features.raw_tracepoint_prog,
            format!(
                "attaches as {}{}",
                features.preferred(h).as_str(),
                if btf { "" } else { " (no BTF type for tp_btf)" }
            ),
            h.without,
        ));
    }
    // What a recording costs the host's other devices: the hooks that see their packets too.
    checks.push(check(
        "hook scope",
        true,
        "device-scoped, all the time: tcx ingress (RX counts and flows where the driver counts no RX queue); \
         host-wide, all the time: kfree_skb (per drop, not per packet); host-wide, in the detail windows only \
         (1/32 of the time by default, and only while the recorded device carries traffic): net_dev_start_xmit \
         (TX split and flows), napi_poll, and the detail hooks above",
        "",
    ));
    checks.push(frag_layout_check(&crate::probe::memlayout::resolve_live()));
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
    let fatal = features
        .fatal()
        .or_else(|| (!root).then(|| "not running as root".to_string()));
    let detection = crate::counters::platform::detect_host();
    let counters = crate::counters::doctor(Path::new("/sys"), &detection, true);
    Doctor {
        can_record: fatal.is_none(),
        fatal,
        checks,
        features,
        pmus,
        counters,
    }
}

pub fn render_text(d: &Doctor) -> String {
    let mut o = String::new();
    for c in &d.checks {
        o.push_str(&render_check(c));
    }
    o.push_str(&format!("  perf PMUs: {}\n", d.pmus.join(" ")));
    o.push_str("  counters:\n");
    for l in &d.counters.lines {
        o.push_str(&format!("    {l}\n"));
    }
    match &d.fatal {
        None => o.push_str("recording: possible\n"),
        Some(f) => o.push_str(&format!("recording: NOT possible — {f}\n")),
    }
    o
}

fn render_check(c: &Check) -> String {
    let tag = match c.status {
        Status::Ok => " ok ",
        Status::Missing => "MISS",
        Status::Assumed => " ?? ",
    };
    let impact = if c.impact.is_empty() {
        String::new()
    } else {
        format!("\n         → {}", c.impact)
    };
    format!("  [{tag}] {:<36} {}{impact}\n", c.name, c.detail)
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
        let text = render_check(&c);
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
        assert!(c.impact.is_empty() && render_check(&c).starts_with("  [ ok ] "));
        let c = frag_layout_check(&layout("kallsyms_hidden.txt"));
        assert_eq!((c.status, c.ok), (Status::Missing, false));
        assert!(
            render_check(&c).starts_with("  [MISS] ")
                && c.impact.contains("linear packet data only")
        );
        let js = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(js["status"], "missing");
    }
}
