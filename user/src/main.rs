//! The ddioscope command line: parse, run the subcommand, print its output and errors.
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use clap::{CommandFactory, Parser};

use ddioscope::analysis::{self, Summary};
use ddioscope::cli::{error_line, is_broken_pipe, print, Cli, Cmd, RecommendArgs, ReportArgs, SimulateArgs, WindowArgs};
use ddioscope::recording::{self, record, Recording};
use ddioscope::report::{self, json::FullReport};
use ddioscope::surfaces::{doctor, serve, top};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // libbpf's own messages (load failures while probing features) are noise
    // unless asked for; our errors explain themselves.
    if !cli.cmd.verbose() {
        libbpf_rs::set_print(None);
    }
    match run(cli.cmd) {
        Ok(code) => code,
        // The reader went away (`| head`): nothing more to say, as `ls | head`.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddioscope: error: {}", error_line(&e));
            ExitCode::from(1)
        }
    }
}

fn run(cmd: Cmd) -> Result<ExitCode> {
    match cmd {
        Cmd::Record(args) => record::run(&args)?,
        Cmd::Top(args) => top::run(&args)?,
        Cmd::Serve(args) => serve::run(&args)?,
        Cmd::ImportCounters { rec, csv } => {
            let n = recording::import::import_counters(&rec, &csv)?;
            eprintln!("imported {n} counter readings from {} into {}", csv.display(), rec.display());
        }
        Cmd::Report(args) => report_cmd(args)?,
        Cmd::Recommend(args) => recommend(args)?,
        Cmd::Simulate(args) => simulate(args)?,
        Cmd::BenchFloor { iface, netns, duration, hooks } => {
            ddioscope::probe::floor::run(&ddioscope::probe::floor::FloorOptions { iface, netns, duration, hooks })?;
        }
        Cmd::Completions { shell } => print(&ddioscope::dist::completions(Cli::command(), shell))?,
        Cmd::Man { dir } => {
            let pages = ddioscope::dist::man_pages(Cli::command(), &dir)?;
            print(&pages.iter().map(|p| format!("{}\n", p.display())).collect::<String>())?;
        }
        Cmd::Doctor { json } => {
            let d = doctor::run();
            print(&if json { serde_json::to_string_pretty(&d)? + "\n" } else { doctor::render_text(&d) })?;
            return Ok(if d.can_record { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A recording, read over the `--from`/`--to` window.
fn open(file: &Path, w: WindowArgs) -> Result<Recording> {
    let mut rec = Recording::open(file)?;
    rec.set_window(w.from, w.to)?;
    Ok(rec)
}

fn report_cmd(args: ReportArgs) -> Result<()> {
    // Refuse before the (slower) model runs: the answer does not depend on it.
    if let Some(out) = &args.html {
        ddioscope::outfile::check(out, args.force)?;
    }
    let rec = open(&args.file, args.window)?;
    let summary: Summary = analysis::summary::build(&rec)?;
    // The model needs an LLC geometry; without one the report still prints, and says why.
    let outcome = analysis::advise_or_explain(&rec, &summary, args.geometry)?;
    if let Some(out) = args.html {
        let page = report::html::render_html(&rec, &summary, &outcome)?;
        ddioscope::outfile::write_whole(&out, args.force, page.as_bytes())?;
        eprintln!("wrote {}", out.display());
    } else if args.json {
        print(&(FullReport::new(&summary, &outcome).to_json()? + "\n"))?;
    } else {
        print(&report::text::render_report(&summary, &outcome, &report::text::TextOptions { top_flows: args.top, wide: args.wide }))?;
    }
    Ok(())
}

fn recommend(args: RecommendArgs) -> Result<()> {
    let rec = open(&args.file, args.window)?;
    let summary = analysis::summary::build(&rec)?;
    let a = analysis::advise(&rec, &summary, args.geometry)?;
    print(&if args.json { report::json::advice_json(&summary, &a)? + "\n" } else { report::text::render_advice(&summary, &a) })
}

fn simulate(args: SimulateArgs) -> Result<()> {
    if args.bench {
        // Other work on the host only ever slows a pass, so the best pass is the simulator's
        // speed and the median shows how busy the host was.
        // Both benches return at least one pass.
        let spread = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            let at = |i: usize| v.get(i).copied().unwrap_or(0.0) / 1e6;
            (v.len(), at(v.len().saturating_sub(1)), at(v.len() / 2), at(0))
        };
        let (n, best, median, slowest) = spread(ddioscope::model::sim::bench_lines_per_sec(7));
        let run_passes = ddioscope::model::drive::bench_run_lines_per_sec(7).context("the whole-run benchmark's spec")?;
        let (runs, run_best, run_median, run_slowest) = spread(run_passes);
        return print(&format!(
            "simulator: {best:.1} M cache-line accesses/s on one core, the best of {n} passes of 20 M (median {median:.1}, slowest {slowest:.1}; target >= 100 M/s)\n\
             whole synthetic runs: {run_best:.1} M/s, the best of {runs} (median {run_median:.1}, slowest {run_slowest:.1}): {}\n",
            ddioscope::model::drive::BENCH_RUN_SPEC
        ));
    }
    let mut head = String::new();
    let grid = match &args.recording {
        Some(path) => {
            let rec = Recording::open(path)?;
            let obs = analysis::observation(&rec, &analysis::summary::build(&rec)?, args.geometry)?;
            let run = ddioscope::advise::ModelRun::new(&obs);
            let spec = run.spec().ok_or_else(|| anyhow!("{} has no RX traffic to simulate", path.display()))?;
            if args.queues.is_empty() && args.pkt_bytes.is_empty() {
                // The recording's own computation: its points are the report's and recommend's.
                head = report::text::render_model_inputs(&run.inputs(), run.calibration.as_ref());
                run.grid(&args.ring, &args.ways)
            } else {
                ddioscope::model::spec::what_if(spec, &args.ring, &args.ways, &args.queues, &args.pkt_bytes)
            }
        }
        None => {
            let text = args.synthetic.as_deref().unwrap_or_default();
            let spec = ddioscope::model::spec::SimSpec::parse(text).map_err(|e| anyhow!("--synthetic: {e}"))?;
            ddioscope::model::spec::what_if(&spec, &args.ring, &args.ways, &args.queues, &args.pkt_bytes)
        }
    };
    print(&if args.json { serde_json::to_string_pretty(&grid)? + "\n" } else { head + &report::text::render_what_if(&grid) })
}
