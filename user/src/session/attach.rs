//! What a session checks and attaches before its first interval: the arguments, the
//! interface and the kernel's features; then one constructor per probe family: tier 0's
//! counting programs as the count plan says, the detail hooks with the L3-miss sampler and
//! the windows they run in, and the uncore counter sampler; and the hooks they run, for the
//! recording.
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::counters::{self, CounterSource, Platform};
use crate::probe::features::Features;
use crate::probe::l3miss::{L3missProbe, MissSource};
use crate::probe::pktlife::{rx_queue_offset_for_driver, PktlifeProbe, ProbeConfig};
use crate::probe::qcount::{QcountConfig, QcountProbe};
use crate::sys::is_root;
use crate::topology::{self, IfaceInfo};

use super::counts::CountPlan;
use super::windowdriver::WindowDriver;
use super::{windows, DetailMode, MissSampling, Session, SessionOptions};

/// A window-only direction samples 1/duty of the time, so it samples by size duty times as
/// densely inside its windows: as many samples per second as a program running all the time
/// would take. Every skb there would cost a header parse and a flow update per 64 B frame
/// (about 300 ns on a 2-vCPU VM); a bulk flow's GRO skbs are sampled either way.
pub(super) fn window_flow_bytes(opts: &SessionOptions) -> u32 {
    (opts.detail.flow_sample() / opts.duty().max(1)).max(1)
}

/// Tier 0 attached as `plan` says, and whether its first window opens at once to learn which
/// queue a NAPI instance serves.
pub(super) fn attach_tier0(
    opts: &SessionOptions,
    features: &Features,
    iface: &IfaceInfo,
    netns_path: Option<&Path>,
    plan: &mut CountPlan,
) -> Result<(QcountProbe, bool)> {
    let (windowed, covered, window_only) = (plan.windowed, plan.covered, plan.window_only);
    let flows = opts.detail.flow_sample() > 0;
    // A window-only direction samples 1/duty of the time, so it samples by size duty times
    // as densely inside its windows: as many samples per second as a program running all
    // the time would take. Every skb there would cost a header parse and a flow update per
    // 64 B frame (about 300 ns on a 2-vCPU VM); a bulk flow's GRO skbs are sampled either way.
    let window_flow_bytes = window_flow_bytes(opts);
    // Which NAPI instance serves each RX queue, where the driver says.
    let napi_known = plan
        .kstats
        .as_mut()
        .map(|k| k.napi_queues())
        .unwrap_or_default();
    // napi_poll fires for every device's polls: with windows it counts in them alone, and
    // polls are estimated from them, charged to queues by the kernel's queue table or the
    // frames an RX program saw (in the windows, where nothing else needs one).
    let napi_window_only = windowed;
    let mut tier0 = QcountProbe::attach(
        &QcountConfig {
            ifindex: iface.ifindex,
            netns_inode: iface.netns_inode,
            netns_path: netns_path.map(Path::to_path_buf),
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
            drop_window_only: windowed,
        },
        features,
        opts.hooks,
    )?;
    // Where the driver does not publish the NAPI instances (veth) and no RX program runs
    // outside windows, the first window begins at once and learns them from the frames,
    // so no early poll goes uncharged.
    tier0.map_napi(&napi_known)?;
    let learn_first = window_only[0] && napi_known.is_empty();
    if learn_first {
        tier0.attach_window_hooks()?;
    }
    Ok((tier0, learn_first))
}

/// The detail hooks, the L3-miss sampler, the windows they run in, and how they are labelled.
pub(super) struct DetailProbes {
    pub(super) detail: Option<PktlifeProbe>,
    pub(super) l3: Option<L3missProbe>,
    pub(super) miss_sampling: MissSampling,
    pub(super) miss_label: String,
    pub(super) buffer_join: String,
    pub(super) miss_period: u64,
    pub(super) windows: Option<WindowDriver>,
}

pub(super) fn attach_detail(
    opts: &SessionOptions,
    features: &Features,
    iface: &IfaceInfo,
    platform: Option<Platform>,
    windowed: bool,
    learn_first: bool,
) -> Result<DetailProbes> {
    use crate::probe::l3miss::{event_attr, L3missConfig};
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
            features,
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
            windows::WindowRuns {
                sampler: l3.as_ref().is_some_and(L3missProbe::has_sampler),
                detail: detail.is_some(),
            },
        )
        .map(|mut w| {
            if learn_first {
                w.opened_at = Some(Duration::ZERO);
                w.learning = true;
                w.tier0_on = true;
                w.tier0_runs.on(0);
            }
            w.window_packets = opts.window_packets();
            w.budget = windows::RunBudget::new(opts.run_budget());
            w
        })
    } else {
        None
    };
    Ok(DetailProbes {
        detail,
        l3,
        miss_sampling,
        miss_label,
        buffer_join,
        miss_period,
        windows,
    })
}

/// The counter sampler `--counters` asks for, read once so interval 0 starts now; the notes
/// say what it could not open, after `kernel_notes`.
pub(super) fn open_counters(
    opts: &SessionOptions,
    kernel_notes: Vec<String>,
    tier0: &QcountProbe,
) -> Result<(Option<counters::Sampler>, CounterSource, Vec<String>)> {
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
    Ok((sampler, counters_source, counter_notes))
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
    /// The L3-miss samples of the interval joined to queues, flows and buffers (`flow_turn`:
    /// the flows' too).
    pub(super) fn read_misses(
        &mut self,
        finishing: bool,
        flow_turn: bool,
    ) -> Result<Option<crate::snapshot::MissSnapshot>> {
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
            return Ok(Some(m));
        }
        Ok(None)
    }
}
