//! One bucket as a quota client holds it: its current [`Assignment`] and when it
//! expires, the strategy to follow without one (none yet, or expired), the token state
//! the strategy is enforced with, and the usage counted since the last report. Pure and
//! clocked: every instant is an argument ([`Nanos`], from the caller's
//! [`floodgate_core::Clock`]); no I/O.
//!
//! Every strategy is enforced as a token bucket refilled continuously:
//!
//! * [`QuotaStrategy::TokenBucket`]: capacity `max_tokens`, refilled at
//!   `tokens_per_fill / fill_interval` per second (continuously rather than by whole
//!   fills: the same sustained rate, never a burst above `max_tokens`);
//! * [`QuotaStrategy::RequestsPerUnit`]: capacity `requests`, refilled at
//!   `requests / unit` per second (a whole unit's requests at most in any unit);
//! * [`QuotaStrategy::AllowAll`] admits everything, [`QuotaStrategy::DenyAll`] nothing.
//!
//! When the strategy changes (an assignment arrives, expires, or is replaced) the
//! tokens carry over, capped at the new capacity; a bucket switching from an
//! allow-all or deny-all strategy to a token bucket starts full.

use std::time::Duration;

use floodgate_core::{Decision, Nanos};

use super::assignment::{Assignment, QuotaStrategy};

/// The usage of one bucket since its previous report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Requests admitted.
    pub allowed: u64,
    /// Requests denied.
    pub denied: u64,
    /// Time since the previous report (or since the bucket was made).
    pub elapsed: Duration,
}

/// A bucket of a quota client (see the module docs).
#[derive(Debug, Clone)]
pub struct QuotaBucket {
    /// The assignment and the instant it expires (arrival + time to live).
    assignment: Option<(Assignment, Nanos)>,
    /// Followed with no live assignment.
    fallback: QuotaStrategy,
    /// The strategy the tokens were last refilled under.
    enforced: QuotaStrategy,
    /// Tokens held (0 ..= capacity of `enforced`).
    tokens: f64,
    /// When `tokens` was last refilled.
    refilled: Nanos,
    /// What RateLimit fields say the limit is under allow-all and deny-all (units).
    nominal: u64,
    allowed: u64,
    denied: u64,
    reported: Nanos,
    used: Nanos,
}

/// `(capacity, refill per second)` of a strategy enforced as a token bucket; `None` for
/// allow-all and deny-all.
fn bucket_of(s: QuotaStrategy) -> Option<(f64, f64)> {
    match s {
        QuotaStrategy::AllowAll | QuotaStrategy::DenyAll => None,
        QuotaStrategy::RequestsPerUnit { requests, unit } => {
            Some((requests as f64, requests as f64 / unit.secs() as f64))
        }
        QuotaStrategy::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval,
        } => {
            let secs = fill_interval.as_secs_f64();
            let rate = if secs > 0.0 {
                f64::from(tokens_per_fill) / secs
            } else {
                0.0
            };
            Some((f64::from(max_tokens), rate))
        }
    }
}

/// Seconds as a duration, saturating (never panics on huge or non-finite values).
fn secs(s: f64) -> Duration {
    if s.is_finite() && s > 0.0 {
        Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
    } else if s > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    }
}

impl QuotaBucket {
    /// A bucket made at `now` with no assignment: it follows `fallback` until one
    /// arrives. `nominal` is the limit RateLimit fields show under allow-all and deny-all
    /// (the policy's capacity).
    pub fn new(fallback: QuotaStrategy, nominal: u64, now: Nanos) -> QuotaBucket {
        let tokens = bucket_of(fallback).map_or(0.0, |(cap, _)| cap);
        QuotaBucket {
            assignment: None,
            fallback,
            enforced: fallback,
            tokens,
            refilled: now,
            nominal,
            allowed: 0,
            denied: 0,
            reported: now,
            used: now,
        }
    }

    /// The strategy in force at `now`: the assignment while it lives, else the fallback.
    pub fn strategy(&self, now: Nanos) -> QuotaStrategy {
        match self.assignment {
            Some((a, expires)) if now < expires => a.strategy,
            _ => self.fallback,
        }
    }

    /// Whether an assignment lives at `now`.
    pub fn assigned(&self, now: Nanos) -> bool {
        matches!(self.assignment, Some((_, expires)) if now < expires)
    }

    /// Take `a`, arrived at `now` (it holds until `now + a.ttl`).
    pub fn assign(&mut self, a: Assignment, now: Nanos) {
        self.refill(now);
        self.assignment = Some((a, now.saturating_add(a.ttl)));
        self.switch(a.strategy);
    }

    /// Forget the assignment (the server abandoned the bucket): the fallback from `now`.
    pub fn abandon(&mut self, now: Nanos) {
        self.refill(now);
        self.assignment = None;
        self.switch(self.fallback);
    }

    fn switch(&mut self, to: QuotaStrategy) {
        if to == self.enforced {
            return;
        }
        let was_bucket = bucket_of(self.enforced).is_some();
        self.enforced = to;
        if let Some((cap, _)) = bucket_of(to) {
            self.tokens = if was_bucket {
                self.tokens.min(cap)
            } else {
                cap
            };
        }
    }

    /// Refill under the strategy in force at `now` (switching to it first).
    fn refill(&mut self, now: Nanos) {
        let strategy = self.strategy(now);
        if let Some((cap, rate)) = bucket_of(self.enforced) {
            let dt = now.saturating_since(self.refilled).as_secs_f64();
            self.tokens = (self.tokens + dt * rate).min(cap);
        }
        self.refilled = self.refilled.max(now);
        self.switch(strategy);
    }

    /// Whether a request of `cost` units would be admitted at `now`, as a decision,
    /// charging nothing (see [`charge`](Self::charge)).
    pub fn peek(&mut self, now: Nanos, cost: u64) -> Decision {
        self.refill(now);
        self.used = self.used.max(now);
        match self.enforced {
            QuotaStrategy::AllowAll => Decision::allow(self.nominal, self.nominal, Duration::ZERO),
            QuotaStrategy::DenyAll => {
                let retry = match self.assignment {
                    Some((a, expires)) if a.strategy == QuotaStrategy::DenyAll => {
                        expires.saturating_since(now)
                    }
                    _ => Duration::from_secs(1),
                };
                Decision::deny(self.nominal, 0, retry.max(Duration::from_millis(1)), retry)
            }
            strategy => {
                let (cap, rate) = bucket_of(strategy).unwrap_or((0.0, 0.0));
                let limit = cap as u64;
                let want = cost as f64;
                let reset = |left: f64| secs((cap - left) / rate);
                if want > cap {
                    let left = self.tokens.floor() as u64;
                    return Decision::never(limit, cost, left, reset(self.tokens));
                }
                if self.tokens >= want {
                    let left = self.tokens - want;
                    Decision::allow(limit, left.floor() as u64, reset(left))
                } else if rate <= 0.0 {
                    Decision::never(limit, cost, self.tokens.floor() as u64, Duration::MAX)
                } else {
                    let retry = secs((want - self.tokens) / rate).max(Duration::from_nanos(1));
                    Decision::deny(limit, self.tokens.floor() as u64, retry, reset(self.tokens))
                }
            }
        }
    }

    /// Take `cost` units (after a [`peek`](Self::peek) at the same instant admitted it).
    pub fn charge(&mut self, cost: u64) {
        if bucket_of(self.enforced).is_some() {
            self.tokens = (self.tokens - cost as f64).max(0.0);
        }
    }

    /// Count one request of this bucket for the next report.
    pub fn count(&mut self, allowed: bool) {
        if allowed {
            self.allowed = self.allowed.saturating_add(1);
        } else {
            self.denied = self.denied.saturating_add(1);
        }
    }

    /// The usage since the previous report, reset for the next one (at `now`).
    pub fn take_usage(&mut self, now: Nanos) -> Usage {
        let u = Usage {
            allowed: self.allowed,
            denied: self.denied,
            elapsed: now.saturating_since(self.reported),
        };
        self.allowed = 0;
        self.denied = 0;
        self.reported = self.reported.max(now);
        u
    }

    /// When a request last used the bucket.
    pub fn used(&self) -> Nanos {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Unit;

    const S: u64 = 1_000_000_000;

    fn tb(max: u32, per_fill: u32, fill_ms: u64) -> QuotaStrategy {
        QuotaStrategy::TokenBucket {
            max_tokens: max,
            tokens_per_fill: per_fill,
            fill_interval: Duration::from_millis(fill_ms),
        }
    }

    fn admitted(b: &mut QuotaBucket, from: u64, to: u64, every: u64) -> u64 {
        let mut n = 0;
        let mut t = from;
        while t < to {
            let d = b.peek(Nanos(t), 1);
            if d.allowed {
                b.charge(1);
                n += 1;
            }
            b.count(d.allowed);
            t += every;
        }
        n
    }

    #[test]
    fn the_fallback_rules_until_an_assignment_and_after_it_expires() {
        let mut b = QuotaBucket::new(QuotaStrategy::DenyAll, 10, Nanos(S));
        let d = b.peek(Nanos(S), 1);
        assert!(!d.allowed);
        assert_eq!(d.limit, 10);
        // 10/s with a burst of 5, for 2 s
        let a = Assignment {
            strategy: tb(5, 1, 100),
            ttl: Duration::from_secs(2),
        };
        b.assign(a, Nanos(S));
        assert!(b.assigned(Nanos(2 * S)));
        // 1 s at 1000 requests/s: the burst (5) and 1 s of refill (10)
        let n = admitted(&mut b, S, 2 * S, 1_000_000);
        assert!((14..=16).contains(&n), "{n}");
        // expired at 3 s: deny all again
        assert!(!b.assigned(Nanos(3 * S)));
        assert_eq!(admitted(&mut b, 3 * S, 4 * S, 1_000_000), 0);
        let u = b.take_usage(Nanos(4 * S));
        assert_eq!(u.allowed, n);
        assert_eq!(u.denied, 2000 - n);
        assert_eq!(u.elapsed, Duration::from_secs(3));
        assert_eq!(b.take_usage(Nanos(5 * S)).allowed, 0);
    }

    #[test]
    fn strategies_admit_their_rate() {
        let mut b = QuotaBucket::new(QuotaStrategy::AllowAll, 7, Nanos(0));
        assert_eq!(admitted(&mut b, 0, S, 1_000_000), 1000);
        let d = b.peek(Nanos(S), 1);
        assert_eq!((d.limit, d.remaining), (7, 7));
        let ttl = Duration::from_secs(100);
        // 60 per minute: a burst of 60, then 1/s
        b.assign(
            Assignment {
                strategy: QuotaStrategy::RequestsPerUnit {
                    requests: 60,
                    unit: Unit::Minute,
                },
                ttl,
            },
            Nanos(S),
        );
        // by 10.99 s: the 60 and 9.99 s of refill
        assert_eq!(admitted(&mut b, S, 11 * S, 10_000_000), 69);
        // a smaller bucket caps what was carried over
        b.assign(
            Assignment {
                strategy: tb(2, 1, 1000),
                ttl,
            },
            Nanos(11 * S),
        );
        assert_eq!(admitted(&mut b, 11 * S, 13 * S, 10_000_000), 2);
        let d = b.peek(Nanos(13 * S), 1);
        assert!(!d.allowed);
        assert!(d.retry_after.unwrap() <= Duration::from_secs(1));
        // a cost above the capacity can never pass
        let d = b.peek(Nanos(20 * S), 3);
        assert_eq!(d.retry_after, None);
        assert!(!d.allowed);
        b.abandon(Nanos(20 * S));
        assert!(b.peek(Nanos(20 * S), 3).allowed);
    }

    #[test]
    fn deny_all_says_when_its_assignment_ends() {
        let mut b = QuotaBucket::new(QuotaStrategy::AllowAll, 1, Nanos(0));
        b.assign(
            Assignment {
                strategy: QuotaStrategy::DenyAll,
                ttl: Duration::from_secs(5),
            },
            Nanos(S),
        );
        let d = b.peek(Nanos(2 * S), 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(4)));
        assert!(b.peek(Nanos(6 * S), 1).allowed);
    }
}
