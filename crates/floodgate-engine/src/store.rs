//! Where decisions are made: the [`DecisionStore`] trait, and [`LocalStore`], the
//! in-process implementation (one capped [`KeyedLimiter`] per policy).
//!
//! A store receives every policy check of one request at once and must decide them
//! all-or-nothing: either every check is admitted and charged, or none is charged. A
//! Redis-backed store implements the same trait (one round trip per request).
//!
//! [`PolicyInfo`] is what a store (and the header rendering) knows of a policy; the
//! surfaces build it from their own policy definitions.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use floodgate_core::multi::{Check, MultiDecision, check_all};
use floodgate_core::ratelimit_fields::{Advertised, sf_string};
use floodgate_core::settle::reserve_all;
use floodgate_core::{AnyAlgorithm, Clock, ConfigError, KeyedLimiter, Nanos, Spec, Stats};

use smallvec::SmallVec;

pub use crate::fault::{StoreError, StoreErrorKind};
use crate::inflight::{InFlightSpec, LeaseAnswer, LeaseOp, LeasePolicy, LocalLeases};
pub use crate::settle::{Reservation, Reserved, Settled};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a backend ([`DecisionStore`]) needs to know about a policy.
#[derive(Debug, Clone)]
pub struct PolicyInfo {
    /// Position of the policy in the limiter's list (stable for the limiter's life).
    pub index: usize,
    /// The policy name, as in the `RateLimit-Policy` header; also a Redis key prefix.
    pub name: String,
    /// Algorithm, rate, capacity, delay mode.
    pub spec: Spec,
    /// The algorithm built from `spec`.
    pub algorithm: AnyAlgorithm,
    /// What the RateLimit fields advertise for this policy (sustained rate `q`/`w`,
    /// capacity), from `spec`.
    pub fields: Advertised,
    /// The name as a Structured Fields string (quoted, escaped), serialized once: the
    /// start of this policy's member in every `RateLimit` value.
    pub sf_name: String,
    /// This policy's member of `RateLimit-Policy`, rendered once.
    pub policy_member: String,
    /// `policy_member` as a header value: the whole `RateLimit-Policy` field when this is
    /// the only policy a request is checked against (the usual case).
    pub policy_value: Option<http::HeaderValue>,
    /// Set for a `max_in_flight` policy ([`crate::inflight`]), which holds leases
    /// instead of being checked at a rate (its `spec` and `algorithm` are then unused).
    pub in_flight: Option<Arc<LeasePolicy>>,
    /// Set for an adaptive policy ([`crate::adaptive`]): one in-process concurrency limit
    /// with priority classes (its `spec` and `algorithm` are then unused).
    pub adaptive: Option<crate::adaptive::PartitionedLimiter>,
}

impl PolicyInfo {
    /// The policy at `index` named `name`, with its spec and algorithm.
    pub fn new(index: usize, name: String, spec: Spec, algorithm: AnyAlgorithm) -> PolicyInfo {
        let fields = Advertised::of(&spec);
        PolicyInfo::with_fields(index, name, spec, algorithm, fields)
    }

    /// As [`new`](Self::new), advertising `fields` instead of what `spec` implies (the
    /// server's blocking limits, `requests_per_unit: 0`, advertise `q=0`; they are never
    /// checked against a store).
    pub fn with_fields(
        index: usize,
        name: String,
        spec: Spec,
        algorithm: AnyAlgorithm,
        fields: Advertised,
    ) -> PolicyInfo {
        let sf_name = sf_string(&name);
        let policy_member = fields.policy_member(&sf_name);
        let policy_value = http::HeaderValue::try_from(policy_member.as_str()).ok();
        PolicyInfo {
            index,
            name,
            spec,
            algorithm,
            fields,
            sf_name,
            policy_member,
            policy_value,
            in_flight: None,
            adaptive: None,
        }
    }

    /// An adaptive policy at `index` named after its `limiter` (see [`crate::adaptive`]).
    /// Its `spec` and `algorithm` are placeholders no check reads, and it advertises no
    /// RateLimit fields (a concurrency limit shed with 503 is not a quota).
    pub fn adaptive(index: usize, limiter: crate::adaptive::PartitionedLimiter) -> PolicyInfo {
        let placeholder = Spec::new(
            floodgate_core::Kind::Gcra,
            floodgate_core::Rate::per_second(1).expect("1/s is valid"),
        );
        let algorithm = placeholder.build().expect("1/s GCRA is valid");
        let mut info = PolicyInfo::new(index, limiter.name().to_string(), placeholder, algorithm);
        info.adaptive = Some(limiter);
        info
    }

    /// A `max_in_flight` policy at `index` named `name` (see [`crate::inflight`]); it
    /// advertises `q=N;qu="concurrent-requests"`. Its `spec` and `algorithm` are
    /// placeholders no check reads (a store still builds its rate state for them: empty).
    pub fn in_flight(index: usize, name: String, spec: InFlightSpec) -> PolicyInfo {
        let placeholder = Spec::new(
            floodgate_core::Kind::Gcra,
            floodgate_core::Rate::per_second(1).expect("1/s is valid"),
        );
        let algorithm = placeholder.build().expect("1/s GCRA is valid");
        let lease = Arc::new(LeasePolicy::new(index, name.clone(), spec));
        let mut info = PolicyInfo::with_fields(
            index,
            name,
            placeholder,
            algorithm,
            Advertised::concurrent(spec.limit),
        );
        info.in_flight = Some(lease);
        info
    }
}

/// One policy check of a request.
#[derive(Debug, Clone, Copy)]
pub struct StoreCheck<'a> {
    /// The policy (its index, name and algorithm).
    pub policy: &'a PolicyInfo,
    /// The key bytes within that policy (arbitrary bytes; not necessarily UTF-8).
    pub key: &'a Vec<u8>,
    /// Units this request costs under the policy.
    pub cost: u64,
}

/// Counters of one policy in a store, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyStats {
    /// Keys held.
    pub keys: u64,
    /// Live keys evicted to respect the key cap.
    pub evicted: u64,
    /// Idle keys dropped (loses nothing).
    pub idle_dropped: u64,
}

/// A decision backend: checks one request against several policies, all-or-nothing.
///
/// Implementations must not charge any policy unless all admit the request (see
/// [`floodgate_core::multi::check_all`]); the returned decisions are in the order of
/// `checks`.
pub trait DecisionStore: Send + Sync + 'static {
    /// Decide on `checks`, all-or-nothing.
    fn check<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>>;

    /// Decide on `checks` as [`check`](Self::check) does, taking their costs as
    /// estimates; when admitted, the [`Reservation`] to [`settle`](Self::settle) with the
    /// actual cost (see [`crate::settle`]). Stores that cannot settle refuse.
    fn reserve<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<(MultiDecision, Option<Reservation>), StoreError>> {
        let _ = checks;
        Box::pin(std::future::ready(Err(cannot_settle())))
    }

    /// Settle `reservation` with the request's `actual` cost under every policy it was
    /// reserved on: one settlement per part, in order.
    fn settle(
        &self,
        reservation: Reservation,
        actual: u64,
    ) -> BoxFuture<'_, Result<Settled, StoreError>> {
        let _ = (reservation, actual);
        Box::pin(std::future::ready(Err(cannot_settle())))
    }

    /// Per-policy counters, indexed like the policies; empty when the store keeps none.
    fn stats(&self) -> Vec<PolicyStats> {
        Vec::new()
    }

    /// Whether every node of a fleet using this store decides on the same counters
    /// (Redis: true; in process: false). The `shared` and `hybrid` fleet strategies need it.
    fn shared(&self) -> bool {
        false
    }

    /// Whether the store's backend answers: false while every decision is the fault
    /// policy's (Redis not reached since the store was made, or its circuit breaker
    /// open). Exported as `floodgate_store_up` and shown on the health endpoints. In
    /// process: always true (the default).
    fn reachable(&self) -> bool {
        true
    }

    /// Monotonic event counters of the store, `(event, count)`, exported as
    /// `floodgate_store_events_total{event}` (the hybrid store: `lease_admit`,
    /// `round_trip`); empty by default.
    fn events(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// An in-flight lease operation ([`crate::inflight`]) of `policy` on `key`: acquire
    /// (the lease, or the denial when `N` are held), renew (by the policy's TTL from now)
    /// or release (`true` when the lease was live; `false`, nothing freed, when it was
    /// released before, expired or never issued). Default: refused (a store without
    /// leases). [`crate::leases`] has the calls by name.
    fn lease<'a>(
        &'a self,
        policy: &'a LeasePolicy,
        key: &'a [u8],
        op: LeaseOp,
    ) -> BoxFuture<'a, Result<LeaseAnswer, StoreError>> {
        let _ = (key, op);
        Box::pin(std::future::ready(Err(no_leases(policy))))
    }

    /// Whether [`lease`](Self::lease) is implemented (a limiter with `max_in_flight`
    /// policies refuses a store without it when it is built). Default: false.
    fn keeps_leases(&self) -> bool {
        false
    }

    /// The state of `key` under `policy` now, as a check costing 0 sees it: `remaining`
    /// is what the last admitted request's answer said plus what has come back since,
    /// `reset_after` the time until the key is full again. Consumes nothing, writes
    /// nothing and creates no key (the admin API's key lookup). Default: refused (a store
    /// that cannot be read so).
    fn peek<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<floodgate_core::Decision, StoreError>> {
        let _ = key;
        Box::pin(std::future::ready(Err(StoreError::refused(
            "custom",
            format!(
                "policy {:?}: this store cannot be read without consuming",
                policy.name
            ),
        ))))
    }

    /// What a request of `cost` units would be answered under `policy` for `key` now,
    /// consuming nothing, writing nothing, creating no key; at cost 0 the same as
    /// [`peek`](Self::peek). Default: `peek` at cost 0, refused at any other cost (a
    /// store that reads a key only as a cost-0 check sees it).
    fn peek_cost<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
        cost: u64,
    ) -> BoxFuture<'a, Result<floodgate_core::Decision, StoreError>> {
        if cost == 0 {
            return self.peek(policy, key);
        }
        Box::pin(std::future::ready(Err(StoreError::refused(
            "custom",
            format!(
                "policy {:?}: this store reads a key at cost 0 only",
                policy.name
            ),
        ))))
    }
}

fn no_leases(policy: &LeasePolicy) -> StoreError {
    StoreError::refused(
        "custom",
        format!(
            "policy {:?} limits requests in flight, and this store keeps no leases",
            policy.name
        ),
    )
}

impl<S: DecisionStore + ?Sized> DecisionStore for Arc<S> {
    fn check<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>> {
        (**self).check(checks)
    }
    fn reserve<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<(MultiDecision, Option<Reservation>), StoreError>> {
        (**self).reserve(checks)
    }
    fn settle(
        &self,
        reservation: Reservation,
        actual: u64,
    ) -> BoxFuture<'_, Result<Settled, StoreError>> {
        (**self).settle(reservation, actual)
    }
    fn stats(&self) -> Vec<PolicyStats> {
        (**self).stats()
    }
    fn shared(&self) -> bool {
        (**self).shared()
    }
    fn reachable(&self) -> bool {
        (**self).reachable()
    }
    fn events(&self) -> Vec<(&'static str, u64)> {
        (**self).events()
    }
    fn lease<'a>(
        &'a self,
        policy: &'a LeasePolicy,
        key: &'a [u8],
        op: LeaseOp,
    ) -> BoxFuture<'a, Result<LeaseAnswer, StoreError>> {
        (**self).lease(policy, key, op)
    }
    fn keeps_leases(&self) -> bool {
        (**self).keeps_leases()
    }

    fn peek<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<floodgate_core::Decision, StoreError>> {
        (**self).peek(policy, key)
    }

    fn peek_cost<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
        cost: u64,
    ) -> BoxFuture<'a, Result<floodgate_core::Decision, StoreError>> {
        (**self).peek_cost(policy, key, cost)
    }
}

/// What a store without [`DecisionStore::reserve`] and [`DecisionStore::settle`] answers.
fn cannot_settle() -> StoreError {
    StoreError::refused(
        "store",
        "this decision store cannot settle costs after the response",
    )
}

/// The in-process store's clock: [`Nanos`] since the Unix epoch, the wall-clock time read
/// once at creation and advanced by tokio's monotonic clock ever after.
///
/// Invariants: readings never go backwards and never jump with a wall-clock step (NTP,
/// an operator); they start within a read of the wall clock, so fixed and sliding windows
/// start on wall-clock multiples (a `100/min` window resets on the minute, as a Redis
/// store's would); `tokio::time::pause` in tests stops it too (outside a runtime it runs
/// on the std monotonic clock). floodgate-client's `TokioElapsedClock` counts from zero
/// instead.
#[derive(Debug, Clone, Copy)]
pub struct TokioWallClock {
    origin: tokio::time::Instant,
    wall: Nanos,
}

impl TokioWallClock {
    /// A clock reading the wall time now.
    pub fn new() -> Self {
        TokioWallClock {
            origin: tokio::time::Instant::now(),
            wall: floodgate_core::WallClock.now(),
        }
    }
}

impl Default for TokioWallClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioWallClock {
    fn now(&self) -> Nanos {
        self.wall.saturating_add(self.origin.elapsed())
    }
}

/// A request's checks as the core's, on a [`LocalStore`]'s limiters.
type CoreChecks<'c> = SmallVec<[Check<'c, Vec<u8>, AnyAlgorithm>; 2]>;

/// The in-process store: one [`KeyedLimiter`] per policy, each capped at `max_keys`.
pub struct LocalStore {
    limiters: Vec<Arc<KeyedLimiter<Vec<u8>, AnyAlgorithm>>>,
    clock: Arc<dyn Clock>,
    leases: LocalLeases,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("policies", &self.limiters.len())
            .finish_non_exhaustive()
    }
}

impl LocalStore {
    /// A store for `policies` (in index order), each holding at most `max_keys` keys, on
    /// a [`TokioWallClock`].
    pub fn new(policies: &[PolicyInfo], max_keys: usize) -> Result<LocalStore, ConfigError> {
        LocalStore::with_clock(policies, max_keys, Arc::new(TokioWallClock::new()))
    }

    /// As [`new`](Self::new) with a chosen clock.
    pub fn with_clock(
        policies: &[PolicyInfo],
        max_keys: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<LocalStore, ConfigError> {
        let limiters = policies
            .iter()
            .map(|p| KeyedLimiter::new(p.algorithm.clone(), max_keys).map(Arc::new))
            .collect::<Result<_, _>>()?;
        Ok(LocalStore {
            limiters,
            clock,
            leases: LocalLeases::new(max_keys),
        })
    }

    /// A store over limiters that already exist, one per policy in index order (a
    /// reloaded configuration keeps the state of its unchanged policies this way).
    pub fn from_limiters(
        limiters: Vec<Arc<KeyedLimiter<Vec<u8>, AnyAlgorithm>>>,
        clock: Arc<dyn Clock>,
    ) -> LocalStore {
        let max_keys = limiters.first().map_or(1_000_000, |l| l.max_keys());
        LocalStore {
            limiters,
            clock,
            leases: LocalLeases::new(max_keys),
        }
    }

    /// The clock this store reads (a successor store keeps it: readings never go back).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The limiter of the policy at `index`, if any.
    pub fn limiter_at(&self, index: usize) -> Option<&Arc<KeyedLimiter<Vec<u8>, AnyAlgorithm>>> {
        self.limiters.get(index)
    }

    /// Decide synchronously (the in-process store never waits).
    /// Fails only when a check names a policy index this store was not built with.
    pub fn check_now(&self, checks: &[StoreCheck<'_>]) -> Result<MultiDecision, StoreError> {
        let now = self.clock.now();
        if let [c] = checks {
            let check = Check {
                limiter: &**self.limiter(c.policy)?,
                key: c.key,
                cost: c.cost,
            };
            return Ok(check_all(&[check], now));
        }
        let list = self.core_checks(checks)?;
        Ok(check_all(&list, now))
    }

    /// [`DecisionStore::reserve`], synchronously.
    pub fn reserve_now(
        &self,
        checks: &[StoreCheck<'_>],
    ) -> Result<(MultiDecision, Option<Reservation>), StoreError> {
        let list = self.core_checks(checks)?;
        let (decision, reserved) = reserve_all(&list, self.clock.now());
        let reservation = decision.allowed.then(|| {
            Reservation::from_parts(checks.iter().zip(reserved).map(|(c, r)| Reserved {
                policy: c.policy.index,
                name: c.policy.name.clone(),
                key: c.key.clone(),
                charge: r.charge(),
            }))
        });
        Ok((decision, reservation))
    }

    /// [`DecisionStore::settle`], synchronously. A part naming a policy this store does
    /// not have, or whose debt does not fit, is refused; parts before it stay settled.
    pub fn settle_now(&self, reservation: Reservation, actual: u64) -> Result<Settled, StoreError> {
        let now = self.clock.now();
        reservation
            .into_parts()
            .into_iter()
            .map(|p| {
                let limiter = self.limiters.get(p.policy).ok_or_else(|| {
                    StoreError::refused(
                        "memory",
                        format!("policy {:?} is not in this store", p.name),
                    )
                })?;
                limiter
                    .settle_charge(&p.key, p.charge, now, actual)
                    .map_err(|e| StoreError::refused("memory", e.to_string()))
            })
            .collect()
    }

    /// `checks` as the core's, on this store's limiters.
    fn core_checks<'c>(&'c self, checks: &[StoreCheck<'c>]) -> Result<CoreChecks<'c>, StoreError> {
        checks
            .iter()
            .map(|c| {
                Ok(Check {
                    limiter: &**self.limiter(c.policy)?,
                    key: c.key,
                    cost: c.cost,
                })
            })
            .collect()
    }

    /// What a check of `key` costing `cost` under `policy` would answer now, consuming
    /// nothing and inserting nothing (the admin API's key lookup).
    pub fn peek(
        &self,
        policy: &PolicyInfo,
        key: &[u8],
        cost: u64,
    ) -> Result<floodgate_core::Decision, StoreError> {
        Ok(self.limiter(policy)?.peek(key, self.clock.now(), cost))
    }

    fn limiter(
        &self,
        policy: &PolicyInfo,
    ) -> Result<&Arc<KeyedLimiter<Vec<u8>, AnyAlgorithm>>, StoreError> {
        self.limiters.get(policy.index).ok_or_else(|| {
            StoreError::refused(
                "memory",
                format!(
                    "policy {:?} (index {}) is not in this store ({} policies)",
                    policy.name,
                    policy.index,
                    self.limiters.len()
                ),
            )
        })
    }
}

impl DecisionStore for LocalStore {
    fn peek<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<floodgate_core::Decision, StoreError>> {
        Box::pin(std::future::ready(LocalStore::peek(self, policy, key, 0)))
    }

    fn check<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>> {
        Box::pin(std::future::ready(self.check_now(checks)))
    }

    fn reserve<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<(MultiDecision, Option<Reservation>), StoreError>> {
        Box::pin(std::future::ready(self.reserve_now(checks)))
    }

    fn settle(
        &self,
        reservation: Reservation,
        actual: u64,
    ) -> BoxFuture<'_, Result<Settled, StoreError>> {
        Box::pin(std::future::ready(self.settle_now(reservation, actual)))
    }

    fn stats(&self) -> Vec<PolicyStats> {
        self.limiters
            .iter()
            .map(|l| {
                let Stats {
                    keys,
                    idle_dropped,
                    evicted,
                } = l.stats();
                PolicyStats {
                    keys,
                    evicted,
                    idle_dropped,
                }
            })
            .collect()
    }

    fn lease<'a>(
        &'a self,
        policy: &'a LeasePolicy,
        key: &'a [u8],
        op: LeaseOp,
    ) -> BoxFuture<'a, Result<LeaseAnswer, StoreError>> {
        Box::pin(std::future::ready(self.leases.lease(
            policy,
            key,
            op,
            &*self.clock,
        )))
    }

    fn keeps_leases(&self) -> bool {
        true
    }
}
