//! `CL.THROTTLE key max_burst count period [quantity]`'s arguments, parsed as redis-cell
//! parses them (64-bit integers; `count` and `period` non-zero), and refused where
//! redis-cell would misbehave (a negative quantity). The GCRA they describe is
//! [`Gcra::from_cell`]; its decision is rendered with
//! [`Decision::throttle_reply`](crate::Decision::throttle_reply).

use thiserror::Error;

use crate::algorithms::Gcra;
use crate::error::ConfigError;

/// The usage line of `CL.THROTTLE`, as redis-cell words it.
pub const THROTTLE_USAGE: &str =
    "Usage: CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]";

/// A `CL.THROTTLE` argument that redis-cell would refuse too (or, for a negative
/// quantity, one it would wrongly accept: it leaves the key without an expiry).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ThrottleArgError {
    /// Not a 64-bit integer.
    #[error("{name} must be an integer, got {value:?}")]
    NotInteger {
        /// The argument (max_burst, count, period, quantity).
        name: &'static str,
        /// The text given.
        value: String,
    },
    /// Negative where only zero or more makes sense.
    #[error("{name} must not be negative, got {value}")]
    Negative {
        /// The argument.
        name: &'static str,
        /// The value given.
        value: i64,
    },
    /// A count or period of zero.
    #[error("zero rates are not supported ({name} is 0)")]
    ZeroRate {
        /// `count` or `period`.
        name: &'static str,
    },
}

/// Parsed `CL.THROTTLE` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleArgs {
    /// Excess above one request that a key at rest admits at once (limit = max_burst + 1).
    pub max_burst: u64,
    /// Requests per period.
    pub count: u64,
    /// Period in seconds.
    pub period: u64,
    /// Units this call consumes (0 = peek). Default 1.
    pub quantity: u64,
}

fn int(name: &'static str, value: &str) -> Result<u64, ThrottleArgError> {
    let v: i64 = value.parse().map_err(|_| ThrottleArgError::NotInteger {
        name,
        value: value.to_string(),
    })?;
    u64::try_from(v).map_err(|_| ThrottleArgError::Negative { name, value: v })
}

impl ThrottleArgs {
    /// Parse as redis-cell does: 64-bit integers; `count` and `period` non-zero.
    ///
    /// ```
    /// use floodgate_core::cell::ThrottleArgs;
    /// let a = ThrottleArgs::parse("15", "30", "60", None).unwrap();
    /// assert_eq!((a.max_burst, a.count, a.period, a.quantity), (15, 30, 60, 1));
    /// let e = ThrottleArgs::parse("15", "3o", "60", None).unwrap_err();
    /// assert_eq!(e.to_string(), "count must be an integer, got \"3o\"");
    /// assert!(ThrottleArgs::parse("15", "30", "60", Some("-1")).is_err());
    /// ```
    pub fn parse(
        max_burst: &str,
        count: &str,
        period: &str,
        quantity: Option<&str>,
    ) -> Result<ThrottleArgs, ThrottleArgError> {
        let max_burst = int("max_burst", max_burst)?;
        let count = int("count", count)?;
        let period = int("period", period)?;
        let quantity = quantity
            .map(|q| int("quantity", q))
            .transpose()?
            .unwrap_or(1);
        for (name, v) in [("count", count), ("period", period)] {
            if v == 0 {
                return Err(ThrottleArgError::ZeroRate { name });
            }
        }
        Ok(ThrottleArgs {
            max_burst,
            count,
            period,
            quantity,
        })
    }

    /// The GCRA these arguments describe.
    /// A tolerance that does not fit in 64-bit nanoseconds is refused naming `max_burst`.
    ///
    /// ```
    /// use floodgate_core::cell::ThrottleArgs;
    /// let a = ThrottleArgs::parse("9223372036854775807", "30", "60", None).unwrap();
    /// assert!(a.gcra().unwrap_err().to_string().starts_with("max_burst is too large"));
    /// ```
    pub fn gcra(&self) -> Result<Gcra, ConfigError> {
        Gcra::from_cell(self.max_burst, self.count, self.period).map_err(|e| match e {
            ConfigError::Overflow {
                what: "capacity", ..
            } => ConfigError::Overflow {
                what: "max_burst",
                detail: format!(
                    "(max_burst + 1) x period / count = ({} + 1) x {} s / {} does not fit in 64-bit nanoseconds",
                    self.max_burst, self.period, self.count
                ),
            },
            e => e,
        })
    }
}
