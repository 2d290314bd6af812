//! Limiters for a single key: [`Limiter`] for any algorithm, [`AtomicGcra`] lock-free.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::algorithm::Algorithm;
use crate::algorithms::Gcra;
use crate::decision::Decision;
use crate::keyed::ShardLock;
use crate::time::Nanos;

/// One limit, one state, any algorithm; safe to share between threads. The algorithm can
/// be replaced at run time with [`set_algorithm`](Limiter::set_algorithm). The state sits
/// behind the same lock as a keyed shard's (spin, then yield): one atomic instruction per
/// uncontended decision, where a parking mutex takes two (design/core-spin-lock.md compares them).
///
/// ```
/// use floodgate_core::algorithms::SlidingLog;
/// use floodgate_core::{Limiter, Nanos};
/// use std::time::Duration;
///
/// let l = Limiter::new(SlidingLog::new(2, Duration::from_secs(1))?);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(!l.check(Nanos::from_millis(999), 1).allowed);
/// assert!(l.check(Nanos::from_secs(1), 1).allowed);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
pub struct Limiter<A: Algorithm> {
    inner: ShardLock<(A, A::State)>,
}

impl<A: Algorithm> Limiter<A> {
    /// A limiter at full capacity.
    pub fn new(algorithm: A) -> Self {
        Limiter {
            inner: ShardLock::new((algorithm, A::State::default())),
        }
    }

    /// Decide, consuming `cost` when admitted.
    #[inline(always)]
    pub fn check(&self, now: Nanos, cost: u64) -> Decision {
        let (alg, state) = &mut *self.inner.lock();
        alg.check(state, now, cost)
    }

    /// Decide without consuming.
    #[inline]
    pub fn peek(&self, now: Nanos, cost: u64) -> Decision {
        let (alg, state) = &*self.inner.lock();
        alg.peek(state, now, cost)
    }

    /// Replace the algorithm's parameters at run time; the state is kept.
    pub fn set_algorithm(&self, algorithm: A) {
        self.inner.lock().0 = algorithm;
    }
}

/// GCRA on one `AtomicU64` (the theoretical arrival time) with a compare-and-swap loop:
/// lock-free, one cache line, and the same decisions as [`Gcra`].
///
/// ```
/// use floodgate_core::algorithms::Gcra;
/// use floodgate_core::{AtomicGcra, Nanos, Rate};
///
/// let l = AtomicGcra::new(Gcra::new(Rate::per_second(1)?, 2)?);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(!l.check(Nanos::ZERO, 1).allowed);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct AtomicGcra {
    gcra: Gcra,
    tat: AtomicU64,
}

impl AtomicGcra {
    /// A limiter at full capacity.
    pub fn new(gcra: Gcra) -> Self {
        AtomicGcra {
            gcra,
            tat: AtomicU64::new(0),
        }
    }

    /// Decide, consuming `cost` when admitted. Inlined into the caller, so that the
    /// fields of the [`Decision`] it does not read cost nothing.
    #[inline(always)]
    pub fn check(&self, now: Nanos, cost: u64) -> Decision {
        let mut current = self.tat.load(Ordering::Acquire);
        loop {
            let state = crate::algorithms::GcraState {
                tat: Nanos(current),
            };
            let (decision, pending) = self.gcra.decide(&state, now, cost);
            let Some(next) = pending else { return decision };
            match self.tat.compare_exchange_weak(
                current,
                next.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return decision,
                Err(actual) => current = actual,
            }
        }
    }

    /// Decide without consuming.
    #[inline]
    pub fn peek(&self, now: Nanos, cost: u64) -> Decision {
        let state = crate::algorithms::GcraState {
            tat: Nanos(self.tat.load(Ordering::Acquire)),
        };
        self.gcra.peek(&state, now, cost)
    }
}
