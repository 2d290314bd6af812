//! The shared sections' types, each checked while it is deserialized.

use std::time::Duration;

use floodgate_core::de::{duration, positive_count, positive_duration, timeout};
use floodgate_redis::{FaultPolicy, StoreConfig, TimeSource};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::Renamed;
use crate::fault::StoreFailure;
use crate::fleet::{DEFAULT_LEASE, DEFAULT_LEASE_TTL, Fleet, FleetError, Strategy, check_node};
use crate::headers::{HeaderOptions, ResetFormat};

/// Keys per policy (or per limit) of the in-process store when `store.max_keys` is not
/// given.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// Where decisions are made: `store.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// In process (default).
    #[default]
    Memory,
    /// On Redis (`store.redis`), shared by every process that uses it.
    Redis,
}

/// `[store]`: where decisions are made, and the in-process store's caps.
///
/// Also read in its old form, a string: `store = "memory"` or `store = "redis://…"`
/// (noted as [`Renamed`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreSection {
    /// `type`: `memory` (default) or `redis`.
    pub kind: StoreKind,
    /// `max_keys`: keys per policy in the in-process store, at least 1 (`None`:
    /// [`DEFAULT_MAX_KEYS`]); idle keys are dropped first, then the nearest to full.
    pub max_keys: Option<usize>,
    /// `resp_max_keys`: keys of floodgate server's RESP door (`CL.THROTTLE`), at least 1
    /// (default 1 000 000); floodgate proxy has no RESP door and refuses it.
    pub resp_max_keys: Option<usize>,
    /// `[store.redis]`, as given (`None`: not given; [`StoreSection::redis`] gives the
    /// defaults then).
    pub redis: Option<RedisSection>,
    /// Old spellings read.
    pub renamed: Vec<Renamed>,
}

impl StoreSection {
    /// Keys per policy of the in-process store.
    pub fn max_keys(&self) -> usize {
        self.max_keys.unwrap_or(DEFAULT_MAX_KEYS)
    }

    /// The Redis settings: as given, or the defaults.
    pub fn redis(&self) -> RedisSection {
        self.redis.clone().unwrap_or_default()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreTable {
    #[serde(rename = "type", default)]
    kind: StoreKind,
    #[serde(default, deserialize_with = "opt_positive_count")]
    max_keys: Option<usize>,
    #[serde(default, deserialize_with = "opt_positive_count")]
    resp_max_keys: Option<usize>,
    redis: Option<RedisSection>,
}

fn opt_positive_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    positive_count(d).map(Some)
}

impl<'de> Deserialize<'de> for StoreSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StoreSection, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StoreSection;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a store table (type, max_keys, redis)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StoreSection, E> {
                if s == "memory" {
                    return Ok(StoreSection {
                        renamed: vec![Renamed::new(
                            "store = \"memory\"",
                            "store.type = \"memory\"",
                        )],
                        ..StoreSection::default()
                    });
                }
                if s.starts_with("redis://") || s.starts_with("rediss://") {
                    return Ok(StoreSection {
                        kind: StoreKind::Redis,
                        redis: Some(RedisSection {
                            url: s.to_string(),
                            ..RedisSection::default()
                        }),
                        renamed: vec![Renamed::new(
                            "store = \"redis://…\"",
                            "store.type = \"redis\" and the URL as store.redis.url",
                        )],
                        ..StoreSection::default()
                    });
                }
                Err(E::custom(format!(
                    "{s:?}: expected a store table (type = \"memory\" or \"redis\"), or the old forms \"memory\" or a redis://host:port URL"
                )))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StoreSection, A::Error> {
                let t = StoreTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(StoreSection {
                    kind: t.kind,
                    max_keys: t.max_keys,
                    resp_max_keys: t.resp_max_keys,
                    redis: t.redis,
                    renamed: Vec::new(),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `[store.redis]`: the Redis store's settings (used with `store.type = "redis"`), each
/// defaulting to [`StoreConfig::default`]'s.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSection {
    /// `redis://[user:pass@]host:port[/db]` or `rediss://` (default
    /// `redis://127.0.0.1:6379`).
    #[serde(deserialize_with = "de_url")]
    pub url: String,
    /// Key prefix, without `{` or `}` (default `floodgate:`).
    #[serde(deserialize_with = "de_prefix")]
    pub prefix: String,
    /// Per-call timeout, above 0 (default 50 ms): a slower answer is a store error.
    #[serde(deserialize_with = "timeout")]
    pub timeout: Duration,
    /// Time allowed to connect, above 0 (default 1 s).
    #[serde(deserialize_with = "timeout")]
    pub connect_timeout: Duration,
    /// After a failed call, Redis is left alone this long, then probed (default 250 ms; 0
    /// probes at once).
    #[serde(deserialize_with = "duration")]
    pub breaker_open_for: Duration,
    /// Denials remembered locally per policy, each saving a round trip until its retry
    /// time (default 100 000; 0 turns the cache off).
    pub deny_cache_keys: usize,
    /// `redis` (Redis `TIME`: one clock for every process, the default) or `caller`.
    #[serde(deserialize_with = "de_time")]
    pub time: TimeSource,
    /// What a request gets when Redis cannot decide: `fail-open` (default, admitted) or
    /// `fail-closed` (denied).
    pub fault_policy: StoreFailure,
}

/// The default Redis URL.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

impl Default for RedisSection {
    fn default() -> Self {
        let d = StoreConfig::default();
        RedisSection {
            url: DEFAULT_URL.into(),
            prefix: d.prefix,
            timeout: d.timeout,
            connect_timeout: d.connect_timeout,
            breaker_open_for: d.breaker_open_for,
            deny_cache_keys: d.deny_cache_keys,
            time: d.time,
            fault_policy: StoreFailure::Allow,
        }
    }
}

impl RedisSection {
    /// The Redis store's settings.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            prefix: self.prefix.clone(),
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            breaker_open_for: self.breaker_open_for,
            deny_cache_keys: self.deny_cache_keys,
            time: self.time,
            policy: match self.fault_policy {
                StoreFailure::Allow => FaultPolicy::FailOpen,
                StoreFailure::Deny => FaultPolicy::FailClosed,
            },
            ..StoreConfig::default()
        }
    }
}

fn de_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.starts_with("redis://") || s.starts_with("rediss://") {
        Ok(s)
    } else {
        Err(de::Error::custom(format!(
            "{s:?}: expected a redis://host:port or rediss://host:port URL"
        )))
    }
}

fn de_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.contains(['{', '}']) {
        return Err(de::Error::custom(format!(
            "{s:?}: a prefix must not contain '{{' or '}}' (floodgate puts each key's hash tag in braces)"
        )));
    }
    Ok(s)
}

fn de_time<'de, D: Deserializer<'de>>(d: D) -> Result<TimeSource, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "redis" => Ok(TimeSource::Redis),
        "caller" => Ok(TimeSource::Caller),
        _ => Err(de::Error::custom(format!(
            "{s:?}: expected redis or caller"
        ))),
    }
}

/// The proxy's old `deny.store_error`: `allow` (fail open) or `deny` (fail closed).
pub fn fault_policy_legacy<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<StoreFailure>, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "allow" => Ok(Some(StoreFailure::Allow)),
        "deny" => Ok(Some(StoreFailure::Deny)),
        _ => Err(de::Error::custom(format!(
            "{s:?}: expected allow or deny (better: store.redis.fault_policy = \"fail-open\" or \"fail-closed\")"
        ))),
    }
}

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
}

impl Default for FleetSection {
    fn default() -> Self {
        FleetSection {
            strategy: None,
            nodes: None,
            self_node: None,
            lease: DEFAULT_LEASE,
            lease_ttl: DEFAULT_LEASE_TTL,
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
            "unknown strategy {s:?}; expected single, local, shared or hybrid (or sticky: floodgate proxy's)"
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
        Ok(FleetSection {
            strategy: t.strategy,
            nodes: t.nodes,
            self_node: t.self_node,
            lease: t.lease,
            lease_ttl: t.lease_ttl,
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
    /// `single`; an error when `nodes` is a count or `self` is missing.
    pub fn fleet(&self) -> Result<Option<Fleet>, String> {
        let Some(strategy) = self.strategy else {
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

/// `[headers]`: which rate-limit headers a response carries.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "HeadersTable")]
pub struct HeadersSection {
    /// `ratelimit`: `RateLimit-Policy` and `RateLimit` (default true).
    pub ratelimit: bool,
    /// `legacy`: `off` (default, `None`), `delta` or `epoch`: the `X-RateLimit-Limit`,
    /// `-Remaining` and `-Reset` trio, its reset in seconds from now or at a Unix time.
    pub legacy: Option<ResetFormat>,
    /// `delay`: `X-RateLimit-Delay-Ms` on a request floodgate held (default true; only
    /// the proxy holds requests).
    pub delay: bool,
    /// `retry_after_jitter`: `Retry-After` = ceil(retry + uniform(0, jitter)) (`None`:
    /// 1 s; 0 turns the jitter off).
    pub retry_after_jitter: Option<Duration>,
    /// Old spellings read.
    pub renamed: Vec<Renamed>,
}

impl Default for HeadersSection {
    fn default() -> Self {
        HeadersSection {
            ratelimit: true,
            legacy: None,
            delay: true,
            retry_after_jitter: None,
            renamed: Vec::new(),
        }
    }
}

impl HeadersSection {
    /// The jitter of `Retry-After`.
    pub fn retry_after_jitter(&self) -> Duration {
        self.retry_after_jitter.unwrap_or(Duration::from_secs(1))
    }

    /// The engine's header options.
    pub fn options(&self) -> HeaderOptions {
        HeaderOptions {
            ratelimit: self.ratelimit,
            legacy: self.legacy,
            delay: self.delay,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadersTable {
    #[serde(default = "yes")]
    ratelimit: bool,
    #[serde(default, deserialize_with = "legacy_headers")]
    legacy: Option<Option<ResetFormat>>,
    #[serde(default = "yes")]
    delay: bool,
    #[serde(default, deserialize_with = "opt_duration")]
    retry_after_jitter: Option<Duration>,
    /// Old (floodgate server): `true` is `legacy = "delta"`.
    x_ratelimit: Option<bool>,
}

fn yes() -> bool {
    true
}

fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// `legacy`: `off`, `delta` or `epoch` (`Some(None)` is `off`).
pub fn legacy_headers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<ResetFormat>>, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "off" => Ok(Some(None)),
        "delta" => Ok(Some(Some(ResetFormat::Delta))),
        "epoch" => Ok(Some(Some(ResetFormat::Epoch))),
        _ => Err(de::Error::custom(format!(
            "{s:?}: expected off, delta or epoch"
        ))),
    }
}

impl TryFrom<HeadersTable> for HeadersSection {
    type Error = String;
    fn try_from(t: HeadersTable) -> Result<HeadersSection, String> {
        let mut renamed = Vec::new();
        let legacy = match (t.legacy, t.x_ratelimit) {
            (Some(_), Some(_)) => {
                return Err(
                    "set legacy (off, delta or epoch), not also its old spelling x_ratelimit"
                        .into(),
                );
            }
            (Some(l), None) => l,
            (None, Some(x)) => {
                let new = if x { "delta" } else { "off" };
                renamed.push(Renamed::new(
                    format!("headers.x_ratelimit = {x}"),
                    format!("headers.legacy = \"{new}\""),
                ));
                x.then_some(ResetFormat::Delta)
            }
            (None, None) => None,
        };
        Ok(HeadersSection {
            ratelimit: t.ratelimit,
            legacy,
            delay: t.delay,
            retry_after_jitter: t.retry_after_jitter,
            renamed,
        })
    }
}
