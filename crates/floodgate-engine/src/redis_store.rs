//! [`RedisDecisionStore`]: the [`DecisionStore`] on floodgate-redis, so that several
//! proxies (or app instances) share one limit.
//!
//! Each policy is a [`RedisLimiter`] over the shared [`RedisStore`]; a key is stored as
//! `policy name, 0x1f, key` under the store's prefix. Time is Redis `TIME` by default (one
//! clock for every process).
//!
//! * One policy on a request: one round trip, exact.
//! * Several: all-or-nothing, as in process, through [`floodgate_redis::multi`]: on a
//!   single Redis one atomic round trip for them all; on a Redis Cluster (whose slots
//!   one script cannot span) a dry run of each, then the charges, with a window a few
//!   round trips wide in which the earlier policies can be charged for a denied request.
//! * A Redis fault (timeout, error, open circuit) is a [`StoreError`]: the layer applies
//!   its `store_error` outcome (fail open by default) and counts it.

use std::sync::Arc;

use floodgate_core::multi::MultiDecision;
use floodgate_redis::{RedisLimiter, RedisStore, Source, multi};

use crate::store::{BoxFuture, DecisionStore, PolicyInfo, StoreCheck, StoreError, StoreErrorKind};

/// Policies with their state in Redis.
#[derive(Debug)]
pub struct RedisDecisionStore {
    store: Arc<RedisStore>,
    limiters: Vec<RedisLimiter>,
}

/// The user key under which `c`'s state is kept: policy name, 0x1f, key.
pub(crate) fn redis_user(c: &StoreCheck<'_>) -> Vec<u8> {
    let mut user = Vec::with_capacity(c.policy.name.len() + 1 + c.key.len());
    user.extend_from_slice(c.policy.name.as_bytes());
    user.push(0x1f);
    user.extend_from_slice(c.key);
    user
}

/// A failure of the Redis store of kind `kind`.
pub(crate) fn err(kind: impl Into<StoreErrorKind>) -> StoreError {
    StoreError::new("redis", kind.into())
}

/// A refusal of the Redis store saying `why`.
pub(crate) fn refused(why: String) -> StoreError {
    StoreError::refused("redis", why)
}

impl RedisDecisionStore {
    /// A store for `policies` (in index order) on `store`.
    pub fn new(store: Arc<RedisStore>, policies: &[PolicyInfo]) -> Result<Self, StoreError> {
        let limiters = policies
            .iter()
            .map(|p| {
                RedisLimiter::new(store.clone(), p.algorithm.clone())
                    .map_err(|e| refused(format!("policy {:?}: {e}", p.name)))
            })
            .collect::<Result<_, _>>()?;
        Ok(RedisDecisionStore { store, limiters })
    }

    /// The Redis connection (for its counters).
    pub fn redis(&self) -> &Arc<RedisStore> {
        &self.store
    }

    async fn check_all(&self, checks: &[StoreCheck<'_>]) -> Result<MultiDecision, StoreError> {
        let mut users = Vec::with_capacity(checks.len());
        let mut limiters = Vec::with_capacity(checks.len());
        for c in checks {
            let limiter = self.limiters.get(c.policy.index).ok_or_else(|| {
                refused(format!("policy {:?} is not in this store", c.policy.name))
            })?;
            users.push(redis_user(c));
            limiters.push(limiter);
        }
        let multi: Vec<multi::Check<'_>> = checks
            .iter()
            .zip(&users)
            .zip(&limiters)
            .map(|((c, user), limiter)| multi::Check {
                limiter,
                user,
                cost: c.cost,
            })
            .collect();
        let out = multi::check_all(&multi).await.map_err(err)?;
        match out.source {
            Source::Fault(f) => Err(err(f)),
            Source::Redis | Source::DenyCache => Ok(MultiDecision {
                allowed: out.allowed,
                decisions: out.decisions,
            }),
        }
    }
}

impl DecisionStore for RedisDecisionStore {
    fn check<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>> {
        Box::pin(self.check_all(checks))
    }

    fn shared(&self) -> bool {
        true
    }
}
