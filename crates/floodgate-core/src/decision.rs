//! The one decision shape every algorithm and backend returns.
//!
//! HTTP headers, CLI output, metrics and the `CL.THROTTLE` reply are all rendered from a
//! [`Decision`]; nothing else carries limiter output. Durations keep full nanosecond
//! precision here and become whole seconds only when rendered, in one of two ways:
//!
//! * **The redis-cell rendering**, [`Decision::throttle_reply`]: the five integers of
//!   `CL.THROTTLE`, durations **truncated** to whole seconds ([`trunc_secs`]), as the
//!   redis-cell module replies (`time::Duration::num_seconds`). Every surface that
//!   claims `CL.THROTTLE` compatibility uses it: the RESP door, `floodgate throttle`,
//!   floodgate-redis's `RedisStore::throttle`, the Python `throttle`.
//! * **The HTTP rendering**, [`ceil_secs`]: durations **rounded up**, for `Retry-After`,
//!   the RateLimit `t` parameter and `X-RateLimit-Reset`, which must never tell a client
//!   to come back before it would be admitted.
//!
//! The same decision therefore reads `reset_after` 3 in `CL.THROTTLE` and `t=4` in
//! HTTP when the key is 3.9 s from full capacity.

use std::time::Duration;

/// The outcome of asking a limiter about one request.
///
/// Field meanings are the five values of redis-cell's `CL.THROTTLE` plus the leaky queue's
/// delay:
///
/// * `allowed`: the request may proceed (after `delay`, for a delaying leaky queue).
/// * `limit`: the most units the key can admit at once from full capacity.
/// * `remaining`: units that could still be admitted right now, after this request.
/// * `retry_after`: when denied, how long until a request of the same cost would be
///   admitted; `None` when allowed, and `None` when it can never be admitted
///   (cost above the limit; see [`Denial::CostExceedsLimit`]).
/// * `reset_after`: how long until the key is back at full capacity (equivalent to a key
///   never seen) if nothing else arrives.
/// * `delay`: how long the caller must hold the request before forwarding it (only the
///   delaying leaky queue sets it; zero otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// Capacity in units (requests when every cost is 1).
    pub limit: u64,
    /// Units still available right now.
    pub remaining: u64,
    /// Time until a retry of the same cost can succeed; `None` when allowed or never.
    pub retry_after: Option<Duration>,
    /// Time until the key is back at full capacity.
    pub reset_after: Duration,
    /// Time to hold an admitted request before forwarding it (leaky queue only).
    pub delay: Duration,
    /// Why the request was denied; `None` when allowed.
    pub denial: Option<Denial>,
}

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Denial {
    /// The key is over its rate; `retry_after` says when to come back.
    RateLimited,
    /// The request costs more than the key could ever admit at once: it can never succeed.
    CostExceedsLimit {
        /// The cost asked.
        cost: u64,
        /// The most the key can admit at once.
        limit: u64,
    },
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denial::RateLimited => f.write_str("rate limited"),
            Denial::CostExceedsLimit { cost, limit } => write!(
                f,
                "cost {cost} exceeds the limit of {limit}: this request can never be admitted"
            ),
        }
    }
}

impl Decision {
    /// An admitted request.
    #[inline]
    pub fn allow(limit: u64, remaining: u64, reset_after: Duration) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            retry_after: None,
            reset_after,
            delay: Duration::ZERO,
            denial: None,
        }
    }

    /// A request denied because the key is over its rate.
    #[inline]
    pub fn deny(
        limit: u64,
        remaining: u64,
        retry_after: Duration,
        reset_after: Duration,
    ) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining,
            retry_after: Some(retry_after),
            reset_after,
            delay: Duration::ZERO,
            denial: Some(Denial::RateLimited),
        }
    }

    /// A request whose cost is above the limit: denied forever, `retry_after` is `None`.
    #[inline]
    pub fn never(limit: u64, cost: u64, remaining: u64, reset_after: Duration) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining,
            retry_after: None,
            reset_after,
            delay: Duration::ZERO,
            denial: Some(Denial::CostExceedsLimit { cost, limit }),
        }
    }

    /// The same decision with a forwarding delay.
    #[inline]
    pub fn with_delay(mut self, delay: Duration) -> Decision {
        self.delay = delay;
        self
    }

    /// The redis-cell rendering: the five integers of `CL.THROTTLE`'s reply,
    /// `[limited, limit, remaining, retry_after_s, reset_after_s]`, with `-1` for "no
    /// retry-after" (admitted, or never admitted) and both durations **truncated** to whole
    /// seconds ([`trunc_secs`]), exactly as the redis-cell module replies. With a GCRA
    /// built by [`Gcra::from_cell`](crate::algorithms::Gcra::from_cell) the five integers
    /// are redis-cell 0.2.2's for the same call at the same instant. HTTP surfaces use
    /// [`ceil_secs`] instead (see the module docs).
    ///
    /// ```
    /// use floodgate_core::algorithms::Gcra;
    /// use floodgate_core::{Algorithm, Nanos};
    ///
    /// // CL.THROTTLE user123 15 30 60 on a fresh key, then again 1 ms later
    /// let gcra = Gcra::from_cell(15, 30, 60).unwrap();
    /// let mut tat = Default::default();
    /// let now = Nanos::from_secs(1_700_000_000);
    /// let d = gcra.check(&mut tat, now, 1);
    /// assert_eq!(d.throttle_reply(), [0, 16, 15, -1, 2]);
    /// let d = gcra.check(&mut tat, Nanos(now.0 + 1_000_000), 1);
    /// assert_eq!(d.reset_after.as_millis(), 3_999);
    /// assert_eq!(d.throttle_reply(), [0, 16, 14, -1, 3]); // 3.999 s: 3
    /// ```
    pub fn throttle_reply(&self) -> [i64; 5] {
        let retry = match self.retry_after {
            Some(d) if !self.allowed => clamp_i64(trunc_secs(d)),
            _ => -1,
        };
        [
            i64::from(!self.allowed),
            clamp_i64(self.limit),
            clamp_i64(self.remaining),
            retry,
            clamp_i64(trunc_secs(self.reset_after)),
        ]
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The HTTP rendering of a duration: whole seconds, plus one when there is any
/// sub-second remainder, for `Retry-After`, the RateLimit `t` parameter and
/// `X-RateLimit-Reset` (never earlier than the truth). Not for `CL.THROTTLE`, which
/// truncates ([`trunc_secs`]).
///
/// ```
/// use floodgate_core::decision::ceil_secs;
/// use std::time::Duration;
/// assert_eq!(ceil_secs(Duration::from_millis(2000)), 2);
/// assert_eq!(ceil_secs(Duration::from_millis(2001)), 3);
/// assert_eq!(ceil_secs(Duration::ZERO), 0);
/// ```
#[inline]
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The redis-cell rendering of a duration: whole seconds, the sub-second remainder
/// dropped (redis-cell replies `time::Duration::num_seconds`), as in
/// [`Decision::throttle_reply`]. Not for HTTP, which rounds up ([`ceil_secs`]).
///
/// ```
/// use floodgate_core::decision::trunc_secs;
/// use std::time::Duration;
/// assert_eq!(trunc_secs(Duration::from_millis(2000)), 2);
/// assert_eq!(trunc_secs(Duration::from_millis(3999)), 3);
/// assert_eq!(trunc_secs(Duration::from_millis(999)), 0);
/// ```
#[inline]
pub fn trunc_secs(d: Duration) -> u64 {
    d.as_secs()
}
