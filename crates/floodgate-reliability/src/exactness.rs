//! Exactness under load: many threads on one key, every decision audited.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use floodgate_core::{Algorithm, AnyAlgorithm, KeyedLimiter, Kind, Nanos, Rate, Spec};

use crate::{Row, mem};

/// `threads` threads each make `per_round` checks on one key in each of `rounds` rounds;
/// all checks of a round happen at one instant (rounds are `step` apart), so the audit
/// knows every admitted request's time exactly. The audit is independent of the limiter:
/// it replays nothing, it only checks the admitted timestamps against the guarantee.
pub fn audit(kind: Kind, threads: usize, rounds: u64, per_round: u64) -> Row {
    let start = mem::rss_kib();
    let rate = Rate::new(50, Duration::from_secs(1)).expect("valid");
    let spec = Spec {
        capacity: Some(10),
        ..Spec::new(kind, rate)
    };
    let alg: AnyAlgorithm = spec.build().expect("valid");
    let limiter =
        Arc::new(KeyedLimiter::<u64, AnyAlgorithm>::new(alg.clone(), 1024).expect("valid"));
    let step = 7_000_000u64; // 7 ms between rounds
    let admitted_per_round: Arc<Vec<AtomicU64>> =
        Arc::new((0..rounds).map(|_| AtomicU64::new(0)).collect());
    let answered = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(threads));
    let panics = Arc::new(Mutex::new(0u64));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (l, per, ans, bar, pan) = (
                limiter.clone(),
                admitted_per_round.clone(),
                answered.clone(),
                barrier.clone(),
                panics.clone(),
            );
            std::thread::spawn(move || {
                for r in 0..rounds {
                    bar.wait();
                    let now = Nanos(1_000_000_000 + r * step);
                    for _ in 0..per_round {
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            l.check(&7, now, 1)
                        })) {
                            Ok(d) => {
                                ans.fetch_add(1, Ordering::Relaxed);
                                if d.allowed {
                                    per[r as usize].fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(_) => *pan.lock().expect("not poisoned") += 1,
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    let counts: Vec<u64> = admitted_per_round
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    let requests = threads as u64 * rounds * per_round;
    let answered = answered.load(Ordering::Relaxed);
    // the guarantee, checked on every span of rounds
    let w = rate.period_nanos();
    let mut violations = 0u64;
    let mut worst = 0i64;
    for i in 0..counts.len() {
        let mut sum = 0u64;
        for (j, c) in counts.iter().enumerate().skip(i) {
            let span = (j - i) as u64 * step;
            sum += c;
            let bound = match kind {
                Kind::SlidingLog if span < w => 50,
                Kind::FixedWindow | Kind::SlidingCounter => {
                    // per aligned window only
                    let (wi, wj) = (
                        (1_000_000_000 + i as u64 * step) / w,
                        (1_000_000_000 + j as u64 * step) / w,
                    );
                    if wi != wj {
                        continue;
                    }
                    50
                }
                Kind::SlidingLog => continue,
                _ => 10 + (span as u128 * 50 / w as u128) as u64,
            };
            if sum > bound {
                violations += 1;
                worst = worst.max(sum as i64 - bound as i64);
            }
        }
    }
    // and the charge matches the admissions: what the limiter has left equals what a
    // single-threaded replay of the same per-round counts leaves
    let mut replay = Default::default();
    for (r, c) in counts.iter().enumerate() {
        for _ in 0..*c {
            alg.check(&mut replay, Nanos(1_000_000_000 + r as u64 * step), 1);
        }
    }
    let end = Nanos(1_000_000_000 + rounds * step);
    let left = limiter.peek(&7, end, 0).remaining;
    let replay_left = alg.peek(&replay, end, 0).remaining;
    let panics = *panics.lock().expect("not poisoned");
    Row {
        area: "exactness",
        case: format!("{kind}: {threads} threads x {rounds} rounds x {per_round}"),
        cases: 1,
        faults: 0,
        requests,
        lost: requests - answered,
        duplicated: violations,
        panics,
        mem_start_kib: start,
        mem_end_kib: mem::rss_kib(),
        pass: violations == 0 && answered == requests && left == replay_left && panics == 0,
        detail: format!(
            "{} admitted; spans over the guarantee: {violations} (worst +{worst}); remaining after {left} = replay {replay_left}",
            counts.iter().sum::<u64>()
        ),
    }
}
