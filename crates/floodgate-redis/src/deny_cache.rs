//! The local cache of denials.
//!
//! When Redis denies a request of cost `c` on a key with `retry_after = r`, every request
//! of cost `>= c` on that key is denied until `r` has passed: consumption by others only
//! pushes that instant later, never earlier. The cache remembers `(c, sent + r)`, where
//! `sent` is when the request was *sent* (before the round trip, so the local deadline is
//! never later than Redis's), and denies such requests locally until then. It only ever
//! denies: every request it does not answer goes to Redis. Bounded: at most `max_keys`
//! entries; when full, expired entries are dropped and new denials are not cached.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use floodgate_core::{Decision, Nanos};
use parking_lot::Mutex;

/// An instant on the clock the decision was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// Local monotonic time (Redis-time mode).
    Local(Instant),
    /// The caller's time (caller-time mode).
    Caller(Nanos),
}

impl Stamp {
    fn plus(self, d: Duration) -> Stamp {
        match self {
            Stamp::Local(i) => Stamp::Local(i + d),
            Stamp::Caller(n) => Stamp::Caller(n.saturating_add(d)),
        }
    }

    /// `self - earlier`, if both are on the same clock.
    fn since(self, earlier: Stamp) -> Option<Duration> {
        match (self, earlier) {
            (Stamp::Local(a), Stamp::Local(b)) => Some(a.saturating_duration_since(b)),
            (Stamp::Caller(a), Stamp::Caller(b)) => Some(a.saturating_since(b)),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Entry {
    at: Stamp,
    until: Stamp,
    min_cost: u64,
    decision: Decision,
}

const SHARDS: usize = 16;

type Shard = Mutex<HashMap<Vec<u8>, Entry>>;

#[derive(Debug)]
pub(crate) struct DenyCache {
    shards: Box<[Shard]>,
    per_shard: usize,
    hasher: RandomState,
}

impl DenyCache {
    pub(crate) fn new(max_keys: usize) -> DenyCache {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: max_keys.div_ceil(SHARDS),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// A local denial for `cost` at `now`, if Redis has already denied as much until later.
    pub(crate) fn lookup(&self, key: &[u8], now: Stamp, cost: u64) -> Option<Decision> {
        if self.per_shard == 0 {
            return None;
        }
        let mut shard = self.shard(key).lock();
        let e = shard.get(key)?;
        let Some(left) = e.until.since(now).filter(|d| !d.is_zero()) else {
            shard.remove(key);
            return None;
        };
        if cost < e.min_cost {
            return None;
        }
        let elapsed = now.since(e.at).unwrap_or_default();
        let mut d = e.decision;
        d.retry_after = Some(left);
        d.reset_after = d.reset_after.saturating_sub(elapsed).max(left);
        Some(d)
    }

    /// Remember a denial Redis made for a request of `cost` sent at `at`.
    pub(crate) fn insert(&self, key: &[u8], at: Stamp, cost: u64, decision: &Decision) {
        let Some(retry) = decision.retry_after.filter(|r| !r.is_zero()) else {
            return;
        };
        if self.per_shard == 0 || decision.allowed {
            return;
        }
        let until = at.plus(retry);
        let mut shard = self.shard(key).lock();
        if shard.len() >= self.per_shard && !shard.contains_key(key) {
            shard.retain(|_, e| e.until.since(at).is_some_and(|d| !d.is_zero()));
            if shard.len() >= self.per_shard {
                return;
            }
        }
        shard.insert(
            key.to_vec(),
            Entry {
                at,
                until,
                min_cost: cost,
                decision: *decision,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denies_only_as_much_and_as_long_as_redis_did() {
        let c = DenyCache::new(100);
        let t0 = Nanos::from_secs(10);
        let d = Decision::deny(10, 0, Duration::from_secs(2), Duration::from_secs(5));
        c.insert(b"k", Stamp::Caller(t0), 3, &d);
        assert!(
            c.lookup(b"k", Stamp::Caller(t0), 2).is_none(),
            "smaller cost goes to Redis"
        );
        let hit = c
            .lookup(b"k", Stamp::Caller(Nanos::from_secs(11)), 3)
            .unwrap();
        assert_eq!(hit.retry_after, Some(Duration::from_secs(1)));
        assert_eq!(hit.reset_after, Duration::from_secs(4));
        assert!(
            c.lookup(b"k", Stamp::Caller(Nanos::from_secs(12)), 3)
                .is_none()
        );
        assert!(c.lookup(b"other", Stamp::Caller(t0), 3).is_none());
        // a full cache stops caching rather than growing
        let small = DenyCache::new(1);
        for i in 0..100u32 {
            small.insert(&i.to_be_bytes(), Stamp::Caller(t0), 1, &d);
        }
        let held: usize = small.shards.iter().map(|s| s.lock().len()).sum();
        assert!(held <= SHARDS);
    }
}
