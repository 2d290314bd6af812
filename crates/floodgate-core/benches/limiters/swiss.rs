//! A prototype for measurement only (`-- --swiss`): floodgate's keyed check as it was
//! before its own table, on hashbrown's SwissTable (control bytes in one array, entries in
//! another: two cache lines for a key not in cache). 64 shards, each a spin lock around a
//! `HashTable<(u64, GcraState)>`, foldhash, GCRA's check; no cap and no eviction, so it is
//! only the measure, in the same run, of what the one-line chunks of `KeyedLimiter`'s
//! table change.

use std::hash::BuildHasher;

use floodgate_core::algorithms::{Gcra, GcraState};
use floodgate_core::{Algorithm, Nanos};
use hashbrown::HashTable;
use spin::mutex::SpinMutex;

#[repr(align(128))]
struct Padded<T>(T);

/// One shard: keys and their states behind a spin lock.
type Shard = Padded<SpinMutex<HashTable<(u64, GcraState)>>>;

pub struct SwissKeyed {
    shards: Box<[Shard]>,
    hasher: foldhash::fast::RandomState,
    gcra: Gcra,
    mask: usize,
}

impl SwissKeyed {
    /// `shards` must be a power of two.
    pub fn new(gcra: Gcra, shards: usize) -> SwissKeyed {
        SwissKeyed {
            shards: (0..shards)
                .map(|_| Padded(SpinMutex::new(HashTable::new())))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
            gcra,
            mask: shards - 1,
        }
    }

    #[inline(always)]
    pub fn check(&self, key: u64, now: Nanos) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut table = self.shards[(hash >> 40) as usize & self.mask].0.lock();
        if let Some((_, state)) = table.find_mut(hash, |(k, _)| *k == key) {
            return self.gcra.check(state, now, 1).allowed;
        }
        self.insert(&mut table, hash, key, now)
    }

    #[inline(never)]
    fn insert(
        &self,
        table: &mut HashTable<(u64, GcraState)>,
        hash: u64,
        key: u64,
        now: Nanos,
    ) -> bool {
        let mut state = GcraState::default();
        let allowed = self.gcra.check(&mut state, now, 1).allowed;
        if allowed {
            let hasher = &self.hasher;
            table.insert_unique(hash, (key, state), |(k, _)| hasher.hash_one(k));
        }
        allowed
    }
}
