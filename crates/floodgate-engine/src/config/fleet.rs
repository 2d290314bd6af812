//! `[fleet]`: the strategy, `nodes` as a count or addresses, `self`, the hybrid lease, and
//! the quota client's settings (`quota_server`, `quota_domain`, `report_interval`,
//! `no_assignment`, `quota_max_buckets`).

use std::time::Duration;

use floodgate_core::de::positive_duration;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::{StoreKind, StoreSection};
use crate::fleet::{DEFAULT_LEASE, DEFAULT_LEASE_TTL, Fleet, FleetError, Strategy, check_node};
use crate::quota::settings::{DEFAULT_MAX_BUCKETS, DEFAULT_REPORT_INTERVAL};
use crate::quota::{QuotaClientConfig, QuotaFallback};

/// `[fleet] nodes`: how many nodes share the limits, or their addresses (`host:port`).
/// Either way the count is the fleet's size; addresses are needed where a node talks to
/// the others (the proxy's `sticky` forwards each key to its owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetNodes {
    /// A count, at least 1.
    Count(usize),
    /// Every node's advertised `host:port`, this one included; not empty (checked by
    /// [`FleetSection`]), no repeats.
    Addresses(Vec<String>),
}

impl FleetNodes {
    /// How many nodes.
    pub fn count(&self) -> usize {
        match self {
            FleetNodes::Count(n) => *n,
            FleetNodes::Addresses(a) => a.len(),
        }
    }
}

impl<'de> Deserialize<'de> for FleetNodes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FleetNodes, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FleetNodes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a count of nodes, or a list of their host:port addresses")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<FleetNodes, E> {
                if n == 0 {
                    return Err(E::custom("nodes must be at least 1, got 0"));
                }
                usize::try_from(n)
                    .map(FleetNodes::Count)
                    .map_err(|_| E::custom(format!("nodes {n} is too large")))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<FleetNodes, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!("nodes must be at least 1, got {n}"))),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FleetNodes, A::Error> {
                let mut nodes: Vec<String> = Vec::new();
                while let Some(n) = seq.next_element::<String>()? {
                    check_node(&n).map_err(de::Error::custom)?;
                    if nodes.contains(&n) {
                        return Err(de::Error::custom(FleetError::DuplicateNode(n)));
                    }
                    nodes.push(n);
                }
                // an empty list is refused by the section, naming it
                Ok(FleetNodes::Addresses(nodes))
            }
        }
        d.deserialize_any(V)
    }
}

/// The quota domain when `quota_domain` is not given.
pub const DEFAULT_DOMAIN: &str = "floodgate";

/// `[fleet]`: several nodes (proxies, or servers behind one balancer) sharing each limit
/// with a [`Strategy`] (see [`crate::fleet`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "FleetTable")]
pub struct FleetSection {
    /// `strategy`: `single` (default: `None`, each node enforces the whole limit on its
    /// own), `sticky`, `local`, `shared` or `hybrid`.
    pub strategy: Option<Strategy>,
    /// `nodes`: a count or the addresses (needed by `local` and `hybrid`, which divide by
    /// the count, and by `sticky`, which needs the addresses).
    pub nodes: Option<FleetNodes>,
    /// `self`: this node's address, one of `nodes` (a list then).
    pub self_node: Option<String>,
    /// `lease`: hybrid, the most units leased per round trip, at least 1 (default 10).
    pub lease: u64,
    /// `lease_ttl`: hybrid, a lease's lifetime, above 0 (default 1 s).
    pub lease_ttl: Duration,
    /// The quota client's settings: `Some` exactly when the strategy is `quota`.
    pub quota: Option<QuotaClientConfig>,
}

impl Default for FleetSection {
    fn default() -> Self {
        FleetSection {
            strategy: None,
            nodes: None,
            self_node: None,
            lease: DEFAULT_LEASE,
            lease_ttl: DEFAULT_LEASE_TTL,
            quota: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetTable {
    #[serde(default, deserialize_with = "de_strategy")]
    strategy: Option<Strategy>,
    nodes: Option<FleetNodes>,
    #[serde(rename = "self")]
    self_node: Option<String>,
    #[serde(default = "default_lease", deserialize_with = "de_lease")]
    lease: u64,
    #[serde(default = "default_lease_ttl", deserialize_with = "positive_duration")]
    lease_ttl: Duration,
    #[serde(default, deserialize_with = "de_server")]
    quota_server: Option<String>,
    #[serde(default, deserialize_with = "de_domain")]
    quota_domain: Option<String>,
    #[serde(default, deserialize_with = "de_interval")]
    report_interval: Option<Duration>,
    #[serde(default, deserialize_with = "de_no_assignment")]
    no_assignment: Option<NoAssignment>,
    #[serde(default, deserialize_with = "de_max_buckets")]
    quota_max_buckets: Option<usize>,
}

/// `no_assignment`: what a quota bucket does with no live assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoAssignment {
    AllowAll,
    DenyAll,
    LocalShare,
}

fn de_server<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    QuotaClientConfig::new(s.clone(), DEFAULT_DOMAIN)
        .check()
        .map_err(de::Error::custom)?;
    Ok(Some(s))
}

fn de_domain<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Err(de::Error::custom(
            "quota_domain must not be empty: the domain the quota server's rules are written for",
        ));
    }
    Ok(Some(s))
}

fn de_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    positive_duration(d).map(Some)
}

fn de_no_assignment<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NoAssignment>, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "allow_all" => Ok(Some(NoAssignment::AllowAll)),
        "deny_all" => Ok(Some(NoAssignment::DenyAll)),
        "local_share" => Ok(Some(NoAssignment::LocalShare)),
        other => Err(de::Error::custom(format!(
            "unknown no_assignment {other:?}; expected allow_all, deny_all or local_share (each policy's limit / nodes)"
        ))),
    }
}

fn de_max_buckets<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 {
        return Err(de::Error::custom(
            "quota_max_buckets must be at least 1, got 0",
        ));
    }
    Ok(Some(usize::try_from(n).unwrap_or(usize::MAX)))
}

fn default_lease() -> u64 {
    DEFAULT_LEASE
}

fn default_lease_ttl() -> Duration {
    DEFAULT_LEASE_TTL
}

fn de_lease<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 {
        return Err(de::Error::custom(FleetError::ZeroLease("lease")));
    }
    Ok(n)
}

fn de_strategy<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Strategy>, D::Error> {
    let s = String::deserialize(d)?;
    if s == "single" {
        return Ok(None);
    }
    s.parse::<Strategy>().map(Some).map_err(|_| {
        de::Error::custom(format!(
            "unknown strategy {s:?}; expected single, local, shared or hybrid (or sticky and quota: floodgate proxy's)"
        ))
    })
}

impl TryFrom<FleetTable> for FleetSection {
    type Error = String;
    fn try_from(t: FleetTable) -> Result<FleetSection, String> {
        if matches!(&t.nodes, Some(FleetNodes::Addresses(a)) if a.is_empty()) {
            return Err(FleetError::NoNodes.to_string());
        }
        if let Some(s) = &t.self_node {
            match &t.nodes {
                Some(FleetNodes::Addresses(a)) if !a.contains(s) => {
                    return Err(FleetError::SelfNotInNodes {
                        self_node: s.clone(),
                        nodes: a.join(", "),
                    }
                    .to_string());
                }
                Some(FleetNodes::Addresses(_)) => {}
                _ => {
                    return Err(format!(
                        "self {s:?} names this node among the nodes' addresses: give nodes as a list of host:port, this one included"
                    ));
                }
            }
        }
        match (t.strategy, &t.nodes) {
            (Some(s @ (Strategy::Local | Strategy::Hybrid | Strategy::Sticky)), None) => {
                return Err(format!(
                    "strategy {s} needs nodes: the number of nodes, or their addresses"
                ));
            }
            (Some(Strategy::Sticky), Some(FleetNodes::Count(_))) => {
                return Err(
                    "strategy sticky forwards each key to its owner (floodgate proxy does, over HTTP): nodes must be the nodes' addresses (host:port), not a count"
                        .into(),
                );
            }
            _ => {}
        }
        let quota = if t.strategy == Some(Strategy::Quota) {
            let Some(server) = t.quota_server else {
                return Err(
                    "strategy quota needs quota_server: the quota server's gRPC address, e.g. \"http://127.0.0.1:8081\""
                        .into(),
                );
            };
            let nodes = t.nodes.as_ref().map_or(1, FleetNodes::count);
            Some(QuotaClientConfig {
                server,
                domain: t.quota_domain.unwrap_or_else(|| DEFAULT_DOMAIN.into()),
                report_interval: t.report_interval.unwrap_or(DEFAULT_REPORT_INTERVAL),
                fallback: match t.no_assignment.unwrap_or(NoAssignment::AllowAll) {
                    NoAssignment::AllowAll => QuotaFallback::AllowAll,
                    NoAssignment::DenyAll => QuotaFallback::DenyAll,
                    NoAssignment::LocalShare => QuotaFallback::LocalShare { nodes },
                },
                max_buckets: t.quota_max_buckets.unwrap_or(DEFAULT_MAX_BUCKETS),
            })
        } else {
            let given = [
                ("quota_server", t.quota_server.is_some()),
                ("quota_domain", t.quota_domain.is_some()),
                ("report_interval", t.report_interval.is_some()),
                ("no_assignment", t.no_assignment.is_some()),
                ("quota_max_buckets", t.quota_max_buckets.is_some()),
            ];
            if let Some((name, _)) = given.iter().find(|(_, g)| *g) {
                return Err(format!(
                    "{name} is a setting of strategy quota (the strategy is {})",
                    t.strategy.map_or("single", Strategy::name)
                ));
            }
            None
        };
        Ok(FleetSection {
            strategy: t.strategy,
            nodes: t.nodes,
            self_node: t.self_node,
            lease: t.lease,
            lease_ttl: t.lease_ttl,
            quota,
        })
    }
}

impl FleetSection {
    /// How many nodes share the limits (1 without `nodes`).
    pub fn count(&self) -> usize {
        self.nodes.as_ref().map_or(1, FleetNodes::count)
    }

    /// Check the fleet's strategy against the store: `shared` and `hybrid` need
    /// `store.type = "redis"`, `sticky` and `local` count in process.
    pub fn check_store(&self, store: &StoreSection) -> Result<(), FleetError> {
        let Some(s) = self.strategy else {
            return Ok(());
        };
        let redis = store.kind == StoreKind::Redis;
        if s.needs_shared_store() && !redis {
            return Err(FleetError::NeedsSharedStore(s));
        }
        if !s.needs_shared_store() && redis {
            return Err(FleetError::NeedsLocalStore(s));
        }
        Ok(())
    }

    /// The fleet of a node that knows its peers by address (the proxy): `None` for
    /// `single` and for `quota` (whose nodes need not know each other: see
    /// [`quota`](Self::quota)); an error when `nodes` is a count or `self` is missing.
    pub fn fleet(&self) -> Result<Option<Fleet>, String> {
        let Some(strategy) = self.strategy.filter(|s| *s != Strategy::Quota) else {
            return Ok(None);
        };
        let nodes = match &self.nodes {
            Some(FleetNodes::Addresses(a)) => a,
            _ => {
                return Err(
                    "nodes must be the nodes' addresses here (a list of host:port, this one included): each node is known by address"
                        .into(),
                );
            }
        };
        let Some(self_node) = &self.self_node else {
            return Err("missing field `self`: this node's address, one of nodes".into());
        };
        Fleet::new(strategy, nodes.iter().cloned(), self_node.clone())
            .and_then(|f| f.with_lease(self.lease, self.lease_ttl))
            .map(Some)
            .map_err(|e| e.to_string())
    }
}
