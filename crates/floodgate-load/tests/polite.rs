//! `--polite`: the load generator's workers as one polite client from floodgate-client,
//! against the real floodgate proxy on 127.0.0.1, compared with the naive default.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use floodgate_core::{Kind, Spec};
use floodgate_load::{Bound, LoadConfig, PoliteConfig, Report, run};

fn url(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}/")
}

fn fixed_window(rate: &str) -> Spec {
    Spec::new(Kind::FixedWindow, rate.parse().expect("rate"))
}

fn polite() -> PoliteConfig {
    PoliteConfig {
        seed: Some(7),
        ..PoliteConfig::default()
    }
}

fn assert_outcome_adds_up(r: &Report) {
    let o = &r.outcome;
    assert_eq!(o.requests, o.succeeded + o.failed + o.abandoned, "{o:?}");
    assert_eq!(
        o.failed,
        o.finals.denied + o.finals.other_status + o.finals.errors
    );
    assert_eq!(o.attempts, r.requests);
    assert_eq!(o.denied_responses, r.denied());
    let bucket_retries: u64 = r.timeline.buckets.iter().map(|b| b.retries).sum();
    assert_eq!(bucket_retries, o.retries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polite_gets_far_fewer_429s_than_naive_at_the_same_offered_load() {
    // The same offered load, 120/s for 1 s over 10 connections (open loop), against two
    // floodgate proxies with a fixed window of 40 per second, run side by side.
    let (naive_addr, naive_backend) = floodgate_proxy(fixed_window("40/s")).await;
    let (polite_addr, polite_backend) = floodgate_proxy(fixed_window("40/s")).await;
    let offered = |addr| {
        let mut c =
            LoadConfig::new(url(addr), Bound::Duration(Duration::from_secs(1))).open_loop(120.0);
        c.concurrency = 10;
        c
    };
    let naive_cfg = offered(naive_addr);
    let polite_cfg = offered(polite_addr).polite(polite());
    let (naive, polite) = tokio::join!(run(&naive_cfg), run(&polite_cfg));
    let (naive, polite) = (naive.unwrap(), polite.unwrap());
    println!("{}", naive.render_text());
    println!("{}", polite.render_text());
    assert_outcome_adds_up(&naive);
    assert_outcome_adds_up(&polite);

    // Same offered load: 120 requests each.
    assert_eq!(naive.outcome.requests, 120);
    assert_eq!(polite.outcome.requests, 120);
    // Naive: one attempt each; at most ~40 per window get through, the rest are 429s.
    assert_eq!(naive.outcome.retries, 0);
    assert!(naive.polite.is_none());
    // (1 s of sends touches at most two windows: at most 80 admitted.)
    assert!(naive.outcome.denied_responses >= 40, "{:?}", naive.outcome);
    assert_eq!(naive.outcome.finals.denied, naive.outcome.denied_responses);
    // Polite: every request finally succeeds, with a small fraction of naive's 429s.
    assert_eq!(polite.outcome.succeeded, 120, "{:?}", polite.outcome);
    assert_eq!(polite.outcome.abandoned, 0);
    assert!(
        polite.outcome.denied_responses * 5 <= naive.outcome.denied_responses,
        "polite saw {} 429s, naive {}",
        polite.outcome.denied_responses,
        naive.outcome.denied_responses
    );
    // The backends saw exactly the admitted requests.
    assert_eq!(
        naive_backend.count.load(Ordering::SeqCst),
        naive.outcome.succeeded
    );
    assert_eq!(polite_backend.count.load(Ordering::SeqCst), 120);
    // The price: it waited, and its latency (waits included) shows it.
    let p = polite.polite.as_ref().unwrap();
    assert!(p.pacing_wait_s > 1.0, "{p:?}");
    assert!(p.wait_per_request_ms > 10.0, "{p:?}");
    assert!(
        polite.latency.all.p90_ms > 300.0 && polite.latency.all.p90_ms > naive.latency.all.p90_ms,
        "polite {:?} naive {:?}",
        polite.latency.all,
        naive.latency.all
    );
    assert!(
        polite
            .latency
            .measured_from
            .contains("waits and retries included")
    );
    let text = polite.render_text();
    assert!(text.contains("succeeded 120"), "{text}");
    assert!(text.contains("s pacing +"), "{text}");
    // JSON for machines: both sections, both modes.
    let (nj, pj) = (
        serde_json::to_value(&naive).unwrap(),
        serde_json::to_value(&polite).unwrap(),
    );
    assert_eq!(nj["outcome"]["requests"], 120);
    assert!(nj["polite"].is_null());
    assert_eq!(pj["outcome"]["succeeded"], 120);
    assert_eq!(pj["polite"]["jitter"], "full");
    assert_eq!(pj["polite"]["max_attempts"], 4);
    assert!(pj["polite"]["pacing_wait_s"].as_f64().unwrap() > 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_after_a_burst_honour_retry_after_and_are_spread_in_time() {
    // 40 connections fire at once at a window of 10 per second: 20 to 30 get a 429 with
    // Retry-After (20 when the burst straddles a window boundary), and retry after it
    // plus a jitter of up to max(250 ms, 20 % of it). Pacing is off here
    // (--no-pacing) so that the retries' timing is Retry-After's and the jitter's alone:
    // with pacing, requests that wait for an `r=0` reset are then released by the pacer.
    let (addr, backend) = floodgate_proxy(fixed_window("10/s")).await;
    let mut cfg = LoadConfig::new(url(addr), Bound::Count(40)).polite(PoliteConfig {
        pacing: false,
        max_attempts: 10,
        ..polite()
    });
    cfg.concurrency = 40;
    cfg.bucket = Duration::from_millis(50);
    let r = run(&cfg).await.unwrap();
    println!("{}", r.render_text());
    assert_outcome_adds_up(&r);
    assert_eq!(r.outcome.requests, 40);
    assert_eq!(r.outcome.succeeded, 40, "{:?}", r.outcome);
    assert_eq!(backend.count.load(Ordering::SeqCst), 40);
    let retries = r.outcome.retries;
    assert!(retries >= 20, "{:?}", r.outcome);
    // Every retry waited at least the announced second (Retry-After: 1 here, or more).
    let waits = r.polite.as_ref().unwrap().retry_wait;
    assert_eq!(waits.count, retries);
    assert!(waits.p50_ms >= 1000.0, "{waits:?}");
    // ... and they did not all come back at once: the 50 ms buckets of the timeline
    // spread them, the busiest one holds under half (without jitter, the retries told
    // the same Retry-After would all share one), and the waits differ by > 50 ms.
    let per_bucket: Vec<u64> = r
        .timeline
        .buckets
        .iter()
        .map(|b| b.retries)
        .filter(|n| *n > 0)
        .collect();
    let busiest = per_bucket.iter().copied().max().unwrap_or(0);
    assert!(
        per_bucket.len() >= 3 && busiest * 2 < retries,
        "retries per 50 ms bucket: {per_bucket:?}"
    );
    assert!(waits.max_ms - waits.p50_ms > 50.0, "{waits:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_idempotent_requests_are_retried_unless_opted_in() {
    let (addr, arrivals) = always_429_server().await;
    let mut cfg = LoadConfig::new(url(addr), Bound::Count(2)).polite(PoliteConfig {
        max_attempts: 2,
        ..polite()
    });
    cfg.concurrency = 2;
    cfg.method = http::Method::POST;
    let r = run(&cfg).await.unwrap();
    assert_eq!((r.outcome.requests, r.outcome.retries), (2, 0));
    assert_eq!(r.outcome.finals.denied, 2);
    assert_eq!(arrivals.count.load(Ordering::SeqCst), 2);

    cfg.polite.as_mut().unwrap().retry_non_idempotent = true;
    let r = run(&cfg).await.unwrap();
    // Two attempts each (the cap), the second after Retry-After: 1.
    assert_eq!((r.outcome.requests, r.outcome.retries), (2, 2));
    assert_eq!(r.outcome.denied_responses, 4);
    assert_eq!(r.outcome.finals.denied, 2);
    assert!(r.polite.unwrap().retry_wait.p50_ms >= 1000.0);
    assert_eq!(arrivals.count.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn bad_polite_settings_give_clear_errors() {
    let ok = "http://127.0.0.1:1/";
    let check = |p: PoliteConfig, needle: &'static str| async move {
        let cfg = LoadConfig::new(ok, Bound::Count(1)).polite(p);
        let e = run(&cfg).await.unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    };
    let mut p = polite();
    p.max_attempts = 0;
    check(
        p,
        "invalid max attempts (--max-attempts): must be at least 1",
    )
    .await;
    for b in [1.5, -0.1, f64::NAN] {
        let mut p = polite();
        p.budget.percent_can_retry = b;
        check(p, "invalid retry budget (--retry-budget)").await;
    }
    let mut p = polite();
    p.backoff.cap = Duration::from_millis(10);
    check(p, "invalid backoff cap (--backoff-cap)").await;
    let mut p = polite();
    p.max_wait = Duration::ZERO;
    check(p, "invalid max wait (--max-wait)").await;
    let mut p = polite();
    p.reset_jitter = 2.0;
    check(p, "invalid polite client setting").await;
}
