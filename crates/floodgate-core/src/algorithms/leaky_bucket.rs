//! Leaky bucket, as a meter and as a delaying queue with nginx `limit_req` semantics.

use std::time::Duration;

use super::{NANO_UNITS, dur, nano_units, sat_u64};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::time::Nanos;

/// **Guarantee:** over any span of length `t`, at most `burst + 1 + rate x t` units are
/// admitted. As a queue, admitted requests beyond the first `delay + 1` in the bucket are
/// held so that they are *forwarded* at `rate`: the backend never sees a burst above
/// `delay + 1`.
///
/// **Settle** ([`crate::settle`]): an actual cost above the estimate raises the level past
/// `burst + 1` (debt, drained before anything is admitted); a refund gives back only what
/// has not drained since the charge.
///
/// This is nginx `limit_req` (`rate`, `burst`, `nodelay`, `delay=N`): the bucket's level is
/// nginx's `excess + 1` request (the request being served), drained continuously at
/// `rate`. A request of cost `c` raises the level by `c`; it is admitted when the level
/// stays at most `burst + 1`, and a rejected request costs nothing. An admitted request
/// waits `(level - 1 - delay) / rate` when that is positive, unless `nodelay`.
/// nginx keeps milli-requests and milliseconds; floodgate keeps nano-requests and
/// nanoseconds, so its rate is exact where nginx truncates (`rate=1r/m` is 16 milli-r/s
/// there).
///
/// ```
/// use floodgate_core::algorithms::{DelayMode, LeakyBucket};
/// use floodgate_core::{Algorithm, Nanos, Rate};
/// use std::time::Duration;
///
/// // limit_req rate=5r/s burst=12 delay=8: 9 at once, 4 delayed 200..800 ms, 14th rejected
/// let q = LeakyBucket::queue(Rate::per_second(5)?, 12, DelayMode::After(8))?;
/// let mut s = Default::default();
/// let d: Vec<_> = (0..14).map(|_| q.check(&mut s, Nanos::ZERO, 1)).collect();
/// assert!(d[..9].iter().all(|d| d.allowed && d.delay.is_zero()));
/// assert_eq!(d[9].delay, Duration::from_millis(200));
/// assert_eq!(d[12].delay, Duration::from_millis(800));
/// assert!(!d[13].allowed);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakyBucket {
    rate: Rate,
    burst: u64,
    delay: DelayMode,
    capacity: u64,
    capacity_n: u64,
    /// Level up to which admitted requests pass at once (nano-units); `u64::MAX` = nodelay.
    undelayed_n: u64,
}

/// How an admitted request above the rate is treated (nginx's `nodelay` / `delay=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayMode {
    /// `nodelay`: admitted requests pass at once; the bucket is a pure meter.
    NoDelay,
    /// `delay=N`: the first `N` excess requests pass at once, the rest up to `burst` wait.
    /// `After(0)` is nginx's default: every excess request waits.
    After(u64),
}

/// Leaky bucket per-key state. `Default` is an empty bucket (full capacity).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeakyState {
    /// Level in nano-units as of `last` (nginx's excess + one request).
    pub level: u64,
    /// When `level` was computed.
    pub last: Nanos,
}

impl LeakyBucket {
    /// A meter: up to `capacity` units at once, draining at `rate`; never delays.
    pub fn meter(capacity: u64, rate: Rate) -> Result<LeakyBucket, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::Zero { what: "capacity" });
        }
        LeakyBucket::queue(rate, capacity - 1, DelayMode::NoDelay)
    }

    /// nginx's `limit_req rate=RATE burst=BURST [nodelay | delay=N]`.
    pub fn queue(rate: Rate, burst: u64, delay: DelayMode) -> Result<LeakyBucket, ConfigError> {
        let capacity = burst.checked_add(1).ok_or_else(|| ConfigError::Overflow {
            what: "burst",
            detail: "burst + 1 overflows".into(),
        })?;
        let capacity_n = nano_units(capacity, "burst")?;
        let undelayed_n = match delay {
            DelayMode::NoDelay => u64::MAX,
            DelayMode::After(n) if n > burst => {
                return Err(ConfigError::Inconsistent(format!(
                    "delay={n} is above burst={burst}: no request could ever be delayed; use nodelay"
                )));
            }
            DelayMode::After(n) => (n + 1) * NANO_UNITS,
        };
        Ok(LeakyBucket {
            rate,
            burst,
            delay,
            capacity,
            capacity_n,
            undelayed_n,
        })
    }

    /// The drain rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// nginx's `burst`.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// nginx's `nodelay` / `delay=`.
    pub fn delay_mode(&self) -> DelayMode {
        self.delay
    }

    #[inline]
    fn level_at(&self, s: &LeakyState, now: Nanos) -> u64 {
        let elapsed = now.0.saturating_sub(s.last.0);
        s.level
            .saturating_sub(sat_u64(self.rate.accrued_scaled(elapsed, NANO_UNITS)))
            .min(self.capacity_n)
    }

    /// Time from `now` until the drain since `s.last` reaches `units_n` nano-units: exact,
    /// because drain is always measured from `last`.
    #[inline]
    fn until_drained(&self, s: &LeakyState, now: Nanos, units_n: u128) -> Duration {
        let at = s
            .last
            .0
            .saturating_add(self.rate.time_for_scaled(units_n, NANO_UNITS));
        dur(at.saturating_sub(now.0))
    }

    #[inline]
    fn time_for(&self, level_n: u64) -> Duration {
        dur(self.rate.time_for_scaled(level_n as u128, NANO_UNITS))
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyState;
    type Pending = LeakyState;

    #[inline]
    fn limit(&self) -> u64 {
        self.capacity
    }

    #[inline]
    fn decide(&self, s: &LeakyState, now: Nanos, cost: u64) -> (Decision, Option<LeakyState>) {
        let level = self.level_at(s, now);
        let remaining = (self.capacity_n - level) / NANO_UNITS;
        let reset = if level == 0 {
            Duration::ZERO
        } else {
            self.until_drained(s, now, s.level as u128)
        };
        if cost > self.capacity {
            return (Decision::never(self.capacity, cost, remaining, reset), None);
        }
        let new_level = level + cost * NANO_UNITS; // both <= capacity_n, no overflow
        if new_level > self.capacity_n {
            // admitted once the drain since `last` covers stored level + cost - capacity
            let over = s.level as u128 + (cost * NANO_UNITS) as u128 - self.capacity_n as u128;
            let retry = self.until_drained(s, now, over);
            return (Decision::deny(self.capacity, remaining, retry, reset), None);
        }
        let delay = self.time_for(new_level.saturating_sub(self.undelayed_n));
        let decision = Decision::allow(
            self.capacity,
            (self.capacity_n - new_level) / NANO_UNITS,
            self.time_for(new_level),
        )
        .with_delay(delay);
        let next = LeakyState {
            level: new_level,
            last: now.max(s.last),
        };
        (decision, (cost > 0).then_some(next))
    }

    #[inline]
    fn apply(&self, s: &mut LeakyState, pending: LeakyState) {
        *s = pending;
    }

    #[inline]
    fn full_at(&self, s: &LeakyState) -> Nanos {
        if s.level == 0 {
            return Nanos::ZERO;
        }
        s.last.saturating_add(self.time_for(s.level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burst_of(q: &LeakyBucket, n: usize) -> Vec<Decision> {
        let mut s = LeakyState::default();
        (0..n)
            .map(|_| q.check(&mut s, Nanos::from_secs(1), 1))
            .collect()
    }

    #[test]
    fn nginx_nodelay_21_of_30() {
        let q = LeakyBucket::queue(Rate::per_second(10).unwrap(), 20, DelayMode::NoDelay).unwrap();
        let d = burst_of(&q, 30);
        assert_eq!(d.iter().filter(|d| d.allowed).count(), 21);
        assert!(d.iter().all(|d| d.delay.is_zero()));
        assert!(
            d[21..]
                .iter()
                .all(|d| d.retry_after == Some(Duration::from_millis(100)))
        );
    }

    #[test]
    fn nginx_delay_all_spaces_excess_at_100ms() {
        let q = LeakyBucket::queue(Rate::per_second(10).unwrap(), 20, DelayMode::After(0)).unwrap();
        let d = burst_of(&q, 30);
        for (i, d) in d.iter().enumerate().take(21) {
            assert!(d.allowed);
            assert_eq!(
                d.delay,
                Duration::from_millis(100 * i as u64),
                "request {i}"
            );
        }
        assert!(d[21..].iter().all(|d| !d.allowed));
    }

    #[test]
    fn rejected_requests_cost_nothing() {
        let q = LeakyBucket::queue(Rate::per_second(10).unwrap(), 1, DelayMode::NoDelay).unwrap();
        let mut s = LeakyState::default();
        let t = Nanos::from_secs(1);
        assert!(q.check(&mut s, t, 1).allowed);
        assert!(q.check(&mut s, t, 1).allowed);
        for _ in 0..100 {
            assert!(!q.check(&mut s, t, 1).allowed);
        }
        // 100 ms later exactly one unit has drained, whatever the rejected ones did
        assert!(q.check(&mut s, Nanos(t.0 + 100_000_000), 1).allowed);
    }

    #[test]
    fn meter_and_bad_parameters() {
        let m = LeakyBucket::meter(3, Rate::per_second(1).unwrap()).unwrap();
        assert_eq!(burst_of(&m, 5).iter().filter(|d| d.allowed).count(), 3);
        assert!(LeakyBucket::meter(0, Rate::per_second(1).unwrap()).is_err());
        assert!(LeakyBucket::queue(Rate::per_second(1).unwrap(), 2, DelayMode::After(3)).is_err());
        assert!(
            LeakyBucket::queue(Rate::per_second(1).unwrap(), u64::MAX, DelayMode::NoDelay).is_err()
        );
    }
}
