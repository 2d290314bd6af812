//! GCRA: the generic cell rate algorithm (virtual scheduling), as in redis-cell.

use std::num::NonZeroU64;

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
/// **Settle** ([`crate::settle`]): an actual cost above the estimate moves the TAT past
/// `now + tau` (debt: denied until it is back within); a refund gives back only what of
/// the charge has not elapsed.
///
/// Parameters, in nanoseconds: emission interval `T = period / count`, delay variation
/// tolerance `tau = T x capacity`. A request of cost `c` moves the theoretical arrival
/// time to `max(now, TAT) + c x T` and is admitted when that is at most `now + tau`.
/// With [`Gcra::from_cell`] the answers are exactly redis-cell's `CL.THROTTLE` (rendered
/// with [`Decision::throttle_reply`]).
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
    /// Emission interval T, nanoseconds (never zero: dividing by it cannot panic, so a
    /// caller that does not read `remaining` does not pay for it once inlined).
    t_ns: NonZeroU64,
    /// Delay variation tolerance tau = T x capacity, nanoseconds.
    tau_ns: u64,
    /// Built by [`Gcra::from_cell`]: `remaining` is counted as redis-cell counts it.
    cell: bool,
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
        Gcra::with_interval(rate.emission_interval_nanos(), capacity, false)
    }

    fn with_interval(t_ns: u64, capacity: u64, cell: bool) -> Result<Gcra, ConfigError> {
        let tau_ns = t_ns.checked_mul(capacity).ok_or_else(|| ConfigError::Overflow {
            what: "capacity",
            detail: format!(
                "capacity {capacity} x emission interval {t_ns} ns does not fit in 64-bit nanoseconds"
            ),
        })?;
        let t_ns = NonZeroU64::new(t_ns).ok_or(ConfigError::Zero {
            what: "emission interval",
        })?;
        Ok(Gcra {
            capacity,
            t_ns,
            tau_ns,
            cell,
        })
    }

    /// redis-cell's parameters: `CL.THROTTLE key max_burst count period`, with `period`
    /// in seconds. The limit is `max_burst + 1`.
    ///
    /// Everything is computed as redis-cell 0.2.2 computes it, so that
    /// [`Decision::throttle_reply`] gives its five integers:
    ///
    /// * the emission interval is `period / count` divided in 64-bit floating point and
    ///   truncated to nanoseconds (the integer quotient whenever the period is below 2^53
    ///   ns, about 104 days);
    /// * `remaining` is counted from whole microseconds, `floor(floor((tau - ttl) / 1 us)
    ///   / floor(T / 1 us))` (0 when `tau - ttl` is negative), `ttl` being the time from
    ///   now to the theoretical arrival time. When `T` is not a whole number of
    ///   microseconds this can be one more than the exact count of units
    ///   that fit in `tau - ttl`; with `T` below 1 us it is `i64::MAX`, as redis-cell's.
    ///
    /// ```
    /// use floodgate_core::algorithms::Gcra;
    /// use floodgate_core::{Algorithm, Nanos, Rate};
    ///
    /// // 3 per second, bursts of 16: T = 333 333 333 ns. 2.666 666 s after spending the
    /// // whole burst, 7.999 998 T have come back: 7 units exactly, but 2 666 666 us /
    /// // 333 333 us = 8.000 002 in whole microseconds, and redis-cell says 8.
    /// let cell = Gcra::from_cell(15, 3, 1)?;
    /// let exact = Gcra::new(Rate::per_second(3)?, 16)?;
    /// let t = Nanos::from_secs(1_700_000_000);
    /// let later = Nanos(t.0 + 2_666_666_000);
    /// for (gcra, remaining) in [(&cell, 8), (&exact, 7)] {
    ///     let mut s = Default::default();
    ///     assert_eq!(gcra.check(&mut s, t, 16).remaining, 0);
    ///     assert_eq!(gcra.check(&mut s, later, 0).remaining, remaining);
    /// }
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
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
        // validates count and period as every rate is validated
        Rate::from_nanos(count, period_ns)?;
        // redis-cell: Duration::nanoseconds((period_ns as f64 / count as f64) as i64)
        let t_ns = ((period_ns as f64 / count as f64) as u64).max(1);
        Gcra::with_interval(t_ns, capacity, true)
    }

    /// Emission interval in nanoseconds.
    #[inline]
    pub fn emission_interval_nanos(&self) -> u64 {
        self.t_ns.get()
    }

    /// Delay variation tolerance in nanoseconds.
    pub fn tolerance_nanos(&self) -> u64 {
        self.tau_ns
    }

    /// Units that fit in `tau - ttl` (0 when negative); for [`Gcra::from_cell`], counted
    /// as redis-cell counts them.
    #[inline]
    fn remaining(&self, ttl: u64) -> u64 {
        if ttl > self.tau_ns {
            0
        } else if self.cell {
            // redis-cell: (next.num_microseconds() as f64 / T.num_microseconds() as f64)
            // as i64, with next = tau - ttl >= 0 here; a negative quotient is 0
            let next_us = (self.tau_ns - ttl) / 1_000;
            let t_us = self.t_ns.get() / 1_000;
            ((next_us as f64 / t_us as f64) as i64).max(0) as u64
        } else {
            (self.tau_ns - ttl) / self.t_ns
        }
    }
}

impl Gcra {
    /// [`decide`](Algorithm::decide)'s outcome in 128-bit arithmetic, for a new TAT
    /// past `u64::MAX`.
    #[cold]
    #[inline(never)]
    fn step_wide(&self, tat: u64, now: Nanos, cost: u64) -> Step {
        let increment = (cost as u128) * (self.t_ns.get() as u128);
        let new_tat = tat as u128 + increment;
        let horizon = now.0 as u128 + self.tau_ns as u128;
        if increment > self.tau_ns as u128 {
            Step::Never
        } else if new_tat > horizon {
            Step::Deny((new_tat - horizon) as u64) // <= increment <= tau: fits
        } else {
            // new_tat <= now + tau, so the TTL fits in u64
            Step::Allow((new_tat - now.0 as u128) as u64, sat_u64(new_tat))
        }
    }

    /// The outcome of a request of `cost` when the key's TAT is `tat` (at least `now`).
    #[inline(always)]
    fn step(&self, tat: u64, now: Nanos, cost: u64) -> Step {
        // 64-bit arithmetic whenever the new TAT fits, as it does for any sane parameters
        let Some((increment, new_tat)) = cost
            .checked_mul(self.t_ns.get())
            .and_then(|inc| Some((inc, tat.checked_add(inc)?)))
        else {
            return self.step_wide(tat, now, cost);
        };
        // new_tat >= tat >= now; admitted when new_tat <= now + tau
        let ttl = new_tat - now.0;
        if increment > self.tau_ns {
            Step::Never
        } else if ttl > self.tau_ns {
            Step::Deny(ttl - self.tau_ns) // <= increment <= tau
        } else {
            Step::Allow(ttl, new_tat)
        }
    }
}

/// What a request does to a GCRA key.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// The cost exceeds the capacity: never admitted.
    Never,
    /// Denied; a retry of the same cost succeeds after this many nanoseconds.
    Deny(u64),
    /// Admitted: the new TTL (TAT - now) and the new TAT.
    Allow(u64, u64),
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
        let ttl_before = tat - now.0;
        match self.step(tat, now, cost) {
            Step::Never => (
                Decision::never(
                    self.capacity,
                    cost,
                    self.remaining(ttl_before),
                    dur(ttl_before),
                ),
                None,
            ),
            Step::Deny(retry) => (
                Decision::deny(
                    self.capacity,
                    self.remaining(ttl_before),
                    dur(retry),
                    dur(ttl_before),
                ),
                None,
            ),
            Step::Allow(ttl, new_tat) => (
                Decision::allow(self.capacity, self.remaining(ttl), dur(ttl)),
                (cost > 0).then_some(Nanos(new_tat)),
            ),
        }
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
    fn durations_are_truncated_as_redis_cell_truncates_them() {
        // CL.THROTTLE k 15 30 60 twice, 1 us apart: reset_after 3.999999 s is 3
        let g = Gcra::from_cell(15, 30, 60).unwrap();
        let mut s = GcraState::default();
        assert_eq!(reply(&g, &mut s, NOW, 1), [0, 16, 15, -1, 2]);
        assert_eq!(
            reply(&g, &mut s, Nanos(NOW.0 + 1_000), 1),
            [0, 16, 14, -1, 3]
        );
        // denied 0.5 s into an emission interval of 2 s: retry_after 1.5 s is 1
        let mut s = GcraState::default();
        assert_eq!(reply(&g, &mut s, NOW, 16), [0, 16, 0, -1, 32]);
        let half = Nanos(NOW.0 + 500_000_000);
        assert_eq!(reply(&g, &mut s, half, 1), [1, 16, 0, 1, 31]);
        // a retry under a second is 0 seconds (1 ns here), and a reset of 30.000000001 s
        // is 30
        let late = Nanos(NOW.0 + 1_999_999_999);
        assert_eq!(reply(&g, &mut s, late, 1), [1, 16, 0, 0, 30]);
        assert_eq!(reply(&g, &mut s, Nanos(late.0 + 1), 1), [0, 16, 0, -1, 32]);
    }

    #[test]
    fn from_cell_divides_and_counts_as_redis_cell() {
        // period / count in floating point, truncated: differs from the integer quotient
        // only for periods beyond 2^53 ns
        let g = Gcra::from_cell(0, 3, 20_000_000).unwrap();
        assert_eq!(g.emission_interval_nanos(), 6_666_666_666_666_667);
        let g = Gcra::from_cell(0, 7, 86_400).unwrap();
        assert_eq!(g.emission_interval_nanos(), 86_400_000_000_000 / 7);
        // remaining from whole microseconds: T = 1 000 500 ns (1000 us), tau - ttl =
        // 2 000 999 ns is 1.9999 T, but 2000 us / 1000 us = 2
        let t_ns = 1_000_500;
        let cell = Gcra::with_interval(t_ns, 10, true).unwrap();
        let exact = Gcra::with_interval(t_ns, 10, false).unwrap();
        let ttl = 10 * t_ns - 2_000_999;
        assert_eq!(cell.remaining(ttl), 2);
        assert_eq!(exact.remaining(ttl), 1);
        assert_eq!(cell.remaining(10 * t_ns + 1), 0);
        // T below a microsecond: redis-cell divides by zero microseconds
        let tiny = Gcra::with_interval(999, 3, true).unwrap();
        assert_eq!(tiny.remaining(0), i64::MAX as u64);
        assert_eq!(tiny.remaining(3 * 999), 0);
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

    #[test]
    fn the_64_bit_path_decides_as_the_128_bit_one() {
        let mut x = 0x0123_4567_89AB_CDEFu64;
        let mut next = move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB)
        };
        let edges = [0, 1, 2, 999, u64::MAX / 2, u64::MAX - 1, u64::MAX];
        let mut pick = move |small: u64| match next() % 4 {
            0 => edges[(next() % edges.len() as u64) as usize],
            1 => next() % small,
            _ => next(),
        };
        let (mut fast, mut wide_only) = (0, 0);
        for _ in 0..200_000 {
            let (t, cap) = (pick(1 << 40).max(1), pick(1 << 12).max(1));
            let Ok(g) = Gcra::with_interval(t, cap, false) else {
                continue;
            };
            let now = Nanos(pick(1 << 50));
            let tat = now.0.saturating_add(pick(1 << 45));
            let cost = pick(1 << 13);
            let wide = g.step_wide(tat, now, cost);
            assert_eq!(
                g.step(tat, now, cost),
                wide,
                "{g:?} tat {tat} now {now:?} cost {cost}"
            );
            match cost.checked_mul(t).and_then(|i| tat.checked_add(i)) {
                Some(_) => fast += 1,
                None => wide_only += 1,
            }
        }
        assert!(
            fast > 10_000 && wide_only > 1_000,
            "{fast} fast, {wide_only} wide"
        );
    }
}
