//! What a quota client is told to enforce for one bucket, apart from the protocol that
//! carries it: the strategy (allow all, deny all, requests per time unit, a token
//! bucket) and how long it holds. floodgate server's quota service writes these as
//! Envoy's `RateLimitQuotaResponse`; a client (Envoy's `rate_limit_quota` filter,
//! floodgate's own [`crate::quota::QuotaBucket`], or any other) reads them back into this
//! shape.

use std::time::Duration;

/// The time units of a requests-per-time-unit strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3600 s.
    Hour,
    /// 86 400 s.
    Day,
}

impl Unit {
    /// Seconds in the unit.
    pub fn secs(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
        }
    }

    /// The unit exactly `period` long, if any.
    pub fn of_period(period: Duration) -> Option<Unit> {
        [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day]
            .into_iter()
            .find(|u| Duration::from_secs(u.secs()) == period)
    }
}

/// How a client limits the requests of one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaStrategy {
    /// Every request passes.
    AllowAll,
    /// Every request is denied.
    DenyAll,
    /// At most `requests` per `unit` (any algorithm; 0 denies every request).
    RequestsPerUnit {
        /// Requests per unit.
        requests: u64,
        /// The unit (second, minute, hour, day).
        unit: Unit,
    },
    /// A token bucket: `max_tokens` at most (and at first), `tokens_per_fill` added
    /// every `fill_interval`. Its sustained rate is `tokens_per_fill / fill_interval`.
    TokenBucket {
        /// Capacity and initial content.
        max_tokens: u32,
        /// Tokens added per fill.
        tokens_per_fill: u32,
        /// Time between fills.
        fill_interval: Duration,
    },
}

/// One bucket's assignment: a strategy and its time to live (after which the client
/// applies its expired-assignment behaviour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assignment {
    /// What to enforce.
    pub strategy: QuotaStrategy,
    /// How long it holds from its arrival.
    pub ttl: Duration,
}

/// How a share is expressed to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    /// [`QuotaStrategy::TokenBucket`]: the share's rate and a part of the burst.
    TokenBucket,
    /// [`QuotaStrategy::RequestsPerUnit`]: the share in whole requests per the limit's
    /// unit, rounded down.
    RequestsPerTimeUnit,
}

/// What a client does with no assignment yet, or an expired one (the client's own
/// setting: Envoy's `no_assignment_behavior` and `expired_assignment_behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFallback {
    /// Allow every request.
    AllowAll,
    /// Deny every request.
    DenyAll,
    /// Keep the last assignment (expired assignments only).
    ReuseLast,
}

impl ClientFallback {
    /// The name in the rules file.
    pub fn name(self) -> &'static str {
        match self {
            ClientFallback::AllowAll => "allow_all",
            ClientFallback::DenyAll => "deny_all",
            ClientFallback::ReuseLast => "reuse_last",
        }
    }
}

/// A fill interval no shorter than this: clients refill in steps of at least 100 ms.
const MIN_FILL: Duration = Duration::from_millis(100);

/// `share` requests per second as a strategy of `kind`, never above the share:
///
/// * token bucket: `tokens_per_fill` (a tenth of the share, rounded up) every
///   `fill_interval` (at least 100 ms), the interval rounded up to the nanosecond so
///   that their ratio is at most `share`; `max_tokens` is the
///   share's part of `capacity` (`capacity * share / limit`, rounded down, at least 1).
///   Over all clients the capacities may exceed `capacity` by one token per client;
/// * requests per time unit: `share * unit`, rounded down.
///
/// A share below one request per ten thousand years is [`QuotaStrategy::DenyAll`].
pub fn strategy_for(
    kind: StrategyKind,
    share: f64,
    limit: f64,
    capacity: u64,
    unit: Unit,
) -> QuotaStrategy {
    if !(share.is_finite() && share > 0.0) {
        return QuotaStrategy::DenyAll;
    }
    match kind {
        StrategyKind::RequestsPerTimeUnit => QuotaStrategy::RequestsPerUnit {
            requests: (share * unit.secs() as f64).floor() as u64,
            unit,
        },
        StrategyKind::TokenBucket => {
            let tokens = (share * MIN_FILL.as_secs_f64())
                .ceil()
                .clamp(1.0, u32::MAX as f64);
            let nanos = (tokens / share * 1e9).ceil();
            if nanos > 3.2e20 {
                return QuotaStrategy::DenyAll;
            }
            let part = if limit > 0.0 {
                (capacity as f64 * (share / limit).min(1.0)).floor()
            } else {
                0.0
            };
            QuotaStrategy::TokenBucket {
                max_tokens: part.clamp(1.0, u32::MAX as f64) as u32,
                tokens_per_fill: tokens as u32,
                fill_interval: Duration::from_nanos(nanos.min(u64::MAX as f64) as u64)
                    .max(MIN_FILL),
            }
        }
    }
}

impl QuotaStrategy {
    /// The sustained rate this strategy admits, requests per second (`None`: no bound).
    pub fn rate(&self) -> Option<f64> {
        match *self {
            QuotaStrategy::AllowAll => None,
            QuotaStrategy::DenyAll => Some(0.0),
            QuotaStrategy::RequestsPerUnit { requests, unit } => {
                Some(requests as f64 / unit.secs() as f64)
            }
            QuotaStrategy::TokenBucket {
                tokens_per_fill,
                fill_interval,
                ..
            } => Some(f64::from(tokens_per_fill) / fill_interval.as_secs_f64()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shares_as_strategies() {
        let s = strategy_for(StrategyKind::TokenBucket, 50.0, 100.0, 20, Unit::Second);
        assert_eq!(
            s,
            QuotaStrategy::TokenBucket {
                max_tokens: 10,
                tokens_per_fill: 5,
                fill_interval: Duration::from_millis(100)
            }
        );
        let s = strategy_for(StrategyKind::TokenBucket, 0.5, 100.0, 20, Unit::Second);
        assert_eq!(
            s,
            QuotaStrategy::TokenBucket {
                max_tokens: 1,
                tokens_per_fill: 1,
                fill_interval: Duration::from_secs(2)
            }
        );
        let s = strategy_for(
            StrategyKind::RequestsPerTimeUnit,
            2.5,
            10.0,
            10,
            Unit::Minute,
        );
        assert_eq!(
            s,
            QuotaStrategy::RequestsPerUnit {
                requests: 150,
                unit: Unit::Minute
            }
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-30] {
            assert_eq!(
                strategy_for(StrategyKind::TokenBucket, bad, 10.0, 10, Unit::Second),
                QuotaStrategy::DenyAll,
                "{bad}"
            );
        }
        assert_eq!(QuotaStrategy::AllowAll.rate(), None);
    }

    proptest! {
        #[test]
        fn a_strategy_never_admits_more_than_its_share(
            share in 1e-6f64..1e9,
            kind in prop_oneof![Just(StrategyKind::TokenBucket), Just(StrategyKind::RequestsPerTimeUnit)],
            unit in prop_oneof![Just(Unit::Second), Just(Unit::Minute), Just(Unit::Hour), Just(Unit::Day)],
        ) {
            let s = strategy_for(kind, share, share * 2.0, 100, unit);
            let rate = s.rate().unwrap();
            prop_assert!(rate <= share * (1.0 + 1e-12), "{:?} admits {} > {}", s, rate, share);
            if let QuotaStrategy::TokenBucket { fill_interval, max_tokens, .. } = s {
                prop_assert!(fill_interval >= MIN_FILL);
                prop_assert!(max_tokens >= 1);
                // and not below it but for the interval's rounding to the nanosecond
                prop_assert!(rate >= share * (1.0 - 1e-6), "{:?} admits {} < {}", s, rate, share);
            }
        }
    }
}
