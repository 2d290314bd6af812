//! Bytes per key at 1M keys, floodgate vs governor, counted by a wrapping global allocator
//! (every byte the limiter and its map allocate, nothing estimated).
//! `cargo bench -p floodgate-core --bench memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};

use floodgate_core::algorithms::Gcra;
use floodgate_core::{KeyedLimiter, Nanos, Rate};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const N: u64 = 1_000_000;

fn measure<T>(build: impl FnOnce() -> T) -> (T, f64) {
    let before = LIVE.load(Ordering::SeqCst);
    let t = build();
    let after = LIVE.load(Ordering::SeqCst);
    (t, (after - before) as f64 / N as f64)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` compatibility
    }
    let rate = Rate::per_second(50).unwrap();
    let now = Nanos::from_secs(1);
    let (fg, fg_bytes) = measure(|| {
        let l: KeyedLimiter<u64, Gcra> =
            KeyedLimiter::new(Gcra::new(rate, 50).unwrap(), 2_000_000).unwrap();
        for k in 0..N {
            l.check(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15), now, 1);
        }
        l
    });
    assert_eq!(fg.len() as u64, N, "every key held");
    let (capped, capped_bytes) = measure(|| {
        let l: KeyedLimiter<u64, Gcra> =
            KeyedLimiter::new(Gcra::new(rate, 50).unwrap(), N as usize).unwrap();
        for k in 0..N {
            l.check(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15), now, 1);
        }
        l
    });
    let (gov, gov_bytes) = measure(|| {
        let l = RateLimiter::dashmap_with_clock(
            Quota::per_second(NonZeroU32::new(50).unwrap()),
            FakeRelativeClock::default(),
        );
        for k in 0..N {
            let _ = l.check_key(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
        l
    });
    assert_eq!(gov.len() as u64, N);
    println!("bytes per key at 1M u64 keys (GCRA, map included)");
    println!("{:<44} {:>10}", "limiter", "bytes/key");
    println!(
        "{:<44} {:>10.1}",
        "governor 0.10 keyed (DashMap)", gov_bytes
    );
    println!(
        "{:<44} {:>10.1}",
        "floodgate KeyedLimiter, cap 2M (1M held)", fg_bytes
    );
    println!(
        "{:<44} {:>10.1}",
        format!("floodgate KeyedLimiter, cap 1M ({} held)", capped.len()),
        capped_bytes
    );
    println!("ratio governor / floodgate: {:.2}", gov_bytes / fg_bytes);
    drop((fg, capped, gov));
}
