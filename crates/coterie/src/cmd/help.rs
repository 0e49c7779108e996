//! `coterie --help` by what the subcommands are for, and the shell
//! completions and manual page clap can make of the same definitions.
//!
//! clap lists subcommands in one flat list; [`grouped`] writes the top
//! level's help from [`GROUPS`] instead, each line from the subcommand's
//! own one-line help, so the two cannot drift: a test checks that every
//! subcommand is in exactly one group.

use anyhow::Result;
use clap_complete::Shell;
use std::process::ExitCode;

/// The subcommands, by what they are for, in the order `--help` lists them.
pub const GROUPS: &[(&str, &[&str])] = &[
    ("Run a cluster", &["demo", "init", "certs", "up", "node", "status", "watch", "dashboard"]),
    ("Take locks and lead", &["lock", "locks", "revoke", "elect", "leader"]),
    ("Break it and measure", &["workload", "fault", "run", "nemesis", "bench"]),
    ("Check the algorithms", &["sim", "check", "history", "witness"]),
    ("Set up a shell", &["completions", "man"]),
];

/// `cmd` with its top-level help listing the subcommands by [`GROUPS`].
pub fn grouped(cmd: clap::Command) -> clap::Command {
    let width = GROUPS.iter().flat_map(|(_, names)| names.iter()).map(|n| n.len()).max();
    let width = width.unwrap_or(0) + 2;
    let mut groups = String::new();
    for (heading, names) in GROUPS {
        groups += &format!("{heading}:\n");
        for name in *names {
            let about = cmd
                .find_subcommand(name)
                .and_then(|sub| sub.get_about())
                .map(|about| about.to_string())
                .unwrap_or_default();
            groups += &format!("  {name:<width$}{about}\n");
        }
        groups += "\n";
    }
    let template = format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{groups}\
         Options:\n{{options}}{{after-help}}"
    );
    cmd.help_template(template)
}

/// Shell completions.
#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// Prints the completions for a shell: `coterie completions bash >
/// ~/.local/share/bash-completion/completions/coterie`.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> Result<ExitCode> {
    let mut text = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "coterie", &mut text);
    print(&text)
}

/// Writes `text` on stdout; a reader that stopped early (`| head`) is no
/// error.
fn print(text: &[u8]) -> Result<ExitCode> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The manual pages.
#[derive(clap::Args)]
pub struct ManArgs {
    /// Write coterie.1 and a page per subcommand (coterie-lock.1, ...)
    /// into this directory, instead of coterie.1 on stdout.
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
}

/// Prints `coterie.1`, or writes every page into a directory.
pub fn man(args: ManArgs, cmd: clap::Command) -> Result<ExitCode> {
    match args.dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            print(&page)
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            clap_mangen::generate_to(cmd, &dir)?;
            eprintln!("coterie man: pages written to {}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_is_in_one_group() {
        let cmd = crate::definition();
        let listed: Vec<&str> =
            GROUPS.iter().flat_map(|(_, names)| names.iter().copied()).collect();
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let times = listed.iter().filter(|n| **n == sub.get_name()).count();
            assert_eq!(times, 1, "{} is in {times} groups of `coterie --help`", sub.get_name());
        }
        for name in listed {
            assert!(cmd.find_subcommand(name).is_some(), "no subcommand {name}");
        }
        let help = grouped(cmd).render_help().to_string();
        assert!(help.contains("Take locks and lead:\n  lock"), "{help}");
    }
}
