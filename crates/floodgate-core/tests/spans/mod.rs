//! Span checks shared by the property tests: what an algorithm admitted over any span.

#![allow(dead_code)]

use proptest::prelude::*;

/// Largest sum of units in any half-open span [t, t + w).
pub fn max_in_rolling(events: &[(u64, u64)], w: u64) -> u64 {
    let (mut best, mut sum, mut lo) = (0, 0, 0);
    for &(t, c) in events {
        sum += c;
        while events[lo].0 + w <= t {
            sum -= events[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

/// For every pair i <= j of admissions, units admitted in [t_i, t_j] must be at most
/// `capacity + rate x (t_j - t_i)`.
pub fn assert_rate_bound(
    events: &[(u64, u64)],
    capacity: u64,
    units_per_ns: f64,
) -> Result<(), TestCaseError> {
    assert_rate_bound_with(events, capacity, units_per_ns, |_, _| 0)
}

/// [`assert_rate_bound`] with `slack(i, j)` more units allowed in `[t_i, t_j]`.
pub fn assert_rate_bound_with(
    events: &[(u64, u64)],
    capacity: u64,
    units_per_ns: f64,
    slack: impl Fn(usize, usize) -> u64,
) -> Result<(), TestCaseError> {
    for i in 0..events.len() {
        let mut sum = 0u64;
        for j in i..events.len() {
            sum += events[j].1;
            let bound = (capacity + slack(i, j)) as f64
                + (events[j].0 - events[i].0) as f64 * units_per_ns
                + 1e-6;
            prop_assert!(
                sum as f64 <= bound,
                "admitted {sum} in [{}, {}] > bound {bound}",
                events[i].0,
                events[j].0
            );
        }
    }
    Ok(())
}
