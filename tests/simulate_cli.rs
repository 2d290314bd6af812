//! `floodgate simulate` as a user runs it: the real binary, its JSON, its SVG, its errors.

use std::process::Command;

fn floodgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .output()
        .expect("run floodgate")
}

/// The command fails, its error names the problem (`needle`), and nothing panicked.
fn fails_clearly(args: &[&str], needle: &str) {
    let out = floodgate(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

fn json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = floodgate(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn row<'a>(rows: &'a [serde_json::Value], scenario: &str, alg: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["scenario"] == scenario && r["algorithm"] == alg)
        .unwrap_or_else(|| panic!("no row {scenario}/{alg}"))
}

#[test]
fn seed_cases_in_json() {
    let rows = json(&["simulate", "--json"]);
    assert_eq!(rows.len(), 14, "7 algorithms x 2 scenarios");
    let fw = row(&rows, "boundary", "fixed-window");
    assert_eq!(
        (fw["allowed"].as_u64(), fw["max_in_window"].as_u64()),
        (Some(200), Some(200))
    );
    let log = row(&rows, "boundary", "sliding-log");
    assert_eq!(
        (log["allowed"].as_u64(), log["max_in_window"].as_u64()),
        (Some(100), Some(100))
    );
    for alg in ["sliding-counter", "gcra", "token-bucket"] {
        let r = row(&rows, "boundary", alg);
        assert_eq!(r["allowed"].as_u64(), Some(100), "{alg}");
        assert!(r["max_in_window"].as_u64().unwrap() <= 101, "{alg}");
    }
    let tb = row(&rows, "refill", "token-bucket");
    assert_eq!(tb["allowed_by_burst"], serde_json::json!([10, 6]));
    assert_eq!(tb["denied"].as_u64(), Some(9));
}

#[test]
fn table_output_names_every_algorithm() {
    let out = floodgate(&["simulate", "--scenario", "boundary"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [
        "fixed-window",
        "sliding-log",
        "sliding-counter",
        "token-bucket",
        "leaky-meter",
        "leaky-queue",
        "gcra",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    assert!(text.contains("up to 2L across a boundary"));
}

#[test]
fn custom_arrivals_and_rate() {
    let rows = json(&[
        "simulate",
        "--json",
        "--rate",
        "10/s",
        "--arrivals",
        "10@0.95s",
        "--arrivals",
        "10@1.05s",
        "--algorithm",
        "fixed-window",
        "--algorithm",
        "gcra",
    ]);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        row(&rows, "custom", "fixed-window")["allowed"].as_u64(),
        Some(20)
    );
    assert_eq!(row(&rows, "custom", "gcra")["allowed"].as_u64(), Some(11));
}

#[test]
fn svg_is_written_with_boundaries_and_series() {
    let dir = std::env::temp_dir().join(format!("floodgate-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sim.svg");
    let out = floodgate(&["simulate", "--svg", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"));
    assert!(svg.contains("fixed-window (200 allowed"));
    assert!(svg.contains("polyline"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_input_gets_clear_errors() {
    for (args, needle) in [
        (vec!["simulate", "--rate", "10/q"], "unknown unit \"q\""),
        (
            vec!["simulate", "--rate", "0/s"],
            "count must be at least 1",
        ),
        (
            vec!["simulate", "--capacity", "0"],
            "--capacity must be at least 1",
        ),
        (
            vec!["simulate", "--scenario", "nope"],
            "unknown scenario \"nope\"",
        ),
        (
            vec!["simulate", "--algorithm", "lru"],
            "unknown algorithm \"lru\"",
        ),
        (
            vec!["simulate", "--arrivals", "5@3q"],
            "invalid duration \"3q\"",
        ),
        (
            vec!["simulate", "--arrivals", "1@1s", "--scenario", "boundary"],
            "exclusive",
        ),
        (
            vec!["simulate", "--capacity", "3", "--burst", "2"],
            "cannot be used with",
        ),
        (
            vec!["simulate", "--delay", "500", "--capacity", "10"],
            "delay=500 is above burst=9",
        ),
        (
            vec!["simulate", "--scenario", "steady", "--rps", "0"],
            "rps must be at least 1",
        ),
        (
            vec![
                "simulate",
                "--scenario",
                "steady",
                "--rps",
                "1000000",
                "--duration",
                "1h",
            ],
            "above the 10,000,000",
        ),
        (
            vec!["simulate", "--rate", "18446744073709551615/1ns"],
            "more than one unit per nanosecond",
        ),
    ] {
        fails_clearly(&args, needle);
    }
}

#[test]
fn distributed_mode_prices_every_strategy() {
    let rows = json(&[
        "simulate",
        "--nodes",
        "3",
        "--skew",
        "spread",
        "--duration",
        "30s",
        "--json",
    ]);
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["naive", "sticky", "local", "shared", "hybrid"]);
    let naive = rows.iter().find(|r| r["strategy"] == "naive").unwrap();
    let shared = rows.iter().find(|r| r["strategy"] == "shared").unwrap();
    assert!(naive["admitted"].as_u64().unwrap() > 2 * shared["admitted"].as_u64().unwrap());
    assert_eq!(shared["over_admitted"].as_u64(), Some(0));
    for field in [
        "legit_denied",
        "round_trips_per_request",
        "added_latency_ms",
        "moved_keys",
        "worst_excess",
    ] {
        assert!(shared.get(field).is_some(), "{field}");
    }
    let dir = std::env::temp_dir().join(format!("floodgate-dist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("dist.svg");
    let out = floodgate(&[
        "simulate",
        "--nodes",
        "3",
        "--skew",
        "pinned",
        "--fail",
        "1@10s",
        "--join",
        "20s",
        "--duration",
        "30s",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&svg)
            .unwrap()
            .contains("legit denied")
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn distributed_mode_bad_input() {
    for (args, needle) in [
        (
            vec!["simulate", "--nodes", "0"],
            "--nodes must be at least 1",
        ),
        (
            vec!["simulate", "--nodes", "3", "--strategy", "magic"],
            "unknown strategy \"magic\"",
        ),
        (
            vec!["simulate", "--nodes", "3", "--skew", "weird"],
            "unknown skew \"weird\"",
        ),
        (
            vec!["simulate", "--nodes", "3", "--fail", "7@1s"],
            "node 7 does not exist",
        ),
        (
            vec!["simulate", "--nodes", "3", "--fail", "1"],
            "expected NODE@TIME",
        ),
        (
            vec!["simulate", "--nodes", "3", "--rps", "100000000"],
            "above the 5000000",
        ),
        (
            vec!["simulate", "--nodes", "3", "--algorithm", "leaky-queue"],
            "not leaky-queue",
        ),
    ] {
        fails_clearly(&args, needle);
    }
}
