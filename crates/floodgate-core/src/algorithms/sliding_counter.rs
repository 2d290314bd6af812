//! Sliding window counter: the previous window's count, weighted by how much of it still
//! overlaps the rolling window, plus the current window's count.

use std::time::Duration;

use super::{dur, nonzero, sat_u64, window_nanos};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::time::Nanos;

/// **Guarantee:** at most `limit` units per aligned window (like [`super::FixedWindow`]),
/// and the rolling estimate `previous x (1 - elapsed / W) + current` never exceeds
/// `limit`. That estimate assumes the previous window's requests were spread evenly; a
/// rolling window can exceed `limit` only when they were not (worst case just under `2L`
/// for traffic bunched at the very end of a window, which the estimate discounts). On the
/// classic boundary burst (`L` at the end of one window, `L` at the start of the next)
/// it admits `L`. Three integers of state.
///
/// **Settle** ([`crate::settle`]): an actual cost above the estimate is added to the
/// current window's count; a refund goes only into the window charged, while it is the
/// current or the previous one.
///
/// The comparison is exact rational arithmetic: admitted iff
/// `previous x (W - elapsed) + (current + cost) x W <= limit x W`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingCounter {
    limit: u64,
    window_ns: u64,
}

/// Sliding-counter per-key state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingCounterState {
    /// Index of the current window plus one (0 = never seen).
    pub window: u64,
    /// Units admitted in the current window.
    pub current: u64,
    /// Units admitted in the window before it.
    pub previous: u64,
}

impl SlidingCounter {
    /// About `limit` units per rolling window of length `window`.
    pub fn new(limit: u64, window: Duration) -> Result<SlidingCounter, ConfigError> {
        let limit = nonzero(limit, "limit")?;
        let window_ns = window_nanos(window)?;
        if (limit as u128) * (window_ns as u128) >= 1 << 126 {
            return Err(ConfigError::Overflow {
                what: "limit",
                detail: format!(
                    "limit {limit} x window {window_ns} ns is beyond 2^126 unit-nanoseconds"
                ),
            });
        }
        Ok(SlidingCounter { limit, window_ns })
    }

    /// The window length in nanoseconds.
    pub fn window_nanos(&self) -> u64 {
        self.window_ns
    }

    /// The state rolled forward to `now`, and nanoseconds elapsed in the current window.
    #[inline]
    fn roll(&self, s: &SlidingCounterState, now: Nanos) -> (SlidingCounterState, u64) {
        let idx = now.0 / self.window_ns + 1;
        let rolled = if idx <= s.window {
            *s // same window, or a clock step back: keep counting in the newest window
        } else if idx == s.window + 1 {
            SlidingCounterState {
                window: idx,
                current: 0,
                previous: s.current,
            }
        } else {
            SlidingCounterState {
                window: idx,
                current: 0,
                previous: 0,
            }
        };
        let start = (rolled.window - 1) as u128 * self.window_ns as u128;
        let elapsed = (now.0 as u128)
            .saturating_sub(start)
            .min(self.window_ns as u128 - 1);
        (rolled, elapsed as u64)
    }

    /// `limit x W - previous x (W - elapsed) - current x W`, in unit-nanoseconds (may be < 0).
    #[inline]
    fn headroom(&self, s: &SlidingCounterState, elapsed: u64) -> i128 {
        let w = self.window_ns as i128;
        (self.limit as i128 * w)
            .saturating_sub((s.previous as i128).saturating_mul(w - elapsed as i128))
            .saturating_sub((s.current as i128).saturating_mul(w))
    }

    /// Nanoseconds from `elapsed` until `weight x (W - e) <= budget_units x W`, with `e`
    /// measured in the same window (may equal `W`: the start of the next window).
    #[inline]
    fn wait_for(&self, weight: u64, budget_units: u64, elapsed: u64) -> u64 {
        let w = self.window_ns as u128;
        let allowed_overlap = if weight == 0 {
            w
        } else {
            (budget_units as u128 * w) / weight as u128
        };
        let e = w.saturating_sub(allowed_overlap);
        sat_u64(e.saturating_sub(elapsed as u128))
    }
}

impl Algorithm for SlidingCounter {
    type State = SlidingCounterState;
    type Pending = SlidingCounterState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn decide(
        &self,
        s: &SlidingCounterState,
        now: Nanos,
        cost: u64,
    ) -> (Decision, Option<SlidingCounterState>) {
        let (rolled, elapsed) = self.roll(s, now);
        let w = self.window_ns;
        let to_end = w - elapsed;
        let reset_of = |st: &SlidingCounterState| {
            if st.current > 0 {
                dur(to_end.saturating_add(w))
            } else if st.previous > 0 {
                dur(to_end)
            } else {
                Duration::ZERO
            }
        };
        let headroom = self.headroom(&rolled, elapsed);
        let remaining = |h: i128| u64::try_from((h.max(0)) / w as i128).unwrap_or(u64::MAX);
        if cost > self.limit {
            return (
                Decision::never(self.limit, cost, remaining(headroom), reset_of(&rolled)),
                None,
            );
        }
        let need = cost as i128 * w as i128;
        if need > headroom {
            let fits_this_window = rolled
                .current
                .checked_add(cost)
                .is_some_and(|n| n <= self.limit);
            let retry = if fits_this_window {
                self.wait_for(rolled.previous, self.limit - rolled.current - cost, elapsed)
            } else {
                // wait for the next window, where `current` becomes the weighted part
                to_end.saturating_add(self.wait_for(rolled.current, self.limit - cost, 0))
            };
            return (
                Decision::deny(
                    self.limit,
                    remaining(headroom),
                    dur(retry),
                    reset_of(&rolled),
                ),
                None,
            );
        }
        let next = SlidingCounterState {
            current: rolled.current + cost,
            ..rolled
        };
        (
            Decision::allow(self.limit, remaining(headroom - need), reset_of(&next)),
            (cost > 0).then_some(next),
        )
    }

    #[inline]
    fn apply(&self, s: &mut SlidingCounterState, pending: SlidingCounterState) {
        *s = pending;
    }

    #[inline]
    fn full_at(&self, s: &SlidingCounterState) -> Nanos {
        let end_of = |k: u64| Nanos(k.saturating_mul(self.window_ns));
        if s.current > 0 {
            end_of(s.window.saturating_add(1))
        } else if s.previous > 0 {
            end_of(s.window)
        } else {
            Nanos::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_burst_is_held_to_the_limit() {
        let sc = SlidingCounter::new(100, Duration::from_secs(60)).unwrap();
        let mut s = SlidingCounterState::default();
        let a = (0..100)
            .filter(|_| sc.check(&mut s, Nanos::from_millis(59_900), 1).allowed)
            .count();
        let b = (0..100)
            .filter(|_| sc.check(&mut s, Nanos::from_millis(60_100), 1).allowed)
            .count();
        assert_eq!((a, b), (100, 0));
    }

    #[test]
    fn retry_after_is_when_the_estimate_fits() {
        let sc = SlidingCounter::new(10, Duration::from_secs(10)).unwrap();
        let mut s = SlidingCounterState::default();
        for _ in 0..10 {
            assert!(sc.check(&mut s, Nanos::from_secs(5), 1).allowed);
        }
        // same window: wait for the next window, where 10 x (10 - e)/10 + 1 <= 10 at e = 1
        let d = sc.check(&mut s, Nanos::from_secs(5), 1);
        assert_eq!(d.retry_after, Some(Duration::from_secs(6)));
        let t = Nanos::from_secs(5).saturating_add(d.retry_after.unwrap());
        assert!(!sc.peek(&s, Nanos(t.0 - 1), 1).allowed);
        assert!(sc.check(&mut s, t, 1).allowed);
        assert_eq!(d.reset_after, Duration::from_secs(15));
    }
}
