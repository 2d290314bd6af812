//! [`CallerLimits`]: limits whose parameters the caller passes with each call, as
//! redis-cell's `CL.THROTTLE` passes its rate and `FG.ACQUIRE` its number of places,
//! beside the [`DecisionStore`](crate::DecisionStore), whose policies are configured.
//!
//! Two kinds, kept in process (capped tables) or on Redis (shared with every process on
//! it):
//!
//! * a throttle ([`CallerLimits::throttle`]): GCRA with redis-cell's arguments and its
//!   five-integer answer;
//! * in-flight leases ([`CallerLimits::acquire`], [`renew`](CallerLimits::renew),
//!   [`release`](CallerLimits::release)): at most `N` live leases per key, each expiring
//!   after its TTL; a release frees at most one place, and releasing twice, an expired
//!   lease or an unknown id answers `false` and changes nothing
//!   ([`floodgate_core::inflight`]).
//!
//! Errors are [`StoreError`]s: a Redis fault is transient (the caller's fault policy
//! applies), arguments the store cannot compute are a refusal.

use std::sync::Arc;

use floodgate_core::algorithms::Gcra;
use floodgate_core::cell::ThrottleArgs;
use floodgate_core::inflight::{
    KeyedInFlight, Lease, LeaseId, LeaseTtl, MAX_IN_FLIGHT, check_limit,
};
use floodgate_core::{Clock, ConfigError, Decision, KeyedLimiter, WallClock};
use floodgate_redis::{RedisInFlight, RedisStore};

use crate::StoreError;

/// Where caller-chosen limits are kept.
#[derive(Debug)]
pub enum CallerLimits {
    /// In process: each table at most `max_keys` keys (idle keys go first).
    Memory {
        /// The throttle's TAT per key.
        cells: KeyedLimiter<Vec<u8>, Gcra>,
        /// The leases per key.
        leases: KeyedInFlight<Vec<u8>>,
    },
    /// On Redis: the throttle by the GCRA script (redis-cell's answers), leases under
    /// `PREFIX{TAG}inflight:KEY`.
    Redis(Arc<RedisStore>),
}

impl CallerLimits {
    /// In process, at most `max_keys` keys (at least 1) in each table.
    pub fn memory(max_keys: usize) -> Result<CallerLimits, ConfigError> {
        // The table's own algorithm never decides (every call brings its own); GCRA's
        // eviction order (the TAT) does not depend on parameters.
        Ok(CallerLimits::Memory {
            cells: KeyedLimiter::new(Gcra::from_cell(0, 1, 1)?, max_keys)?,
            leases: KeyedInFlight::new(MAX_IN_FLIGHT, max_keys)?,
        })
    }

    /// On `store`'s Redis.
    pub fn redis(store: Arc<RedisStore>) -> CallerLimits {
        CallerLimits::Redis(store)
    }

    fn name(&self) -> &'static str {
        match self {
            CallerLimits::Memory { .. } => "memory",
            CallerLimits::Redis(_) => "redis",
        }
    }

    fn error(&self, e: floodgate_redis::Error) -> StoreError {
        StoreError::new(self.name(), e.into())
    }

    /// `CL.THROTTLE key max_burst count period [quantity]` on `key`: redis-cell's five
    /// integers (limited, limit, remaining, retry after s, reset after s).
    pub async fn throttle(&self, key: &[u8], args: &ThrottleArgs) -> Result<[i64; 5], StoreError> {
        match self {
            CallerLimits::Memory { cells, .. } => {
                let gcra = args
                    .gcra()
                    .map_err(|e| StoreError::refused(self.name(), e.to_string()))?;
                let d = cells.check_with(key, &gcra, WallClock.now(), args.quantity);
                Ok(d.throttle_reply())
            }
            CallerLimits::Redis(store) => {
                store.throttle(key, args).await.map_err(|e| self.error(e))
            }
        }
    }

    /// Take a lease on `key` if fewer than `limit` (1 to [`MAX_IN_FLIGHT`]) are live: the
    /// lease, or the denial.
    pub async fn acquire(
        &self,
        key: &[u8],
        limit: u64,
        ttl: LeaseTtl,
    ) -> Result<Result<Lease, Decision>, StoreError> {
        let limit =
            check_limit(limit).map_err(|e| StoreError::refused(self.name(), e.to_string()))?;
        match self {
            CallerLimits::Memory { leases, .. } => {
                Ok(leases.acquire_with_limit(key, WallClock.now(), ttl, limit))
            }
            CallerLimits::Redis(s) => RedisInFlight::new(s.clone(), limit)
                .map_err(|e| self.error(e))?
                .acquire(key, ttl)
                .await
                .map_err(|e| self.error(e)),
        }
    }

    /// Extend a live lease to now + `ttl`; `false` when unknown, released or expired.
    pub async fn renew(&self, key: &[u8], id: LeaseId, ttl: LeaseTtl) -> Result<bool, StoreError> {
        match self {
            CallerLimits::Memory { leases, .. } => Ok(leases.renew(key, id, WallClock.now(), ttl)),
            CallerLimits::Redis(s) => self
                .redis_leases(s)?
                .renew(key, id, ttl)
                .await
                .map_err(|e| self.error(e)),
        }
    }

    /// Give a lease back; `false` (nothing freed) when released before, expired or
    /// unknown.
    pub async fn release(&self, key: &[u8], id: LeaseId) -> Result<bool, StoreError> {
        match self {
            CallerLimits::Memory { leases, .. } => Ok(leases.release(key, id, WallClock.now())),
            CallerLimits::Redis(s) => self
                .redis_leases(s)?
                .release(key, id)
                .await
                .map_err(|e| self.error(e)),
        }
    }

    /// A handle for renew and release, whose limit is not used.
    fn redis_leases(&self, s: &Arc<RedisStore>) -> Result<RedisInFlight, StoreError> {
        RedisInFlight::new(s.clone(), 1).map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn in_process_the_throttle_answers_as_redis_cell_and_leases_keep_their_limit() {
        let l = CallerLimits::memory(100).unwrap();
        let args = ThrottleArgs::parse("1", "2", "60", None).unwrap();
        let first = run(l.throttle(b"k", &args)).unwrap();
        assert_eq!(first[..3], [0, 2, 1], "{first:?}");
        run(l.throttle(b"k", &args)).unwrap();
        let third = run(l.throttle(b"k", &args)).unwrap();
        assert_eq!(third[0], 1, "limited: {third:?}");

        let ttl = LeaseTtl::new(Duration::from_secs(10)).unwrap();
        let a = run(l.acquire(b"k", 1, ttl))
            .unwrap()
            .expect("the one place");
        assert!(run(l.acquire(b"k", 1, ttl)).unwrap().is_err(), "full");
        assert!(run(l.release(b"k", a.id)).unwrap());
        assert!(!run(l.release(b"k", a.id)).unwrap(), "released twice");
        let e = run(l.acquire(b"k", 0, ttl)).unwrap_err();
        assert!(!e.is_transient(), "{e}");
    }
}
