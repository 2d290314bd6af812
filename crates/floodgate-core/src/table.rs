//! [`Table`]: the hash table a [`KeyedLimiter`](crate::KeyedLimiter) shard keeps its keys
//! in, laid out so that a check on a key not in cache misses one cache line, not two.
//!
//! # Layout
//! The table is an array of *chunks*. A chunk starts with an 8-byte header (one tag byte
//! per slot, 0 for an empty slot, and an overflow count in the last byte), followed by its
//! slots. When three or more entries fit in 64 bytes with the header (a `u64` key and a
//! GCRA state: 16 bytes, three per chunk), a chunk *is* one 64-byte cache line: the tags
//! and the entries a lookup compares share the line, where a SwissTable keeps its control
//! bytes in one array and its entries in another (two misses for a cold key). Larger
//! entries get chunks of seven slots, not aligned to lines.
//!
//! A key lives in its home chunk (picked from the hash's low 32 bits) or, when that is
//! full, in the next chunk with a free slot (linear probing over chunks). Each chunk counts
//! the keys that passed over it, full, on their way to a later chunk (the overflow count,
//! as in Folly's F14): a lookup stops at the first chunk whose count is zero, so a key
//! absent from the table usually costs its home chunk only, and removal needs no
//! tombstones (the count along the key's path is decremented; a count that reached 255
//! stays there, which only makes lookups probe further). Tags are the hash's top 7 bits
//! with the high bit set, so a lookup compares keys only on a tag match.
//!
//! The table grows by a quarter when 13/16 of its slots are taken, so it runs between 65%
//! and 81% full: with 16-byte entries, 26 to 33 bytes per key (a SwissTable of 16-byte
//! entries runs between 44% and 87%, 19 to 39 bytes per key).

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::mem::{align_of, needs_drop, size_of};
use std::ptr::{self, NonNull};

/// Bytes of a chunk's header: tag bytes, then the overflow count in the last byte.
const HEADER: usize = 8;
/// A cache line.
const LINE: usize = 64;
/// `0x01` in every byte.
const LO: u64 = 0x0101_0101_0101_0101;
/// `0x80` in every byte.
const HI: u64 = 0x8080_8080_8080_8080;

const fn round_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

/// A hash table of `T`, addressed by a 64-bit hash the caller computes (see the module
/// documentation). Keys are compared by a closure, as in `hashbrown::HashTable`.
pub(crate) struct Table<T> {
    /// Chunk 0; dangling while `chunks == 0`.
    base: NonNull<u8>,
    chunks: usize,
    len: usize,
    /// Entries held when the next insertion grows the table.
    growth_limit: usize,
    /// The furthest any entry was placed from its home chunk (an upper bound; a lookup
    /// never probes further).
    max_probe: usize,
    _owns: PhantomData<T>,
}

// SAFETY: the table owns its entries as a `Vec<T>` would.
unsafe impl<T: Send> Send for Table<T> {}
// SAFETY: `&Table` only hands out `&T`.
unsafe impl<T: Sync> Sync for Table<T> {}

impl<T> Table<T> {
    /// Offset of the first slot in a chunk.
    const ENTRY_OFF: usize = round_up(HEADER, align_of::<T>());
    /// Whether a chunk is one cache line (three or more entries fit in it).
    const LINE_MODE: bool = Self::ENTRY_OFF + 3 * size_of::<T>() <= LINE;
    /// Slots per chunk (at most 7: one tag byte each, the header's last byte is the count).
    const SLOTS: usize = if size_of::<T>() == 0 {
        7
    } else if Self::LINE_MODE {
        let n = (LINE - Self::ENTRY_OFF) / size_of::<T>();
        if n > 7 { 7 } else { n }
    } else {
        7
    };
    /// Alignment of a chunk.
    const ALIGN: usize = if Self::LINE_MODE {
        LINE
    } else if align_of::<T>() > HEADER {
        align_of::<T>()
    } else {
        HEADER
    };
    /// Bytes from one chunk to the next.
    const STRIDE: usize = round_up(Self::ENTRY_OFF + Self::SLOTS * size_of::<T>(), Self::ALIGN);
    /// The high bit of each slot's tag byte in a header.
    const SLOT_MASK: u64 = HI & ((1u64 << (8 * Self::SLOTS)) - 1);

    /// An empty table; allocates nothing.
    pub(crate) const fn new() -> Self {
        Table {
            base: NonNull::dangling(),
            chunks: 0,
            len: 0,
            growth_limit: 0,
            max_probe: 0,
            _owns: PhantomData,
        }
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes allocated (for tests and docs).
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.chunks * Self::STRIDE
    }

    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        // the low 32 bits, mapped onto 0..chunks by a multiply (no power of two needed)
        (((hash & 0xFFFF_FFFF) * self.chunks as u64) >> 32) as usize
    }

    #[inline(always)]
    fn tag(hash: u64) -> u8 {
        0x80 | (hash >> 57) as u8
    }

    #[inline(always)]
    fn next(&self, c: usize) -> usize {
        if c + 1 == self.chunks { 0 } else { c + 1 }
    }

    /// Chunk `c`'s first byte. `c < self.chunks`.
    #[inline(always)]
    fn chunk(&self, c: usize) -> *mut u8 {
        debug_assert!(c < self.chunks);
        // SAFETY: within the allocation of `chunks * STRIDE` bytes
        unsafe { self.base.as_ptr().add(c * Self::STRIDE) }
    }

    #[inline(always)]
    fn header(&self, c: usize) -> u64 {
        // SAFETY: a chunk starts with 8 initialised bytes, aligned to at least 8
        u64::from_le(unsafe { ptr::read(self.chunk(c) as *const u64) })
    }

    #[inline(always)]
    fn entry(&self, c: usize, i: usize) -> *mut T {
        debug_assert!(i < Self::SLOTS);
        // SAFETY: slot `i` of chunk `c` is within the chunk
        unsafe { self.chunk(c).add(Self::ENTRY_OFF + i * size_of::<T>()) as *mut T }
    }

    #[inline(always)]
    fn set_tag(&mut self, c: usize, i: usize, tag: u8) {
        // SAFETY: byte `i < 7` of chunk `c`'s header
        unsafe { *self.chunk(c).add(i) = tag }
    }

    #[inline(always)]
    fn overflow(&mut self, c: usize) -> *mut u8 {
        // SAFETY: the header's last byte
        unsafe { self.chunk(c).add(HEADER - 1) }
    }

    /// High bits of the slot bytes of `header` that may hold `tag` (false positives are
    /// possible, never false negatives).
    #[inline(always)]
    fn candidates(header: u64, tag: u8) -> u64 {
        let x = header ^ (LO * tag as u64);
        x.wrapping_sub(LO) & !x & Self::SLOT_MASK
    }

    /// High bits of the empty slots of `header` (exact: a used slot's tag has its high bit
    /// set).
    #[inline(always)]
    fn empties(header: u64) -> u64 {
        header.wrapping_sub(LO) & !header & Self::SLOT_MASK
    }

    /// The used slots of a chunk with `header`.
    #[inline(always)]
    fn used(header: u64) -> impl Iterator<Item = usize> {
        let mut used = !Self::empties(header) & Self::SLOT_MASK;
        std::iter::from_fn(move || {
            if used == 0 {
                return None;
            }
            let i = used.trailing_zeros() as usize / 8;
            used &= used - 1;
            Some(i)
        })
    }

    /// Where the entry `eq` accepts is, as (chunk, slot).
    #[inline(always)]
    fn position(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<(usize, usize)> {
        if self.chunks == 0 {
            return None;
        }
        let tag = Self::tag(hash);
        let mut c = self.home(hash);
        let mut probe = 0;
        loop {
            let header = self.header(c);
            let mut m = Self::candidates(header, tag);
            while m != 0 {
                let i = m.trailing_zeros() as usize / 8;
                // SAFETY: a candidate's tag byte has its high bit set (a false positive is
                // a byte above a true match, and matches are tags, never 0), so the slot
                // holds an initialised entry
                if eq(unsafe { &*self.entry(c, i) }) {
                    return Some((c, i));
                }
                m &= m - 1;
            }
            if header >> 56 == 0 || probe >= self.max_probe {
                return None;
            }
            probe += 1;
            c = self.next(c);
        }
    }

    /// The entry with `hash` that `eq` accepts.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&T> {
        let (c, i) = self.position(hash, eq)?;
        // SAFETY: an occupied slot, borrowed with `self`
        Some(unsafe { &*self.entry(c, i) })
    }

    /// The entry with `hash` that `eq` accepts, mutable.
    #[inline(always)]
    pub(crate) fn find_mut(&mut self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let (c, i) = self.position(hash, eq)?;
        // SAFETY: an occupied slot, borrowed mutably with `self`
        Some(unsafe { &mut *self.entry(c, i) })
    }

    /// Insert `value`, whose key the caller knows is absent; `hasher` gives the hash of any
    /// entry (used when the table grows).
    pub(crate) fn insert_unique(&mut self, hash: u64, value: T, hasher: impl Fn(&T) -> u64) {
        if self.len >= self.growth_limit {
            self.grow(hasher);
        }
        self.insert_no_grow(hash, value);
    }

    /// Insert into a table with a free slot.
    fn insert_no_grow(&mut self, hash: u64, value: T) {
        debug_assert!(self.len < self.chunks * Self::SLOTS);
        let mut c = self.home(hash);
        let mut probe = 0;
        loop {
            let empties = Self::empties(self.header(c));
            if empties != 0 {
                let i = empties.trailing_zeros() as usize / 8;
                // SAFETY: an empty slot of this table: nothing to drop, room for a `T`
                unsafe { ptr::write(self.entry(c, i), value) };
                self.set_tag(c, i, Self::tag(hash));
                self.len += 1;
                self.max_probe = self.max_probe.max(probe);
                return;
            }
            let count = self.overflow(c);
            // SAFETY: the header's count byte; 255 sticks (an upper bound from then on)
            unsafe { *count = (*count).saturating_add(1) };
            probe += 1;
            c = self.next(c);
        }
    }

    /// Undo the overflow counts that an entry with `hash`, held in chunk `c`, added on its
    /// way there.
    fn unwind(&mut self, hash: u64, c: usize) {
        let mut h = self.home(hash);
        while h != c {
            let count = self.overflow(h);
            // SAFETY: the header's count byte; a count of 255 may be an undercount of the
            // keys passing over, so it is never decremented
            unsafe {
                if *count != u8::MAX {
                    *count -= 1;
                }
            }
            h = self.next(h);
        }
    }

    /// Keep only the entries `keep` accepts (it may change them); `hasher` gives any
    /// entry's hash (to undo the overflow counts of a removed one).
    pub(crate) fn retain(
        &mut self,
        mut keep: impl FnMut(&mut T) -> bool,
        hasher: impl Fn(&T) -> u64,
    ) {
        for c in 0..self.chunks {
            for i in Self::used(self.header(c)) {
                let p = self.entry(c, i);
                // SAFETY: an occupied slot
                if keep(unsafe { &mut *p }) {
                    continue;
                }
                // SAFETY: an occupied slot
                let hash = hasher(unsafe { &*p });
                self.set_tag(c, i, 0);
                self.len -= 1;
                self.unwind(hash, c);
                // SAFETY: the slot is marked empty first, so a panicking `drop` cannot lead
                // to a second one
                unsafe { ptr::drop_in_place(p) };
            }
        }
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.chunks).flat_map(move |c| {
            // SAFETY: an occupied slot, borrowed with `self`
            Self::used(self.header(c)).map(move |i| unsafe { &*self.entry(c, i) })
        })
    }

    /// A table of `chunks` empty chunks.
    fn with_chunks(chunks: usize) -> Self {
        let layout = Self::layout(chunks);
        // SAFETY: the layout's size is not zero (`chunks >= 1`, `STRIDE >= 8`)
        let base = unsafe { alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(base) else {
            alloc::handle_alloc_error(layout)
        };
        Table {
            base,
            chunks,
            len: 0,
            growth_limit: chunks * Self::SLOTS * 13 / 16,
            max_probe: 0,
            _owns: PhantomData,
        }
    }

    fn layout(chunks: usize) -> Layout {
        assert!(chunks <= u32::MAX as usize, "table too large");
        chunks
            .checked_mul(Self::STRIDE)
            .and_then(|size| Layout::from_size_align(size, Self::ALIGN).ok())
            .expect("table too large")
    }

    /// Move every entry into a table a quarter larger.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, hasher: impl Fn(&T) -> u64) {
        let mut bigger = Table::with_chunks(self.chunks + self.chunks / 4 + 1);
        for c in 0..self.chunks {
            for i in Self::used(self.header(c)) {
                let p = self.entry(c, i);
                // SAFETY: an occupied slot
                let hash = hasher(unsafe { &*p });
                self.set_tag(c, i, 0);
                self.len -= 1;
                // SAFETY: the slot is marked empty, so the value has one owner: `bigger`
                // (if `hasher` panics later, each table drops what it holds)
                bigger.insert_no_grow(hash, unsafe { ptr::read(p) });
            }
        }
        std::mem::swap(self, &mut bigger);
    }
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        if self.chunks == 0 {
            return;
        }
        if needs_drop::<T>() {
            for c in 0..self.chunks {
                for i in Self::used(self.header(c)) {
                    // SAFETY: an occupied slot, dropped once: the table is going away
                    unsafe { ptr::drop_in_place(self.entry(c, i)) };
                }
            }
        }
        // SAFETY: allocated in `with_chunks` with this layout
        unsafe { alloc::dealloc(self.base.as_ptr(), Self::layout(self.chunks)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::rc::Rc;

    fn mix(k: u64) -> u64 {
        let mut z = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn layout_of_a_16_byte_entry_is_one_line() {
        assert_eq!(Table::<(u64, u64)>::SLOTS, 3);
        assert_eq!(Table::<(u64, u64)>::STRIDE, 64);
        assert_eq!(Table::<(u64, u64)>::ALIGN, 64);
        assert_eq!(Table::<(u32, u32)>::SLOTS, 7);
        assert_eq!(Table::<[u64; 4]>::SLOTS, 7);
        assert_eq!(Table::<[u64; 4]>::STRIDE, 8 + 7 * 32);
        assert_eq!(Table::<(u128, u128)>::ALIGN, 16);
        assert_eq!(Table::<()>::SLOTS, 7);
    }

    /// The table against a `HashMap`, under `hash`: inserts, lookups, removals, growth.
    fn against_a_map(hash: impl Fn(u64) -> u64, keys: u64, rounds: u64) {
        let mut t: Table<(u64, u64)> = Table::new();
        let mut m: HashMap<u64, u64> = HashMap::new();
        let h = |e: &(u64, u64)| hash(e.0);
        let mut rng = 1u64;
        for r in 0..rounds {
            rng = mix(rng);
            let k = rng % keys;
            match t.find_mut(hash(k), |e| e.0 == k) {
                Some(e) => {
                    assert_eq!(m.get(&k), Some(&e.1));
                    e.1 += 1;
                    *m.get_mut(&k).unwrap() += 1;
                }
                None => {
                    assert!(!m.contains_key(&k));
                    t.insert_unique(hash(k), (k, r), h);
                    m.insert(k, r);
                }
            }
            if r % 997 == 0 {
                let cut = mix(r) % 4;
                t.retain(|e| e.1 % 4 != cut, h);
                m.retain(|_, v| *v % 4 != cut);
            }
            assert_eq!(t.len(), m.len());
        }
        for k in 0..keys {
            assert_eq!(
                t.find(hash(k), |e| e.0 == k).map(|e| e.1),
                m.get(&k).copied()
            );
        }
        let mut all: Vec<_> = t.iter().copied().collect();
        let mut want: Vec<_> = m.into_iter().collect();
        all.sort_unstable();
        want.sort_unstable();
        assert_eq!(all, want);
    }

    #[test]
    fn agrees_with_a_map() {
        against_a_map(mix, 5_000, 60_000);
    }

    #[test]
    fn agrees_with_a_map_under_colliding_hashes() {
        // 16 distinct hashes: long overflow chains, counts that saturate
        against_a_map(|k| mix(k % 16), 2_000, 20_000);
        // equal home chunks, distinct tags; and equal tags, distinct homes
        against_a_map(|k| mix(k) & !0xFFFF_FFFF, 2_000, 20_000);
        against_a_map(|k| mix(k) & (u64::MAX >> 7), 2_000, 20_000);
    }

    #[test]
    fn drops_every_entry_once() {
        let token = Rc::new(());
        {
            let mut t: Table<(u64, Rc<()>)> = Table::new();
            let h = |e: &(u64, Rc<()>)| mix(e.0);
            for k in 0..1_000 {
                t.insert_unique(mix(k), (k, token.clone()), h);
            }
            assert_eq!(Rc::strong_count(&token), 1_001);
            t.retain(|e| e.0 % 2 == 0, h);
            assert_eq!(Rc::strong_count(&token), 501);
        }
        assert_eq!(Rc::strong_count(&token), 1);
    }

    #[test]
    fn runs_between_65_and_82_percent_full() {
        let mut t: Table<(u64, u64)> = Table::new();
        let h = |e: &(u64, u64)| mix(e.0);
        for k in 0..100_000u64 {
            t.insert_unique(mix(k), (k, k), h);
            if k > 1_000 {
                let full = t.len() as f64 / (t.chunks * 3) as f64;
                assert!((0.64..=0.82).contains(&full), "{full} at {k}");
            }
        }
        assert!(t.allocated() as f64 / 100_000.0 < 34.0);
    }
}
