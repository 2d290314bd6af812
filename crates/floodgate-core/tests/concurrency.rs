//! Many threads on one key admit exactly what one thread would: zero overshoot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use floodgate_core::algorithms::{Gcra, TokenBucket};
use floodgate_core::multi::{Check, check_all};
use floodgate_core::{Algorithm, AtomicGcra, KeyedLimiter, Nanos, Rate};

const THREADS: usize = 8;
const CALLS: usize = 20_000;

/// Every thread hammers key 42 at one instant; the total admitted must equal what a
/// single thread admits from the same calls (the burst capacity, exactly).
fn hammer<A: Algorithm + 'static>(alg: A, single: A) {
    let limiter = Arc::new(KeyedLimiter::<u64, A>::new(alg, 1000).unwrap());
    let admitted = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            thread::spawn(move || {
                for _ in 0..CALLS {
                    if limiter.check(&42, Nanos(1_000_000_000), 1).allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut state = A::State::default();
    let expected = (0..THREADS * CALLS)
        .filter(|_| single.check(&mut state, Nanos(1_000_000_000), 1).allowed)
        .count() as u64;
    assert_eq!(admitted.load(Ordering::Relaxed), expected);
}

#[test]
fn gcra_keyed_has_zero_overshoot() {
    let g = || Gcra::new(Rate::per_second(100).unwrap(), 500).unwrap();
    hammer(g(), g());
}

#[test]
fn token_bucket_keyed_has_zero_overshoot() {
    let b = || TokenBucket::new(777, Rate::per_second(100).unwrap()).unwrap();
    hammer(b(), b());
}

#[test]
fn atomic_gcra_has_zero_overshoot_with_time_moving() {
    // time moves 1 ms per round; rate 100/s means one new unit per 10 ms
    let l = Arc::new(AtomicGcra::new(
        Gcra::new(Rate::per_second(100).unwrap(), 50).unwrap(),
    ));
    let admitted = Arc::new(AtomicU64::new(0));
    let rounds = 2_000u64;
    let barrier = Arc::new(std::sync::Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (l, admitted, barrier) = (l.clone(), admitted.clone(), barrier.clone());
            thread::spawn(move || {
                for r in 0..rounds {
                    barrier.wait();
                    let now = Nanos(1_000_000_000 + r * 1_000_000);
                    for _ in 0..5 {
                        if l.check(now, 1).allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // a single thread doing the same calls in the same rounds
    let g = Gcra::new(Rate::per_second(100).unwrap(), 50).unwrap();
    let mut s = Default::default();
    let mut expected = 0;
    for r in 0..rounds {
        let now = Nanos(1_000_000_000 + r * 1_000_000);
        for _ in 0..THREADS * 5 {
            expected += u64::from(g.check(&mut s, now, 1).allowed);
        }
    }
    assert_eq!(admitted.load(Ordering::Relaxed), expected);
}

#[test]
fn check_all_across_threads_never_over_admits_either_policy() {
    let per_client: Arc<KeyedLimiter<u64, Gcra>> = Arc::new(
        KeyedLimiter::new(Gcra::new(Rate::per_minute(100).unwrap(), 30).unwrap(), 1000).unwrap(),
    );
    let global: Arc<KeyedLimiter<u64, Gcra>> = Arc::new(
        KeyedLimiter::new(Gcra::new(Rate::per_minute(100).unwrap(), 100).unwrap(), 1).unwrap(),
    );
    let admitted_per_client: Arc<Vec<AtomicU64>> =
        Arc::new((0..8).map(|_| AtomicU64::new(0)).collect());
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (pc, gl, counts) = (
                per_client.clone(),
                global.clone(),
                admitted_per_client.clone(),
            );
            thread::spawn(move || {
                for n in 0..2_000u64 {
                    let client = (i as u64 + n) % 8;
                    let r = check_all(
                        &[
                            Check {
                                limiter: &*pc,
                                key: &client,
                                cost: 1,
                            },
                            Check {
                                limiter: &*gl,
                                key: &0,
                                cost: 1,
                            },
                        ],
                        Nanos(5_000_000_000),
                    );
                    if r.allowed {
                        counts[client as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let per: Vec<u64> = admitted_per_client
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let total: u64 = per.iter().sum();
    assert_eq!(total, 100, "the global burst is admitted exactly: {per:?}");
    assert!(per.iter().all(|&n| n <= 30), "{per:?}");
    // and what was admitted is exactly what was charged
    let remaining: u64 = (0..8u64)
        .map(|c| 30 - per_client.peek(&c, Nanos(5_000_000_000), 0).remaining)
        .sum();
    assert_eq!(remaining, total);
}
