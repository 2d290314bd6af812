//! The division of one bucket's global limit among the clients reporting for it: pure
//! and clocked (every instant is an argument, milliseconds since the Unix epoch, as the
//! store's clock reads them; no I/O).
//!
//! Each client reports its demand, the requests it saw (allowed + denied) over the time
//! since its previous report, in requests per second. A client is *live* while its last
//! report is younger than the bucket's time to live; only live clients share the limit,
//! so the share of a client that went silent (or abandoned the bucket, or lost its
//! stream) returns to the others once its last assignment has expired on its side.
//!
//! [`Division::divide`] is max-min fair (water-filling): every live client first wants
//! `max(demand, floor)`; in increasing order of want, each gets its want or an equal part
//! of what is left, whichever is smaller; what is left when every want is met (spare
//! capacity) is split equally among all. So:
//!
//! * the shares sum to the limit (never more: the division's slack is 0, up to float
//!   rounding of about 1e-9 of the limit);
//! * each share is at least the floor (the floor shrinks to `limit / n` when `n` floors
//!   would not fit);
//! * a client gets more than `max(demand, floor)` only by its equal part of the spare;
//! * a client that gets less than its want gets at least as much as any other client.

use std::fmt;

/// Why a division's parameters are refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShareError {
    /// The limit is not a positive, finite rate.
    #[error("the limit must be a positive, finite rate, got {0} per second")]
    Limit(f64),
    /// The floor is negative, not finite, or above the limit.
    #[error("the floor must be between 0 and the limit ({limit} per second), got {floor}")]
    Floor {
        /// The floor, per second.
        floor: f64,
        /// The limit, per second.
        limit: f64,
    },
}

/// One client's latest report for a bucket, as a demand store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientDemand {
    /// The client (its stream's identity).
    pub client: String,
    /// Requests per second it saw (allowed + denied over the elapsed time); finite, >= 0.
    pub demand: f64,
    /// When it reported, milliseconds since the Unix epoch.
    pub reported_ms: u64,
}

impl ClientDemand {
    /// Whether the report still counts at `now_ms` under a time to live of `ttl_ms`:
    /// reported less than `ttl_ms` before `now_ms`.
    pub fn live(&self, now_ms: u64, ttl_ms: u64) -> bool {
        self.reported_ms.saturating_add(ttl_ms) > now_ms
    }
}

/// A demand in requests per second from one report: `allowed + denied` over `elapsed`
/// (`fallback` when the report carries no elapsed time, as a first report may); finite
/// and >= 0 whatever the counts (saturating).
pub fn demand_of(
    allowed: u64,
    denied: u64,
    elapsed: std::time::Duration,
    fallback: std::time::Duration,
) -> f64 {
    let seen = allowed.saturating_add(denied) as f64;
    let secs = if elapsed.is_zero() {
        fallback.as_secs_f64()
    } else {
        elapsed.as_secs_f64()
    };
    if secs <= 0.0 {
        return 0.0;
    }
    let d = seen / secs;
    if d.is_finite() { d } else { f64::MAX }
}

/// A bucket's global limit and the floor of every live client, both in requests per
/// second.
#[derive(Clone, Copy, PartialEq)]
pub struct Division {
    limit: f64,
    floor: f64,
}

impl fmt::Debug for Division {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Division({}/s, floor {}/s)", self.limit, self.floor)
    }
}

impl Division {
    /// A division of `limit` requests per second with a floor of `floor` per client.
    pub fn new(limit: f64, floor: f64) -> Result<Division, ShareError> {
        if !(limit.is_finite() && limit > 0.0) {
            return Err(ShareError::Limit(limit));
        }
        if !(floor.is_finite() && (0.0..=limit).contains(&floor)) {
            return Err(ShareError::Floor { floor, limit });
        }
        Ok(Division { limit, floor })
    }

    /// The limit, requests per second.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// The floor among `n` clients: the configured one, or `limit / n` when `n` floors
    /// would not fit in the limit.
    pub fn floor_among(&self, n: usize) -> f64 {
        if n == 0 {
            return self.floor;
        }
        self.floor.min(self.limit / n as f64)
    }

    /// Each client's share of the limit, in the order of `demands` (requests per second;
    /// a demand that is NaN or negative counts as 0).
    pub fn divide(&self, demands: &[f64]) -> Vec<f64> {
        let n = demands.len();
        if n == 0 {
            return Vec::new();
        }
        let floor = self.floor_among(n);
        let want: Vec<f64> = demands
            .iter()
            .map(|&d| if d.is_nan() || d < 0.0 { 0.0 } else { d }.max(floor))
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| want[a].total_cmp(&want[b]));
        let mut shares = vec![0.0; n];
        let mut left = self.limit;
        for (done, &i) in order.iter().enumerate() {
            let equal = left / (n - done) as f64;
            let s = want[i].min(equal);
            shares[i] = s;
            left = (left - s).max(0.0);
        }
        if left > 0.0 {
            let spare = left / n as f64;
            for s in &mut shares {
                *s += spare;
            }
        }
        shares
    }

    /// The live clients of `reports` at `now_ms` (time to live `ttl_ms`), in client
    /// order, each with its share.
    pub fn shares(
        &self,
        reports: &[ClientDemand],
        now_ms: u64,
        ttl_ms: u64,
    ) -> Vec<(ClientDemand, f64)> {
        let mut live: Vec<ClientDemand> = reports
            .iter()
            .filter(|r| r.live(now_ms, ttl_ms))
            .cloned()
            .collect();
        live.sort_by(|a, b| a.client.cmp(&b.client));
        let demands: Vec<f64> = live.iter().map(|r| r.demand).collect();
        let shares = self.divide(&demands);
        live.into_iter().zip(shares).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    const EPS: f64 = 1e-9;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= EPS * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn skewed_demand_gets_skewed_shares() {
        let d = Division::new(100.0, 1.0).unwrap();
        // one busy, one quiet: the quiet one gets its demand, the busy one the rest
        let s = d.divide(&[200.0, 10.0]);
        assert!(close(s[0], 90.0) && close(s[1], 10.0), "{s:?}");
        // both busy: equal halves
        let s = d.divide(&[200.0, 300.0]);
        assert!(close(s[0], 50.0) && close(s[1], 50.0), "{s:?}");
        // both quiet: their demands plus an equal part of the spare
        let s = d.divide(&[20.0, 10.0]);
        assert!(close(s[0], 55.0) && close(s[1], 45.0), "{s:?}");
        // an idle client gets the floor, then its part of the spare; a busy one the rest
        let s = d.divide(&[0.0, 500.0, 500.0]);
        assert!(
            close(s[0], 1.0) && close(s[1], 49.5) && close(s[2], 49.5),
            "{s:?}"
        );
        assert!(d.divide(&[]).is_empty());
    }

    #[test]
    fn floors_shrink_when_they_would_not_fit() {
        let d = Division::new(10.0, 4.0).unwrap();
        assert!(close(d.floor_among(5), 2.0));
        let s = d.divide(&[0.0; 5]);
        assert!(s.iter().all(|&x| close(x, 2.0)), "{s:?}");
    }

    #[test]
    fn bad_parameters_and_demands() {
        assert_eq!(Division::new(0.0, 0.0), Err(ShareError::Limit(0.0)));
        assert!(Division::new(f64::NAN, 0.0).is_err());
        assert!(Division::new(f64::INFINITY, 0.0).is_err());
        assert!(Division::new(10.0, 11.0).is_err());
        assert!(Division::new(10.0, -1.0).is_err());
        let d = Division::new(10.0, 0.0).unwrap();
        let s = d.divide(&[f64::NAN, -5.0, f64::INFINITY]);
        assert!(close(s.iter().sum::<f64>(), 10.0), "{s:?}");
        assert!(close(s[2], 10.0), "{s:?}");
        let z = Duration::ZERO;
        let sec = Duration::from_secs(1);
        assert_eq!(demand_of(3, 7, Duration::from_secs(2), sec), 5.0);
        assert_eq!(demand_of(10, 0, z, Duration::from_secs(5)), 2.0);
        assert_eq!(demand_of(10, 0, z, z), 0.0);
        assert!(demand_of(u64::MAX, u64::MAX, Duration::from_nanos(1), sec).is_finite());
    }

    #[test]
    fn silent_clients_expire_after_their_ttl() {
        let d = Division::new(100.0, 1.0).unwrap();
        let r = |client: &str, demand, reported_ms| ClientDemand {
            client: client.into(),
            demand,
            reported_ms,
        };
        let reports = [r("a", 500.0, 1_000), r("b", 500.0, 5_000)];
        // both live at 5 s (ttl 10 s): halves
        let s = d.shares(&reports, 5_000, 10_000);
        assert_eq!(s.len(), 2);
        assert!(close(s[0].1, 50.0));
        // at 11 s, a's report is 10 s old: it no longer counts, b gets the whole limit
        let s = d.shares(&reports, 11_000, 10_000);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0.client, "b");
        assert!(close(s[0].1, 100.0));
        assert!(d.shares(&reports, 15_000, 10_000).is_empty());
    }

    proptest! {
        #[test]
        fn division_invariants(
            limit in 0.001f64..1e9,
            floor_part in 0.0f64..1.0,
            demands in proptest::collection::vec(0.0f64..1e10, 0..40),
        ) {
            let d = Division::new(limit, limit * floor_part / 10.0).unwrap();
            let s = d.divide(&demands);
            prop_assert_eq!(s.len(), demands.len());
            if demands.is_empty() {
                return Ok(());
            }
            let n = demands.len() as f64;
            let sum: f64 = s.iter().sum();
            // the sum is the limit, never more (slack: float rounding only)
            prop_assert!(sum <= limit * (1.0 + EPS), "sum {} > limit {}", sum, limit);
            prop_assert!(close(sum, limit), "sum {} != limit {}", sum, limit);
            let floor = d.floor_among(demands.len());
            let want: Vec<f64> = demands.iter().map(|&x| x.max(floor)).collect();
            let spare = (limit - want.iter().sum::<f64>()).max(0.0) / n;
            for i in 0..s.len() {
                // idle or not, every client gets the floor
                prop_assert!(s[i] >= floor * (1.0 - EPS), "share {} < floor {}", s[i], floor);
                // never more than its want, but for its equal part of the spare
                prop_assert!(s[i] <= (want[i] + spare) * (1.0 + EPS) + EPS);
                // max-min: a client short of its want has at least every other's share
                if s[i] < want[i] * (1.0 - 1e-6) {
                    for (j, &other) in s.iter().enumerate() {
                        prop_assert!(other <= s[i] * (1.0 + 1e-6) + EPS, "{} short at {} but {} has {}", i, s[i], j, other);
                    }
                }
            }
        }

        #[test]
        fn only_live_clients_share(
            reported in proptest::collection::vec(0u64..100_000, 1..20),
            now in 0u64..200_000,
            ttl in 1u64..50_000,
        ) {
            let d = Division::new(1000.0, 1.0).unwrap();
            let reports: Vec<ClientDemand> = reported
                .iter()
                .enumerate()
                .map(|(i, &at)| ClientDemand { client: format!("c{i:02}"), demand: 100.0, reported_ms: at })
                .collect();
            let s = d.shares(&reports, now, ttl);
            let live = reported.iter().filter(|&&at| at + ttl > now).count();
            prop_assert_eq!(s.len(), live);
            for (r, _) in &s {
                prop_assert!(r.reported_ms + ttl > now);
            }
            if live > 0 {
                prop_assert!(close(s.iter().map(|x| x.1).sum::<f64>(), 1000.0));
            }
        }
    }
}
