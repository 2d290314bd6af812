//! # floodgate-core
//!
//! Rate-limiting algorithms as pure state machines driven by an explicit time, one
//! [`Decision`] shape for all of them, and a concurrent keyed store with a hard key cap.
//! No I/O: the Redis store, HTTP layer and CLI are separate crates built on this one.
//!
//! * [`time`]: [`Nanos`] and the [`Clock`]s (monotonic for rates, wall for windows).
//! * [`algorithms`]: fixed window, sliding log, sliding counter, token bucket, leaky bucket
//!   (meter and nginx-style queue), GCRA; each documented by its boundary guarantee.
//! * [`Decision`]: allowed, limit, remaining, retry-after, reset-after (redis-cell's five
//!   values) plus the leaky queue's delay.
//! * [`KeyedLimiter`]: per-key state for many threads, capped, with eviction built in.
//! * [`multi::check_all`]: several limits on one request, all-or-nothing.
//! * [`simulate`]: traffic scenarios on a simulated clock.
//! * [`ratelimit_fields`]: the RateLimit header fields of a policy and its decisions, the
//!   one rendering every HTTP surface uses.
//!
//! ```
//! use floodgate_core::algorithms::Gcra;
//! use floodgate_core::{Clock, KeyedLimiter, ManualClock, Nanos, Rate};
//!
//! let clock = ManualClock::new(Nanos::from_secs(1));
//! let limiter = KeyedLimiter::new(Gcra::new("100/min".parse::<Rate>()?, 10)?, 1_000_000)?;
//! let d = limiter.check("203.0.113.7", clock.now(), 1);
//! assert!(d.allowed);
//! assert_eq!((d.limit, d.remaining), (10, 9));
//! # Ok::<(), floodgate_core::ConfigError>(())
//! ```
#![warn(missing_docs)]

pub mod algorithm;
pub mod algorithms;
pub mod any;
pub mod decision;
pub mod direct;
pub mod error;
pub mod keyed;
pub mod multi;
pub mod rate;
pub mod ratelimit_fields;
pub mod simulate;
pub mod time;

pub use algorithm::Algorithm;
pub use any::{AnyAlgorithm, AnyState, Kind, Spec};
pub use decision::{Decision, Denial};
pub use direct::{AtomicGcra, Limiter};
pub use error::ConfigError;
pub use keyed::{KeyedLimiter, Stats};
pub use rate::Rate;
pub use time::{Clock, ManualClock, MonotonicClock, Nanos, WallClock};
