//! `floodgate proxy`'s process log: the rejection log's level and its lines-per-second
//! bound, `--log-format json`, no colour codes in a pipe, and the filter variables. The
//! real binary, a real backend, HTTP over loopback.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{Proc, free_ports, http_get, ok_backend, wait_child_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// One policy admitting 1 request an hour for everyone, and `log` as the `[log]` table.
fn config(upstream: SocketAddr, listen: SocketAddr, log: &str) -> String {
    format!(
        r#"listen = "{listen}"
upstream = "http://{upstream}"

[log]
{log}

[[policy]]
name = "one"
algorithm = "token-bucket"
rate = "1/h"
capacity = 1
key = "header:x-user"
"#
    )
}

/// Start the proxy on `file` with `env` and `args`; its standard error is collected.
async fn start(
    file: &std::path::Path,
    listen: SocketAddr,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Proc, Arc<Mutex<Vec<u8>>>) {
    let mut cmd = Command::new(BIN);
    cmd.args(["proxy", "--threads", "1", "--config"])
        .arg(file)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("FLOODGATE_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let err = Arc::new(Mutex::new(Vec::new()));
    let out = err.clone();
    let pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(pipe);
        let mut line = Vec::new();
        while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            out.lock().unwrap().extend_from_slice(&line);
            line.clear();
        }
    });
    let mut proc = Proc(child);
    wait_child_listening(&mut proc, &[listen]).await.unwrap();
    (proc, err)
}

async fn get_as(listen: SocketAddr, user: &str) -> u16 {
    let req = http::Request::get("/")
        .header("host", "proxy.test")
        .header("x-user", user)
        .body(Default::default())
        .unwrap();
    common::http_send(listen, req).await.0
}

/// Wait until `log` holds `needle` (at most 5 s).
async fn wait_for(log: &Mutex<Vec<u8>>, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        if text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < deadline, "no {needle:?} in:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_rejections_writes_a_bounded_number_of_lines_and_a_summary() {
    let upstream = ok_backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    let log = "rejection_level = \"warn\"\nrejections_per_second = 5\nkeys = \"hashed\"";
    std::fs::write(&file, config(upstream, listen, log)).unwrap();
    let (_p, err) = start(&file, listen, &[], &[]).await;
    assert_eq!(get_as(listen, "alice@example.com").await, 200);
    // 200 rejections within well under a second or two
    let start = Instant::now();
    let mut rejected = 0;
    for _ in 0..200 {
        if get_as(listen, "alice@example.com").await == 429 {
            rejected += 1;
        }
    }
    assert_eq!(rejected, 200);
    let took = start.elapsed();
    // the next second's first rejection writes the summary of the one before
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(get_as(listen, "alice@example.com").await, 429);
    let text = wait_for(&err, "rejection lines suppressed").await;
    let lines = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains(" rejected "))
        .count();
    // 5 a second: the flood's seconds, plus the one after it
    let seconds = took.as_secs() as usize + 2;
    assert!(
        (5..=5 * seconds + 1).contains(&lines),
        "{lines} rejection lines for 201 rejections over {took:?}:\n{text}"
    );
    let suppressed: u64 = text
        .lines()
        .filter(|l| l.contains("rejection lines suppressed"))
        .map(|l| {
            let n = l.split("suppressed=").nth(1).unwrap();
            n.split_whitespace().next().unwrap().parse::<u64>().unwrap()
        })
        .sum();
    assert!(
        suppressed as usize + lines >= 200,
        "{suppressed} suppressed + {lines} written < 200 rejections:\n{text}"
    );
    // keys = "hashed": the key itself is not in the log
    assert!(!text.contains("alice@example.com"), "{text}");
    assert!(text.contains("key=#"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_without_colour_in_a_pipe_and_the_level_as_configured() {
    let upstream = ok_backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    std::fs::write(
        &file,
        config(upstream, listen, "rejection_level = \"error\""),
    )
    .unwrap();
    let (_p, err) = start(&file, listen, &[], &["--log-format", "json"]).await;
    assert_eq!(get_as(listen, "bob").await, 200);
    assert_eq!(get_as(listen, "bob").await, 429);
    let text = wait_for(&err, "\"rejected\"").await;
    assert!(
        !text.as_bytes().contains(&0x1b),
        "ESC in a piped stderr:\n{text}"
    );
    let mut saw = false;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(
            v["timestamp"].is_string() && v["target"].is_string(),
            "{line}"
        );
        if v["message"] == "rejected" {
            assert_eq!(v["level"], "ERROR", "{line}");
            assert_eq!(v["policy"], "one", "{line}");
            assert_eq!(v["key"], "bob", "{line}");
            saw = true;
        }
    }
    assert!(saw, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_carry_no_colour_codes_in_a_pipe() {
    let upstream = ok_backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config(upstream, listen, "")).unwrap();
    let (_p, err) = start(&file, listen, &[], &[]).await;
    assert_eq!(get_as(listen, "carol").await, 200);
    assert_eq!(get_as(listen, "carol").await, 429);
    // the default rejection level is warn
    let text = wait_for(&err, " rejected ").await;
    assert!(text.contains("WARN"), "{text}");
    assert!(
        !text.as_bytes().contains(&0x1b),
        "ESC in a piped stderr:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floodgate_log_filters_and_rust_log_is_the_fallback() {
    let upstream = ok_backend().await;
    let dir = tempfile::tempdir().unwrap();
    for (env, shown) in [
        // FLOODGATE_LOG wins over RUST_LOG
        (
            vec![("FLOODGATE_LOG", "error"), ("RUST_LOG", "info")],
            false,
        ),
        // RUST_LOG alone is honoured
        (vec![("RUST_LOG", "error")], false),
        (vec![("RUST_LOG", "info")], true),
    ] {
        let [listen] = free_ports();
        let file = dir.path().join("proxy.toml");
        std::fs::write(&file, config(upstream, listen, "")).unwrap();
        let (_p, err) = start(&file, listen, &env, &[]).await;
        assert_eq!(http_get(listen, "/").await.0, 400, "no x-user: missing key");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = String::from_utf8_lossy(&err.lock().unwrap()).into_owned();
        assert_eq!(
            text.contains("floodgate proxy ready"),
            shown,
            "{env:?}:\n{text}"
        );
    }
    // a filter that does not parse is an error naming the variable
    let [listen] = free_ports();
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config(upstream, listen, "")).unwrap();
    let out = Command::new(BIN)
        .args(["proxy", "--config"])
        .arg(&file)
        .env("FLOODGATE_LOG", "info,=[")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FLOODGATE_LOG="), "{stderr}");
}
