//! [`SpaceSaving`]: the heaviest keys of a stream in a fixed number of counters
//! (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and top-k elements
//! in data streams", 2005), weighted.
//!
//! Guarantee, for a stream of total weight `N` recorded into `k` counters: every listed
//! key's count overestimates its true weight by at most its `error`, and
//! `error <= floor <= N / k` (`floor`, the smallest count, is 0 until the `k` counters
//! are full); every key whose true weight exceeds `N / k` is listed. Memory is `k`
//! entries whatever the number of distinct keys: a key not held replaces the smallest
//! counter, inheriting its count as its error. Keys are held up to [`MAX_KEY_BYTES`]
//! bytes (longer keys are counted under their first [`MAX_KEY_BYTES`] bytes).

use hashbrown::HashTable;

/// The longest key prefix held (bytes): bounds an entry's memory.
pub const MAX_KEY_BYTES: usize = 128;

/// One counter of a [`SpaceSaving`] summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The key (at most [`MAX_KEY_BYTES`] bytes).
    pub key: Vec<u8>,
    /// Weight counted for the key: at least its true weight, at most `error` more.
    pub count: u64,
    /// Overestimation bound of `count` (the count the key inherited when it took the
    /// counter).
    pub error: u64,
}

#[derive(Debug)]
struct Slot {
    counter: Counter,
    hash: u64,
}

/// A space-saving summary of `k` counters (see the module docs for the bound).
///
/// Invariants: at most `k` slots; `heap` is a min-heap of slot ids by count, `pos[id]` is
/// slot `id`'s place in it; `table` holds every slot id under its key's hash.
#[derive(Debug)]
pub struct SpaceSaving {
    k: usize,
    slots: Vec<Slot>,
    heap: Vec<u32>,
    pos: Vec<u32>,
    table: HashTable<u32>,
    total: u64,
}

impl SpaceSaving {
    /// A summary of `k` counters (at least 1).
    pub fn new(k: usize) -> SpaceSaving {
        let k = k.clamp(1, u32::MAX as usize);
        SpaceSaving {
            k,
            slots: Vec::with_capacity(k),
            heap: Vec::with_capacity(k),
            pos: Vec::with_capacity(k),
            // twice the keys held: replacing keys then rehashes in place, never grows
            table: HashTable::with_capacity(2 * k),
            total: 0,
        }
    }

    /// Forget everything (the memory is kept for reuse).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.heap.clear();
        self.pos.clear();
        self.table.clear();
        self.total = 0;
    }

    /// Count `weight` for `key`, whose hash (of its first [`MAX_KEY_BYTES`] bytes, by any
    /// hasher used consistently for this summary) is `hash`.
    pub fn record(&mut self, hash: u64, key: &[u8], weight: u64) {
        let key = &key[..key.len().min(MAX_KEY_BYTES)];
        self.total = self.total.saturating_add(weight);
        let slots = &self.slots;
        if let Some(&id) = self
            .table
            .find(hash, |&id| slots[id as usize].counter.key == key)
        {
            let c = &mut self.slots[id as usize].counter;
            c.count = c.count.saturating_add(weight);
            self.sift_down(self.pos[id as usize] as usize);
            return;
        }
        if self.slots.len() < self.k {
            let id = self.slots.len() as u32;
            self.slots.push(Slot {
                counter: Counter {
                    key: key.to_vec(),
                    count: weight,
                    error: 0,
                },
                hash,
            });
            self.heap.push(id);
            self.pos.push(self.heap.len() as u32 - 1);
            self.table
                .insert_unique(hash, id, |&i| self.slots[i as usize].hash);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        // replace the smallest counter
        let id = self.heap[0];
        let old_hash = self.slots[id as usize].hash;
        if let Ok(e) = self.table.find_entry(old_hash, |&i| i == id) {
            e.remove();
        }
        let slot = &mut self.slots[id as usize];
        slot.hash = hash;
        slot.counter.key.clear();
        slot.counter.key.extend_from_slice(key);
        slot.counter.error = slot.counter.count;
        slot.counter.count = slot.counter.count.saturating_add(weight);
        let slots = &self.slots;
        self.table
            .insert_unique(hash, id, |&i| slots[i as usize].hash);
        self.sift_down(0);
    }

    /// Total weight recorded (`N`).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Counters held (at most `k`).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The number of counters, `k`.
    pub fn capacity(&self) -> usize {
        self.k
    }

    /// The smallest count when all `k` counters are taken, else 0: the most an absent key
    /// may have been counted, and at most `total / k`.
    pub fn floor(&self) -> u64 {
        if self.slots.len() < self.k {
            0
        } else {
            self.heap
                .first()
                .map_or(0, |&id| self.slots[id as usize].counter.count)
        }
    }

    /// The counters, in no order.
    pub fn counters(&self) -> impl Iterator<Item = &Counter> {
        self.slots.iter().map(|s| &s.counter)
    }

    /// The counter of `key`, if held.
    pub fn get(&self, hash: u64, key: &[u8]) -> Option<&Counter> {
        let key = &key[..key.len().min(MAX_KEY_BYTES)];
        self.table
            .find(hash, |&id| self.slots[id as usize].counter.key == key)
            .map(|&id| &self.slots[id as usize].counter)
    }

    /// Bytes held on the heap by this summary (its allocations' capacities): bounded by
    /// `k` and [`MAX_KEY_BYTES`], whatever was recorded.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self
                .slots
                .iter()
                .map(|s| s.counter.key.capacity())
                .sum::<usize>()
            + (self.heap.capacity() + self.pos.capacity()) * 4
            + self.table.allocation_size()
    }

    fn count_at(&self, heap_index: usize) -> u64 {
        self.slots[self.heap[heap_index] as usize].counter.count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a] as usize] = a as u32;
        self.pos[self.heap[b] as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.count_at(i) >= self.count_at(parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < n && self.count_at(l) < self.count_at(least) {
                least = l;
            }
            if r < n && self.count_at(r) < self.count_at(least) {
                least = r;
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::hash::BuildHasher;

    fn h(key: &[u8]) -> u64 {
        foldhash::fast::FixedState::with_seed(7).hash_one(key)
    }

    /// The bound of the module docs against exact counts, on skewed streams.
    #[test]
    fn counts_are_within_the_bound_and_heavy_keys_are_held() {
        let mut rng = fastrand::Rng::with_seed(11);
        for k in [1usize, 4, 16, 64] {
            let mut s = SpaceSaving::new(k);
            let mut truth: HashMap<Vec<u8>, u64> = HashMap::new();
            for _ in 0..20_000 {
                // Zipf-like: small ids far more often
                let id = (rng.f64().powi(3) * 500.0) as u32;
                let w = rng.u64(1..=3);
                let key = format!("key-{id}").into_bytes();
                s.record(h(&key), &key, w);
                *truth.entry(key).or_default() += w;
            }
            let n = s.total();
            assert_eq!(n, truth.values().sum::<u64>());
            let bound = n / k as u64;
            assert!(s.floor() <= bound);
            assert!(s.len() <= k);
            for c in s.counters() {
                let t = truth.get(&c.key).copied().unwrap_or(0);
                assert!(c.count >= t, "k={k}: {c:?} under true {t}");
                assert!(c.count - t <= c.error, "k={k}: {c:?} true {t}");
                assert!(c.error <= bound, "k={k}: {c:?} bound {bound}");
            }
            for (key, t) in &truth {
                if *t > bound {
                    assert!(s.get(h(key), key).is_some(), "k={k}: heavy key missing");
                }
            }
        }
    }

    #[test]
    fn a_flooding_key_is_first_and_exact_when_it_never_left() {
        let mut s = SpaceSaving::new(8);
        for i in 0..1_000u32 {
            let key = b"flood".to_vec();
            s.record(h(&key), &key, 1);
            let other = format!("k{}", i % 50).into_bytes();
            s.record(h(&other), &other, 1);
        }
        let top = s.counters().max_by_key(|c| c.count).unwrap();
        assert_eq!(top.key, b"flood");
        assert_eq!((top.count, top.error), (1_000, 0));
    }

    #[test]
    fn long_keys_are_counted_under_their_prefix() {
        let mut s = SpaceSaving::new(2);
        let long = vec![b'x'; MAX_KEY_BYTES + 50];
        s.record(h(&long[..MAX_KEY_BYTES]), &long, 1);
        assert_eq!(s.counters().next().unwrap().key.len(), MAX_KEY_BYTES);
        s.record(h(&long[..MAX_KEY_BYTES]), &long[..MAX_KEY_BYTES + 1], 1);
        assert_eq!(s.len(), 1);
        assert_eq!(s.get(h(&long[..MAX_KEY_BYTES]), &long).unwrap().count, 2);
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        let mut s = SpaceSaving::new(1);
        s.record(h(b"a"), b"a", u64::MAX);
        s.record(h(b"b"), b"b", u64::MAX);
        assert_eq!(s.total(), u64::MAX);
        assert_eq!(s.counters().next().unwrap().count, u64::MAX);
    }
}
