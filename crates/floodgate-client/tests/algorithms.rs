//! Deterministic checks of AIMD, Vegas, Gradient2 and the windowed wrapper against the
//! formulas of concurrency-limits (as stated in shared/reference.md), on synthetic RTTs.

use std::time::Duration;

use floodgate_client::concurrency::{
    Aimd, AimdConfig, ExpAvg, Gradient2, Gradient2Config, LimitAlgorithm, Sample, Vegas,
    VegasConfig, Windowed, WindowedConfig, log10_root,
};
use floodgate_core::Nanos;

fn ms(x: f64) -> Duration {
    Duration::from_secs_f64(x / 1000.0)
}

fn s(rtt_ms: f64, inflight: usize, dropped: bool) -> Sample {
    Sample {
        start: Nanos::ZERO,
        rtt: ms(rtt_ms),
        inflight,
        dropped,
    }
}

#[test]
fn defaults_match_concurrency_limits() {
    let a = AimdConfig::default();
    assert_eq!(
        (a.initial, a.min, a.max, a.backoff_ratio, a.timeout),
        (20, 20, 200, 0.9, Duration::from_secs(5))
    );
    let v = VegasConfig::default();
    assert_eq!(
        (v.initial, v.max, v.smoothing, v.probe_multiplier),
        (20, 1000, 1.0, 30)
    );
    let g = Gradient2Config::default();
    assert_eq!(
        (
            g.initial,
            g.min,
            g.max,
            g.smoothing,
            g.rtt_tolerance,
            g.queue_size,
            g.long_window
        ),
        (20, 20, 200, 0.2, 1.5, 4, 600)
    );
    let w = WindowedConfig::default();
    assert_eq!(
        (w.min_window, w.max_window, w.window_size),
        (Duration::from_secs(1), Duration::from_secs(1), 10)
    );
}

#[test]
fn aimd_sequence() {
    let mut a = Aimd::new(AimdConfig {
        initial: 10,
        min: 5,
        max: 13,
        ..AimdConfig::default()
    })
    .unwrap();
    // inflight x 2 >= limit: +1 each, capped at 13.
    let got: Vec<usize> = (0..5).map(|_| a.on_sample(&s(10.0, 7, false))).collect();
    assert_eq!(got, [11, 12, 13, 13, 13]);
    // App-limited: 6 x 2 < 13, unchanged.
    assert_eq!(a.on_sample(&s(10.0, 6, false)), 13);
    // Drop: floor(13 x 0.9) = 11; timeout counts as a drop: floor(11 x 0.9) = 9.
    assert_eq!(a.on_sample(&s(10.0, 13, true)), 11);
    assert_eq!(a.on_sample(&s(6000.0, 13, false)), 9);
    // Repeated drops stop at min.
    for _ in 0..20 {
        a.on_sample(&s(1.0, 1, true));
    }
    assert_eq!(a.limit(), 5);
}

#[test]
fn log10_root_is_real_and_at_least_one() {
    let got = [1.0, 9.0, 10.0, 20.0, 150.0, 1000.0, 0.0].map(log10_root);
    let want = [1.0, 1.0, 1.0, 1.301_03, 2.176_09, 3.0, 1.0];
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?}");
    }
}

fn vegas(initial: usize, smoothing: f64) -> Vegas {
    Vegas::new(VegasConfig {
        initial,
        smoothing,
        probe_multiplier: 0, // no probing: exact sequences
        ..VegasConfig::default()
    })
    .unwrap()
}

#[test]
fn vegas_each_branch() {
    // L = max(1, log10(limit)), real-valued: 1.301 at 20, 1.444 at 27.8, 1.421 at 26.4.
    let mut v = vegas(20, 1.0);
    // First sample only sets rtt_noload.
    assert_eq!(v.on_sample(&s(10.0, 20, false)), 20);
    assert_eq!(v.rtt_noload(), ms(10.0));
    // queue = ceil(20 x (1 - 10/10)) = 0 <= L: + beta = 6 x 1.30103 -> 27.806.
    assert_eq!(v.on_sample(&s(10.0, 20, false)), 27);
    assert!(
        (v.estimated() - 27.806_18).abs() < 1e-4,
        "{}",
        v.estimated()
    );
    // queue = ceil(27.806 x (1 - 10/20)) = 14 > beta (8.66): - L (1.444) -> 26.362.
    assert_eq!(v.on_sample(&s(20.0, 27, false)), 26);
    // queue = ceil(26.362 x (1 - 10/12.5)) = 6: alpha (4.26) <= 6 <= beta (8.53): unchanged.
    assert_eq!(v.on_sample(&s(12.5, 26, false)), 26);
    assert!(
        (v.estimated() - 26.362_04).abs() < 1e-4,
        "{}",
        v.estimated()
    );
    // queue = ceil(26.362 x (1 - 10/11)) = 3: L (1.42) < 3 < alpha (4.26): + L -> 27.783.
    assert_eq!(v.on_sample(&s(11.0, 26, false)), 27);
    // queue = ceil(27.783 x (1 - 10/10.5)) = 2: L < 2 < alpha: + L (1.444) -> 29.227.
    assert_eq!(v.on_sample(&s(10.5, 27, false)), 29);
    // Drop: - L (1.466) -> 27.761.
    assert_eq!(v.on_sample(&s(10.0, 29, true)), 27);
    assert!(
        (v.estimated() - 27.761_02).abs() < 1e-4,
        "{}",
        v.estimated()
    );
    // App-limited (inflight x 2 < limit): unchanged even with no queue.
    assert_eq!(v.on_sample(&s(10.0, 12, false)), 27);
    // A new minimum RTT only updates rtt_noload.
    assert_eq!(v.on_sample(&s(5.0, 27, false)), 27);
    assert_eq!(v.rtt_noload(), ms(5.0));
}

#[test]
fn vegas_log_scaling_and_smoothing() {
    // At limit 150, L = log10(150) = 2.176: beta 13.06; no queue: + 13.06 -> 163.06.
    let mut v = vegas(150, 1.0);
    v.on_sample(&s(10.0, 150, false));
    assert_eq!(v.on_sample(&s(10.0, 150, false)), 163);
    // Smoothing 0.5: 20 -> 0.5 x 20 + 0.5 x 27.806 = 23.903.
    let mut v = vegas(20, 0.5);
    v.on_sample(&s(10.0, 20, false));
    v.on_sample(&s(10.0, 20, false));
    assert!(
        (v.estimated() - 23.903_09).abs() < 1e-4,
        "{}",
        v.estimated()
    );
    // Clamped at max before smoothing.
    let mut v = Vegas::new(VegasConfig {
        initial: 20,
        max: 22,
        probe_multiplier: 0,
        ..VegasConfig::default()
    })
    .unwrap();
    v.on_sample(&s(10.0, 20, false));
    assert_eq!(v.on_sample(&s(10.0, 20, false)), 22);
}

#[test]
fn vegas_reprobes_rtt_noload() {
    let mut v = Vegas::new(VegasConfig {
        initial: 20,
        probe_multiplier: 1,
        seed: 3,
        ..VegasConfig::default()
    })
    .unwrap();
    v.on_sample(&s(10.0, 20, false));
    // Latency moved up for good: within jitter x 1 x limit (<= 20) samples the baseline is
    // re-probed at the new RTT.
    let mut probed_after = None;
    for i in 1..=25 {
        v.on_sample(&s(40.0, 40, false));
        if v.rtt_noload() == ms(40.0) {
            probed_after = Some(i);
            break;
        }
    }
    let n = probed_after.expect("rtt_noload was re-probed");
    // The probe fires once the sample count reaches jitter x limit, jitter in [0.5, 1): the
    // limit was falling from 20 (one L per sample), so that is between 6 and 20 samples.
    assert!((6..=20).contains(&n), "probed after {n} samples");
}

#[test]
fn exp_avg_warmup_then_exponential() {
    let mut e = ExpAvg::new(600, 10);
    for x in 1..=10 {
        e.add(x as f64);
    }
    assert_eq!(e.value(), 5.5);
    let f = 2.0 / 601.0;
    assert!((e.add(100.0) - (5.5 * (1.0 - f) + 100.0 * f)).abs() < 1e-12);
}

fn g2() -> Gradient2 {
    Gradient2::new(Gradient2Config {
        min: 1,
        ..Gradient2Config::default()
    })
    .unwrap()
}

#[test]
fn gradient2_formula() {
    let mut g = g2();
    // Flat RTT: gradient = min(1, 1.5 x 1) = 1; new = L + 4; L = 0.8 L + 0.2 new = L + 0.8.
    let mut expect = 20.0_f64;
    for _ in 0..10 {
        g.on_sample(&s(10.0, 40, false));
        expect += 0.8;
        assert!(
            (g.estimated() - expect).abs() < 1e-9,
            "{} vs {expect}",
            g.estimated()
        );
    }
    assert!((g.long_rtt_nanos() - 10e6).abs() < 1e-3);
    // RTT triples: long = 10 x (1 - f) + 30 f, gradient = max(0.5, min(1, 1.5 long / 30)).
    let f = 2.0 / 601.0;
    let long: f64 = 10e6 * (1.0 - f) + 30e6 * f;
    let gradient = (1.5 * long / 30e6).clamp(0.5, 1.0);
    assert!(gradient > 0.5 && gradient < 0.51);
    let new = expect * gradient + 4.0;
    let expect2 = expect * 0.8 + new * 0.2;
    g.on_sample(&s(30.0, 40, false));
    assert!(
        (g.estimated() - expect2).abs() < 1e-9,
        "{} vs {expect2}",
        g.estimated()
    );
    assert!((g.last_gradient() - gradient).abs() < 1e-12);
}

#[test]
fn gradient2_long_rtt_decay_app_limit_and_min() {
    let mut g = g2();
    for _ in 0..10 {
        g.on_sample(&s(10.0, 40, false));
    }
    let before = g.estimated();
    // Short RTT far below long: long/short > 2 so the stored long RTT is scaled by 0.95;
    // the gradient of this sample still uses the unscaled long (clamped to 1 anyway).
    let f = 2.0 / 601.0;
    let long = 10e6 * (1.0 - f) + 1e6 * f;
    g.on_sample(&s(1.0, 40, false));
    assert!((g.long_rtt_nanos() - long * 0.95).abs() < 1e-3);
    assert!((g.estimated() - (before + 0.8)).abs() < 1e-9);
    // App-limited: inflight < limit / 2: unchanged.
    let l = g.estimated();
    g.on_sample(&s(100.0, 1, false));
    assert_eq!(g.estimated(), l);
    // A sudden 100x RTT: gradient 0.5, so L <- 0.8 L + 0.2 (0.5 L + 4) = 0.9 L + 0.8, whose
    // fixed point is 8; with min 10 the limit stops at 10 (before the long average catches up).
    let mut g = Gradient2::new(Gradient2Config {
        min: 10,
        initial: 50,
        ..Gradient2Config::default()
    })
    .unwrap();
    for _ in 0..10 {
        g.on_sample(&s(10.0, 50, false));
    }
    for _ in 0..40 {
        g.on_sample(&s(1000.0, 200, false));
    }
    assert_eq!(g.estimated(), 10.0);
}

#[test]
fn windowed_aggregates_before_updating() {
    let inner = Aimd::new(AimdConfig {
        initial: 10,
        min: 1,
        ..AimdConfig::default()
    })
    .unwrap();
    let mut w = Windowed::new(inner, WindowedConfig::default());
    let at = |t_ms: u64, inflight, dropped| Sample {
        start: Nanos::from_millis(t_ms),
        rtt: ms(5.0),
        inflight,
        dropped,
    };
    // 9 samples: window not ready.
    for i in 0..9 {
        assert_eq!(w.on_sample(&at(i, 10, false)), 10);
    }
    // 10th closes the window: one AIMD increase.
    assert_eq!(w.on_sample(&at(9, 10, false)), 11);
    // The next window lasts clamp(2 x 5 ms, 1 s, 1 s) = 1 s: 50 samples inside it with a drop
    // change nothing until one ends after it.
    for i in 0..50 {
        assert_eq!(w.on_sample(&at(20 + i, 11, i == 3)), 11);
    }
    // Window closes: aggregated drop -> floor(11 x 0.9) = 9.
    assert_eq!(w.on_sample(&at(1100, 11, false)), 9);
    // RTTs under 100 µs are ignored.
    let tiny = Sample {
        rtt: Duration::from_micros(50),
        ..at(5000, 100, true)
    };
    assert_eq!(w.on_sample(&tiny), 9);
}

#[test]
fn bad_limit_configs_are_typed_errors() {
    assert!(
        Aimd::new(AimdConfig {
            min: 0,
            ..AimdConfig::default()
        })
        .is_err()
    );
    assert!(
        Aimd::new(AimdConfig {
            backoff_ratio: 1.0,
            ..AimdConfig::default()
        })
        .is_err()
    );
    assert!(
        Vegas::new(VegasConfig {
            smoothing: f64::NAN,
            ..VegasConfig::default()
        })
        .is_err()
    );
    assert!(
        Vegas::new(VegasConfig {
            initial: 2000,
            ..VegasConfig::default()
        })
        .is_err()
    );
    assert!(
        Gradient2::new(Gradient2Config {
            rtt_tolerance: 0.5,
            ..Gradient2Config::default()
        })
        .is_err()
    );
    let e = Gradient2::new(Gradient2Config {
        initial: 10,
        ..Gradient2Config::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("min (20)"), "{e}");
}
