//! [`RedisLimiter`]: one algorithm, any number of keys, state in Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::{AnyAlgorithm, Clock, Decision, Nanos, WallClock};

use crate::breaker::Gate;
use crate::deny_cache::{DenyCache, Stamp};
use crate::error::Error;
use crate::scripts::{Now, ScriptCall};
use crate::store::{FaultPolicy, RedisStore, TimeSource, bump};

/// Where a decision came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Redis answered.
    Redis,
    /// The local cache of denials answered (a round trip saved).
    DenyCache,
    /// Redis could not answer: the decision is the store's [`FaultPolicy`].
    Fault(Fault),
}

/// Why a decision was made under the fault policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Redis did not answer within the per-call timeout.
    Timeout,
    /// The call failed (connection lost, server error, bad reply); the message says how.
    Error(String),
    /// The circuit breaker is open: Redis was not called.
    CircuitOpen,
}

/// A decision and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The decision.
    pub decision: Decision,
    /// Redis, the deny cache, or the fault policy.
    pub source: Source,
}

impl Outcome {
    /// Made under the fault policy, not by Redis.
    pub fn degraded(&self) -> bool {
        matches!(self.source, Source::Fault(_))
    }
}

/// One algorithm applied to any number of keys, with its state in Redis: every decision
/// is one `EVALSHA` that checks, consumes and sets the key's expiry atomically.
///
/// ```no_run
/// # async fn demo() -> Result<(), floodgate_redis::Error> {
/// use std::sync::Arc;
/// use floodgate_core::{AnyAlgorithm, Rate, algorithms::Gcra};
/// use floodgate_redis::{RedisLimiter, RedisStore, StoreConfig};
///
/// let store = Arc::new(RedisStore::connect("redis://127.0.0.1:6379", StoreConfig::default()).await?);
/// let limiter = RedisLimiter::new(store, AnyAlgorithm::Gcra(Gcra::new(Rate::per_second(10)?, 20)?))?;
/// let outcome = limiter.check(b"203.0.113.7", 1).await?;
/// if !outcome.decision.allowed { /* 429, Retry-After: outcome.decision.retry_after */ }
/// # Ok(()) }
/// ```
pub struct RedisLimiter {
    store: Arc<RedisStore>,
    algorithm: AnyAlgorithm,
    pub(crate) call: ScriptCall,
    cache: DenyCache,
    pub(crate) pad_ms: u64,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("store", &self.store)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// A limiter running `algorithm` on `store`. Fails with [`Error::Domain`] when a
    /// parameter is outside the exact range of the scripts (see [`crate::scripts`]).
    pub fn new(store: Arc<RedisStore>, algorithm: AnyAlgorithm) -> Result<RedisLimiter, Error> {
        let call = ScriptCall::new(&algorithm)?;
        let pad = store.config.expiry_padding;
        let pad_ms = u64::try_from(pad.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX / 2);
        Ok(RedisLimiter {
            cache: DenyCache::new(store.config.deny_cache_keys),
            store,
            algorithm,
            call,
            pad_ms,
        })
    }

    /// The algorithm.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// The store.
    pub fn store(&self) -> &Arc<RedisStore> {
        &self.store
    }

    /// The Redis key holding `user`'s state.
    pub fn redis_key(&self, user: &[u8]) -> Result<Vec<u8>, Error> {
        self.store.keys.key(self.call.kind(), user)
    }

    /// Ask Redis directly: no deny cache, no breaker, no fault policy. Errors are returned
    /// as they are (timeout, connection, server error). `now` is Redis `TIME` or the
    /// store's clock as configured.
    pub async fn try_check(&self, user: &[u8], cost: u64) -> Result<Decision, Error> {
        let key = self.redis_key(user)?;
        self.raw(&key, self.now(), cost).await
    }

    /// [`try_check`](Self::try_check) at the caller's instant `now` (ns since the epoch).
    pub async fn try_check_at(
        &self,
        user: &[u8],
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, Error> {
        let key = self.redis_key(user)?;
        self.raw(&key, Now::Caller(now), cost).await
    }

    /// Decide on `cost` units for `user`: the deny cache, then Redis through the circuit
    /// breaker and the per-call timeout; on a Redis fault, the fault policy (marked in
    /// [`Outcome::source`]). Errors only for bad input (key too long, time out of range).
    pub async fn check(&self, user: &[u8], cost: u64) -> Result<Outcome, Error> {
        let now = self.now();
        self.decide(user, now, cost).await
    }

    /// [`check`](Self::check) at the caller's instant `now` (ns since the Unix epoch).
    pub async fn check_at(&self, user: &[u8], now: Nanos, cost: u64) -> Result<Outcome, Error> {
        self.decide(user, Now::Caller(now), cost).await
    }

    pub(crate) fn now(&self) -> Now {
        match self.store.config.time {
            TimeSource::Redis => Now::Redis,
            TimeSource::Caller => Now::Caller(WallClock.now()),
        }
    }

    async fn raw(&self, key: &[u8], now: Now, cost: u64) -> Result<Decision, Error> {
        let reply = self
            .store
            .decide_one(&self.call, key, now, cost, self.pad_ms)
            .await?;
        self.call.decision(&reply, cost)
    }

    async fn decide(&self, user: &[u8], now: Now, cost: u64) -> Result<Outcome, Error> {
        let key = self.redis_key(user)?;
        if let Now::Caller(t) = now
            && t.0 >= 1 << 63
        {
            return Err(Error::TimeOutOfRange { now_ns: t.0 });
        }
        let stamp = match now {
            Now::Redis => Stamp::Local(Instant::now()),
            Now::Caller(t) => Stamp::Caller(t),
        };
        if let Some(d) = self.cache.lookup(&key, stamp, cost) {
            bump(&self.store.counters.deny_cache_hits);
            return Ok(Outcome {
                decision: d,
                source: Source::DenyCache,
            });
        }
        let breaker = &self.store.breaker;
        match breaker.gate() {
            Gate::Reject(wait) => {
                bump(&self.store.counters.circuit_rejected);
                return Ok(self.fault(Fault::CircuitOpen, wait));
            }
            Gate::Pass | Gate::Probe => {}
        }
        match self.raw(&key, now, cost).await {
            Ok(d) => {
                breaker.success();
                if !d.allowed {
                    self.cache.insert(&key, stamp, cost, &d);
                }
                Ok(Outcome {
                    decision: d,
                    source: Source::Redis,
                })
            }
            Err(e) if e.is_fault() => {
                breaker.failure();
                let fault = match e {
                    Error::Timeout { .. } => Fault::Timeout,
                    other => Fault::Error(other.to_string()),
                };
                Ok(self.fault(fault, self.store.config.breaker_open_for))
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn fault(&self, fault: Fault, wait: Duration) -> Outcome {
        bump(&self.store.counters.degraded);
        Outcome {
            decision: self.fault_decision(wait),
            source: Source::Fault(fault),
        }
    }

    /// The fault policy's decision, not counted (see [`fault`](Self::fault)).
    pub(crate) fn fault_decision(&self, wait: Duration) -> Decision {
        let limit = self.call.limit();
        match self.store.config.policy {
            FaultPolicy::FailOpen => Decision::allow(limit, 0, Duration::ZERO),
            FaultPolicy::FailClosed => Decision::deny(limit, 0, wait, wait),
        }
    }
}
