#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod algorithm;
pub mod algorithms;
pub mod any;
pub mod cell;
pub mod concurrency;
#[cfg(feature = "serde")]
pub mod de;
pub mod decision;
pub mod direct;
pub mod error;
pub mod inflight;
pub mod keyed;
pub mod multi;
pub mod rate;
pub mod ratelimit_fields;
pub mod settle;
pub mod simulate;
mod table_alloc;
pub mod time;

pub use algorithm::Algorithm;
pub use any::{AnyAlgorithm, AnyState, Kind, Spec};
pub use decision::{Decision, Denial};
pub use direct::{AtomicGcra, Limiter};
pub use error::ConfigError;
pub use keyed::{KeyedLimiter, Stats};
pub use rate::Rate;
pub use settle::{Charge, Reservation, Settle, SettleError, Settlement};
pub use time::{Clock, ManualClock, MonotonicClock, Nanos, WallClock};
