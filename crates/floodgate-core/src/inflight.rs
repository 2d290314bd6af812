//! In-flight (concurrency) limits: at most `N` requests of one key running at once, held
//! as **leases** that expire.
//!
//! A rate limit counts requests that *start*; an in-flight limit counts requests that
//! are *running*. A request takes a lease when it starts ([`KeyedInFlight::acquire`]) and
//! gives it back when it ends ([`KeyedInFlight::release`]). Every lease carries an
//! expiry (`now + ttl`), so a holder that dies without releasing cannot leak capacity: at
//! its expiry the place is free again. A request that runs longer than its TTL keeps its
//! place with [`KeyedInFlight::renew`].
//!
//! # Invariants
//! * A key never has more than `limit` **live** leases (expiry after `now`); a lease
//!   whose expiry is at or before `now` holds no place, whatever happens to it later.
//! * [`release`](KeyedInFlight::release) frees at most one place per lease, ever:
//!   releasing twice, releasing an expired lease or an id never issued returns `false`
//!   and changes nothing that counts.
//! * An expired lease cannot be renewed (its place may already be someone else's).
//!
//! # The decision
//! [`acquire`](KeyedInFlight::acquire) answers with the same [`Decision`] every rate
//! limit answers, its fields meaning the same:
//!
//! * `limit`: `N`;
//! * `remaining`: `N` minus the live leases after this call;
//! * `retry_after` (denied only): time until the earliest live lease expires. It is an
//!   upper bound: a holder that releases earlier frees its place earlier, which no one
//!   can know in advance;
//! * `reset_after`: time until every current lease has expired (the key as if never
//!   seen), zero when none is held.
//!
//! Time is passed in ([`Nanos`]); nothing here reads a clock.
//!
//! # The key cap
//! At most `max_keys` keys are held. A new key arriving at a full shard first drops
//! every key without a live lease (this loses nothing); if that frees less than 1/16 of
//! the shard, the keys whose last lease expires soonest are evicted (counted in
//! [`InFlightStats::evicted`]): their leases are forgotten, so that key may admit up to
//! `N` more before they would have expired. This is the same trade as
//! [`KeyedLimiter`](crate::KeyedLimiter)'s: memory stays bounded under key rotation.
//!
//! ```
//! use floodgate_core::inflight::{KeyedInFlight, LeaseTtl};
//! use floodgate_core::Nanos;
//! use std::time::Duration;
//!
//! let gpu = KeyedInFlight::new(2, 10_000)?;
//! let ttl = LeaseTtl::new(Duration::from_secs(30))?;
//! let now = Nanos::from_secs(100);
//! let a = gpu.acquire("model-x", now, ttl).unwrap();
//! let b = gpu.acquire("model-x", now, ttl).unwrap();
//! assert_eq!(b.decision.remaining, 0);
//! let denied = gpu.acquire("model-x", now, ttl).unwrap_err();
//! assert_eq!(denied.retry_after, Some(Duration::from_secs(30)));
//! assert!(gpu.release("model-x", a.id, now));
//! assert!(!gpu.release("model-x", a.id, now)); // twice: a no-op
//! assert!(gpu.acquire("model-x", now, ttl).is_ok());
//! // a holder that never releases: its place is free when its lease expires
//! let later = Nanos::from_secs(131);
//! assert_eq!(gpu.in_flight("model-x", later), 0);
//! # let _ = b;
//! # Ok::<(), floodgate_core::ConfigError>(())
//! ```

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::decision::Decision;
use crate::error::ConfigError;
use crate::keyed::{DEFAULT_SHARDS, MIN_KEYS_PER_SHARD, Padded};
use crate::time::Nanos;

/// The longest lease TTL accepted: one day. Longer requests renew their lease.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(86_400);

/// The most leases one key may hold at once (`N`): 1 000 000. Each live lease is one
/// entry in memory (here) or in Redis (a sorted-set member).
pub const MAX_IN_FLIGHT: u64 = 1_000_000;

/// A lease's identity within its table. Ids are never reused by a table, so a stale id
/// can never release someone else's lease. Every store issues ids below 2^63 (so they
/// are also non-negative `i64`s, as the RESP door replies them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub u64);

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A validated lease time-to-live: at least 1 µs (the resolution of Redis `TIME`, so
/// that every store keeps the same lease), at most [`MAX_LEASE_TTL`], in whole
/// microseconds (a TTL is rounded up to the next microsecond).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseTtl(Duration);

impl LeaseTtl {
    /// `ttl`, rounded up to whole microseconds; zero or above [`MAX_LEASE_TTL`] is an
    /// error naming the value.
    pub fn new(ttl: Duration) -> Result<LeaseTtl, ConfigError> {
        if ttl.is_zero() {
            return Err(ConfigError::Zero { what: "lease ttl" });
        }
        if ttl > MAX_LEASE_TTL {
            return Err(ConfigError::Overflow {
                what: "lease ttl",
                detail: format!(
                    "{ttl:?} is longer than the maximum of {MAX_LEASE_TTL:?} (renew long leases instead)"
                ),
            });
        }
        let micros = ttl.as_nanos().div_ceil(1_000) as u64;
        Ok(LeaseTtl(Duration::from_micros(micros)))
    }

    /// The TTL.
    pub fn get(self) -> Duration {
        self.0
    }

    /// The TTL in whole microseconds.
    pub fn as_micros(self) -> u64 {
        self.0.as_micros() as u64
    }
}

/// A validated in-flight limit `N`: 1 to [`MAX_IN_FLIGHT`].
pub fn check_limit(limit: u64) -> Result<u64, ConfigError> {
    if limit == 0 {
        return Err(ConfigError::Zero {
            what: "max_in_flight",
        });
    }
    if limit > MAX_IN_FLIGHT {
        return Err(ConfigError::Overflow {
            what: "max_in_flight",
            detail: format!("{limit} is above the maximum of {MAX_IN_FLIGHT}"),
        });
    }
    Ok(limit)
}

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The id to renew and release it by.
    pub id: LeaseId,
    /// When it expires unless renewed.
    pub expires: Nanos,
    /// The admitting decision (limit, remaining after this lease, reset).
    pub decision: Decision,
}

/// One key's live leases: `(id, expiry)`.
type Held = Vec<(LeaseId, Nanos)>;

/// One shard's keys.
type Table<K> = HashMap<K, Held>;

/// The decision for a key holding `held` (all live at `now`) and the limit `limit`:
/// admitted (after the new lease, already in `held`) or denied.
pub fn decide(limit: u64, held: &[(LeaseId, Nanos)], now: Nanos, allowed: bool) -> Decision {
    let n = held.len() as u64;
    let until = |t: Nanos| Duration::from_nanos(t.0.saturating_sub(now.0));
    let latest = held.iter().map(|h| h.1).max().unwrap_or(now);
    if allowed {
        Decision::allow(limit, limit.saturating_sub(n), until(latest))
    } else {
        let earliest = held.iter().map(|h| h.1).min().unwrap_or(now);
        Decision::deny(
            limit,
            limit.saturating_sub(n),
            until(earliest),
            until(latest),
        )
    }
}

/// Counters of a [`KeyedInFlight`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlightStats {
    /// Keys held (with or without live leases).
    pub keys: u64,
    /// Keys evicted while holding live leases, to respect the key cap.
    pub evicted: u64,
}

/// Per-key in-flight limits of `N` leases, bounded to `max_keys` keys (see the module
/// docs). Shared by many threads; a call locks one shard.
pub struct KeyedInFlight<K> {
    limit: u64,
    shards: Box<[Padded<Mutex<Table<K>>>]>,
    hasher: foldhash::fast::RandomState,
    mask: usize,
    shard_cap: usize,
    next_id: AtomicU64,
    evicted: AtomicU64,
}

impl<K> std::fmt::Debug for KeyedInFlight<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedInFlight")
            .field("limit", &self.limit)
            .field("max_keys", &(self.shard_cap * self.shards.len()))
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq> KeyedInFlight<K> {
    /// At most `limit` leases per key, at most `max_keys` keys. `limit` 0 or above
    /// [`MAX_IN_FLIGHT`] and `max_keys` 0 are errors.
    pub fn new(limit: u64, max_keys: usize) -> Result<Self, ConfigError> {
        let limit = check_limit(limit)?;
        if max_keys == 0 {
            return Err(ConfigError::Zero { what: "max_keys" });
        }
        let shards = DEFAULT_SHARDS.clamp(1, (max_keys / MIN_KEYS_PER_SHARD).max(1));
        let shards = 1usize << (usize::BITS - 1 - shards.leading_zeros());
        Ok(KeyedInFlight {
            limit,
            shards: (0..shards)
                .map(|_| Padded(Mutex::new(HashMap::new())))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
            mask: shards - 1,
            shard_cap: max_keys / shards,
            next_id: AtomicU64::new(1),
            evicted: AtomicU64::new(0),
        })
    }

    /// `N`.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The most keys held.
    pub fn max_keys(&self) -> usize {
        self.shard_cap * self.shards.len()
    }

    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> &Mutex<Table<K>> {
        let h = self.hasher.hash_one(key);
        &self.shards[(h >> 40) as usize & self.mask].0
    }

    /// Take a lease on `key` at `now` for `ttl`, or the denial when `N` live leases are
    /// held (nothing is taken then).
    pub fn acquire<Q>(&self, key: &Q, now: Nanos, ttl: LeaseTtl) -> Result<Lease, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire_with_limit(key, now, ttl, self.limit)
    }

    /// [`acquire`](Self::acquire) against `limit` instead of the table's own (a caller
    /// that passes `N` with every call, as `FG.ACQUIRE` does; validate it with
    /// [`check_limit`]). The leases are shared with calls under other limits: a call
    /// counts every live lease of the key.
    pub fn acquire_with_limit<Q>(
        &self,
        key: &Q,
        now: Nanos,
        ttl: LeaseTtl,
        limit: u64,
    ) -> Result<Lease, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut map = self.shard(key).lock();
        if !map.contains_key(key) {
            if map.len() >= self.shard_cap {
                self.make_room(&mut map, now);
            }
            map.insert(key.to_owned(), Vec::new());
        }
        let held = map.get_mut(key).expect("inserted above");
        held.retain(|h| h.1 > now);
        if held.len() as u64 >= limit {
            return Err(decide(limit, held, now, false));
        }
        let id = LeaseId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let expires = now.saturating_add(ttl.get());
        held.push((id, expires));
        Ok(Lease {
            id,
            expires,
            decision: decide(limit, held, now, true),
        })
    }

    /// What [`acquire`](Self::acquire) would answer at `now`, taking nothing (for an
    /// admission, `remaining` counts the lease it would take).
    pub fn peek<Q>(&self, key: &Q, now: Nanos) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.shard(key).lock();
        let held: Held = map
            .get(key)
            .map(|h| h.iter().copied().filter(|h| h.1 > now).collect())
            .unwrap_or_default();
        if (held.len() as u64) < self.limit {
            let mut d = decide(self.limit, &held, now, true);
            d.remaining = d.remaining.saturating_sub(1);
            d
        } else {
            decide(self.limit, &held, now, false)
        }
    }

    /// Extend a live lease to expire at `now + ttl` (earlier or later than before).
    /// `false`, changing nothing, when the lease is unknown, released or expired.
    pub fn renew<Q>(&self, key: &Q, id: LeaseId, now: Nanos, ttl: LeaseTtl) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with_lease(key, id, |held, i| {
            let live = held[i].1 > now;
            if live {
                held[i].1 = now.saturating_add(ttl.get());
            }
            live
        })
    }

    /// Give a lease back. `true` when it was live and its place is now free; `false`,
    /// freeing nothing, when it was already released, expired (its place was freed at
    /// expiry) or never issued.
    pub fn release<Q>(&self, key: &Q, id: LeaseId, now: Nanos) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with_lease(key, id, |held, i| held.swap_remove(i).1 > now)
    }

    /// `f(key's leases, index of lease id among them)` with the shard locked (a key left
    /// without leases is dropped after); `false` when the key holds no lease `id`.
    fn with_lease<Q>(&self, key: &Q, id: LeaseId, f: impl FnOnce(&mut Held, usize) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut map = self.shard(key).lock();
        let Some(held) = map.get_mut(key) else {
            return false;
        };
        let Some(i) = held.iter().position(|h| h.0 == id) else {
            return false;
        };
        let out = f(held, i);
        if held.is_empty() {
            map.remove(key);
        }
        out
    }

    /// Live leases of `key` at `now`.
    pub fn in_flight<Q>(&self, key: &Q, now: Nanos) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.shard(key).lock();
        map.get(key)
            .map_or(0, |h| h.iter().filter(|h| h.1 > now).count() as u64)
    }

    /// Live leases over every key at `now` (walks every shard: for metrics, not for the
    /// request path).
    pub fn held(&self, now: Nanos) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                s.0.lock()
                    .values()
                    .map(|h| h.iter().filter(|h| h.1 > now).count() as u64)
                    .sum::<u64>()
            })
            .sum()
    }

    /// Keys held and eviction count.
    pub fn stats(&self) -> InFlightStats {
        InFlightStats {
            keys: self.shards.iter().map(|s| s.0.lock().len() as u64).sum(),
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }

    fn make_room(&self, map: &mut Table<K>, now: Nanos) {
        map.retain(|_, h| h.iter().any(|h| h.1 > now));
        let target = (self.shard_cap / 16).max(1);
        let free = self.shard_cap.saturating_sub(map.len());
        if free >= target || map.is_empty() {
            return;
        }
        let mut n = (target - free).min(map.len());
        let last = |h: &Held| h.iter().map(|h| h.1).max().unwrap_or(Nanos::ZERO);
        let mut times: Vec<Nanos> = map.values().map(last).collect();
        let threshold = *times.select_nth_unstable(n - 1).1;
        let evicted = n as u64;
        map.retain(|_, h| {
            if n > 0 && last(h) <= threshold {
                n -= 1;
                false
            } else {
                true
            }
        });
        self.evicted.fetch_add(evicted, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttl(ms: u64) -> LeaseTtl {
        LeaseTtl::new(Duration::from_millis(ms)).unwrap()
    }

    #[test]
    fn bad_parameters_are_errors_naming_them() {
        let e = KeyedInFlight::<u64>::new(0, 10).unwrap_err().to_string();
        assert!(e.contains("max_in_flight"), "{e}");
        assert!(KeyedInFlight::<u64>::new(MAX_IN_FLIGHT + 1, 10).is_err());
        assert!(KeyedInFlight::<u64>::new(1, 0).is_err());
        let e = LeaseTtl::new(Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("lease ttl"), "{e}");
        let e = LeaseTtl::new(Duration::from_secs(86_401))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lease ttl") && e.contains("renew"), "{e}");
        assert_eq!(
            LeaseTtl::new(Duration::from_nanos(1)).unwrap().get(),
            Duration::from_micros(1)
        );
    }

    #[test]
    fn decision_fields() {
        let t = KeyedInFlight::new(2, 100).unwrap();
        let now = Nanos::from_secs(10);
        let a = t.acquire("k", now, ttl(1000)).unwrap();
        assert_eq!(a.decision, Decision::allow(2, 1, Duration::from_secs(1)));
        let later = Nanos(now.0 + 200_000_000);
        let b = t.acquire("k", later, ttl(1000)).unwrap();
        assert_eq!(b.decision.remaining, 0);
        assert_eq!(b.decision.reset_after, Duration::from_secs(1));
        let d = t.acquire("k", later, ttl(1000)).unwrap_err();
        assert_eq!(
            d,
            Decision::deny(
                2,
                0,
                Duration::from_millis(800),
                Duration::from_millis(1000)
            )
        );
        assert!(!t.peek("k", later).allowed);
        assert!(t.peek("other", later).allowed);
        assert_eq!(t.peek("other", later).remaining, 1);
        // the first lease expires: one place
        let t2 = Nanos(now.0 + 1_000_000_000);
        assert_eq!(t.in_flight("k", t2), 1);
        assert!(!t.release("k", a.id, t2), "expired: frees nothing");
        assert!(t.renew("k", b.id, t2, ttl(5000)));
        assert!(!t.renew("k", a.id, t2, ttl(5000)));
        assert!(t.release("k", b.id, t2));
        assert!(!t.release("k", b.id, t2));
        assert!(!t.release("k", LeaseId(9999), t2));
        assert_eq!(t.stats().keys, 0);
    }

    #[test]
    fn the_key_cap_holds_and_idle_keys_go_first() {
        let t: KeyedInFlight<u64> = KeyedInFlight::new(1, 64).unwrap();
        for k in 0..64 {
            t.acquire(&k, Nanos::ZERO, ttl(1000)).unwrap();
        }
        for k in 64..1000 {
            t.acquire(&k, Nanos::from_secs(10), ttl(1000)).unwrap();
            assert!(t.stats().keys <= 64);
        }
        assert!(t.stats().evicted > 0);
    }
}
