//! Backoff with jitter, a retry budget, and which requests may be retried at all.
//!
//! Backoff follows the AWS architecture note "Exponential Backoff And Jitter" exactly
//! (`attempt` counts retries from 0):
//!
//! * `expo = min(cap, base x 2^attempt)`
//! * [`Jitter::Full`]: `uniform(0, expo)`
//! * [`Jitter::Equal`]: `expo / 2 + uniform(0, expo / 2)`
//! * [`Jitter::Decorrelated`]: `min(cap, uniform(base, previous x 3))`, `previous` starting
//!   at `base`
//!
//! The [`RetryBudget`] is the gRPC/Finagle kind: over a sliding window of `ttl`, retries may
//! be at most `min_retries_per_sec x ttl + percent_can_retry x requests`, so that when a
//! whole fleet sees an outage it adds at most that fraction of extra load instead of
//! multiplying it by the attempt count.

use std::time::Duration;

use floodgate_core::Nanos;
use floodgate_core::time::duration_to_nanos;
use http::{HeaderMap, Method};
use rand::Rng;

use crate::error::ConfigError;

/// The jitter applied to exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// No jitter: `expo` itself (for comparison only: clients retry in lockstep).
    None,
    /// `uniform(0, expo)`.
    #[default]
    Full,
    /// `expo / 2 + uniform(0, expo / 2)`.
    Equal,
    /// `min(cap, uniform(base, previous x 3))`.
    Decorrelated,
}

/// Exponential backoff: `base`, `cap` and the jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First backoff step (default 100 ms). Must be > 0.
    pub base: Duration,
    /// No backoff is longer than this (default 10 s). Must be >= `base`.
    pub cap: Duration,
    /// The jitter (default [`Jitter::Full`]).
    pub jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// Check the invariants (`base > 0`, `cap >= base`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.base.is_zero() {
            return Err(ConfigError::ZeroBackoffBase);
        }
        if self.cap < self.base {
            return Err(ConfigError::CapBelowBase {
                base: self.base,
                cap: self.cap,
            });
        }
        Ok(())
    }

    /// `min(cap, base x 2^attempt)`, saturating.
    pub fn expo(&self, attempt: u32) -> Duration {
        let base = duration_to_nanos(self.base);
        let mult = 1u64.checked_shl(attempt.min(63)).unwrap_or(u64::MAX);
        Duration::from_nanos(base.saturating_mul(mult)).min(self.cap)
    }

    /// The sleep before retry number `attempt` (0 for the first retry). `previous` is the
    /// previous sleep (used by [`Jitter::Decorrelated`]; pass `base` or `Duration::ZERO`
    /// before the first retry, both read as `base`). Always within `[0, cap]`.
    ///
    /// ```
    /// use floodgate_client::backoff::{Backoff, Jitter};
    /// use rand::{SeedableRng, rngs::StdRng};
    /// use std::time::Duration;
    ///
    /// let b = Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(2), jitter: Jitter::Equal };
    /// let mut rng = StdRng::seed_from_u64(7);
    /// let d = b.delay(3, Duration::ZERO, &mut rng); // expo = 800 ms
    /// assert!(d >= Duration::from_millis(400) && d <= Duration::from_millis(800));
    /// ```
    pub fn delay<R: Rng + ?Sized>(
        &self,
        attempt: u32,
        previous: Duration,
        rng: &mut R,
    ) -> Duration {
        let expo = duration_to_nanos(self.expo(attempt));
        let cap = duration_to_nanos(self.cap);
        let base = duration_to_nanos(self.base);
        let ns = match self.jitter {
            Jitter::None => expo,
            Jitter::Full => rng.random_range(0..=expo),
            Jitter::Equal => expo / 2 + rng.random_range(0..=expo / 2),
            Jitter::Decorrelated => {
                let prev = duration_to_nanos(previous).max(base);
                let hi = prev.saturating_mul(3).max(base);
                rng.random_range(base..=hi).min(cap)
            }
        };
        Duration::from_nanos(ns.min(cap))
    }
}

/// Retry budget settings (defaults as Finagle's `RetryBudget`: 10 s, 10 retries/s, 20 %).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudgetConfig {
    /// Sliding window length (default 10 s). Must be >= 1 ms.
    pub ttl: Duration,
    /// Retries always allowed per second of `ttl`, whatever the request count (default 10).
    pub min_retries_per_sec: u32,
    /// Retries allowed as a fraction of requests in the window, in `[0, 1]` (default 0.2).
    pub percent_can_retry: f64,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        RetryBudgetConfig {
            ttl: Duration::from_secs(10),
            min_retries_per_sec: 10,
            percent_can_retry: 0.2,
        }
    }
}

const BUCKETS: usize = 10;

/// A sliding-window retry budget. `deposit` once per original request, `try_withdraw`
/// before each retry. Time is passed in.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    cfg: RetryBudgetConfig,
    width: u64,
    /// (bucket index since origin, requests, retries)
    buckets: [(u64, u64, u64); BUCKETS],
}

impl RetryBudget {
    /// A budget with no history. Errors on a `percent_can_retry` outside `[0, 1]` (or NaN)
    /// or a `ttl` under 1 ms.
    pub fn new(cfg: RetryBudgetConfig) -> Result<Self, ConfigError> {
        if !(0.0..=1.0).contains(&cfg.percent_can_retry) {
            return Err(ConfigError::BadPercent(cfg.percent_can_retry));
        }
        if cfg.ttl < Duration::from_millis(1) {
            return Err(ConfigError::BudgetTtlTooShort(cfg.ttl));
        }
        Ok(RetryBudget {
            cfg,
            width: (duration_to_nanos(cfg.ttl) / BUCKETS as u64).max(1),
            buckets: [(u64::MAX, 0, 0); BUCKETS],
        })
    }

    fn bucket(&mut self, now: Nanos) -> &mut (u64, u64, u64) {
        let idx = now.0 / self.width;
        let b = &mut self.buckets[(idx % BUCKETS as u64) as usize];
        if b.0 != idx {
            *b = (idx, 0, 0);
        }
        b
    }

    fn window(&self, now: Nanos) -> (u64, u64) {
        let idx = now.0 / self.width;
        self.buckets
            .iter()
            .filter(|b| b.0 != u64::MAX && b.0 <= idx && idx - b.0 < BUCKETS as u64)
            .fold((0, 0), |(r, t), b| (r + b.1, t + b.2))
    }

    /// Count one original request at `now`.
    pub fn deposit(&mut self, now: Nanos) {
        self.bucket(now).1 += 1;
    }

    /// Retries still allowed at `now`.
    pub fn available(&self, now: Nanos) -> u64 {
        let (requests, retries) = self.window(now);
        let floor = u64::from(self.cfg.min_retries_per_sec) as f64 * self.cfg.ttl.as_secs_f64();
        let allowed = floor + self.cfg.percent_can_retry * requests as f64;
        (allowed.floor() as u64).saturating_sub(retries)
    }

    /// Take one retry from the budget; false (and nothing taken) when it is spent.
    pub fn try_withdraw(&mut self, now: Nanos) -> bool {
        if self.available(now) == 0 {
            return false;
        }
        self.bucket(now).2 += 1;
        true
    }
}

/// The header that lets a caller opt a non-idempotent request into retries.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// GET, HEAD, OPTIONS, PUT, DELETE and TRACE (RFC 9110 section 9.2.2).
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// Whether a request may be retried: an idempotent method, an `Idempotency-Key` header, or
/// the caller's explicit opt-in.
pub fn may_retry(method: &Method, headers: &HeaderMap, opt_in: bool) -> bool {
    opt_in || is_idempotent(method) || headers.contains_key(IDEMPOTENCY_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn expo_caps_and_saturates() {
        let b = Backoff {
            base: 100 * MS,
            cap: 1000 * MS,
            jitter: Jitter::None,
        };
        let v: Vec<_> = (0..6).map(|a| b.expo(a)).collect();
        assert_eq!(v, [100, 200, 400, 800, 1000, 1000].map(|m| m * MS).to_vec());
        assert_eq!(b.expo(u32::MAX), 1000 * MS);
    }

    #[test]
    fn jitter_ranges_match_the_formulas() {
        let mut rng = StdRng::seed_from_u64(9);
        for jitter in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
            let b = Backoff {
                base: 100 * MS,
                cap: 5000 * MS,
                jitter,
            };
            let mut prev = Duration::ZERO;
            for attempt in 0..12 {
                let expo = b.expo(attempt);
                let d = b.delay(attempt, prev, &mut rng);
                match jitter {
                    Jitter::Full => assert!(d <= expo),
                    Jitter::Equal => assert!(d >= expo / 2 && d <= expo),
                    Jitter::Decorrelated => {
                        assert!(d >= b.base && d <= (prev.max(b.base) * 3).min(b.cap))
                    }
                    Jitter::None => unreachable!(),
                }
                prev = d;
            }
        }
    }

    #[test]
    fn full_jitter_mean_is_half_expo() {
        let mut rng = StdRng::seed_from_u64(10);
        let b = Backoff {
            base: 1000 * MS,
            cap: 60_000 * MS,
            jitter: Jitter::Full,
        };
        let n = 20_000;
        let mean = (0..n)
            .map(|_| b.delay(2, Duration::ZERO, &mut rng).as_secs_f64())
            .sum::<f64>()
            / n as f64;
        assert!((mean - 2.0).abs() < 0.05, "{mean}");
    }

    #[test]
    fn budget_is_floor_plus_percent() {
        let mut b = RetryBudget::new(RetryBudgetConfig {
            ttl: Duration::from_secs(10),
            min_retries_per_sec: 1,
            percent_can_retry: 0.1,
        })
        .unwrap();
        let now = Nanos::from_secs(5);
        for _ in 0..100 {
            b.deposit(now);
        }
        // 1/s x 10 s + 10 % of 100.
        assert_eq!(b.available(now), 20);
        let granted = (0..50).filter(|_| b.try_withdraw(now)).count();
        assert_eq!(granted, 20);
        // After the window slides past, the history is gone and only the floor remains.
        assert_eq!(b.available(Nanos::from_secs(16)), 10);
    }

    #[test]
    fn bad_budget_config() {
        for p in [f64::NAN, -0.1, 1.5] {
            assert!(
                RetryBudget::new(RetryBudgetConfig {
                    percent_can_retry: p,
                    ..Default::default()
                })
                .is_err()
            );
        }
        assert!(
            Backoff {
                base: Duration::ZERO,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn idempotency() {
        let h = HeaderMap::new();
        assert!(may_retry(&Method::GET, &h, false));
        assert!(may_retry(&Method::PUT, &h, false));
        assert!(!may_retry(&Method::POST, &h, false));
        assert!(!may_retry(&Method::PATCH, &h, false));
        assert!(may_retry(&Method::POST, &h, true));
        let mut k = HeaderMap::new();
        k.insert(IDEMPOTENCY_KEY, "abc".parse().unwrap());
        assert!(may_retry(&Method::POST, &k, false));
    }
}
