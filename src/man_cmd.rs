//! `floodgate man DIR` (hidden): the man pages, generated from the clap definitions with
//! clap_mangen: `floodgate.1` and one `floodgate-SUBCOMMAND.1` per subcommand, each with
//! its examples and the exit statuses.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory};

use crate::exit::EXIT_STATUS;

/// Arguments of `floodgate man`.
#[derive(Args, Debug)]
#[command(
    after_help = "Example:\n  floodgate man target/man   # writes target/man/floodgate.1, floodgate-proxy.1, ..."
)]
pub struct ManArgs {
    /// The directory the pages are written to (created if missing).
    dir: PathBuf,
}

/// Write every page into `args.dir` and print their paths.
pub fn run(args: &ManArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("{}: cannot create the directory", args.dir.display()))?;
    let mut root = crate::Cli::command().disable_help_subcommand(true);
    root.build();
    let version = root.get_version().unwrap_or_default().to_string();
    for page in pages(&root) {
        let path = write_page(&args.dir, page, &version)?;
        println!("{}", path.display());
    }
    Ok(())
}

/// The root command and its visible subcommands, named `floodgate` and
/// `floodgate-SUBCOMMAND` as the pages are.
fn pages(root: &clap::Command) -> Vec<clap::Command> {
    let mut out = vec![root.clone()];
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("floodgate-{}", sub.get_name());
        out.push(
            sub.clone()
                .display_name(name.clone())
                .bin_name(name.replace('-', " ")),
        );
    }
    out
}

fn write_page(dir: &Path, cmd: clap::Command, version: &str) -> Result<PathBuf> {
    let after = cmd
        .get_after_help()
        .map(|h| h.to_string().replace(EXIT_STATUS, ""))
        .unwrap_or_default();
    let (notes, examples) = split_examples(&after);
    let man = clap_mangen::Man::new(cmd)
        .source(format!("floodgate {version}"))
        .manual("floodgate manual");
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    if man_has_subcommands(&path) {
        man.render_subcommands_section(&mut page)?;
    }
    if !notes.trim().is_empty() {
        section(&mut page, "NOTES", notes)?;
    }
    if !examples.trim().is_empty() {
        section(&mut page, "EXAMPLES", examples)?;
    }
    section(&mut page, "EXIT STATUS", EXIT_STATUS)?;
    section(&mut page, "VERSION", &format!("floodgate {version}"))?;
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&page))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Only the root page lists subcommands.
fn man_has_subcommands(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "floodgate.1")
}

/// A command's after-help text as (notes, examples): what comes before and after its
/// `Examples:` (or `Example:`) line.
fn split_examples(text: &str) -> (&str, &str) {
    for heading in ["Examples:\n", "Example:\n"] {
        if let Some(at) = text.find(heading) {
            return (&text[..at], &text[at + heading.len()..]);
        }
    }
    (text, "")
}

/// A section of preformatted text; roff's control characters at line starts,
/// backslashes and hyphens escaped.
fn section(w: &mut Vec<u8>, title: &str, text: &str) -> std::io::Result<()> {
    writeln!(w, ".SH \"{title}\"")?;
    writeln!(w, ".nf")?;
    let text = text.trim_matches('\n');
    let text = text.strip_prefix("Exit status:\n").unwrap_or(text);
    for line in text.lines() {
        let line = line.replace('\\', "\\e").replace('-', "\\-");
        if line.starts_with('.') || line.starts_with('\'') {
            writeln!(w, "\\&{line}")?;
        } else {
            writeln!(w, "{line}")?;
        }
    }
    writeln!(w, ".fi")
}
