//! Where each shard's table lives, so that a check can start loading a key's slot before
//! it takes the shard's lock.
//!
//! A check on a key of a large table (more than the caches hold) misses twice: once on the
//! table's control bytes at the key's home position, then on the entry the control bytes
//! point to. Inside the lock the two are serial, and the lock's atomic instruction keeps
//! later loads from starting before it. [`TableAlloc`], the tables' allocator, records in
//! a [`Placement`] where the table's control bytes start and how many slots it has; a
//! check reads it (two relaxed loads, no lock) and [`Placement::prefetch`]es the control
//! bytes and the entry slots at the key's home position, so both misses overlap each other
//! and the lock. Most keys sit at their home slot or one of the next three (the table is
//! at most 7/8 full).
//!
//! The placement is a hint: a stale or torn one (a table growing under another thread's
//! lock) only prefetches a useless line; prefetching never faults and changes nothing a
//! program can observe but time. It follows the layout of hashbrown's tables (entries
//! below the control bytes, in reverse order, the home slot being the hash's low bits
//! masked by the slot count), which the tests check.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use allocator_api2::alloc::{AllocError, Allocator, Global};

/// Where one table's control bytes start, and its slot count minus one (0: no table, or
/// one too small to prefetch).
#[derive(Debug, Default)]
pub(crate) struct Placement {
    ctrl: AtomicUsize,
    mask: AtomicUsize,
}

/// Tables of fewer slots are not prefetched: small enough to stay in the first-level
/// cache of a core (4 KiB of entries, 256 bytes of control bytes per shard), where the
/// prefetch would cost instructions and save no miss.
const MIN_PREFETCHED_SLOTS: usize = 256;

/// Bytes after the control bytes of a hashbrown table: one SSE2 group's width, on x86-64,
/// the only target where [`prefetch`] issues an instruction (hashbrown's groups are 8 bytes
/// wide on others).
const TRAILING_CTRL: usize = 16;

impl Placement {
    /// Start loading the control bytes of `hash`'s home position in the table placed
    /// here, whose entries are `T`, and the cache lines of its home slot and the three
    /// after it (two lines at most: a key is found in them unless its home group was
    /// crowded when it was inserted).
    #[inline(always)]
    pub(crate) fn prefetch<T>(&self, hash: u64) {
        let ctrl = self.ctrl.load(Ordering::Relaxed);
        if ctrl == 0 {
            return;
        }
        let pos = hash as usize & self.mask.load(Ordering::Relaxed);
        prefetch(ctrl.wrapping_add(pos));
        prefetch(ctrl.wrapping_sub((pos + 1) * size_of::<T>()));
        prefetch(ctrl.wrapping_sub((pos + 4) * size_of::<T>()));
    }

    /// The control bytes' address and the slot mask recorded (0, 0: no table yet).
    #[cfg(test)]
    pub(crate) fn get(&self) -> (usize, usize) {
        (
            self.ctrl.load(Ordering::Relaxed),
            self.mask.load(Ordering::Relaxed),
        )
    }

    /// Record a table of `T` allocated at `block` with `layout`.
    fn record<T>(&self, block: NonNull<u8>, layout: Layout) {
        // hashbrown's layout: slots x size_of::<T>() bytes of entries, then one control
        // byte per slot and a group's width more; slots is a power of two.
        let per_slot = size_of::<T>() + 1;
        let guess = layout.size() / per_slot;
        if guess == 0 {
            return;
        }
        let slots = 1usize << (usize::BITS - 1 - guess.leading_zeros());
        let Some(ctrl_offset) = layout.size().checked_sub(slots + TRAILING_CTRL) else {
            return;
        };
        if slots < MIN_PREFETCHED_SLOTS {
            self.ctrl.store(0, Ordering::Relaxed);
            return;
        }
        self.mask.store(slots - 1, Ordering::Relaxed);
        self.ctrl
            .store(block.as_ptr() as usize + ctrl_offset, Ordering::Relaxed);
    }
}

/// Prefetch the cache line holding `addr` (any address: prefetching never faults).
#[inline(always)]
fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it neither faults nor changes memory, whatever the
    // address
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// The allocator of one shard's table of `T`: the global allocator, recording where the
/// newest table is in the shard's [`Placement`].
pub(crate) struct TableAlloc<T> {
    placements: Arc<[Placement]>,
    shard: usize,
    entry: std::marker::PhantomData<fn() -> T>,
}

impl<T> TableAlloc<T> {
    /// The allocator of shard `shard`, recording into `placements[shard]`.
    pub(crate) fn new(placements: Arc<[Placement]>, shard: usize) -> Self {
        TableAlloc {
            placements,
            shard,
            entry: std::marker::PhantomData,
        }
    }
}

impl<T> Clone for TableAlloc<T> {
    fn clone(&self) -> Self {
        TableAlloc::new(self.placements.clone(), self.shard)
    }
}

// SAFETY: every block comes from `Global` and goes back to it unchanged.
unsafe impl<T> Allocator for TableAlloc<T> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let block = Global.allocate(layout)?;
        if let Some(p) = self.placements.get(self.shard) {
            p.record::<T>(block.cast(), layout);
        }
        Ok(block)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: `ptr` was allocated by `allocate`, from `Global`, with `layout`
        unsafe { Global.deallocate(ptr, layout) }
    }
}
