//! [`HybridStore`]: the `hybrid` fleet strategy as a [`DecisionStore`]. Each node spends
//! leases of quota taken from the shared Redis counter locally while a key is far from its
//! limit, and asks Redis for every request as the key nears it
//! ([`floodgate_dist::HybridNode`] decides which; this store does the round trips).
//!
//! **Error bound** (from [`floodgate_dist::hybrid`]): every unit admitted was first charged
//! to the shared counter, so over a long run the fleet admits no more than the shared
//! limit; within any span it can exceed the limit's bound (capacity + rate x span) by at
//! most `nodes x lease` units (leased before the span, spent inside it), and at most that
//! many units sit leased but unused at any time (quota a denied client may be missing).
//! Leases expire after `lease_ttl`; unused units are lost, never handed out twice.
//!
//! Headers on a request admitted from a lease show an estimate: `remaining` is the lease's
//! unspent units plus what the shared counter said remained at the last round trip
//! (capped at the limit), `reset` the time to refill the rest at the policy's rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floodgate_core::algorithms::DelayMode;
use floodgate_core::multi::MultiDecision;
use floodgate_core::{Algorithm, Clock, Decision, Kind};
use floodgate_dist::HybridNode;
use floodgate_dist::hybrid::{Finish, Step};
use floodgate_redis::{Outcome, RedisLimiter, RedisStore, Source};

use crate::fleet::Fleet;
use crate::redis_store::{err, peek_on, redis_user, refused, reserve_on, settle_on};
use crate::settle::{Reservation, Settled};
use crate::store::{BoxFuture, DecisionStore, PolicyInfo, StoreCheck, StoreError, TokioWallClock};

type LeaseKey = (usize, Vec<u8>);

/// Leases from a shared Redis counter, spent locally (see the module docs).
pub struct HybridStore {
    limiters: Vec<RedisLimiter>,
    node: Mutex<HybridNode<LeaseKey>>,
    clock: TokioWallClock,
    lease_admits: AtomicU64,
    round_trips: AtomicU64,
    /// In-flight leases: always a round trip (a place cannot be spent locally).
    leases: crate::redis_leases::RedisLeases,
}

impl std::fmt::Debug for HybridStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridStore")
            .field("policies", &self.limiters.len())
            .finish_non_exhaustive()
    }
}

/// Counters of a [`HybridStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HybridCounters {
    /// Policy checks admitted from a local lease (no round trip).
    pub lease_admits: u64,
    /// Round trips to the shared counter.
    pub round_trips: u64,
}

impl HybridStore {
    /// A store for `policies` (in index order) on `store`, leasing as `fleet` says
    /// ([`Fleet::lease`], [`Fleet::lease_ttl`]; per-request sharing once fewer than
    /// [`Fleet::hybrid_bound`] units remain), holding at most `max_keys` leases.
    ///
    /// Leaky queues that delay requests cannot be leased (a lease admits at once): such a
    /// policy is an error; use `nodelay`, or another algorithm.
    pub fn new(
        store: Arc<RedisStore>,
        policies: &[PolicyInfo],
        fleet: &Fleet,
        max_keys: usize,
    ) -> Result<HybridStore, StoreError> {
        HybridStore::with_lease(
            store,
            policies,
            fleet.nodes().len(),
            fleet.lease(),
            fleet.lease_ttl(),
            max_keys,
        )
    }

    /// As [`new`](Self::new) for a fleet known by its size alone (the server's
    /// `fleet.nodes: N`): leases of at most `lease` units living `lease_ttl`, shared
    /// decisions once fewer than `nodes x lease` units remain.
    pub fn with_lease(
        store: Arc<RedisStore>,
        policies: &[PolicyInfo],
        nodes: usize,
        lease: u64,
        lease_ttl: Duration,
        max_keys: usize,
    ) -> Result<HybridStore, StoreError> {
        let limiters = policies
            .iter()
            .map(|p| {
                if p.spec.kind == Kind::LeakyQueue && p.spec.delay != DelayMode::NoDelay {
                    return Err(refused(format!(
                        "policy {:?}: the hybrid strategy admits from leases at once; a delaying leaky-queue cannot be leased (set nodelay = true or use gcra)",
                        p.name
                    )));
                }
                RedisLimiter::new(store.clone(), p.algorithm.clone())
                    .map_err(|e| refused(format!("policy {:?}: {e}", p.name)))
            })
            .collect::<Result<_, _>>()?;
        let ttl = u64::try_from(lease_ttl.as_nanos()).unwrap_or(u64::MAX);
        let bound = (nodes as u64).saturating_mul(lease);
        Ok(HybridStore {
            leases: crate::redis_leases::RedisLeases::new(store),
            limiters,
            node: Mutex::new(HybridNode::new(lease, bound, ttl, max_keys)),
            clock: TokioWallClock::new(),
            lease_admits: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
        })
    }

    /// How many checks were admitted locally and how many round trips were made.
    pub fn counters(&self) -> HybridCounters {
        HybridCounters {
            lease_admits: self.lease_admits.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
        }
    }

    fn node(&self) -> MutexGuard<'_, HybridNode<LeaseKey>> {
        self.node.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The headers' view of a key admitted from its lease.
    fn lease_view(policy: &PolicyInfo, lease: Option<(u64, u64)>) -> Decision {
        let limit = policy.algorithm.limit();
        let (units, shared) = lease.unwrap_or((0, 0));
        let remaining = units.saturating_add(shared).min(limit);
        let ns =
            u128::from(limit - remaining) * u128::from(policy.spec.rate.emission_interval_nanos());
        let reset = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
        Decision::allow(limit, remaining, reset)
    }

    async fn ask(&self, c: &StoreCheck<'_>, units: u64) -> Result<Decision, StoreError> {
        let limiter = self
            .limiters
            .get(c.policy.index)
            .ok_or_else(|| refused(format!("policy {:?} is not in this store", c.policy.name)))?;
        let user = redis_user(c);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let Outcome { decision, source } = limiter.check(&user, units).await.map_err(err)?;
        match source {
            Source::Fault(f) => Err(err(f)),
            Source::Redis | Source::DenyCache => Ok(decision),
        }
    }

    async fn one(&self, c: &StoreCheck<'_>, key: &LeaseKey) -> Result<Decision, StoreError> {
        let now = self.clock.now();
        let step = {
            let mut node = self.node();
            match node.begin(key, now, c.cost) {
                Step::Admit => Err(node.lease(key, now)),
                Step::Ask { units } => Ok(units),
            }
        };
        let mut units = match step {
            Err(lease) => {
                self.lease_admits.fetch_add(1, Ordering::Relaxed);
                return Ok(Self::lease_view(c.policy, lease));
            }
            Ok(u) => u,
        };
        // at most two round trips: a refused lease is retried for the cost alone
        loop {
            let mut d = self.ask(c, units).await?;
            let finish = self.node().finish(key, now, c.cost, units, &d);
            match finish {
                Finish::Admit => {
                    d.remaining = d.remaining.saturating_add(units - c.cost).min(d.limit);
                    return Ok(d);
                }
                Finish::Deny => return Ok(d),
                Finish::Retry { units: u } => units = u,
            }
        }
    }

    async fn check_all(&self, checks: &[StoreCheck<'_>]) -> Result<MultiDecision, StoreError> {
        let keys: Vec<LeaseKey> = checks
            .iter()
            .map(|c| (c.policy.index, c.key.clone()))
            .collect();
        let mut decisions = Vec::with_capacity(checks.len());
        for (i, c) in checks.iter().enumerate() {
            let d = match self.one(c, &keys[i]).await {
                Ok(d) => d,
                Err(e) => {
                    self.refund(&checks[..i], &keys[..i]);
                    return Err(e);
                }
            };
            if !d.allowed {
                // all-or-nothing: the units admitted for earlier policies were charged to
                // the shared counter; they go back to this node's leases
                self.refund(&checks[..i], &keys[..i]);
                decisions.push(d);
                let now = self.clock.now();
                let node = self.node();
                for (c, k) in checks[i + 1..].iter().zip(&keys[i + 1..]) {
                    decisions.push(Self::lease_view(c.policy, node.lease(k, now)));
                }
                return Ok(MultiDecision {
                    allowed: false,
                    decisions,
                });
            }
            decisions.push(d);
        }
        Ok(MultiDecision {
            allowed: true,
            decisions,
        })
    }

    fn refund(&self, checks: &[StoreCheck<'_>], keys: &[LeaseKey]) {
        let mut node = self.node();
        for (c, k) in checks.iter().zip(keys) {
            node.refund(k, c.cost);
        }
    }
}

impl DecisionStore for HybridStore {
    fn check<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>> {
        Box::pin(self.check_all(checks))
    }

    /// Against the shared counter, never the lease (see [`crate::settle`]).
    fn reserve<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<(MultiDecision, Option<Reservation>), StoreError>> {
        self.round_trips
            .fetch_add(checks.len() as u64, Ordering::Relaxed);
        Box::pin(reserve_on(&self.limiters, checks))
    }

    fn settle(
        &self,
        reservation: Reservation,
        actual: u64,
    ) -> BoxFuture<'_, Result<Settled, StoreError>> {
        Box::pin(settle_on(&self.limiters, reservation, actual))
    }

    fn shared(&self) -> bool {
        true
    }

    fn reachable(&self) -> bool {
        self.limiters.iter().all(|l| l.store().reachable())
    }

    /// The shared counter, read as the Redis store reads it: units this node (or another)
    /// holds in a lease and has not spent yet count as taken.
    fn peek<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(peek_on(&self.limiters, policy, key))
    }

    fn events(&self) -> Vec<(&'static str, u64)> {
        let c = self.counters();
        vec![
            ("lease_admit", c.lease_admits),
            ("round_trip", c.round_trips),
        ]
    }

    crate::redis_leases::redis_lease_methods!();
}
