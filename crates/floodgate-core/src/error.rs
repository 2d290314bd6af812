//! Typed errors for invalid limiter parameters. Construction validates everything once so
//! that `check` never fails and never panics.

use thiserror::Error;

/// A limiter parameter that cannot work. Every variant names the offending parameter.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A count, capacity or window that must be positive was zero.
    #[error("{what} must be at least 1, got 0")]
    Zero {
        /// The parameter, e.g. `"limit"` or `"window"`.
        what: &'static str,
    },
    /// A number of seconds (or a rate) that is negative, zero, NaN or infinite.
    #[error("{what} must be a positive, finite number, got {value}")]
    NotPositiveFinite {
        /// The parameter.
        what: &'static str,
        /// The rejected value as text.
        value: String,
    },
    /// A product of the parameters does not fit in 64-bit nanoseconds or units.
    #[error("{what} is too large: {detail}")]
    Overflow {
        /// The parameter.
        what: &'static str,
        /// Why it overflows.
        detail: String,
    },
    /// A rate string such as `10/q` that does not parse (or, for [`crate::Rate::parse_many`],
    /// a string of several limits one of which does not).
    #[error(
        "invalid rate {input:?}: {reason}; expected COUNT/PERIOD or COUNT per PERIOD such as 10/s, 100/min, 5000/h, 100/30s or 10 per 2 minutes (units: ns, us, ms, s, m or min, h, d; second, minute, hour, day, month = 30 d, year = 360 d)"
    )]
    InvalidRate {
        /// The text given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A duration string such as `30q` that does not parse.
    #[error(
        "invalid duration {input:?}: {reason}; expected a number and a unit such as 500ms, 30s, 1.5m, 2h or 1d"
    )]
    InvalidDuration {
        /// The text given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// Two parameters that contradict each other (e.g. `delay` above `burst`).
    #[error("{0}")]
    Inconsistent(String),
}
