//! Several threads hammering one key, and 1k keys, while the clock moves: every key admits
//! exactly what a single thread admits making the same calls, for every algorithm.
//!
//! The threads make their calls in rounds; the clock moves between rounds (all threads
//! read the same instant within one). With a cost of 1 and one instant, a key admits
//! `min(calls, capacity left)` whatever the order of the calls, so the single-threaded
//! model (the same calls, round by round, on plain states) gives the exact count each key
//! must have admitted; a lost update or a double admission shows as a difference.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use floodgate_core::algorithms::Gcra;
use floodgate_core::{Algorithm, KeyedLimiter, Kind, Nanos, Rate, Spec};

const THREADS: usize = 4;
const ROUNDS: u64 = 150;
/// The clock moves 7 ms per round: at 20/s a unit comes back every 50 ms.
const STEP_NS: u64 = 7_000_000;
const START_NS: u64 = 1_000_000_000_000;

/// The key thread `t` asks for in its `i`th call of round `r` (deterministic, spread).
fn key(t: usize, r: u64, i: usize, keys: u64) -> u64 {
    let mut z = (t as u64) << 48 ^ r << 20 ^ i as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % keys
}

fn now(r: u64) -> Nanos {
    Nanos(START_NS + r * STEP_NS)
}

/// Admitted per key when `THREADS` threads make `calls` calls each per round on `keys`
/// keys, against the single-threaded model of the same calls.
fn hammer<A: Algorithm + Clone + 'static>(alg: A, keys: u64, calls: usize) -> (u64, u64) {
    let limiter = Arc::new(KeyedLimiter::<u64, A>::new(alg.clone(), 10_000).unwrap());
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (limiter, admitted, barrier) = (limiter.clone(), admitted.clone(), barrier.clone());
            thread::spawn(move || {
                for r in 0..ROUNDS {
                    barrier.wait();
                    for i in 0..calls {
                        let k = key(t, r, i, keys);
                        if limiter.check(&k, now(r), 1).allowed {
                            admitted[k as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut states: HashMap<u64, A::State> = HashMap::new();
    let mut expected = vec![0u64; keys as usize];
    for r in 0..ROUNDS {
        for t in 0..THREADS {
            for i in 0..calls {
                let k = key(t, r, i, keys);
                let state = states.entry(k).or_default();
                expected[k as usize] += u64::from(alg.check(state, now(r), 1).allowed);
            }
        }
    }
    let got: Vec<u64> = admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let differ = (0..keys as usize)
        .filter(|&k| got[k] != expected[k])
        .count();
    assert_eq!(
        differ, 0,
        "{differ} of {keys} keys admitted other than the model"
    );
    assert_eq!(limiter.stats().evicted, 0, "the cap was never reached");
    let total: u64 = expected.iter().sum();
    (total, (ROUNDS * (THREADS * calls) as u64))
}

fn every_algorithm() -> Vec<(Kind, floodgate_core::AnyAlgorithm)> {
    Kind::ALL
        .into_iter()
        .map(|kind| {
            let mut spec = Spec::new(kind, Rate::per_second(20).unwrap());
            spec.capacity = Some(5);
            (kind, spec.build().unwrap())
        })
        .collect()
}

#[test]
fn one_key_many_threads_moving_clock_admits_exactly_the_model() {
    for (kind, alg) in every_algorithm() {
        let (admitted, calls) = hammer(alg, 1, 20);
        // some admitted, most denied: the hammering decided something
        assert!(
            admitted > 0 && admitted < calls / 2,
            "{kind}: {admitted} of {calls}"
        );
    }
    let (admitted, calls) = hammer(Gcra::new(Rate::per_second(20).unwrap(), 5).unwrap(), 1, 20);
    assert!(
        admitted > 0 && admitted < calls / 2,
        "{admitted} of {calls}"
    );
}

#[test]
fn thousand_keys_many_threads_moving_clock_admit_exactly_the_model() {
    for (kind, alg) in every_algorithm() {
        let (admitted, calls) = hammer(alg, 1_000, 300);
        // both answers are common: each key is asked ~1.2 times per round (7 ms)
        assert!(
            admitted > calls / 10 && admitted < calls * 9 / 10,
            "{kind}: {admitted} of {calls}"
        );
    }
    let (admitted, calls) = hammer(
        Gcra::new(Rate::per_second(20).unwrap(), 5).unwrap(),
        1_000,
        300,
    );
    assert!(
        admitted > calls / 10 && admitted < calls * 9 / 10,
        "{admitted} of {calls}"
    );
}
