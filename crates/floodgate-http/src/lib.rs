#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod builder;
pub mod key;
pub mod layer;
pub mod limiter;
pub mod policy;
pub mod settle;

#[cfg(feature = "admin")]
pub use floodgate_engine::admin;
pub use floodgate_engine::{
    deny, fault, fleet, headers, inflight, insight, leases, metrics, store,
};
#[cfg(feature = "redis")]
pub use floodgate_engine::{hybrid_store, redis_store};

pub use builder::{BuildError, RateLimiterBuilder};
pub use fault::StoreFailure;
pub use fleet::{Fleet, FleetError, Strategy};
#[cfg(feature = "redis")]
pub use hybrid_store::HybridStore;
pub use key::{
    ClientIpConfig, ForwardedHeader, KeyError, KeyExtractor, KeyPart, KeySource, MissingKey,
    PeerAddr, RequestInfo,
};
pub use layer::{RateLimitLayer, RateLimitService};
pub use limiter::{RateLimiter, Verdict};
pub use policy::{InFlightSpec, Policy, PolicyInfo, Route};
#[cfg(feature = "redis")]
pub use redis_store::RedisDecisionStore;
pub use settle::{SettleHandle, SettleOnTrailers, SettleSpec};
pub use store::{
    DecisionStore, LocalStore, PolicyStats, StoreCheck, StoreError, StoreErrorKind, TokioWallClock,
};
