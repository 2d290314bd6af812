//! The layer's in-process cost of a request whose cost is settled after the response,
//! against a plain check, interleaved in one run: the same service (it answers at once,
//! with `x-cost: 3`) behind the same in-process limiter, on three routes:
//!
//! * `check`: a plain check at cost 1;
//! * `settle-header`: reserved at 1, settled from the response's `x-cost` header;
//! * `settle-handle`: reserved at 1, settled by the handler through its `SettleHandle`.
//!
//! `cargo run --release -p floodgate-http --example settle_overhead` (one thread; 5
//! rounds of 200,000 requests per route, rotated; prints ns per request and the ratio
//! to `check`, best round of each).

use std::convert::Infallible;
use std::time::Instant;

use bytes::Bytes;
use floodgate_core::{Kind, Spec};
use floodgate_http::{KeySource, Policy, RateLimiter, Route, SettleHandle, SettleSpec};
use http::{HeaderName, Request, Response};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

const N: u32 = 200_000;
const ROUNDS: usize = 5;

fn limiter() -> Result<RateLimiter, Box<dyn std::error::Error>> {
    let settle = |header: Option<&'static str>| SettleSpec {
        estimate: 1,
        estimate_header: None,
        cost_header: header.map(HeaderName::from_static),
        cost_trailer: None,
        ..SettleSpec::default()
    };
    Ok(RateLimiter::builder()
        // never denies here: the cost of deciding is what is measured
        .policy(
            Policy::new(
                "tokens",
                Spec::new(Kind::TokenBucket, "100000000/s".parse()?),
            )
            .key(KeySource::global()),
        )
        .route(Route::prefix("/check").policy("tokens", 1))
        .route(
            Route::prefix("/settle-header")
                .policy("tokens", 1)
                .settle(settle(Some("x-cost"))),
        )
        .route(
            Route::prefix("/settle-handle")
                .policy("tokens", 1)
                .settle(settle(None)),
        )
        .build()?)
}

async fn backend(req: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(h) = req.extensions().get::<SettleHandle>()
        && h.cost_trailer().is_none()
        && req.uri().path() == "/settle-handle"
    {
        let _ = h.settle(3).await;
    }
    let mut r = Response::new(Full::new(Bytes::from_static(b"ok")));
    r.headers_mut()
        .insert("x-cost", http::HeaderValue::from_static("3"));
    Ok(r)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limiter = limiter()?;
    let mut svc = limiter.layer().layer(tower::service_fn(backend));
    let routes = ["/check", "/settle-header", "/settle-handle"];
    let mut best = [f64::MAX; 3];
    for round in 0..ROUNDS {
        for k in 0..routes.len() {
            let i = (k + round) % routes.len();
            let start = Instant::now();
            for _ in 0..N {
                let req = Request::get(routes[i]).body(Full::new(Bytes::new()))?;
                let resp = svc.ready().await?.call(req).await?;
                assert!(resp.status().is_success(), "{}", resp.status());
            }
            let ns = start.elapsed().as_nanos() as f64 / f64::from(N);
            best[i] = best[i].min(ns);
        }
    }
    println!("route            ns/request  vs check");
    for (i, r) in routes.iter().enumerate() {
        println!("{r:<16} {:>10.0}  {:>7.2}x", best[i], best[i] / best[0]);
    }
    Ok(())
}
