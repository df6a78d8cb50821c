//! The command line: every subcommand and its flags, each flag defined once. The flags of
//! a command that a lower module runs live with it (`RecordArgs`, `TopArgs`, `ServeArgs`,
//! `SessionArgs`, `GeometryOverrides`), and are handed to it whole. The man pages and
//! shell completions are generated from these definitions (`dist`).
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::analysis::filter::FilterArgs;
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
    /// Compare two recordings of one device: what changed in configuration and traffic, the
    /// measured deltas with 95 % intervals, and BEFORE's predictions beside what AFTER shows.
    Diff(DiffArgs),
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
        /// Also check this interface: its ring size, RSS table, IRQs, per-queue counters and
        /// page pools, and which hooks a recording of it puts on the device and on the host
        /// (with --bundle: the interface the bundle records and asks ethtool about).
        #[arg(short, long, value_name = "IFACE")]
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
#[command(group(clap::ArgGroup::new("files").args(["html", "csv"]).multiple(false)))]
pub struct ReportArgs {
    /// Recording file(s) written by `ddioscope record`. Several files of one interface and
    /// host (the files of `record --rotate`) are read as one recording in time order, the
    /// time between them a gap; a quoted pattern ('run-*.ddio') is expanded here.
    #[arg(default_value = DEFAULT_RECORDING, num_args = 1..)]
    pub file: Vec<PathBuf>,
    /// One JSON object instead of text (its schema: docs/report.md), on stdout, or with
    /// `--json=OUT` written to the file OUT (`--json=-`: stdout).
    #[arg(long, value_name = "OUT", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// How many flows the text report lists.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Text tables with every stage's latencies in the queue rows (wider than the terminal).
    #[arg(long, conflicts_with_all = ["json", "html"])]
    pub wide: bool,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Write a self-contained HTML report (inline SVG charts, no network) to this file, or
    /// to stdout for `-`.
    #[arg(long, value_name = "OUT", conflicts_with = "json")]
    pub html: Option<PathBuf>,
    /// Replace the --html or --json file, or --csv's files, if they exist (a regular file
    /// only: never a device, FIFO, socket or symlink).
    #[arg(long)]
    pub force: bool,
    /// One row per queue per interval (or per --every step): counts, rates, drops, NAPI,
    /// the buffer life's p50/p99 and the NIC socket's counter metrics, as `perf stat -I`.
    #[arg(long, conflicts_with_all = ["json", "html", "wide", "csv"])]
    pub intervals: bool,
    /// Sum the intervals into steps this long (1s, 500ms, 1m) for --intervals and --csv.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::duration_flag)]
    pub every: Option<f64>,
    /// --intervals as CSV with a header, fields separated by SEP (`-x ,`, as perf stat).
    #[arg(short = 'x', long = "field-separator", value_name = "SEP", requires = "intervals",
          value_parser = crate::export::separator)]
    pub sep: Option<u8>,
    /// Write one CSV per table (intervals, sockets, queues, stages, flows, drops, verdicts,
    /// recommendations) into DIR, created if missing; --force replaces files of those names.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["json", "html", "wide"])]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub geometry: GeometryOverrides,
}

/// `ddioscope diff`'s flags.
#[derive(clap::Args)]
pub struct DiffArgs {
    /// The recording before the change.
    pub before: PathBuf,
    /// The recording after it.
    pub after: PathBuf,
    /// One JSON object instead of text (its schema: docs/diff.schema.json).
    #[arg(long)]
    pub json: bool,
    /// Write a self-contained HTML page to this file, or to stdout for `-`.
    #[arg(long, value_name = "OUT", conflicts_with = "json")]
    pub html: Option<PathBuf>,
    /// Replace the --html file if it exists (a regular file only).
    #[arg(long, requires = "html")]
    pub force: bool,
    /// The step whose per-step values give each delta's interval (1s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = crate::units::duration_flag)]
    pub every: f64,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub geometry: GeometryOverrides,
}

/// `ddioscope recommend`'s flags.
#[derive(clap::Args)]
pub struct RecommendArgs {
    /// Recording file(s) written by `ddioscope record`; several (the files of `record
    /// --rotate`, or a quoted pattern) are read as one, as by `report`.
    #[arg(default_value = DEFAULT_RECORDING, num_args = 1..)]
    pub file: Vec<PathBuf>,
    /// One JSON object (the answer, the model, the attribution and the recommendations)
    /// instead of text, on stdout, or with `--json=OUT` written to the file OUT (`--json=-`:
    /// stdout).
    #[arg(long, value_name = "OUT", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Replace the --json file if it exists (a regular file only).
    #[arg(long)]
    pub force: bool,
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

/// The options `record -i IFACE [--netns NS]` runs with (every other flag at its default),
/// without the L3-miss sampler: `doctor -i` attaches what a recording would, to report it.
pub fn record_defaults(
    iface: &str,
    netns: Option<&str>,
) -> anyhow::Result<crate::session::SessionOptions> {
    let mut args = vec!["ddioscope", "record", "-i", iface];
    if let Some(ns) = netns {
        args.extend(["--netns", ns]);
    }
    match Cli::try_parse_from(args) {
        Ok(Cli {
            cmd: Cmd::Record(r),
        }) => {
            let mut opts = r.session_options();
            opts.miss = crate::session::MissArgs::off();
            Ok(opts)
        }
        Ok(_) => anyhow::bail!("record's options did not parse as record's"),
        Err(e) => anyhow::bail!("{}", usage_error_line(&e)),
    }
}

/// The columns text output is wrapped to: `COLUMNS` when it is a positive number, else the
/// width of the terminal on stdout, else `report::text::DEFAULT_WIDTH` (a pipe or a file).
pub fn text_width() -> usize {
    width_from(
        std::env::var("COLUMNS").ok().as_deref(),
        crate::sys::stdout_columns(),
    )
}

fn width_from(columns: Option<&str>, tty: Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
        .or(tty)
        .unwrap_or(crate::report::text::DEFAULT_WIDTH)
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

/// `clap::ValueEnum` for a lower layer's choice enum, here so that layer needs no clap: each
/// variant's flag spelling and help line. The match is exhaustive, so a new variant must be
/// named here before anything builds, and `value_variants` is the same list.
macro_rules! value_enum {
    ($ty:ty { $($variant:ident => $name:literal $(: $help:literal)?,)* }) => {
        impl clap::ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$(<$ty>::$variant),*]
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(match self {
                    $(<$ty>::$variant => clap::builder::PossibleValue::new($name)$(.help($help))?,)*
                })
            }
        }
    };
}

value_enum!(crate::probe::features::HookChoice {
    Auto => "auto",
    TpBtf => "tp-btf",
    RawTp => "raw-tp",
});

value_enum!(crate::probe::qcount::RxChoice {
    Auto => "auto",
    Tcx => "tcx",
    Handup => "handup",
});

value_enum!(crate::counters::CountersMode {
    Auto => "auto": "Uncore/core PMUs when the platform has them; otherwise none, quietly",
    Software => "software": "Software perf events through the same read path (hosts without a PMU; tests)",
    Off => "off": "No counters",
});

value_enum!(crate::probe::l3miss::MissSource {
    Auto => "auto": "PEBS L3-miss samples where the platform has them; otherwise none, quietly",
    Pebs => "pebs": "MEM_LOAD_RETIRED.L3_MISS with PEBS data addresses (Intel server cores)",
    SoftwareClock => "software-clock": "cpu-clock samples: no addresses, exercises the CPU-context path",
    SoftwareFaults => "software-faults": "page-fault samples: carry (user) data addresses, exercises the address path",
    SoftwareCopy => "software-copy": "cpu-clock samples that, inside a socket copy, take an address in the buffers being copied: exercises the address join on real packet-buffer addresses (linear data and frags)",
    Off => "off",
});

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
    fn text_width_is_columns_else_the_terminal_else_100() {
        assert_eq!(width_from(Some("80"), Some(132)), 80);
        assert_eq!(width_from(Some(" 72 "), None), 72);
        assert_eq!(width_from(Some("0"), Some(132)), 132);
        assert_eq!(width_from(Some("wide"), Some(132)), 132);
        assert_eq!(width_from(None, Some(132)), 132);
        assert_eq!(width_from(None, None), 100);
        assert_eq!(width_from(Some(""), None), 100);
    }

    #[test]
    fn json_output_takes_an_optional_file_and_dash_is_stdout() {
        let json = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.cmd) {
            Ok(Cmd::Report(a)) => a.json.map(|p| p.display().to_string()),
            Ok(Cmd::Recommend(a)) => a.json.map(|p| p.display().to_string()),
            Ok(_) => panic!("{args:?}"),
            Err(e) => Some(format!("error: {}", usage_error_line(&e))),
        };
        // The recording after a bare --json stays the recording.
        assert_eq!(
            json(&["ddioscope", "report", "--json", "r.ddio"]).as_deref(),
            Some("-")
        );
        assert_eq!(
            json(&["ddioscope", "report", "r.ddio", "--json=-"]).as_deref(),
            Some("-")
        );
        assert_eq!(
            json(&["ddioscope", "report", "r.ddio", "--json=o.json"]).as_deref(),
            Some("o.json")
        );
        assert_eq!(
            json(&["ddioscope", "recommend", "--json", "r.ddio"]).as_deref(),
            Some("-")
        );
        assert_eq!(
            json(&["ddioscope", "recommend", "r.ddio", "--json=a.json"]).as_deref(),
            Some("a.json")
        );
        assert_eq!(json(&["ddioscope", "report", "r.ddio"]), None);
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
