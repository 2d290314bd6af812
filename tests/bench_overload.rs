//! scripts/bench-overload.sh as a user runs it, in rounds of a fraction of a second: the
//! real `floodgate` binary as backend (`demo backend`), proxy and load generator on
//! 127.0.0.1, and the table it prints. What the figures are is the benchmark's business;
//! here the commands must run and the table must have its columns and rows.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_overload_bench_runs_its_commands_and_prints_the_table() {
    let out = tempfile::tempdir().unwrap();
    let mut child = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/bench-overload.sh"
        ))
        .env("FLOODGATE", env!("CARGO_BIN_EXE_floodgate"))
        .env("OUT", out.path())
        .env("DUR", "200ms")
        .env("TIMEOUT", "500ms")
        .env("LOADS", "0.5 5")
        .env("CONFIGS", "none max_in_flight gradient2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    // bounded: 5 to 7 runs of 200 ms plus a 500 ms timeout each, and process starts
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("bench-overload.sh did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for column in [
        "| config | load | offered req/s | goodput req/s | of capacity | p50 ms | p99 ms | success |",
        "critical success",
        "default success",
        "sheddable success",
        "timeouts | send lag p99 ms | targets |",
    ] {
        assert!(stdout.contains(column), "{column:?} in\n{stdout}");
    }
    for row in [
        "| none | 0.5x | 200 |",
        "| none | 5x | 2000 |",
        "| max_in_flight | 0.5x |",
        "| max_in_flight | 5x |",
    ] {
        assert!(stdout.contains(row), "{row:?} in\n{stdout}");
    }
    assert!(
        stdout.contains("unloaded p99 (0.1x, no policy):"),
        "{stdout}"
    );
    // the 5x rows are judged against the targets, met or missed
    assert!(stdout.contains("goodput >= 90%"), "{stdout}");
    // the adaptive rows run or are skipped with a note, never silently dropped
    assert!(
        stdout.contains("| gradient2 | 5x |") || stdout.contains("== gradient2: skipped"),
        "{stdout}"
    );
    // every run left its report
    assert!(out.path().join("max_in_flight.5.json").exists());
}
