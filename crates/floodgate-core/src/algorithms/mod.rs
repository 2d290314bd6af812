//! The algorithms, each named by the guarantee it gives at a window boundary.
//!
//! | algorithm | guarantee over any span of one window `W` | state per key |
//! |---|---|---|
//! | [`FixedWindow`] | at most `L` per aligned window; up to `2L` across a boundary | 2 integers |
//! | [`SlidingLog`] | at most `L` in *any* rolling window, exactly | one entry per admitted instant, at most `L` |
//! | [`SlidingCounter`] | at most `L` per aligned window; a rolling estimate keeps boundary bursts near `L` | 3 integers |
//! | [`TokenBucket`] | at most `capacity + rate x t` over any span `t` | 2 integers |
//! | [`LeakyBucket`] (meter) | at most `capacity + rate x t` over any span `t` | 2 integers |
//! | [`LeakyBucket`] (queue) | the same admission, and forwarding smoothed to `rate` after `delay` | 2 integers |
//! | [`Gcra`] | at most `capacity + rate x t` over any span `t` | 1 integer |
//!
//! All share the [`Algorithm`](crate::Algorithm) trait and return a
//! [`Decision`](crate::Decision).

mod fixed_window;
mod gcra;
mod leaky_bucket;
mod sliding_counter;
mod sliding_log;
mod token_bucket;

pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use leaky_bucket::{DelayMode, LeakyBucket, LeakyState};
pub use sliding_counter::{SlidingCounter, SlidingCounterState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use token_bucket::{TokenBucket, TokenBucketState};

use crate::error::ConfigError;
use std::time::Duration;

/// Units are counted in nano-units (10^-9 of a unit) where refill is continuous.
pub(crate) const NANO_UNITS: u64 = 1_000_000_000;

pub(crate) fn nonzero(v: u64, what: &'static str) -> Result<u64, ConfigError> {
    if v == 0 {
        Err(ConfigError::Zero { what })
    } else {
        Ok(v)
    }
}

/// `capacity` in nano-units, or an overflow error naming `what`.
pub(crate) fn nano_units(capacity: u64, what: &'static str) -> Result<u64, ConfigError> {
    capacity
        .checked_mul(NANO_UNITS)
        .ok_or_else(|| ConfigError::Overflow {
            what,
            detail: format!(
                "{capacity} is above the maximum of {}",
                u64::MAX / NANO_UNITS
            ),
        })
}

pub(crate) fn window_nanos(window: Duration) -> Result<u64, ConfigError> {
    let ns = crate::time::duration_to_nanos(window);
    if ns == 0 {
        return Err(ConfigError::Zero { what: "window" });
    }
    Ok(ns)
}

#[inline]
pub(crate) fn dur(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

#[inline]
pub(crate) fn sat_u64(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}
