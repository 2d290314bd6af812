//! The traffic plan and the arithmetic on the backend's records. Pure functions, all
//! times in nanoseconds on the Unix-epoch wall clock unless said otherwise.
//!
//! Fixed windows are aligned to multiples of the window since the Unix epoch (the
//! in-process store's clock is the wall clock read at start and advanced monotonically;
//! the Redis store uses Redis `TIME`), so the plan picks such a multiple `B` as the
//! boundary to straddle:
//!
//! * **steady**: `1.5 x L` requests evenly spaced over `[B - 2W, B - W)`, 1.5 times the
//!   limit's rate, so every algorithm refuses some and shows its steady behaviour;
//! * nothing over `[B - W, B - d)`, so that the window before the boundary is fresh;
//! * **burst 1**: `L` requests at once at `B - d`, **burst 2**: `L` at `B + d`, with
//!   all of one window's quota at its end and all of the next one's at its
//!   start, the case a fixed window lets through twice. `d = max(W / 10, 200 ms)`: far
//!   enough from the boundary that a burst delayed on a busy machine still reaches the
//!   proxies on its side of it.

use std::time::Duration;

/// When each request is due, and where the boundary is.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The window boundary the bursts straddle (ns since the epoch, a multiple of `W`).
    pub boundary_ns: u64,
    /// Wall instant of offset 0: the first steady request (`B - 2W`).
    pub start_ns: u64,
    /// Due offsets from `start_ns`, non-decreasing.
    pub offsets: Vec<Duration>,
    /// Steady requests (the first ones of `offsets`).
    pub steady: u64,
    /// Steady rate, requests per second.
    pub steady_rps: f64,
    /// Requests in each burst.
    pub burst: u64,
    /// Distance of each burst from the boundary.
    pub burst_gap: Duration,
}

impl Plan {
    /// The plan for `limit` per `window`, with the steady phase starting at least `lead`
    /// after `now_ns`.
    pub fn new(limit: u64, window: Duration, now_ns: u64, lead: Duration) -> Plan {
        let w = nanos(window).max(1);
        let earliest = now_ns + nanos(lead) + 2 * w;
        let boundary_ns = earliest.div_ceil(w) * w;
        let start_ns = boundary_ns - 2 * w;
        let steady = limit + limit / 2;
        let gap = (w / 10).max(200_000_000);
        let mut offsets: Vec<Duration> = (0..steady)
            .map(|i| {
                Duration::from_nanos((u128::from(i) * u128::from(w) / u128::from(steady)) as u64)
            })
            .collect();
        for at in [2 * w - gap, 2 * w + gap] {
            offsets.extend(std::iter::repeat_n(
                Duration::from_nanos(at),
                limit as usize,
            ));
        }
        Plan {
            boundary_ns,
            start_ns,
            offsets,
            steady,
            steady_rps: steady as f64 / window.as_secs_f64(),
            burst: limit,
            burst_gap: Duration::from_nanos(gap),
        }
    }

    /// When the last request is due, ns since the epoch.
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.offsets.last().map_or(0, |d| nanos(*d))
    }
}

/// The most instants of `sorted` (non-decreasing) inside any half-open span
/// `[t, t + span)`.
///
/// ```
/// use floodgate_demo::plan::max_in_span;
/// assert_eq!(max_in_span(&[0, 5, 9, 10, 30], 10), 3); // 0, 5, 9
/// assert_eq!(max_in_span(&[], 10), 0);
/// ```
pub fn max_in_span(sorted: &[u64], span: u64) -> u64 {
    let mut best = 0;
    let mut lo = 0;
    for (hi, &t) in sorted.iter().enumerate() {
        while t - sorted[lo] >= span {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u64
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bursts_straddle_an_aligned_boundary() {
        let w = Duration::from_secs(2);
        let now = 1_700_000_000_300_000_000; // x.3 s
        let p = Plan::new(20, w, now, Duration::from_millis(300));
        assert_eq!(p.boundary_ns % 2_000_000_000, 0);
        assert!(p.start_ns >= now + 300_000_000);
        assert!(p.start_ns < now + 300_000_000 + 2_000_000_000);
        assert_eq!(p.offsets.len(), 30 + 40);
        assert!(p.offsets.windows(2).all(|x| x[0] <= x[1]));
        let b1 = p.start_ns + nanos(p.offsets[30]);
        let b2 = p.start_ns + nanos(p.offsets[69]);
        assert_eq!(p.boundary_ns - b1, 200_000_000);
        assert_eq!(b2 - p.boundary_ns, 200_000_000);
        // the steady phase ends one window before the boundary
        assert!(p.start_ns + nanos(p.offsets[29]) < p.boundary_ns - 2_000_000_000);
        assert_eq!(p.end_ns(), b2);
    }

    #[test]
    fn short_windows_keep_the_bursts_200ms_from_the_boundary() {
        let p = Plan::new(8, Duration::from_millis(500), 0, Duration::ZERO);
        assert_eq!(p.burst_gap, Duration::from_millis(200));
        // still after the steady phase, which ends one window before the boundary
        let steady_end = p.start_ns + 500_000_000;
        assert!(p.boundary_ns - 200_000_000 >= steady_end);
    }

    #[test]
    fn sliding_max_counts_half_open_spans() {
        assert_eq!(max_in_span(&[0, 10, 20], 10), 1);
        assert_eq!(max_in_span(&[0, 10, 20], 11), 2);
        assert_eq!(max_in_span(&[7, 7, 7, 7], 1), 4);
        assert_eq!(max_in_span(&[], 10), 0);
    }
}
