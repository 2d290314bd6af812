//! The startup-only part of the config: listen addresses, the store (and its fault
//! policy), the fleet strategy.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use floodgate_engine::StoreFailure;
use floodgate_engine::config::StoreKind;
use floodgate_engine::fleet::{DEFAULT_LEASE, DEFAULT_LEASE_TTL, Strategy};
use floodgate_engine::insight::KeyDisplay;
use floodgate_redis::StoreConfig;

use super::{Invalid, invalid};
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
    /// How `/admin` shows keys.
    pub admin_keys: KeyDisplay,
    /// Timeouts of client connections.
    pub connections: ConnectionSettings,
    /// The RESP door's password and command set.
    pub resp_door: super::security::RespSettings,
    /// The HTTP door's bearer token.
    pub http_door: super::security::HttpSettings,
    /// TLS on the doors (`None`: every door speaks cleartext).
    pub tls: Option<crate::tls::TlsSettings>,
}

/// How long a client connection may take over each phase (`connections:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// gRPC: the HTTP/2 preface of a new connection.
    pub preface_timeout: Duration,
    /// gRPC: a connection with no call open.
    pub idle_timeout: Duration,
    /// gRPC: a call's request, from its headers to its end.
    pub request_timeout: Duration,
}

impl Default for ConnectionSettings {
    fn default() -> ConnectionSettings {
        ConnectionSettings {
            preface_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(10),
        }
    }
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

/// Keys of `CL.THROTTLE` when `store.resp_max_keys` is not given.
const RESP_MAX_KEYS: usize = 1_000_000;

/// The fleet against the store, and `sticky` (the proxy's: it forwards over HTTP).
pub(super) fn check_fleet(file: &FileConfig) -> Result<(), String> {
    if file.fleet.strategy == Some(Strategy::Sticky) {
        return Err("strategy sticky forwards requests to the key's owner, which floodgate proxy does over HTTP; the server offers local, shared or hybrid".into());
    }
    file.fleet
        .check_store(&file.store)
        .map_err(|e| e.to_string())
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
    let store = match s.kind {
        StoreKind::Memory => StoreSettings::Memory {
            max_keys: s.max_keys(),
            resp_max_keys: s.resp_max_keys.unwrap_or(RESP_MAX_KEYS),
        },
        StoreKind::Redis => {
            let r = s.redis();
            StoreSettings::Redis {
                config: r.store_config(),
                on_fault: r.fault_policy,
                url: r.url,
            }
        }
    };
    let f = &file.fleet;
    let fleet = match f.strategy {
        None => FleetSettings::default(),
        strategy => FleetSettings {
            strategy,
            nodes: if matches!(strategy, Some(Strategy::Shared)) {
                1
            } else {
                f.count()
            },
            lease: f.lease,
            lease_ttl: f.lease_ttl,
        },
    };
    let admin_keys = match &file.admin_keys {
        None => KeyDisplay::Plain,
        Some(s) => s.parse().map_err(|e: String| invalid("admin_keys", e))?,
    };
    let c = &file.connections;
    let d = ConnectionSettings::default();
    let connections = ConnectionSettings {
        preface_timeout: c.preface_timeout.unwrap_or(d.preface_timeout),
        idle_timeout: c.idle_timeout.unwrap_or(d.idle_timeout),
        request_timeout: c.request_timeout.unwrap_or(d.request_timeout),
    };
    Ok(Settings {
        grpc,
        http,
        resp,
        store,
        fleet,
        admin_keys,
        connections,
        resp_door: super::security::resp(&file.resp)?,
        http_door: super::security::http(&file.http)?,
        tls: match &file.tls {
            None => None,
            Some(t) => Some(crate::tls::load(t).map_err(|e| invalid("tls", e.to_string()))?),
        },
    })
}
