//! The overshoot auditor: from what the backend received, the most requests admitted per
//! key in any span of the policy's window, against the guarantee of the fleet strategy
//! in use.
//!
//! The guarantee of a GCRA policy with capacity `C` and rate `r`: at most
//! `B(s) = C + floor(r x s)` admissions in any span `s` (decided on one counter). Per
//! strategy ([Distributed](../../../docs/distributed.md), `floodgate-dist`):
//!
//! * `shared`: `B(s)`, exact (every decision on the Redis counter);
//! * `hybrid`: `B(s) + nodes x lease` (leases charged before the span, spent inside it);
//! * `local`: `nodes x ceil(C / nodes) + floor(r x s)` (each node enforces its share);
//! * fail open adds its own term: every request admitted without a decision while the
//!   store could not decide (it has no other bound: that is what failing open means).
//!
//! The backend sees arrival times, not decision times: a decision happened between the
//! client's send and the backend's arrival. Two decisions whose arrivals lie in a span
//! `W` were made at most `W + lag` apart, `lag` the longest send-to-arrival time of the
//! admissions in the span, so the bound applied to a span of arrivals is `B(W + lag)`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A GCRA policy as the fleet's nodes run it (cost 1 per request).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// Capacity (the burst; nginx `burst + 1`).
    pub capacity: u64,
    /// Requests per second.
    pub rate: f64,
    /// The policy's window (the period of its rate, e.g. 1 s for `20/s`).
    pub window: Duration,
}

impl Limit {
    /// `C + floor(r x span)`: most admissions on one counter in a span.
    pub fn bound(&self, span: Duration) -> u64 {
        self.capacity + (self.rate * span.as_secs_f64()).floor() as u64
    }
}

/// The fleet strategy whose guarantee applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    /// One shared counter: exact.
    Shared,
    /// Leases of at most `lease` units on `nodes` nodes.
    Hybrid {
        /// Nodes in the fleet.
        nodes: u64,
        /// Most units per lease.
        lease: u64,
    },
    /// Each node enforces `1 / nodes` of the limit.
    Local {
        /// Nodes in the fleet.
        nodes: u64,
    },
    /// Each key decided by its owner; while the owner is unreachable every other node
    /// decides alone with a fresh limiter (local fallback), and a restarted owner starts
    /// fresh: at worst every node and the owner's two lives each admit the limit's bound.
    Sticky {
        /// Nodes in the fleet.
        nodes: u64,
    },
}

impl Guarantee {
    /// The most admissions in a span of decisions `span` long.
    pub fn bound(self, l: &Limit, span: Duration) -> u64 {
        match self {
            Guarantee::Shared => l.bound(span),
            Guarantee::Hybrid { nodes, lease } => l.bound(span) + nodes * lease,
            Guarantee::Local { nodes } => {
                nodes * l.capacity.div_ceil(nodes.max(1))
                    + (l.rate * span.as_secs_f64()).floor() as u64
            }
            Guarantee::Sticky { nodes } => (nodes + 1) * l.bound(span),
        }
    }

    /// How the bound reads in the table.
    pub fn formula(self) -> String {
        match self {
            Guarantee::Shared => "C+r(W+lag)".into(),
            Guarantee::Hybrid { nodes, lease } => format!("C+r(W+lag)+{nodes}x{lease}"),
            Guarantee::Local { nodes } => format!("{nodes}xceil(C/{nodes})+r(W+lag)"),
            Guarantee::Sticky { nodes } => format!("{}x(C+r(W+lag))", nodes + 1),
        }
    }
}

/// One admitted request as the backend saw it.
#[derive(Debug, Clone)]
pub struct Admission {
    /// Its key.
    pub key: String,
    /// When it reached the backend.
    pub at: Instant,
    /// From the client's send to the arrival (the decision lies in between).
    pub lag: Duration,
    /// Admitted by fail open (no decision), not by the limiter.
    pub open: bool,
}

/// What the auditor found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overshoot {
    /// Admissions audited.
    pub admitted: u64,
    /// Of which admitted by fail open.
    pub open: u64,
    /// The largest `count - bound` over every span and key (negative: headroom left).
    pub worst: i64,
    /// The count and bound of that span.
    pub worst_count: u64,
    /// The bound of that span.
    pub worst_bound: u64,
    /// Its key.
    pub worst_key: String,
    /// Spans (one per admission that starts one) over their bound.
    pub spans_over: u64,
    /// From the first to the last admission in a span over its bound (zero when none).
    pub lasted: Duration,
}

/// Audit `admissions` (any order, any keys) against `g` for `limit`, plus `extra` per
/// span (what a fault may add, stated by the fault).
pub fn audit(admissions: &[Admission], g: Guarantee, limit: &Limit, extra: u64) -> Overshoot {
    let mut by_key: BTreeMap<&str, Vec<&Admission>> = BTreeMap::new();
    for a in admissions {
        by_key.entry(&a.key).or_default().push(a);
    }
    let mut out = Overshoot {
        admitted: admissions.len() as u64,
        open: admissions.iter().filter(|a| a.open).count() as u64,
        worst: i64::MIN,
        ..Overshoot::default()
    };
    let (mut first_over, mut last_over): (Option<Instant>, Option<Instant>) = (None, None);
    for (key, mut v) in by_key {
        v.sort_by_key(|a| a.at);
        let mut j = 0;
        for i in 0..v.len() {
            j = j.max(i);
            while j + 1 < v.len() && v[j + 1].at.duration_since(v[i].at) <= limit.window {
                j += 1;
            }
            let span = &v[i..=j];
            let count = span.len() as u64;
            let lag = span.iter().map(|a| a.lag).max().unwrap_or_default();
            let open = span.iter().filter(|a| a.open).count() as u64;
            let bound = g.bound(limit, limit.window + lag) + open + extra;
            let over = count as i64 - bound as i64;
            if over > out.worst {
                out.worst = over;
                out.worst_count = count;
                out.worst_bound = bound;
                out.worst_key = key.to_string();
            }
            if over > 0 {
                out.spans_over += 1;
                first_over = Some(first_over.map_or(v[i].at, |f| f.min(v[i].at)));
                last_over = Some(last_over.map_or(v[j].at, |l| l.max(v[j].at)));
            }
        }
    }
    if out.worst == i64::MIN {
        out.worst = 0;
    }
    if let (Some(f), Some(l)) = (first_over, last_over) {
        out.lasted = l.duration_since(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Limit = Limit {
        capacity: 10,
        rate: 5.0,
        window: Duration::from_secs(1),
    };

    fn at(t0: Instant, ms: &[u64], open: bool) -> Vec<Admission> {
        ms.iter()
            .map(|m| Admission {
                key: "k".into(),
                at: t0 + Duration::from_millis(*m),
                lag: Duration::ZERO,
                open,
            })
            .collect()
    }

    #[test]
    fn bounds_per_strategy() {
        assert_eq!(LIMIT.bound(Duration::from_millis(1400)), 17);
        assert_eq!(
            Guarantee::Hybrid { nodes: 3, lease: 5 }.bound(&LIMIT, Duration::from_secs(1)),
            30
        );
        // 3 x ceil(10 / 3) + 5
        assert_eq!(
            Guarantee::Local { nodes: 3 }.bound(&LIMIT, Duration::from_secs(1)),
            17
        );
        assert_eq!(
            Guarantee::Sticky { nodes: 3 }.bound(&LIMIT, Duration::from_secs(1)),
            60
        );
    }

    #[test]
    fn a_run_within_the_bound_passes_and_one_over_is_caught() {
        let t0 = Instant::now();
        // 15 in the first second: the bound for W = 1 s
        let ms: Vec<u64> = (0..15).map(|i| i * 60).collect();
        let ok = audit(&at(t0, &ms, false), Guarantee::Shared, &LIMIT, 0);
        assert_eq!((ok.worst, ok.spans_over), (0, 0), "{ok:?}");
        // two more inside the same second: 2 over, lasting from the first to the last
        let mut more = at(t0, &ms, false);
        more.extend(at(t0, &[500, 900], false));
        let bad = audit(&more, Guarantee::Shared, &LIMIT, 0);
        assert_eq!(bad.worst, 2, "{bad:?}");
        assert!(bad.lasted >= Duration::from_millis(840), "{bad:?}");
        // the same under hybrid's allowance is fine
        assert!(audit(&more, Guarantee::Hybrid { nodes: 3, lease: 1 }, &LIMIT, 0).worst < 0);
        // keys are audited apart
        let mut other = at(t0, &ms, false);
        other.extend(at(t0, &ms, false).into_iter().map(|mut a| {
            a.key = "other".into();
            a
        }));
        assert_eq!(audit(&other, Guarantee::Shared, &LIMIT, 0).worst, 0);
    }

    #[test]
    fn lag_widens_the_span_and_fail_open_counts_its_own() {
        let t0 = Instant::now();
        let ms: Vec<u64> = (0..17).map(|i| i * 50).collect();
        let mut v = at(t0, &ms, false);
        assert_eq!(audit(&v, Guarantee::Shared, &LIMIT, 0).worst, 2);
        // decisions up to 400 ms before their arrival: B(1.4 s) = 17
        v[0].lag = Duration::from_millis(400);
        v[1].lag = Duration::from_millis(400);
        assert_eq!(audit(&v, Guarantee::Shared, &LIMIT, 0).worst, 0);
        // fail-open admissions are added to the bound
        let mut w = at(t0, &ms, false);
        w.extend(at(t0, &[100, 200, 300], true));
        let o = audit(&w, Guarantee::Shared, &LIMIT, 0);
        assert_eq!((o.worst, o.open), (2, 3), "{o:?}");
    }
}
