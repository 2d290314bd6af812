//! A small HTTP server to point `floodgate load` at (used by scripts/bench-load.sh and for
//! trying the CLI by hand). Loopback only.
//!
//! ```text
//! cargo run --release -p floodgate-load --example target_server -- 8080
//!     200 "ok" to everything, as fast as it can
//! cargo run --release -p floodgate-load --example target_server -- 8080 fixed-window 20/2s
//!     one limit for all requests, decided on the wall clock: 200 or 429 + Retry-After
//! ```
//! Optional third/fourth argument: THREADS (default: all cores).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use floodgate_core::{AnyAlgorithm, Clock, Kind, Limiter, Rate, Spec, WallClock};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: target_server PORT [ALGORITHM RATE] [--threads N]";
    let port: u16 = args
        .first()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{usage}"));
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .and_then(|t| t.parse().ok());
    let limit: Option<(Spec, AnyAlgorithm)> = match (args.get(1), args.get(2)) {
        (Some(k), Some(r)) if k != "--threads" => {
            let kind: Kind = k.parse().unwrap_or_else(|e| panic!("{e}"));
            let rate: Rate = r.parse().unwrap_or_else(|e| panic!("{e}"));
            let spec = Spec::new(kind, rate);
            let alg = spec.build().unwrap_or_else(|e| panic!("{e}"));
            Some((spec, alg))
        }
        _ => None,
    };
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(t) = threads {
        rt.worker_threads(t);
    }
    rt.enable_all().build().unwrap().block_on(async move {
        let app = match limit {
            None => Router::new().route("/", get(|| async { "ok" })),
            Some((spec, alg)) => {
                let policy = format!(
                    "\"{}\";q={};w={}",
                    spec.kind,
                    spec.rate.count(),
                    floodgate_core::decision::ceil_secs(spec.window())
                );
                let state = Arc::new((Limiter::new(alg), policy));
                Router::new().route("/", get(limited)).with_state(state)
            }
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        eprintln!("listening on http://{}/", listener.local_addr().unwrap());
        axum::serve(listener, app).await.unwrap();
    });
}

async fn limited(State(s): State<Arc<(Limiter<AnyAlgorithm>, String)>>) -> impl IntoResponse {
    let d = s.0.check(WallClock.now(), 1);
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&s.1) {
        h.insert("ratelimit-policy", v);
    }
    if d.allowed {
        (StatusCode::OK, h, "ok")
    } else {
        let secs = d.retry_after.map_or(1, floodgate_core::decision::ceil_secs);
        h.insert("retry-after", HeaderValue::from(secs));
        (StatusCode::TOO_MANY_REQUESTS, h, "rate limited")
    }
}
