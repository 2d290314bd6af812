//! The startup-only part of the config: listen addresses, the store (and its fault
//! policy), the fleet strategy.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use floodgate_engine::admin::AllowedHosts;
use floodgate_engine::config::StoreSettings;
use floodgate_engine::fleet::{DEFAULT_LEASE, DEFAULT_LEASE_TTL, Strategy};
use floodgate_engine::insight::KeyDisplay;

use super::{Invalid, invalid, positive};
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
    /// The store (`store:`, resolved).
    pub store: StoreSettings,
    /// How a fleet of servers shares each limit.
    pub fleet: FleetSettings,
    /// How `/admin` shows keys.
    pub admin_keys: KeyDisplay,
    /// `Host` names the HTTP door's `/v1` and `/admin` answer besides loopback ones
    /// (`http.allowed_hosts`).
    pub http_allowed_hosts: AllowedHosts,
    /// Timeouts of client connections.
    pub connections: ConnectionSettings,
    /// The RESP door's password and command set.
    pub resp_door: super::security::RespSettings,
    /// The HTTP door's bearer token.
    pub http_door: super::security::HttpSettings,
    /// TLS on the doors (`None`: every door speaks cleartext).
    pub tls: Option<crate::tls::TlsSettings>,
}

/// Caps and timeouts of client connections, the same on every door (`connections:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// gRPC: the HTTP/2 preface of a new connection.
    pub preface_timeout: Duration,
    /// HTTP: a request head, from its first octet to its end.
    pub head_timeout: Duration,
    /// Every door: a connection with nothing under way (no call open, no request or
    /// command begun).
    pub idle_timeout: Duration,
    /// gRPC: a call's request, from its headers to its end; HTTP: a request body, from
    /// the head to its end; RESP: a command, from its first octet to its last.
    pub request_timeout: Duration,
    /// Most connections open at once on each door; `None`: derived from the
    /// open-descriptor limit at start ([`ConnectionSettings::caps`]).
    pub max_connections: Option<usize>,
    /// Most connections open at once from one client address on each door; `None`: a
    /// quarter of the total cap, at most [`DEFAULT_MAX_CONNECTIONS_PER_CLIENT`].
    pub max_connections_per_client: Option<usize>,
    /// RESP: the largest command, octets (at least 1).
    pub max_command_bytes: usize,
    /// gRPC: request octets one connection may hold unanswered (its HTTP/2 connection
    /// window); `None`: twice the stream window.
    pub grpc_connection_window: Option<u32>,
}

/// The most connections per door the derived default allows.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// The most connections per client address per door the derived default allows.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1_024;
/// Descriptors kept out of the derived connection caps: listeners, the config file and
/// its watcher, Redis connections, logs.
pub const RESERVED_DESCRIPTORS: u64 = 64;
/// The default [`ConnectionSettings::max_command_bytes`]: a 64 KiB argument (the largest
/// bulk string) and 4 KiB for the command's other arguments and framing.
pub const DEFAULT_MAX_COMMAND_BYTES: usize = 64 * 1024 + 4 * 1024;

impl Default for ConnectionSettings {
    fn default() -> ConnectionSettings {
        ConnectionSettings {
            preface_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(10),
            max_connections: None,
            max_connections_per_client: None,
            max_command_bytes: DEFAULT_MAX_COMMAND_BYTES,
            grpc_connection_window: None,
        }
    }
}

impl ConnectionSettings {
    /// The caps of each of `doors` doors under a descriptor limit of `nofile`: the
    /// configured ones, or (total) the limit less [`RESERVED_DESCRIPTORS`] shared by the
    /// doors, at most [`DEFAULT_MAX_CONNECTIONS`], and (per client) a quarter of the
    /// total, at most [`DEFAULT_MAX_CONNECTIONS_PER_CLIENT`]. Each at least 1; the
    /// per-client cap at most the total.
    pub fn caps(&self, nofile: u64, doors: usize) -> (usize, usize) {
        let share = nofile.saturating_sub(RESERVED_DESCRIPTORS) / (doors.max(1) as u64);
        let derived = usize::try_from(share)
            .unwrap_or(usize::MAX)
            .clamp(1, DEFAULT_MAX_CONNECTIONS);
        let total = self.max_connections.unwrap_or(derived).max(1);
        let per_client = self
            .max_connections_per_client
            .unwrap_or((total / 4).clamp(1, DEFAULT_MAX_CONNECTIONS_PER_CLIENT))
            .clamp(1, total);
        (total, per_client)
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

/// The fleet against the store, and `sticky` (the proxy's: it forwards over HTTP).
pub(super) fn check_fleet(file: &FileConfig) -> Result<(), String> {
    if file.fleet.strategy == Some(Strategy::Sticky) {
        return Err("strategy sticky forwards requests to the key's owner, which floodgate proxy does over HTTP; the server offers local, shared or hybrid".into());
    }
    if file.fleet.strategy == Some(Strategy::Quota) {
        return Err("strategy quota makes a node a client of a quota server (floodgate proxy's); the server is the quota server (its quota: rules); it offers local, shared or hybrid".into());
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
    let store = file.store.settings();
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
    let http_allowed_hosts = AllowedHosts::new(&file.http.allowed_hosts)
        .map_err(|e| invalid("http.allowed_hosts", e.to_string()))?;
    let connections = connections(file)?;
    Ok(Settings {
        grpc,
        http,
        resp,
        store,
        fleet,
        admin_keys,
        http_allowed_hosts,
        connections,
        resp_door: super::security::resp(&file.resp)?,
        http_door: super::security::http(&file.http)?,
        tls: match &file.tls {
            None => None,
            Some(t) => Some(crate::tls::load(t).map_err(|e| invalid("tls", e.to_string()))?),
        },
    })
}

/// `connections:`, each count and size at least 1 and within range.
fn connections(file: &FileConfig) -> Result<ConnectionSettings, Invalid> {
    let c = &file.connections;
    let d = ConnectionSettings::default();
    let count = |field: &str, v: Option<u64>| -> Result<Option<usize>, Invalid> {
        v.map(|v| positive(&format!("connections.{field}"), field, Some(v), 1))
            .transpose()
    };
    let max_connections = count("max_connections", c.max_connections)?;
    let max_connections_per_client =
        count("max_connections_per_client", c.max_connections_per_client)?;
    if let (Some(total), Some(per)) = (max_connections, max_connections_per_client)
        && per > total
    {
        return Err(invalid(
            "connections.max_connections_per_client",
            format!("max_connections_per_client {per} is above max_connections {total}"),
        ));
    }
    let max_command_bytes =
        count("max_command_bytes", c.max_command_bytes)?.unwrap_or(d.max_command_bytes);
    let grpc_connection_window = match c.grpc_connection_window {
        None => None,
        Some(v) => {
            const MAX_WINDOW: u64 = (1 << 31) - 1;
            let at = "connections.grpc_connection_window";
            let message = file.limits.max_request_bytes.unwrap_or(1 << 20);
            let least = message.saturating_add(5);
            if v < least {
                return Err(invalid(
                    at,
                    format!(
                        "grpc_connection_window {v} is below the largest request ({message} octets, limits.max_request_bytes, and its 5-octet prefix: {least})"
                    ),
                ));
            }
            if v > MAX_WINDOW {
                return Err(invalid(
                    at,
                    format!(
                        "grpc_connection_window {v} is above HTTP/2's largest window, {MAX_WINDOW}"
                    ),
                ));
            }
            Some(v as u32)
        }
    };
    Ok(ConnectionSettings {
        preface_timeout: c.preface_timeout.unwrap_or(d.preface_timeout),
        head_timeout: c.head_timeout.unwrap_or(d.head_timeout),
        idle_timeout: c.idle_timeout.unwrap_or(d.idle_timeout),
        request_timeout: c.request_timeout.unwrap_or(d.request_timeout),
        max_connections,
        max_connections_per_client,
        max_command_bytes,
        grpc_connection_window,
    })
}
