//! # floodgate-client
//!
//! The client side of rate limiting: "the server-side limiter is the guardrail; the
//! client-side limiter is the driver who slows down before the curve."
//!
//! * [`headers`]: read `RateLimit` / `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers),
//!   `Retry-After` and legacy `X-RateLimit-*`, safely, with every wait capped. Pure.
//! * [`pacing`]: spread the `r` remaining requests over the `t` seconds to reset, per host and
//!   per policy, instead of bursting then pausing.
//! * [`backoff`]: exponential backoff with full, equal or decorrelated jitter, a retry budget,
//!   and the idempotency rule.
//! * [`concurrency`]: adaptive concurrency limits (AIMD, Vegas, Gradient2, windowed) and a
//!   limiter with permits, plus a load-shedding tower layer for servers.
//! * [`Polite`]: the engine that ties them together, used by [`PoliteLayer`] (tower, for
//!   hyper clients) and [`PoliteMiddleware`] (reqwest-middleware).
//!
//! A hyper client with pacing, retries and an adaptive concurrency limit (docs/client.md's
//! example):
//!
//! ```no_run
//! use bytes::Bytes;
//! use floodgate_client::concurrency::{AdaptiveLimiter, Gradient2, Gradient2Config, Windowed, WindowedConfig};
//! use floodgate_client::{Polite, PoliteConfig, PoliteLayer};
//! use floodgate_core::MonotonicClock;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use std::sync::Arc;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = AdaptiveLimiter::new(
//!     Windowed::new(Gradient2::new(Gradient2Config::default())?, WindowedConfig::default()),
//!     Arc::new(MonotonicClock::new()),
//! );
//! let engine = Polite::new(PoliteConfig::default())?.with_limiter(limiter.clone());
//! let mut client = ServiceBuilder::new()
//!     .layer(PoliteLayer::new(engine))
//!     .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
//! let req = http::Request::get("http://127.0.0.1:8080/").body(Full::new(Bytes::new()))?;
//! let resp = client.ready().await?.call(req).await?;
//! println!("{} (limit {}, in flight {})", resp.status(), limiter.limit(), limiter.inflight());
//! # Ok(()) }
//! ```
//!
//! Time is always injected ([`floodgate_core::Clock`]); [`TokioElapsedClock`] counts
//! nanoseconds on tokio's (pausable) monotonic clock so tests run on virtual time.
#![warn(missing_docs)]

pub mod backoff;
pub mod concurrency;
pub mod error;
pub mod headers;
pub mod pacing;
pub mod polite;
#[cfg(feature = "reqwest")]
mod reqwest_mw;
pub mod tower;

pub use error::ConfigError;
pub use polite::{Attempt, Polite, PoliteConfig, PoliteStats, Sending, Verdict};
#[cfg(feature = "reqwest")]
pub use reqwest_mw::PoliteMiddleware;
pub use tower::{PoliteLayer, PoliteService, ReplayBody, Streaming};

use floodgate_core::{Clock, Nanos};

/// A [`Clock`] reading the [`Nanos`] elapsed on tokio's monotonic clock since the clock
/// was made (0 at creation), so that `tokio::time::pause()` and `advance()` drive pacing,
/// budgets and RTT samples in tests.
///
/// Invariants: readings start at 0, never go backwards and never follow a wall-clock
/// step; they are not Unix time (floodgate-engine's `TokioWallClock` is, for windows
/// aligned on the wall clock). Outside a tokio runtime it runs on the std monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct TokioElapsedClock {
    origin: tokio::time::Instant,
}

impl TokioElapsedClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        TokioElapsedClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioElapsedClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioElapsedClock {
    fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }
}
