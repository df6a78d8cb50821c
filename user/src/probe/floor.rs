//! The measurement floor of `make bench` (`ddioscope bench-floor`, not listed
//! in --help): bpf/floor.bpf.c's empty and device-read programs attached to the
//! hot tracepoints next to a recorder, so the bench can tell what bpf_stats
//! charges every program from what the recorder's own code costs. Attached as
//! BPF links owned by this process: they go when it exits, however it exits.
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::OpenObject;

use super::explain_bpf_error;
use super::features::{Features, Flavor, HookChoice, PKTLIFE_HOOKS};
use super::floor_skel::{FloorSkel, FloorSkelBuilder};
use super::AttachedProg;

#[derive(Debug, Clone)]
pub struct FloorOptions {
    pub iface: String,
    pub netns: Option<String>,
    /// Detach after this many seconds (None: at SIGINT/SIGTERM/SIGHUP).
    pub duration: Option<f64>,
    /// The recorder's flavour, so both measure the same attach type.
    pub hooks: HookChoice,
}

/// The flavour a floor program on `tracepoint` gets: the recorder's choice for
/// the same tracepoint.
fn flavor_for(features: &Features, tracepoint: &str) -> Flavor {
    PKTLIFE_HOOKS
        .iter()
        .find(|h| h.tracepoint == tracepoint)
        .map_or(Flavor::RawTp, |h| features.preferred(h))
}

fn open_and_load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    ifindex: u32,
    pick: &dyn Fn(&str) -> Flavor,
) -> Result<FloorSkel<'obj>> {
    let mut open = FloorSkelBuilder::default()
        .open(storage)
        .map_err(|e| anyhow::anyhow!(explain_bpf_error(&e, "opening the floor BPF object")))?;
    match open.maps.rodata_data.as_deref_mut() {
        Some(ro) => ro.filter_ifindex = ifindex,
        None => bail!("floor BPF object has no read-only config section (build problem)"),
    }
    for mut prog in open.open_object_mut().progs_mut() {
        let section = prog.section().to_string_lossy().into_owned();
        let keep = section == "tcx/ingress"
            || section
                .split_once('/')
                .is_some_and(|(prefix, tp)| pick(tp).section_prefix() == format!("{prefix}/"));
        prog.set_autoload(keep);
    }
    open.load()
        .map_err(|e| anyhow::anyhow!(explain_bpf_error(&e, "loading the floor BPF programs")))
}

/// Load with the recorder's flavour choice (the same fallback chain as
/// PktlifeProbe::attach), attach every program whose tracepoint exists, print
/// one `attached` JSON line, hold until the duration or a signal, detach, and
/// print `done`.
pub fn run(opts: &FloorOptions) -> Result<()> {
    if let Some(d) = opts.duration {
        if d.is_nan() || d <= 0.0 {
            bail!("--duration must be a positive number of seconds");
        }
    }
    if !crate::sys::is_root() {
        bail!("ddioscope needs root to load BPF programs: run it with sudo");
    }
    let features = Features::detect();
    if let Some(why) = features.fatal() {
        bail!(why);
    }
    let iface = crate::topology::resolve_iface_live(&opts.iface, opts.netns.as_deref())?;
    // Signals first, so a signal during attach still ends in a clean detach.
    let stop = crate::sys::stop_flag()?;
    // Two object storages: a failed load keeps its storage borrowed for the
    // lifetime of the skeleton it would have returned.
    let (mut storage, mut retry) = (MaybeUninit::uninit(), MaybeUninit::uninit());
    let skel = match opts.hooks {
        HookChoice::TpBtf => open_and_load(&mut storage, iface.ifindex, &|_| Flavor::TpBtf)?,
        HookChoice::RawTp => open_and_load(&mut storage, iface.ifindex, &|_| Flavor::RawTp)?,
        HookChoice::Auto => {
            match open_and_load(&mut storage, iface.ifindex, &|tp| flavor_for(&features, tp)) {
                Ok(s) => s,
                Err(first) => open_and_load(&mut retry, iface.ifindex, &|_| Flavor::RawTp)
                    .map_err(|e| anyhow::anyhow!("{e:#} (as raw_tp; as preferred: {first:#})"))?,
            }
        }
    };
    let mut links = Vec::new();
    let mut progs = Vec::new();
    let mut skipped = Vec::new();
    for prog in skel.object().progs_mut() {
        if !prog.autoload() {
            continue;
        }
        if prog.section() == "tcx/ingress" {
            // After the recorder's tcx program (which attaches first in the chain).
            let ns = opts
                .netns
                .as_deref()
                .map(|n| std::path::Path::new(crate::topology::NETNS_RUN_DIR).join(n));
            match super::qcount::attach_tcx_in(&prog, iface.ifindex, ns.as_deref(), false) {
                Ok(l) => {
                    links.push(l);
                    progs.extend(AttachedProg::of(&prog));
                }
                Err(e) => skipped.push(format!("tcx ingress: {e:#}")),
            }
            continue;
        }
        match prog.attach() {
            Ok(link) => {
                links.push(link);
                progs.extend(AttachedProg::of(&prog));
            }
            // A tracepoint this kernel lacks: its hook has no floor, as it has no events.
            Err(e) => skipped.push(explain_bpf_error(
                &e,
                &format!("attaching {}", prog.section().to_string_lossy()),
            )),
        }
    }
    if links.is_empty() {
        bail!("no floor program attached: {}", skipped.join("; "));
    }
    let ids: Vec<u32> = progs.iter().map(|p| p.id).collect();
    crate::sys::progress_line(serde_json::json!({
        "event": "attached", "iface": iface.name, "ifindex": iface.ifindex,
        "progs": progs, "prog_ids": ids, "skipped": skipped,
    }));
    let end = opts
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    while !stop.load(Ordering::Relaxed) && end.is_none_or(|t| Instant::now() < t) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(links);
    crate::sys::progress_line(serde_json::json!({"event": "done"}));
    Ok(())
}
