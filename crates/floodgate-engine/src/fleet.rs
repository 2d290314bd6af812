//! A fleet of N floodgate nodes and the strategy they share a limit with
//! ([`Fleet`], set with floodgate-http's `RateLimiterBuilder::fleet`).
//!
//! | strategy | what each node does | needs |
//! |---|---|---|
//! | [`Strategy::Sticky`] | counts the keys it owns (rendezvous hashing over the node list) in process; the proxy forwards other keys' requests to their owner; a library caller asks floodgate-http's `RateLimiter::owner_of` | the in-process store |
//! | [`Strategy::Local`] | enforces [`floodgate_dist::local_share`] of every policy (`limit / N`) in process, no round trip | the in-process store |
//! | [`Strategy::Shared`] | every decision on the shared Redis counter (one round trip) | a shared store (`RedisDecisionStore`, feature `redis`) |
//! | [`Strategy::Hybrid`] | spends leases of quota from the shared counter locally while a key is far from its limit, shared decisions near it (`HybridStore`, feature `redis`) | a shared store (`HybridStore`) |
//! | [`Strategy::Quota`] | decides locally from the share a quota server assigns it (Envoy's Rate Limit Quota Service), reporting each bucket's usage every interval ([`crate::quota`]) | a quota server (`QuotaStore`, feature `quota-client`) |
//!
//! Error bounds: sticky is exact while the node list is stable; each key that moves (a
//! node leaves or joins) starts over on its new owner with a full burst. Local share admits
//! the whole limit only to a client spread evenly over the nodes (a client on one node gets
//! `1/N`). Shared is exact. Hybrid never admits a unit that was not first charged to the
//! shared counter; within any span it can exceed the limit's bound by at most
//! `nodes x lease` units. Quota admits at most the sum of the live assignments: the server's
//! division sums to the limit, so within a report interval the fleet's excess is bounded by
//! the buckets' bursts and by shares still live on a node after the server moved them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use floodgate_dist::Rendezvous;
pub use floodgate_dist::local_share;

/// How the nodes of a fleet share a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Each key is owned by one node and counted there exactly.
    Sticky,
    /// Each node enforces `limit / N` on its own.
    Local,
    /// Every decision on one shared counter (Redis).
    Shared,
    /// Leases from the shared counter spent locally, shared decisions near the limit.
    Hybrid,
    /// Each node enforces the share a quota server assigns it (see [`crate::quota`]).
    Quota,
}

impl Strategy {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Sticky => "sticky",
            Strategy::Local => "local",
            Strategy::Shared => "shared",
            Strategy::Hybrid => "hybrid",
            Strategy::Quota => "quota",
        }
    }

    /// Whether every node must decide on one shared store (Redis).
    pub fn needs_shared_store(self) -> bool {
        matches!(self, Strategy::Shared | Strategy::Hybrid)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = FleetError;
    fn from_str(s: &str) -> Result<Strategy, FleetError> {
        match s {
            "sticky" => Ok(Strategy::Sticky),
            "local" => Ok(Strategy::Local),
            "shared" => Ok(Strategy::Shared),
            "hybrid" => Ok(Strategy::Hybrid),
            "quota" => Ok(Strategy::Quota),
            other => Err(FleetError::UnknownStrategy(other.to_string())),
        }
    }
}

/// The config form: `sticky`, `local`, `shared`, `hybrid` or `quota`.
#[cfg(feature = "config")]
impl<'de> serde::Deserialize<'de> for Strategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Strategy, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a fleet is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    /// Not one of sticky, local, shared, hybrid, quota.
    #[error(
        "unknown strategy {0:?}; expected \"sticky\", \"local\", \"shared\", \"hybrid\" or \"quota\""
    )]
    UnknownStrategy(String),
    /// The node list is empty.
    #[error("nodes is empty: list every node of the fleet, this one included")]
    NoNodes,
    /// A node is not `host:port`.
    #[error("node {0:?} is not host:port (e.g. \"10.0.0.1:8080\")")]
    BadNode(String),
    /// A node is listed twice.
    #[error("node {0:?} is listed twice")]
    DuplicateNode(String),
    /// This node's address is not in the list.
    #[error("self {self_node:?} is not in nodes [{nodes}]: every node must list itself")]
    SelfNotInNodes {
        /// This node's address.
        self_node: String,
        /// The list.
        nodes: String,
    },
    /// Shared and hybrid need a store every node shares.
    #[error(
        "strategy \"{0}\" needs a shared store: set store type redis (store.type = \"redis\", store.redis.url; library: RateLimiterBuilder::store with a RedisDecisionStore or HybridStore)"
    )]
    NeedsSharedStore(Strategy),
    /// Sticky and local count in process.
    #[error(
        "strategy \"{0}\" counts in process on each node: it takes store type memory (or use strategy \"shared\" / \"hybrid\")"
    )]
    NeedsLocalStore(Strategy),
    /// A hybrid lease parameter is zero.
    #[error("{0} must be at least 1 (hybrid leases)")]
    ZeroLease(&'static str),
}

/// A fleet: its nodes, this node, the strategy, and the hybrid lease settings.
///
/// ```
/// use floodgate_engine::fleet::{Fleet, Strategy};
///
/// let nodes = ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"];
/// let fleet = Fleet::new(Strategy::Sticky, nodes, "10.0.0.2:8080")?;
/// let owner = fleet.owner(b"per-key\x1fapi-key-42");
/// assert!(nodes.contains(&owner));
/// assert_eq!(fleet.owns(b"per-key\x1fapi-key-42"), owner == "10.0.0.2:8080");
/// assert!(Fleet::new(Strategy::Local, nodes, "10.0.0.9:8080").is_err());
/// # Ok::<(), floodgate_engine::fleet::FleetError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    strategy: Strategy,
    ring: Rendezvous,
    self_node: String,
    lease: u64,
    lease_ttl: Duration,
}

/// Default hybrid lease: at most this many units per round trip.
pub const DEFAULT_LEASE: u64 = 10;
/// Default hybrid lease lifetime.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(1);

pub(crate) fn check_node(n: &str) -> Result<(), FleetError> {
    let bad = || FleetError::BadNode(n.to_string());
    let (host, port) = n.rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty()
        || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/')
        || port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(bad());
    }
    Ok(())
}

impl Fleet {
    /// A fleet of `nodes` (`host:port`, this node included) seen from `self_node`.
    pub fn new<I, S>(
        strategy: Strategy,
        nodes: I,
        self_node: impl Into<String>,
    ) -> Result<Fleet, FleetError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
        let self_node = self_node.into();
        if nodes.is_empty() {
            return Err(FleetError::NoNodes);
        }
        for (i, n) in nodes.iter().enumerate() {
            check_node(n)?;
            if nodes[..i].contains(n) {
                return Err(FleetError::DuplicateNode(n.clone()));
            }
        }
        if !nodes.contains(&self_node) {
            return Err(FleetError::SelfNotInNodes {
                self_node,
                nodes: nodes.join(", "),
            });
        }
        Ok(Fleet {
            strategy,
            ring: Rendezvous::new(nodes),
            self_node,
            lease: DEFAULT_LEASE,
            lease_ttl: DEFAULT_LEASE_TTL,
        })
    }

    /// Hybrid: lease at most `units` per round trip, valid for `ttl` (defaults 10 and 1 s).
    pub fn with_lease(mut self, units: u64, ttl: Duration) -> Result<Fleet, FleetError> {
        if units == 0 {
            return Err(FleetError::ZeroLease("lease"));
        }
        if ttl.is_zero() {
            return Err(FleetError::ZeroLease("lease_ttl"));
        }
        self.lease = units;
        self.lease_ttl = ttl;
        Ok(self)
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The nodes, sorted.
    pub fn nodes(&self) -> &[String] {
        self.ring.nodes()
    }

    /// This node.
    pub fn self_node(&self) -> &str {
        &self.self_node
    }

    /// Hybrid: the most units leased per round trip.
    pub fn lease(&self) -> u64 {
        self.lease
    }

    /// Hybrid: how long a lease lives.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// Hybrid: the most units the fleet can admit above the shared limit's bound within
    /// any span (`nodes x lease`), and the most leased but unused at any time.
    pub fn hybrid_bound(&self) -> u64 {
        (self.nodes().len() as u64).saturating_mul(self.lease)
    }

    /// The node owning `key` (rendezvous hashing; every node computes the same answer).
    pub fn owner(&self, key: &[u8]) -> &str {
        // the list is never empty (checked in `new`)
        self.ring.owner(key).unwrap_or(&self.self_node)
    }

    /// Whether this node owns `key`.
    pub fn owns(&self, key: &[u8]) -> bool {
        self.owner(key) == self.self_node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_what_is_wrong() {
        let n = ["127.0.0.1:1", "127.0.0.1:2"];
        assert_eq!(
            Fleet::new(Strategy::Sticky, Vec::<String>::new(), "a:1"),
            Err(FleetError::NoNodes)
        );
        let e = Fleet::new(Strategy::Sticky, n, "127.0.0.1:3").unwrap_err();
        assert_eq!(
            e.to_string(),
            "self \"127.0.0.1:3\" is not in nodes [127.0.0.1:1, 127.0.0.1:2]: every node must list itself"
        );
        for bad in ["127.0.0.1", "127.0.0.1:0", ":80", "a b:1", "h:99999", "h:x"] {
            assert_eq!(
                Fleet::new(Strategy::Local, [bad], bad),
                Err(FleetError::BadNode(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            Fleet::new(Strategy::Local, ["h:1", "h:1"], "h:1"),
            Err(FleetError::DuplicateNode("h:1".into()))
        );
        assert!(
            Fleet::new(
                Strategy::Local,
                ["[::1]:8080", "node-b.internal:80"],
                "[::1]:8080"
            )
            .is_ok()
        );
        let e = "round-robin".parse::<Strategy>().unwrap_err();
        assert!(
            e.to_string()
                .contains("\"sticky\", \"local\", \"shared\", \"hybrid\" or \"quota\"")
        );
        let f = Fleet::new(Strategy::Hybrid, n, "127.0.0.1:1").unwrap();
        assert_eq!(
            f.clone().with_lease(0, Duration::from_secs(1)),
            Err(FleetError::ZeroLease("lease"))
        );
        assert_eq!(
            f.clone().with_lease(5, Duration::ZERO),
            Err(FleetError::ZeroLease("lease_ttl"))
        );
        assert_eq!(
            f.with_lease(5, Duration::from_secs(2))
                .unwrap()
                .hybrid_bound(),
            10
        );
    }

    #[test]
    fn every_node_agrees_on_owners_and_each_owns_a_share() {
        let nodes = ["127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"];
        let views: Vec<Fleet> = nodes
            .iter()
            .map(|s| Fleet::new(Strategy::Sticky, nodes, *s).unwrap())
            .collect();
        let mut owned = [0usize; 3];
        for k in 0..3000u32 {
            let key = format!("p\x1fkey-{k}");
            let owner = views[0].owner(key.as_bytes());
            assert!(views.iter().all(|v| v.owner(key.as_bytes()) == owner));
            let owners: Vec<bool> = views.iter().map(|v| v.owns(key.as_bytes())).collect();
            assert_eq!(owners.iter().filter(|&&o| o).count(), 1);
            owned[owners.iter().position(|&o| o).unwrap()] += 1;
        }
        assert!(owned.iter().all(|&n| (800..1200).contains(&n)), "{owned:?}");
    }
}
