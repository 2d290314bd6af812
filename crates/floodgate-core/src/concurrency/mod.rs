//! Adaptive concurrency limits in the style of Netflix concurrency-limits, as pure state
//! machines: no I/O, no clock (time comes in each [`Sample`] as [`Nanos`] and
//! [`Duration`]).
//!
//! An algorithm ([`Aimd`], [`Vegas`], [`Gradient2`], optionally wrapped in [`Windowed`]) is
//! fed [`Sample`]s `(start, rtt, inflight, dropped)` of completed requests and returns the
//! new limit: the number of requests it lets be in flight at once. The surfaces hold the
//! permits and time them: floodgate-client's `AdaptiveLimiter` on the client side,
//! floodgate-engine's partitioned limiter (priority classes) on the server side.
//!
//! # Invariants (every algorithm here)
//! * The limit is always within `[min, max]` of its config, and `1 <= min <= initial <= max`
//!   is checked at construction ([`check_range`]); so the limit is never 0.
//! * Latency rising far above its baseline, or drops, bring the limit down towards `min`
//!   (never below it). A small limit (8 or less) may hold still under latency alone:
//!   Gradient2 adds `queue_size` of headroom (at a gradient of 0.5 it settles at
//!   `2 x queue_size`) and Vegas needs a queue above `6 x log10_root(limit)`; drops
//!   bring AIMD and Vegas down from any limit. When latency returns to its baseline with the limit in use
//!   (`inflight` at least half the limit), the limit grows again, up to `max`.
//! * A sample never panics: a zero RTT, an `inflight` of 0 or `usize::MAX`, a `start` at
//!   [`Nanos::MAX`] are all taken in.

mod aimd;
mod gradient2;
mod vegas;
mod windowed;

use std::time::Duration;

use crate::{ConfigError, Nanos};

pub use aimd::{Aimd, AimdConfig};
pub use gradient2::{ExpAvg, Gradient2, Gradient2Baseline, Gradient2Config};
pub use vegas::{Vegas, VegasConfig};
pub use windowed::{Windowed, WindowedConfig};

/// One completed request, as an algorithm sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When the request started (clock of the limiter).
    pub start: Nanos,
    /// Round-trip time.
    pub rtt: Duration,
    /// Requests in flight when this one started, itself included.
    pub inflight: usize,
    /// The request was dropped: timed out, rejected by the server (429/503) or failed.
    pub dropped: bool,
}

/// A concurrency-limit algorithm: a pure function of its samples.
pub trait LimitAlgorithm: Send {
    /// The current limit (>= 1, within the algorithm's `[min, max]`).
    fn limit(&self) -> usize;
    /// Take in one sample; returns the new limit.
    fn on_sample(&mut self, sample: &Sample) -> usize;
}

impl<A: LimitAlgorithm + ?Sized> LimitAlgorithm for Box<A> {
    fn limit(&self) -> usize {
        (**self).limit()
    }
    fn on_sample(&mut self, sample: &Sample) -> usize {
        (**self).on_sample(sample)
    }
}

/// `L = max(1, log10(limit))`, the step of Vegas (real-valued; Netflix's
/// `Log10RootFunction` truncates it to an integer through a lookup table). NaN and
/// values below 10 give 1.
pub fn log10_root(limit: f64) -> f64 {
    let l = limit.log10();
    if l.is_nan() { 1.0 } else { l.max(1.0) }
}

/// `Ok` when `1 <= min <= initial <= max`, else an error naming the three values.
pub fn check_range(min: usize, initial: usize, max: usize) -> Result<(), ConfigError> {
    if min == 0 || min > initial || initial > max {
        return Err(ConfigError::Inconsistent(format!(
            "need 1 <= min ({min}) <= initial ({initial}) <= max ({max})"
        )));
    }
    Ok(())
}
