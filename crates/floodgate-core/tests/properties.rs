//! Property tests over random arrival sequences and costs: each algorithm's stated
//! guarantee holds, and nothing panics on any input.

use std::time::Duration;

use floodgate_core::algorithms::{
    DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
};
use floodgate_core::{Algorithm, AnyAlgorithm, Kind, Nanos, Rate, Spec};
use proptest::prelude::*;

/// Arrivals as (gap since previous in ns, cost): time never goes backwards here.
fn arrivals(max_gap: u64, max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0..max_gap, 1..=max_cost), 1..300)
}

/// Run `alg` over arrivals; return the admitted (instant, cost) in order.
fn admitted<A: Algorithm>(alg: &A, arr: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut state = A::State::default();
    let mut t = 1_000_000_000_000u64;
    let mut out = Vec::new();
    for &(gap, cost) in arr {
        t += gap;
        let d = alg.check(&mut state, Nanos(t), cost);
        if d.allowed {
            out.push((t, cost));
        }
    }
    out
}

mod spans;
use spans::{assert_rate_bound, max_in_rolling};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sliding_log_never_exceeds_limit_in_any_rolling_window(
        limit in 1u64..20, window_ms in 1u64..2_000, arr in arrivals(300_000_000, 4)
    ) {
        let w = window_ms * 1_000_000;
        let alg = SlidingLog::new(limit, Duration::from_nanos(w)).unwrap();
        let ev = admitted(&alg, &arr);
        prop_assert!(max_in_rolling(&ev, w) <= limit);
    }

    #[test]
    fn fixed_window_and_sliding_counter_never_exceed_limit_per_aligned_window(
        limit in 1u64..20, window_ms in 1u64..2_000, arr in arrivals(300_000_000, 4)
    ) {
        let w = window_ms * 1_000_000;
        let fw = FixedWindow::new(limit, Duration::from_nanos(w)).unwrap();
        let sc = SlidingCounter::new(limit, Duration::from_nanos(w)).unwrap();
        for ev in [admitted(&fw, &arr), admitted(&sc, &arr)] {
            let mut per_window = std::collections::HashMap::new();
            for (t, c) in ev {
                *per_window.entry(t / w).or_insert(0u64) += c;
            }
            prop_assert!(per_window.values().all(|&n| n <= limit), "{per_window:?}");
        }
    }

    #[test]
    fn buckets_and_gcra_never_exceed_capacity_plus_rate_times_elapsed(
        capacity in 1u64..20, count in 1u64..50, period_ms in 1u64..5_000, arr in arrivals(200_000_000, 4)
    ) {
        let rate = Rate::from_nanos(count, period_ms * 1_000_000).unwrap();
        let exact = count as f64 / (period_ms as f64 * 1e6);
        let gcra = Gcra::new(rate, capacity).unwrap();
        // GCRA schedules one unit per whole emission interval (truncated to ns)
        let gcra_rate = 1.0 / gcra.emission_interval_nanos() as f64;
        assert_rate_bound(&admitted(&gcra, &arr), capacity, gcra_rate)?;
        assert_rate_bound(&admitted(&TokenBucket::new(capacity, rate).unwrap(), &arr), capacity, exact)?;
        assert_rate_bound(&admitted(&LeakyBucket::meter(capacity, rate).unwrap(), &arr), capacity, exact)?;
    }

    #[test]
    fn leaky_queue_forwards_no_faster_than_its_rate_after_the_undelayed_part(
        burst in 0u64..15, count in 1u64..50, period_ms in 10u64..5_000, arr in arrivals(200_000_000, 1)
    ) {
        let rate = Rate::from_nanos(count, period_ms * 1_000_000).unwrap();
        let q = LeakyBucket::queue(rate, burst, DelayMode::After(0)).unwrap();
        let mut state = Default::default();
        let mut t = 1_000_000_000_000u64;
        let mut forwarded = Vec::new();
        for &(gap, cost) in &arr {
            t += gap;
            let d = q.check(&mut state, Nanos(t), cost);
            if d.allowed {
                forwarded.push((t + d.delay.as_nanos() as u64, cost));
            }
        }
        forwarded.sort();
        // with every excess request delayed, the backend sees at most 1 + rate x elapsed
        assert_rate_bound(&forwarded, 1, count as f64 / (period_ms as f64 * 1e6))?;
    }

    #[test]
    fn no_algorithm_panics_on_any_input(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        count in 1u64..u64::MAX, period in 1u64..u64::MAX, capacity in 1u64..u64::MAX,
        delay in 0u64..100,
        steps in prop::collection::vec((any::<u64>(), any::<u64>()), 1..60),
    ) {
        let Ok(rate) = Rate::from_nanos(count, period) else { return Ok(()) };
        let spec = Spec { kind, rate, capacity: Some(capacity), delay: DelayMode::After(delay) };
        let Ok(alg) = spec.build() else { return Ok(()) };
        let mut state = Default::default();
        // arbitrary times: backwards, standing still, at the extremes; arbitrary costs incl. 0
        for (t, cost) in steps {
            let d = alg.check(&mut state, Nanos(t), cost);
            prop_assert!(d.remaining <= d.limit);
            prop_assert!(!d.allowed || d.retry_after.is_none());
            let _ = alg.peek(&state, Nanos(t), cost);
            let _ = alg.full_at(&state);
        }
    }

    #[test]
    fn decisions_are_consistent_and_peek_consumes_nothing(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        count in 1u64..30, period_ms in 1u64..3_000, arr in arrivals(500_000_000, 5)
    ) {
        let rate = Rate::from_nanos(count, period_ms * 1_000_000).unwrap();
        let alg: AnyAlgorithm = Spec::new(kind, rate).build().unwrap();
        let mut state = Default::default();
        let mut t = 5_000_000_000u64;
        for &(gap, cost) in &arr {
            t += gap;
            let now = Nanos(t);
            let peeked = alg.peek(&state, now, cost);
            prop_assert_eq!(alg.peek(&state, now, cost), peeked);
            let d = alg.check(&mut state, now, cost);
            prop_assert_eq!(d, peeked, "check answers what peek said");
            prop_assert!(d.remaining <= d.limit);
            if d.allowed {
                prop_assert!(d.retry_after.is_none() && d.denial.is_none());
            } else if cost <= d.limit {
                // a denied request of a feasible cost says when to come back, and that is right
                let retry = d.retry_after.expect("retry_after for a feasible cost");
                let at = now.saturating_add(retry);
                prop_assert!(alg.peek(&state, at, cost).allowed, "not admitted at retry_after");
                if retry > Duration::from_nanos(1) {
                    let early = Nanos(at.0 - 2);
                    prop_assert!(!alg.peek(&state, early, cost).allowed, "admitted before retry_after");
                }
            } else {
                prop_assert!(d.retry_after.is_none());
            }
        }
    }

    #[test]
    fn a_key_back_at_full_capacity_is_equivalent_to_an_absent_one(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        count in 1u64..30, period_ms in 1u64..3_000, arr in arrivals(500_000_000, 5),
        later in 0u64..10_000_000_000, cost in 0u64..6
    ) {
        let rate = Rate::from_nanos(count, period_ms * 1_000_000).unwrap();
        let alg: AnyAlgorithm = Spec::new(kind, rate).build().unwrap();
        let mut state = Default::default();
        let mut t = 5_000_000_000u64;
        for &(gap, c) in &arr {
            t += gap;
            alg.check(&mut state, Nanos(t), c);
        }
        let at = Nanos(alg.full_at(&state).0.max(t) + later);
        prop_assert_eq!(alg.peek(&state, at, cost), alg.peek(&Default::default(), at, cost));
    }
}
