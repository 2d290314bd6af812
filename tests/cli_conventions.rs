//! The command line's conventions as an operator meets them: every subcommand listed and
//! its `--help` with examples, exit statuses (2 usage, 1 runtime), shell completions and
//! man pages generated from the clap definitions.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// The subcommands `floodgate --help` lists and the man pages cover.
const SUBCOMMANDS: [&str; 9] = [
    "demo",
    "simulate",
    "throttle",
    "proxy",
    "server",
    "load",
    "top",
    "completions",
    "convert",
];

fn floodgate(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_lists_every_subcommand_and_each_has_an_example() {
    let out = floodgate(&["--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    let listed: Vec<&str> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(listed, SUBCOMMANDS, "{help}");
    assert!(
        help.contains("2  usage error") && help.contains("1  runtime failure"),
        "{help}"
    );
    // the crate's description, the first line of --help, names them too
    let first = help.lines().next().unwrap();
    for sub in SUBCOMMANDS.iter().filter(|s| **s != "completions") {
        assert!(first.contains(sub), "{sub} missing from {first:?}");
    }
    for sub in SUBCOMMANDS {
        let out = floodgate(&[sub, "--help"]);
        assert!(out.status.success(), "{sub}");
        let help = stdout(&out);
        let examples = help
            .split_once("\nExamples:\n")
            .or_else(|| help.split_once("\nExample:\n"))
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("floodgate {sub} --help has no examples:\n{help}"));
        assert!(
            examples.contains(&format!("floodgate {sub} ")),
            "{sub}: {examples}"
        );
    }
}

#[test]
fn usage_errors_exit_2_and_runtime_failures_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "upstream = \"http://127.0.0.1:9\"\nlisten = 3\n").unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let redis = format!("redis://127.0.0.1:{closed}");
    let cases: [(&[&str], i32, &str); 8] = [
        // clap's parse errors
        (&["proxy", "--no-such-flag"], 2, "unexpected argument"),
        (&["nope"], 2, "unrecognized subcommand"),
        // flags checked by the command
        (
            &["proxy", "--upstream", "http://127.0.0.1:9", "--rate", "0/s"],
            2,
            "--rate",
        ),
        (&["throttle", "k", "x", "1", "1"], 2, "max_burst"),
        // a config file
        (
            &["proxy", "--config", bad.to_str().unwrap()],
            2,
            "bad.toml:2:",
        ),
        (
            &["server", "--config", "/nonexistent/limits.yaml"],
            2,
            "cannot read the config file",
        ),
        // runtime: an address in use, a Redis that does not answer
        (
            &[
                "proxy",
                "--listen",
                &taken,
                "--upstream",
                "http://127.0.0.1:9",
                "--rate",
                "1/s",
            ],
            1,
            &taken,
        ),
        (
            &["throttle", "k", "1", "1", "1", "--redis", &redis],
            1,
            "cannot connect to Redis",
        ),
    ];
    for (args, status, needle) in cases {
        let out = floodgate(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn completions_print_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _floodgate"),
        ("zsh", "#compdef floodgate"),
        ("fish", "complete -c floodgate"),
    ] {
        let out = floodgate(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completes {sub}");
        }
        assert!(script.contains("check-config"), "{shell}: proxy flags");
    }
    // the bash script parses
    let script = stdout(&floodgate(&["completions", "bash"]));
    let check = Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .expect("bash");
    assert!(check.status.success(), "{}", stderr(&check));
    let out = floodgate(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn man_pages_cover_every_subcommand_with_examples_and_exit_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let out = floodgate(&["man", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = SUBCOMMANDS
        .iter()
        .map(|s| format!("floodgate-{s}.1"))
        .collect();
    want.push("floodgate.1".into());
    want.sort();
    assert_eq!(names, want);
    for name in &names {
        let page = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let title = name.trim_end_matches(".1");
        assert!(page.contains(&format!("\n.TH {title} 1 ")), "{name}");
        for section in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH \"EXAMPLES\"",
            ".SH \"EXIT STATUS\"",
        ] {
            assert!(page.contains(section), "{name} has no {section}");
        }
        assert!(page.contains("usage error"), "{name}");
    }
    let root = std::fs::read_to_string(dir.path().join("floodgate.1")).unwrap();
    assert!(root.contains("floodgate\\-top(1)"), "{root}");
    // man(1) formats the pages without a warning
    let fmt = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(dir.path().join("floodgate-proxy.1"))
        .output()
        .expect("groff (Debian package groff-base)");
    assert!(
        fmt.status.success() && fmt.stderr.is_empty(),
        "{}",
        stderr(&fmt)
    );
    // a directory that cannot be made: a runtime failure, named
    let file = dir.path().join("floodgate.1");
    let out = floodgate(&["man", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot create the directory"),
        "{}",
        stderr(&out)
    );
}
