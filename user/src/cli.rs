//! The command line: every subcommand and its flags, each flag defined once. The flags of
//! a command that a lower module runs live with it (`RecordArgs`, `TopArgs`, `ServeArgs`,
//! `SessionArgs`, `GeometryOverrides`), and are handed to it whole. The man pages and
//! shell completions are generated from these definitions (`dist`).
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::analysis::GeometryOverrides;
use crate::model::spec;
use crate::recording::record::RecordArgs;
use crate::recording::window::TimeSpec;
use crate::surfaces::serve::ServeArgs;
use crate::surfaces::top::TopArgs;

#[derive(Parser)]
#[command(
    name = "ddioscope",
    version = crate::build_info::LONG_VERSION,
    about = "Per-queue and per-flow Intel DDIO observability: eBPF packet lifetimes joined with uncore counters",
    long_about = "ddioscope records what each NIC queue and flow does (eBPF, in the kernel) and what the cache \
does (uncore counters), and tells which queues lose DDIO's benefit and what to change.\n\n\
Typical use:\n  sudo ddioscope record -i eth1 -d 10 -o run.ddio\n  ddioscope report run.ddio"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Attach to an interface and write a recording (needs root).
    Record(RecordArgs),
    /// Live per-queue view in the terminal (plain lines when stdout is not a terminal); q, Esc or Ctrl-C quits.
    Top(TopArgs),
    /// Serve OpenMetrics/Prometheus metrics (/metrics, /healthz) from a live session.
    Serve(ServeArgs),
    /// Import a `perf stat -I MS -x, -e …` CSV into an existing recording.
    ImportCounters {
        /// Recording to add the counters to.
        rec: PathBuf,
        /// CSV written by `perf stat -I MS -x, …` (scripts/capture-counters.sh prints the command).
        csv: PathBuf,
    },
    /// Print the report of a recording.
    Report(ReportArgs),
    /// Recommend ring sizes, IIO LLC ways and IRQ/NUMA placement from a recording
    /// (printed commands with evidence and predicted effect; nothing is applied).
    Recommend(RecommendArgs),
    /// What-if grid from the DDIO cache simulator (synthetic experiment descriptions).
    Simulate(SimulateArgs),
    /// Check what this host offers ddioscope and what each missing piece costs.
    Doctor {
        /// The checks as one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Write a bug-report bundle (doctor's JSON, the PMU sysfs tree, CPU and cache
        /// topology, ethtool -i/-g/-l/-S, a 10-s recording and a perf stat capture) to
        /// FILE.tar.gz; needs -i. See docs/bundle.md.
        #[arg(long, value_name = "FILE.tar.gz", requires = "iface")]
        bundle: Option<PathBuf>,
        /// The interface the bundle records and asks ethtool about.
        #[arg(short, long, value_name = "IFACE", requires = "bundle")]
        iface: Option<String>,
        /// Named network namespace (from `ip netns list`) the interface lives in.
        #[arg(long, value_name = "NS", requires = "iface")]
        netns: Option<String>,
    },
    /// Print the shell completion script for SHELL on stdout (`make install` installs them).
    #[command(hide = true)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: crate::dist::Shell,
    },
    /// Write the man pages (one per command) into DIR (`make install` installs them).
    #[command(hide = true)]
    Man {
        /// Directory to write ddioscope.1, ddioscope-record.1, … into (created if missing).
        dir: PathBuf,
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
        /// Detach after this long: seconds, or with units (10s, 5m). Default: at Ctrl-C.
        #[arg(short, long, value_name = "DURATION", value_parser = crate::units::duration_flag)]
        duration: Option<f64>,
        /// Hook flavour, as for `record`: use the recorder's.
        #[arg(long, value_enum, default_value = "auto")]
        hooks: crate::probe::features::HookChoice,
    },
}

impl Cmd {
    /// Asked to print the feature table and attach details.
    pub fn verbose(&self) -> bool {
        match self {
            Cmd::Record(a) => a.session.verbose,
            Cmd::Top(a) => a.session.verbose,
            Cmd::Serve(a) => a.session.verbose,
            _ => false,
        }
    }
}

/// The part of a recording to read: `--from`/`--to`.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct WindowArgs {
    /// Start of the part to report: seconds from the recording's start (90, 5m) or a
    /// wall-clock time (14:05:30, 2026-11-24 14:05:30, RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub from: Option<TimeSpec>,
    /// End of the part to report, as --from.
    #[arg(long, value_name = "TIME")]
    pub to: Option<TimeSpec>,
}

/// The default recording, as `record` writes it (`perf report` reads perf.data the same way).
pub const DEFAULT_RECORDING: &str = "ddioscope.ddio";

/// `ddioscope report`'s flags.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Recording file written by `ddioscope record`.
    #[arg(default_value = DEFAULT_RECORDING)]
    pub file: PathBuf,
    /// One JSON object instead of text (its schema: docs/report.md).
    #[arg(long)]
    pub json: bool,
    /// How many flows the text report lists.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Text tables with every stage's latencies in the queue rows (wider than 120 columns).
    #[arg(long, conflicts_with_all = ["json", "html"])]
    pub wide: bool,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Write a self-contained HTML report (inline SVG charts, no network) to this file, or
    /// to stdout for `-`.
    #[arg(long, value_name = "OUT", conflicts_with = "json")]
    pub html: Option<PathBuf>,
    /// Replace the --html file if it exists (a regular file only: never a device, FIFO,
    /// socket or symlink).
    #[arg(long, requires = "html")]
    pub force: bool,
    #[command(flatten)]
    pub geometry: GeometryOverrides,
}

/// `ddioscope recommend`'s flags.
#[derive(clap::Args)]
pub struct RecommendArgs {
    /// Recording file written by `ddioscope record`.
    #[arg(default_value = DEFAULT_RECORDING)]
    pub file: PathBuf,
    /// One JSON object (the answer, the model, the attribution and the recommendations) instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub window: WindowArgs,
    #[command(flatten)]
    pub geometry: GeometryOverrides,
}

/// `ddioscope simulate`'s flags.
#[derive(clap::Args)]
pub struct SimulateArgs {
    /// Recording whose queues, rates, packet sizes and residence times drive the simulation.
    #[arg(conflicts_with = "synthetic")]
    pub recording: Option<PathBuf>,
    /// Experiment, as JSON or key=value,... (e.g. "preset=skx6140,queues=1,ring=1024,pkt_bytes=1500,consumer=forward").
    #[arg(long, value_name = "SPEC", required_unless_present_any = ["bench", "recording"])]
    pub synthetic: Option<String>,
    /// Ring sizes to try (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = spec::flag::ring)]
    pub ring: Vec<u32>,
    /// DDIO (IIO LLC) way counts to try.
    #[arg(long, value_delimiter = ',', value_parser = spec::flag::ddio_ways)]
    pub ways: Vec<u32>,
    /// Queue counts to try.
    #[arg(long, value_delimiter = ',', value_parser = spec::flag::queues)]
    pub queues: Vec<u32>,
    /// Packet sizes to try.
    #[arg(long, value_delimiter = ',', value_parser = spec::flag::pkt_bytes)]
    pub pkt_bytes: Vec<u32>,
    /// The grid as a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Measure simulator throughput (cache-line accesses per second, one core).
    #[arg(long)]
    pub bench: bool,
    #[command(flatten)]
    pub geometry: GeometryOverrides,
}

/// Write a command's output to stdout. A reader that went away shows as an error of kind
/// BrokenPipe (Rust ignores SIGPIPE), which `is_broken_pipe` recognises.
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// The error is stdout's reader having gone away (`ddioscope report R | head -1`).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A command-line error (an unknown flag, a value out of range) as one line, as every other
/// error is: clap's message and tip, without its usage block.
pub fn usage_error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let kept: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect();
    let line = kept
        .join(" ")
        .replace(" tip: ", "; tip: ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

/// An error as one line: the outermost context first, causes after it, and every run of
/// whitespace (a cause quoting SQL across lines, say) as one space.
pub fn error_line(e: &anyhow::Error) -> String {
    let chain: Vec<String> = e
        .chain()
        .map(|c| {
            c.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    chain.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line() {
        let sql = anyhow::anyhow!("malformed database schema (queue_intervals) - near \"(\": syntax error in\nCREATE TABLE queue_intervals (\n    interval INTEGER NOT NULL,\n\tdir TEXT)");
        let e = sql
            .context("run.ddio is damaged")
            .context("reading run.ddio");
        let line = error_line(&e);
        assert!(
            !line.contains('\n') && !line.contains('\t') && !line.contains("  "),
            "{line}"
        );
        assert_eq!(
            line,
            "reading run.ddio: run.ddio is damaged: malformed database schema (queue_intervals) - near \"(\": syntax error in \
             CREATE TABLE queue_intervals ( interval INTEGER NOT NULL, dir TEXT)"
        );
        assert_eq!(error_line(&anyhow::anyhow!("one line")), "one line");
    }

    #[test]
    fn command_line_errors_are_one_line() {
        let cases: [&[&str]; 4] = [
            &[
                "ddioscope",
                "simulate",
                "--synthetic",
                "queues=1",
                "--ring",
                "0",
            ],
            &["ddioscope", "report", "--llc-mib", "NaN"],
            &["ddioscope", "top"],
            &["ddioscope", "report", "--bogus"],
        ];
        for args in cases {
            let e = Cli::try_parse_from(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} parsed"));
            let line = usage_error_line(&e);
            assert!(
                !line.contains('\n') && !line.starts_with("error") && !line.contains("Usage"),
                "{line}"
            );
            println!("{args:?}: {line}");
        }
        let e = Cli::try_parse_from([
            "ddioscope",
            "simulate",
            "--synthetic",
            "queues=1",
            "--ring",
            "512,0",
        ])
        .err()
        .map(|e| usage_error_line(&e));
        assert_eq!(
            e.as_deref(),
            Some("invalid value '0' for '--ring <RING>': `ring` = 0 is out of range (1..=65536)")
        );
        let e = Cli::try_parse_from(["ddioscope", "top"])
            .err()
            .map(|e| usage_error_line(&e))
            .unwrap_or_default();
        assert!(e.contains("required") && e.contains("--iface"), "{e}");
    }

    #[test]
    fn broken_pipes_are_recognised_through_context() {
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("printing the report");
        assert!(is_broken_pipe(&pipe));
        let other = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert!(!is_broken_pipe(&other));
        assert!(!is_broken_pipe(&anyhow::anyhow!("Broken pipe")));
    }

    /// The command line is well formed (clap's own consistency checks), and `--help`
    /// describes every flag of every visible command.
    #[test]
    fn command_line_is_consistent_and_every_visible_flag_has_a_description() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        assert_eq!(crate::dist::undocumented_args(&cmd), Vec::<String>::new());
    }
}
