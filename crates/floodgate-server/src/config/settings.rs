//! The startup-only part of the config: listen addresses, the store (and its fault
//! policy), the fleet strategy.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use floodgate_engine::StoreFailure;
use floodgate_engine::fleet::{DEFAULT_LEASE, DEFAULT_LEASE_TTL, Strategy};
use floodgate_redis::{FaultPolicy, StoreConfig};

use super::{Invalid, duration, invalid, positive};
use crate::file::FileConfig;

/// Settings read once at startup; a reload that changes them is reported and ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// gRPC listen address (`None`: off).
    pub grpc: Option<SocketAddr>,
    /// HTTP listen address (`None`: off).
    pub http: Option<SocketAddr>,
    /// RESP listen address (`None`: off).
    pub resp: Option<SocketAddr>,
    /// The store.
    pub store: StoreSettings,
    /// How a fleet of servers shares each limit.
    pub fleet: FleetSettings,
}

/// How several floodgate servers (behind one balancer) share each limit: the engine's
/// fleet strategies (`floodgate_engine::fleet`, priced by `floodgate simulate --nodes N`)
/// for a fleet known by its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetSettings {
    /// `None`: one server, or servers that each enforce the whole limit on their own
    /// (`strategy: single`, the default). [`Strategy::Local`]: each of `nodes` servers
    /// enforces `1/nodes` of every limit in process. [`Strategy::Shared`]: every decision
    /// on the shared Redis counter. [`Strategy::Hybrid`]: leases of at most `lease` units
    /// taken from the Redis counter and spent locally, every decision shared once fewer
    /// than `nodes x lease` units remain. Never [`Strategy::Sticky`] (the proxy's).
    pub strategy: Option<Strategy>,
    /// Servers in the fleet (1 unless `local` or `hybrid`).
    pub nodes: usize,
    /// Hybrid: most units per lease.
    pub lease: u64,
    /// Hybrid: a lease's lifetime.
    pub lease_ttl: Duration,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            strategy: None,
            nodes: 1,
            lease: DEFAULT_LEASE,
            lease_ttl: DEFAULT_LEASE_TTL,
        }
    }
}

/// Where limiter state lives.
#[derive(Debug, Clone)]
pub enum StoreSettings {
    /// In this process.
    Memory {
        /// Most keys per rate limit.
        max_keys: usize,
        /// Most keys of `CL.THROTTLE`.
        resp_max_keys: usize,
    },
    /// In Redis.
    Redis {
        /// The URL.
        url: String,
        /// Timeouts, breaker, prefix, deny cache.
        config: StoreConfig,
        /// What a request gets when Redis cannot decide (`fault_policy`: `fail-open`, the
        /// default, admits; `fail-closed` denies).
        on_fault: StoreFailure,
    },
}

impl PartialEq for StoreSettings {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                StoreSettings::Memory {
                    max_keys: a,
                    resp_max_keys: b,
                },
                StoreSettings::Memory {
                    max_keys: c,
                    resp_max_keys: d,
                },
            ) => a == c && b == d,
            (
                StoreSettings::Redis {
                    url: a,
                    config: x,
                    on_fault: f,
                },
                StoreSettings::Redis {
                    url: b,
                    config: y,
                    on_fault: g,
                },
            ) => a == b && f == g && format!("{x:?}") == format!("{y:?}"),
            _ => false,
        }
    }
}

fn address(field: &str, s: &Option<String>, default: &str) -> Result<Option<SocketAddr>, Invalid> {
    let at = format!("listen.{field}");
    let s = s.as_deref().unwrap_or(default).trim();
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let addr = s
        .to_socket_addrs()
        .map_err(|e| invalid(&at, format!("{s:?} is not a HOST:PORT address: {e}")))?
        .next()
        .ok_or_else(|| invalid(&at, format!("{s:?} resolves to no address")))?;
    Ok(Some(addr))
}

pub(super) fn settings(file: &FileConfig) -> Result<Settings, Invalid> {
    let l = &file.listen;
    let grpc = address("grpc", &l.grpc, "127.0.0.1:8081")?;
    let http = address("http", &l.http, "127.0.0.1:8080")?;
    let resp = address("resp", &l.resp, "127.0.0.1:16379")?;
    if let Some(a) = resp
        && a.port() == 6379
    {
        return Err(invalid(
            "listen.resp",
            "port 6379 is Redis's own port; pick another (the default is 16379)",
        ));
    }
    let s = &file.store;
    let kind = s.kind.as_deref().unwrap_or("memory").to_ascii_lowercase();
    let store = match kind.as_str() {
        "memory" => StoreSettings::Memory {
            max_keys: positive("store", "max_keys", s.max_keys, 100_000)?,
            resp_max_keys: positive("store", "resp_max_keys", s.resp_max_keys, 1_000_000)?,
        },
        "redis" => {
            let r = &s.redis;
            let at = "store.redis";
            let d = StoreConfig::default();
            let on_fault = match r.fault_policy.as_deref().map(str::to_ascii_lowercase) {
                None => StoreFailure::Allow,
                Some(p) if p == "fail-open" || p == "fail_open" => StoreFailure::Allow,
                Some(p) if p == "fail-closed" || p == "fail_closed" => StoreFailure::Deny,
                Some(p) => {
                    return Err(invalid(
                        at,
                        format!("fault_policy {p:?}: expected fail-open or fail-closed"),
                    ));
                }
            };
            let timeout = duration(at, "timeout", &r.timeout, d.timeout)?;
            if timeout.is_zero() {
                return Err(invalid(at, "timeout must be above 0"));
            }
            let config = StoreConfig {
                prefix: r.prefix.clone().unwrap_or(d.prefix.clone()),
                timeout,
                connect_timeout: duration(
                    at,
                    "connect_timeout",
                    &r.connect_timeout,
                    d.connect_timeout,
                )?,
                policy: match on_fault {
                    StoreFailure::Allow => FaultPolicy::FailOpen,
                    StoreFailure::Deny => FaultPolicy::FailClosed,
                },
                breaker_open_for: duration(
                    at,
                    "breaker_open_for",
                    &r.breaker_open_for,
                    d.breaker_open_for,
                )?,
                deny_cache_keys: match r.deny_cache_keys {
                    None => d.deny_cache_keys,
                    Some(n) => usize::try_from(n)
                        .map_err(|_| invalid(at, format!("deny_cache_keys {n} is too large")))?,
                },
                ..d
            };
            if config.prefix.contains(['{', '}']) {
                return Err(invalid(
                    at,
                    format!("prefix {:?} must not contain '{{' or '}}'", config.prefix),
                ));
            }
            StoreSettings::Redis {
                url: r
                    .url
                    .clone()
                    .unwrap_or_else(|| "redis://127.0.0.1:6379".into()),
                config,
                on_fault,
            }
        }
        other => {
            return Err(invalid(
                "store.type",
                format!("{other:?}: expected memory or redis"),
            ));
        }
    };
    let f = &file.fleet;
    let at = "fleet";
    let redis = matches!(store, StoreSettings::Redis { .. });
    let strategy = f
        .strategy
        .as_deref()
        .unwrap_or("single")
        .to_ascii_lowercase();
    let nodes = || -> Result<usize, Invalid> {
        let n = f.nodes.ok_or_else(|| {
            invalid(
                at,
                format!("strategy {strategy} needs nodes: the number of servers"),
            )
        })?;
        positive(at, "nodes", Some(n), 1)
    };
    let strategy = match strategy.as_str() {
        "single" => None,
        "sticky" => {
            return Err(invalid(
                at,
                "strategy sticky forwards requests to the key's owner, which floodgate proxy does over HTTP; the server offers local, shared or hybrid",
            ));
        }
        other => Some(other.parse::<Strategy>().map_err(|_| {
            invalid(
                at,
                format!("strategy {other:?}: expected single, local, shared or hybrid"),
            )
        })?),
    };
    let mut fleet = FleetSettings {
        strategy,
        ..FleetSettings::default()
    };
    match strategy {
        None | Some(Strategy::Sticky) => {}
        Some(Strategy::Local) if redis => {
            return Err(invalid(
                at,
                "strategy local counts in process: it takes store type memory",
            ));
        }
        Some(s) if s.needs_shared_store() && !redis => {
            return Err(invalid(
                at,
                format!("strategy {s} needs the shared counter: set store type redis"),
            ));
        }
        Some(Strategy::Local) => fleet.nodes = nodes()?,
        Some(Strategy::Shared) => {}
        Some(Strategy::Hybrid) => {
            fleet.nodes = nodes()?;
            fleet.lease = positive(at, "lease", f.lease, DEFAULT_LEASE)? as u64;
            fleet.lease_ttl = duration(at, "lease_ttl", &f.lease_ttl, DEFAULT_LEASE_TTL)?;
            if fleet.lease_ttl.is_zero() {
                return Err(invalid(at, "lease_ttl must be above 0"));
            }
        }
    }
    Ok(Settings {
        grpc,
        http,
        resp,
        store,
        fleet,
    })
}
