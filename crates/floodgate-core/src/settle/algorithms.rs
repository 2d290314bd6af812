//! [`Settle`] for each algorithm, and for [`AnyAlgorithm`].

use super::{Charge, Settle, SettleError, Settlement, settled};
use crate::algorithm::Algorithm;
use crate::algorithms::{
    FixedWindow, FixedWindowState, Gcra, GcraState, LeakyBucket, LeakyState, NANO_UNITS,
    SlidingCounter, SlidingCounterState, SlidingLog, SlidingLogState, TokenBucket,
    TokenBucketState,
};
use crate::any::{AnyAlgorithm, AnyState};
use crate::rate::Rate;
use crate::time::Nanos;

/// `actual - estimate` (charged) and `estimate - actual` (to refund), one of them 0.
fn split(charge: Charge, actual: u64) -> (u64, u64) {
    (
        actual.saturating_sub(charge.cost),
        charge.cost.saturating_sub(actual),
    )
}

/// GCRA: the charge occupied `cost x T` of the theoretical arrival time (TAT).
///
/// **Debt:** the TAT moves `(actual - estimate) x T` later, past `now + tau` if need be;
/// requests are denied until it is back within `now + tau`.
/// **Refund:** at most `(estimate - actual) x T`, and no more than what is left of
/// `[at, at + estimate x T)` at `now` (the charge's units taken as spent one emission
/// interval each from the instant charged, the earliest the TAT could have spent them)
/// nor than the TAT's lead over `now`.
impl Settle for Gcra {
    fn settle(
        &self,
        state: &mut GcraState,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        let t = self.emission_interval_nanos() as u128;
        let (extra, refund) = split(charge, actual);
        if extra > 0 {
            let tat = state.tat.max(now).0 as u128 + extra as u128 * t;
            state.tat = Nanos(u64::try_from(tat).map_err(|_| SettleError::TooLarge { actual })?);
            return Ok(settled(self, state, now, extra, 0));
        }
        let end = charge.at.0 as u128 + charge.cost as u128 * t;
        let x = (refund as u128 * t)
            .min(end.saturating_sub(now.0 as u128))
            .min(state.tat.0.saturating_sub(now.0) as u128) as u64;
        state.tat = Nanos(state.tat.0 - x);
        Ok(settled(self, state, now, 0, (x as u128 / t) as u64))
    }
}

/// A continuous bucket: `value` nano-units as of `last`, at most `cap_n`, moving back
/// towards 0 at `rate` (the token bucket's deficit, the leaky bucket's level).
///
/// Debt beyond `cap_n` is kept as a full bucket whose `last` lies in the future: until
/// then nothing drains, which is exactly a value above `cap_n` draining down to it.
struct Continuous {
    rate: Rate,
    cap_n: u64,
}

impl Continuous {
    fn value_at(&self, value: u64, last: Nanos, at: Nanos) -> u64 {
        let elapsed = at.0.saturating_sub(last.0);
        let drained = self.rate.accrued_scaled(elapsed, NANO_UNITS);
        (value as u128)
            .saturating_sub(drained)
            .min(self.cap_n as u128) as u64
    }

    /// Nanoseconds to drain `units_n`, rounded down (so a refund never gives back more).
    fn time_floor(&self, units_n: u128) -> u64 {
        let num = units_n.saturating_mul(self.rate.period_nanos() as u128);
        let den = self.rate.count() as u128 * NANO_UNITS as u128;
        u64::try_from(num / den).unwrap_or(u64::MAX)
    }

    /// Settle on `(value, last)`; returns the new pair, units charged and units refunded.
    fn settle(
        &self,
        (value, last): (u64, Nanos),
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<((u64, Nanos), u64, u64), SettleError> {
        let (extra, refund) = split(charge, actual);
        let base = now.max(last);
        let current = self.value_at(value, last, base);
        if extra > 0 {
            let total = current as u128 + extra as u128 * NANO_UNITS as u128;
            if total <= self.cap_n as u128 {
                return Ok(((total as u64, base), extra, 0));
            }
            let debt = self
                .rate
                .time_for_scaled(total - self.cap_n as u128, NANO_UNITS);
            let start = base
                .0
                .checked_add(debt)
                .filter(|_| debt != u64::MAX)
                .ok_or(SettleError::TooLarge { actual })?;
            return Ok(((self.cap_n, Nanos(start)), extra, 0));
        }
        // what of the charge is not yet drained, counting its drain from the instant charged
        let since = now.0.saturating_sub(charge.at.0);
        let left = (charge.cost as u128 * NANO_UNITS as u128)
            .saturating_sub(self.rate.accrued_scaled(since, NANO_UNITS));
        let mut x = (refund as u128 * NANO_UNITS as u128).min(left);
        let (mut value, mut last) = (current, base);
        let mut refunded = 0u128;
        if last > now && value >= self.cap_n {
            // in debt: give back drain time first, never earlier than now
            let back = self.time_floor(x).min(last.0 - now.0);
            last = Nanos(last.0 - back);
            let freed = self.rate.accrued_scaled(back, NANO_UNITS).min(x);
            refunded += freed;
            x = if last > now { 0 } else { x - freed };
        }
        let take = x.min(value as u128) as u64;
        value -= take;
        let refunded = (refunded + take as u128) / NANO_UNITS as u128;
        Ok(((value, last), 0, refunded as u64))
    }
}

/// Token bucket. **Debt:** tokens below zero, kept as an empty bucket whose refill starts
/// when the debt is repaid. **Refund:** at most `estimate - actual` tokens, and no more
/// than what of the charge the refill since the instant charged has not covered.
impl Settle for TokenBucket {
    fn settle(
        &self,
        state: &mut TokenBucketState,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        let c = Continuous {
            rate: self.refill(),
            cap_n: self.limit() * NANO_UNITS, // validated at construction
        };
        let ((deficit, last), charged, refunded) =
            c.settle((state.deficit, state.last), now, charge, actual)?;
        *state = TokenBucketState { deficit, last };
        Ok(settled(self, state, now, charged, refunded))
    }
}

/// Leaky bucket (meter and queue). **Debt:** a level above `burst + 1`, kept as a full
/// bucket whose drain starts when the debt is repaid. **Refund:** at most
/// `estimate - actual`, and no more than what of the charge has not drained since the
/// instant charged. A queued request's delay was fixed when it was admitted: a settle
/// changes the delay of later requests, not its own.
impl Settle for LeakyBucket {
    fn settle(
        &self,
        state: &mut LeakyState,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        let c = Continuous {
            rate: self.rate(),
            cap_n: self.limit() * NANO_UNITS, // validated at construction
        };
        let ((level, last), charged, refunded) =
            c.settle((state.level, state.last), now, charge, actual)?;
        *state = LeakyState { level, last };
        Ok(settled(self, state, now, charged, refunded))
    }
}

/// Fixed window. **Debt:** added to the count of the window `now` falls in (the count
/// may exceed the limit); the debt ends with that window. **Refund:** only into the
/// window charged, and only while it is the current one: refunding a window that has
/// ended would not give anything back, and refunding another would mint capacity.
impl Settle for FixedWindow {
    fn settle(
        &self,
        state: &mut FixedWindowState,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        let (extra, refund) = split(charge, actual);
        let idx = (now.0 / self.window_nanos() + 1).max(state.window);
        if idx > state.window {
            *state = FixedWindowState {
                window: idx,
                count: 0,
            };
        }
        if extra > 0 {
            state.count = state
                .count
                .checked_add(extra)
                .ok_or(SettleError::TooLarge { actual })?;
            return Ok(settled(self, state, now, extra, 0));
        }
        let charged_in = charge.at.0 / self.window_nanos() + 1;
        let x = if charged_in == state.window {
            refund.min(state.count)
        } else {
            0
        };
        state.count -= x;
        Ok(settled(self, state, now, 0, x))
    }
}

/// Sliding counter. **Debt:** added to the current window's count (which may exceed the
/// limit), so it weighs on the rolling estimate for this window and, decreasingly, the
/// next. **Refund:** only into the window charged, while it is the current or the
/// previous one.
impl Settle for SlidingCounter {
    fn settle(
        &self,
        state: &mut SlidingCounterState,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        let (extra, refund) = split(charge, actual);
        let idx = now.0 / self.window_nanos() + 1;
        if idx == state.window + 1 {
            *state = SlidingCounterState {
                window: idx,
                current: 0,
                previous: state.current,
            };
        } else if idx > state.window {
            *state = SlidingCounterState {
                window: idx,
                current: 0,
                previous: 0,
            };
        }
        if extra > 0 {
            state.current = state
                .current
                .checked_add(extra)
                .ok_or(SettleError::TooLarge { actual })?;
            return Ok(settled(self, state, now, extra, 0));
        }
        let charged_in = charge.at.0 / self.window_nanos() + 1;
        let x = if charged_in == state.window {
            let x = refund.min(state.current);
            state.current -= x;
            x
        } else if charged_in + 1 == state.window {
            let x = refund.min(state.previous);
            state.previous -= x;
            x
        } else {
            0
        };
        Ok(settled(self, state, now, 0, x))
    }
}

/// Sliding log. **Debt:** an entry of `actual - estimate` units at the settle instant,
/// counted for one window from then. **Refund:** only from the entry at the instant
/// charged, while it is in the window. (A charge made while the clock stood behind the
/// log's newest entry was logged at that entry's instant and refunds nothing.)
impl Settle for SlidingLog {
    fn settle(
        &self,
        state: &mut SlidingLogState,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        let (extra, refund) = split(charge, actual);
        if extra > 0 {
            state
                .total
                .checked_add(extra)
                .ok_or(SettleError::TooLarge { actual })?;
            self.apply(state, (now, extra));
            return Ok(settled(self, state, now, extra, 0));
        }
        let mut x = 0;
        if !self.expired(charge.at, now)
            && let Some(i) = state.entries.iter().position(|(t, _)| *t == charge.at)
        {
            let units = &mut state.entries[i].1;
            x = refund.min(*units);
            *units -= x;
            state.total -= x;
            if *units == 0 {
                state.entries.remove(i);
            }
        }
        Ok(settled(self, state, now, 0, x))
    }
}

/// Any algorithm: settles with the variant's rules. A state of another variant (the
/// algorithm was changed at run time) is a key never seen: a refund is a no-op, a debt
/// is charged to a fresh state.
impl Settle for AnyAlgorithm {
    fn settle(
        &self,
        state: &mut AnyState,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        macro_rules! go {
            ($a:ident, $variant:ident) => {{
                if !matches!(state, AnyState::$variant(_)) {
                    *state = AnyState::$variant(Default::default());
                }
                match state {
                    AnyState::$variant(s) => $a.settle(s, now, charge, actual),
                    _ => Ok(settled(self, state, now, 0, 0)), // just set: not reached
                }
            }};
        }
        let fresh = !matches!(
            (self, &*state),
            (AnyAlgorithm::FixedWindow(_), AnyState::FixedWindow(_))
                | (AnyAlgorithm::SlidingLog(_), AnyState::SlidingLog(_))
                | (AnyAlgorithm::SlidingCounter(_), AnyState::SlidingCounter(_))
                | (AnyAlgorithm::TokenBucket(_), AnyState::TokenBucket(_))
                | (AnyAlgorithm::Leaky(_), AnyState::Leaky(_))
                | (AnyAlgorithm::Gcra(_), AnyState::Gcra(_))
        );
        if fresh && actual <= charge.cost {
            return Ok(settled(self, state, now, 0, 0));
        }
        match self {
            AnyAlgorithm::FixedWindow(a) => go!(a, FixedWindow),
            AnyAlgorithm::SlidingLog(a) => go!(a, SlidingLog),
            AnyAlgorithm::SlidingCounter(a) => go!(a, SlidingCounter),
            AnyAlgorithm::TokenBucket(a) => go!(a, TokenBucket),
            AnyAlgorithm::Leaky(a) => go!(a, Leaky),
            AnyAlgorithm::Gcra(a) => go!(a, Gcra),
        }
        .map(|r: Settlement| Settlement {
            decision: self.peek(state, now, 0),
            ..r
        })
    }
}
