//! Adaptive concurrency limits in the style of Netflix concurrency-limits.
//!
//! An algorithm ([`Aimd`], [`Vegas`], [`Gradient2`], optionally wrapped in [`Windowed`]) is
//! a pure state machine fed [`Sample`]s `(rtt, inflight, dropped)`; it returns the new
//! limit. The [`AdaptiveLimiter`] hands out [`Permit`]s (at most `limit` at once), times
//! each one on an injected [`floodgate_core::Clock`], and feeds the algorithm when the
//! permit is released. [`LoadShedLayer`] puts one in front of a server handler, answering
//! 503 when no permit is free.

mod aimd;
mod gradient2;
mod limiter;
mod shed;
mod vegas;
mod windowed;

use std::time::Duration;

use floodgate_core::Nanos;

pub use aimd::{Aimd, AimdConfig};
pub use gradient2::{ExpAvg, Gradient2, Gradient2Config};
pub use limiter::{AdaptiveLimiter, Outcome, Permit};
pub use shed::{LoadShed, LoadShedLayer};
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
    /// The current limit (>= 1).
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

/// `L = max(1, log10(limit))`, the step of Vegas (reference.md's formula, real-valued;
/// Netflix's `Log10RootFunction` truncates it to an integer through a lookup table).
pub fn log10_root(limit: f64) -> f64 {
    let l = limit.log10();
    if l.is_nan() { 1.0 } else { l.max(1.0) }
}

fn check_range(min: usize, initial: usize, max: usize) -> Result<(), crate::ConfigError> {
    if min == 0 || min > initial || initial > max {
        return Err(crate::ConfigError::Limit(format!(
            "need 1 <= min ({min}) <= initial ({initial}) <= max ({max})"
        )));
    }
    Ok(())
}
