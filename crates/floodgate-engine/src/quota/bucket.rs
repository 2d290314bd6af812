//! One bucket as a quota client holds it: its current [`Assignment`] and when it
//! expires, the strategy to follow without one (none yet, or expired), the token state
//! the strategy is enforced with, and the usage counted since the last report. Pure and
//! clocked: every instant is an argument ([`Nanos`], from the caller's
//! [`floodgate_core::Clock`]); no I/O.
//!
//! Every strategy that limits is enforced by floodgate_core's
//! [`TokenBucket`] (tokens counted exactly, in
//! nano-tokens, and refilled continuously):
//!
//! * [`QuotaStrategy::TokenBucket`]: capacity `max_tokens`, refilled at
//!   `tokens_per_fill` per `fill_interval` (continuously rather than by whole fills: the
//!   same sustained rate, never a burst above `max_tokens`);
//! * [`QuotaStrategy::RequestsPerUnit`]: capacity `requests`, refilled at
//!   `requests` per `unit` (a whole unit's requests at most in any unit);
//! * [`QuotaStrategy::AllowAll`] admits everything, [`QuotaStrategy::DenyAll`] nothing;
//!   a capacity of zero admits nothing of a positive cost, and a refill of zero (no
//!   tokens per fill, or no interval) never refills what was taken.
//!
//! When the strategy changes (an assignment arrives, expires, or is replaced) the
//! tokens held carry over as the new bucket's deficit, capped at its capacity
//! ([`TokenBucket::carry_to`]); a
//! bucket switching from an allow-all or deny-all strategy to a token bucket starts
//! full. An assignment equal to the one in force changes nothing.

use std::time::Duration;

use floodgate_core::algorithms::{TokenBucket, TokenBucketState};
use floodgate_core::{Algorithm, Decision, Nanos, Rate};

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

/// How a strategy is enforced.
#[derive(Debug, Clone)]
enum Enforce {
    AllowAll,
    DenyAll,
    /// A capacity of zero: a positive cost never passes.
    Empty,
    /// floodgate_core's token bucket; `refills` false: the strategy's refill is zero
    /// (the bucket then refills at one token per `u64::MAX` ns, and a denial says never).
    Bucket {
        tb: TokenBucket,
        refills: bool,
    },
}

/// The largest capacity floodgate_core's token bucket holds (in nano-tokens in a u64).
const MAX_CAPACITY: u64 = u64::MAX / 1_000_000_000;

impl Enforce {
    fn of(s: QuotaStrategy) -> Enforce {
        let (capacity, count, period_ns) = match s {
            QuotaStrategy::AllowAll => return Enforce::AllowAll,
            QuotaStrategy::DenyAll => return Enforce::DenyAll,
            QuotaStrategy::RequestsPerUnit { requests, unit } => (
                requests,
                requests,
                unit.secs().saturating_mul(1_000_000_000),
            ),
            QuotaStrategy::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval,
            } => (
                u64::from(max_tokens),
                u64::from(tokens_per_fill),
                u64::try_from(fill_interval.as_nanos()).unwrap_or(u64::MAX),
            ),
        };
        if capacity == 0 {
            return Enforce::Empty;
        }
        let refills = count > 0 && period_ns > 0;
        let rate = if refills {
            // above one token per nanosecond: one per nanosecond
            Rate::from_nanos(count, period_ns).or_else(|_| Rate::from_nanos(1, 1))
        } else {
            Rate::from_nanos(1, u64::MAX)
        };
        match rate.and_then(|r| TokenBucket::new(capacity.min(MAX_CAPACITY), r)) {
            Ok(tb) => Enforce::Bucket { tb, refills },
            // unreachable: a positive capacity within MAX_CAPACITY, a valid rate
            Err(_) => Enforce::Empty,
        }
    }

    fn bucket(&self) -> Option<&TokenBucket> {
        match self {
            Enforce::Bucket { tb, .. } => Some(tb),
            _ => None,
        }
    }
}

/// A bucket of a quota client (see the module docs).
#[derive(Debug, Clone)]
pub struct QuotaBucket {
    /// The assignment and the instant it expires (arrival + time to live).
    assignment: Option<(Assignment, Nanos)>,
    /// Followed with no live assignment.
    fallback: QuotaStrategy,
    /// The strategy in force as of `at`, and how it is enforced.
    enforced: QuotaStrategy,
    enforce: Enforce,
    /// The token state of `enforce` when it is a bucket (`Default`: full).
    tokens: TokenBucketState,
    /// The latest instant a strategy was put in force or a request decided.
    at: Nanos,
    /// What RateLimit fields say the limit is under allow-all and deny-all (units).
    nominal: u64,
    allowed: u64,
    denied: u64,
    reported: Nanos,
    used: Nanos,
}

impl QuotaBucket {
    /// A bucket made at `now` with no assignment: it follows `fallback` until one
    /// arrives. `nominal` is the limit RateLimit fields show under allow-all and deny-all
    /// (the policy's capacity).
    pub fn new(fallback: QuotaStrategy, nominal: u64, now: Nanos) -> QuotaBucket {
        QuotaBucket {
            assignment: None,
            fallback,
            enforced: fallback,
            enforce: Enforce::of(fallback),
            tokens: TokenBucketState::default(),
            at: now,
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
        self.sync(now);
        self.assignment = Some((a, now.saturating_add(a.ttl)));
        self.switch(a.strategy, now);
    }

    /// Forget the assignment (the server abandoned the bucket): the fallback from `now`.
    pub fn abandon(&mut self, now: Nanos) {
        self.sync(now);
        self.assignment = None;
        self.switch(self.fallback, now);
    }

    /// Put `to` in force at `now`, carrying the tokens held over to it.
    fn switch(&mut self, to: QuotaStrategy, now: Nanos) {
        self.at = self.at.max(now);
        if to == self.enforced {
            return;
        }
        let next = Enforce::of(to);
        self.tokens = match (self.enforce.bucket(), next.bucket()) {
            (Some(from), Some(into)) => from.carry_to(&self.tokens, self.at, into),
            _ => TokenBucketState::default(),
        };
        self.enforced = to;
        self.enforce = next;
    }

    /// Put the strategy in force at `now` in force (an assignment may have expired).
    fn sync(&mut self, now: Nanos) {
        self.switch(self.strategy(now), now);
    }

    /// Whether a request of `cost` units would be admitted at `now`, as a decision,
    /// charging nothing (see [`charge`](Self::charge)).
    pub fn peek(&mut self, now: Nanos, cost: u64) -> Decision {
        self.sync(now);
        self.used = self.used.max(now);
        match &self.enforce {
            Enforce::AllowAll => Decision::allow(self.nominal, self.nominal, Duration::ZERO),
            Enforce::DenyAll => {
                let retry = match self.assignment {
                    Some((a, expires)) if a.strategy == QuotaStrategy::DenyAll => {
                        expires.saturating_since(now)
                    }
                    _ => Duration::from_secs(1),
                };
                Decision::deny(self.nominal, 0, retry.max(Duration::from_millis(1)), retry)
            }
            Enforce::Empty if cost == 0 => Decision::allow(0, 0, Duration::ZERO),
            Enforce::Empty => Decision::never(0, cost, 0, Duration::ZERO),
            Enforce::Bucket { tb, refills } => {
                let d = tb.peek(&self.tokens, now, cost);
                if !refills && d.retry_after.is_some() {
                    Decision::never(d.limit, cost, d.remaining, Duration::MAX)
                } else {
                    d
                }
            }
        }
    }

    /// Take `cost` units (after a [`peek`](Self::peek) at the same instant admitted it;
    /// a cost the bucket does not hold takes nothing).
    pub fn charge(&mut self, cost: u64) {
        if let Enforce::Bucket { tb, .. } = &self.enforce {
            tb.check(&mut self.tokens, self.at, cost);
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
        // one token carried (held at 11 s), one refilled by 12 s; the next whole token
        // exactly at 13 s
        assert_eq!(admitted(&mut b, 11 * S, 13 * S, 10_000_000), 2);
        let d = b.peek(Nanos(13 * S - 1), 1);
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
    fn tokens_carry_over_as_a_deficit_capped_at_the_new_capacity() {
        let ttl = Duration::from_secs(100);
        let a = |strategy| Assignment { strategy, ttl };
        let take = |b: &mut QuotaBucket, n: u64| {
            for _ in 0..n {
                assert!(b.peek(Nanos(0), 1).allowed);
                b.charge(1);
            }
        };
        let mut b = QuotaBucket::new(QuotaStrategy::DenyAll, 1, Nanos(0));
        // from deny all: a full bucket of 10 (refilled 10/s)
        b.assign(a(tb(10, 1, 100)), Nanos(0));
        take(&mut b, 7);
        assert_eq!(b.peek(Nanos(0), 0).remaining, 3);
        // the same assignment again changes nothing (no refill to full)
        b.assign(a(tb(10, 1, 100)), Nanos(0));
        assert_eq!(b.peek(Nanos(0), 0).remaining, 3);
        // a larger bucket refilled more slowly: the 3 held, then 1 per second
        b.assign(a(tb(50, 1, 1000)), Nanos(0));
        let d = b.peek(Nanos(0), 0);
        assert_eq!((d.limit, d.remaining), (50, 3));
        take(&mut b, 3);
        let d = b.peek(Nanos(0), 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
        // half a second later half a token is held, carried exactly: under a bucket
        // refilled twice as fast, a whole one a quarter of a second later
        b.assign(a(tb(50, 2, 1000)), Nanos(S / 2));
        assert!(!b.peek(Nanos(S / 2), 1).allowed);
        assert!(!b.peek(Nanos(S / 2 + S / 4 - 1), 1).allowed);
        assert!(b.peek(Nanos(S / 2 + S / 4), 1).allowed);
        // a smaller bucket caps what is held
        b.assign(a(tb(2, 1, 1000)), Nanos(100 * S));
        assert_eq!(b.peek(Nanos(100 * S), 0).remaining, 2);
    }

    #[test]
    fn empty_and_never_refilled_buckets_say_never() {
        let ttl = Duration::from_secs(100);
        let mut b = QuotaBucket::new(QuotaStrategy::AllowAll, 5, Nanos(0));
        // no requests per unit: a positive cost never passes, a cost of 0 does
        b.assign(
            Assignment {
                strategy: QuotaStrategy::RequestsPerUnit {
                    requests: 0,
                    unit: Unit::Second,
                },
                ttl,
            },
            Nanos(0),
        );
        let d = b.peek(Nanos(0), 1);
        assert!(!d.allowed && d.retry_after.is_none(), "{d:?}");
        assert!(b.peek(Nanos(0), 0).allowed);
        // no tokens per fill: the capacity, then never
        b.assign(
            Assignment {
                strategy: tb(2, 0, 100),
                ttl,
            },
            Nanos(S),
        );
        assert_eq!(admitted(&mut b, S, 10 * S, S / 10), 2);
        let d = b.peek(Nanos(10 * S), 1);
        assert!(!d.allowed && d.retry_after.is_none(), "{d:?}");
        // a rate above one token per nanosecond is one per nanosecond
        b.assign(
            Assignment {
                strategy: QuotaStrategy::RequestsPerUnit {
                    requests: u64::MAX,
                    unit: Unit::Second,
                },
                ttl,
            },
            Nanos(10 * S),
        );
        // (the empty bucket carried over: one token a nanosecond later)
        assert!(!b.peek(Nanos(10 * S), 1).allowed);
        assert!(b.peek(Nanos(10 * S + 1), 1).allowed);
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
