//! In-flight leases in Redis for the Redis and hybrid stores ([`RedisLeases`], one
//! [`floodgate_redis::RedisInFlight`] per policy): acquire, renew and release one round
//! trip each, shared by every node of a fleet.

use std::sync::Arc;

use crate::fault::{StoreError, StoreErrorKind};
use crate::inflight::{LeaseAnswer, LeaseOp, LeasePolicy, Tables};

/// A Redis store's lease tables: one [`floodgate_redis::RedisInFlight`] per policy.
#[derive(Debug)]
pub struct RedisLeases {
    store: Arc<floodgate_redis::RedisStore>,
    tables: Tables<floodgate_redis::RedisInFlight>,
}

impl RedisLeases {
    /// Leases on `store`.
    pub fn new(store: Arc<floodgate_redis::RedisStore>) -> RedisLeases {
        RedisLeases {
            store,
            tables: Tables::default(),
        }
    }

    fn table(
        &self,
        policy: &LeasePolicy,
    ) -> Result<Arc<floodgate_redis::RedisInFlight>, StoreError> {
        self.tables.get(policy.index, || {
            floodgate_redis::RedisInFlight::new(self.store.clone(), policy.spec.limit)
                .map_err(|e| StoreError::refused("redis", format!("policy {:?}: {e}", policy.name)))
        })
    }

    fn fail(e: floodgate_redis::Error) -> StoreError {
        if e.is_fault() {
            let kind = match e {
                floodgate_redis::Error::Timeout { .. } => StoreErrorKind::Timeout,
                other => StoreErrorKind::Unavailable(other.to_string()),
            };
            StoreError::new("redis", kind)
        } else {
            StoreError::refused("redis", e.to_string())
        }
    }

    /// Run `op` (one round trip).
    pub async fn lease(
        &self,
        policy: &LeasePolicy,
        key: &[u8],
        op: LeaseOp,
    ) -> Result<LeaseAnswer, StoreError> {
        let t = self.table(policy)?;
        let (user, ttl) = (policy.user_key(key), policy.spec.ttl);
        match op {
            LeaseOp::Acquire => t.acquire(&user, ttl).await.map(LeaseAnswer::Acquired),
            LeaseOp::Renew(id) => t.renew(&user, id, ttl).await.map(LeaseAnswer::Done),
            LeaseOp::Release(id) => t.release(&user, id).await.map(LeaseAnswer::Done),
        }
        .map_err(Self::fail)
    }
}

/// The lease method of [`DecisionStore`](crate::store::DecisionStore) for a store with
/// a `leases: RedisLeases` field.
macro_rules! redis_lease_methods {
    () => {
        fn lease<'a>(
            &'a self,
            policy: &'a crate::inflight::LeasePolicy,
            key: &'a [u8],
            op: crate::inflight::LeaseOp,
        ) -> crate::store::BoxFuture<'a, Result<crate::inflight::LeaseAnswer, crate::StoreError>> {
            Box::pin(self.leases.lease(policy, key, op))
        }

        fn keeps_leases(&self) -> bool {
            true
        }
    };
}
pub(crate) use redis_lease_methods;
