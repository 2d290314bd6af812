//! Variants of `AtomicGcra`'s compare-and-swap loop, for two threads on one key.

use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_core::algorithms::{Gcra, GcraState};
use floodgate_core::{Algorithm, Nanos};

#[repr(align(128))]
pub struct XGcra {
    gcra: Gcra,
    tat: AtomicU64,
    mode: u8,
}

#[inline(always)]
fn prefetchw(p: *const AtomicU64) {
    unsafe { std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly)) }
}

impl XGcra {
    pub fn new(gcra: Gcra, mode: u8) -> Self {
        XGcra { gcra, tat: AtomicU64::new(0), mode }
    }

    #[inline(always)]
    pub fn check(&self, now: Nanos) -> bool {
        let m = self.mode;
        if m & 1 != 0 {
            prefetchw(&self.tat);
        }
        let mut current = if m & 8 != 0 { self.tat.fetch_add(0, Ordering::AcqRel) } else { self.tat.load(Ordering::Acquire) };
        loop {
            let state = GcraState { tat: Nanos(current) };
            let (d, pending) = self.gcra.decide(&state, now, 1);
            let Some(next) = pending else { return d.allowed };
            let r = if m & 4 != 0 {
                self.tat.compare_exchange(current, next.0, Ordering::AcqRel, Ordering::Acquire)
            } else {
                self.tat.compare_exchange_weak(current, next.0, Ordering::AcqRel, Ordering::Acquire)
            };
            match r {
                Ok(_) => return d.allowed,
                Err(actual) => {
                    current = actual;
                    if m & 2 != 0 {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }
}
