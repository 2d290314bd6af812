//! `CL.THROTTLE key max_burst count period [quantity]` without the redis-cell module: the
//! GCRA script answers the same five integers for the same call sequence.

use floodgate_core::algorithms::Gcra;
use floodgate_core::{AnyAlgorithm, Nanos};
use thiserror::Error;

use crate::error::Error;
use crate::scripts::{Now, ScriptCall};
use crate::store::RedisStore;

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
    /// use floodgate_redis::ThrottleArgs;
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
    pub fn gcra(&self) -> Result<Gcra, Error> {
        Ok(Gcra::from_cell(self.max_burst, self.count, self.period)?)
    }
}

impl RedisStore {
    /// `CL.THROTTLE user max_burst count period quantity`: the five integers redis-cell
    /// replies (`[limited, limit, remaining, retry_after_s, reset_after_s]`), computed by
    /// the GCRA script on Redis `TIME`. No fault policy: errors are returned.
    pub async fn throttle(&self, user: &[u8], args: &ThrottleArgs) -> Result<[i64; 5], Error> {
        self.throttle_with(user, args, Now::Redis).await
    }

    /// [`throttle`](Self::throttle) at the caller's instant (ns since the epoch).
    pub async fn throttle_at(
        &self,
        user: &[u8],
        args: &ThrottleArgs,
        now: Nanos,
    ) -> Result<[i64; 5], Error> {
        self.throttle_with(user, args, Now::Caller(now)).await
    }

    async fn throttle_with(
        &self,
        user: &[u8],
        args: &ThrottleArgs,
        now: Now,
    ) -> Result<[i64; 5], Error> {
        let call = ScriptCall::new(&AnyAlgorithm::Gcra(args.gcra()?))?;
        let key = self.keys.key(call.kind(), user)?;
        let pad = self.config.expiry_padding.as_nanos().div_ceil(1_000_000) as u64;
        let inv = call.invocation(&key, now, args.quantity, pad)?;
        let reply = self.eval(&inv).await?;
        Ok(call.decision(&reply, args.quantity)?.throttle_reply())
    }
}
