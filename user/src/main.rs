//! The ddioscope command line.
use std::process::ExitCode;

use clap::Parser;

use ddioscope::cli::{Cli, Cmd, ReportArgs, SimulateArgs};
use ddioscope::recording::{self, record};
use ddioscope::report;
use ddioscope::surfaces::{doctor, serve, top};

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
    let verbose = cli.cmd.verbose();
    if !verbose {
        libbpf_rs::set_print(None);
    }
    match cli.cmd {
        Cmd::ImportCounters { rec, csv } => {
            let n = recording::import::import_counters(&rec, &csv)?;
            eprintln!("imported {n} counter readings from {} into {}", csv.display(), rec.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Record(args) => {
            record::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Top(args) => {
            top::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Serve(args) => {
            serve::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Report(ReportArgs { file, json, top, html, force, geometry }) => {
            // Refuse before the (slower) model runs: the answer does not depend on it.
            if let Some(out) = &html {
                check_output(out, force)?;
            }
            let rec = recording::Recording::open(&file)?;
            let r = report::build(&rec);
            // The model needs an LLC geometry; without one the report still prints, and says why.
            let advice = ddioscope::analysis::advise(&rec, geometry);
            let recs = advice.as_ref().map(|a| a.recommendations.clone()).unwrap_or_default();
            if let Some(out) = html {
                let page = report::html::render_html(&rec, &r, &recs);
                std::fs::write(&out, page).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
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
            let a = ddioscope::analysis::advise(&rec, geometry)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&a)?);
            } else {
                print!("{}", render_advice(&a));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Simulate(SimulateArgs { recording: rec_path, synthetic, ring, ways, queues, pkt_bytes, json, bench, geometry }) => {
            if bench {
                let lps = ddioscope::model::sim::bench_lines_per_sec();
                println!("simulator: {:.1} M cache-line accesses/s on one core (target >= 50 M/s)", lps / 1e6);
                return Ok(ExitCode::SUCCESS);
            }
            let spec = match rec_path {
                Some(path) => {
                    let rec = recording::Recording::open(&path)?;
                    let obs = ddioscope::analysis::observation(&rec, geometry)?;
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

/// An output file for a report: refused when it exists (unless `force`), is a directory, or
/// its directory does not exist, each with one line naming the fix.
fn check_output(out: &std::path::Path, force: bool) -> anyhow::Result<()> {
    if out.is_dir() {
        anyhow::bail!("{} is a directory; name a file for --html", out.display());
    }
    if out.exists() && !force {
        anyhow::bail!("{} already exists; pass --force to overwrite it", out.display());
    }
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !dir.is_dir() {
        anyhow::bail!("{}: directory {} does not exist", out.display(), dir.display());
    }
    Ok(())
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
