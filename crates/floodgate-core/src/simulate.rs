//! Traffic scenarios on a simulated clock, run through any algorithm: the engine behind
//! `floodgate simulate`. Pure computation; rendering (tables, JSON, SVG) is the CLI's job.

use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::any::{Kind, Spec};
use crate::error::ConfigError;
use crate::rate::parse_duration;
use crate::time::{Nanos, duration_to_nanos};

/// `count` requests of `cost` units each, all arriving at instant `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    /// Arrival instant.
    pub at: Nanos,
    /// Number of requests.
    pub count: u64,
    /// Units per request.
    pub cost: u64,
}

impl std::str::FromStr for Burst {
    type Err = ConfigError;
    /// `COUNT@TIME[xCOST]`, e.g. `100@59.9s` or `5@3sx2` (five requests of cost 2 at 3 s).
    fn from_str(s: &str) -> Result<Burst, ConfigError> {
        let bad = |reason: &str| {
            ConfigError::Inconsistent(format!(
                "invalid burst {s:?}: {reason}; expected COUNT@TIME[xCOST] such as 100@59.9s or 5@3sx2"
            ))
        };
        let (count, rest) = s.trim().split_once('@').ok_or_else(|| bad("missing '@'"))?;
        let (time, cost) = match rest.rsplit_once('x') {
            Some((t, c)) => (
                t,
                c.parse::<u64>()
                    .map_err(|_| bad("cost is not a whole number"))?,
            ),
            None => (rest, 1),
        };
        let count = count
            .trim()
            .parse::<u64>()
            .map_err(|_| bad("count is not a whole number"))?;
        if count > 10_000_000 {
            return Err(bad("more than 10,000,000 requests in one burst"));
        }
        Ok(Burst {
            at: Nanos::from(parse_duration(time)?),
            count,
            cost,
        })
    }
}

/// A named traffic pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// Short name for tables.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// The arrivals, in any order.
    pub bursts: Vec<Burst>,
}

impl Scenario {
    /// The seed's boundary case: `limit` requests just before the first window boundary
    /// (`window - offset`) and `limit` just after (`window + offset`).
    pub fn boundary(limit: u64, window: Duration, offset: Duration) -> Scenario {
        let w = Nanos::from(window);
        let o = duration_to_nanos(offset).min(w.0);
        Scenario {
            name: "boundary".into(),
            description: format!(
                "{limit} requests at t={:.3}s and {limit} at t={:.3}s, across the window boundary",
                (w.0 - o) as f64 / 1e9,
                (w.0 + o) as f64 / 1e9
            ),
            bursts: vec![
                Burst {
                    at: Nanos(w.0 - o),
                    count: limit,
                    cost: 1,
                },
                Burst {
                    at: Nanos(w.0.saturating_add(o)),
                    count: limit,
                    cost: 1,
                },
            ],
        }
    }

    /// The seed's refill case: a burst of `first` at t=0, then `second` quick requests after
    /// `idle`.
    pub fn refill(first: u64, idle: Duration, second: u64) -> Scenario {
        Scenario {
            name: "refill".into(),
            description: format!(
                "{first} at once, then {second} at once after {:.3}s idle",
                idle.as_secs_f64()
            ),
            bursts: vec![
                Burst {
                    at: Nanos::ZERO,
                    count: first,
                    cost: 1,
                },
                Burst {
                    at: Nanos::from(idle),
                    count: second,
                    cost: 1,
                },
            ],
        }
    }

    /// `rps` requests per second, evenly spaced, for `duration`.
    pub fn steady(rps: u64, duration: Duration) -> Result<Scenario, ConfigError> {
        if rps == 0 {
            return Err(ConfigError::Zero { what: "rps" });
        }
        let n = (rps as u128 * duration.as_nanos() / 1_000_000_000) as u64;
        if n > 10_000_000 {
            return Err(ConfigError::Inconsistent(format!(
                "steady scenario of {n} requests is above the 10,000,000 the simulator runs"
            )));
        }
        let gap = 1_000_000_000 / rps;
        Ok(Scenario {
            name: "steady".into(),
            description: format!(
                "{rps} requests per second for {:.3}s",
                duration.as_secs_f64()
            ),
            bursts: (0..n)
                .map(|i| Burst {
                    at: Nanos(i * gap),
                    count: 1,
                    cost: 1,
                })
                .collect(),
        })
    }
}

/// What one algorithm did with one scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The algorithm.
    pub kind: Kind,
    /// Requests admitted.
    pub allowed: u64,
    /// Requests denied.
    pub denied: u64,
    /// Requests admitted from each burst, in time order of the bursts.
    pub allowed_by_burst: Vec<u64>,
    /// The most units forwarded in any span of one window length.
    pub max_in_window: u64,
    /// The most units forwarded in any span of one second.
    pub max_in_second: u64,
    /// The longest delay the algorithm imposed (leaky queue only).
    pub max_delay: Duration,
    /// Every forwarded request: (instant it reaches the backend, units), in time order.
    /// For the leaky queue that is arrival + delay.
    pub forwarded: Vec<(Nanos, u64)>,
}

/// Run `scenario` through the algorithm described by `spec`; `window` is the span for
/// [`Outcome::max_in_window`] (normally the rate's period).
pub fn run(spec: &Spec, scenario: &Scenario, window: Duration) -> Result<Outcome, ConfigError> {
    let alg = spec.build()?;
    let mut bursts = scenario.bursts.clone();
    bursts.sort_by_key(|b| b.at);
    let mut state = Default::default();
    let (mut allowed, mut denied, mut max_delay) = (0, 0, Duration::ZERO);
    let mut forwarded = Vec::new();
    let mut allowed_by_burst = Vec::with_capacity(bursts.len());
    for b in &bursts {
        let before = allowed;
        for _ in 0..b.count {
            let d = alg.check(&mut state, b.at, b.cost);
            if d.allowed {
                allowed += 1;
                max_delay = max_delay.max(d.delay);
                forwarded.push((b.at.saturating_add(d.delay), b.cost));
            } else {
                denied += 1;
            }
        }
        allowed_by_burst.push(allowed - before);
    }
    forwarded.sort_by_key(|f| f.0);
    Ok(Outcome {
        kind: spec.kind,
        allowed,
        denied,
        allowed_by_burst,
        max_in_window: max_in_span(&forwarded, duration_to_nanos(window)),
        max_in_second: max_in_span(&forwarded, 1_000_000_000),
        max_delay,
        forwarded,
    })
}

/// The most units in any half-open span `[t, t + span)` of time-ordered `(instant, units)`.
pub fn max_in_span(events: &[(Nanos, u64)], span: u64) -> u64 {
    let (mut best, mut sum, mut lo) = (0, 0u64, 0);
    for &(t, units) in events {
        sum += units;
        while events[lo].0.0.saturating_add(span) <= t.0 {
            sum -= events[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;
    use crate::algorithms::DelayMode;

    fn outcome(kind: Kind, rate: &str, capacity: Option<u64>, sc: &Scenario) -> Outcome {
        let rate: Rate = rate.parse().unwrap();
        let mut spec = Spec::new(kind, rate);
        spec.capacity = capacity;
        if kind == Kind::LeakyQueue {
            spec.delay = DelayMode::After(0);
        }
        run(&spec, sc, rate.period()).unwrap()
    }

    #[test]
    fn seed_boundary_case() {
        let sc = Scenario::boundary(100, Duration::from_secs(60), Duration::from_millis(100));
        let fw = outcome(Kind::FixedWindow, "100/60s", None, &sc);
        assert_eq!((fw.allowed, fw.max_in_window), (200, 200));
        let log = outcome(Kind::SlidingLog, "100/60s", None, &sc);
        assert_eq!((log.allowed, log.max_in_window), (100, 100));
        for k in [
            Kind::SlidingCounter,
            Kind::Gcra,
            Kind::TokenBucket,
            Kind::LeakyMeter,
        ] {
            let o = outcome(k, "100/60s", None, &sc);
            assert_eq!(o.allowed, 100, "{k}");
            assert!(o.max_in_window <= 101, "{k}: {}", o.max_in_window);
        }
    }

    #[test]
    fn seed_refill_case() {
        let sc = Scenario::refill(15, Duration::from_secs(3), 10);
        let tb = outcome(Kind::TokenBucket, "2/s", Some(10), &sc);
        assert_eq!((tb.allowed, tb.denied), (16, 9));
        assert_eq!(tb.allowed_by_burst, vec![10, 6]);
        let mut state = Default::default();
        let alg = Spec {
            capacity: Some(10),
            ..Spec::new(Kind::TokenBucket, "2/s".parse().unwrap())
        }
        .build()
        .unwrap();
        let first = (0..15)
            .filter(|_| alg.check(&mut state, Nanos::ZERO, 1).allowed)
            .count();
        assert_eq!(first, 10);
    }

    #[test]
    fn leaky_queue_smooths_what_the_backend_sees() {
        let sc = Scenario::boundary(100, Duration::from_secs(60), Duration::from_millis(100));
        let q = outcome(Kind::LeakyQueue, "100/60s", Some(100), &sc);
        assert_eq!(q.allowed, 100);
        assert_eq!(q.max_in_second, 2, "forwarded at 1 per 0.6 s");
        assert!(q.max_delay > Duration::from_secs(59));
    }

    #[test]
    fn span_counting() {
        let ev = [(Nanos(0), 1), (Nanos(5), 2), (Nanos(10), 4), (Nanos(11), 1)];
        assert_eq!(max_in_span(&ev, 10), 7);
        assert_eq!(max_in_span(&ev, 6), 6);
        assert_eq!(max_in_span(&[], 6), 0);
    }

    #[test]
    fn burst_parsing() {
        assert_eq!(
            "100@59.9s".parse::<Burst>().unwrap(),
            Burst {
                at: Nanos::from_millis(59_900),
                count: 100,
                cost: 1
            }
        );
        assert_eq!("5@3sx2".parse::<Burst>().unwrap().cost, 2);
        assert!("5".parse::<Burst>().is_err());
        assert!("5@3q".parse::<Burst>().is_err());
        assert!("99999999999@1s".parse::<Burst>().is_err());
    }
}
