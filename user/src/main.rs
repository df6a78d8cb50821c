//! The ddioscope command line.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use ddioscope::{doctor, record, recording, report, serve, top};

#[derive(Parser)]
#[command(
    name = "ddioscope",
    version,
    about = "Per-queue and per-flow Intel DDIO observability: eBPF packet lifetimes joined with uncore counters",
    long_about = "ddioscope records what each NIC queue and flow does (eBPF, in the kernel) and what the cache \
does (uncore counters), and tells which queues lose DDIO's benefit and what to change.\n\n\
Typical use:\n  sudo ddioscope record -i eth1 -d 10 -o run.ddio\n  ddioscope report run.ddio"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach to an interface and write a recording (needs root).
    Record {
        /// Interface to observe.
        #[arg(short, long)]
        iface: String,
        /// Named network namespace (from `ip netns list`) the interface lives in.
        #[arg(long)]
        netns: Option<String>,
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(short, long, value_name = "SECS")]
        duration: Option<f64>,
        /// Recording file to create.
        #[arg(short, long, default_value = "ddioscope.ddio")]
        output: PathBuf,
        /// Overwrite the output file if it exists.
        #[arg(long)]
        force: bool,
        /// Snapshot interval in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 100)]
        interval: u64,
        /// Send 1 in N packets' full life records to userspace (0 disables sampling).
        #[arg(long, value_name = "N", default_value_t = 64)]
        sample: u32,
        /// Measure stage latencies on 1 in N packets (1: every packet). Counts,
        /// bytes and flows always cover every packet; this trades histogram
        /// density for per-packet cost.
        #[arg(long, value_name = "N", default_value_t = ddioscope::probe::pktlife::DEFAULT_STAGE_EVERY, value_parser = clap::value_parser!(u32).range(1..))]
        stage_sample: u32,
        /// Print progress as JSON lines on stdout (first line once the probes are attached).
        #[arg(long)]
        json_progress: bool,
        /// Print the feature table and attach details.
        #[arg(short, long)]
        verbose: bool,
        /// Hardware counters: auto (uncore PMUs when present), software (software
        /// perf events through the same path), off.
        #[arg(long, value_enum, default_value = "auto")]
        counters: record::CountersMode,
        /// Import a `perf stat -I MS -x,` CSV captured on this or another host
        /// (see scripts/capture-counters.sh) into the recording.
        #[arg(long, value_name = "FILE")]
        counters_from: Option<PathBuf>,
        /// L3-miss sampling for attribution: auto (PEBS where the CPU has it), pebs,
        /// software-clock / software-faults / software-copy (stand-ins on hosts
        /// without a PMU; software-copy gives clock samples inside a socket copy
        /// the address of the buffer being copied), off.
        #[arg(long, value_enum, default_value = "auto")]
        miss_sampling: ddioscope::probe::l3miss::MissSource,
        /// Sample period: 1 in N L3 misses (default 2000), N ns for software-clock
        /// and software-copy (default 1 ms), 1 in N page faults for software-faults (default 1).
        #[arg(long, value_name = "N")]
        miss_period: Option<u64>,
        /// Address join on 1 in N packet-buffer pages, chosen by address (a power of two up
        /// to 16; 1: every page). The buffer map's per-packet cost falls with N; samples on
        /// the other pages are counted apart, and the join's shares and miss estimates
        /// come from the sampled pages (estimates scaled by N).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_join_sample)]
        join_sample: u32,
        /// Attribution in windows: the buffer join, CPU context and sampler run for 1/N of
        /// each second (plus a warm-up of up to 10 ms), at a random place, with the sample
        /// period divided by N inside, so per-packet cost falls about N-fold and the sample
        /// count stays the same. Miss counts then extrapolate from the windows; buffers handed
        /// up before a window and read in it keep an earlier owner and no age (counted).
        /// 1: always on. Default: 16 with PEBS, 1 with a software stand-in.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=ddioscope::windows::MAX_DUTY as i64))]
        miss_duty: Option<u32>,
        /// Size of the in-kernel L3-miss flow map (default 4096): tests shrink it to check
        /// that charges lost to its evictions are counted.
        #[arg(long, value_name = "N", hide = true)]
        miss_flow_slots: Option<u32>,
        /// Hook flavour: auto (tp_btf where this kernel allows it, else raw_tp), or
        /// tp-btf / raw-tp for every hook, failing if the kernel refuses it.
        #[arg(long, value_enum, default_value = "auto")]
        hooks: ddioscope::probe::features::HookChoice,
    },
    /// Live per-queue view in the terminal (plain lines when stdout is not a terminal); q or Ctrl-C quits.
    Top {
        /// Interface to observe.
        #[arg(short, long)]
        iface: String,
        /// Named network namespace (from `ip netns list`) the interface lives in.
        #[arg(long)]
        netns: Option<String>,
        /// Refresh interval in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        interval: u64,
        /// Hardware counters: auto (uncore PMUs when present), software, off.
        #[arg(long, value_enum, default_value = "auto")]
        counters: record::CountersMode,
        /// Print the feature table and the attached program ids on stderr.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Serve OpenMetrics/Prometheus metrics (/metrics, /healthz) from a live session.
    Serve {
        /// Interface to observe.
        #[arg(short, long)]
        iface: String,
        /// Named network namespace (from `ip netns list`) the interface lives in.
        #[arg(long)]
        netns: Option<String>,
        /// Address to listen on (loopback unless --allow-remote).
        #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9436")]
        listen: String,
        /// Allow a non-loopback --listen address.
        #[arg(long)]
        allow_remote: bool,
        /// Flows exported, the top N by bytes (bounds the series count).
        #[arg(long, value_name = "N", default_value_t = 10)]
        top_flows: usize,
        /// Sampling interval in milliseconds (metrics are cumulative since start).
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        interval: u64,
        /// Hardware counters: auto (uncore PMUs when present), software, off.
        #[arg(long, value_enum, default_value = "auto")]
        counters: record::CountersMode,
        /// Print the feature table and the attached program ids on stderr.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Import a `perf stat -I MS -x, -e …` CSV into an existing recording.
    ImportCounters {
        /// Recording to add the counters to.
        rec: PathBuf,
        /// CSV written by `perf stat -I MS -x, …` (scripts/capture-counters.sh prints the command).
        csv: PathBuf,
    },
    /// Print the report of a recording.
    Report {
        /// Recording file written by `ddioscope record`.
        file: PathBuf,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// How many flows the text report lists.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Write a self-contained HTML report (inline SVG charts, no network) to this file.
        #[arg(long, value_name = "OUT", conflicts_with = "json")]
        html: Option<PathBuf>,
        /// Overwrite the --html file if it exists.
        #[arg(long, requires = "html")]
        force: bool,
        #[command(flatten)]
        geometry: GeometryArgs,
    },
    /// Recommend ring sizes, IIO LLC ways and IRQ/NUMA placement from a recording
    /// (printed commands with evidence and predicted effect; nothing is applied).
    Recommend {
        /// Recording file written by `ddioscope record`.
        file: PathBuf,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        geometry: GeometryArgs,
    },
    /// What-if grid from the DDIO cache simulator (synthetic experiment descriptions).
    Simulate {
        /// Recording whose queues, rates, packet sizes and residence times drive the simulation.
        #[arg(conflicts_with = "synthetic")]
        recording: Option<PathBuf>,
        /// Experiment, as JSON or key=value,... (e.g. "preset=skx6140,queues=1,ring=1024,pkt_bytes=1500,consumer=forward").
        #[arg(long, value_name = "SPEC", required_unless_present_any = ["bench", "recording"])]
        synthetic: Option<String>,
        /// Ring sizes to try (comma-separated).
        #[arg(long, value_delimiter = ',')]
        ring: Vec<u32>,
        /// DDIO (IIO LLC) way counts to try.
        #[arg(long, value_delimiter = ',')]
        ways: Vec<u32>,
        /// Queue counts to try.
        #[arg(long, value_delimiter = ',')]
        queues: Vec<u32>,
        /// Packet sizes to try.
        #[arg(long, value_delimiter = ',')]
        pkt_bytes: Vec<u32>,
        #[arg(long)]
        json: bool,
        /// Measure simulator throughput (cache-line accesses per second, one core).
        #[arg(long)]
        bench: bool,
        #[command(flatten)]
        geometry: GeometryArgs,
    },
    /// Check what this host offers ddioscope and what each missing piece costs.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// For `make bench`: attach empty and device-read programs to the hot
    /// tracepoints (the bpf_stats floor) and hold them until the duration or
    /// a signal; JSON lines on stdout (needs root).
    #[command(hide = true)]
    BenchFloor {
        /// Interface whose ifindex the device-read programs compare with.
        #[arg(short, long)]
        iface: String,
        /// Named network namespace (from `ip netns list`) the interface lives in.
        #[arg(long)]
        netns: Option<String>,
        /// Detach after this many seconds (default: at Ctrl-C).
        #[arg(short, long, value_name = "SECS")]
        duration: Option<f64>,
        /// Hook flavour, as for `record`: use the recorder's.
        #[arg(long, value_enum, default_value = "auto")]
        hooks: ddioscope::probe::features::HookChoice,
    },
}

/// Evaluate a recording for another cache than the one it was taken on.
#[derive(clap::Args, Debug, Clone, Copy)]
struct GeometryArgs {
    /// LLC size in MiB (default: the recording host's).
    #[arg(long, value_name = "MIB")]
    llc_mib: Option<f64>,
    /// LLC associativity (default: the recording host's).
    #[arg(long, value_name = "N")]
    llc_ways: Option<u32>,
    /// DDIO (IIO LLC WAYS) ways (default: read from MSR 0xC8B at record time, else 2).
    #[arg(long, value_name = "N")]
    ddio_ways: Option<u32>,
}

impl From<GeometryArgs> for ddioscope::analysis::GeometryOverrides {
    fn from(g: GeometryArgs) -> Self {
        ddioscope::analysis::GeometryOverrides { llc_mib: g.llc_mib, llc_ways: g.llc_ways, ddio_ways: g.ddio_ways }
    }
}

fn render_advice(a: &ddioscope::analysis::Advice) -> String {
    let mut o = render_attribution(&a.attribution, 5);
    render_model(a, &mut o);
    o
}

/// The measured methods' attribution when the model cannot run (`why`): no model prior.
fn attribution_without_model(rec: &recording::Recording, why: &anyhow::Error) -> ddioscope::analysis::AttributionReport {
    let mut a = ddioscope::analysis::attribution(rec, None);
    a.chosen.notes.push(format!("no model prior: the DDIO model is not available ({why:#})"));
    a
}

/// The attributed misses: every queue, and the first `top_flows` flows.
fn render_attribution(a: &ddioscope::analysis::AttributionReport, top_flows: usize) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let at = &a.chosen;
    let _ = writeln!(
        o,
        "\nAttributed DDIO/L3 misses: method {}, confidence {}",
        serde_json::to_value(at.method).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        serde_json::to_value(at.confidence).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    );
    for n in &at.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    let unit = if at.counts_are_samples { "samples" } else { "misses" };
    for q in &at.queues {
        let ci = q.ci_pct.map(|(lo, hi)| format!(" [{lo:.0}–{hi:.0}%]")).unwrap_or_default();
        let _ = writeln!(o, "  {} queue {:>2}: {:>12.0} {unit}  {:5.1}%{}", q.dir, q.queue, q.misses, q.share_pct, ci);
    }
    for f in at.flows.iter().take(top_flows) {
        let _ = writeln!(o, "  {} {}:{} -> {}:{}  {:.0} {unit}  {:.1}%", f.proto, f.src, f.sport, f.dst, f.dport, f.misses, f.share_pct);
    }
    if at.flows.len() > top_flows {
        let _ = writeln!(o, "  ({} more flows)", at.flows.len() - top_flows);
    }
    o
}

/// The DDIO model's view and the recommendations.
fn render_model(a: &ddioscope::analysis::Advice, o: &mut String) {
    use std::fmt::Write as _;
    let g = &a.geometry;
    let _ = writeln!(
        o,
        "\nDDIO model (model-only prediction): LLC {:.2} MiB, {} ways; DDIO {} ways ({}) = {:.2} MiB nominal, {:.2} MiB usable",
        g.size_bytes as f64 / 1048576.0,
        g.ways,
        g.ddio_ways,
        a.ddio_ways_note,
        a.model.ddio_capacity_bytes as f64 / 1048576.0,
        a.model.usable_ddio_bytes as f64 / 1048576.0
    );
    for n in &a.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    for q in &a.model.queues {
        let _ = writeln!(
            o,
            "  {:?} queue {}: footprint {:.0} KiB, in flight {:.0} KiB, predicted write hit {}, read hit {} → {:?}",
            q.dir,
            q.queue,
            q.footprint_bytes as f64 / 1024.0,
            q.inflight_bytes / 1024.0,
            q.predicted_write_hit_pct.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into()),
            q.predicted_read_hit_pct.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into()),
            q.verdict
        );
    }
    let _ = writeln!(o, "\nRecommendations ({}; nothing is applied)", if a.recommendations.is_empty() { "none" } else { "commands to run yourself" });
    for r in &a.recommendations {
        let _ = writeln!(o, "  [{}] {}", r.kind, r.target);
        let _ = writeln!(o, "      $ {}", r.command);
        for e in &r.evidence {
            let _ = writeln!(o, "      · {e}");
        }
        if let (Some(b), Some(af)) = (r.predicted_before, r.predicted_after) {
            let _ = writeln!(o, "      predicted {}: {b:.1} → {af:.1}", r.predicted_metric.as_deref().unwrap_or("hit %"));
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // libbpf's own messages (load failures while probing features) are noise
    // unless asked for; our errors explain themselves.
    let verbose = matches!(
        cli.cmd,
        Cmd::Record { verbose: true, .. } | Cmd::Top { verbose: true, .. } | Cmd::Serve { verbose: true, .. }
    );
    if !verbose {
        libbpf_rs::set_print(None);
    }
    match cli.cmd {
        Cmd::ImportCounters { rec, csv } => {
            let n = record::import_counters(&rec, &csv)?;
            eprintln!("imported {n} counter readings from {} into {}", csv.display(), rec.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Record { iface, netns, duration, output, force, interval, sample, stage_sample, json_progress, verbose, counters, counters_from, miss_sampling, miss_period, join_sample, miss_duty, miss_flow_slots, hooks } => {
            if let Some(f) = &counters_from {
                if !f.is_file() {
                    anyhow::bail!("--counters-from {}: no such file", f.display());
                }
            }
            let opts = record::RecordOptions {
                iface,
                netns,
                duration,
                output,
                force,
                interval_ms: interval,
                sample_every: sample,
                stage_every: stage_sample,
                json_progress,
                verbose,
                counters,
                miss_source: miss_sampling,
                miss_period: miss_period.unwrap_or(match miss_sampling {
                    ddioscope::probe::l3miss::MissSource::SoftwareClock | ddioscope::probe::l3miss::MissSource::SoftwareCopy => {
                        1_000_000
                    }
                    ddioscope::probe::l3miss::MissSource::SoftwareFaults => 1,
                    _ => 2000,
                }),
                join_sample,
                miss_duty: miss_duty.unwrap_or(ddioscope::windows::default_duty(miss_sampling)),
                miss_flow_slots,
                counters_from,
                hooks,
                command_line: std::env::args().collect::<Vec<_>>().join(" "),
            };
            let s = record::record(&opts)?;
            if !json_progress {
                eprintln!(
                    "wrote {} ({} intervals, rx {} / tx {} packets, {} sampled, {} lost){}",
                    opts.output.display(),
                    s.intervals,
                    s.rx_packets,
                    s.tx_packets,
                    s.events.sampled,
                    s.events.lost,
                    if s.stopped_by_signal { "; stopped by signal" } else { "" }
                );
            } else {
                record::progress_line(
                    serde_json::json!({"event": "done", "intervals": s.intervals, "output": opts.output.display().to_string()}),
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Top { iface, netns, interval, counters, verbose } => {
            top::run(&top::TopOptions { iface, netns, interval_ms: interval, counters, verbose })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Serve { iface, netns, listen, allow_remote, top_flows, interval, counters, verbose } => {
            serve::run(&serve::ServeOptions {
                iface,
                netns,
                listen,
                allow_remote,
                top_flows,
                interval_ms: interval,
                counters,
                verbose,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Report { file, json, top, html, force, geometry } => {
            // Refuse before the (slower) model runs: the answer does not depend on it.
            if let Some(out) = &html {
                ddioscope::outfile::check(out, force)?;
            }
            let rec = recording::Recording::open(&file)?;
            let r = report::build(&rec);
            // The model needs an LLC geometry; without one the report still prints, and says why.
            let advice = ddioscope::analysis::advise(&rec, geometry.into());
            let recs = advice.as_ref().map(|a| a.recommendations.clone()).unwrap_or_default();
            if let Some(out) = html {
                let page = report::html::render_html(&rec, &r, &recs);
                ddioscope::outfile::write_whole(&out, force, page.as_bytes())?;
                eprintln!("wrote {}", out.display());
            } else if json {
                let mut v = serde_json::to_value(&r)?;
                match &advice {
                    Ok(a) => {
                        let mut model = serde_json::to_value(&a.model)?;
                        model["geometry"] = serde_json::to_value(&a.geometry)?;
                        model["ddio_ways_note"] = serde_json::Value::String(a.ddio_ways_note.clone());
                        model["notes"] = serde_json::to_value(&a.notes)?;
                        v["model"] = model;
                        v["recommendations"] = serde_json::to_value(&a.recommendations)?;
                        v["attribution"] = serde_json::to_value(&a.attribution)?;
                    }
                    Err(e) => {
                        v["model"] = serde_json::json!({"error": format!("{e:#}")});
                        v["recommendations"] = serde_json::json!([]);
                        v["attribution"] = serde_json::to_value(attribution_without_model(&rec, e))?;
                    }
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", report::render_text(&r, top));
                match &advice {
                    Ok(a) => {
                        print!("{}", render_attribution(&a.attribution, top));
                        let mut o = String::new();
                        render_model(a, &mut o);
                        print!("{o}");
                    }
                    Err(e) => {
                        print!("{}", render_attribution(&attribution_without_model(&rec, e), top));
                        println!("\nDDIO model: not available ({e:#})");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Recommend { file, json, geometry } => {
            let rec = recording::Recording::open(&file)?;
            let a = ddioscope::analysis::advise(&rec, geometry.into())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&a)?);
            } else {
                print!("{}", render_advice(&a));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Simulate { recording: rec_path, synthetic, ring, ways, queues, pkt_bytes, json, bench, geometry } => {
            if bench {
                let lps = ddioscope::model::sim::bench_lines_per_sec();
                println!("simulator: {:.1} M cache-line accesses/s on one core (target >= 50 M/s)", lps / 1e6);
                return Ok(ExitCode::SUCCESS);
            }
            let spec = match rec_path {
                Some(path) => {
                    let rec = recording::Recording::open(&path)?;
                    let obs = ddioscope::analysis::observation(&rec, geometry.into())?;
                    ddioscope::advise::spec_from_observation(&obs, None, None).ok_or_else(|| {
                        anyhow::anyhow!("{} has no RX traffic to simulate", path.display())
                    })?
                }
                None => {
                    let spec_text = synthetic.unwrap_or_default();
                    ddioscope::model::spec::SimSpec::parse(&spec_text).map_err(|e| anyhow::anyhow!("--synthetic: {e}"))?
                }
            };
            let grid = ddioscope::model::spec::what_if(&spec, &ring, &ways, &queues, &pkt_bytes);
            if json {
                println!("{}", serde_json::to_string_pretty(&grid)?);
            } else {
                println!("model-only prediction (simulated, not measured)");
                println!(
                    "{:>6} {:>5} {:>8} {:>7} {:>6} {:>11} {:>11} {:>9} {:>9} {:>9}",
                    "ring", "ways", "mask", "queues", "pkt B", "footprint", "DDIO cap", "verdict", "write hit", "read hit"
                );
                let pct = |v: Option<f64>| v.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into());
                for p in &grid {
                    println!(
                        "{:>6} {:>5} {:>#8x} {:>7} {:>6} {:>9.2}Mi {:>9.2}Mi {:>9} {:>9} {:>9}",
                        p.ring,
                        p.ddio_ways,
                        p.ddio_mask,
                        p.queues,
                        p.pkt_bytes,
                        p.footprint_bytes as f64 / 1048576.0,
                        p.ddio_capacity_bytes as f64 / 1048576.0,
                        serde_json::to_value(p.verdict).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
                        pct(p.io_write_hit_pct),
                        pct(p.io_read_hit_pct)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::BenchFloor { iface, netns, duration, hooks } => {
            ddioscope::probe::floor::run(&ddioscope::probe::floor::FloorOptions { iface, netns, duration, hooks })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Doctor { json } => {
            let d = doctor::run();
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                print!("{}", doctor::render_text(&d));
            }
            Ok(if d.can_record { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

/// `--join-sample`: a power of two from 1 to MAX_JOIN_SAMPLE (the page subset is a mask
/// on the buffer table's set index).
fn parse_join_sample(s: &str) -> Result<u32, String> {
    let max = ddioscope::probe::pktlife::MAX_JOIN_SAMPLE;
    match s.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= max => Ok(n),
        _ => Err(format!("must be a power of two from 1 to {max} (1, 2, 4, ...)")),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(c) => c,
        Err(e) => {
            // One line: the outermost context first, causes after it.
            let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("ddioscope: error: {}", chain.join(": "));
            ExitCode::from(1)
        }
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
