//! `floodgate demo` as a user runs it: the real binary, its six proxies, backend and load
//! on 127.0.0.1, the in-process store and the shared Redis on 127.0.0.1:6379. A 1 s
//! window keeps each run to about 3 s.

use std::process::{Command, Output};

use serde_json::Value;

fn floodgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .output()
        .expect("run floodgate")
}

fn demo_json(extra: &[&str]) -> Value {
    let mut args = vec!["demo", "--rate", "20/1s", "--json"];
    args.extend_from_slice(extra);
    let out = floodgate(&args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn row<'a>(report: &'a Value, alg: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["algorithm"] == alg)
        .unwrap_or_else(|| panic!("no row {alg}"))
}

fn n(r: &Value, field: &str) -> u64 {
    r[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {r}"))
}

/// The demo's claims, checked on the backend's own records (limit 20 per 1 s, capacity 5):
/// the fixed window lets about twice the limit through across the boundary; every other
/// algorithm stays at its bound.
fn check(report: &Value) {
    assert_eq!(n(report, "limit"), 20);
    assert_eq!(n(report, "capacity"), 5);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        // 30 steady requests and two bursts of 20, all answered 200 or 429
        assert_eq!(n(r, "sent"), 70, "{r}");
        assert_eq!(n(r, "errors"), 0, "{r}");
        assert_eq!(n(r, "admitted") + n(r, "denied"), 70, "{r}");
        assert_eq!(n(r, "admitted"), n(r, "backend_received"), "{r}");
        // the bounds hold on the proxies' decision times; the backend stamps arrivals a
        // forwarding hop later, and on a loaded machine that hop varies: one request of
        // slack (the leaky queue forwards exactly 1 + rate x W, so any compression shows)
        if let Some(bound) = r["bound"].as_u64() {
            assert!(n(r, "max_in_window") <= bound + 1, "{r}");
        }
    }
    // fixed window: about 2 L within one window-length span (>= 1.8 L: on a loaded
    // machine a few of the first burst may reach the proxy after the boundary)
    let fw = row(report, "fixed-window");
    assert!(n(fw, "max_in_window") >= 36, "{fw}");
    assert_eq!(n(fw, "bound"), 40);
    // sliding log: L in any span, exactly
    assert_eq!(n(row(report, "sliding-log"), "bound"), 20);
    // sliding counter: L per aligned window, no bound on a rolling span; its estimate
    // weighs the first burst as if spread over its window, so a few more get through in
    // the span after it (about L + 0.2 x 17, 23 to 24, for this plan), nowhere near 2 L
    let sc = row(report, "sliding-counter");
    assert_eq!((&sc["bound"], &sc["held"]), (&Value::Null, &Value::Null));
    assert!(n(sc, "max_in_window") <= 28, "{sc}");
    // token bucket and GCRA: capacity + rate x W
    for alg in ["token-bucket", "gcra"] {
        assert_eq!(n(row(report, alg), "bound"), 25, "{alg}");
    }
    // leaky queue: forwards at the rate, and the delay shows in its latency
    let lq = row(report, "leaky-queue");
    assert_eq!(n(lq, "bound"), 21, "{lq}");
    assert!(lq["p99_ms"].as_f64().unwrap() >= 100.0, "{lq}");
    for r in rows.iter().filter(|r| r["algorithm"] != "fixed-window") {
        assert!(
            n(r, "max_in_window") * 10 < n(fw, "max_in_window") * 8,
            "{r} should be well below the fixed window"
        );
    }
}

#[test]
fn in_process_fixed_window_doubles_at_the_boundary_the_others_hold() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let report = demo_json(&["--svg", plots.to_str().unwrap()]);
    assert_eq!(report["store"], "in-process");
    check(&report);
    for alg in [
        "fixed-window",
        "sliding-log",
        "sliding-counter",
        "token-bucket",
        "gcra",
        "leaky-queue",
    ] {
        let svg = std::fs::read_to_string(plots.join(format!("demo-{alg}.svg")))
            .unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert!(svg.contains("<svg") && svg.contains(alg), "{alg}");
    }
}

#[test]
fn redis_store_same_result() {
    let report = demo_json(&["--redis", "redis://127.0.0.1:6379"]);
    assert_eq!(report["store"], "redis");
    assert_eq!(n(&report, "store_errors"), 0);
    check(&report);
}

#[test]
fn the_table_names_every_algorithm_and_its_bound() {
    // the text output is what docs/demo.md shows: one line per algorithm, held or not
    let out = floodgate(&["demo", "--rate", "8/500ms", "--capacity", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "fixed-window",
        "sliding-log",
        "sliding-counter",
        "token-bucket",
        "gcra",
        "leaky-queue",
    ] {
        let l = text
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no line for {line}:\n{text}"));
        // held or NOT HELD (the backend's timestamps can be one off a bound on a
        // loaded machine: the JSON tests allow that); the fixed window's 2 L always holds
        let verdict = match line {
            "sliding-counter" => ": no exact bound on a span",
            "fixed-window" => ": held",
            _ => "held",
        };
        assert!(l.to_lowercase().ends_with(verdict), "{l}");
    }
    assert!(
        text.contains("<= 10 in any 500ms span (capacity 2 + rate x 500ms)"),
        "{text}"
    );
    assert!(text.contains("fixed-window let "), "{text}");
}

/// `floodgate ARGS` exits with `status` (2: usage error, 1: runtime failure) and says
/// `needle` on stderr, without a panic.
fn fails_clearly(args: &[&str], status: i32, needle: &str) {
    let out = floodgate(args);
    assert_eq!(out.status.code(), Some(status), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let file = file.path().to_str().unwrap();
    // usage errors exit 2, runtime failures (Redis down, a directory not writable) 1
    let cases: &[(&[&str], i32, &str)] = &[
        (&["--rate", "10/q"], 2, "invalid --rate \"10/q\""),
        (
            &["--rate", "1000/1s"],
            2,
            "a limit of 1000 per window; the demo runs 4 to 200",
        ),
        (&["--rate", "20/100ms"], 2, "a window of 100ms"),
        (&["--rate", "20/1min"], 2, "a window of 60s"),
        (&["--capacity", "0"], 2, "invalid --capacity: 0"),
        (
            &["--capacity", "21"],
            2,
            "invalid --capacity: 21; expected 1 to the limit (20)",
        ),
        (
            &["--redis", "http://127.0.0.1:6379"],
            2,
            "is not a Redis URL",
        ),
        (&["--redis", "redis://127.0.0.1:1"], 1, "Redis store:"),
        (&["--svg", file], 1, "cannot create the directory"),
        (
            &["--svg", "/proc/floodgate-demo"],
            1,
            "cannot create the directory",
        ),
    ];
    for (extra, status, needle) in cases {
        let mut args = vec!["demo"];
        args.extend_from_slice(extra);
        fails_clearly(&args, *status, needle);
    }
}

#[test]
fn the_queueing_backend_refuses_bad_settings_by_name() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["--workers", "0"],
            2,
            "invalid workers (--workers): 0; expected 1 to 10000",
        ),
        (&["--workers", "-1"], 2, "unexpected argument '-1'"),
        (
            &["--queue", "2000000"],
            2,
            "invalid queue (--queue): 2000000",
        ),
        (
            &["--time-limit", "0s"],
            2,
            "invalid time limit (--time-limit)",
        ),
        (&["--max-connections", "0"], 2, "invalid max connections"),
        (
            &["--service", "gamma:1s"],
            2,
            "unknown kind \"gamma\"; expected exp or const",
        ),
        (&["--service", "exp:0ms"], 2, "expected above 0"),
        (
            &["--service", "20ms"],
            2,
            "expected exp:MEAN or const:DURATION",
        ),
        (&["--listen", "nowhere"], 2, "--listen"),
        (&["--listen", &taken], 1, "cannot listen on"),
        // the backend has its own flags; the demo's are not mixed in
        (&["--rate", "20/1s"], 2, "--rate"),
    ];
    for (extra, status, needle) in cases {
        let mut args = vec!["demo", "backend"];
        args.extend_from_slice(extra);
        fails_clearly(&args, *status, needle);
    }
    let help = floodgate(&["demo", "backend", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("capacity is workers / mean service time"),
        "{help}"
    );
}
