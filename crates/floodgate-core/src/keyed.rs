//! [`KeyedLimiter`]: per-key state for any algorithm, shared by many threads, with a hard
//! cap on the number of keys and eviction built in.
//!
//! # Layout
//! Keys are hashed once (foldhash, randomly seeded per limiter, so an attacker cannot aim
//! keys at one bucket) and spread over a power-of-two number of shards, each a mutex around
//! a `hashbrown::HashTable<(K, State)>`. A decision locks exactly one shard for the
//! duration of one `check`: decisions on one key are serialised, so N threads on one key
//! admit exactly what one thread would (no overshoot), and threads on different keys
//! rarely meet. Before taking the lock, a check prefetches the key's control bytes and
//! entry slots in a large table, so that their cache misses overlap instead of following
//! one another inside the lock (`table_alloc.rs`).
//!
//! # The cap, and what eviction costs
//! Each shard holds at most `max_keys / shards` keys, so the whole limiter never holds more
//! than `max_keys` (a shard may fill a little before the others: at 1M keys over 64 shards,
//! about 1%). When a new key arrives at a full shard:
//!
//! 1. every key whose state is back at full capacity is dropped (an idle key is
//!    equivalent to an absent one, so this loses nothing: counted in
//!    [`Stats::idle_dropped`]);
//! 2. if that freed less than 1/16 of the shard, the live keys *nearest to full capacity*
//!    (earliest [`Algorithm::full_at`]) are evicted until 1/16 is free (counted in
//!    [`Stats::evicted`]).
//!
//! An evicted live key comes back as a fresh key: it gets a fresh burst of up to its
//! limit minus what it had left. Evicting the keys closest to full capacity keeps that
//! gift as small as possible, and keeps the keys that are actually being limited (a
//! heavy, steady client) in preference to one-shot keys from an attacker rotating keys.
//! The work is amortised: one pass over a shard per `shard_cap / 16` insertions.
//!
//! Memory is `O(max_keys)`: about 36 bytes per key at 1M `u64` keys with GCRA (see the
//! docs/bench-core.md), plus whatever the key type owns on the heap.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hashbrown::{HashMap, HashTable};
use parking_lot::RwLock;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::table_alloc::{Placement, TableAlloc};
use crate::time::Nanos;

/// Default number of shards.
pub const DEFAULT_SHARDS: usize = 64;

/// Fewer shards are used when `max_keys` is small, so each holds at least this many keys.
pub const MIN_KEYS_PER_SHARD: usize = 256;

/// A mutex on its own cache lines, so neighbouring shards do not false-share.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

pub(crate) struct Shard<K, S, A> {
    /// The default algorithm, copied into every shard so that reading it costs nothing
    /// beyond the shard lock already held ([`KeyedLimiter::set_algorithm`] updates all).
    pub(crate) alg: Arc<A>,
    pub(crate) table: HashTable<(K, S), TableAlloc<(K, S)>>,
}

pub(crate) type PaddedShard<K, S, A> = Padded<ShardLock<Shard<K, S, A>>>;

/// A shard's lock: a spin lock whose release is a plain store (one atomic instruction per
/// decision instead of two, the dominant cost of an uncontended check). Critical sections
/// are a hash probe and a few arithmetic operations; a waiter spins briefly, then yields
/// its time slice every 64 attempts so a preempted holder is not starved of a core.
/// [`Limiter`](crate::Limiter) uses it too. Against parking_lot's mutex on the project's
/// 2-core VM it gave 2.5x-2.7x governor's keyed throughput where the mutex gave 1.8x-1.9x,
/// on one thread and on two (docs/bench-core.md).
pub(crate) type ShardLock<T> = spin::mutex::SpinMutex<T, SpinThenYield>;

/// Relax strategy of [`ShardLock`]: `spin_loop` hints, and a `yield_now` every 64th.
pub(crate) struct SpinThenYield;

impl spin::RelaxStrategy for SpinThenYield {
    fn relax() {
        thread_local!(static SPINS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });
        SPINS.with(|spins| {
            let n = spins.get().wrapping_add(1);
            spins.set(n);
            if n.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        });
    }
}

/// Counters of a [`KeyedLimiter`]; all monotonic since creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keys currently held.
    pub keys: u64,
    /// Keys dropped because they were back at full capacity (this loses nothing).
    pub idle_dropped: u64,
    /// Live keys evicted to respect the cap (each may get a fresh burst later).
    pub evicted: u64,
}

/// Per-key limits of one algorithm, bounded to `max_keys` keys.
///
/// ```
/// use floodgate_core::algorithms::Gcra;
/// use floodgate_core::{KeyedLimiter, Nanos, Rate};
///
/// let limiter = KeyedLimiter::new(Gcra::new(Rate::per_second(10)?, 3)?, 100_000)?;
/// let now = Nanos::from_secs(1);
/// assert!(limiter.check("alice", now, 1).allowed);
/// assert!(limiter.check("alice", now, 2).allowed);
/// assert!(!limiter.check("alice", now, 1).allowed); // alice used her burst of 3
/// assert!(limiter.check("bob", now, 1).allowed);    // bob has his own
/// assert!(limiter.peek("bob", now, 2).allowed);     // peek consumes nothing
/// assert_eq!(limiter.check("bob", now, 2).remaining, 0);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
pub struct KeyedLimiter<K, A: Algorithm> {
    pub(crate) shards: Box<[PaddedShard<K, A::State, A>]>,
    /// Where each shard's table is, read without the lock to prefetch a key's slot.
    placements: Arc<[Placement]>,
    hasher: foldhash::fast::RandomState,
    shard_shift_mask: usize,
    shard_cap: usize,
    overrides: RwLock<HashMap<K, Arc<A>>>,
    has_overrides: AtomicBool,
    idle_dropped: AtomicU64,
    evicted: AtomicU64,
}

impl<K, A> KeyedLimiter<K, A>
where
    K: Hash + Eq,
    A: Algorithm,
{
    /// A limiter applying `algorithm` to every key, holding at most `max_keys` keys.
    pub fn new(algorithm: A, max_keys: usize) -> Result<Self, ConfigError> {
        Self::with_shards(algorithm, max_keys, DEFAULT_SHARDS)
    }

    /// As [`new`](Self::new) with a chosen shard count (rounded down to a power of two, and
    /// lowered so that every shard holds at least [`MIN_KEYS_PER_SHARD`] keys).
    pub fn with_shards(algorithm: A, max_keys: usize, shards: usize) -> Result<Self, ConfigError> {
        if max_keys == 0 {
            return Err(ConfigError::Zero { what: "max_keys" });
        }
        // Every shard holds at least MIN_KEYS_PER_SHARD keys (or all of them), so that the
        // uneven spread of keys over shards cannot evict long before `max_keys`.
        let shards = shards.clamp(1, (max_keys / MIN_KEYS_PER_SHARD).max(1));
        let shards = 1usize << (usize::BITS - 1 - shards.leading_zeros());
        let shard_cap = max_keys / shards;
        let algorithm = Arc::new(algorithm);
        let placements: Arc<[Placement]> = (0..shards).map(|_| Placement::default()).collect();
        Ok(KeyedLimiter {
            shards: (0..shards)
                .map(|i| {
                    Padded(ShardLock::new(Shard {
                        alg: algorithm.clone(),
                        table: HashTable::new_in(TableAlloc::new(placements.clone(), i)),
                    }))
                })
                .collect(),
            placements,
            hasher: foldhash::fast::RandomState::default(),
            shard_shift_mask: shards - 1,
            shard_cap,
            overrides: RwLock::new(HashMap::new()),
            has_overrides: AtomicBool::new(false),
            idle_dropped: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    /// The most keys this limiter will hold.
    pub fn max_keys(&self) -> usize {
        self.shard_cap * self.shards.len()
    }

    /// Decide on a request of `cost` for `key` at `now`; consume when admitted.
    ///
    /// Inlined into the caller: a key already held costs a hash, a prefetch of its slot
    /// (large tables only), one shard lock, one probe and the algorithm's arithmetic; a
    /// new key goes through an out-of-line path.
    #[inline(always)]
    pub fn check<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let index = self.shard_index(hash);
        self.placements[index].prefetch::<(K, A::State)>(hash);
        let own = self.own_algorithm(key);
        let mut guard = self.shards[index].0.lock();
        let shard = &mut *guard;
        if let Some((_, state)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            let alg: &A = own.as_deref().unwrap_or(&shard.alg);
            return alg.check(state, now, cost);
        }
        self.check_new(shard, own.as_deref(), hash, key, now, cost)
    }

    /// [`check`](Self::check) for a key not held: stored only when admitted. Inlined (so
    /// that the decision stays in registers); the insertion is out of line.
    #[inline(always)]
    fn check_new<Q>(
        &self,
        shard: &mut Shard<K, A::State, A>,
        own: Option<&A>,
        hash: u64,
        key: &Q,
        now: Nanos,
        cost: u64,
    ) -> Decision
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let alg: &A = own.unwrap_or(&shard.alg);
        let mut state = A::State::default();
        let (decision, pending) = alg.decide(&state, now, cost);
        if let Some(p) = pending {
            alg.apply(&mut state, p);
            self.insert(shard, hash, key.to_owned(), state, now);
        }
        decision
    }

    /// [`check`](Self::check) with parameters given by the caller instead of the limiter's
    /// own (or the key's): redis-cell's `CL.THROTTLE` passes the limit with every call and
    /// keeps only the state per key. The state is shared with calls using other
    /// parameters, as redis-cell shares the key's TAT.
    ///
    /// Eviction still ranks keys by the limiter's default algorithm's
    /// [`Algorithm::full_at`], so use this only with a family whose `full_at` does not
    /// depend on the parameters (GCRA: the TAT).
    ///
    /// ```
    /// use floodgate_core::algorithms::Gcra;
    /// use floodgate_core::{KeyedLimiter, Nanos};
    ///
    /// let cells = KeyedLimiter::new(Gcra::from_cell(0, 1, 1)?, 1000)?;
    /// let now = Nanos::from_secs(1_700_000_000);
    /// let d = cells.check_with("k", &Gcra::from_cell(15, 30, 60)?, now, 1);
    /// assert_eq!(d.throttle_reply(), [0, 16, 15, -1, 2]);
    /// // 1 ms later: 3.999 s to full capacity, truncated as redis-cell truncates
    /// let later = Nanos(now.0 + 1_000_000);
    /// let d = cells.check_with("k", &Gcra::from_cell(15, 30, 60)?, later, 1);
    /// assert_eq!(d.throttle_reply(), [0, 16, 14, -1, 3]);
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn check_with<Q>(&self, key: &Q, algorithm: &A, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.shard(hash).lock();
        let shard = &mut *guard;
        if let Some((_, state)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            return algorithm.check(state, now, cost);
        }
        self.check_new(shard, Some(algorithm), hash, key, now, cost)
    }

    /// What [`check`](Self::check) would answer, consuming nothing and inserting nothing.
    pub fn peek<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let own = self.own_algorithm(key);
        let shard = self.shard(hash).lock();
        let alg: &A = own.as_deref().unwrap_or(&shard.alg);
        match shard.table.find(hash, |(k, _)| k.borrow() == key) {
            Some((_, state)) => alg.peek(state, now, cost),
            None => alg.peek(&A::State::default(), now, cost),
        }
    }

    /// Replace the algorithm (quota) for every key without its own, at run time. Existing
    /// per-key state is kept and read by the new parameters.
    pub fn set_algorithm(&self, algorithm: A) {
        let algorithm = Arc::new(algorithm);
        for shard in self.shards.iter() {
            shard.0.lock().alg = algorithm.clone();
        }
    }

    /// The current default algorithm.
    pub fn algorithm(&self) -> Arc<A> {
        self.shards[0].0.lock().alg.clone()
    }

    /// Give `key` its own quota (a premium customer, say), at run time.
    pub fn set_key_algorithm(&self, key: K, algorithm: A) {
        let mut o = self.overrides.write();
        o.insert(key, Arc::new(algorithm));
        self.has_overrides.store(true, Ordering::Release);
    }

    /// Return `key` to the default quota.
    pub fn clear_key_algorithm<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut o = self.overrides.write();
        o.remove(key);
        self.has_overrides.store(!o.is_empty(), Ordering::Release);
    }

    /// Drop every key that is back at full capacity at `now` (loses nothing). Returns how
    /// many were dropped. Eviction does this on its own when a shard fills; call it to give
    /// memory back early.
    pub fn sweep(&self, now: Nanos) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            dropped += self.drop_idle(&mut shard.0.lock(), now);
        }
        dropped
    }

    /// Keys held now and eviction counters.
    pub fn stats(&self) -> Stats {
        Stats {
            keys: self.len() as u64,
            idle_dropped: self.idle_dropped.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().table.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    pub(crate) fn shard_index(&self, hash: u64) -> usize {
        // Bits 40.. : hashbrown uses the low bits for the slot and the top 7 for tags.
        (hash >> 40) as usize & self.shard_shift_mask
    }

    fn shard(&self, hash: u64) -> &ShardLock<Shard<K, A::State, A>> {
        &self.shards[self.shard_index(hash)].0
    }

    /// `key`'s own quota, if it has one (one load when no key has one).
    #[inline(always)]
    pub(crate) fn own_algorithm<Q>(&self, key: &Q) -> Option<Arc<A>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.has_overrides.load(Ordering::Acquire) {
            return None;
        }
        self.own_algorithm_slow(key)
    }

    #[inline(never)]
    fn own_algorithm_slow<Q>(&self, key: &Q) -> Option<Arc<A>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.overrides.read().get(key).cloned()
    }

    /// Insert a new key's state into a locked shard, making room first if it is full.
    #[inline(never)]
    pub(crate) fn insert(
        &self,
        shard: &mut Shard<K, A::State, A>,
        hash: u64,
        key: K,
        state: A::State,
        now: Nanos,
    ) {
        if shard.table.len() >= self.shard_cap {
            self.make_room(shard, now);
        }
        let hasher = &self.hasher;
        shard
            .table
            .insert_unique(hash, (key, state), |(k, _)| hasher.hash_one(k));
    }

    fn full_at_of(&self, key: &K, state: &A::State, default: &A) -> Nanos {
        if self.has_overrides.load(Ordering::Relaxed)
            && let Some(a) = self.overrides.read().get(key)
        {
            return a.full_at(state);
        }
        default.full_at(state)
    }

    fn drop_idle(&self, shard: &mut Shard<K, A::State, A>, now: Nanos) -> usize {
        let default = shard.alg.clone();
        let before = shard.table.len();
        shard
            .table
            .retain(|(k, s)| self.full_at_of(k, s, &default) > now);
        let dropped = before - shard.table.len();
        self.idle_dropped
            .fetch_add(dropped as u64, Ordering::Relaxed);
        dropped
    }

    fn make_room(&self, shard: &mut Shard<K, A::State, A>, now: Nanos) {
        self.drop_idle(shard, now);
        let target = (self.shard_cap / 16).max(1);
        let free = self.shard_cap.saturating_sub(shard.table.len());
        if free >= target {
            return;
        }
        let mut n = (target - free).min(shard.table.len());
        if n == 0 {
            return;
        }
        let default = shard.alg.clone();
        let mut times: Vec<Nanos> = shard
            .table
            .iter()
            .map(|(k, s)| self.full_at_of(k, s, &default))
            .collect();
        let threshold = *times.select_nth_unstable(n - 1).1;
        let evicted = n;
        shard.table.retain(|(k, s)| {
            if n > 0 && self.full_at_of(k, s, &default) <= threshold {
                n -= 1;
                false
            } else {
                true
            }
        });
        self.evicted.fetch_add(evicted as u64, Ordering::Relaxed);
    }
}

impl<K, A: Algorithm> std::fmt::Debug for KeyedLimiter<K, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("max_keys", &(self.shard_cap * self.shards.len()))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;
    use crate::algorithms::{Gcra, TokenBucket};

    fn gcra(cap: u64) -> Gcra {
        Gcra::new(Rate::per_second(1).unwrap(), cap).unwrap()
    }

    #[test]
    fn cap_holds_and_idle_keys_go_first() {
        let l: KeyedLimiter<u64, _> = KeyedLimiter::with_shards(gcra(5), 64, 4).unwrap();
        assert_eq!(l.max_keys(), 64); // one shard: 64 < 4 x MIN_KEYS_PER_SHARD
        // 64 keys used at t=0 (full again at t=1 s)
        for k in 0..64 {
            assert!(l.check(&k, Nanos::ZERO, 1).allowed);
        }
        // at t=10 s they are all idle: new keys replace them and nothing live is evicted
        for k in 64..10_000 {
            l.check(&k, Nanos::from_secs(10), 1);
            assert!(l.len() <= 64);
        }
        let st = l.stats();
        assert!(st.idle_dropped > 0, "idle keys are dropped first: {st:?}");
        assert!(
            st.evicted > 0,
            "rotating live keys at one instant must evict: {st:?}"
        );
        assert!(st.keys <= 64);
    }

    #[test]
    fn steady_keys_survive_rotation() {
        let l: KeyedLimiter<u64, _> = KeyedLimiter::with_shards(gcra(100), 1024, 1).unwrap();
        let t = Nanos::from_secs(100);
        // a heavy key far from full capacity
        for _ in 0..90 {
            assert!(l.check(&u64::MAX, t, 1).allowed);
        }
        for k in 0..100_000u64 {
            l.check(&k, t, 1);
        }
        // it was never evicted: it still has exactly 10 left, not a fresh 100
        assert_eq!(l.peek(&u64::MAX, t, 1).remaining, 9);
        assert!(l.stats().evicted > 0);
    }

    #[test]
    fn per_key_and_runtime_quotas() {
        let l: KeyedLimiter<String, _> = KeyedLimiter::new(gcra(2), 100).unwrap();
        l.set_key_algorithm("vip".to_string(), gcra(10));
        let t = Nanos::from_secs(5);
        assert_eq!((0..20).filter(|_| l.check("vip", t, 1).allowed).count(), 10);
        assert_eq!((0..20).filter(|_| l.check("pleb", t, 1).allowed).count(), 2);
        l.set_algorithm(gcra(4));
        assert_eq!(
            (0..20).filter(|_| l.check("other", t, 1).allowed).count(),
            4
        );
        l.clear_key_algorithm("vip");
        assert!(!l.check("vip", t, 1).allowed);
    }

    #[test]
    fn denied_new_keys_are_not_stored_and_zero_cap_is_an_error() {
        let l: KeyedLimiter<u64, _> = KeyedLimiter::new(
            TokenBucket::new(2, Rate::per_second(1).unwrap()).unwrap(),
            10,
        )
        .unwrap();
        assert!(!l.check(&1, Nanos::ZERO, 3).allowed);
        assert!(l.peek(&2, Nanos::ZERO, 1).allowed);
        assert!(l.is_empty());
        assert!(KeyedLimiter::<u64, _>::new(gcra(1), 0).is_err());
    }

    #[test]
    fn sweep_drops_only_idle_keys() {
        let l: KeyedLimiter<u64, _> = KeyedLimiter::new(gcra(5), 100).unwrap();
        l.check(&1, Nanos::ZERO, 1);
        l.check(&2, Nanos::from_secs(10), 1);
        assert_eq!(l.sweep(Nanos::from_secs(10)), 1);
        assert_eq!(l.len(), 1);
    }

    #[test]
    #[cfg(target_arch = "x86_64")] // the only target where the prefetch is issued
    fn the_prefetched_lines_hold_most_keys() {
        // The prefetch reads hashbrown's layout from each table's allocation: check that
        // the lines it loads are where the keys are (a wrong layout would find ~none).
        let l: KeyedLimiter<u64, _> = KeyedLimiter::new(gcra(5), 1 << 20).unwrap();
        let t = Nanos::from_secs(1);
        let keys: Vec<u64> = (0..200_000u64)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        for k in &keys {
            assert!(l.check(k, t, 1).allowed);
        }
        let size = size_of::<(u64, crate::algorithms::GcraState)>();
        let line = |addr: usize| addr / 64;
        let (mut in_group, mut prefetched) = (0, 0);
        for k in &keys {
            let hash = l.hash(k);
            let index = l.shard_index(hash);
            let (ctrl, mask) = l.placements[index].get();
            assert_ne!(ctrl, 0);
            let shard = l.shards[index].0.lock();
            let entry = shard.table.find(hash, |(x, _)| x == k).unwrap();
            let addr = entry as *const _ as usize;
            assert!(
                addr < ctrl && ctrl - addr <= (mask + 1) * size,
                "inside the table"
            );
            let slot = (ctrl - addr) / size - 1;
            let pos = hash as usize & mask;
            if slot.wrapping_sub(pos) & mask < 16 {
                in_group += 1;
            }
            let home = ctrl - (pos + 1) * size;
            if [line(home), line(home - 3 * size)].contains(&line(addr)) {
                prefetched += 1;
            }
        }
        let n = keys.len() as f64;
        assert!(in_group as f64 / n > 0.9, "home group: {in_group} of {n}");
        assert!(
            prefetched as f64 / n > 0.8,
            "prefetched: {prefetched} of {n}"
        );
    }

    #[test]
    fn check_with_uses_the_callers_parameters_on_shared_state() {
        let l: KeyedLimiter<String, _> = KeyedLimiter::new(gcra(1), 100).unwrap();
        let t = Nanos::from_secs(1_700_000_000);
        let cell = Gcra::from_cell(15, 30, 60).unwrap();
        assert_eq!(
            l.check_with("k", &cell, t, 0).throttle_reply(),
            [0, 16, 16, -1, 0]
        );
        assert!(l.is_empty(), "a peek inserts nothing");
        assert_eq!(
            l.check_with("k", &cell, t, 1).throttle_reply(),
            [0, 16, 15, -1, 2]
        );
        assert_eq!(
            l.check_with("k", &cell, t, 1).throttle_reply(),
            [0, 16, 14, -1, 4]
        );
        // the default (capacity 1) was not used, and another key is untouched
        assert_eq!(l.len(), 1);
        assert!(l.check("other", t, 1).allowed);
        assert!(!l.check("other", t, 1).allowed);
    }
}
