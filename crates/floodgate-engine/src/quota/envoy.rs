//! [`Assignment`]s as Envoy's `QuotaAssignmentAction` and back: the server writes them
//! with [`assignment_action`], a client reads them with [`assignment_of`].

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, RequestsPerTimeUnit, Strategy,
};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, RateLimitUnit, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::QuotaAssignmentAction;
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};

use super::assignment::{Assignment, QuotaStrategy, Unit};

/// Why an assignment message cannot be enforced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    /// No `rate_limit_strategy` or no strategy in it.
    #[error("the assignment has no rate_limit_strategy")]
    NoStrategy,
    /// No or a negative `assignment_time_to_live`.
    #[error("the assignment has no valid assignment_time_to_live")]
    NoTtl,
    /// A blanket rule or time unit this client does not know.
    #[error("the assignment's {0} is not one this client knows")]
    Unknown(&'static str),
    /// A token bucket without `fill_interval`, or with a zero one or zero tokens.
    #[error(
        "the assignment's token bucket needs max_tokens, tokens_per_fill and fill_interval above 0"
    )]
    BadBucket,
}

/// A duration as protobuf's (saturating at `i64::MAX` seconds).
pub fn pb_duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A protobuf duration, if it is not negative and its nanos are in range.
pub fn duration_of(d: &PbDuration) -> Option<Duration> {
    let secs = u64::try_from(d.seconds).ok()?;
    let nanos = u32::try_from(d.nanos).ok().filter(|n| *n < 1_000_000_000)?;
    Some(Duration::new(secs, nanos))
}

fn rate_limit_unit(unit: Unit) -> RateLimitUnit {
    match unit {
        Unit::Second => RateLimitUnit::Second,
        Unit::Minute => RateLimitUnit::Minute,
        Unit::Hour => RateLimitUnit::Hour,
        Unit::Day => RateLimitUnit::Day,
    }
}

/// An assignment as Envoy's `QuotaAssignmentAction`.
pub fn assignment_action(a: &Assignment) -> QuotaAssignmentAction {
    let strategy = match a.strategy {
        QuotaStrategy::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        QuotaStrategy::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        QuotaStrategy::RequestsPerUnit { requests, unit } => {
            Strategy::RequestsPerTimeUnit(RequestsPerTimeUnit {
                requests_per_time_unit: requests,
                time_unit: rate_limit_unit(unit) as i32,
            })
        }
        QuotaStrategy::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval,
        } => Strategy::TokenBucket(TokenBucket {
            max_tokens,
            tokens_per_fill: Some(UInt32Value {
                value: tokens_per_fill,
            }),
            fill_interval: Some(pb_duration(fill_interval)),
        }),
    };
    QuotaAssignmentAction {
        assignment_time_to_live: Some(pb_duration(a.ttl)),
        rate_limit_strategy: Some(RateLimitStrategy {
            strategy: Some(strategy),
        }),
    }
}

/// Envoy's `QuotaAssignmentAction` as an assignment (a missing `tokens_per_fill` is 1, as
/// Envoy reads it).
pub fn assignment_of(a: &QuotaAssignmentAction) -> Result<Assignment, AssignmentError> {
    let ttl = a
        .assignment_time_to_live
        .as_ref()
        .and_then(duration_of)
        .ok_or(AssignmentError::NoTtl)?;
    let strategy = a
        .rate_limit_strategy
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .ok_or(AssignmentError::NoStrategy)?;
    let strategy = match strategy {
        Strategy::BlanketRule(r) => match BlanketRule::try_from(*r) {
            Ok(BlanketRule::AllowAll) => QuotaStrategy::AllowAll,
            Ok(BlanketRule::DenyAll) => QuotaStrategy::DenyAll,
            Err(_) => return Err(AssignmentError::Unknown("blanket rule")),
        },
        Strategy::RequestsPerTimeUnit(r) => {
            let unit = match RateLimitUnit::try_from(r.time_unit) {
                Ok(RateLimitUnit::Second) => Unit::Second,
                Ok(RateLimitUnit::Minute) => Unit::Minute,
                Ok(RateLimitUnit::Hour) => Unit::Hour,
                Ok(RateLimitUnit::Day) => Unit::Day,
                _ => return Err(AssignmentError::Unknown("time unit")),
            };
            QuotaStrategy::RequestsPerUnit {
                requests: r.requests_per_time_unit,
                unit,
            }
        }
        Strategy::TokenBucket(t) => {
            let fill_interval = t
                .fill_interval
                .as_ref()
                .and_then(duration_of)
                .filter(|d| !d.is_zero())
                .ok_or(AssignmentError::BadBucket)?;
            let tokens_per_fill = t.tokens_per_fill.as_ref().map_or(1, |v| v.value);
            if t.max_tokens == 0 || tokens_per_fill == 0 {
                return Err(AssignmentError::BadBucket);
            }
            QuotaStrategy::TokenBucket {
                max_tokens: t.max_tokens,
                tokens_per_fill,
                fill_interval,
            }
        }
    };
    Ok(Assignment { strategy, ttl })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_round_trip_and_bad_messages_are_named() {
        for strategy in [
            QuotaStrategy::AllowAll,
            QuotaStrategy::DenyAll,
            QuotaStrategy::RequestsPerUnit {
                requests: 60,
                unit: Unit::Minute,
            },
            QuotaStrategy::TokenBucket {
                max_tokens: 7,
                tokens_per_fill: 3,
                fill_interval: Duration::from_millis(150),
            },
        ] {
            let a = Assignment {
                strategy,
                ttl: Duration::from_millis(2500),
            };
            let m = assignment_action(&a);
            assert_eq!(m.assignment_time_to_live.unwrap().seconds, 2);
            assert_eq!(assignment_of(&m), Ok(a));
        }
        let mut m = assignment_action(&Assignment {
            strategy: QuotaStrategy::AllowAll,
            ttl: Duration::from_secs(1),
        });
        m.assignment_time_to_live = Some(PbDuration {
            seconds: -1,
            nanos: 0,
        });
        assert_eq!(assignment_of(&m), Err(AssignmentError::NoTtl));
        m.assignment_time_to_live = None;
        assert_eq!(assignment_of(&m), Err(AssignmentError::NoTtl));
        m.assignment_time_to_live = Some(pb_duration(Duration::from_secs(1)));
        m.rate_limit_strategy = Some(RateLimitStrategy {
            strategy: Some(Strategy::BlanketRule(9)),
        });
        assert_eq!(
            assignment_of(&m),
            Err(AssignmentError::Unknown("blanket rule"))
        );
        m.rate_limit_strategy = Some(RateLimitStrategy {
            strategy: Some(Strategy::TokenBucket(TokenBucket {
                max_tokens: 5,
                tokens_per_fill: None,
                fill_interval: Some(pb_duration(Duration::ZERO)),
            })),
        });
        assert_eq!(assignment_of(&m), Err(AssignmentError::BadBucket));
        m.rate_limit_strategy = None;
        assert_eq!(assignment_of(&m), Err(AssignmentError::NoStrategy));
    }
}
