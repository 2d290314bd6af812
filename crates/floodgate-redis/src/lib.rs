//! # floodgate-redis
//!
//! floodgate's algorithms with their state in Redis, for limits shared by many processes
//! and hosts. Every decision is **one round trip**: an `EVALSHA` of a Lua script that
//! reads the key, decides, writes the new state and sets the key's expiry atomically.
//! The scripts return exactly the core's [`Decision`](floodgate_core::Decision) (a
//! differential test against `floodgate-core` proves it), so a limit behaves the same
//! in-process and in Redis.
//!
//! * [`RedisStore`]: the connection (single node with auto-reconnect, or Redis Cluster),
//!   the per-call timeout, the circuit breaker, the counters. URL-based auth and TLS
//!   (`redis://user:pass@host/`, `rediss://...` with the default `tls` feature).
//! * [`RedisLimiter`]: one algorithm over any number of keys; [`RedisLimiter::check`]
//!   applies the local cache of denials and the [`FaultPolicy`], and marks every decision
//!   with its [`Source`].
//! * [`multi::check_all`]: several policies on one request, all-or-nothing, in one
//!   atomic round trip (single node).
//! * [`RedisStore::throttle`]: redis-cell's `CL.THROTTLE` on any Redis, no module.
//! * [`scripts`]: the Lua scripts and the exactness argument (why doubles are enough).
//! * [`keys`]: key names, hash tags (cluster-safe), hostile user keys.
//!
//! Keys: `PREFIX{TAG}ALGORITHM:USERKEY`; every key expires when it is back at full
//! capacity, so idle keys cost nothing and no key ever lacks a TTL.
#![warn(missing_docs)]

mod breaker;
mod deny_cache;
pub mod error;
pub mod keys;
mod limiter;
pub mod multi;
pub mod scripts;
mod store;
pub mod throttle;

pub use error::Error;
pub use keys::KeySpace;
pub use limiter::{Fault, Outcome, RedisLimiter, Source};
pub use scripts::{Now, ScriptCall};
pub use store::{FaultPolicy, RedisStore, Stats, StoreConfig, TimeSource};
pub use throttle::{ThrottleArgError, ThrottleArgs};
