#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod adaptive;
#[cfg(feature = "admin")]
pub mod admin;
#[cfg(feature = "redis")]
pub mod caller_limits;
#[cfg(feature = "config")]
pub mod config;
pub mod decide;
pub mod deny;
pub mod fault;
pub mod fleet;
pub mod headers;
#[cfg(feature = "redis")]
pub mod hybrid_store;
pub mod inflight;
pub mod insight;
pub mod leases;
pub mod metrics;
pub mod quota;
#[cfg(feature = "redis")]
pub mod redis_leases;
#[cfg(feature = "redis")]
pub mod redis_store;
pub mod settle;
#[cfg(feature = "redis")]
pub mod shared_store;
pub mod store;

#[cfg(feature = "redis")]
pub use caller_limits::CallerLimits;
pub use fault::{StoreError, StoreErrorKind, StoreFailure};
pub use fleet::{Fleet, FleetError, Strategy};
#[cfg(feature = "redis")]
pub use hybrid_store::HybridStore;
#[cfg(feature = "redis")]
pub use redis_store::RedisDecisionStore;
pub use settle::{Reservation, Reserved, Settled};
#[cfg(feature = "redis")]
pub use shared_store::{HybridLeases, SharedStore};
pub use store::{DecisionStore, LocalStore, PolicyInfo, PolicyStats, StoreCheck, TokioWallClock};
