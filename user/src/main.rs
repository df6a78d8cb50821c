//! The ddioscope command line: parse, run the subcommand, print its output and errors.
use std::process::ExitCode;

use anyhow::Result;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use ddioscope::cli::{error_line, is_broken_pipe, print, usage_error_line, Cli, Cmd};
use ddioscope::commands::{diff_cmd, recommend, report_cmd, simulate};
use ddioscope::recording::{self, record};
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
        Cmd::Diff(args) => diff_cmd(args)?,
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
        Cmd::Doctor {
            json,
            bundle: Some(out),
            iface,
            netns,
        } => {
            let device = iface
                .as_deref()
                .map(|i| ddioscope::cli::record_defaults(i, netns.as_deref()))
                .transpose()?;
            let d = doctor::run(device.as_ref())?;
            let m = ddioscope::surfaces::bundle::make(&ddioscope::surfaces::bundle::BundleArgs {
                out: &out,
                iface: iface.as_deref().unwrap_or_default(),
                netns: netns.as_deref(),
                doctor_json: serde_json::to_string_pretty(&d)? + "\n",
            })?;
            let mut text = format!("wrote {}\n", out.display());
            for l in m.lines() {
                text.push_str(&format!("  {l}\n"));
            }
            print(&if json {
                serde_json::to_string_pretty(&m)? + "\n"
            } else {
                text
            })?;
        }
        Cmd::Doctor {
            json, iface, netns, ..
        } => {
            let device = iface
                .as_deref()
                .map(|i| ddioscope::cli::record_defaults(i, netns.as_deref()))
                .transpose()?;
            let d = doctor::run(device.as_ref())?;
            print(&if json {
                serde_json::to_string_pretty(&d)? + "\n"
            } else {
                doctor::render_text(&d, ddioscope::cli::text_width())
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
