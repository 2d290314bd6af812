//! Fixed window: a counter per aligned window.

use std::time::Duration;

use super::{dur, nonzero, window_nanos};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::time::Nanos;

/// **Guarantee:** at most `limit` units per aligned window `[k x W, (k+1) x W)`; *up to
/// `2 x limit` across a boundary* (all of one window's quota at its end, all of the next
/// one's at its start). Two integers of state.
///
/// **Settle** ([`crate::settle`]): an actual cost above the estimate is added to the count
/// of the window the settle falls in (debt until that window ends); a refund goes only
/// into the window charged, while it is the current one.
///
/// Windows are aligned to multiples of `W` on the time axis passed in: pass wall-clock
/// time ([`crate::time::WallClock`]) or Redis `TIME` so that every node agrees where a
/// window starts.
///
/// ```
/// use floodgate_core::algorithms::FixedWindow;
/// use floodgate_core::{Algorithm, Nanos};
/// use std::time::Duration;
///
/// // 100 per 60 s: 100 at t=59.9 s and 100 at t=60.1 s are all admitted.
/// let fw = FixedWindow::new(100, Duration::from_secs(60))?;
/// let mut s = Default::default();
/// let a = (0..100).filter(|_| fw.check(&mut s, Nanos::from_millis(59_900), 1).allowed).count();
/// let b = (0..100).filter(|_| fw.check(&mut s, Nanos::from_millis(60_100), 1).allowed).count();
/// assert_eq!(a + b, 200);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedWindow {
    limit: u64,
    window_ns: u64,
}

/// Fixed-window per-key state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// Index of the counted window plus one (0 = never seen).
    pub window: u64,
    /// Units admitted in that window.
    pub count: u64,
}

impl FixedWindow {
    /// `limit` units per window of length `window`.
    pub fn new(limit: u64, window: Duration) -> Result<FixedWindow, ConfigError> {
        Ok(FixedWindow {
            limit: nonzero(limit, "limit")?,
            window_ns: window_nanos(window)?,
        })
    }

    /// The window length in nanoseconds.
    pub fn window_nanos(&self) -> u64 {
        self.window_ns
    }

    /// The counted window (index + 1) and its count as of `now`. A time earlier than the
    /// stored window (a clock step back) is counted in the stored window: never a reset.
    #[inline]
    fn current(&self, s: &FixedWindowState, now: Nanos) -> (u64, u64) {
        let idx = now.0 / self.window_ns + 1;
        if idx <= s.window {
            (s.window, s.count)
        } else {
            (idx, 0)
        }
    }

    #[inline]
    fn until_end(&self, window: u64, now: Nanos) -> Duration {
        let end = (window as u128) * (self.window_ns as u128);
        dur(u64::try_from(end.saturating_sub(now.0 as u128)).unwrap_or(u64::MAX))
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;
    type Pending = FixedWindowState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn decide(
        &self,
        s: &FixedWindowState,
        now: Nanos,
        cost: u64,
    ) -> (Decision, Option<FixedWindowState>) {
        let (window, used) = self.current(s, now);
        let remaining = self.limit.saturating_sub(used);
        let to_end = self.until_end(window, now);
        let reset = if used > 0 { to_end } else { Duration::ZERO };
        if cost > self.limit {
            return (Decision::never(self.limit, cost, remaining, reset), None);
        }
        if cost > remaining {
            return (Decision::deny(self.limit, remaining, to_end, reset), None);
        }
        let count = used + cost;
        let reset = if count > 0 { to_end } else { Duration::ZERO };
        (
            Decision::allow(self.limit, self.limit.saturating_sub(count), reset),
            (cost > 0).then_some(FixedWindowState { window, count }),
        )
    }

    #[inline]
    fn apply(&self, s: &mut FixedWindowState, pending: FixedWindowState) {
        *s = pending;
    }

    #[inline]
    fn full_at(&self, s: &FixedWindowState) -> Nanos {
        if s.count == 0 {
            return Nanos::ZERO;
        }
        Nanos(s.window.saturating_mul(self.window_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_at_the_boundary() {
        let fw = FixedWindow::new(2, Duration::from_secs(10)).unwrap();
        let mut s = FixedWindowState::default();
        assert!(fw.check(&mut s, Nanos::from_secs(5), 1).allowed);
        assert!(fw.check(&mut s, Nanos::from_secs(5), 1).allowed);
        let d = fw.check(&mut s, Nanos::from_secs(7), 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(3)));
        assert_eq!(d.reset_after, Duration::from_secs(3));
        assert!(fw.check(&mut s, Nanos::from_secs(10), 1).allowed);
        // a clock step back counts in the newest window: no fresh quota
        assert!(fw.check(&mut s, Nanos::from_secs(9), 1).allowed);
        assert!(!fw.check(&mut s, Nanos::from_secs(1), 1).allowed);
    }

    #[test]
    fn invalid() {
        assert!(FixedWindow::new(0, Duration::from_secs(1)).is_err());
        assert!(FixedWindow::new(1, Duration::ZERO).is_err());
        let fw = FixedWindow::new(3, Duration::from_secs(1)).unwrap();
        let d = fw.peek(&FixedWindowState::default(), Nanos::ZERO, 4);
        assert!(d.retry_after.is_none() && !d.allowed);
    }
}
