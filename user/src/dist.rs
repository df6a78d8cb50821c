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
    let visible: Vec<Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    let mut cmd = Command::new(name.clone()).args(cmd.get_arguments().cloned()).subcommands(visible);
    let mut out = Vec::new();
    // Into memory: clap_complete panics on a write error (a closed pipe); `cli::print`
    // is quiet on one.
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// One man page per visible command: `ddioscope.1`, `ddioscope-record.1`, …
/// Returns the pages now in `dir`.
pub fn man_pages(cmd: Command, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir).with_context(|| format!("writing man pages into {}", dir.display()))?;
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
            let name = a.get_long().map(|l| format!("--{l}")).unwrap_or_else(|| a.get_id().to_string());
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
            .arg(Arg::new("quiet").long("quiet").help("Say less").action(ArgAction::SetTrue))
            .subcommand(Command::new("sub").arg(Arg::new("file").help("Input")).arg(Arg::new("n").long("n")))
            .subcommand(Command::new("secret").hide(true).arg(Arg::new("x").long("x")))
    }

    #[test]
    fn finds_flags_without_help_but_not_in_hidden_commands() {
        assert_eq!(undocumented_args(&sample()), vec!["tool --json", "tool sub --n"]);
    }

    #[test]
    fn man_pages_cover_each_visible_command() {
        let dir = tempfile::tempdir().unwrap();
        let files = man_pages(sample(), dir.path()).unwrap();
        let names: Vec<String> = files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert!(names.contains(&"tool.1".to_string()) && names.contains(&"tool-sub.1".to_string()), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("secret")), "{names:?}");
        let page = std::fs::read_to_string(dir.path().join("tool.1")).unwrap();
        assert!(page.contains(".TH tool 1") && page.contains("Say less"), "{page}");
    }

    #[test]
    fn completions_name_the_subcommands_and_flags() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = completions(sample(), shell);
            assert!(text.contains("quiet") && text.contains("sub"), "{shell}: {text}");
            assert!(!text.contains("secret"), "{shell}: {text}");
        }
    }
}
