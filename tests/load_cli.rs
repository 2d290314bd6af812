//! `floodgate load` as a user runs it: the real binary against a real server on 127.0.0.1.

use std::process::{Command, Output};

mod common;
use common::serve_axum;

fn floodgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .env_remove("CI")
        .output()
        .expect("run floodgate")
}

fn fails_with(args: &[&str], needle: &str) {
    let out = floodgate(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

/// A server answering 200 to every request, on a free loopback port, in its own thread.
fn server() -> std::net::SocketAddr {
    serve_axum(axum::Router::new().route(
        "/",
        axum::routing::post(|body: String| async move {
            (
                [("ratelimit", "\"d\";r=1;t=1")],
                format!("got {}", body.len()),
            )
        }),
    ))
}

#[test]
fn json_report_svg_and_no_progress_bar_when_piped() {
    let addr = server();
    let url = format!("http://{addr}/");
    let dir = std::env::temp_dir().join(format!("floodgate-load-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("t.svg");
    let out = floodgate(&[
        "load",
        &url,
        "-n",
        "50",
        "-c",
        "5",
        "-m",
        "post",
        "-H",
        "Content-Type: text/plain",
        "-d",
        "hello",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(r["requests"], 50);
    assert_eq!(r["statuses"]["200"], 50);
    assert_eq!(r["method"], "POST");
    assert_eq!(r["advertised"][0]["header"], "ratelimit");
    assert_eq!(r["advertised"][0]["responses"], 50);
    // Piped stderr: no progress bar, only the note about the plot.
    assert_eq!(stderr.trim(), format!("wrote {}", svg.display()));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();

    let out = floodgate(&[
        "load", &url, "-z", "1s", "-q", "20", "-c", "2", "-m", "POST", "--window", "1s", "--near",
        "100ms",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("open loop at 20 req/s in total"), "{text}");
    assert!(
        text.contains("requests      20 (20 responses, 0 errors)"),
        "{text}"
    );
    assert!(text.contains("Boundary verdict (window 1s"), "{text}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead = format!("http://127.0.0.1:{port}/");
    fails_with(&["load", &dead, "-n", "1"], "cannot connect to 127.0.0.1");
    fails_with(&["load", "localhost:80", "-n", "1"], "invalid URL");
    fails_with(
        &["load", "ftp://127.0.0.1/", "-n", "1"],
        "unsupported scheme",
    );
    fails_with(
        &["load", "http://192.0.2.1/", "-n", "1"],
        "not a loopback address",
    );
    fails_with(&["load", &dead, "-n", "1", "-q", "0"], "invalid rate (-q)");
    fails_with(
        &["load", &dead, "-n", "1", "-q", "NaN"],
        "invalid rate (-q)",
    );
    fails_with(
        &["load", &dead, "-n", "1", "-z", "1s"],
        "cannot be used with",
    );
    fails_with(
        &["load", &dead],
        "one of -n (requests) or -z (duration) is required",
    );
    fails_with(&["load", &dead, "-z", "2h"], "above the cap");
    fails_with(&["load", &dead, "-z", "10"], "missing unit");
    fails_with(
        &["load", &dead, "-n", "1", "-c", "0"],
        "invalid concurrency (-c)",
    );
    fails_with(
        &["load", &dead, "-n", "1", "-H", "novalue"],
        "invalid header \"novalue\"",
    );
    fails_with(&["load", &dead, "-n", "1", "-m", "GE T"], "invalid method");
    fails_with(
        &["load", &dead, "-n", "1", "--window-offset", "1s"],
        "--window-offset needs --window",
    );
    fails_with(
        &["load", &dead, "-n", "1", "--window", "1s", "--near", "2s"],
        "at most half the window",
    );
    fails_with(
        &["load", &dead, "-n", "1", "-q", "10", "--arrivals", "bursty"],
        "unknown arrivals \"bursty\"; expected uniform or poisson",
    );
    fails_with(
        &["load", &dead, "-n", "1", "--arrivals", "poisson"],
        "Poisson arrivals are open loop",
    );
    fails_with(
        &["load", &dead, "-n", "1", "--class-header", "x-priority"],
        "--class-mix",
    );
    fails_with(
        &[
            "load",
            &dead,
            "-n",
            "1",
            "--class-header",
            "x-priority",
            "--class-mix",
            "critical=x",
        ],
        "invalid class mix \"critical=x\": \"critical=x\": the weight is not a number",
    );
    fails_with(
        &[
            "load",
            &dead,
            "-n",
            "1",
            "--class-header",
            "bad header",
            "--class-mix",
            "a=1",
        ],
        "not a valid header name (--class-header)",
    );
    fails_with(
        &[
            "load",
            &dead,
            "-n",
            "1",
            "--class-header",
            "x-p",
            "--class-mix",
            "a=0,b=0",
        ],
        "the weights sum to 0",
    );
}

#[test]
fn help_explains_rate_and_coordinated_omission() {
    let out = floodgate(&["load", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("TOTAL rate across all connections, as in oha"),
        "{help}"
    );
    assert!(help.contains("hey's -q is per worker"), "{help}");
    assert!(help.contains("coordinated omission"), "{help}");
    assert!(help.contains("--closed-loop"), "{help}");
}

#[test]
fn polite_flags_json_and_clear_errors() {
    let addr = server();
    let url = format!("http://{addr}/");
    // The server always says r=1;t=1 (one more within the next second): the polite client
    // sends the second request a second after the first (plus its 2 % headroom) and the
    // third a second after that.
    let out = floodgate(&[
        "load",
        &url,
        "-n",
        "3",
        "-c",
        "1",
        "-m",
        "post",
        "--polite",
        "--jitter",
        "decorrelated",
        "--max-attempts",
        "3",
        "--retry-budget",
        "0.5",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(r["outcome"]["requests"], 3);
    assert_eq!(r["outcome"]["succeeded"], 3);
    assert_eq!(r["outcome"]["retries"], 0);
    assert_eq!(r["polite"]["jitter"], "decorrelated");
    assert_eq!(r["polite"]["max_attempts"], 3);
    assert_eq!(r["polite"]["retry_budget"], 0.5);
    assert_eq!(r["polite"]["pacing"], true);
    let paced = r["polite"]["pacing_wait_s"].as_f64().unwrap();
    assert!((1.5..=2.5).contains(&paced), "paced {paced} s");
    assert!(
        r["latency"]["measured_from"]
            .as_str()
            .unwrap()
            .contains("waits and retries included")
    );

    fails_with(&["load", &url, "-n", "1", "--jitter", "full"], "--polite");
    fails_with(
        &["load", &url, "-n", "1", "--max-attempts", "2"],
        "--polite",
    );
    fails_with(&["load", &url, "-n", "1", "--no-pacing"], "--polite");
    fails_with(
        &["load", &url, "-n", "1", "--polite", "--jitter", "wild"],
        "unknown jitter \"wild\"; expected full, equal, decorrelated or none",
    );
    fails_with(
        &["load", &url, "-n", "1", "--polite", "--max-attempts", "0"],
        "invalid max attempts (--max-attempts)",
    );
    fails_with(
        &["load", &url, "-n", "1", "--polite", "--retry-budget", "2"],
        "invalid retry budget (--retry-budget)",
    );
    fails_with(
        &["load", &url, "-n", "1", "--polite", "--backoff-cap", "1ms"],
        "invalid backoff cap (--backoff-cap)",
    );
    fails_with(
        &["load", &url, "-n", "1", "--polite", "--max-wait", "0s"],
        "--max-wait",
    );
}

#[test]
fn a_duration_run_says_at_its_start_that_it_may_last_z_plus_t() {
    let addr = server();
    let url = format!("http://{addr}/");
    let out = floodgate(&[
        "load", &url, "-z", "300ms", "-t", "2s", "-q", "20", "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.lines().next(),
        Some(
            "floodgate load: sending for 300ms; what is still in flight then is waited for up to -t 2s, so the run lasts at most 2.3s"
        ),
        "{stderr}"
    );
}
