//! `max_in_flight` with a rate, all-or-nothing, on the shared stores: the Redis store and
//! the hybrid store (the Redis on 127.0.0.1:6379, a key prefix of this test's own, deleted
//! at the end). A request denied for concurrency takes no rate token; a request denied by
//! the rate holds no lease; a response dropped gives its lease back.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_core::{Kind, Spec};
use floodgate_engine::{HybridStore, RedisDecisionStore};
use floodgate_http::{
    DecisionStore, InFlightSpec, KeySource, PeerAddr, Policy, RateLimiter, Route,
};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

mod common;

fn req() -> Request<Full<Bytes>> {
    let mut r = Request::get("/").body(Full::new(Bytes::new())).unwrap();
    r.extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([192, 0, 2, 1], 5555))));
    r
}

fn builder() -> floodgate_http::RateLimiterBuilder {
    RateLimiter::builder()
        .policy(
            Policy::max_in_flight(
                "gpu",
                InFlightSpec::new(1, Duration::from_secs(30)).unwrap(),
            )
            .key(KeySource::global()),
        )
        .policy(
            Policy::new("rate", Spec::new(Kind::Gcra, "2/min".parse().unwrap()))
                .key(KeySource::global()),
        )
        .route(Route::prefix("/").policy("gpu", 1).policy("rate", 1))
        .retry_after_jitter(Duration::ZERO)
}

async fn check(limiter: RateLimiter, what: &str) {
    let backend = tower::service_fn(|_req: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let mut svc = limiter.layer().layer(backend);
    let first = svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK, "{what}");
    for _ in 0..3 {
        let r = svc.ready().await.unwrap().call(req()).await.unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{what}");
        let fields = r.headers()["ratelimit"].to_str().unwrap().to_string();
        assert!(fields.starts_with("\"gpu\";r=0"), "{what}: {fields}");
    }
    drop(first);
    // the lease goes back through a spawned release: wait for it
    let mut second = None;
    for _ in 0..100 {
        let r = svc.ready().await.unwrap().call(req()).await.unwrap();
        if r.status() == StatusCode::OK {
            second = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // the three concurrency denials took no token: the rate's second is still there
    assert!(
        second.is_some(),
        "{what}: the rate's second token was taken"
    );
    drop(second);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // the rate is spent: denied by it, and holding no lease
    let third = svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS, "{what}");
    let text = limiter.render_metrics();
    assert!(
        text.contains("floodgate_decisions_total{policy=\"rate\",outcome=\"rejected\"} 1"),
        "{what}: {text}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        limiter
            .render_metrics()
            .contains("floodgate_inflight_leases{policy=\"gpu\"} 0"),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rates_and_leases_all_or_nothing_on_redis_and_hybrid() {
    let prefix = common::redis_prefix("inflight-redis");
    let redis = common::redis_store(&prefix).await;
    let infos = builder().policy_infos().unwrap();
    let shared: Arc<dyn DecisionStore> =
        Arc::new(RedisDecisionStore::new(redis.clone(), &infos).unwrap());
    check(builder().store(shared, "redis").build().unwrap(), "redis").await;
    // the hybrid store, on keys of its own
    let redis2 = common::redis_store(&format!("{prefix}hybrid:")).await;
    let hybrid: Arc<dyn DecisionStore> = Arc::new(
        HybridStore::with_lease(redis2, &infos, 1, 1, Duration::from_secs(1), 1000).unwrap(),
    );
    check(builder().store(hybrid, "hybrid").build().unwrap(), "hybrid").await;
    common::delete_redis_keys(&prefix);
}
