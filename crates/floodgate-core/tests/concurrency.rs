//! Many threads on one key admit exactly what one thread would: zero overshoot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use floodgate_core::algorithms::{Gcra, SlidingLog, TokenBucket};
use floodgate_core::multi::{Check, check_all};
use floodgate_core::{Algorithm, AnyAlgorithm, AtomicGcra, KeyedLimiter, Limiter, Nanos, Rate};

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

/// [`THREADS`] threads make 5 checks each per round while time moves 1 ms per round,
/// with `set` called by every thread between rounds (it may replace the algorithm with
/// one deciding the same); the total admitted must equal what `single` admits from the
/// same calls on one thread.
fn moving_time_exactness<L: Send + Sync + 'static, A: Algorithm>(
    l: L,
    check: fn(&L, Nanos) -> bool,
    set: fn(&L, usize, u64),
    single: A,
) {
    let l = Arc::new(l);
    let admitted = Arc::new(AtomicU64::new(0));
    let rounds = 2_000u64;
    let barrier = Arc::new(std::sync::Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (l, admitted, barrier) = (l.clone(), admitted.clone(), barrier.clone());
            thread::spawn(move || {
                for r in 0..rounds {
                    barrier.wait();
                    let now = Nanos(1_000_000_000 + r * 1_000_000);
                    for _ in 0..5 {
                        if check(&l, now) {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    set(&l, t, r);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // a single thread doing the same calls in the same rounds
    let mut s = Default::default();
    let mut expected = 0;
    for r in 0..rounds {
        let now = Nanos(1_000_000_000 + r * 1_000_000);
        for _ in 0..THREADS * 5 {
            expected += u64::from(single.check(&mut s, now, 1).allowed);
        }
    }
    assert_eq!(admitted.load(Ordering::Relaxed), expected);
}

/// 100/s (one new unit per 10 ms), bursts of 50, built two ways that admit alike but
/// differ in their parameters (redis-cell's way counts `remaining` from whole
/// microseconds): replacing one by the other must not change what is admitted.
fn gcra_100_50(cell: bool) -> Gcra {
    if cell {
        Gcra::from_cell(49, 100, 1).unwrap()
    } else {
        Gcra::new(Rate::per_second(100).unwrap(), 50).unwrap()
    }
}

#[test]
fn atomic_gcra_has_zero_overshoot_with_time_moving() {
    moving_time_exactness(
        AtomicGcra::new(gcra_100_50(false)),
        |l, now| l.check(now, 1).allowed,
        |_, _, _| {},
        gcra_100_50(false),
    );
}

#[test]
fn limiter_gcra_has_zero_overshoot_with_time_moving_and_set_algorithm_racing() {
    moving_time_exactness(
        Limiter::new(gcra_100_50(false)),
        |l, now| l.check(now, 1).allowed,
        // thread 0 replaces the parameters while the others check
        |l, t, r| {
            if t == 0 {
                l.set_algorithm(gcra_100_50(r % 2 == 0))
            }
        },
        gcra_100_50(false),
    );
}

#[test]
fn limiter_any_gcra_has_zero_overshoot_with_time_moving_and_set_algorithm_racing() {
    moving_time_exactness(
        Limiter::new(AnyAlgorithm::Gcra(gcra_100_50(false))),
        |l, now| l.check(now, 1).allowed,
        |l, t, r| {
            if t == THREADS - 1 {
                l.set_algorithm(AnyAlgorithm::Gcra(gcra_100_50(r % 2 == 1)))
            }
        },
        gcra_100_50(false),
    );
}

#[test]
fn limiter_sliding_log_has_zero_overshoot_with_time_moving() {
    // a sliding log of 50 per 500 ms admits differently from the GCRA
    let log = || SlidingLog::new(50, std::time::Duration::from_millis(500)).unwrap();
    moving_time_exactness(
        Limiter::new(AnyAlgorithm::SlidingLog(log())),
        |l, now| l.check(now, 1).allowed,
        |_, _, _| {},
        log(),
    );
}

/// Parameter sets of [`torn_parameters`].
const PARAM_SETS: u64 = 5;

/// Parameter set `k` of [`torn_parameters`]: capacity `2 + k`,
/// an emission interval of `(k + 1)` us; a mix of two sets' words is seen in the
/// decision on a fresh key.
fn param_set(k: u64) -> Gcra {
    Gcra::new(Rate::from_nanos(1, (k + 1) * 1_000).unwrap(), 2 + k).unwrap()
}

/// A thread replaces the algorithm (`make(i)` for the i-th time) while two threads peek
/// at a fresh key: every decision must be of one parameter set (or the sliding log of 7).
/// The peeks start once the first replacement is made and go on until each thread has
/// made 200,000, seen 100 GCRA decisions and seen a replacement made meanwhile (the
/// replacing thread may be descheduled at any point), at most 5M; the replacements go
/// on until the peeks are done, at most 10M.
fn torn_parameters<A: Algorithm + 'static>(first: A, make: fn(u64) -> A) {
    let l = Arc::new(Limiter::new(first));
    let made = Arc::new(AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let setter = {
        let (l, made, done) = (l.clone(), made.clone(), done.clone());
        thread::spawn(move || {
            for i in 1..=10_000_000 {
                l.set_algorithm(make(i));
                made.store(i, Ordering::Release);
                if done.load(Ordering::Relaxed) {
                    break;
                }
            }
        })
    };
    let checkers: Vec<_> = (0..2)
        .map(|_| {
            let (l, made) = (l.clone(), made.clone());
            thread::spawn(move || {
                while made.load(Ordering::Acquire) == 0 {
                    thread::yield_now();
                }
                let made_before = made.load(Ordering::Acquire);
                let (mut peeks, mut gcra_seen) = (0u64, 0u64);
                while peeks < 5_000_000
                    && (peeks < 200_000
                        || gcra_seen < 100
                        || made.load(Ordering::Acquire) == made_before)
                {
                    peeks += 1;
                    // peeks consume nothing: the key stays fresh
                    let d = l.peek(Nanos(1_000_000_000), 1);
                    if d.limit == 7 {
                        continue; // the sliding log
                    }
                    let k = d.limit - 2;
                    assert!(k < PARAM_SETS, "limit {} of no set", d.limit);
                    assert_eq!(d.remaining, d.limit - 1, "set {k}: {d:?}");
                    let t_ns = u128::from(k + 1) * 1_000;
                    assert_eq!(d.reset_after.as_nanos(), t_ns, "set {k}: {d:?}");
                    gcra_seen += 1;
                }
                let made_during = made.load(Ordering::Acquire) - made_before;
                (peeks, gcra_seen, made_during)
            })
        })
        .collect();
    let seen: Vec<_> = checkers.into_iter().map(|c| c.join().unwrap()).collect();
    done.store(true, Ordering::Relaxed);
    setter.join().unwrap();
    for (peeks, gcra_seen, made_during) in seen {
        assert!(
            gcra_seen >= 100 && made_during > 0,
            "{peeks} peeks, {gcra_seen} of a GCRA, {made_during} replacements meanwhile"
        );
    }
}

#[test]
fn limiter_checks_never_see_torn_parameters() {
    torn_parameters(param_set(0), |i| param_set(i % PARAM_SETS));
    // every fourth replacement switches to another algorithm and back
    torn_parameters(AnyAlgorithm::Gcra(param_set(0)), |i| {
        if i % 4 == 0 {
            AnyAlgorithm::SlidingLog(SlidingLog::new(7, std::time::Duration::from_secs(1)).unwrap())
        } else {
            AnyAlgorithm::Gcra(param_set(i % PARAM_SETS))
        }
    });
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
