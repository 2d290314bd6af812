//! Property tests of reserve-then-settle: over any span, no settle sequence admits more
//! than each algorithm's guarantee plus the overrun of the requests still in flight, a
//! refund never exceeds what was charged, and nothing panics on any input.

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::algorithms::{
    DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
};
use floodgate_core::{Algorithm, Charge, KeyedLimiter, Kind, Nanos, Rate, Settle, Spec};
use proptest::prelude::*;

mod spans;
use spans::assert_rate_bound_with;

/// One request: gap since the previous step (ns), estimate, actual cost, and after how
/// many steps it is settled (0: at once, at the instant it was admitted; 9: never).
type Step = (u64, u64, u64, u8);

fn steps(max_gap: u64, max_est: u64, max_actual: u64) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0..max_gap, 0..=max_est, 0..=max_actual, 0u8..10), 1..200)
}

/// An admitted request, as the run saw it.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    step: usize,
    at: u64,
    estimate: u64,
    /// What the key was finally charged: `actual` when settled, else the estimate.
    cost: u64,
    /// The step at whose start it was settled (`usize::MAX`: never; `step`: at once).
    settled_at: usize,
}

impl Admitted {
    fn overrun(&self) -> u64 {
        self.cost.saturating_sub(self.estimate)
    }

    /// Whether its overrun was not yet charged when request `j` was decided.
    fn in_flight_at(&self, j: &Admitted) -> bool {
        self.step == j.step || self.settled_at > j.step
    }
}

/// Run `alg` over `steps` on one key: settles due at a step run at its start, then the
/// step's request is reserved. Checks every settlement's refund and charge.
fn run<A: Settle>(alg: &A, steps: &[Step]) -> Result<Vec<Admitted>, TestCaseError> {
    let mut state = A::State::default();
    let mut t = 1_000_000_000_000u64;
    let mut out: Vec<Admitted> = Vec::new();
    let mut due: Vec<(usize, usize, u64)> = Vec::new(); // (step, index in out, actual)
    let settle = |state: &mut A::State, a: &Admitted, actual: u64, now: u64| {
        let charge = Charge {
            cost: a.estimate,
            at: Nanos(a.at),
        };
        let s = alg.settle(state, Nanos(now), charge, actual).unwrap();
        prop_assert!(s.refunded <= a.estimate.saturating_sub(actual), "{s:?}");
        prop_assert_eq!(s.charged, actual.saturating_sub(a.estimate));
        Ok(())
    };
    for (step, &(gap, estimate, actual, hold)) in steps.iter().enumerate() {
        t += gap;
        for (_, i, actual) in due.extract_if(.., |(s, _, _)| *s <= step) {
            let a = out[i];
            settle(&mut state, &a, actual, t)?;
            out[i].cost = actual;
            out[i].settled_at = step;
        }
        if !alg.reserve(&mut state, Nanos(t), estimate).allowed {
            continue;
        }
        let mut a = Admitted {
            step,
            at: t,
            estimate,
            cost: estimate,
            settled_at: usize::MAX,
        };
        match hold {
            0 => {
                settle(&mut state, &a, actual, t)?;
                a.cost = actual;
                a.settled_at = step;
            }
            9 => {}
            h => due.push((step + h as usize, out.len(), actual)),
        }
        out.push(a);
    }
    Ok(out)
}

/// Units in flight at `ev[j]` among `ev[i..=j]`: the slack over the guarantee.
fn in_flight(ev: &[Admitted], i: usize, j: usize) -> u64 {
    ev[i..=j]
        .iter()
        .filter(|a| a.in_flight_at(&ev[j]))
        .map(Admitted::overrun)
        .sum()
}

fn assert_buckets(ev: &[Admitted], capacity: u64, units_per_ns: f64) -> Result<(), TestCaseError> {
    let events: Vec<(u64, u64)> = ev.iter().map(|a| (a.at, a.cost)).collect();
    assert_rate_bound_with(&events, capacity, units_per_ns, |i, j| in_flight(ev, i, j))
}

/// Per aligned window of `w` ns: admitted cost at most `limit` plus the overrun in flight
/// at the window's last admission.
fn assert_per_window(ev: &[Admitted], limit: u64, w: u64) -> Result<(), TestCaseError> {
    let mut windows: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, a) in ev.iter().enumerate() {
        windows.entry(a.at / w).or_default().push(i);
    }
    for (k, idx) in windows {
        let last = &ev[*idx.last().unwrap()];
        let sum: u64 = idx.iter().map(|&i| ev[i].cost).sum();
        let slack: u64 = idx
            .iter()
            .map(|&i| &ev[i])
            .filter(|a| a.in_flight_at(last))
            .map(Admitted::overrun)
            .sum();
        prop_assert!(
            sum <= limit + slack,
            "window {k}: {sum} > {limit} + {slack}"
        );
    }
    Ok(())
}

/// In any rolling window `(t_j - w, t_j]`: at most `limit` plus the overrun in flight.
fn assert_rolling(ev: &[Admitted], limit: u64, w: u64) -> Result<(), TestCaseError> {
    for j in 0..ev.len() {
        let i = ev.iter().position(|a| a.at + w > ev[j].at).unwrap_or(j);
        let sum: u64 = ev[i..=j].iter().map(|a| a.cost).sum();
        let slack = in_flight(ev, i, j);
        prop_assert!(
            sum <= limit + slack,
            "window ending {}: {sum} > {limit} + {slack}",
            ev[j].at
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn buckets_and_gcra_settled_stay_within_capacity_plus_rate_plus_in_flight_overrun(
        capacity in 1u64..20, count in 1u64..50, period_ms in 1u64..5_000,
        s in steps(200_000_000, 4, 30)
    ) {
        let rate = Rate::from_nanos(count, period_ms * 1_000_000).unwrap();
        let exact = count as f64 / (period_ms as f64 * 1e6);
        let gcra = Gcra::new(rate, capacity).unwrap();
        assert_buckets(&run(&gcra, &s)?, capacity, 1.0 / gcra.emission_interval_nanos() as f64)?;
        assert_buckets(&run(&TokenBucket::new(capacity, rate).unwrap(), &s)?, capacity, exact)?;
        assert_buckets(&run(&LeakyBucket::meter(capacity, rate).unwrap(), &s)?, capacity, exact)?;
        let queue = LeakyBucket::queue(rate, capacity - 1, DelayMode::After(0)).unwrap();
        assert_buckets(&run(&queue, &s)?, capacity, exact)?;
    }

    #[test]
    fn windows_settled_stay_within_the_limit_plus_in_flight_overrun(
        limit in 1u64..20, window_ms in 1u64..2_000, s in steps(300_000_000, 4, 30)
    ) {
        let w = window_ms * 1_000_000;
        let fw = FixedWindow::new(limit, Duration::from_nanos(w)).unwrap();
        let sc = SlidingCounter::new(limit, Duration::from_nanos(w)).unwrap();
        let log = SlidingLog::new(limit, Duration::from_nanos(w)).unwrap();
        assert_per_window(&run(&fw, &s)?, limit, w)?;
        assert_per_window(&run(&sc, &s)?, limit, w)?;
        assert_rolling(&run(&log, &s)?, limit, w)?;
    }

    #[test]
    fn a_refund_never_takes_a_key_above_full_capacity(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        count in 1u64..30, period_ms in 1u64..3_000, est in 1u64..30, gap in 0u64..4_000_000_000
    ) {
        let est = 1 + est % count;
        // a key at full capacity reserved at `est` and settled at 0 is at most back at
        // full capacity, whenever the settle comes
        let rate = Rate::from_nanos(count, period_ms * 1_000_000).unwrap();
        let alg = Spec::new(kind, rate).build().unwrap();
        let limiter = KeyedLimiter::new(alg, 10).unwrap();
        let t = Nanos::from_secs(100);
        let full = limiter.peek("k", t, 0).remaining;
        let (d, r) = limiter.reserve("k".to_string(), t, est);
        prop_assume!(d.allowed);
        let later = Nanos(t.0 + gap);
        let s = limiter.settle(r.unwrap(), later, 0).unwrap();
        prop_assert!(s.refunded <= est);
        prop_assert!(s.decision.remaining <= full);
        prop_assert!(limiter.peek("k", later, 0).remaining <= full);
    }

    #[test]
    fn no_settle_panics_on_any_input(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        count in 1u64..u64::MAX, period in 1u64..u64::MAX, capacity in 1u64..u64::MAX,
        ops in prop::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()), 1..40),
    ) {
        let Ok(rate) = Rate::from_nanos(count, period) else { return Ok(()) };
        let spec = Spec { kind, rate, capacity: Some(capacity), delay: DelayMode::After(0) };
        let Ok(alg) = spec.build() else { return Ok(()) };
        let mut state = Default::default();
        for (now, cost, at, actual) in ops {
            let _ = alg.check(&mut state, Nanos(now), cost % 4);
            let charge = Charge { cost, at: Nanos(at) };
            if let Ok(s) = alg.settle(&mut state, Nanos(now), charge, actual) {
                prop_assert!(s.refunded <= cost.saturating_sub(actual));
                prop_assert!(s.decision.remaining <= s.decision.limit);
            }
        }
    }
}

#[test]
fn debt_is_repaid_before_the_next_request() {
    // 10 per second, capacity 10: a request estimated at 1 that used 30 leaves a debt of
    // 20 units, 2 s of refill, before anything else is admitted
    let rate = Rate::per_second(10).unwrap();
    for kind in [Kind::Gcra, Kind::TokenBucket, Kind::LeakyMeter] {
        let l = KeyedLimiter::new(Spec::new(kind, rate).build().unwrap(), 10).unwrap();
        let t = Nanos::from_secs(10);
        let (_, r) = l.reserve("k".to_string(), t, 1);
        let s = l.settle(r.unwrap(), t, 30).unwrap();
        assert_eq!((s.charged, s.decision.remaining), (29, 0), "{kind}");
        let d = l.check("k", t, 1);
        assert_eq!(d.retry_after, Some(Duration::from_millis(2_100)), "{kind}");
        assert!(
            !l.check("k", Nanos(t.0 + 2_099_000_000), 1).allowed,
            "{kind}"
        );
        assert!(
            l.check("k", Nanos(t.0 + 2_100_000_000), 1).allowed,
            "{kind}"
        );
    }
}

#[test]
fn windowed_refunds_stay_in_the_window_charged() {
    let w = Duration::from_secs(10);
    let fw = KeyedLimiter::new(FixedWindow::new(10, w).unwrap(), 10).unwrap();
    let (_, r) = fw.reserve("k".to_string(), Nanos::from_secs(9), 10);
    // settled in the next window: refunding there would mint capacity
    let s = fw.settle(r.unwrap(), Nanos::from_secs(11), 0).unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (0, 10));
    let (_, r) = fw.reserve("k".to_string(), Nanos::from_secs(12), 10);
    let s = fw.settle(r.unwrap(), Nanos::from_secs(13), 4).unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (6, 6));

    let log = KeyedLimiter::new(SlidingLog::new(10, w).unwrap(), 10).unwrap();
    let (_, r) = log.reserve("k".to_string(), Nanos::from_secs(1), 8);
    assert!(log.check("k", Nanos::from_secs(5), 2).allowed);
    // the refund comes out of the entry at 1 s, not the one at 5 s
    let s = log.settle(r.unwrap(), Nanos::from_secs(6), 0).unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (8, 8));
    assert_eq!(log.peek("k", Nanos::from_secs(14), 0).remaining, 8);
    assert_eq!(log.peek("k", Nanos::from_secs(15), 0).remaining, 10);
}

#[test]
fn a_gcra_refund_after_the_charge_elapsed_gives_nothing_back() {
    // 1 per second, capacity 10: a charge of 10 at t is spent by t + 10 s; a request at
    // t + 20 s must not be refunded by settling the old charge at 0
    let g = Gcra::new(Rate::per_second(1).unwrap(), 10).unwrap();
    let l = KeyedLimiter::new(g, 10).unwrap();
    let t = Nanos::from_secs(100);
    let (_, old) = l.reserve("k".to_string(), t, 10);
    let later = Nanos(t.0 + 20_000_000_000);
    assert!(l.check("k", later, 5).allowed);
    let s = l.settle(old.unwrap(), later, 0).unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (0, 5));
}

#[test]
fn an_estimate_of_zero_charges_everything_at_settle_and_unknown_keys_refund_nothing() {
    let l = KeyedLimiter::new(
        TokenBucket::new(100, Rate::per_second(1).unwrap()).unwrap(),
        10,
    )
    .unwrap();
    let t = Nanos::from_secs(1);
    let (d, r) = l.reserve("k".to_string(), t, 0);
    assert_eq!(d.remaining, 100);
    assert!(l.is_empty(), "an estimate of 0 stores nothing");
    let s = l.settle(r.unwrap(), t, 40).unwrap();
    assert_eq!(s.decision.remaining, 60);
    let forged = Charge { cost: 1_000, at: t };
    let s = l.settle_charge("other", forged, t, 0).unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (0, 100));
    assert!(l.settle_charge("k", forged, t, u64::MAX).is_err());
    assert_eq!(l.peek("k", t, 0).remaining, 60, "an error changes nothing");
}
