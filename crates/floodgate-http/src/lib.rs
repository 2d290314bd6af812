//! # floodgate-http
//!
//! HTTP rate limiting on floodgate-core: a tower [`RateLimitLayer`] for axum, hyper and
//! tonic, and the reverse proxy behind `floodgate proxy` ([`proxy`]).
//!
//! * [`policy`]: named policies (algorithm, rate, burst, key, dry-run) and the routes
//!   (path prefix + methods, cost per policy) that apply them.
//! * [`key`]: client IP behind trusted proxies, IP prefixes, header keys, custom keys.
//! * [`store`]: the [`DecisionStore`] trait and the in-process [`LocalStore`].
//! * [`headers`]: `RateLimit-Policy` / `RateLimit` (the sustained rate, and what a key can
//!   take next at it: `floodgate_core::ratelimit_fields`), legacy `X-RateLimit-*`,
//!   `Retry-After` with jitter, `X-RateLimit-Delay-Ms`.
//! * [`metrics`]: Prometheus text exposition.
//! * [`config`]: the TOML configuration of the proxy (also usable for the layer).
//! * [`fleet`]: N nodes sharing limits: sticky (rendezvous owners), local share, shared
//!   (Redis), hybrid (leases, [`HybridStore`]); [`sticky`] forwards in the proxy.
//!
//! ```
//! use floodgate_core::{Kind, Rate, Spec};
//! use floodgate_http::{KeySource, Policy, RateLimiter, Route};
//!
//! let mut per_ip = Spec::new(Kind::LeakyQueue, "10/s".parse::<Rate>()?);
//! per_ip.capacity = Some(21); // nginx burst=20
//! let limiter = RateLimiter::builder()
//!     .policy(Policy::new("per-ip", per_ip))
//!     .policy(Policy::new("global", Spec::new(Kind::Gcra, "5000/min".parse()?)).key(KeySource::global()))
//!     .route(Route::prefix("/search").policy("per-ip", 10).policy("global", 1))
//!     .route(Route::prefix("/").policy("per-ip", 1).policy("global", 1))
//!     .build()?;
//! let layer = limiter.layer(); // a tower Layer; clones share `limiter`
//! # let _ = layer;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod client_conn;
pub mod config;
mod head_timeout;
pub mod key;
pub mod layer;
pub mod limiter;
pub mod policy;
pub mod proxy;
pub mod sticky;
pub mod upstream;

pub use floodgate_engine::{deny, fleet, headers, hybrid_store, metrics, redis_store, store};

pub use fleet::{Fleet, FleetError, Strategy};
pub use hybrid_store::HybridStore;
pub use key::{
    ClientIpConfig, ForwardedHeader, KeyError, KeyExtractor, KeyPart, KeySource, PeerAddr,
    RequestInfo,
};
pub use layer::{RateLimitLayer, RateLimitService};
pub use limiter::{BuildError, MissingKey, RateLimiter, RateLimiterBuilder, StoreFailure, Verdict};
pub use policy::{Policy, PolicyInfo, Route};
pub use redis_store::RedisDecisionStore;
pub use store::{
    DecisionStore, LocalStore, PolicyStats, StoreCheck, StoreError, StoreErrorKind, TokioWallClock,
};
