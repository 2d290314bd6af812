//! The invariants stated in `floodgate_core::concurrency`: every algorithm keeps its limit
//! within `[min, max]` whatever it is fed, comes down under rising latency (or drops) and
//! recovers when latency returns to its baseline.

use std::time::Duration;

use floodgate_core::Nanos;
use floodgate_core::concurrency::{
    Aimd, AimdConfig, Gradient2, Gradient2Baseline, Gradient2Config, LimitAlgorithm, Sample, Vegas,
    VegasConfig, Windowed, WindowedConfig, check_range,
};
use proptest::prelude::*;

/// One of the algorithms, built from `(min, initial, max)` (valid by construction).
fn build(which: u8, min: usize, initial: usize, max: usize, seed: u64) -> Box<dyn LimitAlgorithm> {
    match which % 5 {
        0 => Box::new(
            Aimd::new(AimdConfig {
                initial,
                min,
                max,
                timeout: Duration::from_millis(100),
                ..AimdConfig::default()
            })
            .unwrap(),
        ),
        1 => Box::new(
            Vegas::new(VegasConfig {
                initial,
                min,
                max,
                seed,
                ..VegasConfig::default()
            })
            .unwrap(),
        ),
        2 => Box::new(
            Gradient2::new(Gradient2Config {
                initial,
                min,
                max,
                long_window: 100,
                ..Gradient2Config::default()
            })
            .unwrap(),
        ),
        4 => Box::new(
            Gradient2::new(Gradient2Config {
                initial,
                min,
                max,
                baseline: Gradient2Baseline::SERVER,
                ..Gradient2Config::default()
            })
            .unwrap(),
        ),
        _ => Box::new(Windowed::new(
            Gradient2::new(Gradient2Config {
                initial,
                min,
                max,
                long_window: 100,
                ..Gradient2Config::default()
            })
            .unwrap(),
            WindowedConfig {
                min_window: Duration::from_millis(1),
                max_window: Duration::from_millis(10),
                window_size: 3,
                min_rtt_threshold: Duration::ZERO,
            },
        )),
    }
}

fn range() -> impl Strategy<Value = (usize, usize, usize)> {
    (1usize..50, 0usize..100, 0usize..300).prop_map(|(min, a, b)| (min, min + a, min + a + b))
}

/// Feed `n` samples of `rtt`, each with the limit in use (`inflight = limit`), one per
/// `rtt` of time from `*now`; returns the limit after each.
fn feed(
    alg: &mut dyn LimitAlgorithm,
    now: &mut u64,
    rtt: Duration,
    n: usize,
    dropped: bool,
) -> Vec<usize> {
    (0..n)
        .map(|_| {
            let s = Sample {
                start: Nanos(*now),
                rtt,
                inflight: alg.limit(),
                dropped,
            };
            *now += rtt.as_nanos() as u64;
            alg.on_sample(&s)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any samples at all (zero and huge RTTs, any in-flight count, drops, any start):
    /// the limit stays within `[min, max]`, never 0.
    #[test]
    fn limit_stays_within_floor_and_ceiling(
        which in 0u8..5,
        (min, initial, max) in range(),
        seed in any::<u64>(),
        samples in prop::collection::vec(
            (any::<u64>(), 0u64..10_000_000_000, any::<usize>(), any::<bool>()), 1..300),
    ) {
        let mut alg = build(which, min, initial, max, seed);
        prop_assert!((min..=max).contains(&alg.limit()));
        for (start, rtt, inflight, dropped) in samples {
            let s = Sample { start: Nanos(start), rtt: Duration::from_nanos(rtt), inflight, dropped };
            let l = alg.on_sample(&s);
            prop_assert!(l >= min && l <= max && l >= 1, "limit {} outside [{}, {}]", l, min, max);
            prop_assert_eq!(l, alg.limit());
        }
    }

    /// Latency rising 10x (with drops for AIMD's sake) brings the limit down (or holds it
    /// at the floor, or at a small limit of 8 or less); back at the baseline latency it recovers: it ends above its low point,
    /// or at the ceiling.
    #[test]
    fn falls_under_rising_latency_and_recovers_at_baseline(
        which in 0u8..5,
        (min, initial, max) in range(),
        seed in any::<u64>(),
        base_ms in 1u64..50,
    ) {
        let mut alg = build(which, min, initial, max, seed);
        let base = Duration::from_millis(base_ms);
        let mut now = 1_000_000_000u64;
        // settle at the baseline, then the pressure
        feed(&mut *alg, &mut now, base, 200, false);
        let before = alg.limit();
        let under = feed(&mut *alg, &mut now, base * 10, 300, which % 5 == 0);
        let low = *under.iter().min().unwrap();
        // small limits may hold (module docs): Gradient2's headroom, Vegas's thresholds
        prop_assert!(low < before || low == min || before <= 8, "no fall: {} -> {}", before, low);
        let after = feed(&mut *alg, &mut now, base, 2000, false);
        let last = *after.last().unwrap();
        prop_assert!(last > low || last == max, "no recovery: low {}, end {}", low, last);
    }
}

#[test]
fn bad_ranges_are_errors_naming_the_values() {
    for (min, initial, max) in [(0, 1, 2), (3, 2, 4), (1, 5, 4)] {
        let e = check_range(min, initial, max).unwrap_err().to_string();
        assert!(e.contains(&format!("min ({min})")), "{e}");
        assert!(
            Aimd::new(AimdConfig {
                min,
                initial,
                max,
                ..AimdConfig::default()
            })
            .is_err()
        );
        assert!(
            Vegas::new(VegasConfig {
                min,
                initial,
                max,
                ..VegasConfig::default()
            })
            .is_err()
        );
        assert!(
            Gradient2::new(Gradient2Config {
                min,
                initial,
                max,
                ..Gradient2Config::default()
            })
            .is_err()
        );
    }
    let nan = Gradient2Config {
        smoothing: f64::NAN,
        ..Gradient2Config::default()
    };
    assert!(Gradient2::new(nan).is_err());
    let inf = Gradient2Config {
        rtt_tolerance: f64::INFINITY,
        ..Gradient2Config::default()
    };
    assert!(Gradient2::new(inf).is_err());
    for (round, rise, word) in [
        (0, 0.001, "round"),
        (20, f64::NAN, "rise"),
        (20, 1.5, "rise"),
    ] {
        let e = Gradient2::new(Gradient2Config {
            baseline: Gradient2Baseline::Floor { round, rise },
            ..Gradient2Config::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains(word), "{e}");
    }
    let ratio = AimdConfig {
        backoff_ratio: f64::NAN,
        ..AimdConfig::default()
    };
    assert!(Aimd::new(ratio).is_err());
}
