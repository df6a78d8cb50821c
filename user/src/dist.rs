//! Shell completions and man pages generated from the command line's clap
//! definitions (`cli`), so that flags are defined once (`ddioscope completions SHELL`,
//! `ddioscope man DIR`; `make install` and the Debian package call them).
use std::path::Path;

use anyhow::{Context, Result};
use clap::Command;

pub use clap_complete::Shell;

/// The completion script for `shell`, without the hidden commands (the shells'
/// generators would offer them).
pub fn completions(cmd: Command, shell: Shell) -> String {
    let name = cmd.get_name().to_string();
    let visible: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut cmd = Command::new(name.clone())
        .args(cmd.get_arguments().cloned())
        .subcommands(visible);
    let mut out = Vec::new();
    // Into memory: clap_complete panics on a write error (a closed pipe); `cli::print`
    // is quiet on one.
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The man pages' sections clap does not describe, one row per page (`""`: the top page):
/// EXAMPLES (command, what it does), EXIT STATUS beyond the common one, FILES (path, role).
struct PageText {
    page: &'static str,
    examples: &'static [(&'static str, &'static str)],
    exit: &'static [(&'static str, &'static str)],
    files: &'static [(&'static str, &'static str)],
}

const RECORDING: (&str, &str) = (
    "ddioscope.ddio",
    "the recording record writes and the other commands read when given no FILE (SQLite)",
);
const MODEL_CACHE: (&str, &str) = (
    "$XDG_CACHE_HOME/ddioscope/model/",
    "simulated model points kept between runs (~/.cache/ddioscope/model/ without XDG_CACHE_HOME)",
);

const PAGES: &[PageText] = &[
    PageText {
        page: "",
        examples: &[
            ("sudo ddioscope doctor", "what this host offers, and what each missing piece costs"),
            ("sudo ddioscope record -i eth1 -d 60s", "one minute of eth1 into ddioscope.ddio"),
            ("ddioscope report", "the answer, the verdicts, then the evidence"),
        ],
        exit: &[("2", "no command given: the usage is printed")],
        files: &[RECORDING, MODEL_CACHE],
    },
    PageText {
        page: "record",
        examples: &[
            ("sudo ddioscope record -i eth1 -d 60s", "one minute of eth1 into ddioscope.ddio"),
            ("sudo ddioscope record -i ddrcv --netns ns1 -d 1h30m -o run.ddio", "an interface inside a named network namespace"),
            ("sudo ddioscope record -i eth1 --detail full -d 10s", "every detail hook for a short deep dive"),
        ],
        exit: &[],
        files: &[RECORDING],
    },
    PageText {
        page: "report",
        examples: &[
            ("ddioscope report run.ddio --from 20 --to 40s", "a part of it, in seconds from the start"),
            ("ddioscope report run.ddio --from 14:05 --to 14:10", "a part of it, in wall-clock time"),
            ("ddioscope report run.ddio --html run.html", "one self-contained page (--html - for stdout)"),
            ("ddioscope report --json | jq .answer", "for tools: a documented, versioned schema"),
        ],
        exit: &[],
        files: &[RECORDING, MODEL_CACHE],
    },
    PageText {
        page: "diff",
        examples: &[
            ("ddioscope diff before.ddio after.ddio", "what changed, and whether the predicted effect came true"),
            ("ddioscope diff before.ddio after.ddio --queue rx0 --json", "one queue, for tools (docs/diff.schema.json)"),
        ],
        exit: &[],
        files: &[RECORDING, MODEL_CACHE],
    },
    PageText {
        page: "recommend",
        examples: &[
            ("ddioscope recommend run.ddio", "the commands to run, with evidence and predicted effect"),
            ("ddioscope recommend run.ddio --llc-mib 24.75 --llc-ways 11 --ddio-ways 2", "for another LLC than the recording host's"),
        ],
        exit: &[],
        files: &[RECORDING, MODEL_CACHE],
    },
    PageText {
        page: "simulate",
        examples: &[
            ("ddioscope simulate run.ddio --ring 256,512,1024,2048", "the model's hit rate at other ring sizes"),
            ("ddioscope simulate --synthetic preset=skx6140,queues=4,ring=1024,pkt_bytes=1500 --ways 2,4", "a synthetic workload"),
        ],
        exit: &[],
        files: &[RECORDING, MODEL_CACHE],
    },
    PageText {
        page: "top",
        examples: &[
            ("sudo ddioscope top -i eth1", "the live per-queue view; q, Esc or Ctrl-C quits"),
            ("sudo ddioscope top -i eth1 --duration 30s | tee top.log", "plain lines for 30 seconds"),
        ],
        exit: &[],
        files: &[],
    },
    PageText {
        page: "serve",
        examples: &[
            ("sudo ddioscope serve -i eth1", "OpenMetrics on 127.0.0.1:9436/metrics"),
            ("sudo ddioscope serve -i eth1 --duration 1h", "serve for an hour, then detach and exit"),
        ],
        exit: &[],
        files: &[
            ("/lib/systemd/system/ddioscope-serve@.service", "the unit for serve: systemctl enable --now ddioscope-serve@eth1"),
            ("/usr/share/ddioscope/prometheus-rules.yml", "alert rules for the metrics"),
            ("/usr/share/ddioscope/grafana-dashboard.json", "a dashboard for them"),
        ],
    },
    PageText {
        page: "import-counters",
        examples: &[("ddioscope import-counters run.ddio perf.csv", "a perf stat -I 100 -x, CSV captured beside the recording")],
        exit: &[],
        files: &[RECORDING],
    },
    PageText {
        page: "doctor",
        examples: &[("sudo ddioscope doctor --json", "the checks for tools")],
        exit: &[("1", "also when this host cannot record (the checks say why)")],
        files: &[("/sys/devices/system/cpu/cpu0/cache", "the LLC's size and ways"), ("/dev/cpu/0/msr", "the DDIO ways (MSR 0xC8B), read only")],
    },
];

/// Text for roff: backslashes and hyphens escaped, a leading control character guarded.
fn roff(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// The EXAMPLES, EXIT STATUS, FILES and SEE ALSO sections of `page` ("" for the top page),
/// with `others` the visible commands' names.
fn extra_sections(page: &str, others: &[String]) -> String {
    let Some(t) = PAGES.iter().find(|p| p.page == page) else {
        return String::new();
    };
    let mut out = String::new();
    let item = |out: &mut String, head: &str, body: &str| {
        out.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(head), roff(body)));
    };
    out.push_str(".SH EXAMPLES\n");
    for (cmd, what) in t.examples {
        item(&mut out, cmd, what);
    }
    out.push_str(".SH \"EXIT STATUS\"\n");
    item(&mut out, "0", "success");
    item(&mut out, "1", "an error: bad input (one line on stderr naming the problem and the fix), or a failure; nothing is left attached");
    for (code, what) in t.exit {
        item(&mut out, code, what);
    }
    if !t.files.is_empty() {
        out.push_str(".SH FILES\n");
        for (path, what) in t.files {
            item(&mut out, path, what);
        }
    }
    let mut see: Vec<String> = if page.is_empty() {
        others
            .iter()
            .map(|c| format!("\\fBddioscope\\-{}\\fR(1)", roff(c)))
            .collect()
    } else {
        std::iter::once("\\fBddioscope\\fR(1)".to_string())
            .chain(
                others
                    .iter()
                    .filter(|c| c.as_str() != page)
                    .map(|c| format!("\\fBddioscope\\-{}\\fR(1)", roff(c))),
            )
            .collect()
    };
    see.extend(
        [
            "\\fBethtool\\fR(8)",
            "\\fBperf\\-stat\\fR(1)",
            "\\fBbpftool\\fR(8)",
        ]
        .map(String::from),
    );
    out.push_str(&format!(".SH \"SEE ALSO\"\n{}\n", see.join(", ")));
    out
}

/// One man page per visible command: `ddioscope.1`, `ddioscope-record.1`, …, each with the
/// sections of [`PAGES`] before its VERSION. Returns the pages now in `dir`.
pub fn man_pages(cmd: Command, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let visible: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let names: Vec<String> = visible.iter().map(|c| c.get_name().to_string()).collect();
    for (page, c) in std::iter::once((String::new(), cmd.clone()))
        .chain(visible.into_iter().map(|c| (c.get_name().to_string(), c)))
    {
        let man = clap_mangen::Man::new(c);
        let mut roff_text = Vec::new();
        man.render(&mut roff_text).context("rendering a man page")?;
        let mut text = String::from_utf8_lossy(&roff_text).into_owned();
        let extra = extra_sections(&page, &names);
        match text.find(".SH VERSION") {
            Some(at) => text.insert_str(at, &extra),
            None => text.push_str(&extra),
        }
        let path = dir.join(man.get_filename());
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let mut pages: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "1"))
        .collect();
    pages.sort();
    Ok(pages)
}

/// Arguments of visible commands that `--help` would show without a description,
/// as `command --flag`.
pub fn undocumented_args(cmd: &Command) -> Vec<String> {
    let mut missing = Vec::new();
    walk(cmd, cmd.get_name(), &mut missing);
    missing
}

fn walk(cmd: &Command, path: &str, missing: &mut Vec<String>) {
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if a.get_help().is_none() && a.get_long_help().is_none() {
            let name = a
                .get_long()
                .map(|l| format!("--{l}"))
                .unwrap_or_else(|| a.get_id().to_string());
            missing.push(format!("{path} {name}"));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        walk(sub, &format!("{path} {}", sub.get_name()), missing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn sample() -> Command {
        Command::new("tool")
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue))
            .arg(
                Arg::new("quiet")
                    .long("quiet")
                    .help("Say less")
                    .action(ArgAction::SetTrue),
            )
            .subcommand(
                Command::new("sub")
                    .arg(Arg::new("file").help("Input"))
                    .arg(Arg::new("n").long("n")),
            )
            .subcommand(
                Command::new("secret")
                    .hide(true)
                    .arg(Arg::new("x").long("x")),
            )
    }

    #[test]
    fn finds_flags_without_help_but_not_in_hidden_commands() {
        assert_eq!(
            undocumented_args(&sample()),
            vec!["tool --json", "tool sub --n"]
        );
    }

    #[test]
    fn man_pages_cover_each_visible_command() {
        let dir = tempfile::tempdir().unwrap();
        let files = man_pages(sample(), dir.path()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.contains(&"tool.1".to_string()) && names.contains(&"tool-sub.1".to_string()),
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n.contains("secret")), "{names:?}");
        let page = std::fs::read_to_string(dir.path().join("tool.1")).unwrap();
        assert!(
            page.contains(".TH tool 1") && page.contains("Say less"),
            "{page}"
        );
    }

    /// Every page of ddioscope's own command line gets the sections clap does not write.
    #[test]
    fn every_page_has_examples_exit_status_files_and_see_also() {
        use clap::CommandFactory;
        let dir = tempfile::tempdir().unwrap();
        let files = man_pages(crate::cli::Cli::command(), dir.path()).unwrap();
        assert_eq!(files.len(), PAGES.len());
        for f in files {
            let page = std::fs::read_to_string(&f).unwrap();
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            for section in [".SH EXAMPLES", ".SH \"EXIT STATUS\"", ".SH \"SEE ALSO\""] {
                assert!(page.contains(section), "{name} lacks {section}");
            }
            let see = &page[page.find(".SH \"SEE ALSO\"").unwrap()..];
            assert!(see.contains("ddioscope"), "{name}: {see}");
            if let Some(version) = page.find(".SH VERSION") {
                assert!(
                    page.find(".SH EXAMPLES").is_some_and(|e| e < version),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn completions_name_the_subcommands_and_flags() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = completions(sample(), shell);
            assert!(
                text.contains("quiet") && text.contains("sub"),
                "{shell}: {text}"
            );
            assert!(!text.contains("secret"), "{shell}: {text}");
        }
    }
}
