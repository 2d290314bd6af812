//! floodgate vs governor, same quota, same run: direct (one key) and keyed checks with
//! 1, 1k and 1M keys on 1 and 2 threads. `cargo bench -p floodgate-core --bench limiters`.
//!
//! Both use GCRA at 50/s with bursts of 50 and a clock that does not move (governor's
//! `FakeRelativeClock`; floodgate takes the instant as an argument), so after warm-up both
//! mostly answer "denied" through the same code path.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floodgate_core::algorithms::Gcra;
use floodgate_core::{AtomicGcra, KeyedLimiter, Limiter, Nanos, Rate};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};

const RATE: u32 = 50;

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(RATE).unwrap())
}

fn gcra() -> Gcra {
    Gcra::new(Rate::per_second(RATE as u64).unwrap(), RATE as u64).unwrap()
}

/// Distinct, well-spread u64 keys (splitmix64).
fn keys(n: usize) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect()
}

/// Run `per_thread(thread_index, iters)` on `threads` threads at once; wall time.
fn parallel(threads: usize, iters: u64, per_thread: impl Fn(usize, u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &per_thread;
            s.spawn(move || f(t, iters));
        }
    });
    start.elapsed()
}

fn direct(c: &mut Criterion) {
    let mut g = c.benchmark_group("direct");
    g.throughput(Throughput::Elements(1));
    let gov = RateLimiter::direct_with_clock(quota(), FakeRelativeClock::default());
    g.bench_function("governor", |b| b.iter(|| black_box(gov.check().is_ok())));
    let atomic = AtomicGcra::new(gcra());
    let now = Nanos::from_secs(1);
    g.bench_function("floodgate AtomicGcra", |b| {
        b.iter(|| black_box(atomic.check(black_box(now), 1).allowed))
    });
    let mutex = Limiter::new(gcra());
    g.bench_function("floodgate Limiter<Gcra>", |b| {
        b.iter(|| black_box(mutex.check(black_box(now), 1).allowed))
    });
    g.finish();
}

fn keyed(c: &mut Criterion) {
    for &n in &[1usize, 1_000, 1_000_000] {
        let ks = keys(n);
        let gov = RateLimiter::dashmap_with_clock(quota(), FakeRelativeClock::default());
        let fg: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(gcra(), 2 * n.max(256)).unwrap();
        let now = Nanos::from_secs(1);
        for k in &ks {
            let _ = gov.check_key(k);
            fg.check(k, now, 1);
        }
        let mut g = c.benchmark_group(format!("keyed/{n} keys"));
        if n == 1_000_000 {
            g.sample_size(20);
        }
        for threads in [1usize, 2] {
            g.throughput(Throughput::Elements(threads as u64));
            g.bench_function(
                BenchmarkId::new("governor", format!("{threads} threads")),
                |b| {
                    b.iter_custom(|iters| {
                        parallel(threads, iters, |t, iters| {
                            let mut i = t * n / threads;
                            for _ in 0..iters {
                                black_box(gov.check_key(&ks[i]).is_ok());
                                i += 1;
                                if i == n {
                                    i = 0;
                                }
                            }
                        })
                    })
                },
            );
            g.bench_function(
                BenchmarkId::new("floodgate", format!("{threads} threads")),
                |b| {
                    b.iter_custom(|iters| {
                        parallel(threads, iters, |t, iters| {
                            let mut i = t * n / threads;
                            for _ in 0..iters {
                                black_box(fg.check(&ks[i], now, 1).allowed);
                                i += 1;
                                if i == n {
                                    i = 0;
                                }
                            }
                        })
                    })
                },
            );
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = direct, keyed
}
criterion_main!(benches);
