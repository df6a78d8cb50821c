//! What `report`, `recommend`, `simulate` and `diff` do once their flags are parsed: open
//! the recordings, run the analysis, and hand the result to a renderer or a writer. `main`
//! only parses and dispatches.
use std::path::Path;

use anyhow::{anyhow, Context, Result};

use crate::analysis::{self, Summary};
use crate::cli::{print, DiffArgs, RecommendArgs, ReportArgs, SimulateArgs, WindowArgs};
use crate::export;
use crate::model::spec::{self, Axes};
use crate::recording::Recording;
use crate::report::{self, json::FullReport};

/// A recording (one file, or several read as one, patterns expanded), read over the
/// `--from`/`--to` window. Several files are named on stderr, with the gaps between them.
fn open(files: &[std::path::PathBuf], w: WindowArgs) -> Result<Recording> {
    let files = crate::recording::reader::expand_patterns(files)?;
    let mut rec = Recording::open_many(&files)?;
    rec.set_window(w.from, w.to)?;
    if let Some(note) = parts_note(&rec) {
        eprintln!("ddioscope: note: {note}");
    }
    Ok(rec)
}

/// "N files read as one, FIRST to LAST", and each gap between two files.
fn parts_note(rec: &Recording) -> Option<String> {
    let (first, last) = (rec.parts.first()?, rec.parts.last()?);
    let interval_ns = rec.meta.interval_ms.unwrap_or(100) * 1_000_000;
    let gaps: Vec<String> = crate::recording::reader::gaps(&rec.parts, interval_ns)
        .iter()
        .map(|(k, s)| {
            format!(
                "a gap of {s:.1} s before {} (no intervals there)",
                rec.parts[*k].path.display()
            )
        })
        .collect();
    Some(format!(
        "{} files read as one recording, {} to {}{}{}",
        rec.parts.len(),
        first.path.display(),
        last.path.display(),
        if gaps.is_empty() { "" } else { "; " },
        gaps.join("; ")
    ))
}

/// Where a whole-text output goes: stdout for none or `-`, else the file, refused before
/// any work when it may not be written.
fn output_target(out: Option<&Path>, force: bool) -> Result<Option<&Path>> {
    match out.filter(|p| !crate::outfile::is_stdout(p)) {
        Some(p) => {
            crate::outfile::check(p, force)?;
            Ok(Some(p))
        }
        None => Ok(None),
    }
}

fn emit(target: Option<&Path>, force: bool, text: &str) -> Result<()> {
    match target {
        None => print(text),
        Some(p) => {
            crate::outfile::write_whole(p, force, text.as_bytes())?;
            eprintln!("wrote {}", p.display());
            Ok(())
        }
    }
}

pub fn report_cmd(args: ReportArgs) -> Result<()> {
    use crate::analysis::filter::{self, Filter};
    let filter = Filter::from(&args.filter);
    let every_ns = args.every.map(|s| (s * 1e9) as u64);
    if args.intervals {
        let rec = open(&args.file, args.window)?;
        if filter.flow.is_some() {
            eprintln!(
                "ddioscope: note: interval rows count whole queues: --flow selects none of them"
            );
        }
        if let Some(n) = export::counter_note(&rec) {
            eprintln!("ddioscope: note: {n}");
        }
        let out = std::io::BufWriter::new(std::io::stdout().lock());
        export::write_intervals(&rec, &filter, every_ns, args.sep, out)?;
        return Ok(());
    }
    if args.every.is_some() && args.csv.is_none() {
        anyhow::bail!("--every sums intervals for --intervals, --csv or diff; give one of them");
    }
    // Refuse before the (slower) model runs: the answer does not depend on it.
    let html = output_target(args.html.as_deref(), args.force)?;
    let json = output_target(args.json.as_deref(), args.force)?;
    let rec = open(&args.file, args.window)?;
    let mut summary: Summary = analysis::summary::build(&rec)?;
    // The model needs an LLC geometry; without one the report still prints, and says why.
    let mut outcome = analysis::advise_or_explain(&rec, &summary, args.geometry)?;
    // The model and the attribution saw every queue; the filter hides rows after them.
    filter::apply(&filter, &mut summary, Some(&mut outcome));
    if let Some(dir) = args.csv {
        let files = export::write_csv_dir(
            &rec, &summary, &outcome, &filter, every_ns, &dir, args.force,
        )?;
        if let Some(ex) = &summary.filter {
            eprintln!("{}", ex.line());
        }
        eprintln!("wrote {} files into {}", files.len(), dir.display());
        Ok(())
    } else if args.html.is_some() {
        let charts = analysis::charts(&rec, &summary, &outcome)?;
        emit(
            html,
            args.force,
            &report::html::render_html(&summary, &outcome, &charts),
        )
    } else if args.json.is_some() {
        emit(
            json,
            args.force,
            &(FullReport::new(&summary, &outcome).to_json()? + "\n"),
        )
    } else {
        print(&report::text::render_report(
            &summary,
            &outcome,
            &report::text::TextOptions {
                top_flows: args.top,
                wide: args.wide,
                width: crate::cli::text_width(),
            },
        ))
    }
}

pub fn recommend(args: RecommendArgs) -> Result<()> {
    let json = output_target(args.json.as_deref(), args.force)?;
    let rec = open(&args.file, args.window)?;
    let summary = analysis::summary::build(&rec)?;
    let a = analysis::advise(&rec, &summary, args.geometry)?;
    if args.json.is_some() {
        emit(
            json,
            args.force,
            &(report::json::advice_json(&summary, &a)? + "\n"),
        )
    } else {
        print(&report::text::render_advice(
            &summary,
            &a,
            crate::cli::text_width(),
        ))
    }
}

/// The recorded run's (ring, ways) points, each in range and all within the command's cost
/// bound, before any is simulated.
fn check_recorded_grid(
    run: &crate::advise::ModelRun,
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

pub fn simulate(args: SimulateArgs) -> Result<()> {
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
        let (n, best, median, slowest) = spread(crate::model::sim::bench_lines_per_sec(7));
        let run_passes = crate::model::drive::bench_run_lines_per_sec(7)
            .context("the whole-run benchmark's spec")?;
        let (runs, run_best, run_median, run_slowest) = spread(run_passes);
        return print(&format!(
            "simulator: {best:.1} M cache-line accesses/s on one core, the best of {n} passes of 20 M (median {median:.1}, slowest {slowest:.1}; target >= 100 M/s)\n\
             whole synthetic runs: {run_best:.1} M/s, the best of {runs} (median {run_median:.1}, slowest {run_slowest:.1}): {}\n",
            crate::model::drive::BENCH_RUN_SPEC
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
            let run = crate::advise::ModelRun::new(&obs);
            let spec = run
                .spec()
                .ok_or_else(|| anyhow!("{} has no RX traffic to simulate", path.display()))?;
            if args.queues.is_empty() && args.pkt_bytes.is_empty() {
                check_recorded_grid(&run, &args.ring, &args.ways).map_err(|e| anyhow!("{e}"))?;
                // The recording's own computation: its points are the report's and recommend's.
                head = report::text::render_model_inputs(
                    &run.inputs(),
                    run.calibration.as_ref(),
                    crate::cli::text_width(),
                );
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
        head + &report::text::render_what_if(&grid, crate::cli::text_width())
    })
}

pub fn diff_cmd(args: DiffArgs) -> Result<()> {
    use crate::analysis::diff;
    use crate::analysis::filter::Filter;
    let to_stdout = args.html.as_deref().is_some_and(crate::outfile::is_stdout);
    if let Some(out) = args.html.as_deref().filter(|_| !to_stdout) {
        crate::outfile::check(out, args.force)?;
    }
    let filter = Filter::from(&args.filter);
    let before = Recording::open(&args.before)?;
    let after = Recording::open(&args.after)?;
    let sb = analysis::summary::build(&before)?;
    let sa = analysis::summary::build(&after)?;
    let every_ns = (args.every * 1e9) as u64;
    let mut d = diff::diff(&before, &after, &sb, &sa, &filter, every_ns, args.geometry)?;
    let ob = analysis::advise_or_explain(&before, &sb, args.geometry)?;
    let oa = analysis::advise_or_explain(&after, &sa, args.geometry)?;
    diff::predictions(
        &mut d,
        &after,
        &sb,
        &sa,
        diff::Models {
            before: &ob,
            after: &oa,
        },
        args.geometry,
    )?;
    if let Some(out) = args.html {
        let page = report::diff::render_html(&d);
        if to_stdout {
            print(&page)?;
        } else {
            crate::outfile::write_whole(&out, args.force, page.as_bytes())?;
            eprintln!("wrote {}", out.display());
        }
    } else if args.json {
        print(&(report::diff::to_json(&d)? + "\n"))?;
    } else {
        print(&report::diff::render_text(&d))?;
    }
    Ok(())
}
