//! A prototype for measurement only (`-- --cas`): governor's design with floodgate's
//! parts. Shards of a read-write lock around a table of one `AtomicU64` (the GCRA TAT) per
//! key; a check takes the shard's read lock and moves the TAT with a compare-and-swap, the
//! write lock only to insert a new key. No cap and no eviction (as governor), so it is not
//! a replacement for `KeyedLimiter`, only the measure of what a lock-free entry would give.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_core::algorithms::{Gcra, GcraState};
use floodgate_core::{Algorithm, Nanos};
use hashbrown::HashTable;
use parking_lot::RwLock;

#[repr(align(128))]
struct Padded<T>(T);

/// One shard: keys and their TATs behind a read-write lock.
type Shard = Padded<RwLock<HashTable<(u64, AtomicU64)>>>;

pub struct CasKeyed {
    shards: Box<[Shard]>,
    hasher: foldhash::fast::RandomState,
    gcra: Gcra,
    mask: usize,
}

impl CasKeyed {
    /// `shards` must be a power of two.
    pub fn new(gcra: Gcra, shards: usize) -> CasKeyed {
        CasKeyed {
            shards: (0..shards)
                .map(|_| Padded(RwLock::new(HashTable::new())))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
            gcra,
            mask: shards - 1,
        }
    }

    #[inline]
    pub fn check(&self, key: u64, now: Nanos) -> bool {
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[(hash >> 40) as usize & self.mask].0;
        if let Some((_, tat)) = shard.read().find(hash, |(k, _)| *k == key) {
            return self.cas(tat, now);
        }
        let mut table = shard.write();
        let hasher = &self.hasher;
        let entry = table
            .entry(hash, |(k, _)| *k == key, |(k, _)| hasher.hash_one(k))
            .or_insert_with(|| (key, AtomicU64::new(0)));
        self.cas(&entry.get().1, now)
    }

    #[inline(always)]
    fn cas(&self, tat: &AtomicU64, now: Nanos) -> bool {
        let mut current = tat.load(Ordering::Acquire);
        loop {
            let state = GcraState {
                tat: Nanos(current),
            };
            let (decision, pending) = self.gcra.decide(&state, now, 1);
            let Some(next) = pending else {
                return decision.allowed;
            };
            match tat.compare_exchange_weak(current, next.0, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return decision.allowed,
                Err(actual) => current = actual,
            }
        }
    }
}
