//! A small gRPC load client for Envoy's `ShouldRateLimit` (ghz is not installable here):
//! `CONCURRENCY` tasks, each with one call in flight, spread over `CONNECTIONS` HTTP/2
//! connections, until `REQUESTS` calls are made or `SECONDS` pass (both bounds always
//! apply). Latency is measured per call (closed loop) into an HDR histogram.
//!
//! ```text
//! cargo run --release -p floodgate-server --example rls_load -- \
//!     http://127.0.0.1:8081 DOMAIN KEY CONCURRENCY CONNECTIONS REQUESTS SECONDS [VALUES]
//! ```
//!
//! Each call carries one descriptor `KEY=v<i mod VALUES>` (default 1000 values). Prints one
//! line: `calls_per_s=... p50_us=... p99_us=... p999_us=... max_us=... ok=... over=... errors=...`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str, default: Option<T>) -> T {
    match args.get(i) {
        Some(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("{name}: cannot parse {s:?}")),
        None => default.unwrap_or_else(|| panic!("missing {name}")),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target: String = arg(&args, 0, "TARGET", None);
    let domain: String = arg(&args, 1, "DOMAIN", None);
    let key: String = arg(&args, 2, "KEY", None);
    let concurrency: usize = arg(&args, 3, "CONCURRENCY", Some(64));
    let connections: usize = arg(&args, 4, "CONNECTIONS", Some(4));
    let requests: u64 = arg(&args, 5, "REQUESTS", Some(200_000));
    let seconds: f64 = arg(&args, 6, "SECONDS", Some(10.0));
    let values: u64 = arg(&args, 7, "VALUES", Some(1000));
    assert!(concurrency > 0 && connections > 0 && values > 0);

    let mut clients = Vec::new();
    for _ in 0..connections {
        let ch = tonic::transport::Endpoint::from_shared(target.clone())
            .expect("target URL")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("connect");
        clients.push(RateLimitServiceClient::new(ch));
    }
    let issued = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let mut client = clients[t % connections].clone();
        let issued = issued.clone();
        let (domain, key) = (domain.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            let (mut ok, mut over, mut errors) = (0u64, 0u64, 0u64);
            loop {
                let i = issued.fetch_add(1, Ordering::Relaxed);
                if i >= requests || Instant::now() >= deadline {
                    break;
                }
                let req = RateLimitRequest {
                    domain: domain.clone(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: key.clone(),
                            value: format!("v{}", i % values),
                        }],
                        ..Default::default()
                    }],
                    hits_addend: 1,
                };
                let t0 = Instant::now();
                let r = client.should_rate_limit(req).await;
                h.saturating_record(t0.elapsed().as_micros() as u64);
                match r {
                    Ok(r) if r.get_ref().overall_code == 1 => ok += 1,
                    Ok(_) => over += 1,
                    Err(_) => errors += 1,
                }
            }
            (h, ok, over, errors)
        }));
    }
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let (mut ok, mut over, mut errors) = (0, 0, 0);
    for t in tasks {
        let (h, o, v, e) = t.await.unwrap();
        all.add(h).unwrap();
        ok += o;
        over += v;
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let calls = ok + over + errors;
    println!(
        "calls_per_s={:.0} p50_us={} p99_us={} p999_us={} max_us={} ok={ok} over={over} errors={errors} calls={calls} secs={elapsed:.2}",
        calls as f64 / elapsed,
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.99),
        all.value_at_quantile(0.999),
        all.max(),
    );
}
