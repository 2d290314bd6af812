//! Price each strategy on a simulated clock, with no network: the engine behind
//! `floodgate simulate --nodes N --strategy ...`.
//!
//! The reference is an ideal, exact, global limiter that sees every request in time
//! order. Against it each strategy is measured by:
//! * **over-admitted**: requests admitted beyond what the ideal admitted, per key (the
//!   N-times problem), and **worst excess**: the most any key got, in any one-period span,
//!   above the limit's own bound (`capacity + count`);
//! * **legit denied**: requests the ideal admitted that the strategy denied (quota sitting
//!   idle on other nodes: the waste);
//! * **round trips per request** and the latency they add at the simulated RTT;
//! * **moved keys**: keys whose owner changed at a node failure or join (sticky: each gets
//!   a fresh burst on its new owner).

use std::collections::HashMap;

use floodgate_core::{Algorithm, AnyAlgorithm, ConfigError, KeyedLimiter, Kind, Nanos, Spec};

use crate::hybrid::{Finish, HybridNode, Step};
use crate::rendezvous::Rendezvous;
use crate::share::local_share;

/// A distributed strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Every node enforces the full limit on its own: what N copies of a single-node
    /// limiter do. Shown as the baseline of the N-times problem.
    Naive,
    /// Each key counted on its owner (rendezvous hashing); others forward.
    Sticky,
    /// Each node enforces limit / N locally.
    LocalShare,
    /// Every decision through one shared counter (Redis GCRA), with a local denial cache.
    Shared,
    /// Local leases far from the limit, shared near it.
    Hybrid,
}

impl Strategy {
    /// All strategies, in table order.
    pub const ALL: [Strategy; 5] = [
        Strategy::Naive,
        Strategy::Sticky,
        Strategy::LocalShare,
        Strategy::Shared,
        Strategy::Hybrid,
    ];

    /// The config / CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Sticky => "sticky",
            Strategy::LocalShare => "local",
            Strategy::Shared => "shared",
            Strategy::Hybrid => "hybrid",
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Strategy, ConfigError> {
        match s.trim() {
            "naive" => Ok(Strategy::Naive),
            "sticky" => Ok(Strategy::Sticky),
            "local" | "local-share" => Ok(Strategy::LocalShare),
            "shared" => Ok(Strategy::Shared),
            "hybrid" => Ok(Strategy::Hybrid),
            other => Err(ConfigError::Inconsistent(format!(
                "unknown strategy {other:?}; expected naive, sticky, local, shared or hybrid"
            ))),
        }
    }
}

/// How requests are spread over keys and nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skew {
    /// Keys uniform; each request to a random live node.
    Uniform,
    /// Keys Zipf-distributed (s = 1.1); random node.
    Zipf,
    /// 80% of requests on one key, the rest uniform; random node.
    HotKey,
    /// One client (one key) sending round-robin over all live nodes.
    Spread,
    /// Keys uniform, but each client always lands on the same node (keep-alive
    /// connections, client-side affinity): per-node demand is uneven.
    Pinned,
}

impl std::str::FromStr for Skew {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Skew, ConfigError> {
        match s.trim() {
            "uniform" => Ok(Skew::Uniform),
            "zipf" => Ok(Skew::Zipf),
            "hot" | "hot-key" => Ok(Skew::HotKey),
            "spread" => Ok(Skew::Spread),
            "pinned" => Ok(Skew::Pinned),
            other => Err(ConfigError::Inconsistent(format!(
                "unknown skew {other:?}; expected uniform, zipf, hot, spread or pinned"
            ))),
        }
    }
}

/// A fleet event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Node `index` fails at `at`: its state is lost.
    Fail {
        /// Node index (0-based, in the initial list).
        node: usize,
        /// When.
        at: Nanos,
    },
    /// A new node joins at `at`.
    Join {
        /// When.
        at: Nanos,
    },
}

impl Event {
    fn at(&self) -> Nanos {
        match self {
            Event::Fail { at, .. } | Event::Join { at } => *at,
        }
    }
}

/// A simulation.
#[derive(Debug, Clone)]
pub struct Config {
    /// Nodes at the start.
    pub nodes: usize,
    /// The global limit per key.
    pub spec: Spec,
    /// Distinct keys (ignored by `Spread`).
    pub keys: u64,
    /// Offered requests per second, all nodes together.
    pub rps: u64,
    /// Length of the run, nanoseconds.
    pub duration_ns: u64,
    /// Traffic shape.
    pub skew: Skew,
    /// Round-trip time between nodes and to the shared store, nanoseconds.
    pub rtt_ns: u64,
    /// Failures and joins.
    pub events: Vec<Event>,
    /// Hybrid: units per lease.
    pub lease: u64,
    /// Hybrid: lease lifetime, nanoseconds.
    pub lease_ttl_ns: u64,
    /// PRNG seed: the same seed gives the same traffic.
    pub seed: u64,
}

/// What one strategy did.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The strategy.
    pub strategy: Strategy,
    /// Requests offered.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests the ideal global limiter admitted.
    pub ideal: u64,
    /// Admitted beyond the ideal, summed over keys.
    pub over_admitted: u64,
    /// Ideal-admitted requests this strategy denied, summed over keys.
    pub legit_denied: u64,
    /// The most any key got in a one-period span above `capacity + count`.
    pub worst_excess: u64,
    /// Network round trips (forwards, shared decisions, lease requests).
    pub round_trips: u64,
    /// Mean latency added by round trips, milliseconds.
    pub added_latency_ms: f64,
    /// Keys whose owner changed at a failure or join (sticky only; 0 for the others).
    pub moved_keys: u64,
}

impl Report {
    /// Round trips per request.
    pub fn round_trips_per_request(&self) -> f64 {
        self.round_trips as f64 / self.requests.max(1) as f64
    }
}

struct Request {
    at: Nanos,
    key: u64,
    node: usize,
}

/// splitmix64: a small, good, seedable PRNG (no dependency needed for a simulation).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The most requests the simulator runs.
pub const MAX_REQUESTS: u64 = 5_000_000;

fn traffic(c: &Config) -> Result<Vec<Request>, ConfigError> {
    if c.nodes == 0 {
        return Err(ConfigError::Zero { what: "nodes" });
    }
    if c.rps == 0 {
        return Err(ConfigError::Zero { what: "rps" });
    }
    if c.keys == 0 {
        return Err(ConfigError::Zero { what: "keys" });
    }
    let n = (c.rps as u128 * c.duration_ns as u128 / 1_000_000_000) as u64;
    if n > MAX_REQUESTS {
        return Err(ConfigError::Inconsistent(format!(
            "{n} requests is above the {MAX_REQUESTS} the simulator runs; lower --rps or --duration"
        )));
    }
    let keys = c.keys.min(100_000);
    let zipf_cdf: Vec<f64> = if c.skew == Skew::Zipf {
        let w: Vec<f64> = (1..=keys).map(|k| 1.0 / (k as f64).powf(1.1)).collect();
        let total: f64 = w.iter().sum();
        w.iter()
            .scan(0.0, |acc, x| {
                *acc += x / total;
                Some(*acc)
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut rng = Rng(c.seed);
    let gap = 1_000_000_000 / c.rps;
    let mut alive: Vec<usize> = (0..c.nodes).collect();
    let mut next_node = c.nodes;
    let mut events = c.events.clone();
    events.sort_by_key(Event::at);
    let mut ev = events.iter().peekable();
    let mut rr = 0usize;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let at = Nanos(i * gap);
        while let Some(e) = ev.next_if(|e| e.at() <= at) {
            match *e {
                Event::Fail { node, .. } => alive.retain(|&x| x != node),
                Event::Join { .. } => {
                    alive.push(next_node);
                    next_node += 1;
                }
            }
        }
        if alive.is_empty() {
            continue;
        }
        let key = match c.skew {
            Skew::Uniform | Skew::Pinned => rng.next() % keys,
            Skew::Zipf => {
                let u = rng.unit();
                zipf_cdf.partition_point(|&p| p < u).min(keys as usize - 1) as u64
            }
            Skew::HotKey => {
                if rng.unit() < 0.8 {
                    0
                } else {
                    1 + rng.next() % keys.max(2).saturating_sub(1)
                }
            }
            Skew::Spread => 0,
        };
        let node = if c.skew == Skew::Spread {
            rr += 1;
            alive[rr % alive.len()]
        } else if c.skew == Skew::Pinned {
            // clients 0..keys/2 all sit on the first live node; the rest spread evenly
            if key < keys / 2 {
                alive[0]
            } else {
                alive[(key as usize) % alive.len()]
            }
        } else {
            alive[(rng.next() % alive.len() as u64) as usize]
        };
        out.push(Request { at, key, node });
    }
    Ok(out)
}

fn limiter(spec: &Spec) -> Result<KeyedLimiter<u64, AnyAlgorithm>, ConfigError> {
    KeyedLimiter::new(spec.build()?, 1 << 20)
}

/// Run every strategy in `strategies` on the same traffic.
pub fn run(c: &Config, strategies: &[Strategy]) -> Result<Vec<Report>, ConfigError> {
    if c.spec.kind == Kind::LeakyQueue {
        return Err(ConfigError::Inconsistent(
            "the distributed simulation prices admission; use gcra, token-bucket, a leaky meter or a window, not leaky-queue".into(),
        ));
    }
    let reqs = traffic(c)?;
    let ideal = limiter(&c.spec)?;
    let ideal_ok: Vec<bool> = reqs
        .iter()
        .map(|r| ideal.check(&r.key, r.at, 1).allowed)
        .collect();
    strategies
        .iter()
        .map(|&s| run_one(c, s, &reqs, &ideal_ok))
        .collect()
}

fn run_one(
    c: &Config,
    strategy: Strategy,
    reqs: &[Request],
    ideal_ok: &[bool],
) -> Result<Report, ConfigError> {
    let total_nodes = c.nodes
        + c.events
            .iter()
            .filter(|e| matches!(e, Event::Join { .. }))
            .count();
    let share = local_share(&c.spec, c.nodes)?;
    let mut nodes: Vec<KeyedLimiter<u64, AnyAlgorithm>> = (0..total_nodes)
        .map(|_| {
            limiter(if strategy == Strategy::LocalShare {
                &share
            } else {
                &c.spec
            })
        })
        .collect::<Result<_, _>>()?;
    let shared = limiter(&c.spec)?;
    let mut hybrid: Vec<HybridNode<u64>> = (0..total_nodes)
        .map(|_| HybridNode::new(c.lease, c.lease * c.nodes as u64, c.lease_ttl_ns, 1 << 20))
        .collect();
    let mut denial_cache: Vec<HashMap<u64, Nanos>> = vec![HashMap::new(); total_nodes];
    let name = |i: usize| format!("node-{i}");
    let mut ring = Rendezvous::new((0..c.nodes).map(name));
    let mut events = c.events.clone();
    events.sort_by_key(Event::at);
    let mut ev = events.iter().peekable();
    let mut next_node = c.nodes;
    let mut seen_keys: Vec<u64> = Vec::new();
    let mut seen = hashbrown::HashSet::new();
    let (mut round_trips, mut moved) = (0u64, 0u64);
    let mut admitted_at: HashMap<u64, Vec<Nanos>> = HashMap::new();
    let (mut admitted, mut over, mut legit_denied) = (0u64, 0u64, 0u64);
    let mut per_key: HashMap<u64, (u64, u64)> = HashMap::new(); // (strategy, ideal)

    for (r, &ideal) in reqs.iter().zip(ideal_ok) {
        while let Some(e) = ev.next_if(|e| e.at() <= r.at) {
            let before: Vec<Option<String>> = seen_keys
                .iter()
                .map(|k| ring.owner(&k.to_le_bytes()).map(str::to_owned))
                .collect();
            match *e {
                Event::Fail { node, .. } => {
                    ring.leave(&name(node));
                    nodes[node] = limiter(&c.spec)?; // its state is gone
                    hybrid[node] =
                        HybridNode::new(c.lease, c.lease * c.nodes as u64, c.lease_ttl_ns, 1 << 20);
                }
                Event::Join { .. } => {
                    ring.join(name(next_node));
                    next_node += 1;
                }
            }
            moved += seen_keys
                .iter()
                .zip(&before)
                .filter(|(k, b)| ring.owner(&k.to_le_bytes()).map(str::to_owned) != **b)
                .count() as u64;
        }
        if seen.insert(r.key) {
            seen_keys.push(r.key);
        }
        let ok = match strategy {
            Strategy::Sticky => {
                let owner = ring
                    .owner_index(&r.key.to_le_bytes())
                    .map(|i| ring.nodes()[i].clone());
                let owner: usize = owner
                    .and_then(|o| o.strip_prefix("node-").and_then(|n| n.parse().ok()))
                    .unwrap_or(r.node);
                if owner != r.node {
                    round_trips += 1; // forwarded to the owner
                }
                nodes[owner].check(&r.key, r.at, 1).allowed
            }
            Strategy::LocalShare | Strategy::Naive => nodes[r.node].check(&r.key, r.at, 1).allowed,
            Strategy::Shared => {
                let cache = &mut denial_cache[r.node];
                if cache.get(&r.key).is_some_and(|&until| until > r.at) {
                    false
                } else {
                    round_trips += 1;
                    let d = shared.check(&r.key, r.at, 1);
                    if let Some(retry) = d.retry_after.filter(|_| !d.allowed) {
                        cache.insert(r.key, r.at.saturating_add(retry));
                    }
                    d.allowed
                }
            }
            Strategy::Hybrid => {
                let node = &mut hybrid[r.node];
                match node.begin(&r.key, r.at, 1) {
                    Step::Admit => true,
                    Step::Ask { mut units } => loop {
                        round_trips += 1;
                        let d = shared.check(&r.key, r.at, units);
                        match node.finish(&r.key, r.at, 1, units, &d) {
                            Finish::Admit => break true,
                            Finish::Deny => break false,
                            Finish::Retry { units: u } => units = u,
                        }
                    },
                }
            }
        };
        let e = per_key.entry(r.key).or_default();
        e.0 += u64::from(ok);
        e.1 += u64::from(ideal);
        if ok {
            admitted += 1;
            admitted_at.entry(r.key).or_default().push(r.at);
        }
    }
    for (s, i) in per_key.values() {
        over += s.saturating_sub(*i);
        legit_denied += i.saturating_sub(*s);
    }
    let alg = c.spec.build()?;
    let bound = alg.limit() + c.spec.rate.count();
    let period = c.spec.rate.period_nanos();
    let worst = admitted_at
        .values()
        .map(|ts| {
            let ev: Vec<(Nanos, u64)> = ts.iter().map(|&t| (t, 1)).collect();
            floodgate_core::simulate::max_in_span(&ev, period).saturating_sub(bound)
        })
        .max()
        .unwrap_or(0);
    let requests = reqs.len() as u64;
    Ok(Report {
        strategy,
        requests,
        admitted,
        ideal: ideal_ok.iter().filter(|&&b| b).count() as u64,
        over_admitted: over,
        legit_denied,
        worst_excess: worst,
        round_trips,
        added_latency_ms: round_trips as f64 * c.rtt_ns as f64 / 1e6 / requests.max(1) as f64,
        moved_keys: if strategy == Strategy::Sticky {
            moved
        } else {
            0
        },
    })
}
