//! Adaptive policies through the tower layer, in process: 503 with `Retry-After` when
//! shed (the lowest class first, a full queue's waiter evicted by a higher class), the
//! permit held to the response head or the body's end, drops from 5xx, with a rate
//! all-or-nothing, dry run, and the metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_core::{Kind, Spec};
use floodgate_http::adaptive::{AdaptivePolicy, AdaptiveSpec, AlgorithmKind, ClassMatch, Latency};
use floodgate_http::{KeySource, PeerAddr, Policy, RateLimiter, Route};
use http::{HeaderName, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::sync::Semaphore;
use tower::{Layer, ServiceExt};

mod common;
use common::gated_backend;

const PRIORITY: HeaderName = HeaderName::from_static("x-priority");

fn req(priority: Option<&str>) -> Request<Full<Bytes>> {
    let mut b = Request::get("/");
    if let Some(p) = priority {
        b = b.header(PRIORITY, p);
    }
    let mut r = b.body(Full::new(Bytes::new())).unwrap();
    r.extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([192, 0, 2, 1], 5555))));
    r
}

/// L = `limit` exactly (AIMD with floor = ceiling): `critical` (header) with half, the
/// rest `sheddable` with nothing guaranteed.
fn policy(limit: usize, latency: Latency) -> Policy {
    let mut spec = AdaptiveSpec::new(AlgorithmKind::Aimd, limit, limit, limit).unwrap();
    spec.latency = latency;
    let p = AdaptivePolicy::new(spec)
        .class("critical", 0.5, [ClassMatch::header(PRIORITY, "critical")])
        .unwrap()
        .class("sheddable", 0.0, [])
        .unwrap();
    Policy::adaptive("backend", p)
}

fn metric(l: &RateLimiter, prefix: &str) -> Option<String> {
    l.render_metrics()
        .lines()
        .find(|s| s.starts_with(prefix))
        .map(|s| s.rsplit(' ').next().unwrap().to_string())
}

#[tokio::test]
async fn the_lowest_class_is_shed_first_with_503_and_retry_after() {
    let gate = Arc::new(Semaphore::new(0));
    let l = RateLimiter::builder()
        .policy(policy(4, Latency::Head))
        .build()
        .unwrap();
    let svc = l.layer().layer(gated_backend(gate.clone(), StatusCode::OK));
    // two sheddable requests in flight (borrowing), held by the backend
    let mut running = Vec::new();
    for _ in 0..2 {
        let s = svc.clone();
        running.push(tokio::spawn(s.oneshot(req(None))));
    }
    tokio::task::yield_now().await;
    let in_flight = |class: &str| {
        metric(
            &l,
            &format!("floodgate_adaptive_in_flight{{policy=\"backend\",class=\"{class}\"}}"),
        )
    };
    // critical asks: its guarantee (2 of 4) is kept from sheddable from now on
    let s = svc.clone();
    running.push(tokio::spawn(s.oneshot(req(Some("critical")))));
    tokio::task::yield_now().await;
    assert_eq!(in_flight("sheddable").as_deref(), Some("2"));
    assert_eq!(in_flight("critical").as_deref(), Some("1"));
    let shed = svc.clone().oneshot(req(None)).await.unwrap();
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["retry-after"], "1");
    let body = shed.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("sheds class \"sheddable\""),
        "{body:?}"
    );
    // critical still gets in: the last place
    let s = svc.clone();
    running.push(tokio::spawn(s.oneshot(req(Some("critical")))));
    tokio::task::yield_now().await;
    assert_eq!(in_flight("critical").as_deref(), Some("2"));
    // full: critical too is refused (never more than L in flight)
    let full = svc.clone().oneshot(req(Some("critical"))).await.unwrap();
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    gate.add_permits(10);
    for r in running {
        assert_eq!(r.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    assert_eq!(in_flight("sheddable").as_deref(), Some("0"));
    assert_eq!(
        metric(
            &l,
            "floodgate_adaptive_shed_total{policy=\"backend\",class=\"sheddable\"}"
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        metric(
            &l,
            "floodgate_adaptive_shed_total{policy=\"backend\",class=\"critical\"}"
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        metric(&l, "floodgate_adaptive_limit{policy=\"backend\"}").as_deref(),
        Some("4")
    );
    assert_eq!(
        metric(
            &l,
            "floodgate_decisions_total{policy=\"backend\",outcome=\"rejected\"}"
        )
        .as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn latency_end_holds_the_permit_until_the_body_ends() {
    let gate = Arc::new(Semaphore::new(100));
    for (latency, held_by_body) in [(Latency::End, true), (Latency::Head, false)] {
        let l = RateLimiter::builder()
            .policy(policy(1, latency))
            .build()
            .unwrap();
        let svc = l.layer().layer(gated_backend(gate.clone(), StatusCode::OK));
        let a = svc.clone().oneshot(req(None)).await.unwrap();
        assert_eq!(a.status(), StatusCode::OK);
        let b = svc.clone().oneshot(req(None)).await.unwrap();
        assert_eq!(
            b.status() == StatusCode::SERVICE_UNAVAILABLE,
            held_by_body,
            "{latency:?}"
        );
        a.into_body().collect().await.unwrap();
        drop(b);
        let c = svc.clone().oneshot(req(None)).await.unwrap();
        assert_eq!(c.status(), StatusCode::OK, "{latency:?}");
        // one sample per completed request: the latency histogram counts them
        let samples = metric(
            &l,
            "floodgate_adaptive_latency_seconds_count{policy=\"backend\"}",
        );
        let want = if held_by_body { "1" } else { "3" };
        assert_eq!(samples.as_deref(), Some(want), "{latency:?}");
    }
}

#[tokio::test]
async fn server_errors_are_drops_that_bring_the_limit_down() {
    let gate = Arc::new(Semaphore::new(1000));
    let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 2, 20, 20).unwrap();
    let l = RateLimiter::builder()
        .policy(Policy::adaptive("backend", AdaptivePolicy::new(spec)))
        .build()
        .unwrap();
    let svc = l
        .layer()
        .layer(gated_backend(gate, StatusCode::BAD_GATEWAY));
    for _ in 0..30 {
        let r = svc.clone().oneshot(req(None)).await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    }
    // floor(L x 0.9) per drop, down to the floor
    assert_eq!(
        metric(&l, "floodgate_adaptive_limit{policy=\"backend\"}").as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn with_a_rate_a_request_must_pass_both() {
    let gate = Arc::new(Semaphore::new(0));
    let l = RateLimiter::builder()
        .policy(policy(1, Latency::Head))
        .policy(
            Policy::new("rate", Spec::new(Kind::Gcra, "1/min".parse().unwrap()))
                .key(KeySource::global()),
        )
        .route(Route::prefix("/").policy("backend", 1).policy("rate", 1))
        .retry_after_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let svc = l.layer().layer(gated_backend(gate.clone(), StatusCode::OK));
    let first = tokio::spawn(svc.clone().oneshot(req(None)));
    tokio::task::yield_now().await;
    // the concurrency limit refuses (503) before the rate is asked: no token taken
    let r = svc.clone().oneshot(req(None)).await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    gate.add_permits(10);
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    // a place is free, the rate's one token is spent: 429, and the permit comes back
    let r = svc.clone().oneshot(req(None)).await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        metric(
            &l,
            "floodgate_adaptive_in_flight{policy=\"backend\",class=\"sheddable\"}"
        )
        .as_deref(),
        Some("0")
    );
}

#[tokio::test]
async fn dry_run_counts_and_never_refuses() {
    let gate = Arc::new(Semaphore::new(0));
    let l = RateLimiter::builder()
        .policy(policy(1, Latency::Head).dry_run(true))
        .build()
        .unwrap();
    let svc = l.layer().layer(gated_backend(gate.clone(), StatusCode::OK));
    let running: Vec<_> = (0..3)
        .map(|_| tokio::spawn(svc.clone().oneshot(req(None))))
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(
        metric(
            &l,
            "floodgate_adaptive_in_flight{policy=\"backend\",class=\"sheddable\"}"
        )
        .as_deref(),
        Some("3")
    );
    gate.add_permits(10);
    for r in running {
        assert_eq!(r.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    let would = metric(
        &l,
        "floodgate_decisions_total{policy=\"backend\",outcome=\"rejected_dry_run\"}",
    );
    assert!(would.is_some_and(|n| n != "0"));
    assert_eq!(
        metric(
            &l,
            "floodgate_decisions_total{policy=\"backend\",outcome=\"rejected\"}"
        )
        .as_deref(),
        Some("0")
    );
}

#[tokio::test]
async fn a_critical_request_takes_a_full_queues_place_from_a_sheddable_one() {
    let gate = Arc::new(Semaphore::new(0));
    let mut spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 1, 1, 1)
        .unwrap()
        .with_queue(1, Duration::from_secs(30))
        .unwrap();
    spec.latency = Latency::Head;
    let p = AdaptivePolicy::new(spec)
        .class("critical", 0.5, [ClassMatch::header(PRIORITY, "critical")])
        .unwrap()
        .class("sheddable", 0.0, [])
        .unwrap();
    let l = RateLimiter::builder()
        .policy(Policy::adaptive("backend", p))
        .build()
        .unwrap();
    let svc = l.layer().layer(gated_backend(gate.clone(), StatusCode::OK));
    // one sheddable request in flight (the limit), one waiting (the queue)
    let running = tokio::spawn(svc.clone().oneshot(req(None)));
    tokio::task::yield_now().await;
    let waiting = tokio::spawn(svc.clone().oneshot(req(None)));
    tokio::task::yield_now().await;
    // critical takes the waiting place: the sheddable waiter gets the queue-full 503
    let critical = tokio::spawn(svc.clone().oneshot(req(Some("critical"))));
    let evicted = waiting.await.unwrap().unwrap();
    assert_eq!(evicted.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(evicted.headers()["retry-after"], "1");
    let queue_full = l.render_metrics().lines().any(|s| {
        s.starts_with("floodgate_requests_total{") && s.contains("queue_full") && s.ends_with(" 1")
    });
    assert!(queue_full, "{}", l.render_metrics());
    // a second sheddable request finds the queue full of critical: refused too
    let shed = svc.clone().oneshot(req(None)).await.unwrap();
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    gate.add_permits(2);
    assert_eq!(running.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(critical.await.unwrap().unwrap().status(), StatusCode::OK);
}
