//! [`SharedStore`]: the store every process of a fleet shares, made once from
//! configuration and asked for a [`DecisionStore`] for each set of policies.
//!
//! Every surface that decides on Redis (the proxy, the server on each reload, the demo)
//! goes through it, so the choice between the [`RedisDecisionStore`] (every decision one
//! round trip) and the [`HybridStore`] (the fleet's `hybrid` strategy: leases spent in
//! process) is made in one place.

use std::sync::Arc;
use std::time::Duration;

use floodgate_redis::{RedisStore, StoreConfig};

use crate::StoreError;
use crate::fleet::{Fleet, Strategy};
use crate::hybrid_store::HybridStore;
use crate::redis_store::RedisDecisionStore;
use crate::store::{DecisionStore, PolicyInfo};

/// The `hybrid` strategy's settings: what each process may spend of a shared limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HybridLeases {
    /// Processes in the fleet, at least 1: every decision is shared once fewer than
    /// `nodes x lease` units remain.
    pub nodes: usize,
    /// Most units per lease taken from the shared counter, at least 1.
    pub lease: u64,
    /// A lease's lifetime: units not spent by then go back to nobody.
    pub lease_ttl: Duration,
    /// Most leases held in process at once, at least 1.
    pub max_leases: usize,
}

impl HybridLeases {
    /// The settings of `fleet` when its strategy is `hybrid`, with at most `max_leases`
    /// leases held.
    pub fn of(fleet: &Fleet, max_leases: usize) -> Option<HybridLeases> {
        (fleet.strategy() == Strategy::Hybrid).then(|| HybridLeases {
            nodes: fleet.nodes().len(),
            lease: fleet.lease(),
            lease_ttl: fleet.lease_ttl(),
            max_leases,
        })
    }
}

/// A Redis connected once, and how decisions are made on it (every decision shared, or
/// the `hybrid` strategy's leases).
#[derive(Debug, Clone)]
pub struct SharedStore {
    redis: Arc<RedisStore>,
    hybrid: Option<HybridLeases>,
}

impl SharedStore {
    /// Connect to the Redis at `url` with `config` (its timeouts, prefix, clock and fault
    /// policy); `hybrid` when the fleet's strategy is `hybrid`. The error names the URL
    /// without its password.
    pub async fn connect(
        url: &str,
        config: StoreConfig,
        hybrid: Option<HybridLeases>,
    ) -> Result<SharedStore, floodgate_redis::Error> {
        let redis = RedisStore::connect(url, config).await?;
        Ok(SharedStore::on(Arc::new(redis), hybrid))
    }

    /// As [`connect`](Self::connect), but a Redis that cannot be reached is not an error
    /// ([`RedisStore::connect_or_retry`]): the store is returned at once with the
    /// connection error beside it (for the caller to log), decides under the fault
    /// policy until Redis answers, and connects in the background.
    pub async fn connect_or_retry(
        url: &str,
        config: StoreConfig,
        hybrid: Option<HybridLeases>,
    ) -> Result<(SharedStore, Option<floodgate_redis::Error>), floodgate_redis::Error> {
        let (redis, err) = RedisStore::connect_or_retry(url, config).await?;
        Ok((SharedStore::on(redis, hybrid), err))
    }

    /// Whether Redis answers ([`RedisStore::reachable`]).
    pub fn reachable(&self) -> bool {
        self.redis.reachable()
    }

    /// The shared store on an open connection.
    pub fn on(redis: Arc<RedisStore>, hybrid: Option<HybridLeases>) -> SharedStore {
        SharedStore { redis, hybrid }
    }

    /// The Redis connection (for what other than decisions is kept there: leases, the
    /// RESP door's `CL.THROTTLE`).
    pub fn redis(&self) -> &Arc<RedisStore> {
        &self.redis
    }

    /// The `hybrid` strategy's settings (`None`: every decision shared).
    pub fn hybrid(&self) -> Option<&HybridLeases> {
        self.hybrid.as_ref()
    }

    /// `"hybrid"` or `"redis"`: the store's name in logs and metrics.
    pub fn name(&self) -> &'static str {
        if self.hybrid.is_some() {
            "hybrid"
        } else {
            "redis"
        }
    }

    /// A decision store for `policies` (in index order). `Err` names a policy the store
    /// cannot keep (the hybrid store refuses a delaying leaky queue, for one).
    pub fn decision_store(
        &self,
        policies: &[PolicyInfo],
    ) -> Result<Arc<dyn DecisionStore>, StoreError> {
        let redis = self.redis.clone();
        Ok(match &self.hybrid {
            Some(h) => Arc::new(HybridStore::with_lease(
                redis,
                policies,
                h.nodes,
                h.lease,
                h.lease_ttl,
                h.max_leases,
            )?),
            None => Arc::new(RedisDecisionStore::new(redis, policies)?),
        })
    }
}
