//! The allocator of the keyed store's tables: a table of 2 MiB or more is placed on a
//! 2 MiB boundary and, on Linux, advised onto transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`), so that a random key costs one TLB entry per 2 MiB of table
//! instead of one per 4 KiB (a page walk on most checks of a large table otherwise; two
//! dimensions of it in a virtual machine). The kernel only honours the advice where
//! transparent huge pages are enabled (`always` or `madvise` in
//! `/sys/kernel/mm/transparent_hugepage/enabled`); elsewhere, and on other platforms, the
//! tables are ordinary allocations.
//!
//! Nothing is padded: the allocation has the size the table asks for, through the global
//! allocator; only its alignment is raised. Only whole 2 MiB ranges inside the table are
//! advised, so the huge pages hold nothing but the table's own bytes (its entries, which
//! a table at its load factor touches on every page anyway).

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global};

/// A transparent huge page on x86-64 and most aarch64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// The allocator of a shard's table (zero-sized: it costs the table no bytes).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TableAlloc {
    pub(crate) plain: bool,
}

/// The layout a table's allocation really gets: 2 MiB-aligned from 2 MiB up.
fn placed(plain: bool, layout: Layout) -> Layout {
    if !plain && cfg!(target_os = "linux") && layout.size() >= HUGE_PAGE {
        Layout::from_size_align(layout.size(), HUGE_PAGE).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every block comes from `Global` and goes back to it with the layout it was
// allocated with (`placed` is a function of the layout the caller passes to both).
unsafe impl Allocator for TableAlloc {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let placed = placed(self.plain, layout);
        let block = Global.allocate(placed)?;
        if placed.align() == HUGE_PAGE {
            advise_huge_pages(block.cast::<u8>(), placed.size());
        }
        Ok(block)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: `ptr` was allocated by `allocate` with `placed(layout)`
        unsafe { Global.deallocate(ptr, placed(self.plain, layout)) }
    }
}

/// Advise the whole 2 MiB ranges of a 2 MiB-aligned block of `size` bytes onto huge pages.
#[cfg(target_os = "linux")]
fn advise_huge_pages(block: NonNull<u8>, size: usize) {
    let len = size & !(HUGE_PAGE - 1);
    // SAFETY: [block, block + len) lies inside a live allocation owned by the caller;
    // MADV_HUGEPAGE changes how the kernel backs the pages, never their contents. A
    // failure (a kernel without transparent huge pages) leaves ordinary pages.
    unsafe {
        libc::madvise(block.as_ptr().cast(), len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_block: NonNull<u8>, _size: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_aligned_and_usable_small_ones_are_not_moved() {
        for size in [16, 4096, HUGE_PAGE - 16, HUGE_PAGE, HUGE_PAGE + (128 << 10) + 16] {
            let layout = Layout::from_size_align(size, 16).unwrap();
            let block = TableAlloc::default().allocate(layout).unwrap();
            assert_eq!(block.len(), size);
            let p = block.cast::<u8>();
            if cfg!(target_os = "linux") && size >= HUGE_PAGE {
                assert_eq!(p.as_ptr() as usize % HUGE_PAGE, 0, "{size}");
            }
            // SAFETY: `size` bytes were allocated at `p`
            unsafe {
                std::ptr::write_bytes(p.as_ptr(), 0xA5, size);
                assert_eq!(*p.as_ptr().add(size - 1), 0xA5);
                TableAlloc::default().deallocate(p, layout);
            }
        }
    }
}
