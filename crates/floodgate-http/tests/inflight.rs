//! `max_in_flight` through the tower layer, in process: the lease is held until the
//! response body ends or is dropped, combined with a rate all-or-nothing (a request
//! denied by the rate holds no lease; one denied for concurrency takes no rate token),
//! the bounded queue, the headers and the metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_core::{Kind, Spec};
use floodgate_http::{InFlightSpec, KeySource, PeerAddr, Policy, RateLimiter, Route};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

mod common;
use common::gated_backend;

fn req(path: &str) -> Request<Full<Bytes>> {
    let mut r = Request::get(path).body(Full::new(Bytes::new())).unwrap();
    r.extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([192, 0, 2, 1], 5555))));
    r
}

fn limiter(spec: InFlightSpec, rate: Option<&str>) -> RateLimiter {
    let mut b = RateLimiter::builder()
        .policy(Policy::max_in_flight("gpu", spec).key(KeySource::global()))
        .retry_after_jitter(Duration::ZERO);
    let mut route = Route::prefix("/").policy("gpu", 1);
    if let Some(r) = rate {
        b = b.policy(
            Policy::new("rate", Spec::new(Kind::Gcra, r.parse().unwrap())).key(KeySource::global()),
        );
        route = route.policy("rate", 1);
    }
    b.route(route).build().unwrap()
}

#[tokio::test]
async fn a_lease_lives_as_long_as_its_response_body() {
    let gate = Arc::new(Semaphore::new(100));
    let l = limiter(InFlightSpec::new(2, Duration::from_secs(30)).unwrap(), None);
    let mut svc = l.layer().layer(gated_backend(gate, StatusCode::OK));
    let a = svc.ready().await.unwrap().call(req("/")).await.unwrap();
    assert_eq!(a.status(), StatusCode::OK);
    assert_eq!(
        a.headers()["ratelimit-policy"],
        "\"gpu\";q=2;qu=\"concurrent-requests\""
    );
    assert_eq!(a.headers()["ratelimit"], "\"gpu\";r=1;t=0");
    let b = svc.ready().await.unwrap().call(req("/")).await.unwrap();
    assert_eq!(b.headers()["ratelimit"], "\"gpu\";r=0;t=0");
    // two bodies not yet read: both leases held
    let c = svc.ready().await.unwrap().call(req("/")).await.unwrap();
    assert_eq!(c.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(c.headers()["retry-after"], "30");
    assert_eq!(c.headers()["ratelimit"], "\"gpu\";r=0;t=30");
    let gauge = |l: &RateLimiter| {
        l.render_metrics()
            .lines()
            .find(|s| s.starts_with("floodgate_inflight_leases{policy=\"gpu\"}"))
            .map(|s| s.rsplit(' ').next().unwrap().to_string())
    };
    assert_eq!(gauge(&l).as_deref(), Some("2"));
    // reading a body to its end releases; dropping one unread releases too
    a.into_body().collect().await.unwrap();
    drop(b);
    assert_eq!(gauge(&l).as_deref(), Some("0"));
    for _ in 0..2 {
        let r = svc.ready().await.unwrap().call(req("/")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        std::mem::forget(r); // a holder that never gives its lease back
    }
    let r = svc.ready().await.unwrap().call(req("/")).await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn with_a_rate_all_or_nothing() {
    let gate = Arc::new(Semaphore::new(100));
    // 1 in flight, and a rate of 2 per minute (capacity 2)
    let l = limiter(
        InFlightSpec::new(1, Duration::from_secs(30)).unwrap(),
        Some("2/min"),
    );
    let mut svc = l.layer().layer(gated_backend(gate, StatusCode::OK));
    let first = svc.ready().await.unwrap().call(req("/")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // denied for concurrency while the first runs: no rate token is taken
    for _ in 0..3 {
        let r = svc.ready().await.unwrap().call(req("/")).await.unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            r.headers()["ratelimit"]
                .to_str()
                .unwrap()
                .contains("\"gpu\";r=0")
        );
    }
    drop(first);
    // the rate still has its second token
    let second = svc.ready().await.unwrap().call(req("/")).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK, "{:?}", second.headers());
    drop(second);
    // the rate is spent: denied by it, and that request holds no lease
    let third = svc.ready().await.unwrap().call(req("/")).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let text = l.render_metrics();
    assert!(
        text.contains("floodgate_inflight_leases{policy=\"gpu\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("floodgate_decisions_total{policy=\"rate\",outcome=\"rejected\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("floodgate_decisions_total{policy=\"gpu\",outcome=\"rejected\"} 3"),
        "{text}"
    );
}

#[tokio::test]
async fn the_queue_waits_for_a_place_and_is_bounded() {
    let gate = Arc::new(Semaphore::new(0));
    let spec = InFlightSpec::new(1, Duration::from_secs(30))
        .unwrap()
        .with_queue(1, Duration::from_millis(300))
        .unwrap();
    let l = limiter(spec, None);
    let svc = l.layer().layer(gated_backend(gate.clone(), StatusCode::OK));
    // one runs (the backend holds it), one waits, the third finds the queue full
    let running = tokio::spawn(svc.clone().oneshot(req("/")));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waiting = tokio::spawn(svc.clone().oneshot(req("/")));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let full = svc.clone().oneshot(req("/")).await.unwrap();
    assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
    // the first ends: the waiter gets its place
    gate.add_permits(2);
    let first = running.await.unwrap().unwrap();
    first.into_body().collect().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    drop(second);
    // a waiter past its timeout: 429
    let holder = tokio::spawn(svc.clone().oneshot(req("/")));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = std::time::Instant::now();
    let late = svc.clone().oneshot(req("/")).await.unwrap();
    assert_eq!(late.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    gate.add_permits(1);
    drop(holder.await);
}

#[test]
fn bad_parameters_are_refused_with_their_name() {
    let e = InFlightSpec::new(0, Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_in_flight"), "{e}");
    let e = InFlightSpec::new(1, Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("lease ttl"), "{e}");
    let e = InFlightSpec::new(1, Duration::from_secs(100_000))
        .unwrap_err()
        .to_string();
    assert!(e.contains("lease ttl"), "{e}");
    let e = InFlightSpec::new(1, Duration::from_secs(1))
        .unwrap()
        .with_queue(5, Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("queue_timeout"), "{e}");
}
