//! The limiter: permits up to `limit` in flight, timed, fed back to the algorithm.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate_core::{Clock, Nanos};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{LimitAlgorithm, Sample};

struct Inner {
    algorithm: Mutex<Box<dyn LimitAlgorithm>>,
    limit: AtomicUsize,
    inflight: AtomicUsize,
    notify: Notify,
    clock: Arc<dyn Clock>,
}

/// Admits at most [`limit`](AdaptiveLimiter::limit) requests in flight; the limit adapts
/// from the samples its permits report. Cheap to clone (shared state).
///
/// ```
/// use floodgate_client::concurrency::{AdaptiveLimiter, Aimd, AimdConfig};
/// use floodgate_core::MonotonicClock;
/// use std::sync::Arc;
///
/// let limiter = AdaptiveLimiter::new(
///     Aimd::new(AimdConfig { initial: 2, min: 1, max: 10, ..AimdConfig::default() })?,
///     Arc::new(MonotonicClock::new()),
/// );
/// let a = limiter.try_acquire().unwrap();
/// let b = limiter.try_acquire().unwrap();
/// assert!(limiter.try_acquire().is_none()); // 2 in flight = limit
/// a.success(); // AIMD: inflight 2 x 2 >= 2, so the limit grows to 3
/// assert_eq!((limiter.limit(), limiter.inflight()), (3, 1));
/// b.dropped(); // floor(3 x 0.9) = 2
/// assert_eq!((limiter.limit(), limiter.inflight()), (2, 0));
/// # Ok::<(), floodgate_client::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct AdaptiveLimiter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AdaptiveLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptiveLimiter")
            .field("limit", &self.limit())
            .field("inflight", &self.inflight())
            .finish()
    }
}

impl AdaptiveLimiter {
    /// A limiter driven by `algorithm`, timing requests on `clock`.
    pub fn new(algorithm: impl LimitAlgorithm + 'static, clock: Arc<dyn Clock>) -> Self {
        let limit = algorithm.limit().max(1);
        AdaptiveLimiter {
            inner: Arc::new(Inner {
                algorithm: Mutex::new(Box::new(algorithm)),
                limit: AtomicUsize::new(limit),
                inflight: AtomicUsize::new(0),
                notify: Notify::new(),
                clock,
            }),
        }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.inner.limit.load(Ordering::Acquire)
    }

    /// Permits currently held.
    pub fn inflight(&self) -> usize {
        self.inner.inflight.load(Ordering::Acquire)
    }

    /// A permit if fewer than `limit` are held, else `None` (never waits).
    pub fn try_acquire(&self) -> Option<Permit> {
        let inner = &self.inner;
        let mut cur = inner.inflight.load(Ordering::Acquire);
        loop {
            if cur >= inner.limit.load(Ordering::Acquire) {
                return None;
            }
            match inner.inflight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(Permit {
                        inner: Some(self.inner.clone()),
                        start: inner.clock.now(),
                        inflight: cur + 1,
                    });
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Wait for a permit.
    pub async fn acquire(&self) -> Permit {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(p) = self.try_acquire() {
                return p;
            }
            notified.await;
        }
    }
}

/// How a request guarded by a [`Permit`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Completed: its RTT is a sample.
    Success,
    /// Dropped (timeout, 429/503, error): a sample with `dropped = true`.
    Dropped,
    /// Not a meaningful sample (cancelled, a client error): released without a sample.
    Ignore,
}

/// One admitted request. Report how it ended with [`Permit::success`],
/// [`Permit::dropped`] or [`Permit::release`]; dropping it unreported releases it as
/// [`Outcome::Ignore`].
pub struct Permit {
    inner: Option<Arc<Inner>>,
    start: Nanos,
    inflight: usize,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("start", &self.start)
            .field("inflight", &self.inflight)
            .finish()
    }
}

impl Permit {
    /// When the permit was granted.
    pub fn start(&self) -> Nanos {
        self.start
    }

    /// In-flight count when granted, this one included.
    pub fn inflight_at_start(&self) -> usize {
        self.inflight
    }

    /// Release as [`Outcome::Success`].
    pub fn success(self) {
        self.release(Outcome::Success)
    }

    /// Release as [`Outcome::Dropped`].
    pub fn dropped(self) {
        self.release(Outcome::Dropped)
    }

    /// Release with `outcome`.
    pub fn release(mut self, outcome: Outcome) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Outcome) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if outcome != Outcome::Ignore {
            let now = inner.clock.now();
            let sample = Sample {
                start: self.start,
                rtt: now.saturating_since(self.start),
                inflight: self.inflight,
                dropped: outcome == Outcome::Dropped,
            };
            let mut alg = inner.algorithm.lock();
            let limit = alg.on_sample(&sample).max(1);
            inner.limit.store(limit, Ordering::Release);
        }
        inner.inflight.fetch_sub(1, Ordering::AcqRel);
        inner.notify.notify_waiters();
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.finish(Outcome::Ignore);
    }
}
