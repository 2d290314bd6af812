//! The layer's settle paths on an axum app: the handler settles through the handle in
//! its extensions, the response header settles, bad input settles nothing and says so.

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use floodgate_core::{Kind, Spec};
use floodgate_engine::headers::{HeaderOptions, ResetFormat};
use floodgate_http::settle::SettleError;
use floodgate_http::{KeySource, Policy, RateLimiter, Route, SettleHandle, SettleSpec};
use http::{HeaderName, Request, StatusCode};
use tower::ServiceExt;

fn limiter(spec: SettleSpec) -> RateLimiter {
    RateLimiter::builder()
        .policy(
            Policy::new(
                "tokens",
                Spec::new(Kind::TokenBucket, "1000/min".parse().unwrap()),
            )
            .key(KeySource::global()),
        )
        .route(Route::prefix("/").policy("tokens", 1).settle(spec))
        .headers(HeaderOptions {
            legacy: Some(ResetFormat::Delta),
            ..HeaderOptions::default()
        })
        // exact `Retry-After` values below: no jitter (it adds uniform(0, 1 s) by default)
        .retry_after_jitter(std::time::Duration::ZERO)
        .build()
        .unwrap()
}

fn spec(estimate: u64) -> SettleSpec {
    SettleSpec {
        estimate,
        estimate_header: Some(HeaderName::from_static("x-estimate")),
        cost_header: Some(HeaderName::from_static("x-cost")),
        cost_trailer: None,
    }
}

/// `X-RateLimit-Remaining` (the `RateLimit` field's `r` counts in sustained-rate terms).
fn remaining(resp: &http::Response<impl Sized>) -> u64 {
    let v = resp.headers()["x-ratelimit-remaining"].to_str().unwrap();
    v.parse().unwrap()
}

async fn get_(app: &Router, est: Option<&str>, path: &str) -> http::Response<axum::body::Body> {
    let mut req = Request::get(path);
    if let Some(e) = est {
        req = req.header("x-estimate", e);
    }
    app.clone()
        .oneshot(req.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_handler_and_the_response_header_settle_and_the_fields_show_it() {
    let limiter = limiter(spec(1));
    let app = Router::new()
        .route(
            "/handle",
            get(|Extension(h): Extension<SettleHandle>| async move {
                assert_eq!(h.estimate(), 1);
                let s = h.settle(300).await.unwrap();
                assert_eq!(s[0].charged, 299);
                // a second settle is refused, and charges nothing
                assert_eq!(h.settle(5).await.unwrap_err(), SettleError::AlreadySettled);
                "used 300"
            }),
        )
        .route(
            "/header",
            get(|| async { ([("x-cost", "250")], "used 250") }),
        )
        .route("/refund", get(|| async { ([("x-cost", "20")], "used 20") }))
        .route("/bad", get(|| async { ([("x-cost", "-5")], "bad") }))
        .route("/none", get(|| async { "no cost" }))
        .layer(limiter.layer());
    let r = get_(&app, None, "/handle").await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 700));
    let r = get_(&app, None, "/header").await;
    assert_eq!(remaining(&r), 450);
    // estimated at 100 by the client, used 20: 80 come back
    let r = get_(&app, Some("100"), "/refund").await;
    assert_eq!(remaining(&r), 430);
    // a malformed cost settles nothing: the estimate of 1 stays, the fields show it
    let r = get_(&app, None, "/bad").await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 429));
    let r = get_(&app, None, "/none").await;
    assert_eq!(remaining(&r), 428);
    // a malformed estimate is refused before anything is charged
    for bad in ["-1", "NaN", "1.5", "99999999999999999999"] {
        let r = get_(&app, Some(bad), "/none").await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    // an estimate above the limit can never be admitted
    let r = get_(&app, Some("1001"), "/none").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(start_paused = true)]
async fn a_debt_denies_until_repaid() {
    let limiter = limiter(spec(1));
    let app = Router::new()
        .route(
            "/big",
            get(|| async { ([("x-cost", "1300")], "used 1300") }),
        )
        .layer(limiter.layer());
    let r = get_(&app, None, "/big").await;
    assert_eq!((r.status(), remaining(&r)), (StatusCode::OK, 0));
    let r = get_(&app, None, "/big").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // 300 units of debt and the 1 asked for, at 1000/min: 18.06 s, rounded up
    assert_eq!(retry, 19, "a debt of 300 units at 1000/min");
    assert_eq!(r.headers()["ratelimit"], "\"tokens\";r=0;t=19");
}
