//! The adaptive limiter against a backend whose latency grows with its concurrency:
//! `latency = base + k x max(0, inflight - knee)`. Runs on tokio's paused clock (virtual
//! time), so minutes of traffic take well under a second and the result is deterministic.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use floodgate_client::TokioElapsedClock;
use floodgate_client::concurrency::{
    AdaptiveLimiter, Aimd, AimdConfig, Gradient2, Gradient2Config, LimitAlgorithm, Vegas,
    VegasConfig, Windowed, WindowedConfig,
};

struct Backend {
    inflight: AtomicUsize,
    knee: AtomicUsize,
    base: Duration,
    per_extra: Duration,
}

impl Backend {
    fn new(knee: usize, base_ms: u64, per_extra_ms: u64) -> Arc<Self> {
        Arc::new(Backend {
            inflight: AtomicUsize::new(0),
            knee: AtomicUsize::new(knee),
            base: Duration::from_millis(base_ms),
            per_extra: Duration::from_millis(per_extra_ms),
        })
    }

    async fn serve(&self) {
        let n = self.inflight.fetch_add(1, Ordering::SeqCst) + 1;
        let extra = n.saturating_sub(self.knee.load(Ordering::SeqCst)) as u32;
        tokio::time::sleep(self.base + self.per_extra * extra).await;
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Run `workers` closed-loop clients through `limiter` against `backend` for `secs` of
/// virtual time; returns the limit sampled every 100 ms.
async fn drive(
    limiter: &AdaptiveLimiter,
    backend: &Arc<Backend>,
    workers: usize,
    secs: u64,
) -> Vec<usize> {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (l, b, stop) = (limiter.clone(), backend.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let permit = l.acquire().await;
                    b.serve().await;
                    permit.success();
                }
            })
        })
        .collect();
    let mut trace = Vec::new();
    for _ in 0..secs * 10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            limiter.inflight() <= limiter.limit().max(1) + workers,
            "sanity"
        );
        trace.push(limiter.limit());
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.abort();
    }
    trace
}

fn mean(xs: &[usize]) -> f64 {
    xs.iter().sum::<usize>() as f64 / xs.len() as f64
}

fn spread(xs: &[usize]) -> usize {
    xs.iter().max().unwrap() - xs.iter().min().unwrap()
}

fn limiter(alg: impl LimitAlgorithm + 'static) -> AdaptiveLimiter {
    AdaptiveLimiter::new(alg, Arc::new(TokioElapsedClock::new()))
}

#[tokio::test(start_paused = true)]
async fn vegas_converges_near_the_knee_and_comes_down_when_latency_climbs() {
    let backend = Backend::new(40, 50, 5);
    let l = limiter(Windowed::new(
        Vegas::new(VegasConfig {
            initial: 5,
            max: 500,
            seed: 1,
            ..VegasConfig::default()
        })
        .unwrap(),
        WindowedConfig {
            min_window: Duration::from_millis(100),
            max_window: Duration::from_millis(500),
            ..WindowedConfig::default()
        },
    ));
    let first = drive(&l, &backend, 120, 30).await;
    let settled = mean(&first[first.len() - 100..]);
    println!(
        "vegas knee 40: settled at {settled:.1}; trace {:?}",
        &first[first.len() - 40..]
    );
    assert!((36.0..=50.0).contains(&settled), "settled at {settled}");
    assert!(spread(&first[first.len() - 100..]) <= 4, "not settled");
    // Latency climbs: the knee moves down to 15.
    backend.knee.store(15, Ordering::SeqCst);
    let second = drive(&l, &backend, 120, 30).await;
    let after = mean(&second[second.len() - 100..]);
    println!(
        "vegas knee 15: settled at {after:.1}; trace {:?}",
        &second[second.len() - 40..]
    );
    assert!(after < settled * 0.7, "{after} vs {settled}");
    assert!((12.0..=25.0).contains(&after), "settled at {after}");
    assert!(spread(&second[second.len() - 100..]) <= 4, "not settled");
}

#[tokio::test(start_paused = true)]
async fn gradient2_converges_near_the_knee_and_comes_down_when_latency_climbs() {
    let backend = Backend::new(40, 50, 5);
    // Gradient2 counts its long window in samples, so it is used windowed (as
    // concurrency-limits recommends): one aggregated sample per window.
    let l = limiter(Windowed::new(
        Gradient2::new(Gradient2Config {
            initial: 5,
            min: 1,
            max: 500,
            ..Gradient2Config::default()
        })
        .unwrap(),
        WindowedConfig {
            min_window: Duration::from_millis(100),
            max_window: Duration::from_millis(500),
            ..WindowedConfig::default()
        },
    ));
    let first = drive(&l, &backend, 120, 30).await;
    let settled = mean(&first[first.len() - 100..]);
    println!(
        "gradient2 knee 40: settled at {settled:.1}; trace {:?}",
        &first[first.len() - 40..]
    );
    backend.knee.store(15, Ordering::SeqCst);
    let second = drive(&l, &backend, 120, 30).await;
    let after = mean(&second[second.len() - 100..]);
    println!(
        "gradient2 knee 15: settled at {after:.1}; trace {:?}",
        &second[second.len() - 40..]
    );
    assert!((36.0..=60.0).contains(&settled), "settled at {settled}");
    assert!(spread(&first[first.len() - 100..]) <= 4, "not settled");
    assert!(
        after < 20.0 && after < settled * 0.5,
        "{after} vs {settled}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_fixed_latency_every_algorithm_grows_to_its_max() {
    let flat = || Backend::new(usize::MAX, 50, 0);
    let cases: Vec<(&str, AdaptiveLimiter, usize)> = vec![
        (
            "aimd",
            limiter(
                Aimd::new(AimdConfig {
                    initial: 5,
                    min: 1,
                    max: 150,
                    ..AimdConfig::default()
                })
                .unwrap(),
            ),
            150,
        ),
        (
            "vegas",
            limiter(
                Vegas::new(VegasConfig {
                    initial: 5,
                    max: 150,
                    ..VegasConfig::default()
                })
                .unwrap(),
            ),
            150,
        ),
        (
            "gradient2",
            limiter(
                Gradient2::new(Gradient2Config {
                    initial: 5,
                    min: 1,
                    max: 150,
                    ..Gradient2Config::default()
                })
                .unwrap(),
            ),
            150,
        ),
        (
            "windowed gradient2",
            limiter(Windowed::new(
                Gradient2::new(Gradient2Config {
                    initial: 5,
                    min: 1,
                    max: 150,
                    ..Gradient2Config::default()
                })
                .unwrap(),
                WindowedConfig {
                    min_window: Duration::from_millis(50),
                    max_window: Duration::from_millis(50),
                    ..WindowedConfig::default()
                },
            )),
            150,
        ),
    ];
    for (name, l, max) in cases {
        let trace = drive(&l, &flat(), 300, 20).await;
        println!("{name}: {:?}", &trace[..20]);
        assert_eq!(*trace.last().unwrap(), max, "{name}");
    }
}
