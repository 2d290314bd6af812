#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod breaker;
mod deny_cache;
pub mod error;
pub mod inflight;
pub mod keys;
mod limiter;
pub mod multi;
pub mod scripts;
mod settle;
mod store;
pub mod throttle;

pub use error::Error;
pub use inflight::RedisInFlight;
pub use keys::KeySpace;
pub use limiter::{Fault, Outcome, RedisLimiter, Source};
pub use scripts::{Now, ScriptCall};
pub use store::{FaultPolicy, ModuleUse, RedisStore, Stats, StoreConfig, TimeSource};
pub use throttle::{ThrottleArgError, ThrottleArgs};
