//! Time as the algorithms see it: an explicit instant in integer nanoseconds.
//!
//! Every algorithm in floodgate is a pure function of `(state, now, cost)`. Nothing in
//! [`crate::algorithms`] ever reads a clock; the caller passes `now` as a [`Nanos`]. That is
//! what lets the simulator, the tests and production run the very same code.
//!
//! Where `now` comes from is the job of a [`Clock`]:
//!
//! * [`MonotonicClock`] (the default) is built on [`std::time::Instant`]. It never goes
//!   backwards, so the *rate* of a bucket cannot be bent by NTP steps, leap smearing or an
//!   operator fixing the date. Use it for token buckets, GCRA, leaky buckets and sliding logs.
//! * [`WallClock`] reads [`std::time::SystemTime`] as nanoseconds since the Unix epoch. Use it
//!   only where several nodes must agree where a *window starts* (fixed windows and sliding
//!   counters aligned to epoch multiples), or to store instants that other processes read.
//!   A wall clock can jump; a window boundary moving with it is the lesser evil, because
//!   the alternative (each node with its own monotonic origin) means no two nodes ever
//!   agree on a boundary.
//! * [`ManualClock`] is set and advanced by hand: tests and `floodgate simulate` use it.
//!
//! Monotonic for rates, wall for windows, never the reverse: a rate measured on the wall
//! clock gets a free refill (or a long freeze) whenever the clock steps, and a window
//! aligned to a monotonic origin starts at a different moment on every node.
//!
//! Algorithms tolerate time that stands still or even steps backwards: elapsed time is
//! computed with saturating subtraction, so a backward step is treated as "no time passed".

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// An instant, in nanoseconds since the origin of the [`Clock`] that produced it.
///
/// `u64` nanoseconds cover about 584 years, so Unix-epoch wall time fits until 2554.
/// Arithmetic on `Nanos` saturates rather than wrapping.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The origin of the clock.
    pub const ZERO: Nanos = Nanos(0);
    /// The latest representable instant.
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// An instant `secs` seconds after the origin. Negative or NaN input gives `ZERO`;
    /// huge input saturates at [`Nanos::MAX`].
    pub fn from_secs_f64(secs: f64) -> Nanos {
        if secs.is_nan() || secs <= 0.0 {
            return Nanos::ZERO;
        }
        let ns = secs * 1e9;
        if ns >= u64::MAX as f64 {
            Nanos::MAX
        } else {
            Nanos(ns.round() as u64)
        }
    }

    /// An instant `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// An instant `s` whole seconds after the origin.
    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Seconds since the origin, as a float (for display only).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// This instant moved later by `d`, saturating.
    pub fn saturating_add(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_to_nanos(d)))
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later (time never runs backwards
    /// as far as the algorithms are concerned).
    pub fn saturating_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Debug for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}

impl From<Duration> for Nanos {
    fn from(d: Duration) -> Nanos {
        Nanos(duration_to_nanos(d))
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of [`Nanos`]. Implementations must be cheap: it is called once per decision.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Nanos;
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

/// The default clock: monotonic, nanoseconds since the clock was created.
///
/// Built on [`Instant`], so it never goes backwards and ignores wall-clock steps.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        Nanos(duration_to_nanos(self.origin.elapsed()))
    }
}

/// Wall-clock time: nanoseconds since the Unix epoch. Use only to align windows across
/// nodes (see the module docs); a time before 1970 reads as [`Nanos::ZERO`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now(&self) -> Nanos {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(Nanos::from)
            .unwrap_or(Nanos::ZERO)
    }
}

/// A clock that only moves when told to: for tests and simulation. Shareable across threads.
///
/// ```
/// use floodgate_core::time::{Clock, ManualClock, Nanos};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(Nanos::from_secs(59));
/// clock.advance(Duration::from_millis(900));
/// assert_eq!(clock.now(), Nanos::from_millis(59_900));
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Nanos) -> Self {
        ManualClock {
            now: AtomicU64::new(start.0),
        }
    }

    /// Set the reading (it may go backwards: useful to test clock faults).
    pub fn set(&self, to: Nanos) {
        self.now.store(to.0, Ordering::SeqCst);
    }

    /// Move the reading forward by `by`, saturating.
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos(self.now.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_never_goes_back() {
        let c = MonotonicClock::new();
        let mut last = c.now();
        for _ in 0..1000 {
            let n = c.now();
            assert!(n >= last);
            last = n;
        }
    }

    #[test]
    fn wall_clock_is_after_2020() {
        assert!(WallClock.now() > Nanos::from_secs(1_577_836_800));
    }

    #[test]
    fn from_secs_f64_handles_junk() {
        assert_eq!(Nanos::from_secs_f64(f64::NAN), Nanos::ZERO);
        assert_eq!(Nanos::from_secs_f64(-3.0), Nanos::ZERO);
        assert_eq!(Nanos::from_secs_f64(f64::INFINITY), Nanos::MAX);
        assert_eq!(Nanos::from_secs_f64(1.5), Nanos(1_500_000_000));
    }

    #[test]
    fn manual_clock_saturates() {
        let c = ManualClock::new(Nanos(u64::MAX - 1));
        c.advance(Duration::from_secs(10));
        assert_eq!(c.now(), Nanos::MAX);
    }
}
