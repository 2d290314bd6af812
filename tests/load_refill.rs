//! `floodgate load --polite` started right after a naive run emptied the key, against a
//! real `floodgate proxy` on loopback: once the key refills it sends at the policy's rate
//! within about one window, instead of keeping the sends it booked from the first, stale
//! answers.

use std::process::{Command, Stdio};

mod common;
use common::{Proc, free_port, serve_axum, wait_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// An upstream answering every GET with 200 `ok`.
fn upstream() -> std::net::SocketAddr {
    serve_axum(axum::Router::new().route("/", axum::routing::get(|| async { "ok" })))
}

fn load(args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("load")
        .args(args)
        .args(["--json", "-t", "5s"])
        .env_remove("CI")
        .output()
        .expect("run floodgate load");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polite_run_after_a_naive_one_reaches_the_rate_a_window_after_the_refill() {
    let up = upstream();
    let listen = free_port();
    let listen_s = listen.to_string();
    let upstream_url = format!("http://{up}");
    // 10/s, 10 at once from rest; every request of the test is one key (127.0.0.1)
    let _proxy = Proc(
        Command::new(BIN)
            .args([
                "proxy",
                "--listen",
                &listen_s,
                "--upstream",
                &upstream_url,
                "--rate",
                "10/s",
                "--burst",
                "9",
                "--algorithm",
                "gcra",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(listen).await;
    let url = format!("http://{listen}/");
    // the naive run empties the key: 10 admitted, the rest denied
    let naive = tokio::task::spawn_blocking({
        let url = url.clone();
        move || load(&[&url, "-n", "60", "-c", "4"])
    })
    .await
    .unwrap();
    assert!(
        naive["outcome"]["denied_responses"].as_u64().unwrap() > 0,
        "{naive}"
    );
    // at once, a polite run of 4 s with 8 workers: the key is back to full within 1 s
    let polite = tokio::task::spawn_blocking(move || {
        load(&[&url, "-z", "4s", "-c", "8", "--polite", "--bucket", "1s"])
    })
    .await
    .unwrap();
    let buckets = polite["timeline"]["buckets"].as_array().unwrap();
    let sent: Vec<u64> = buckets
        .iter()
        .map(|b| b["sent"].as_u64().unwrap())
        .collect();
    // the first window may still wait for the refill; from the third second on (a window
    // after the refill) every whole second sends at the rate: 10/s less the client's
    // 2 % headroom and a send of slack at the bucket edges
    let whole: Vec<u64> = buckets
        .iter()
        .filter(|b| {
            let start = b["start_s"].as_f64().unwrap();
            (2.0..=3.0).contains(&start)
        })
        .map(|b| b["sent"].as_u64().unwrap())
        .collect();
    assert!(
        !whole.is_empty(),
        "no whole second after the refill: {sent:?}"
    );
    for s in &whole {
        assert!(
            (8..=11).contains(s),
            "sent per second {sent:?}: a second after the refill is not at 10/s"
        );
    }
}
