//! The layer's settle paths on an axum app: the handler settles through the handle in
//! its extensions, the response header settles, bad input settles nothing and says so.
//! A body wrapped in `SettleOnTrailers` and dropped before its end (the client left) is
//! read on to its trailer and settled from it, or charged the abort cost once the drain
//! timeout passes; a handle dropped unsettled is charged the abort cost; a settle under
//! way on a slow store when the client leaves is finished.

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use floodgate_core::{Kind, Spec};
use floodgate_engine::headers::{HeaderOptions, ResetFormat};
use floodgate_http::settle::{SettleError, Settled};
use floodgate_http::{
    KeySource, Policy, RateLimiter, Route, SettleHandle, SettleOnTrailers, SettleSpec,
};
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
        ..SettleSpec::default()
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

/// A limiter whose budget of 1,000 units refills by 1,000 per 1,000 h (under one unit over
/// a test's seconds), so `X-RateLimit-Remaining` shows exactly what was charged, on a
/// route settled from the trailer `x-cost`, with `abort` for the abort options.
fn trailer_limiter(abort: impl FnOnce(&mut SettleSpec)) -> RateLimiter {
    let mut spec = SettleSpec {
        cost_trailer: Some(HeaderName::from_static("x-cost")),
        ..SettleSpec::default()
    };
    abort(&mut spec);
    RateLimiter::builder()
        .policy(
            Policy::new(
                "tokens",
                Spec::new(Kind::TokenBucket, "1000/1000h".parse().unwrap()),
            )
            .key(KeySource::global()),
        )
        .route(Route::prefix("/").policy("tokens", 1).settle(spec))
        .headers(HeaderOptions {
            legacy: Some(ResetFormat::Delta),
            ..HeaderOptions::default()
        })
        .build()
        .unwrap()
}

type Streamed = (
    http_body_util::channel::Sender<bytes::Bytes, std::io::Error>,
    SettleHandle,
);

/// An app whose `/stream` streams a body the test writes (the sending end and a clone of
/// the handle go to `out`), wrapped in `SettleOnTrailers`; `/drop` drops its handle.
fn streaming_app(
    limiter: &RateLimiter,
    out: tokio::sync::mpsc::UnboundedSender<Streamed>,
) -> Router {
    Router::new()
        .route(
            "/stream",
            get(move |Extension(h): Extension<SettleHandle>| {
                let out = out.clone();
                async move {
                    let (tx, body) = http_body_util::channel::Channel::new(1);
                    out.send((tx, h.clone())).unwrap();
                    axum::body::Body::new(SettleOnTrailers::new(body, Some(h)))
                }
            }),
        )
        .route(
            "/drop",
            get(|Extension(h): Extension<SettleHandle>| async move {
                drop(h);
                "the cost is never reported"
            }),
        )
        .layer(limiter.layer())
}

fn cost(n: u64) -> http::HeaderMap {
    let mut t = http::HeaderMap::new();
    t.insert("x-cost", n.into());
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_dropped_before_its_trailer_is_read_on_and_settled_from_it() {
    use http_body_util::BodyExt;
    let limiter = trailer_limiter(|_| {});
    let (out, mut streams) = tokio::sync::mpsc::unbounded_channel();
    let app = streaming_app(&limiter, out);
    let resp = get_(&app, None, "/stream").await;
    assert_eq!(remaining(&resp), 999);
    let (mut tx, handle) = streams.recv().await.unwrap();
    let mut body = resp.into_body();
    tx.send_data("first".into()).await.unwrap();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "first"
    );
    // the client goes away: the response and its body are dropped
    drop(body);
    // the rest is read all the same, and the trailer settles
    tx.send_data("second".into()).await.unwrap();
    tx.send_trailers(cost(400)).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while handle.settled().is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let settled = handle.settled().expect("settled from the trailer");
    assert_eq!(
        (settled[0].charged, settled[0].decision.remaining),
        (399, 600)
    );
    let m = limiter.metrics();
    while m.settle_abandoned_count("settled") == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        (
            m.settle_abandoned_count("settled"),
            m.settle_abandoned_count("abort_cost")
        ),
        (1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_body_dropped_is_charged_the_abort_cost_after_the_drain_timeout() {
    let limiter = trailer_limiter(|s| {
        s.abort_cost = Some(50);
        s.abort_drain_timeout = std::time::Duration::from_millis(200);
    });
    let (out, mut streams) = tokio::sync::mpsc::unbounded_channel();
    let app = streaming_app(&limiter, out);
    let resp = get_(&app, None, "/stream").await;
    let (mut tx, handle) = streams.recv().await.unwrap();
    assert_eq!(handle.abort_cost(), 50);
    drop(handle);
    drop(resp);
    let left = std::time::Instant::now();
    // the body is read until the drain timeout, then dropped: the sends fail
    while tx.send_data("more".into()).await.is_ok() {
        assert!(
            left.elapsed() < std::time::Duration::from_secs(5),
            "read on"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let read_for = left.elapsed();
    assert!(
        read_for >= std::time::Duration::from_millis(150)
            && read_for < std::time::Duration::from_secs(2),
        "read for {read_for:?}, not the 200 ms drain timeout"
    );
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // 50 charged, and the 1 this request is admitted at
    let r = get_(&app, None, "/drop").await;
    assert_eq!(remaining(&r), 1000 - 50 - 1);
    let m = limiter.metrics();
    assert_eq!(
        (
            m.settle_abandoned_count("settled"),
            m.settle_abandoned_count("abort_cost")
        ),
        (0, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_body_longer_than_the_drain_bytes_is_charged_the_abort_cost() {
    let limiter = trailer_limiter(|s| {
        s.abort_cost = Some(50);
        s.abort_drain_bytes = 8;
    });
    let (out, mut streams) = tokio::sync::mpsc::unbounded_channel();
    let app = streaming_app(&limiter, out);
    let resp = get_(&app, None, "/stream").await;
    let (mut tx, handle) = streams.recv().await.unwrap();
    drop((handle, resp));
    // 8 octets are read on; the 9th ends the reading, and the body goes
    tx.send_data("12345678".into()).await.unwrap();
    tx.send_data("9".into()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while tx.send_data("more".into()).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "read on past the bound"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let r = get_(&app, None, "/drop").await;
    assert_eq!(remaining(&r), 1000 - 50 - 1);
    assert_eq!(limiter.metrics().settle_abandoned_count("abort_cost"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_dropped_unsettled_is_charged_the_abort_cost() {
    // no abort cost: the estimate stays
    let app = streaming_app(
        &trailer_limiter(|_| {}),
        tokio::sync::mpsc::unbounded_channel().0,
    );
    assert_eq!(remaining(&get_(&app, None, "/drop").await), 999);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(remaining(&get_(&app, None, "/drop").await), 998);
    // an abort cost of 50: charged once the last clone is gone (49 on the estimate)
    let limiter = trailer_limiter(|s| s.abort_cost = Some(50));
    let app = streaming_app(&limiter, tokio::sync::mpsc::unbounded_channel().0);
    assert_eq!(remaining(&get_(&app, None, "/drop").await), 999);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(remaining(&get_(&app, None, "/drop").await), 1000 - 50 - 1);
    // a body that ends without its trailer: the same
    let (out, mut streams) = tokio::sync::mpsc::unbounded_channel();
    let app = streaming_app(&limiter, out);
    let resp = get_(&app, None, "/stream").await;
    let (tx, handle) = streams.recv().await.unwrap();
    drop((tx, handle));
    use http_body_util::BodyExt;
    assert!(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .trailers()
            .is_none()
    );
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // the two dropped handles above and this body: 50 each; this request's estimate: 1
    assert_eq!(
        remaining(&get_(&app, None, "/drop").await),
        1000 - 3 * 50 - 1
    );
}

/// The in-process store, with every settle taking 50 ms (a store across a network).
struct SlowSettle(floodgate_engine::LocalStore);

impl floodgate_engine::DecisionStore for SlowSettle {
    fn check<'a>(
        &'a self,
        checks: &'a [floodgate_engine::StoreCheck<'a>],
    ) -> floodgate_engine::store::BoxFuture<
        'a,
        Result<floodgate_core::multi::MultiDecision, floodgate_engine::StoreError>,
    > {
        self.0.check(checks)
    }

    fn reserve<'a>(
        &'a self,
        checks: &'a [floodgate_engine::StoreCheck<'a>],
    ) -> floodgate_engine::store::BoxFuture<
        'a,
        Result<
            (
                floodgate_core::multi::MultiDecision,
                Option<floodgate_engine::Reservation>,
            ),
            floodgate_engine::StoreError,
        >,
    > {
        self.0.reserve(checks)
    }

    fn settle(
        &self,
        reservation: floodgate_engine::Reservation,
        actual: u64,
    ) -> floodgate_engine::store::BoxFuture<'_, Result<Settled, floodgate_engine::StoreError>> {
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            self.0.settle(reservation, actual).await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_under_way_when_the_client_leaves_is_finished() {
    let plain = trailer_limiter(|_| {});
    let store = SlowSettle(floodgate_engine::LocalStore::new(plain.policies(), 1000).unwrap());
    let limiter = RateLimiter::builder()
        .policy(
            Policy::new(
                "tokens",
                Spec::new(Kind::TokenBucket, "1000/1000h".parse().unwrap()),
            )
            .key(KeySource::global()),
        )
        .route(Route::prefix("/").policy("tokens", 1).settle(SettleSpec {
            cost_header: Some(HeaderName::from_static("x-cost")),
            ..SettleSpec::default()
        }))
        .headers(HeaderOptions {
            legacy: Some(ResetFormat::Delta),
            ..HeaderOptions::default()
        })
        .store(std::sync::Arc::new(store), "slow-settle")
        .build()
        .unwrap();
    let app = Router::new()
        .route("/used", get(|| async { ([("x-cost", "400")], "used 400") }))
        .route("/none", get(|| async { "no cost" }))
        .layer(limiter.layer());
    // the client leaves while the settle from the header is under way
    let gone = tokio::time::timeout(
        std::time::Duration::from_millis(10),
        get_(&app, None, "/used"),
    )
    .await;
    assert!(gone.is_err(), "the settle was to take 50 ms");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // 400 charged; this request's estimate: 1
    assert_eq!(remaining(&get_(&app, None, "/none").await), 1000 - 400 - 1);
}
