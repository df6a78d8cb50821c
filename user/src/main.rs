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
    },
    /// What-if grid from the DDIO cache simulator (synthetic experiment descriptions).
    Simulate {
        /// Experiment, as JSON or key=value,... (e.g. "preset=skx6140,queues=1,ring=1024,pkt=1500,consumer=forward").
        #[arg(long, value_name = "SPEC", required_unless_present = "bench")]
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
    },
    /// Check what this host offers ddioscope and what each missing piece costs.
    Doctor {
        #[arg(long)]
        json: bool,
    },
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
        Cmd::Record { iface, netns, duration, output, force, interval, sample, json_progress, verbose, counters, counters_from } => {
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
                json_progress,
                verbose,
                counters,
                counters_from,
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
        Cmd::Report { file, json, top } => {
            let rec = recording::Recording::open(&file)?;
            let r = report::build(&rec);
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", report::render_text(&r, top));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Simulate { synthetic, ring, ways, queues, pkt_bytes, json, bench } => {
            if bench {
                let lps = ddioscope::model::sim::bench_lines_per_sec();
                println!("simulator: {:.1} M cache-line accesses/s on one core (target >= 50 M/s)", lps / 1e6);
                return Ok(ExitCode::SUCCESS);
            }
            let spec_text = synthetic.unwrap_or_default();
            let spec = ddioscope::model::spec::SimSpec::parse(&spec_text)
                .map_err(|e| anyhow::anyhow!("--synthetic: {e}"))?;
            let grid = ddioscope::model::spec::what_if(&spec, &ring, &ways, &queues, &pkt_bytes);
            if json {
                println!("{}", serde_json::to_string_pretty(&grid)?);
            } else {
                eprintln!("model-only: simulated from the description, not measured");
                for p in &grid {
                    println!("{}", serde_json::to_string(p)?);
                }
            }
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
