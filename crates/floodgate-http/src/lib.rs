#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod adaptive;
pub mod builder;
pub mod key;
pub mod layer;
pub mod limiter;
pub mod policy;
pub mod recorded;
pub mod rejection_log;
pub mod request;
pub mod settle;
pub mod shape;

// The engine's types this crate's public items take, return or hold. The engine's
// modules are not mirrored here: a user names them `floodgate_engine::...`.
#[cfg(feature = "admin")]
pub use floodgate_engine::admin::{AdminReply, AdminRequest};
pub use floodgate_engine::fault::StoreFailure;
pub use floodgate_engine::fleet::{Fleet, FleetError};
pub use floodgate_engine::headers::{HeaderOptions, RateHeaders};
pub use floodgate_engine::insight::{Insight, KeyDisplay};
pub use floodgate_engine::leases::LeaseGuard;
pub use floodgate_engine::metrics::Metrics;
pub use floodgate_engine::store::{DecisionStore, StoreError};

pub use adaptive::{AdaptivePolicy, ClassMatch};
pub use builder::{BuildError, RateLimiterBuilder};
pub use key::{
    ClientIpConfig, ForwardedHeader, KeyError, KeyExtractor, KeyPart, KeySource, MissingKey,
    PeerAddr, ProvidedKeys, RequestInfo,
};
pub use layer::{RateLimitLayer, RateLimitService};
pub use limiter::{RateLimiter, Verdict};
pub use policy::{InFlightSpec, Policy, PolicyInfo, Route};
pub use recorded::{RecordedDecision, RecordedOutcome};
pub use rejection_log::RejectionLogConfig;
pub use request::{DecidedRequest, PendingRequest, RequestDecision};
pub use settle::{SettleHandle, SettleOnTrailers, SettleSpec};
