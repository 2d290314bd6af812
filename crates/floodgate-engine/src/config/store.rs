//! `[store]` and `[store.redis]` (with its `fault_policy`), each value checked as it is
//! deserialized.

use std::time::Duration;

use floodgate_core::de::{duration, positive_count, timeout};
use floodgate_redis::{FaultPolicy, ModuleUse, StoreConfig, TimeSource};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::Renamed;
use crate::fault::StoreFailure;

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
    /// `auto` (default: floodgate's Redis module when the server has it loaded, the Lua
    /// scripts otherwise), `always` (the module; connecting fails without it) or `never`
    /// (the scripts).
    #[serde(deserialize_with = "de_module")]
    pub module: ModuleUse,
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
            module: d.module,
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
            module: self.module,
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

fn de_module<'de, D: Deserializer<'de>>(d: D) -> Result<ModuleUse, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "auto" => Ok(ModuleUse::Auto),
        "always" => Ok(ModuleUse::Always),
        "never" => Ok(ModuleUse::Never),
        _ => Err(de::Error::custom(format!(
            "{s:?}: expected auto, always or never"
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
