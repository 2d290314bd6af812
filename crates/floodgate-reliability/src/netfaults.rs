//! Faults that cross a network, on the [`crate::fleet`] harness: three `floodgate proxy`
//! nodes on one Redis (strategy `shared` or `hybrid`, a real `fault_policy`), each
//! behind its own fault-injecting relay, under load from the client namespace.
//!
//! The load: every node gets two hot keys (each far over the limit, so the limiter bites
//! all the time) and one calm key (under the limit, where hybrid spends leases). The
//! policy is a GCRA of 20/s with capacity 20 (`burst = 19`), so its window is 1 s.
//! Timeline: healthy, the fault injected and held, healed, then the tail.
//!
//! Checked for every case:
//!
//! * **overshoot**: the [auditor](crate::audit) over everything the backend received,
//!   against the strategy's bound (plus fail open's own admissions);
//! * **policy**: on the nodes the fault reaches, answers the store could not decide are
//!   the configured ones (fail closed: 503; fail open: 200 without `RateLimit`), never
//!   the other kind; a fault beyond the store timeout must produce them, the first within
//!   the timeout plus one request gap plus a slack ("apply"); no request takes longer
//!   than the timeout plus the slack (a killed node's clients get errors);
//! * **nothing admitted twice**: the backend saw each request id at most once, saw no
//!   denied request, and every 200 reached it;
//! * **recovery**: the first normal decision on each affected node after the fault ends,
//!   measured ("recover"), within `recover_within`;
//! * every node alive at the end, no "panicked" on its stderr.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::audit::{Guarantee, Limit};

/// One network fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetFault {
    /// Node 0's store link taken down (`ip link set ... down`), then up.
    Partition,
    /// Every relay adds 50 ms ± 10 ms toward Redis (below the store timeout).
    Latency50,
    /// Every relay adds 500 ms ± 50 ms toward Redis (beyond the store timeout).
    Latency500,
    /// Every relay stalls 5% of its chunks 200 ms ± 100 ms (lost segments).
    Loss5,
    /// Node 0 SIGKILLed mid-load, started again after the fault time.
    NodeKill,
    /// The Redis primary SIGKILLed; Sentinel promotes the replica, and the relays
    /// follow it (as a proxy in front of Redis that asks Sentinel does).
    Failover,
    /// Node 0's wall clock (`CLOCK_REALTIME`) stepped [`STEP`](crate::netclock::STEP)
    /// forward, then back ([`crate::netclock`]); the nodes decide on Redis `TIME`
    /// (`store.redis.time = "redis"`), and the in-process strategies on the monotonic clock.
    ClockStep,
    /// The same step, the nodes deciding on their own clock (`time = "caller"`).
    ClockStepCaller,
}

impl NetFault {
    /// Every fault, in table order.
    pub const ALL: [NetFault; 8] = [
        NetFault::Partition,
        NetFault::Latency50,
        NetFault::Latency500,
        NetFault::Loss5,
        NetFault::NodeKill,
        NetFault::Failover,
        NetFault::ClockStep,
        NetFault::ClockStepCaller,
    ];

    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            NetFault::Partition => "partition node0-redis",
            NetFault::Latency50 => "latency 50ms+-10",
            NetFault::Latency500 => "latency 500ms+-50",
            NetFault::Loss5 => "loss 5% (stalls)",
            NetFault::NodeKill => "node0 killed, restarted",
            NetFault::Failover => "failover: primary killed",
            NetFault::ClockStep => "clock+-1s node0",
            NetFault::ClockStepCaller => "clock+-1s node0 caller",
        }
    }

    /// Whether the fault steps a clock (the node runs under libfaketime).
    pub fn is_clock(self) -> bool {
        matches!(self, NetFault::ClockStep | NetFault::ClockStepCaller)
    }

    /// `store.redis.time` for the nodes.
    pub fn time_source(self) -> &'static str {
        match self {
            NetFault::ClockStepCaller => "caller",
            _ => "redis",
        }
    }

    /// The nodes the fault reaches.
    pub(crate) fn affected(self, nodes: usize) -> Vec<usize> {
        match self {
            NetFault::Partition
            | NetFault::NodeKill
            | NetFault::ClockStep
            | NetFault::ClockStepCaller => vec![0],
            _ => (0..nodes).collect(),
        }
    }

    /// Whether the store cannot decide for the affected nodes during the whole fault.
    pub(crate) fn must_degrade(self) -> bool {
        matches!(
            self,
            NetFault::Partition | NetFault::Latency500 | NetFault::Failover
        )
    }

    /// Added to the strategy's bound: a failover may lose what the replica had not yet
    /// received (replication is asynchronous); a key whose state is lost or older starts
    /// again with at most a full capacity, so at most `C` more per key.
    /// Under `local` a killed node comes back with a fresh share: `ceil(C / nodes)` more.
    ///
    /// A clock step on a node deciding on its own clock (`time = "caller"`, on Redis):
    /// the GCRA state in Redis is a theoretical arrival time written in the writers'
    /// clocks. A node whose clock is `s` ahead reads every key's state as `s` older, so
    /// it can admit what `s` seconds of the rate refill, at most a full capacity:
    /// `min(ceil(r x s), C)` more per key, once per forward step; meanwhile the state it
    /// writes is `s` ahead for the nodes on the true time, which deny until their clocks
    /// catch up (no more admitted in all, later). A step back only makes the stepped node
    /// see the state as newer: it denies, never admits more. Decisions on Redis `TIME`,
    /// or in process on the monotonic clock (which a real clock step does not move): 0.
    pub fn extra_bound(self, limit: &Limit, strategy: &str, nodes: u64) -> u64 {
        match (self, strategy) {
            (NetFault::Failover, _) => limit.capacity,
            (NetFault::NodeKill, "local") => limit.capacity.div_ceil(nodes.max(1)),
            (NetFault::ClockStepCaller, "shared" | "hybrid") => {
                let refill = (limit.rate * crate::netclock::STEP.as_secs_f64()).ceil() as u64;
                refill.min(limit.capacity)
            }
            _ => 0,
        }
    }
}

/// One case: a fault, a strategy and a fault policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// The fault.
    pub fault: NetFault,
    /// `shared` or `hybrid`.
    pub strategy: &'static str,
    /// `fail-open` or `fail-closed`.
    pub policy: &'static str,
}

impl Case {
    /// A case.
    pub const fn new(fault: NetFault, strategy: &'static str, policy: &'static str) -> Case {
        Case {
            fault,
            strategy,
            policy,
        }
    }
}

/// The fast cases (about a minute and a half): the partition under each policy and under
/// hybrid, both latencies, loss, a node kill, a failover and the clock step on each time
/// source, on the shared counter failing closed.
pub fn fast_cases() -> Vec<Case> {
    let c = Case::new;
    vec![
        c(NetFault::Partition, "shared", "fail-closed"),
        c(NetFault::Partition, "shared", "fail-open"),
        c(NetFault::Partition, "hybrid", "fail-closed"),
        c(NetFault::Latency50, "shared", "fail-closed"),
        c(NetFault::Latency500, "shared", "fail-closed"),
        c(NetFault::Loss5, "shared", "fail-closed"),
        c(NetFault::NodeKill, "shared", "fail-closed"),
        c(NetFault::Failover, "shared", "fail-closed"),
        c(NetFault::ClockStep, "shared", "fail-closed"),
        c(NetFault::ClockStepCaller, "shared", "fail-closed"),
    ]
}

/// Every network fault under each strategy on Redis and each policy, and a node kill
/// under the in-process strategies: `local` (no store to fail) and `sticky`, whose policy
/// for an unreachable owner is to decide locally. The clock step: on Redis `TIME` under
/// both strategies on Redis, on the nodes' own clock under the shared counter with each
/// policy, and under `local` and `sticky` (their monotonic clock).
pub fn long_cases() -> Vec<Case> {
    let c = Case::new;
    let mut v = vec![
        c(NetFault::NodeKill, "local", "none"),
        c(NetFault::NodeKill, "sticky", "local-fallback"),
        c(NetFault::ClockStep, "shared", "fail-closed"),
        c(NetFault::ClockStep, "hybrid", "fail-closed"),
        c(NetFault::ClockStep, "local", "none"),
        c(NetFault::ClockStep, "sticky", "local-fallback"),
        c(NetFault::ClockStepCaller, "shared", "fail-closed"),
        c(NetFault::ClockStepCaller, "shared", "fail-open"),
    ];
    for fault in NetFault::ALL.into_iter().filter(|f| !f.is_clock()) {
        for strategy in ["shared", "hybrid"] {
            for policy in ["fail-closed", "fail-open"] {
                v.push(Case::new(fault, strategy, policy));
            }
        }
    }
    v
}

/// Timings and sizes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `floodgate` binary.
    pub bin: PathBuf,
    /// Nodes in the fleet.
    pub nodes: usize,
    /// `store.redis.timeout`.
    pub store_timeout: Duration,
    /// Load before the fault.
    pub healthy: Duration,
    /// How long the fault is held.
    pub fault_for: Duration,
    /// Load after the fault ends.
    pub after: Duration,
    /// Pause between a hot client's requests.
    pub hot_gap: Duration,
    /// Pause between a calm client's requests.
    pub calm_gap: Duration,
    /// Scheduling slack on a loaded machine, added to the latency bounds.
    pub slack: Duration,
    /// Normal decisions must be back within this long after the fault ends.
    pub recover_within: Duration,
    /// `fleet.lease` for hybrid.
    pub lease: u64,
}

impl Settings {
    /// The fast part: faults held 2 s.
    pub fn fast(bin: PathBuf) -> Settings {
        Settings {
            bin,
            nodes: 3,
            store_timeout: Duration::from_millis(200),
            healthy: Duration::from_millis(1200),
            fault_for: Duration::from_secs(2),
            after: Duration::from_secs(3),
            hot_gap: Duration::from_millis(20),
            calm_gap: Duration::from_millis(300),
            slack: Duration::from_millis(400),
            recover_within: Duration::from_secs(3),
            lease: 5,
        }
    }

    /// The full part: faults held 6 s, a longer tail.
    pub fn long(bin: PathBuf) -> Settings {
        Settings {
            healthy: Duration::from_secs(2),
            fault_for: Duration::from_secs(6),
            after: Duration::from_secs(5),
            ..Settings::fast(bin)
        }
    }

    /// The policy the nodes run (`rate = "20/s"`, `burst = 19`).
    pub fn limit(&self) -> Limit {
        Limit {
            capacity: 20,
            rate: 20.0,
            window: Duration::from_secs(1),
        }
    }

    pub(crate) fn guarantee(&self, strategy: &str) -> Guarantee {
        let nodes = self.nodes as u64;
        match strategy {
            "hybrid" => Guarantee::Hybrid {
                nodes,
                lease: self.lease,
            },
            "local" => Guarantee::Local { nodes },
            "sticky" => Guarantee::Sticky { nodes },
            _ => Guarantee::Shared,
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NetRow {
    /// The fault.
    pub fault: &'static str,
    /// The strategy.
    pub strategy: &'static str,
    /// The fault policy.
    pub policy: &'static str,
    /// 200 responses (decided, or admitted by fail open).
    pub admitted: u64,
    /// 429, and 503 from fail closed.
    pub denied: u64,
    /// No response, or any other status.
    pub errors: u64,
    /// Worst `count - bound` over every span of the window (negative: headroom).
    pub overshoot: i64,
    /// The count and bound of that span.
    pub worst_count: u64,
    /// The bound of that span.
    pub worst_bound: u64,
    /// How the bound is made.
    pub bound_formula: String,
    /// How long spans over the bound lasted.
    pub over_for_ms: u64,
    /// From the fault to the first answer of the fault policy on an affected node.
    pub apply_ms: Option<u64>,
    /// From the end of the fault to the first normal decision on every affected node.
    pub recover_ms: Option<u64>,
    /// A clock step: what node 0 and the other nodes admitted while it lasted.
    pub step_admitted: Option<(u64, u64)>,
    /// Every check held.
    pub pass: bool,
    /// The figures behind the verdict.
    pub detail: String,
}

/// The table, as text.
pub fn render(rows: &[NetRow]) -> String {
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
    let mut out = format!(
        "{:<24} {:<7} {:<14} {:>8} {:>7} {:>6} {:>22} {:>9} {:>9}  {}\n",
        "fault",
        "strat",
        "policy",
        "admitted",
        "denied",
        "errors",
        "worst over (cnt/bound)",
        "apply",
        "recover",
        "verdict"
    );
    for r in rows {
        let over = format!("{:+} ({}/{})", r.overshoot, r.worst_count, r.worst_bound);
        out.push_str(&format!(
            "{:<24} {:<7} {:<14} {:>8} {:>7} {:>6} {:>22} {:>9} {:>9}  {}: {}\n",
            r.fault,
            r.strategy,
            r.policy,
            r.admitted,
            r.denied,
            r.errors,
            over,
            ms(r.apply_ms),
            ms(r.recover_ms),
            if r.pass { "PASS" } else { "FAIL" },
            r.detail
        ));
    }
    out
}

/// When the fault began and ended.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// Injected.
    pub fault: Instant,
    /// Healed (for a node kill: its restart began; for a failover: the relays moved to
    /// the promoted replica).
    pub heal: Instant,
}
