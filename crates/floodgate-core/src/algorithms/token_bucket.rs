//! Token bucket: capacity and a continuous refill.

use std::time::Duration;

use super::{NANO_UNITS, dur, nano_units, nonzero, sat_u64};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::time::Nanos;

/// **Guarantee:** over any span of length `t`, at most `capacity + refill x t` units are
/// admitted; long-run rate `refill`, bursts up to `capacity`.
///
/// **Settle** ([`crate::settle`]): an actual cost above the estimate takes the tokens below
/// zero (debt, repaid by the refill before anything is admitted); a refund gives back only
/// what the refill since the charge has not covered.
///
/// Tokens are kept in nano-tokens (10^-9 token) and refilled continuously, computed exactly
/// in 128-bit from elapsed nanoseconds, so no refill is lost to rounding between calls
/// beyond one nano-token. Two integers of state.
///
/// ```
/// use floodgate_core::algorithms::TokenBucket;
/// use floodgate_core::{Algorithm, Nanos, Rate};
///
/// // capacity 10, refill 2/s: a burst of 15 gives 10; after 3 s idle, 10 more give 6.
/// let bucket = TokenBucket::new(10, Rate::per_second(2)?)?;
/// let mut s = Default::default();
/// let burst = (0..15).filter(|_| bucket.check(&mut s, Nanos::ZERO, 1).allowed).count();
/// let after = (0..10).filter(|_| bucket.check(&mut s, Nanos::from_secs(3), 1).allowed).count();
/// assert_eq!((burst, after), (10, 6));
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    capacity: u64,
    capacity_n: u64,
    refill: Rate,
}

/// Token bucket per-key state. `Default` is a full bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenBucketState {
    /// Nano-tokens missing from a full bucket as of `last`.
    pub deficit: u64,
    /// When `deficit` was computed.
    pub last: Nanos,
}

impl TokenBucket {
    /// A bucket holding up to `capacity` tokens, refilled at `refill`.
    pub fn new(capacity: u64, refill: Rate) -> Result<TokenBucket, ConfigError> {
        let capacity = nonzero(capacity, "capacity")?;
        Ok(TokenBucket {
            capacity,
            capacity_n: nano_units(capacity, "capacity")?,
            refill,
        })
    }

    /// The refill rate.
    pub fn refill(&self) -> Rate {
        self.refill
    }

    /// The state under which `into` holds at `now` the tokens this bucket holds in `s`
    /// at `now`, capped at `into`'s capacity: the tokens carried across a change of
    /// capacity or refill (as `into`'s deficit, from `now`, or from `s.last` when the
    /// clock stood behind it). Exact to the nano-token.
    ///
    /// ```
    /// use floodgate_core::algorithms::TokenBucket;
    /// use floodgate_core::{Algorithm, Nanos, Rate};
    ///
    /// let big = TokenBucket::new(10, Rate::per_second(1)?)?;
    /// let small = TokenBucket::new(4, Rate::per_second(2)?)?;
    /// let mut s = Default::default();
    /// assert!(big.check(&mut s, Nanos::ZERO, 8).allowed); // 2 left
    /// // 1 s later `big` holds 3: `small` takes them over (it would hold 4 when full)
    /// let t = Nanos::from_secs(1);
    /// let s = big.carry_to(&s, t, &small);
    /// assert_eq!(small.peek(&s, t, 0).remaining, 3);
    /// // and a smaller bucket caps them: 3 held, 2 at most
    /// let tiny = TokenBucket::new(2, Rate::per_second(1)?)?;
    /// assert_eq!(tiny.peek(&small.carry_to(&s, t, &tiny), t, 0).remaining, 2);
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn carry_to(
        &self,
        s: &TokenBucketState,
        now: Nanos,
        into: &TokenBucket,
    ) -> TokenBucketState {
        let held = self.capacity_n - self.deficit_at(s, now);
        TokenBucketState {
            deficit: into.capacity_n - held.min(into.capacity_n),
            last: now.max(s.last),
        }
    }

    /// Nano-tokens missing at `now` (never more than a whole bucket, even after the
    /// capacity was lowered at run time).
    #[inline]
    fn deficit_at(&self, s: &TokenBucketState, now: Nanos) -> u64 {
        let elapsed = now.0.saturating_sub(s.last.0);
        let refilled = sat_u64(self.refill.accrued_scaled(elapsed, NANO_UNITS));
        s.deficit.saturating_sub(refilled).min(self.capacity_n)
    }

    /// Time from `now` until the refill since `s.last` reaches `units_n` nano-tokens:
    /// exact, because refill is always measured from `last`.
    #[inline]
    fn until_refilled(&self, s: &TokenBucketState, now: Nanos, units_n: u128) -> Duration {
        let at = s
            .last
            .0
            .saturating_add(self.refill.time_for_scaled(units_n, NANO_UNITS));
        dur(at.saturating_sub(now.0))
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;
    type Pending = TokenBucketState;

    #[inline]
    fn limit(&self) -> u64 {
        self.capacity
    }

    #[inline]
    fn decide(
        &self,
        s: &TokenBucketState,
        now: Nanos,
        cost: u64,
    ) -> (Decision, Option<TokenBucketState>) {
        let deficit = self.deficit_at(s, now);
        let available = self.capacity_n - deficit;
        let remaining = available / NANO_UNITS;
        let reset = if deficit == 0 {
            Duration::ZERO
        } else {
            self.until_refilled(s, now, s.deficit as u128)
        };
        if cost > self.capacity {
            return (Decision::never(self.capacity, cost, remaining, reset), None);
        }
        let need = cost * NANO_UNITS; // cost <= capacity, and capacity_n fits
        if need > available {
            // admitted once the refill since `last` covers stored deficit + need - capacity
            let short = s.deficit as u128 + need as u128 - self.capacity_n as u128;
            let retry = self.until_refilled(s, now, short);
            return (Decision::deny(self.capacity, remaining, retry, reset), None);
        }
        let deficit = deficit + need;
        let next = TokenBucketState {
            deficit,
            last: now.max(s.last),
        };
        let reset = dur(self.refill.time_for_scaled(deficit as u128, NANO_UNITS));
        (
            Decision::allow(
                self.capacity,
                (self.capacity_n - deficit) / NANO_UNITS,
                reset,
            ),
            (cost > 0).then_some(next),
        )
    }

    #[inline]
    fn apply(&self, s: &mut TokenBucketState, pending: TokenBucketState) {
        *s = pending;
    }

    #[inline]
    fn full_at(&self, s: &TokenBucketState) -> Nanos {
        if s.deficit == 0 {
            return Nanos::ZERO;
        }
        Nanos(
            s.last
                .0
                .saturating_add(self.refill.time_for_scaled(s.deficit as u128, NANO_UNITS)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_case() {
        let b = TokenBucket::new(10, Rate::per_second(2).unwrap()).unwrap();
        let mut s = TokenBucketState::default();
        let burst: Vec<bool> = (0..15)
            .map(|_| b.check(&mut s, Nanos::ZERO, 1).allowed)
            .collect();
        assert_eq!(burst.iter().filter(|a| **a).count(), 10);
        let d = b.check(&mut s, Nanos::ZERO, 1);
        assert_eq!(d.retry_after, Some(std::time::Duration::from_millis(500)));
        assert_eq!(d.reset_after, std::time::Duration::from_secs(5));
        let after = (0..10)
            .filter(|_| b.check(&mut s, Nanos::from_secs(3), 1).allowed)
            .count();
        assert_eq!(after, 6);
    }

    #[test]
    fn weighted_and_oversized_costs() {
        let b = TokenBucket::new(10, Rate::per_second(1).unwrap()).unwrap();
        let mut s = TokenBucketState::default();
        assert!(b.check(&mut s, Nanos::ZERO, 7).allowed);
        let d = b.check(&mut s, Nanos::ZERO, 4);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 3);
        assert_eq!(d.retry_after, Some(std::time::Duration::from_secs(1)));
        let d = b.check(&mut s, Nanos::ZERO, 11);
        assert!(d.retry_after.is_none());
        assert!(matches!(
            d.denial,
            Some(crate::Denial::CostExceedsLimit {
                cost: 11,
                limit: 10
            })
        ));
        assert!(TokenBucket::new(u64::MAX, Rate::per_second(1).unwrap()).is_err());
    }

    #[test]
    fn carried_tokens_keep_refilling_at_the_new_rate() {
        let slow = TokenBucket::new(10, Rate::per_second(1).unwrap()).unwrap();
        let fast = TokenBucket::new(10, Rate::per_second(4).unwrap()).unwrap();
        let mut s = TokenBucketState::default();
        assert!(slow.check(&mut s, Nanos::ZERO, 10).allowed);
        // 0.5 s at 1/s: half a token, carried exactly
        let t = Nanos(500_000_000);
        let mut s = slow.carry_to(&s, t, &fast);
        assert_eq!(s.deficit, 9_500_000_000);
        assert!(!fast.check(&mut s, t, 1).allowed);
        // 0.125 s more at 4/s: the other half
        assert!(fast.check(&mut s, Nanos(625_000_000), 1).allowed);
        assert!(!fast.check(&mut s, Nanos(625_000_000), 1).allowed);
        // a full bucket carried into a larger one is not full
        let big = TokenBucket::new(20, Rate::per_second(1).unwrap()).unwrap();
        let s = slow.carry_to(&TokenBucketState::default(), Nanos::ZERO, &big);
        assert_eq!(big.peek(&s, Nanos::ZERO, 0).remaining, 10);
        // a clock behind `last` refills nothing
        let s = TokenBucketState {
            deficit: 3_000_000_000,
            last: Nanos::from_secs(5),
        };
        let c = slow.carry_to(&s, Nanos::from_secs(1), &slow);
        assert_eq!(c, s);
    }

    #[test]
    fn backwards_time_is_no_refill() {
        let b = TokenBucket::new(2, Rate::per_second(1).unwrap()).unwrap();
        let mut s = TokenBucketState::default();
        let t = Nanos::from_secs(10);
        assert!(b.check(&mut s, t, 2).allowed);
        assert!(!b.check(&mut s, Nanos::from_secs(5), 1).allowed);
        // going back did not reset `last`: one second after t refills exactly one token
        assert!(b.check(&mut s, Nanos::from_secs(11), 1).allowed);
        assert!(!b.check(&mut s, Nanos::from_secs(11), 1).allowed);
    }
}
