//! Configuration errors.

use std::time::Duration;

/// A setting that cannot work, named with the value that was given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Backoff base of zero: exponential backoff would never grow.
    #[error("backoff base must be > 0")]
    ZeroBackoffBase,
    /// Backoff cap below its base.
    #[error("backoff cap {cap:?} is below its base {base:?}")]
    CapBelowBase {
        /// The base given.
        base: Duration,
        /// The cap given.
        cap: Duration,
    },
    /// A fraction outside `[0, 1]` (or NaN).
    #[error("fraction must be within [0, 1], got {0}")]
    BadPercent(f64),
    /// Retry budget window under 1 ms.
    #[error("retry budget ttl must be >= 1ms, got {0:?}")]
    BudgetTtlTooShort(Duration),
    /// `max_attempts` of zero: not even the first try would be sent.
    #[error("max_attempts must be >= 1")]
    ZeroAttempts,
    /// A timer resolution longer than `max_wait`.
    #[error("timer_resolution {0:?} must not exceed max_wait")]
    TimerResolution(Duration),
    /// A concurrency limit setting that is out of range.
    #[error("concurrency limit: {0}")]
    Limit(String),
}

impl From<floodgate_core::ConfigError> for ConfigError {
    /// An algorithm's setting refused by floodgate-core ([`floodgate_core::concurrency`]).
    fn from(e: floodgate_core::ConfigError) -> Self {
        ConfigError::Limit(e.to_string())
    }
}
