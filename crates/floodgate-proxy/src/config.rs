//! The TOML configuration of `floodgate proxy` (the same file can build a layer with
//! [`Config::limiter_builder`]).
//!
//! Every table rejects unknown fields, and every error names the file, the line and
//! column, and the field (`floodgate.toml:7:8: invalid rate "10/q": unknown unit "q"; ...`).
//!
//! ```toml
//! listen = "127.0.0.1:8080"            # where clients connect
//! upstream = "http://127.0.0.1:9000"   # the backend (http only)
//! admin = "127.0.0.1:9090"             # optional: /metrics and /healthz
//! store = "memory"                     # or "redis://127.0.0.1:6379/" (see [redis])
//! max_keys = 1000000                   # per policy, in-process store
//! upstream_timeout = "30s"             # response head from upstream, else 504
//! connect_timeout = "5s"               # else 502
//! head_timeout = "30s"                 # client: idle or slow request head, then closed
//! send_timeout = "30s"                 # client: not reading its response, then closed
//! body_timeout = "30s"                 # client: request body stalled, then 408
//! max_connections = 16384              # client connections at once; more are closed
//! max_connections_per_client = 1024    # client connections at once from one address
//! upstream_max_idle = 1024             # idle upstream connections kept, per worker
//! shutdown_grace = "30s"               # drain in-flight requests on SIGTERM/Ctrl-C
//! upstream_http2 = false               # h2c prior knowledge to the upstream
//!
//! [client_ip]
//! trusted_proxies = ["10.0.0.0/8"]     # only these peers' X-Forwarded-For is read
//! header = "x-forwarded-for"           # or "forwarded" (RFC 7239)
//! ipv4_prefix = 32                     # 24: one key per /24
//! ipv6_prefix = 64
//!
//! [deny]
//! status = 429                         # nginx uses 503
//! retry_after_jitter = "1s"            # Retry-After = ceil(retry + uniform(0, jitter))
//! missing_key = "deny"                 # or "allow", or "fallback" with fallback_key
//! missing_key_status = 400
//! # fallback_key = "anonymous"
//! store_error = "allow"                # or "deny" (503) when the store fails
//!
//! [headers]
//! ratelimit = true                     # RateLimit-Policy + RateLimit
//! legacy = "off"                       # or "delta" / "epoch": X-RateLimit-Limit/Remaining/Reset
//! delay = true                         # X-RateLimit-Delay-Ms on held requests
//!
//! [delay]
//! max_waiting = 10000                  # requests held at once; beyond: rejected
//!
//! [allowlist]
//! ips = ["127.0.0.1", "192.0.2.0/24"]  # bypass every policy
//! keys = ["deploy-pipeline-token"]     # header-derived keys that bypass
//!
//! [redis]                              # only with store = "redis://..."
//! prefix = "floodgate:"                # key prefix
//! timeout = "50ms"                     # per call; slower is a store error
//! time = "redis"                       # Redis TIME (shared clock) or "caller"
//! connect_timeout = "1s"
//! breaker_open_for = "250ms"           # after a failure, skip Redis this long, then probe
//! deny_cache_keys = 100000             # denials remembered locally, per policy (0: off)
//!
//! [fleet]                              # optional: N proxies sharing the limits
//! strategy = "sticky"                  # sticky | local | shared | hybrid
//! nodes = ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"]
//! self = "127.0.0.1:8080"              # this node's advertised address (in nodes)
//! # lease = 10                         # hybrid: most units leased per round trip
//! # lease_ttl = "1s"                   # hybrid: lease lifetime
//!
//! [[policy]]
//! name = "per-ip"
//! algorithm = "leaky-queue"            # fixed-window, sliding-log, sliding-counter,
//!                                      # token-bucket, leaky-meter, leaky-queue, gcra
//! rate = "10/s"
//! burst = 20                           # nginx burst (capacity = burst + 1); or capacity = 21
//! nodelay = true                       # leaky-queue: or delay = 8; neither = delay all
//! key = "ip"                           # ip | global | route | "header:x-api-key" | a list
//! dry_run = false
//!
//! [[policy]]
//! name = "global"
//! algorithm = "gcra"
//! rate = "5000/min"
//! key = "global"
//!
//! [[route]]
//! prefix = "/search"
//! methods = ["GET"]
//! policies = ["per-ip", "global"]
//! cost = 1                             # per request, every policy of the route
//! costs = { per-ip = 10 }              # per-policy override
//!
//! [[route]]
//! prefix = "/"
//! policies = ["per-ip", "global"]
//! ```

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use floodgate_core::algorithms::DelayMode;
use floodgate_core::{Kind, Rate, Spec};
use http::{HeaderName, Method, StatusCode, Uri};
use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::builder::{BuildError, RateLimiterBuilder};
use crate::fault::StoreFailure;
use crate::fleet::{Fleet, FleetError, Strategy};
use crate::headers::{HeaderOptions, ResetFormat};
use crate::key::MissingKey;
use crate::key::{ClientIpConfig, ForwardedHeader, KeyPart, KeySource};
use crate::policy::{Policy, Route};

/// A config error located in its file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is invalid at a place.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong, naming the field.
        message: String,
    },
}

fn locate(src: &str, span: Option<Range<usize>>) -> (usize, usize) {
    let Some(span) = span else { return (1, 1) };
    let at = span.start.min(src.len());
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(at, |i| at - i - 1) + 1;
    (line, column)
}

fn parse_with<T, E: fmt::Display>(
    what: &str,
    s: &str,
    f: impl FnOnce(&str) -> Result<T, E>,
) -> Result<T, String> {
    f(s).map_err(|e| format!("{what}: {e}"))
}

macro_rules! de_str {
    ($name:ident, $t:ty, $what:literal, $f:expr) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
            let s = String::deserialize(d)?;
            parse_with::<$t, _>($what, &s, $f).map_err(serde::de::Error::custom)
        }
    };
}

de_str!(de_rate, Rate, "rate", |s: &str| s.parse::<Rate>());
de_str!(de_duration, Duration, "duration", |s: &str| {
    floodgate_core::rate::parse_duration(s)
});
de_str!(de_kind, Kind, "algorithm", |s: &str| s.parse::<Kind>());
de_str!(de_upstream, Uri, "upstream", parse_upstream);
de_str!(de_store, StoreSpec, "store", |s: &str| s
    .parse::<StoreSpec>());
de_str!(de_strategy, Strategy, "strategy", |s: &str| s
    .parse::<Strategy>());

fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

/// `fn $name`: the timeout field `$field`, a duration above zero (a timeout of 0 would
/// fail every request or connection).
macro_rules! de_timeout {
    ($name:ident, $field:literal) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            let t = de_duration(d)?;
            if t.is_zero() {
                return Err(serde::de::Error::custom(concat!(
                    $field,
                    ": a timeout of 0 would fail every request; give a duration above zero, e.g. \"30s\""
                )));
            }
            Ok(Some(t))
        }
    };
}

de_timeout!(de_upstream_timeout, "upstream_timeout");
de_timeout!(de_connect_timeout, "connect_timeout");
de_timeout!(de_head_timeout, "head_timeout");
de_timeout!(de_send_timeout, "send_timeout");
de_timeout!(de_body_timeout, "body_timeout");

/// `fn $name`: the connection cap `$field`, at least 1 (0 would refuse every client).
macro_rules! de_cap {
    ($name:ident, $field:literal) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
            let n = usize::deserialize(d)?;
            if n == 0 {
                return Err(serde::de::Error::custom(concat!(
                    $field,
                    ": a cap of 0 would refuse every connection; give at least 1"
                )));
            }
            Ok(Some(n))
        }
    };
}

de_cap!(de_max_connections, "max_connections");
de_cap!(de_max_connections_per_client, "max_connections_per_client");
de_timeout!(de_redis_timeout, "redis.timeout");
de_timeout!(de_redis_connect_timeout, "redis.connect_timeout");

fn de_opt_upstream<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uri>, D::Error> {
    de_upstream(d).map(Some)
}

fn de_status<'de, D: Deserializer<'de>>(d: D) -> Result<StatusCode, D::Error> {
    let n = u16::deserialize(d)?;
    StatusCode::from_u16(n)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error())
        .ok_or_else(|| serde::de::Error::custom(format!("status {n} is not a 4xx or 5xx code")))
}

fn de_nets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| parse_net(s).map_err(serde::de::Error::custom))
        .collect()
}

fn de_methods<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Method>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| {
            Method::from_bytes(s.to_ascii_uppercase().as_bytes())
                .map_err(|_| serde::de::Error::custom(format!("invalid HTTP method {s:?}")))
        })
        .collect()
}

fn parse_net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s:?} is not an IP address or CIDR (e.g. 10.0.0.0/8, 2001:db8::/32)"))
}

/// An `http://host:port` upstream, without path or query.
pub fn parse_upstream(s: &str) -> Result<Uri, String> {
    let uri: Uri = s.parse().map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(format!(
                "{s:?}: scheme {other:?} is not supported; use http:// (floodgate proxies plain HTTP/1.1 or h2c)"
            ));
        }
        None => return Err(format!("{s:?} needs a scheme, e.g. http://127.0.0.1:9000")),
    }
    if uri.authority().is_none() {
        return Err(format!("{s:?} has no host"));
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err(format!(
            "{s:?}: a path prefix on the upstream is not supported"
        ));
    }
    Ok(uri)
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}

/// Where decisions are made.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreSpec {
    /// In-process (default).
    #[default]
    Memory,
    /// A Redis server (`redis://host:port/db`).
    Redis(String),
}

impl FromStr for StoreSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<StoreSpec, String> {
        if s == "memory" {
            Ok(StoreSpec::Memory)
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(StoreSpec::Redis(s.to_string()))
        } else {
            Err(format!(
                "{s:?}: expected \"memory\" or a redis://host:port URL"
            ))
        }
    }
}

/// A policy key in config form.
#[derive(Debug, Clone)]
pub struct KeySpec(pub KeySource);

impl<'de> Deserialize<'de> for KeySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeySpec, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        let parts = match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        };
        if parts.is_empty() {
            return Err(serde::de::Error::custom("key list is empty"));
        }
        parts
            .iter()
            .map(|p| parse_key_part(p).map_err(serde::de::Error::custom))
            .collect::<Result<Vec<_>, _>>()
            .map(|v| KeySpec(KeySource(v)))
    }
}

fn parse_key_part(s: &str) -> Result<KeyPart, String> {
    match s {
        "ip" => Ok(KeyPart::Ip),
        "global" => Ok(KeyPart::Global),
        "route" => Ok(KeyPart::Route),
        _ => match s.strip_prefix("header:") {
            Some(h) => HeaderName::from_bytes(h.trim().as_bytes())
                .map(KeyPart::Header)
                .map_err(|_| format!("key {s:?}: {h:?} is not a valid header name")),
            None => Err(format!(
                "key {s:?}: expected ip, global, route or header:NAME"
            )),
        },
    }
}

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Proxy listen address (default 127.0.0.1:8080).
    pub listen: Option<SocketAddr>,
    /// The backend, `http://host:port`.
    #[serde(default, deserialize_with = "de_opt_upstream")]
    pub upstream: Option<Uri>,
    /// Admin listener (`/metrics`, `/healthz`).
    pub admin: Option<SocketAddr>,
    /// `memory` or `redis://...`.
    #[serde(default, deserialize_with = "de_store")]
    pub store: StoreSpec,
    /// Keys per policy in the in-process store.
    pub max_keys: Option<usize>,
    /// Time allowed for the upstream's response head (default 30 s), else 504.
    #[serde(default, deserialize_with = "de_upstream_timeout")]
    pub upstream_timeout: Option<Duration>,
    /// Time allowed to connect to the upstream (default 5 s), else 502.
    #[serde(default, deserialize_with = "de_connect_timeout")]
    pub connect_timeout: Option<Duration>,
    /// How long a client connection may wait for a request head with no request in
    /// flight (default 30 s), else it is closed.
    #[serde(default, deserialize_with = "de_head_timeout")]
    pub head_timeout: Option<Duration>,
    /// How long a write to a client may make no progress (default 30 s), else the
    /// connection is closed.
    #[serde(default, deserialize_with = "de_send_timeout")]
    pub send_timeout: Option<Duration>,
    /// How long a client's request body may stall (default 30 s), else 408.
    #[serde(default, deserialize_with = "de_body_timeout")]
    pub body_timeout: Option<Duration>,
    /// Most client connections at once (default 16 384).
    #[serde(default, deserialize_with = "de_max_connections")]
    pub max_connections: Option<usize>,
    /// Most client connections at once from one address (default 1 024).
    #[serde(default, deserialize_with = "de_max_connections_per_client")]
    pub max_connections_per_client: Option<usize>,
    /// Most idle upstream connections kept per worker (default 1 024).
    pub upstream_max_idle: Option<usize>,
    /// How long to drain in-flight requests at shutdown (default 30 s).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub shutdown_grace: Option<Duration>,
    /// Speak h2c (prior knowledge) to the upstream.
    #[serde(default)]
    pub upstream_http2: bool,
    /// Client IP resolution.
    #[serde(default)]
    pub client_ip: ClientIpSection,
    /// Denials and failures.
    #[serde(default)]
    pub deny: DenySection,
    /// Response headers.
    #[serde(default)]
    pub headers: HeadersSection,
    /// Leaky-queue holding.
    #[serde(default)]
    pub delay: DelaySection,
    /// Bypass lists.
    #[serde(default)]
    pub allowlist: AllowlistSection,
    /// The Redis store's settings (with `store = "redis://..."`).
    #[serde(default)]
    pub redis: RedisSection,
    /// A fleet of proxies sharing the limits.
    pub fleet: Option<Spanned<FleetSection>>,
    /// The policies.
    #[serde(rename = "policy", default)]
    pub policies: Vec<Spanned<PolicySection>>,
    /// The routes.
    #[serde(rename = "route", default)]
    pub routes: Vec<RouteSection>,
}

/// `[client_ip]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClientIpSection {
    /// Peers whose forwarding header is read.
    #[serde(default, deserialize_with = "de_nets")]
    pub trusted_proxies: Vec<IpNet>,
    /// `x-forwarded-for` (default) or `forwarded`.
    #[serde(default)]
    pub header: HeaderChoice,
    /// 0..=32, default 32.
    pub ipv4_prefix: Option<u8>,
    /// 0..=128, default 64.
    pub ipv6_prefix: Option<u8>,
}

/// Which forwarding header.
#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum HeaderChoice {
    #[default]
    XForwardedFor,
    Forwarded,
}

/// `[deny]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DenySection {
    /// Rate-limit denial status (default 429).
    #[serde(default, deserialize_with = "de_opt_status")]
    pub status: Option<StatusCode>,
    /// Retry-After jitter span (default 1 s).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub retry_after_jitter: Option<Duration>,
    /// deny | allow | fallback.
    #[serde(default)]
    pub missing_key: MissingKeyChoice,
    /// Status for missing keys (default 400).
    #[serde(default, deserialize_with = "de_opt_status")]
    pub missing_key_status: Option<StatusCode>,
    /// The key for `missing_key = "fallback"`.
    pub fallback_key: Option<String>,
    /// allow | deny when the store fails.
    #[serde(default)]
    pub store_error: StoreErrorChoice,
}

fn de_opt_status<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StatusCode>, D::Error> {
    de_status(d).map(Some)
}

/// `missing_key`.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum MissingKeyChoice {
    #[default]
    Deny,
    Allow,
    Fallback,
}

/// `store_error`.
#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum StoreErrorChoice {
    #[default]
    Allow,
    Deny,
}

/// `[headers]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeadersSection {
    /// RateLimit-Policy and RateLimit.
    pub ratelimit: bool,
    /// off | delta | epoch.
    pub legacy: LegacyChoice,
    /// X-RateLimit-Delay-Ms.
    pub delay: bool,
}

impl Default for HeadersSection {
    fn default() -> Self {
        HeadersSection {
            ratelimit: true,
            legacy: LegacyChoice::Off,
            delay: true,
        }
    }
}

/// `legacy`.
#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum LegacyChoice {
    #[default]
    Off,
    Delta,
    Epoch,
}

/// `[delay]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DelaySection {
    /// Requests held at once (default 10 000).
    pub max_waiting: Option<usize>,
}

/// `[allowlist]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AllowlistSection {
    /// IPs and CIDRs.
    #[serde(default, deserialize_with = "de_nets")]
    pub ips: Vec<IpNet>,
    /// Header-derived keys.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// `[fleet]`: this proxy is one of N sharing the limits (see [`crate::fleet`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSection {
    /// sticky | local | shared | hybrid.
    #[serde(deserialize_with = "de_strategy")]
    pub strategy: Strategy,
    /// Every node's advertised `host:port`, this one included.
    pub nodes: Vec<String>,
    /// This node's advertised `host:port`.
    #[serde(rename = "self")]
    pub self_node: String,
    /// Hybrid: the most units leased per round trip (default 10).
    pub lease: Option<u64>,
    /// Hybrid: lease lifetime (default 1 s).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub lease_ttl: Option<Duration>,
}

impl FleetSection {
    /// The validated fleet.
    pub fn fleet(&self) -> Result<Fleet, FleetError> {
        Fleet::new(
            self.strategy,
            self.nodes.iter().cloned(),
            self.self_node.clone(),
        )?
        .with_lease(
            self.lease.unwrap_or(crate::fleet::DEFAULT_LEASE),
            self.lease_ttl.unwrap_or(crate::fleet::DEFAULT_LEASE_TTL),
        )
    }
}

/// `[redis]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RedisSection {
    /// Key prefix (default `floodgate:`).
    pub prefix: Option<String>,
    /// Per-call timeout (default 50 ms); a slower answer is a store error.
    #[serde(default, deserialize_with = "de_redis_timeout")]
    pub timeout: Option<Duration>,
    /// Time allowed to connect (default 1 s).
    #[serde(default, deserialize_with = "de_redis_connect_timeout")]
    pub connect_timeout: Option<Duration>,
    /// After a failed call, Redis is left alone this long, then probed (default 250 ms;
    /// 0 probes at once).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub breaker_open_for: Option<Duration>,
    /// Denials remembered locally per policy, each saving a round trip until its retry
    /// time (default 100 000; 0 turns the cache off).
    pub deny_cache_keys: Option<usize>,
    /// `redis` (Redis `TIME`, default: one clock for every process) or `caller`.
    #[serde(default)]
    pub time: RedisTime,
}

impl RedisSection {
    /// The Redis store's settings: these, over the defaults.
    pub fn store_config(&self) -> floodgate_redis::StoreConfig {
        let d = floodgate_redis::StoreConfig::default();
        floodgate_redis::StoreConfig {
            prefix: self.prefix.clone().unwrap_or(d.prefix.clone()),
            timeout: self.timeout.unwrap_or(d.timeout),
            connect_timeout: self.connect_timeout.unwrap_or(d.connect_timeout),
            breaker_open_for: self.breaker_open_for.unwrap_or(d.breaker_open_for),
            deny_cache_keys: self.deny_cache_keys.unwrap_or(d.deny_cache_keys),
            time: match self.time {
                RedisTime::Redis => floodgate_redis::TimeSource::Redis,
                RedisTime::Caller => floodgate_redis::TimeSource::Caller,
            },
            ..d
        }
    }
}

/// `[redis] time`.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum RedisTime {
    #[default]
    Redis,
    Caller,
}

/// Why a configured limiter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildConfigError {
    /// Invalid policies or settings.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The Redis store could not be reached or set up.
    #[error("store {url}: {message}")]
    Store {
        /// The URL, password redacted.
        url: String,
        /// What went wrong.
        message: String,
    },
}

/// `[[policy]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// Name (printable ASCII).
    pub name: String,
    /// Algorithm (default leaky-queue, as nginx).
    #[serde(default = "default_kind", deserialize_with = "de_kind")]
    pub algorithm: Kind,
    /// COUNT/PERIOD.
    #[serde(deserialize_with = "de_rate")]
    pub rate: Rate,
    /// nginx / redis-cell burst: capacity - 1.
    pub burst: Option<u64>,
    /// Units admitted at once from rest.
    pub capacity: Option<u64>,
    /// leaky-queue: never delay.
    #[serde(default)]
    pub nodelay: bool,
    /// leaky-queue: delay only beyond this many excess requests.
    pub delay: Option<u64>,
    /// What to count by (default ip).
    pub key: Option<KeySpec>,
    /// Shadow mode.
    #[serde(default)]
    pub dry_run: bool,
}

fn default_kind() -> Kind {
    Kind::LeakyQueue
}

/// `[[route]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Path prefix (default "/").
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Methods (default any).
    #[serde(default, deserialize_with = "de_methods")]
    pub methods: Vec<Method>,
    /// Policy names.
    pub policies: Vec<Spanned<String>>,
    /// Cost per request under every policy (default 1).
    pub cost: Option<u64>,
    /// Per-policy cost overrides.
    #[serde(default)]
    pub costs: std::collections::BTreeMap<Spanned<String>, u64>,
}

fn default_prefix() -> String {
    "/".into()
}

impl PolicySection {
    fn spec(&self) -> Result<Spec, String> {
        let mut spec = Spec::new(self.algorithm, self.rate);
        spec.capacity = match (self.burst, self.capacity) {
            (Some(_), Some(_)) => {
                return Err("set burst or capacity, not both (capacity = burst + 1)".into());
            }
            (Some(b), None) => Some(
                b.checked_add(1)
                    .ok_or_else(|| format!("burst {b} is too large"))?,
            ),
            (None, c) => c,
        };
        if spec.capacity == Some(0) {
            return Err("capacity must be at least 1".into());
        }
        let queue = self.algorithm == Kind::LeakyQueue;
        spec.delay = match (self.nodelay, self.delay) {
            (true, Some(_)) => return Err("set nodelay or delay, not both".into()),
            _ if !queue && (self.nodelay || self.delay.is_some()) => {
                return Err(format!(
                    "nodelay and delay apply only to algorithm = \"leaky-queue\", not {:?}",
                    self.algorithm.name()
                ));
            }
            (true, None) => DelayMode::NoDelay,
            (false, Some(n)) => DelayMode::After(n),
            (false, None) => DelayMode::After(0),
        };
        spec.build().map_err(|e| e.to_string())?;
        Ok(spec)
    }
}

impl Config {
    /// Set the timeouts, connection caps and upstream settings this file gives on
    /// `settings` (what it leaves unset stays as it is).
    pub fn apply_to(&self, settings: &mut crate::ProxySettings) {
        let s = settings;
        s.upstream_timeout = self.upstream_timeout.unwrap_or(s.upstream_timeout);
        s.connect_timeout = self.connect_timeout.unwrap_or(s.connect_timeout);
        s.head_timeout = self.head_timeout.unwrap_or(s.head_timeout);
        s.send_timeout = self.send_timeout.unwrap_or(s.send_timeout);
        s.body_timeout = self.body_timeout.unwrap_or(s.body_timeout);
        s.max_connections = self.max_connections.unwrap_or(s.max_connections);
        s.max_connections_per_client = self
            .max_connections_per_client
            .unwrap_or(s.max_connections_per_client);
        s.upstream_max_idle = self.upstream_max_idle.unwrap_or(s.upstream_max_idle);
        s.shutdown_grace = self.shutdown_grace.unwrap_or(s.shutdown_grace);
        s.upstream_http2 = self.upstream_http2;
    }

    /// Parse `src` (read from `path`, for messages).
    pub fn parse(src: &str, path: &Path) -> Result<Config, ConfigFileError> {
        let invalid = |span: Option<Range<usize>>, message: String| {
            let (line, column) = locate(src, span);
            ConfigFileError::Invalid {
                path: path.to_path_buf(),
                line,
                column,
                message,
            }
        };
        let cfg: Config = toml::from_str(src)
            .map_err(|e: toml::de::Error| invalid(e.span(), e.message().trim_end().to_string()))?;
        // checks that span several fields, located at their table
        let mut names: Vec<&str> = Vec::new();
        for (i, p) in cfg.policies.iter().enumerate() {
            let span = Some(p.span());
            let pol = p.get_ref();
            pol.spec()
                .map_err(|m| invalid(span.clone(), format!("policy[{i}] {:?}: {m}", pol.name)))?;
            Policy::new(
                pol.name.clone(),
                pol.spec().unwrap_or_else(|_| unreachable!()),
            )
            .validate()
            .map_err(|m| invalid(span.clone(), format!("policy[{i}]: {m}")))?;
            if names.contains(&pol.name.as_str()) {
                return Err(invalid(
                    span,
                    format!("policy {:?} is defined twice", pol.name),
                ));
            }
            names.push(&pol.name);
        }
        if cfg.policies.is_empty() {
            return Err(invalid(
                None,
                "no [[policy]] defined: at least one is required".into(),
            ));
        }
        for r in &cfg.routes {
            for (i, n) in r.policies.iter().enumerate() {
                if r.policies[..i].iter().any(|m| m.get_ref() == n.get_ref()) {
                    return Err(invalid(
                        Some(n.span()),
                        format!(
                            "route {:?}: policy {:?} is listed twice; list it once (`costs` sets its cost)",
                            r.prefix,
                            n.get_ref()
                        ),
                    ));
                }
            }
            for n in r.policies.iter().chain(r.costs.keys()) {
                if !names.contains(&n.get_ref().as_str()) {
                    return Err(invalid(
                        Some(n.span()),
                        format!(
                            "route {:?}: unknown policy {:?}; defined: {}",
                            r.prefix,
                            n.get_ref(),
                            names.join(", ")
                        ),
                    ));
                }
            }
        }
        if cfg.deny.missing_key == MissingKeyChoice::Fallback && cfg.deny.fallback_key.is_none() {
            return Err(invalid(
                None,
                "deny.missing_key = \"fallback\" needs deny.fallback_key".into(),
            ));
        }
        if let Some(s) = cfg.deny.missing_key_status
            && !s.is_client_error()
        {
            return Err(invalid(
                None,
                format!("deny.missing_key_status {} must be a 4xx", s.as_u16()),
            ));
        }
        if cfg.client_ip.ipv4_prefix.is_some_and(|p| p > 32) {
            return Err(invalid(None, "client_ip.ipv4_prefix must be 0..=32".into()));
        }
        if cfg.client_ip.ipv6_prefix.is_some_and(|p| p > 128) {
            return Err(invalid(
                None,
                "client_ip.ipv6_prefix must be 0..=128".into(),
            ));
        }
        if cfg.max_keys == Some(0) {
            return Err(invalid(None, "max_keys must be at least 1".into()));
        }
        if cfg.delay.max_waiting == Some(0) {
            return Err(invalid(None, "delay.max_waiting must be at least 1".into()));
        }
        if let Some(f) = &cfg.fleet {
            let span = Some(f.span());
            let at = |e: FleetError| invalid(span.clone(), format!("fleet: {e}"));
            let strategy = f.get_ref().fleet().map_err(at)?.strategy();
            let redis = matches!(cfg.store, StoreSpec::Redis(_));
            if strategy.needs_shared_store() && !redis {
                return Err(at(FleetError::NeedsSharedStore(strategy)));
            }
            if !strategy.needs_shared_store() && redis {
                return Err(at(FleetError::NeedsLocalStore(strategy)));
            }
            if strategy == Strategy::Hybrid
                && let Some((i, p)) = cfg.policies.iter().enumerate().find(|(_, p)| {
                    let p = p.get_ref();
                    p.algorithm == Kind::LeakyQueue && !p.nodelay
                })
            {
                return Err(invalid(
                    Some(p.span()),
                    format!(
                        "policy[{i}] {:?}: fleet strategy \"hybrid\" admits from leases at once; a delaying leaky-queue cannot be leased (set nodelay = true or algorithm = \"gcra\")",
                        p.get_ref().name
                    ),
                ));
            }
        }
        Ok(cfg)
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
        let src = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&src, path)
    }

    /// The `[fleet]`, validated (`None` without one).
    pub fn fleet(&self) -> Option<Fleet> {
        // validated in parse()
        self.fleet.as_ref().and_then(|f| f.get_ref().fleet().ok())
    }

    /// Build the limiter with its store: in-process, or connect to Redis (with the
    /// `hybrid` fleet strategy, a [`crate::HybridStore`] on it).
    pub async fn build(&self) -> Result<crate::RateLimiter, BuildConfigError> {
        let builder = self.limiter_builder();
        let StoreSpec::Redis(url) = &self.store else {
            return Ok(builder.build()?);
        };
        let redacted = redact(url);
        let fail = |message: String| BuildConfigError::Store {
            url: redacted.clone(),
            message,
        };
        let rc = self.redis.store_config();
        let infos = builder.policy_infos()?;
        let store = floodgate_redis::RedisStore::connect(url, rc)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let store = std::sync::Arc::new(store);
        let fleet = self.fleet();
        let builder = match &fleet {
            Some(f) if f.strategy() == Strategy::Hybrid => {
                let hybrid =
                    crate::HybridStore::new(store, &infos, f, self.max_keys.unwrap_or(1_000_000))
                        .map_err(|e| fail(e.kind.to_string()))?;
                builder.store(std::sync::Arc::new(hybrid), "hybrid")
            }
            _ => {
                let shared = crate::RedisDecisionStore::new(store, &infos)
                    .map_err(|e| fail(e.kind.to_string()))?;
                builder.store(std::sync::Arc::new(shared), "redis")
            }
        };
        let builder = match fleet {
            Some(f) if f.strategy().needs_shared_store() => builder.fleet(f),
            _ => builder,
        };
        Ok(builder.build()?)
    }

    /// A limiter builder with everything but the store (in-process by default), and the
    /// fleet when its strategy counts in process (`sticky`, `local`; [`build`](Self::build)
    /// adds `shared` and `hybrid` with their store). With `sticky`, the nodes given as
    /// `ip:port` are trusted proxies, so that a forwarded request's client IP (appended to
    /// `X-Forwarded-For` by the forwarding node) is the key on the owner too.
    pub fn limiter_builder(&self) -> RateLimiterBuilder {
        let fleet = self.fleet().filter(|f| !f.strategy().needs_shared_store());
        let mut trusted_proxies = self.client_ip.trusted_proxies.clone();
        if let Some(f) = fleet.as_ref().filter(|f| f.strategy() == Strategy::Sticky) {
            for n in f.nodes() {
                if let Ok(a) = n.parse::<SocketAddr>() {
                    let net = IpNet::from(a.ip().to_canonical());
                    if !trusted_proxies.contains(&net) {
                        trusted_proxies.push(net);
                    }
                }
            }
        }
        let mut b = crate::RateLimiter::builder()
            .client_ip(ClientIpConfig {
                trusted_proxies,
                header: match self.client_ip.header {
                    HeaderChoice::XForwardedFor => ForwardedHeader::XForwardedFor,
                    HeaderChoice::Forwarded => ForwardedHeader::Forwarded,
                },
                ipv4_prefix: self.client_ip.ipv4_prefix.unwrap_or(32),
                ipv6_prefix: self.client_ip.ipv6_prefix.unwrap_or(64),
            })
            .deny_status(self.deny.status.unwrap_or(StatusCode::TOO_MANY_REQUESTS))
            .retry_after_jitter(
                self.deny
                    .retry_after_jitter
                    .unwrap_or(Duration::from_secs(1)),
            )
            .missing_key(match self.deny.missing_key {
                MissingKeyChoice::Deny => MissingKey::Deny,
                MissingKeyChoice::Allow => MissingKey::Allow,
                MissingKeyChoice::Fallback => MissingKey::Fallback(
                    self.deny
                        .fallback_key
                        .clone()
                        .unwrap_or_default()
                        .into_bytes(),
                ),
            })
            .missing_key_status(
                self.deny
                    .missing_key_status
                    .unwrap_or(StatusCode::BAD_REQUEST),
            )
            .store_failure(match self.deny.store_error {
                StoreErrorChoice::Allow => StoreFailure::Allow,
                StoreErrorChoice::Deny => StoreFailure::Deny,
            })
            .headers(HeaderOptions {
                ratelimit: self.headers.ratelimit,
                legacy: match self.headers.legacy {
                    LegacyChoice::Off => None,
                    LegacyChoice::Delta => Some(ResetFormat::Delta),
                    LegacyChoice::Epoch => Some(ResetFormat::Epoch),
                },
                delay: self.headers.delay,
            })
            .max_waiting(self.delay.max_waiting.unwrap_or(10_000))
            .max_keys(self.max_keys.unwrap_or(1_000_000));
        for n in &self.allowlist.ips {
            b = b.allow_net(*n);
        }
        for k in &self.allowlist.keys {
            b = b.allow_key(k.as_bytes().to_vec());
        }
        for p in &self.policies {
            let p = p.get_ref();
            // validated in parse()
            let spec = p.spec().unwrap_or_else(|_| Spec::new(p.algorithm, p.rate));
            b = b.policy(
                Policy::new(p.name.clone(), spec)
                    .key(p.key.clone().map_or_else(KeySource::ip, |k| k.0))
                    .dry_run(p.dry_run),
            );
        }
        if let Some(f) = fleet {
            b = b.fleet(f);
        }
        for r in &self.routes {
            let mut route = Route::prefix(r.prefix.clone()).methods(r.methods.iter().cloned());
            for n in &r.policies {
                let cost = r
                    .costs
                    .iter()
                    .find(|(k, _)| k.get_ref() == n.get_ref())
                    .map(|(_, c)| *c)
                    .unwrap_or(r.cost.unwrap_or(1));
                route = route.policy(n.get_ref().clone(), cost);
            }
            b = b.route(route);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        Config::parse(src, Path::new("floodgate.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn full_example_parses_and_builds() {
        let src = include_str!("config.rs")
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").strip_prefix(' ').unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let cfg = Config::parse(&src, Path::new("x.toml")).unwrap();
        assert_eq!(cfg.policies.len(), 2);
        let l = cfg.limiter_builder().build().unwrap();
        assert_eq!(l.policies()[0].spec.capacity, Some(21));
    }

    #[test]
    fn redis_section_sets_the_store() {
        let cfg = Config::parse(
            "store = \"redis://127.0.0.1:6379/\"\n[redis]\nprefix = \"p:\"\ntimeout = \"20ms\"\n\
             connect_timeout = \"2s\"\nbreaker_open_for = \"0s\"\ndeny_cache_keys = 0\ntime = \"caller\"\n\
             [[policy]]\nname = \"a\"\nrate = \"1/s\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let rc = cfg.redis.store_config();
        assert_eq!(rc.prefix, "p:");
        assert_eq!(rc.timeout, Duration::from_millis(20));
        assert_eq!(rc.connect_timeout, Duration::from_secs(2));
        assert_eq!(rc.breaker_open_for, Duration::ZERO);
        assert_eq!(rc.deny_cache_keys, 0);
        assert_eq!(rc.time, floodgate_redis::TimeSource::Caller);
        // unset: the store's defaults
        let d = floodgate_redis::StoreConfig::default();
        let rc = RedisSection::default().store_config();
        assert_eq!(
            (rc.timeout, rc.breaker_open_for, rc.deny_cache_keys),
            (d.timeout, d.breaker_open_for, d.deny_cache_keys)
        );
        let e =
            err("[redis]\nconnect_timeout = \"0s\"\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
        assert!(
            e.starts_with("floodgate.toml:2:")
                && e.contains("redis.connect_timeout: a timeout of 0"),
            "{e}"
        );
        let e = err("[redis]\ndeny_cache_keys = -1\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
        assert!(e.starts_with("floodgate.toml:2:"), "{e}");
    }

    #[test]
    fn connection_caps_parse_and_zero_is_refused() {
        let policy = "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n";
        let cfg = Config::parse(
            &format!("max_connections = 10\nmax_connections_per_client = 2\nupstream_max_idle = 0\n{policy}"),
            Path::new("floodgate.toml"),
        )
        .unwrap();
        assert_eq!(
            (
                cfg.max_connections,
                cfg.max_connections_per_client,
                cfg.upstream_max_idle
            ),
            (Some(10), Some(2), Some(0))
        );
        for field in ["max_connections", "max_connections_per_client"] {
            let e = err(&format!("{field} = 0\n{policy}"));
            assert!(
                e.starts_with("floodgate.toml:1:") && e.contains(field) && e.contains("a cap of 0"),
                "{e}"
            );
        }
    }

    #[test]
    fn zero_timeouts_are_refused_with_the_field_and_line() {
        let policy = "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n";
        for (field, line) in [
            ("upstream_timeout", 1),
            ("connect_timeout", 1),
            ("head_timeout", 1),
            ("send_timeout", 1),
            ("body_timeout", 1),
        ] {
            let e = err(&format!("{field} = \"0s\"\n{policy}"));
            assert!(
                e.starts_with(&format!("floodgate.toml:{line}:"))
                    && e.contains(field)
                    && e.contains("a timeout of 0 would fail every request"),
                "{e}"
            );
        }
        let e = err(&format!("{policy}[redis]\ntimeout = \"0ms\"\n"));
        assert!(
            e.starts_with("floodgate.toml:5:") && e.contains("redis.timeout: a timeout of 0"),
            "{e}"
        );
        // above zero is fine, and a grace of 0 (do not wait) stays allowed
        let cfg = Config::parse(
            &format!("head_timeout = \"1ms\"\nshutdown_grace = \"0s\"\n{policy}"),
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(cfg.head_timeout, Some(Duration::from_millis(1)));
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = err("[[policy]]\nname = \"a\"\nrate = \"10/q\"\n");
        assert!(e.starts_with("floodgate.toml:3:8: "), "{e}");
        assert!(
            e.contains("unknown unit \"q\"") && e.contains("units: ns, us"),
            "{e}"
        );
        let e = err("[[policy]]\nname = \"a\"\nrate = \"10/s\"\nbrust = 3\n");
        assert!(
            e.starts_with("floodgate.toml:4:1: ") && e.contains("unknown field `brust`"),
            "{e}"
        );
        let e = err("listen = \"x\"\n");
        assert!(e.starts_with("floodgate.toml:1:10: "), "{e}");
        let e = err("[[policy]]\nname = \"a\"\nrate = \"10/s\"\nburst = 2\ndelay = 5\n");
        assert!(
            e.starts_with("floodgate.toml:1:1: ") && e.contains("delay=5 is above burst=2"),
            "{e}"
        );
        let e = err("[[policy]]\nname = \"a\"\nrate = \"0/s\"\n");
        assert!(
            e.contains("floodgate.toml:3:8") && e.contains("count must be at least 1"),
            "{e}"
        );
        let e =
            err("[[policy]]\nname = \"a\"\nrate = \"1/s\"\n[[route]]\npolicies = [\"a\", \"a\"]\n");
        assert!(
            e.starts_with("floodgate.toml:5:18: ") && e.contains("policy \"a\" is listed twice"),
            "{e}"
        );
        let e = err("[[policy]]\nname = \"a\"\nrate = \"1/s\"\n[[route]]\npolicies = [\"b\"]\n");
        assert!(
            e.starts_with("floodgate.toml:5:13: ") && e.contains("unknown policy \"b\""),
            "{e}"
        );
        let e = err("upstream = \"https://x:1\"\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
        assert!(e.contains("not supported"), "{e}");
        let e = err("[deny]\nstatus = 200\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
        assert!(e.contains("2:10") && e.contains("not a 4xx or 5xx"), "{e}");
        let e =
            err("[[policy]]\nname = \"a\"\nrate = \"1/s\"\nalgorithm = \"gcra\"\nnodelay = true\n");
        assert!(e.contains("only to algorithm = \"leaky-queue\""), "{e}");
        let e = err("[[policy]]\nname = \"a\\\"b\"\nrate = \"1/s\"\n");
        assert!(e.contains("printable ASCII"), "{e}");
        assert!(err("").contains("no [[policy]]"));
    }

    const POLICY: &str = "[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"10/s\"\n";

    fn fleet_err(store: &str, fleet: &str) -> String {
        err(&format!("{store}{POLICY}[fleet]\n{fleet}"))
    }

    #[test]
    fn fleet_errors_are_clear_and_located() {
        let nodes = "nodes = [\"127.0.0.1:8081\", \"127.0.0.1:8082\"]\n";
        let e = fleet_err(
            "",
            &format!("strategy = \"sticky\"\n{nodes}self = \"127.0.0.1:9999\"\n"),
        );
        assert!(
            e.starts_with("floodgate.toml:5:1: fleet: self \"127.0.0.1:9999\" is not in nodes [127.0.0.1:8081, 127.0.0.1:8082]"),
            "{e}"
        );
        let e = fleet_err("", "strategy = \"local\"\nnodes = []\nself = \"a:1\"\n");
        assert!(e.contains("fleet: nodes is empty"), "{e}");
        let e = fleet_err(
            "",
            &format!("strategy = \"round-robin\"\n{nodes}self = \"127.0.0.1:8081\"\n"),
        );
        assert!(
            e.starts_with("floodgate.toml:6:12: ")
                && e.contains("unknown strategy \"round-robin\""),
            "{e}"
        );
        for strategy in ["shared", "hybrid"] {
            let e = fleet_err(
                "",
                &format!("strategy = \"{strategy}\"\n{nodes}self = \"127.0.0.1:8081\"\n"),
            );
            assert!(
                e.contains(&format!(
                    "strategy \"{strategy}\" needs a shared store: set store = \"redis://"
                )),
                "{e}"
            );
        }
        let redis = "store = \"redis://127.0.0.1:6379/\"\n";
        for strategy in ["sticky", "local"] {
            let e = fleet_err(
                redis,
                &format!("strategy = \"{strategy}\"\n{nodes}self = \"127.0.0.1:8081\"\n"),
            );
            assert!(e.contains("counts in process on each node"), "{e}");
        }
        let e = fleet_err("", &format!("strategy = \"local\"\n{nodes}\n"));
        assert!(e.contains("missing field `self`"), "{e}");
        let e = fleet_err(
            "",
            "strategy = \"local\"\nnodes = [\"localhost\"]\nself = \"localhost\"\n",
        );
        assert!(e.contains("node \"localhost\" is not host:port"), "{e}");
        let e = fleet_err(
            redis,
            &format!("strategy = \"hybrid\"\n{nodes}self = \"127.0.0.1:8081\"\nlease = 0\n"),
        );
        assert!(e.contains("lease must be at least 1"), "{e}");
        let e = err(&format!(
            "{redis}[[policy]]\nname = \"q\"\nrate = \"10/s\"\n[fleet]\nstrategy = \"hybrid\"\n{nodes}self = \"127.0.0.1:8081\"\n"
        ));
        assert!(e.contains("a delaying leaky-queue cannot be leased"), "{e}");
    }

    #[test]
    fn fleet_local_enforces_the_share_and_sticky_names_owners() {
        let nodes = "nodes = [\"127.0.0.1:8081\", \"127.0.0.1:8082\", \"127.0.0.1:8083\"]\n";
        let src =
            format!("{POLICY}[fleet]\nstrategy = \"local\"\n{nodes}self = \"127.0.0.1:8082\"\n");
        let cfg = Config::parse(&src, Path::new("x.toml")).unwrap();
        let l = cfg.limiter_builder().build().unwrap();
        // 10/s with capacity 10 over 3 nodes: ceil(10/3) = 4 at once, 10/3 per second
        assert_eq!(l.policies()[0].spec.capacity, Some(4));
        assert_eq!(
            l.policies()[0].spec.rate.emission_interval_nanos(),
            300_000_000
        );
        assert!(l.owner_of(&http::Request::new(())).is_none(), "not sticky");

        let src = format!(
            "[[policy]]\nname = \"k\"\nalgorithm = \"gcra\"\nrate = \"10/s\"\nkey = \"header:x-api-key\"\n[fleet]\nstrategy = \"sticky\"\n{nodes}self = \"127.0.0.1:8082\"\n"
        );
        let cfg = Config::parse(&src, Path::new("x.toml")).unwrap();
        let l = cfg.limiter_builder().build().unwrap();
        assert_eq!(
            l.policies()[0].spec.capacity,
            None,
            "sticky keeps the full limit"
        );
        let fleet = cfg.fleet().unwrap();
        let mut owners = std::collections::BTreeMap::new();
        for i in 0..60 {
            let req = http::Request::builder()
                .header("x-api-key", format!("key-{i}"))
                .extension(crate::key::PeerAddr(([127, 0, 0, 1], 5000).into()))
                .body(())
                .unwrap();
            let owner = l.owner_of(&req).unwrap().to_string();
            let key = l.routing_key(&req).unwrap();
            assert_eq!(key, format!("k\x1fkey-{i}").into_bytes());
            assert_eq!(owner, fleet.owner(&key));
            *owners.entry(owner).or_insert(0) += 1;
        }
        assert_eq!(owners.len(), 3, "{owners:?}");
        // no key: decided where it arrives
        let req = http::Request::builder()
            .extension(crate::key::PeerAddr(([127, 0, 0, 1], 5000).into()))
            .body(())
            .unwrap();
        assert!(l.owner_of(&req).is_none());
    }
}
