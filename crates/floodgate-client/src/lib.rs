#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod backoff;
pub mod concurrency;
pub mod error;
pub mod headers;
pub mod inflight_cap;
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
