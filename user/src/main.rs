//! The ddioscope command line: parse, run the subcommand, print its output and errors.
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use ddioscope::analysis::{self, Summary};
use ddioscope::cli::{
    error_line, is_broken_pipe, print, usage_error_line, Cli, Cmd, RecommendArgs, ReportArgs,
    SimulateArgs, WindowArgs,
};
use ddioscope::model::spec::{self, Axes};
use ddioscope::recording::{self, record, Recording};
use ddioscope::report::{self, json::FullReport};
use ddioscope::surfaces::{doctor, serve, top};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            eprintln!("ddioscope: error: {}", usage_error_line(&e));
            return ExitCode::from(1);
        }
    };
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
            eprintln!(
                "imported {n} counter readings from {} into {}",
                csv.display(),
                rec.display()
            );
        }
        Cmd::Report(args) => report_cmd(args)?,
        Cmd::Recommend(args) => recommend(args)?,
        Cmd::Simulate(args) => simulate(args)?,
        Cmd::BenchFloor {
            iface,
            netns,
            duration,
            hooks,
        } => {
            ddioscope::probe::floor::run(&ddioscope::probe::floor::FloorOptions {
                iface,
                netns,
                duration,
                hooks,
            })?;
        }
        Cmd::Completions { shell } => print(&ddioscope::dist::completions(Cli::command(), shell))?,
        Cmd::Man { dir } => {
            let pages = ddioscope::dist::man_pages(Cli::command(), &dir)?;
            print(
                &pages
                    .iter()
                    .map(|p| format!("{}\n", p.display()))
                    .collect::<String>(),
            )?;
        }
        Cmd::Doctor { json } => {
            let d = doctor::run();
            print(&if json {
                serde_json::to_string_pretty(&d)? + "\n"
            } else {
                doctor::render_text(&d)
            })?;
            return Ok(if d.can_record {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
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
    let to_stdout = args
        .html
        .as_deref()
        .is_some_and(ddioscope::outfile::is_stdout);
    // Refuse before the (slower) model runs: the answer does not depend on it.
    if let Some(out) = args.html.as_deref().filter(|_| !to_stdout) {
        ddioscope::outfile::check(out, args.force)?;
    }
    let rec = open(&args.file, args.window)?;
    let summary: Summary = analysis::summary::build(&rec)?;
    // The model needs an LLC geometry; without one the report still prints, and says why.
    let outcome = analysis::advise_or_explain(&rec, &summary, args.geometry)?;
    if let Some(out) = args.html {
        let page = report::html::render_html(&rec, &summary, &outcome)?;
        if to_stdout {
            print(&page)?;
        } else {
            ddioscope::outfile::write_whole(&out, args.force, page.as_bytes())?;
            eprintln!("wrote {}", out.display());
        }
    } else if args.json {
        print(&(FullReport::new(&summary, &outcome).to_json()? + "\n"))?;
    } else {
        print(&report::text::render_report(
            &summary,
            &outcome,
            &report::text::TextOptions {
                top_flows: args.top,
                wide: args.wide,
            },
        ))?;
    }
    Ok(())
}

fn recommend(args: RecommendArgs) -> Result<()> {
    let rec = open(&args.file, args.window)?;
    let summary = analysis::summary::build(&rec)?;
    let a = analysis::advise(&rec, &summary, args.geometry)?;
    print(&if args.json {
        report::json::advice_json(&summary, &a)? + "\n"
    } else {
        report::text::render_advice(&summary, &a)
    })
}

/// The recorded run's (ring, ways) points, each in range and all within the command's cost
/// bound, before any is simulated.
fn check_recorded_grid(
    run: &ddioscope::advise::ModelRun,
    rings: &[u32],
    ways: &[u32],
) -> Result<(), spec::SpecError> {
    let opt = |v: &[u32]| {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().map(|x| Some(*x)).collect()
        }
    };
    let mut specs = Vec::new();
    for r in opt(rings) {
        for w in opt(ways) {
            let llc_ways = run.spec().map_or(0, |s| s.geometry.ways);
            if let Some(w) = w.filter(|w| *w > llc_ways) {
                return Err(spec::SpecError::Value(
                    "ddio_ways".into(),
                    format!("{w} (at most the LLC's {llc_ways} ways)"),
                ));
            }
            let s = run.point_spec(r, w).ok_or_else(|| {
                spec::SpecError::Value(
                    "ring".into(),
                    format!("{} (no spec at this point)", r.unwrap_or(0)),
                )
            })?;
            s.validate()?;
            specs.push(s);
        }
    }
    spec::check_cost(&specs)
}

fn simulate(args: SimulateArgs) -> Result<()> {
    if args.bench {
        // Other work on the host only ever slows a pass, so the best pass is the simulator's
        // speed and the median shows how busy the host was.
        // Both benches return at least one pass.
        let spread = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            let at = |i: usize| v.get(i).copied().unwrap_or(0.0) / 1e6;
            (
                v.len(),
                at(v.len().saturating_sub(1)),
                at(v.len() / 2),
                at(0),
            )
        };
        let (n, best, median, slowest) = spread(ddioscope::model::sim::bench_lines_per_sec(7));
        let run_passes = ddioscope::model::drive::bench_run_lines_per_sec(7)
            .context("the whole-run benchmark's spec")?;
        let (runs, run_best, run_median, run_slowest) = spread(run_passes);
        return print(&format!(
            "simulator: {best:.1} M cache-line accesses/s on one core, the best of {n} passes of 20 M (median {median:.1}, slowest {slowest:.1}; target >= 100 M/s)\n\
             whole synthetic runs: {run_best:.1} M/s, the best of {runs} (median {run_median:.1}, slowest {run_slowest:.1}): {}\n",
            ddioscope::model::drive::BENCH_RUN_SPEC
        ));
    }
    let mut head = String::new();
    let axes = Axes {
        rings: &args.ring,
        ways: &args.ways,
        queues: &args.queues,
        pkt_bytes: &args.pkt_bytes,
    };
    let grid = match &args.recording {
        Some(path) => {
            let rec = Recording::open(path)?;
            let obs = analysis::observation(&rec, &analysis::summary::build(&rec)?, args.geometry)?;
            let run = ddioscope::advise::ModelRun::new(&obs);
            let spec = run
                .spec()
                .ok_or_else(|| anyhow!("{} has no RX traffic to simulate", path.display()))?;
            if args.queues.is_empty() && args.pkt_bytes.is_empty() {
                check_recorded_grid(&run, &args.ring, &args.ways).map_err(|e| anyhow!("{e}"))?;
                // The recording's own computation: its points are the report's and recommend's.
                head = report::text::render_model_inputs(&run.inputs(), run.calibration.as_ref());
                run.grid(&args.ring, &args.ways)
            } else {
                spec::try_what_if(spec, &axes, &mut |_, _| {}).map_err(|e| anyhow!("{e}"))?
            }
        }
        None => {
            let text = args.synthetic.as_deref().unwrap_or_default();
            // The geometry flags are spec keys given apart: the spec's own checks cover them.
            let g = args.geometry;
            let flags: Vec<(&str, f64)> = [
                ("llc_mib", g.llc_mib),
                ("ways", g.llc_ways.map(f64::from)),
                ("ddio_ways", g.ddio_ways.map(f64::from)),
            ]
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect();
            let spec =
                spec::SimSpec::parse_with(text, &flags).map_err(|e| anyhow!("--synthetic: {e}"))?;
            let mut given = spec::SimSpec::given_inputs(text);
            given.extend(flags.iter().map(|(k, _)| match *k {
                "ddio_ways" => "ddio_ways".to_string(),
                _ => "llc".to_string(),
            }));
            head = report::text::render_spec_inputs(&spec, &given);
            spec::try_what_if(&spec, &axes, &mut |_, _| {}).map_err(|e| anyhow!("{e}"))?
        }
    };
    print(&if args.json {
        serde_json::to_string_pretty(&grid)? + "\n"
    } else {
        head + &report::text::render_what_if(&grid)
    })
}
