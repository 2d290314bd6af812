//! The fuzz targets (cargo-fuzz / libFuzzer, `fuzz/` at the repository root), each run for
//! a bounded time from its seed corpus, reported as rows.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Row, mem};

/// The repository's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Run every target for `secs` seconds. A target that cannot be run (cargo-fuzz missing)
/// gives a failed row saying why; a crash gives a failed row naming the artifact.
pub fn run_all(secs: u64) -> Vec<Row> {
    let dir = fuzz_dir();
    let list = Command::new("cargo")
        .args(["fuzz", "list"])
        .current_dir(&dir)
        .output();
    let targets: Vec<String> = match list {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
        _ => {
            return vec![failed(
                "cargo-fuzz is not installed: cargo install --locked cargo-fuzz",
            )];
        }
    };
    targets.iter().map(|t| run_one(&dir, t, secs)).collect()
}

fn failed(why: &str) -> Row {
    Row {
        area: "fuzz",
        case: "all targets".into(),
        cases: 0,
        faults: 0,
        requests: 0,
        lost: 0,
        duplicated: 0,
        panics: 0,
        mem_start_kib: mem::rss_kib(),
        mem_end_kib: mem::rss_kib(),
        pass: false,
        detail: why.into(),
    }
}

fn run_one(dir: &Path, target: &str, secs: u64) -> Row {
    let out_corpus = dir.join("../target/fuzz-corpus").join(target);
    let _ = std::fs::create_dir_all(&out_corpus);
    let seed = format!("corpus/{target}");
    let output = Command::new("cargo")
        .args(["fuzz", "run", "-O", "-s", "none", target])
        .arg(&out_corpus)
        .arg(&seed)
        .arg("--")
        .arg(format!("-max_total_time={secs}"))
        .args(["-rss_limit_mb=2048", "-print_final_stats=1"])
        .current_dir(dir)
        .output();
    let Ok(output) = output else {
        return failed("could not start cargo fuzz");
    };
    let text = String::from_utf8_lossy(&output.stderr);
    let stat = |name: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name).map(|v| {
                    v.trim()
                        .trim_start_matches(':')
                        .trim()
                        .parse::<u64>()
                        .unwrap_or(0)
                })
            })
            .unwrap_or(0)
    };
    let runs = stat("stat::number_of_executed_units");
    let peak = stat("stat::peak_rss_mb");
    let crashed = !output.status.success();
    Row {
        area: "fuzz",
        case: format!("{target}, {secs}s from fuzz/corpus/{target}"),
        cases: runs,
        faults: 0,
        requests: runs,
        lost: 0,
        duplicated: 0,
        panics: u64::from(crashed),
        mem_start_kib: 0,
        mem_end_kib: peak * 1024,
        pass: !crashed && runs > 0,
        detail: if crashed {
            format!(
                "crash: see fuzz/artifacts/{target}; {}",
                crash_report(&text)
            )
        } else {
            format!("{runs} inputs, no crash, fuzzer peak RSS {peak} MB")
        },
    }
}

/// What a crashed run's output says about the crash: the panic and its message (up to
/// eight lines, the message of the target's assertion), else libFuzzer's error line; and
/// the crashing input in base64 as libFuzzer prints it, so that a run whose artifacts are
/// gone (a CI machine) can still be replayed.
fn crash_report(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let what = match lines.iter().position(|l| l.contains("panicked")) {
        Some(i) => lines[i..]
            .iter()
            .take(8)
            .take_while(|l| !l.starts_with("stack backtrace") && !l.starts_with("note:"))
            .map(|l| l.trim_end())
            .collect::<Vec<_>>()
            .join("\n    "),
        None => lines
            .iter()
            .rev()
            .find(|l| l.contains("ERROR"))
            .map_or("", |l| l.trim())
            .to_string(),
    };
    match lines.iter().find(|l| l.starts_with("Base64: ")) {
        Some(input) => format!("{what}\n    input {}", input.trim()),
        None => what,
    }
}

#[cfg(test)]
mod tests {
    use super::crash_report;

    #[test]
    fn a_crash_report_names_the_panic_its_message_and_the_input() {
        let text = "INFO: seed\nthread '<unnamed>' (1) panicked at fuzz_targets/x.rs:27:9:\nread apart (GET):\n  proxy: 200\nstack backtrace:\n   0: x\n==1== ERROR: libFuzzer: deadly signal\nBase64: AEhU\n";
        assert_eq!(
            crash_report(text),
            "thread '<unnamed>' (1) panicked at fuzz_targets/x.rs:27:9:\n    read apart (GET):\n      proxy: 200\n    input Base64: AEhU"
        );
        assert_eq!(
            crash_report("==1== ERROR: libFuzzer: out-of-memory\n"),
            "==1== ERROR: libFuzzer: out-of-memory"
        );
    }
}
