//! Sliding window log: a timestamp per admitted instant.

use std::collections::VecDeque;
use std::time::Duration;

use super::{dur, nonzero, window_nanos};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::time::Nanos;

/// **Guarantee:** at most `limit` units in *any* rolling window of length `W`, exactly:
/// a unit admitted at `t` counts against every request in `[t, t + W)`.
///
/// **Settle** ([`crate::settle`]): an actual cost above the estimate is logged at the
/// settle instant; a refund comes only out of the entry at the instant charged, while it
/// is in the window.
///
/// Memory is one entry (instant, units) per distinct admitted instant, at most `limit`
/// entries per key (every entry holds at least one unit).
///
/// ```
/// use floodgate_core::algorithms::SlidingLog;
/// use floodgate_core::{Algorithm, Nanos};
/// use std::time::Duration;
///
/// let log = SlidingLog::new(100, Duration::from_secs(60))?;
/// let mut s = Default::default();
/// let a = (0..100).filter(|_| log.check(&mut s, Nanos::from_millis(59_900), 1).allowed).count();
/// let b = (0..100).filter(|_| log.check(&mut s, Nanos::from_millis(60_100), 1).allowed).count();
/// assert_eq!(a + b, 100);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    window_ns: u64,
}

/// Sliding-log per-key state: admitted `(instant, units)`, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    pub(crate) entries: VecDeque<(Nanos, u64)>,
    pub(crate) total: u64,
}

impl SlidingLogState {
    /// Admitted `(instant, units)` still stored, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = (Nanos, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// The state holding `entries` (oldest first), as a store that keeps the log itself
    /// reads it back: the total is their sum.
    pub fn from_entries(entries: impl IntoIterator<Item = (Nanos, u64)>) -> SlidingLogState {
        let entries: VecDeque<(Nanos, u64)> = entries.into_iter().collect();
        let total = entries.iter().fold(0u64, |t, (_, c)| t.saturating_add(*c));
        SlidingLogState { entries, total }
    }
}

impl SlidingLog {
    /// At most `limit` units in any window of length `window`.
    pub fn new(limit: u64, window: Duration) -> Result<SlidingLog, ConfigError> {
        Ok(SlidingLog {
            limit: nonzero(limit, "limit")?,
            window_ns: window_nanos(window)?,
        })
    }

    /// The window length in nanoseconds.
    pub fn window_nanos(&self) -> u64 {
        self.window_ns
    }

    #[inline]
    pub(crate) fn expired(&self, t: Nanos, now: Nanos) -> bool {
        t.0.saturating_add(self.window_ns) <= now.0
    }

    #[inline]
    fn until_expiry(&self, t: Nanos, now: Nanos) -> Duration {
        dur(t.0.saturating_add(self.window_ns).saturating_sub(now.0))
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;
    type Pending = (Nanos, u64);

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn decide(
        &self,
        s: &SlidingLogState,
        now: Nanos,
        cost: u64,
    ) -> (Decision, Option<(Nanos, u64)>) {
        let live = s.entries.iter().skip_while(|(t, _)| self.expired(*t, now));
        let expired: u64 = s
            .entries
            .iter()
            .take_while(|(t, _)| self.expired(*t, now))
            .map(|(_, c)| c)
            .sum();
        let used = s.total.saturating_sub(expired);
        let remaining = self.limit.saturating_sub(used);
        let reset = s
            .entries
            .back()
            .map_or(Duration::ZERO, |(t, _)| self.until_expiry(*t, now));
        if cost > self.limit {
            return (Decision::never(self.limit, cost, remaining, reset), None);
        }
        if cost > remaining {
            let need = used as u128 + cost as u128 - self.limit as u128;
            let mut freed = 0u128;
            let mut retry = reset;
            for (t, c) in live {
                freed += *c as u128;
                if freed >= need {
                    retry = self.until_expiry(*t, now);
                    break;
                }
            }
            return (Decision::deny(self.limit, remaining, retry, reset), None);
        }
        let at = s.entries.back().map_or(now, |(t, _)| now.max(*t));
        let reset = if cost > 0 {
            self.until_expiry(at, now)
        } else {
            reset
        };
        (
            Decision::allow(self.limit, remaining - cost, reset),
            (cost > 0).then_some((now, cost)),
        )
    }

    #[inline]
    fn apply(&self, s: &mut SlidingLogState, (now, cost): (Nanos, u64)) {
        while let Some(&(t, c)) = s.entries.front() {
            if !self.expired(t, now) {
                break;
            }
            s.entries.pop_front();
            s.total = s.total.saturating_sub(c);
        }
        // Keep entries ordered even if time stepped back: count the request at the newest
        // instant, which keeps it in the log at least as long as its true instant would.
        match s.entries.back_mut() {
            Some((t, c)) if *t >= now => *c = c.saturating_add(cost),
            _ => s.entries.push_back((now, cost)),
        }
        s.total = s.total.saturating_add(cost);
    }

    #[inline]
    fn full_at(&self, s: &SlidingLogState) -> Nanos {
        s.entries.back().map_or(Nanos::ZERO, |(t, _)| {
            Nanos(t.0.saturating_add(self.window_ns))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_points_at_the_oldest_needed_expiry() {
        let log = SlidingLog::new(3, Duration::from_secs(10)).unwrap();
        let mut s = SlidingLogState::default();
        for t in [1, 2, 3] {
            assert!(log.check(&mut s, Nanos::from_secs(t), 1).allowed);
        }
        let d = log.check(&mut s, Nanos::from_secs(5), 2);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(7))); // 2 expires at 12
        assert_eq!(d.reset_after, Duration::from_secs(8));
        assert!(log.check(&mut s, Nanos::from_secs(11), 1).allowed);
        assert!(!log.check(&mut s, Nanos::from_secs(11), 1).allowed);
    }

    #[test]
    fn memory_is_bounded_by_limit() {
        let log = SlidingLog::new(50, Duration::from_secs(1)).unwrap();
        let mut s = SlidingLogState::default();
        for i in 0..10_000u64 {
            log.check(&mut s, Nanos(i * 1_000_000), 1);
            assert!(s.entries.len() <= 50);
        }
    }
}
