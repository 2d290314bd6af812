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

use floodgate_core::Decision;
use floodgate_core::multi::MultiDecision;
use floodgate_redis::{Error, RedisLimiter, RedisStore, Source, multi};

use crate::redis_leases::RedisLeases;
use crate::settle::{Reservation, Reserved, Settled};
use crate::store::{BoxFuture, DecisionStore, PolicyInfo, StoreCheck, StoreError, StoreErrorKind};

/// Policies with their state in Redis.
#[derive(Debug)]
pub struct RedisDecisionStore {
    store: Arc<RedisStore>,
    limiters: Vec<RedisLimiter>,
    leases: RedisLeases,
}

/// The user key under which `c`'s state is kept: policy name, 0x1f, key.
pub(crate) fn redis_user(c: &StoreCheck<'_>) -> Vec<u8> {
    user_key(&c.policy.name, c.key)
}

/// The user key of `key` under the policy named `name`: name, 0x1f, key.
pub(crate) fn user_key(name: &str, key: &[u8]) -> Vec<u8> {
    let mut user = Vec::with_capacity(name.len() + 1 + key.len());
    user.extend_from_slice(name.as_bytes());
    user.push(0x1f);
    user.extend_from_slice(key);
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
        Ok(RedisDecisionStore {
            leases: RedisLeases::new(store.clone()),
            store,
            limiters,
        })
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

    fn reachable(&self) -> bool {
        self.store.reachable()
    }

    /// One script call at cost 0: the algorithms' scripts write only when they charge,
    /// so this reads the key's state and leaves its value and expiry as they were.
    fn peek<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(peek_on(&self.limiters, policy, key))
    }

    /// At cost 0 as `peek`; at another cost, one call of the policy's script in its dry
    /// mode (decided as a charge of `cost` would be, the key put back as it was).
    fn peek_cost<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
        cost: u64,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        if cost == 0 {
            return self.peek(policy, key);
        }
        Box::pin(async move {
            let limiter = limiter_at(&self.limiters, policy.index, &policy.name)?;
            let user = user_key(&policy.name, key);
            let check = multi::Check {
                limiter,
                user: &user,
                cost,
            };
            let out = multi::peek(check).await.map_err(store_error)?;
            match out.source {
                Source::Fault(f) => Err(err(f)),
                Source::Redis | Source::DenyCache => out
                    .decisions
                    .into_iter()
                    .next()
                    .ok_or_else(|| refused("the dry run answered no decision".into())),
            }
        })
    }

    crate::redis_leases::redis_lease_methods!();

    fn reserve<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<(MultiDecision, Option<Reservation>), StoreError>> {
        Box::pin(reserve_on(&self.limiters, checks))
    }

    fn settle(
        &self,
        reservation: Reservation,
        actual: u64,
    ) -> BoxFuture<'_, Result<Settled, StoreError>> {
        Box::pin(settle_on(&self.limiters, reservation, actual))
    }
}

// Reserve and settle on `RedisLimiter`s, shared by the Redis and hybrid stores (see
// `crate::settle`).

fn limiter_at<'l>(
    limiters: &'l [RedisLimiter],
    index: usize,
    name: &str,
) -> Result<&'l RedisLimiter, StoreError> {
    limiters
        .get(index)
        .ok_or_else(|| refused(format!("policy {name:?} is not in this store")))
}

/// The state of `key` under `policy` on the shared counter, read by a cost-0 call of
/// the policy's script (which writes nothing at cost 0); shared by the Redis and hybrid
/// stores.
pub(crate) async fn peek_on(
    limiters: &[RedisLimiter],
    policy: &PolicyInfo,
    key: &[u8],
) -> Result<Decision, StoreError> {
    let l = limiter_at(limiters, policy.index, &policy.name)?;
    l.try_check(&user_key(&policy.name, key), 0)
        .await
        .map_err(store_error)
}

fn store_error(e: Error) -> StoreError {
    match e {
        Error::Settle(why) => refused(why),
        e if e.is_fault() => err(e),
        e => refused(e.to_string()),
    }
}

/// Reserve `checks` one policy after the other; on a denial, settle the parts
/// already reserved at 0 (their whole estimate comes back).
pub(crate) async fn reserve_on(
    limiters: &[RedisLimiter],
    checks: &[StoreCheck<'_>],
) -> Result<(MultiDecision, Option<Reservation>), StoreError> {
    let mut parts: Vec<Reserved> = Vec::with_capacity(checks.len());
    let mut decisions: Vec<Decision> = Vec::with_capacity(checks.len());
    let mut denied = false;
    for c in checks {
        let l = limiter_at(limiters, c.policy.index, &c.policy.name)?;
        let user = redis_user(c);
        let (d, charge) = match l.reserve(&user, c.cost).await {
            Ok(r) => r,
            Err(e) => {
                undo(limiters, &mut parts, &mut decisions).await;
                return Err(store_error(e));
            }
        };
        decisions.push(d);
        match charge {
            Some(charge) => parts.push(Reserved {
                policy: c.policy.index,
                name: c.policy.name.clone(),
                key: c.key.clone(),
                charge,
            }),
            None => {
                denied = true;
                break;
            }
        }
    }
    if denied {
        undo(limiters, &mut parts, &mut decisions).await;
        for c in &checks[decisions.len()..] {
            let l = limiter_at(limiters, c.policy.index, &c.policy.name)?;
            let d = l.try_check(&redis_user(c), 0).await.map_err(store_error)?;
            decisions.push(d);
        }
        return Ok((
            MultiDecision {
                allowed: false,
                decisions,
            },
            None,
        ));
    }
    Ok((
        MultiDecision {
            allowed: true,
            decisions,
        },
        Some(Reservation::from_parts(parts)),
    ))
}

/// Settle the parts reserved so far at 0; their decisions become the view after.
async fn undo(limiters: &[RedisLimiter], parts: &mut Vec<Reserved>, out: &mut [Decision]) {
    for (i, p) in parts.drain(..).enumerate() {
        let Some(l) = limiters.get(p.policy) else {
            continue;
        };
        let user = user_of(&p);
        if let Ok(s) = l.settle(&user, p.charge, 0).await {
            out[i] = s.decision;
        }
    }
}

fn user_of(p: &Reserved) -> Vec<u8> {
    user_key(&p.name, &p.key)
}

/// Settle every part of `reservation` with `actual`, one round trip each.
pub(crate) async fn settle_on(
    limiters: &[RedisLimiter],
    reservation: Reservation,
    actual: u64,
) -> Result<Settled, StoreError> {
    let mut out = Vec::with_capacity(reservation.parts().len());
    for p in reservation.into_parts() {
        let l = limiter_at(limiters, p.policy, &p.name)?;
        out.push(
            l.settle(&user_of(&p), p.charge, actual)
                .await
                .map_err(store_error)?,
        );
    }
    Ok(out)
}
