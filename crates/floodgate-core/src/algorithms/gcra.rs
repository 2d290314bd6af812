//! GCRA: the generic cell rate algorithm (virtual scheduling), as in redis-cell.

use super::{dur, nonzero, sat_u64};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::time::Nanos;

/// **Guarantee:** over any span of length `t`, at most `capacity + rate x t` units are
/// admitted; a key at rest may burst `capacity` at once, then gets one unit per emission
/// interval. One integer of state (the theoretical arrival time).
///
/// Parameters, in nanoseconds: emission interval `T = period / count`, delay variation
/// tolerance `tau = T x capacity`. A request of cost `c` moves the theoretical arrival
/// time to `max(now, TAT) + c x T` and is admitted when that is at most `now + tau`.
/// With [`Gcra::from_cell`] the answers are exactly redis-cell's `CL.THROTTLE`.
///
/// ```
/// use floodgate_core::algorithms::Gcra;
/// use floodgate_core::{Algorithm, Nanos, Rate};
///
/// let gcra = Gcra::new(Rate::per_second(10)?, 5)?; // 10/s, bursts of 5
/// let mut state = Default::default();
/// let now = Nanos::from_secs(100);
/// let admitted = (0..8).filter(|_| gcra.check(&mut state, now, 1).allowed).count();
/// assert_eq!(admitted, 5);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra {
    capacity: u64,
    /// Emission interval T, nanoseconds.
    t_ns: u64,
    /// Delay variation tolerance tau = T x capacity, nanoseconds.
    tau_ns: u64,
}

/// GCRA per-key state: the theoretical arrival time in nanoseconds (0 = never seen).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcraState {
    /// Theoretical arrival time.
    pub tat: Nanos,
}

impl Gcra {
    /// `rate` with bursts of up to `capacity` units at once.
    pub fn new(rate: Rate, capacity: u64) -> Result<Gcra, ConfigError> {
        let capacity = nonzero(capacity, "capacity")?;
        let t_ns = rate.emission_interval_nanos();
        let tau_ns = t_ns.checked_mul(capacity).ok_or_else(|| ConfigError::Overflow {
            what: "capacity",
            detail: format!(
                "capacity {capacity} x emission interval {t_ns} ns does not fit in 64-bit nanoseconds"
            ),
        })?;
        Ok(Gcra {
            capacity,
            t_ns,
            tau_ns,
        })
    }

    /// redis-cell's parameters: `CL.THROTTLE key max_burst count period`, with `period`
    /// in seconds. The limit is `max_burst + 1`.
    pub fn from_cell(max_burst: u64, count: u64, period_secs: u64) -> Result<Gcra, ConfigError> {
        if count == 0 || period_secs == 0 {
            return Err(ConfigError::Zero {
                what: if count == 0 { "count" } else { "period" },
            });
        }
        let period_ns =
            period_secs
                .checked_mul(1_000_000_000)
                .ok_or_else(|| ConfigError::Overflow {
                    what: "period",
                    detail: format!("{period_secs} s does not fit in 64-bit nanoseconds"),
                })?;
        let capacity = max_burst
            .checked_add(1)
            .ok_or_else(|| ConfigError::Overflow {
                what: "max_burst",
                detail: "max_burst + 1 overflows".into(),
            })?;
        Gcra::new(Rate::from_nanos(count, period_ns)?, capacity)
    }

    /// Emission interval in nanoseconds.
    #[inline]
    pub fn emission_interval_nanos(&self) -> u64 {
        self.t_ns
    }

    /// Delay variation tolerance in nanoseconds.
    pub fn tolerance_nanos(&self) -> u64 {
        self.tau_ns
    }

    #[inline]
    fn remaining(&self, ttl: u64) -> u64 {
        if ttl <= self.tau_ns {
            (self.tau_ns - ttl) / self.t_ns
        } else {
            0
        }
    }
}

impl Algorithm for Gcra {
    type State = GcraState;
    type Pending = Nanos;

    #[inline]
    fn limit(&self) -> u64 {
        self.capacity
    }

    #[inline(always)]
    fn decide(&self, state: &GcraState, now: Nanos, cost: u64) -> (Decision, Option<Nanos>) {
        let tat = state.tat.max(now).0;
        let increment = (cost as u128) * (self.t_ns as u128);
        let new_tat = tat as u128 + increment;
        let horizon = now.0 as u128 + self.tau_ns as u128;
        let ttl_before = tat - now.0;
        if increment > self.tau_ns as u128 {
            return (
                Decision::never(
                    self.capacity,
                    cost,
                    self.remaining(ttl_before),
                    dur(ttl_before),
                ),
                None,
            );
        }
        if new_tat > horizon {
            let retry = (new_tat - horizon) as u64; // <= increment <= tau: fits
            return (
                Decision::deny(
                    self.capacity,
                    self.remaining(ttl_before),
                    dur(retry),
                    dur(ttl_before),
                ),
                None,
            );
        }
        // new_tat <= now + tau, so both fit in u64 relative to now.
        let ttl = (new_tat - now.0 as u128) as u64;
        let pending = (cost > 0).then_some(Nanos(sat_u64(new_tat)));
        (
            Decision::allow(self.capacity, self.remaining(ttl), dur(ttl)),
            pending,
        )
    }

    #[inline]
    fn apply(&self, state: &mut GcraState, pending: Nanos) {
        state.tat = pending;
    }

    #[inline]
    fn full_at(&self, state: &GcraState) -> Nanos {
        state.tat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Nanos = Nanos(1_700_000_000_000_000_000);

    fn reply(g: &Gcra, s: &mut GcraState, now: Nanos, q: u64) -> [i64; 5] {
        g.check(s, now, q).throttle_reply()
    }

    #[test]
    fn redis_cell_examples() {
        let g = Gcra::from_cell(15, 30, 60).unwrap();
        let mut s = GcraState::default();
        assert_eq!(reply(&g, &mut s, NOW, 1), [0, 16, 15, -1, 2]);
        assert_eq!(reply(&g, &mut s, NOW, 1), [0, 16, 14, -1, 4]);
        let mut fresh = GcraState::default();
        assert_eq!(reply(&g, &mut fresh, NOW, 0), [0, 16, 16, -1, 0]);
        let g = Gcra::from_cell(4, 1, 1).unwrap();
        let mut s = GcraState::default();
        assert_eq!(reply(&g, &mut s, NOW, 6), [1, 5, 5, -1, 0]);
    }

    #[test]
    fn burst_then_limited_with_retry_after() {
        let g = Gcra::from_cell(15, 30, 60).unwrap();
        let mut s = GcraState::default();
        for i in 0..16 {
            let d = g.check(&mut s, NOW, 1);
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 15 - i);
        }
        let d = g.check(&mut s, NOW, 1);
        assert!(!d.allowed);
        assert_eq!(d.throttle_reply(), [1, 16, 0, 2, 32]);
        // after one emission interval, one more is admitted
        assert!(g.check(&mut s, Nanos(NOW.0 + 2_000_000_000), 1).allowed);
    }

    #[test]
    fn rejects_invalid_parameters() {
        assert!(Gcra::from_cell(1, 0, 60).is_err());
        assert!(Gcra::from_cell(1, 10, 0).is_err());
        assert!(Gcra::from_cell(u64::MAX, 10, 60).is_err());
        assert!(Gcra::from_cell(1, 10, u64::MAX).is_err());
        assert!(Gcra::new(Rate::per_second(1).unwrap(), u64::MAX).is_err());
        assert!(Gcra::new(Rate::per_second(1).unwrap(), 0).is_err());
    }

    #[test]
    fn huge_costs_and_times_do_not_panic() {
        let g = Gcra::new(Rate::per_second(1).unwrap(), 10).unwrap();
        let mut s = GcraState::default();
        let d = g.check(&mut s, Nanos::MAX, u64::MAX);
        assert!(!d.allowed);
        assert!(g.check(&mut s, Nanos::MAX, 1).allowed);
        let _ = g.check(&mut s, Nanos::ZERO, 3);
    }
}
