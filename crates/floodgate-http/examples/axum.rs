//! floodgate in an axum app: 100 requests per minute per client IP (GCRA, bursts of 10)
//! plus 5000 per minute for everyone, `/search` costing 10.
//!
//! `cargo run -p floodgate-http --example axum`, then `curl -i localhost:3000/`.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use floodgate_core::{Kind, Spec};
use floodgate_http::{KeySource, Policy, RateLimiter, Route};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut per_ip = Spec::new(Kind::Gcra, "100/min".parse()?);
    per_ip.capacity = Some(10);
    let limiter = RateLimiter::builder()
        .policy(Policy::new("per-ip", per_ip))
        .policy(
            Policy::new("global", Spec::new(Kind::Gcra, "5000/min".parse()?))
                .key(KeySource::global()),
        )
        .route(
            Route::prefix("/search")
                .policy("per-ip", 10)
                .policy("global", 1),
        )
        .route(Route::prefix("/").policy("per-ip", 1).policy("global", 1))
        // axum puts the peer address in ConnectInfo (see into_make_service_with_connect_info)
        .peer(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/search", get(|| async { "results\n" }))
        .layer(limiter.layer());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
