//! Naive vs polite clients against the floodgate proxy on loopback, side by side.
//!
//! `cargo run --release -p floodgate-client --example naive_vs_polite`
//!
//! For each server limit, 10 concurrent workers must each complete 10 GETs (100 in all)
//! through the floodgate proxy (crate floodgate-proxy) in front of a backend:
//!
//! * naive: no headers read; on 429 it tries again after a fixed 50 ms;
//! * backoff only: the polite client with pacing off (Retry-After + jitter, exponential
//!   backoff with full jitter);
//! * polite: pacing from `RateLimit` plus the backoff.
//!
//! The naive client tries up to 1000 times per request; the polite ones have a 20-attempt
//! cap and a retry budget wide enough (100 %) that all of them finish, so the rows compare
//! the same work.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::FloodgateProxy;
use floodgate_client::backoff::RetryBudgetConfig;
use floodgate_client::{Polite, PoliteConfig, PoliteLayer};
use floodgate_core::{Kind, Rate, Spec};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::{Layer, Service, ServiceExt};

const WORKERS: usize = 10;
const PER_WORKER: usize = 10;

type Hyper = Client<HttpConnector, Full<Bytes>>;

struct Row {
    client: &'static str,
    ok: usize,
    throttled: u64,
    sent: usize,
    took: Duration,
}

async fn naive(url: String) -> (u64, usize) {
    let client: Hyper = Client::builder(TokioExecutor::new()).build_http();
    let tasks: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let mut throttled = 0;
                for _ in 0..PER_WORKER {
                    for _ in 0..1000 {
                        let req = Request::get(&url)
                            .body(Full::new(Bytes::new()))
                            .expect("request");
                        let resp = client.request(req).await.expect("response");
                        let status = resp.status();
                        let _ = resp.into_body().collect().await;
                        if status == StatusCode::OK {
                            break;
                        }
                        throttled += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                throttled
            })
        })
        .collect();
    let mut throttled = 0;
    for t in tasks {
        throttled += t.await.expect("worker");
    }
    (throttled, 0)
}

async fn polite(url: String, pacing: bool) -> (u64, usize) {
    let engine = Polite::new(PoliteConfig {
        pacing,
        max_attempts: 20,
        budget: RetryBudgetConfig {
            percent_can_retry: 1.0,
            ..RetryBudgetConfig::default()
        },
        ..PoliteConfig::default()
    })
    .expect("config");
    let svc = PoliteLayer::new(engine.clone())
        .layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let tasks: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (mut svc, url) = (svc.clone(), url.clone());
            tokio::spawn(async move {
                for _ in 0..PER_WORKER {
                    let req = Request::get(&url)
                        .body(Full::new(Bytes::new()))
                        .expect("request");
                    let resp = svc
                        .ready()
                        .await
                        .expect("ready")
                        .call(req)
                        .await
                        .expect("response");
                    let _ = resp.into_body().collect().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("worker");
    }
    (engine.stats().throttled, 0)
}

async fn run(kind: Kind, rate: &str, capacity: Option<u64>, which: &'static str) -> Row {
    let mut spec = Spec::new(kind, rate.parse::<Rate>().expect("rate"));
    spec.capacity = capacity;
    let proxy = FloodgateProxy::start(spec).await;
    let url = proxy.url("/");
    let start = Instant::now();
    let (throttled, _) = match which {
        "naive" => naive(url).await,
        "backoff only" => polite(url, false).await,
        _ => polite(url, true).await,
    };
    let took = start.elapsed();
    let ok = proxy.backend.total();
    Row {
        client: which,
        ok,
        throttled,
        sent: ok + throttled as usize,
        took,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cases: [(&str, Kind, &str, Option<u64>); 2] = [
        ("fixed-window 20/s", Kind::FixedWindow, "20/s", None),
        ("gcra 20/s, capacity 5", Kind::Gcra, "20/s", Some(5)),
    ];
    println!(
        "{WORKERS} workers x {PER_WORKER} GETs each through the floodgate proxy on loopback\n"
    );
    println!(
        "| server limit | client | completed | 429s | requests sent | 429 share | wall time |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (label, kind, rate, cap) in cases {
        for which in ["naive", "backoff only", "polite"] {
            let r = run(kind, rate, cap, which).await;
            println!(
                "| {label} | {} | {} | {} | {} | {:.0} % | {:.2} s |",
                r.client,
                r.ok,
                r.throttled,
                r.sent,
                100.0 * r.throttled as f64 / r.sent.max(1) as f64,
                r.took.as_secs_f64()
            );
        }
    }
}
