//! [`RedisDecisionStore`]: the [`DecisionStore`] on floodgate-redis, so that several
//! proxies (or app instances) share one limit.
//!
//! Each policy is a [`RedisLimiter`] over the shared [`RedisStore`]; a key is stored as
//! `policy name, 0x1f, key` under the store's prefix. Time is Redis `TIME` by default (one
//! clock for every process).
//!
//! * One policy on a request: one round trip, exact.
//! * Several: a look (cost 0) at every policy first, one round trip each; if one cannot
//!   admit the request it is denied and nothing is charged (all-or-nothing, as in
//!   process); otherwise every policy is charged. Between the look and the charge another
//!   process may take the last units of a later policy: then the earlier policies were
//!   charged for a request that is denied. That window is one round trip wide.
//! * A Redis fault (timeout, error, open circuit) is a [`StoreError`]: the layer applies
//!   its `store_error` outcome (fail open by default) and counts it.

use std::sync::Arc;

use floodgate_core::Decision;
use floodgate_core::multi::MultiDecision;
use floodgate_redis::{Outcome, RedisLimiter, RedisStore, Source};

use crate::policy::PolicyInfo;
use crate::store::{BoxFuture, DecisionStore, StoreCheck, StoreError};

/// Policies with their state in Redis.
#[derive(Debug)]
pub struct RedisDecisionStore {
    store: Arc<RedisStore>,
    limiters: Vec<RedisLimiter>,
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError {
        store: "redis",
        message: e.to_string(),
    }
}

impl RedisDecisionStore {
    /// A store for `policies` (in index order) on `store`.
    pub fn new(store: Arc<RedisStore>, policies: &[PolicyInfo]) -> Result<Self, StoreError> {
        let limiters = policies
            .iter()
            .map(|p| {
                RedisLimiter::new(store.clone(), p.algorithm.clone())
                    .map_err(|e| err(format!("policy {:?}: {e}", p.name)))
            })
            .collect::<Result<_, _>>()?;
        Ok(RedisDecisionStore { store, limiters })
    }

    /// The Redis connection (for its counters).
    pub fn redis(&self) -> &Arc<RedisStore> {
        &self.store
    }

    async fn one(&self, c: &StoreCheck<'_>, cost: u64) -> Result<Decision, StoreError> {
        let limiter = self
            .limiters
            .get(c.policy.index)
            .ok_or_else(|| err(format!("policy {:?} is not in this store", c.policy.name)))?;
        let mut user = Vec::with_capacity(c.policy.name.len() + 1 + c.key.len());
        user.extend_from_slice(c.policy.name.as_bytes());
        user.push(0x1f);
        user.extend_from_slice(c.key);
        let Outcome { decision, source } = limiter.check(&user, cost).await.map_err(err)?;
        match source {
            Source::Fault(f) => Err(err(format!("{f:?}"))),
            Source::Redis | Source::DenyCache => Ok(decision),
        }
    }

    async fn check_all(&self, checks: &[StoreCheck<'_>]) -> Result<MultiDecision, StoreError> {
        if let [c] = checks {
            let d = self.one(c, c.cost).await?;
            return Ok(MultiDecision {
                allowed: d.allowed,
                decisions: vec![d],
            });
        }
        // look first: remaining is what each policy could admit right now
        let mut looks = Vec::with_capacity(checks.len());
        for c in checks {
            looks.push(self.one(c, 0).await?);
        }
        if let Some(j) = checks
            .iter()
            .zip(&looks)
            .position(|(c, d)| d.remaining < c.cost)
        {
            // ask the denying policy with the real cost: it charges nothing when denied
            // and says when to retry
            let d = self.one(&checks[j], checks[j].cost).await?;
            if !d.allowed {
                looks[j] = d;
                return Ok(MultiDecision {
                    allowed: false,
                    decisions: looks,
                });
            }
            looks[j] = d; // it fitted after all (units freed meanwhile): charged
            let mut decisions = looks;
            for (i, c) in checks.iter().enumerate() {
                if i != j {
                    decisions[i] = self.one(c, c.cost).await?;
                }
            }
            let allowed = decisions.iter().all(|d| d.allowed);
            return Ok(MultiDecision { allowed, decisions });
        }
        let mut decisions = Vec::with_capacity(checks.len());
        for c in checks {
            decisions.push(self.one(c, c.cost).await?);
        }
        let allowed = decisions.iter().all(|d| d.allowed);
        Ok(MultiDecision { allowed, decisions })
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
