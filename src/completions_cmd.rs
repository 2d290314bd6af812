//! `floodgate completions SHELL`: the shell completion script on stdout (clap_complete).

use std::io::Write;

use anyhow::Context;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

const EXAMPLES: &str = "\
Examples:
  floodgate completions bash > /etc/bash_completion.d/floodgate
  floodgate completions zsh > \"${fpath[1]}/_floodgate\"
  floodgate completions fish > ~/.config/fish/completions/floodgate.fish";

/// Arguments of `floodgate completions`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// Print the completion script of `shell` for the whole command line.
pub fn run(args: &CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = crate::Cli::command();
    // written whole, so a closed stdout is an error rather than clap_complete's panic
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "floodgate", &mut script);
    std::io::stdout()
        .write_all(&script)
        .context("writing the completion script to stdout")
}
