//! Every command transcript of the book is what the command prints today.
//!
//! A transcript is a `console` block of a page of `docs/`: lines starting with
//! `$ floodgate ` or `$ cargo run --release -- ` are commands (a trailing `# comment` is
//! not part of the command), the lines after each are what it prints: the stdout of a
//! successful command (progress notes on stderr are not shown), the stderr of a failing
//! one. Each command runs as the `floodgate` binary this test was built with, in a fresh
//! directory holding the page's `file=NAME` blocks, and its output must be the
//! transcript's lines exactly, except in a block marked `numbers-vary`: there numbers and
//! the verdict words that depend on them (`held`, `NOT HELD`) are masked and runs of
//! spaces are one space, so a run on any machine at any hour matches (the demo's own
//! test, `tests/demo_cli.rs`, checks those verdicts). A block marked `redis` needs the
//! Redis on 127.0.0.1:6379; `redis-del=PATTERN` deletes the keys matching `PATTERN` there
//! first, so a transcript that shows a fresh key starts from one. A block with
//! `server=FILE` starts `floodgate server --config FILE` first (FILE being one of the
//! page's `file=` blocks), and its `$ redis-cli ...` commands are run too.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use floodgate_book::{Block, blocks};

mod common;
use common::Proc;

const PREFIXES: [&str; 2] = ["$ floodgate ", "$ cargo run --release -- "];

/// In a block with a `server=FILE` attribute, `redis-cli` talks to that server.
const REDIS_CLI: &str = "$ redis-cli ";

/// One command of a transcript and the lines it shows.
struct Step {
    /// The program: the `floodgate` binary under test, or `redis-cli`.
    program: &'static str,
    args: Vec<String>,
    shown: Vec<String>,
}

fn steps(b: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in b.body.lines() {
        let floodgate = PREFIXES.iter().find_map(|p| line.strip_prefix(p));
        let cli = line
            .strip_prefix(REDIS_CLI)
            .filter(|_| b.attr("server").is_some());
        if let Some((program, rest)) = floodgate
            .map(|r| (env!("CARGO_BIN_EXE_floodgate"), r))
            .or(cli.map(|r| ("redis-cli", r)))
        {
            let cmd = rest.split(" #").next().unwrap_or(rest);
            steps.push(Step {
                program,
                args: cmd.split_whitespace().map(str::to_string).collect(),
                shown: Vec::new(),
            });
        } else if line.starts_with("$ ") {
            panic!("{}: a transcript runs only floodgate: {line}", b.place());
        } else {
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("{}: output before any command", b.place()));
            step.shown.push(line.trim_end().to_string());
        }
    }
    steps
}

fn mask(line: &str) -> String {
    let line = line
        .replace("NOT HELD", "VERDICT")
        .replace("held", "VERDICT");
    let mut out = String::new();
    let mut prev_digit = false;
    let mut prev_space = false;
    for c in line.chars() {
        if c.is_ascii_digit() || (c == '.' && prev_digit) {
            if !prev_digit {
                out.push('#');
            }
            prev_digit = true;
            prev_space = false;
        } else if c == ' ' {
            if !prev_space {
                out.push(' ');
            }
            prev_space = true;
            prev_digit = false;
        } else {
            out.push(c);
            prev_digit = false;
            prev_space = false;
        }
    }
    out
}

fn run(dir: &Path, program: &str, args: &[String]) -> Vec<String> {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run floodgate");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{program} {args:?} ran over 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    // what a terminal shows of a successful run is its stdout (progress goes to stderr);
    // a failing command shows its error
    let stream = if out.status.success() {
        &out.stdout
    } else {
        &out.stderr
    };
    let mut lines: Vec<String> = String::from_utf8_lossy(stream)
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Delete the keys matching `pattern` on the Redis at 127.0.0.1:6379, so a transcript
/// that shows a fresh key starts from one.
fn redis_del(pattern: &str) {
    let keys = Command::new("redis-cli")
        .args(["--scan", "--pattern", pattern])
        .output()
        .expect("run redis-cli");
    for key in String::from_utf8_lossy(&keys.stdout).lines() {
        let del = Command::new("redis-cli").args(["del", key]).output();
        assert!(del.is_ok_and(|o| o.status.success()), "DEL {key}");
    }
}

/// `floodgate server --config FILE`, started in the transcript's directory for a block
/// with a `server=FILE` attribute, ready once it prints its listening line; stopped when
/// dropped.
fn start_server(dir: &Path, file: &str) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["server", "--config", file])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start floodgate server");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
        .expect("read the server's first line");
    assert!(
        line.starts_with("floodgate server listening "),
        "floodgate server --config {file} did not start: {line:?}"
    );
    Proc(child)
}

fn check(b: &Block, all: &[Block]) {
    if let Some(pattern) = b.attr("redis-del") {
        redis_del(pattern);
    }
    let dir = tempfile::tempdir().unwrap();
    for f in all.iter().filter(|f| f.page == b.page) {
        if let Some(name) = f.attr("file") {
            // a name may hold directories (an Envoy runtime layout)
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, &f.body).unwrap();
        }
    }
    let _server = b.attr("server").map(|file| start_server(dir.path(), file));
    let vary = b.has("numbers-vary");
    for step in steps(b) {
        let got = run(dir.path(), step.program, &step.args);
        let (want, got): (Vec<String>, Vec<String>) = if vary {
            (
                step.shown.iter().map(|l| mask(l)).collect(),
                got.iter().map(|l| mask(l)).collect(),
            )
        } else {
            (step.shown.clone(), got)
        };
        assert_eq!(
            want.join("\n"),
            got.join("\n"),
            "{}: {} {} printed something else",
            b.place(),
            step.program,
            step.args.join(" ")
        );
    }
}

fn transcripts() -> (Vec<Block>, Vec<Block>) {
    let all = blocks().unwrap();
    let ts = all
        .iter()
        .filter(|b| b.lang() == "console")
        .cloned()
        .collect();
    (ts, all)
}

/// Every block that shows a `floodgate` command with its output is a `console` block,
/// so none escapes the check.
#[test]
fn every_shown_command_with_output_is_a_transcript() {
    for b in blocks().unwrap() {
        let first = b.body.lines().next().unwrap_or("");
        if b.lang() != "console" && PREFIXES.iter().any(|p| first.starts_with(p)) {
            panic!(
                "{}: a command with its output must be a console block",
                b.place()
            );
        }
    }
}

#[test]
fn transcripts_match_the_binary() {
    let (ts, all) = transcripts();
    assert!(ts.len() >= 6, "{} transcripts", ts.len());
    for b in ts
        .iter()
        .filter(|b| !b.has("redis") && b.attr("server").is_none())
    {
        check(b, &all);
    }
}

/// Transcripts that need the Redis on 127.0.0.1:6379 (marked `redis`), or start a
/// `floodgate server` (marked `server=FILE`).
#[test]
fn redis_transcripts_match_the_binary() {
    let (ts, all) = transcripts();
    for b in ts
        .iter()
        .filter(|b| b.has("redis") || b.attr("server").is_some())
    {
        check(b, &all);
    }
}

#[test]
fn masking_keeps_words_and_drops_numbers_and_widths() {
    assert_eq!(
        mask("fixed-window   60    10  27.3 ms  held"),
        mask("fixed-window   6   100  407 ms  NOT HELD")
    );
    assert_ne!(mask("sliding-log 40"), mask("sliding-counter 40"));
}
