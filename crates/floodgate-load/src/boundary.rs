//! Window boundaries on the wall clock, the "near a boundary" zones, and the verdict.
//!
//! Fixed windows (and the sliding counter's sub-windows) are aligned to multiples of the
//! window length on the Unix-epoch clock, so boundaries are at `k x W + offset` in
//! nanoseconds since the epoch. A request is *near* a boundary when it was sent within
//! `near` of one: *before* it (`[b - near, b)`) or *after* it (`[b, b + near)`).
//!
//! The verdict compares what happened near boundaries with what happened elsewhere:
//!
//! * **admission jump**: the share of requests admitted just *after* boundaries is at least
//!   1.5 times (plus 0.1) the share admitted just *before* them. A fixed window under
//!   steady overload admits at the start of each window and denies at its end: this is its
//!   signature. Limiters that refill continuously (GCRA, token bucket, sliding log)
//!   admit the same share on both sides.
//! * **denials cluster**: the share of all 429s that fell near boundaries is at least 1.5
//!   times the share of all requests sent near boundaries (clients retrying at the reset,
//!   the "stampede").
//! * **latency**: p99 near boundaries is at least twice p99 elsewhere, and 10 ms more.
//!
//! Each test needs enough samples on both sides (at least 20 requests in each compared
//! zone, 20 denials, 100 latencies) or it abstains; with no test able to speak the verdict
//! is "inconclusive".

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::histogram::{Percentiles, new_histogram};

/// Where boundaries are: `k x window_ns + offset_ns`, and how close counts as near.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Window length, ns (> 0).
    pub window_ns: u64,
    /// Offset of boundaries from multiples of the window, ns (< window).
    pub offset_ns: u64,
    /// Half-width of the near zone, ns (0 < near <= window / 2).
    pub near_ns: u64,
}

/// Which zone a send time falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// Within `near` before a boundary.
    Before = 0,
    /// Within `near` after a boundary (the boundary instant included).
    After = 1,
    /// Anywhere else.
    Elsewhere = 2,
}

impl Windows {
    /// Time since the last boundary at wall instant `t` (ns since the epoch), in `[0, W)`.
    pub fn phase(&self, t: u64) -> u64 {
        let w = self.window_ns;
        (t % w + w - self.offset_ns % w) % w
    }

    /// The zone of wall instant `t`.
    ///
    /// ```
    /// use floodgate_load::boundary::{Windows, Zone};
    /// let w = Windows { window_ns: 10_000, offset_ns: 0, near_ns: 1_000 };
    /// assert_eq!(w.zone(20_000), Zone::After);
    /// assert_eq!(w.zone(19_500), Zone::Before);
    /// assert_eq!(w.zone(25_000), Zone::Elsewhere);
    /// ```
    pub fn zone(&self, t: u64) -> Zone {
        let p = self.phase(t);
        if p < self.near_ns {
            Zone::After
        } else if p >= self.window_ns - self.near_ns {
            Zone::Before
        } else {
            Zone::Elsewhere
        }
    }

    /// The first boundary at or after wall instant `t`.
    pub fn next_boundary(&self, t: u64) -> u64 {
        let p = self.phase(t);
        if p == 0 {
            t
        } else {
            t.saturating_add(self.window_ns - p)
        }
    }

    /// Nanoseconds of `[a, b)` (wall) that are near a boundary.
    ///
    /// ```
    /// use floodgate_load::boundary::Windows;
    /// let w = Windows { window_ns: 10, offset_ns: 0, near_ns: 2 };
    /// assert_eq!(w.near_measure(0, 10), 4); // [0,2) and [8,10)
    /// assert_eq!(w.near_measure(5, 25), 8); // [8,12) and [18,22)
    /// assert_eq!(w.near_measure(3, 7), 0);
    /// ```
    pub fn near_measure(&self, a: u64, b: u64) -> u64 {
        if b <= a {
            return 0;
        }
        // F(x): near measure of [0, x) on an axis shifted so that boundaries sit at
        // multiples of the window (u128: no overflow near u64::MAX).
        let (w, near) = (u128::from(self.window_ns), u128::from(self.near_ns));
        let shift = w - u128::from(self.offset_ns) % w;
        let f = |x: u64| -> u128 {
            let u = u128::from(x) + shift;
            let p = u % w;
            (u / w) * 2 * near + p.min(near) + p.saturating_sub(w - near)
        };
        (f(b) - f(a)) as u64
    }
}

/// Counts and latencies of the requests sent in one zone.
#[derive(Debug, Clone)]
pub struct ZoneStats {
    /// Requests sent (responses and errors).
    pub sent: u64,
    /// Responses whose status is not a denial status.
    pub admitted: u64,
    /// Responses with a denial status (429 by default).
    pub denied: u64,
    /// Requests without a response.
    pub errors: u64,
    /// Latency of the responses, µs.
    pub latency: Histogram<u64>,
}

impl Default for ZoneStats {
    fn default() -> Self {
        ZoneStats {
            sent: 0,
            admitted: 0,
            denied: 0,
            errors: 0,
            latency: new_histogram(3),
        }
    }
}

/// Minimum samples for each test of the verdict.
const MIN_REQUESTS: u64 = 20;
const MIN_DENIALS: u64 = 20;
const MIN_LATENCIES: u64 = 100;

/// The boundary verdict and the figures behind it (all shares in `[0, 1]`).
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Window length, seconds.
    pub window_s: f64,
    /// Boundary offset from multiples of the window, seconds.
    pub window_offset_s: f64,
    /// Half-width of the near zone, seconds.
    pub near_s: f64,
    /// Boundaries crossed while sending.
    pub boundaries: u64,
    /// Share of the sending time that was near a boundary.
    pub time_share_near: f64,
    /// Share of requests sent near a boundary.
    pub sent_share_near: f64,
    /// Share of admitted responses that were sent near a boundary.
    pub admitted_share_near: f64,
    /// Share of denials that were sent near a boundary.
    pub denied_share_near: f64,
    /// Of requests sent just before a boundary, the share admitted.
    pub admit_rate_before: f64,
    /// Of requests sent just after a boundary, the share admitted.
    pub admit_rate_after: f64,
    /// Of requests sent elsewhere, the share admitted.
    pub admit_rate_elsewhere: f64,
    /// Requests sent before / after / elsewhere.
    pub sent_before: u64,
    /// See `sent_before`.
    pub sent_after: u64,
    /// See `sent_before`.
    pub sent_elsewhere: u64,
    /// Latency of responses sent near boundaries.
    pub latency_near: Percentiles,
    /// Latency of responses sent elsewhere.
    pub latency_elsewhere: Percentiles,
    /// `"boundary effect"`, `"no boundary effect"` or `"inconclusive"`.
    pub verdict: &'static str,
    /// Whether a boundary effect was found.
    pub flagged: bool,
    /// One line per test that spoke, each saying what it found.
    pub reasons: Vec<String>,
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Judge the zones. `time_near` and `time_total` are nanoseconds of sending time.
pub fn verdict(
    w: &Windows,
    zones: &[ZoneStats; 3],
    boundaries: u64,
    time_near: u64,
    time_total: u64,
) -> Verdict {
    let [before, after, elsewhere] = zones;
    let sent: u64 = zones.iter().map(|z| z.sent).sum();
    let admitted: u64 = zones.iter().map(|z| z.admitted).sum();
    let denied: u64 = zones.iter().map(|z| z.denied).sum();
    let mut near_lat = before.latency.clone();
    near_lat
        .add(&after.latency)
        .expect("histograms of the same bounds");
    let latency_near = Percentiles::of(&near_lat);
    let latency_elsewhere = Percentiles::of(&elsewhere.latency);
    let rate = |z: &ZoneStats| share(z.admitted, z.sent);
    let sent_share_near = share(before.sent + after.sent, sent);
    let denied_share_near = share(before.denied + after.denied, denied);

    let mut reasons = Vec::new();
    let mut spoke = false;
    let mut flagged = false;
    if before.sent >= MIN_REQUESTS && after.sent >= MIN_REQUESTS {
        spoke = true;
        let (b, a) = (rate(before), rate(after));
        if a >= 1.5 * b + 0.1 {
            flagged = true;
            reasons.push(format!(
                "admission jump: {:.0}% of requests admitted just after boundaries vs {:.0}% just before",
                a * 100.0,
                b * 100.0
            ));
        } else {
            reasons.push(format!(
                "no admission jump: {:.0}% admitted just after boundaries, {:.0}% just before",
                a * 100.0,
                b * 100.0
            ));
        }
    }
    if denied >= MIN_DENIALS && sent_share_near > 0.0 && sent_share_near < 1.0 {
        spoke = true;
        if denied_share_near >= 1.5 * sent_share_near {
            flagged = true;
            reasons.push(format!(
                "denials cluster: {:.0}% of 429s near boundaries, where {:.0}% of requests were sent",
                denied_share_near * 100.0,
                sent_share_near * 100.0
            ));
        } else {
            reasons.push(format!(
                "denials do not cluster: {:.0}% of 429s near boundaries, where {:.0}% of requests were sent",
                denied_share_near * 100.0,
                sent_share_near * 100.0
            ));
        }
    }
    if latency_near.count >= MIN_LATENCIES && latency_elsewhere.count >= MIN_LATENCIES {
        spoke = true;
        let (n, e) = (latency_near.p99_ms, latency_elsewhere.p99_ms);
        if n >= 2.0 * e && n - e >= 10.0 {
            flagged = true;
            reasons.push(format!(
                "latency spikes: p99 {n:.1} ms near boundaries vs {e:.1} ms elsewhere"
            ));
        } else {
            reasons.push(format!(
                "latency even: p99 {n:.1} ms near boundaries vs {e:.1} ms elsewhere"
            ));
        }
    }
    if !spoke {
        reasons.push(format!(
            "too few samples: need {MIN_REQUESTS} requests just before and just after boundaries, \
             {MIN_DENIALS} denials, or {MIN_LATENCIES} latencies on each side; run longer or faster"
        ));
    }
    Verdict {
        window_s: w.window_ns as f64 / 1e9,
        window_offset_s: w.offset_ns as f64 / 1e9,
        near_s: w.near_ns as f64 / 1e9,
        boundaries,
        time_share_near: share(time_near, time_total),
        sent_share_near,
        admitted_share_near: share(before.admitted + after.admitted, admitted),
        denied_share_near,
        admit_rate_before: rate(before),
        admit_rate_after: rate(after),
        admit_rate_elsewhere: rate(elsewhere),
        sent_before: before.sent,
        sent_after: after.sent,
        sent_elsewhere: elsewhere.sent,
        latency_near,
        latency_elsewhere,
        verdict: if flagged {
            "boundary effect"
        } else if spoke {
            "no boundary effect"
        } else {
            "inconclusive"
        },
        flagged,
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(sent: u64, admitted: u64) -> ZoneStats {
        ZoneStats {
            sent,
            admitted,
            denied: sent - admitted,
            ..Default::default()
        }
    }

    #[test]
    fn zones_with_offset() {
        let w = Windows {
            window_ns: 100,
            offset_ns: 30,
            near_ns: 10,
        };
        assert_eq!(w.zone(130), Zone::After);
        assert_eq!(w.zone(139), Zone::After);
        assert_eq!(w.zone(140), Zone::Elsewhere);
        assert_eq!(w.zone(120), Zone::Before);
        assert_eq!(w.zone(129), Zone::Before);
        assert_eq!(w.zone(5), Zone::Elsewhere);
        assert_eq!(w.zone(25), Zone::Before);
        assert_eq!(w.next_boundary(131), 230);
        assert_eq!(w.next_boundary(130), 130);
        assert_eq!(w.near_measure(0, 1000), 200);
    }

    #[test]
    fn near_measure_matches_brute_force() {
        let w = Windows {
            window_ns: 37,
            offset_ns: 11,
            near_ns: 9,
        };
        for a in 0..80 {
            for b in a..200 {
                let brute = (a..b).filter(|&t| w.zone(t) != Zone::Elsewhere).count() as u64;
                assert_eq!(w.near_measure(a, b), brute, "[{a}, {b})");
            }
        }
    }

    #[test]
    fn fixed_window_signature_is_flagged_and_even_admission_is_not() {
        let w = Windows {
            window_ns: 1_000_000_000,
            offset_ns: 0,
            near_ns: 200_000_000,
        };
        let fixed = [zone(40, 0), zone(40, 40), zone(120, 0)];
        let v = verdict(&w, &fixed, 4, 400, 1000);
        assert!(v.flagged, "{v:?}");
        assert_eq!(v.verdict, "boundary effect");
        let even = [zone(40, 8), zone(40, 8), zone(120, 24)];
        let v = verdict(&w, &even, 4, 400, 1000);
        assert!(!v.flagged, "{v:?}");
        assert_eq!(v.verdict, "no boundary effect");
        let few = [zone(3, 0), zone(3, 3), zone(5, 0)];
        assert_eq!(verdict(&w, &few, 1, 400, 1000).verdict, "inconclusive");
    }

    #[test]
    fn clustered_denials_are_flagged() {
        let w = Windows {
            window_ns: 1_000_000_000,
            offset_ns: 0,
            near_ns: 100_000_000,
        };
        // 20% of requests near boundaries, but 90% of the denials.
        let mut b = zone(10, 1);
        let mut a = zone(10, 1);
        let e = ZoneStats {
            sent: 80,
            admitted: 78,
            denied: 2,
            ..Default::default()
        };
        b.denied = 9;
        a.denied = 9;
        let v = verdict(&w, &[b, a, e], 5, 200, 1000);
        assert!(v.flagged, "{v:?}");
        assert!(v.reasons.iter().any(|r| r.starts_with("denials cluster")));
    }
}
