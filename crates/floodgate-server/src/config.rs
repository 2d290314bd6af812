//! Loading and checking the config file: YAML (`.yaml`, `.yml`) or TOML (`.toml`), by
//! extension. Every error names the file and where in it the problem is.
//!
//! [`load`] returns a [`Config`]: [`Settings`] (read once at startup: listen addresses and
//! the store) and [`Rules`] (hot-reloadable: domains, policies, headers, caps).

use std::collections::{BTreeMap, HashSet};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use floodgate_core::rate::parse_duration;
use floodgate_core::ratelimit_fields::Advertised;
use floodgate_core::{Kind, Rate, Spec};
use floodgate_engine::StoreFailure;
use floodgate_engine::fleet::{DEFAULT_LEASE, DEFAULT_LEASE_TTL, Strategy};
use floodgate_redis::{FaultPolicy, StoreConfig};
use thiserror::Error;

use crate::file::{DescriptorFile, FileConfig, RateLimitFile};

/// A config file that cannot be used. The message names the file and the place in it.
#[derive(Debug, Error)]
pub enum ConfigFileError {
    /// The file cannot be read.
    #[error("{path}: cannot read the config file: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The extension says neither YAML nor TOML.
    #[error("{path}: unknown config format; the file name must end in .yaml, .yml or .toml")]
    Format {
        /// The file.
        path: PathBuf,
    },
    /// Not valid YAML/TOML, or a field of the wrong type or unknown name.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// Well-formed, but a value is wrong.
    #[error("{path}: {at}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where: e.g. `domain "edge" > remote_address > rate_limit`.
        at: String,
        /// What is wrong.
        message: String,
    },
}

/// Everything the file says.
#[derive(Debug, Clone)]
pub struct Config {
    /// Startup-only settings.
    pub settings: Settings,
    /// Hot-reloadable rules.
    pub rules: Rules,
}

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

/// What to answer for a domain that no rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownDomain {
    /// A clear error (gRPC `NOT_FOUND`, HTTP 404). The default.
    Error,
    /// Envoy ratelimit's behaviour: every descriptor OK, no limit applied.
    Allow,
}

/// Response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderSettings {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
    pub ratelimit: bool,
    /// Envoy ratelimit's `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    pub x_ratelimit: bool,
    /// Retry-After jitter span: `ceil(retry + uniform(0, jitter))` seconds.
    pub retry_after_jitter: Duration,
}

/// Caps on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Most descriptors per request.
    pub max_descriptors: usize,
    /// Most entries per descriptor.
    pub max_entries: usize,
    /// Longest key or value in bytes.
    pub max_value_bytes: usize,
    /// Largest gRPC message or HTTP body in bytes (read at startup).
    pub max_request_bytes: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            max_descriptors: 64,
            max_entries: 16,
            max_value_bytes: 1024,
            max_request_bytes: 1 << 20,
        }
    }
}

/// The hot-reloadable part of the config.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Domains by name.
    pub domains: BTreeMap<String, Vec<DescriptorDef>>,
    /// Named limits for the HTTP `{key, policy}` form.
    pub policies: BTreeMap<String, LimitDef>,
    /// Headers.
    pub headers: HeaderSettings,
    /// Caps.
    pub caps: Caps,
    /// Unknown domains.
    pub unknown_domain: UnknownDomain,
}

/// How a rule's value matches a request entry's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueMatch {
    /// No value in the rule: any value, each limited on its own.
    Any,
    /// Exactly this value.
    Exact(String),
    /// Values starting with this prefix (the rule's value ended in `*`), each on its own.
    Prefix(String),
}

/// One descriptor rule, checked.
#[derive(Debug, Clone)]
pub struct DescriptorDef {
    /// Entry key.
    pub key: String,
    /// Entry value match.
    pub value: ValueMatch,
    /// Limits applied when a request descriptor ends here (all-or-nothing).
    pub limits: Vec<LimitDef>,
    /// Never limited.
    pub unlimited: bool,
    /// Counted, never denies.
    pub shadow: bool,
    /// Metric label includes the request's values.
    pub detailed_metric: bool,
    /// Metric label includes this entry's value.
    pub value_to_metric: bool,
    /// Nested rules.
    pub children: Vec<DescriptorDef>,
}

/// Envoy's time units (`RateLimitResponse.RateLimit.Unit` numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Not expressible as one unit (e.g. `window: 30s`).
    Unknown = 0,
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3600 s.
    Hour = 3,
    /// 86 400 s.
    Day = 4,
    /// 30 days (Envoy ratelimit's divider).
    Month = 5,
    /// 365 days.
    Year = 6,
    /// 7 days.
    Week = 7,
}

impl Unit {
    const NAMED: [(Unit, &'static str, u64); 7] = [
        (Unit::Second, "second", 1),
        (Unit::Minute, "minute", 60),
        (Unit::Hour, "hour", 3600),
        (Unit::Day, "day", 86_400),
        (Unit::Week, "week", 7 * 86_400),
        (Unit::Month, "month", 30 * 86_400),
        (Unit::Year, "year", 365 * 86_400),
    ];

    /// Parse a unit name (any case).
    pub fn parse(s: &str) -> Option<Unit> {
        let l = s.trim().to_ascii_lowercase();
        Unit::NAMED.iter().find(|u| u.1 == l).map(|u| u.0)
    }

    /// The unit whose length is exactly `window`, or `Unknown`.
    pub fn of_window(window: Duration) -> Unit {
        Unit::NAMED
            .iter()
            .find(|u| Duration::from_secs(u.2) == window)
            .map_or(Unit::Unknown, |u| u.0)
    }

    /// Seconds in this unit (0 for `Unknown`).
    pub fn secs(self) -> u64 {
        Unit::NAMED.iter().find(|u| u.0 == self).map_or(0, |u| u.2)
    }

    /// The lowercase name (`unknown` for `Unknown`).
    pub fn name(self) -> &'static str {
        Unit::NAMED
            .iter()
            .find(|u| u.0 == self)
            .map_or("unknown", |u| u.1)
    }
}

/// One limit, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDef {
    /// Name shown in headers and statuses: the `name` given, else derived from the rule.
    pub name: String,
    /// The `name` given in the file (the one `replaces` refers to).
    pub explicit_name: Option<String>,
    /// Names of limits this one replaces.
    pub replaces: Vec<String>,
    /// The limiter spec; `None` blocks every request (`requests_per_unit: 0`).
    pub spec: Option<Spec>,
    /// Units per window, as configured.
    pub requests_per_unit: u64,
    /// The Envoy unit of the window (`Unknown` when the window is not one unit).
    pub unit: Unit,
    /// The window.
    pub window: Duration,
    /// What the RateLimit fields advertise for this limit (its sustained rate, and the
    /// capacity of a bucket algorithm), computed once from `spec`.
    pub fields: Advertised,
}

impl LimitDef {
    /// The algorithm's name (`block` for a zero limit).
    pub fn algorithm(&self) -> &'static str {
        self.spec.as_ref().map_or("block", |s| s.kind.name())
    }
}

/// Read and check `path`.
pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Check `text` as the content of `path` (the extension picks the format).
///
/// ```
/// use std::path::Path;
/// use floodgate_server::config::{parse, Unit};
/// let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 60}\n";
/// let c = parse(Path::new("limits.yaml"), yaml)?;
/// assert_eq!(c.rules.domains["edge"][0].limits[0].unit, Unit::Minute);
/// let e = parse(Path::new("limits.yaml"), "domain: edge\ndescriptors: [{key: user, rate_limit: {unit: minute}}]\n");
/// assert!(e.unwrap_err().to_string().contains("requests_per_unit is missing"));
/// # Ok::<(), floodgate_server::ConfigFileError>(())
/// ```
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigFileError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let perr = |message: String| ConfigFileError::Parse {
        path: path.to_path_buf(),
        message,
    };
    let file: FileConfig = match ext.as_deref() {
        Some("yaml" | "yml") => {
            if text.trim().is_empty() {
                FileConfig::default()
            } else {
                serde_norway::from_str(text).map_err(|e| perr(e.to_string()))?
            }
        }
        Some("toml") => toml::from_str(text).map_err(|e| perr(e.to_string()))?,
        _ => {
            return Err(ConfigFileError::Format {
                path: path.to_path_buf(),
            });
        }
    };
    compile(file).map_err(|(at, message)| ConfigFileError::Invalid {
        path: path.to_path_buf(),
        at,
        message,
    })
}

type Invalid = (String, String);

fn invalid(at: impl Into<String>, message: impl Into<String>) -> Invalid {
    (at.into(), message.into())
}

fn duration(
    at: &str,
    field: &str,
    s: &Option<String>,
    default: Duration,
) -> Result<Duration, Invalid> {
    match s {
        None => Ok(default),
        Some(s) => parse_duration(s).map_err(|e| invalid(at, format!("{field}: {e}"))),
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

fn positive(at: &str, field: &str, v: Option<u64>, default: u64) -> Result<usize, Invalid> {
    let v = v.unwrap_or(default);
    if v == 0 {
        return Err(invalid(at, format!("{field} must be at least 1, got 0")));
    }
    usize::try_from(v).map_err(|_| invalid(at, format!("{field} {v} is too large")))
}

/// Check a deserialized file.
pub fn compile(file: FileConfig) -> Result<Config, Invalid> {
    let settings = settings(&file)?;
    let rules = rules(file)?;
    Ok(Config { settings, rules })
}

fn settings(file: &FileConfig) -> Result<Settings, Invalid> {
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

fn rules(file: FileConfig) -> Result<Rules, Invalid> {
    let default_kind = match &file.defaults.algorithm {
        None => Kind::Gcra,
        Some(a) => a
            .parse::<Kind>()
            .map_err(|e| invalid("defaults.algorithm", e.to_string()))?,
    };
    let h = &file.headers;
    let headers = HeaderSettings {
        ratelimit: h.ratelimit.unwrap_or(true),
        x_ratelimit: h.x_ratelimit.unwrap_or(false),
        retry_after_jitter: duration(
            "headers",
            "retry_after_jitter",
            &h.retry_after_jitter,
            Duration::from_secs(1),
        )?,
    };
    let d = Caps::default();
    let l = &file.limits;
    let caps = Caps {
        max_descriptors: positive(
            "limits",
            "max_descriptors",
            l.max_descriptors,
            d.max_descriptors as u64,
        )?,
        max_entries: positive("limits", "max_entries", l.max_entries, d.max_entries as u64)?,
        max_value_bytes: positive(
            "limits",
            "max_value_bytes",
            l.max_value_bytes,
            d.max_value_bytes as u64,
        )?,
        max_request_bytes: positive(
            "limits",
            "max_request_bytes",
            l.max_request_bytes,
            d.max_request_bytes as u64,
        )?,
    };
    let unknown_domain = match file.unknown_domain.as_deref().map(str::to_ascii_lowercase) {
        None => UnknownDomain::Error,
        Some(s) if s == "error" => UnknownDomain::Error,
        Some(s) if s == "allow" => UnknownDomain::Allow,
        Some(s) => {
            return Err(invalid(
                "unknown_domain",
                format!("{s:?}: expected error or allow"),
            ));
        }
    };

    let mut domain_files = file.domains;
    if let Some(domain) = file.domain {
        domain_files.push(crate::file::DomainFile {
            domain,
            descriptors: file.descriptors,
        });
    } else if !file.descriptors.is_empty() {
        return Err(invalid(
            "descriptors",
            "top-level descriptors need a top-level `domain` (or put them under `domains:`)",
        ));
    }
    let mut domains = BTreeMap::new();
    for df in domain_files {
        let at = format!("domain {:?}", df.domain);
        if df.domain.trim().is_empty() {
            return Err(invalid("domains", "a domain name must not be empty"));
        }
        if domains.contains_key(&df.domain) {
            return Err(invalid(at, "this domain is defined twice"));
        }
        let descriptors = descriptor_list(&at, &df.descriptors, default_kind, &[])?;
        domains.insert(df.domain, descriptors);
    }

    let mut policies = BTreeMap::new();
    for (name, rl) in &file.policies {
        let at = format!("policies.{name}");
        if rl.unlimited {
            return Err(invalid(at, "a policy cannot be unlimited"));
        }
        let mut def = limit(&at, rl, default_kind, name.clone())?;
        def.name = rl.name.clone().unwrap_or_else(|| name.clone());
        policies.insert(name.clone(), def);
    }
    Ok(Rules {
        domains,
        policies,
        headers,
        caps,
        unknown_domain,
    })
}

fn descriptor_list(
    at: &str,
    files: &[DescriptorFile],
    default_kind: Kind,
    path: &[String],
) -> Result<Vec<DescriptorDef>, Invalid> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let value = match f.value.as_deref() {
            None => ValueMatch::Any,
            Some(v) => match v.strip_suffix('*') {
                Some(prefix) => ValueMatch::Prefix(prefix.to_string()),
                None => ValueMatch::Exact(v.to_string()),
            },
        };
        let step = match &f.value {
            None => f.key.clone(),
            Some(v) => format!("{}={}", f.key, v),
        };
        let here = format!("{at} > {step}");
        if f.key.is_empty() {
            return Err(invalid(here, "descriptor key must not be empty"));
        }
        if !seen.insert((f.key.clone(), value.clone())) {
            return Err(invalid(
                here,
                "duplicate descriptor (same key and value at the same level)",
            ));
        }
        let mut path = path.to_vec();
        path.push(step);
        let mut limits_files: Vec<&RateLimitFile> = f.rate_limit.iter().collect();
        if !f.rate_limits.is_empty() && f.rate_limit.is_some() {
            return Err(invalid(
                here,
                "use either rate_limit or rate_limits, not both",
            ));
        }
        limits_files.extend(&f.rate_limits);
        let unlimited = limits_files.iter().any(|l| l.unlimited);
        if unlimited && limits_files.len() > 1 {
            return Err(invalid(
                here,
                "an unlimited descriptor cannot carry other limits",
            ));
        }
        let mut limits = Vec::new();
        let mut names = HashSet::new();
        if !unlimited {
            let several = limits_files.len() > 1;
            for (i, rl) in limits_files.iter().enumerate() {
                let lat = if several {
                    format!("{here} > rate_limits[{i}]")
                } else {
                    format!("{here} > rate_limit")
                };
                let derived = if several {
                    format!("{}#{}", path.join("."), i + 1)
                } else {
                    path.join(".")
                };
                let def = limit(&lat, rl, default_kind, derived)?;
                if !names.insert(def.name.clone()) {
                    return Err(invalid(
                        lat,
                        format!("limit name {:?} is used twice on this descriptor", def.name),
                    ));
                }
                limits.push(def);
            }
        } else if let Some(rl) = limits_files.first()
            && (rl.requests_per_unit.is_some()
                || rl.unit.is_some()
                || rl.rate.is_some()
                || rl.window.is_some())
        {
            return Err(invalid(
                format!("{here} > rate_limit"),
                "unlimited: true takes no unit, requests_per_unit, window or rate",
            ));
        }
        let children = descriptor_list(&here, &f.descriptors, default_kind, &path)?;
        out.push(DescriptorDef {
            key: f.key.clone(),
            value,
            limits,
            unlimited,
            shadow: f.shadow_mode,
            detailed_metric: f.detailed_metric,
            value_to_metric: f.value_to_metric,
            children,
        });
    }
    Ok(out)
}

fn limit(
    at: &str,
    rl: &RateLimitFile,
    default_kind: Kind,
    derived: String,
) -> Result<LimitDef, Invalid> {
    let kind = match &rl.algorithm {
        None => default_kind,
        Some(a) => a.parse::<Kind>().map_err(|e| invalid(at, e.to_string()))?,
    };
    if rl.rate.is_some()
        && (rl.requests_per_unit.is_some() || rl.unit.is_some() || rl.window.is_some())
    {
        return Err(invalid(
            at,
            "rate replaces requests_per_unit with unit or window: give one form",
        ));
    }
    if rl.unit.is_some() && rl.window.is_some() {
        return Err(invalid(at, "give either unit or window, not both"));
    }
    let (count, window) = if let Some(r) = &rl.rate {
        let rate: Rate = r
            .parse()
            .map_err(|e: floodgate_core::ConfigError| invalid(at, e.to_string()))?;
        (rate.count(), rate.period())
    } else {
        let count = rl.requests_per_unit.ok_or_else(|| {
            invalid(
                at,
                "requests_per_unit is missing (or give rate: COUNT/PERIOD)",
            )
        })?;
        let window = match (&rl.unit, &rl.window) {
            (Some(u), None) => {
                let unit = Unit::parse(u).ok_or_else(|| {
                    invalid(
                        at,
                        format!(
                            "unit {u:?}: expected second, minute, hour, day, week, month or year"
                        ),
                    )
                })?;
                Duration::from_secs(unit.secs())
            }
            (None, Some(w)) => {
                parse_duration(w).map_err(|e| invalid(at, format!("window: {e}")))?
            }
            _ => {
                return Err(invalid(
                    at,
                    "unit (second, minute, ...) or window (e.g. 30s) is missing",
                ));
            }
        };
        (count, window)
    };
    if window.is_zero() {
        return Err(invalid(at, "the window must be longer than 0"));
    }
    let capacity = match (rl.burst, rl.capacity) {
        (Some(_), Some(_)) => return Err(invalid(at, "give either burst or capacity, not both")),
        (Some(b), None) => Some(
            b.checked_add(1)
                .ok_or_else(|| invalid(at, "burst is too large"))?,
        ),
        (None, Some(0)) => return Err(invalid(at, "capacity must be at least 1, got 0")),
        (None, c) => c,
    };
    let spec = if count == 0 {
        None
    } else {
        let rate = Rate::new(count, window).map_err(|e| invalid(at, e.to_string()))?;
        let spec = Spec {
            capacity,
            ..Spec::new(kind, rate)
        };
        spec.build().map_err(|e| invalid(at, e.to_string()))?;
        Some(spec)
    };
    Ok(LimitDef {
        name: rl.name.clone().unwrap_or(derived),
        explicit_name: rl.name.clone(),
        replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
        requests_per_unit: count,
        unit: Unit::of_window(window),
        window,
        fields: spec
            .as_ref()
            .map_or(Advertised::blocked(window), Advertised::of),
        spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<Config, ConfigFileError> {
        parse(Path::new("limits.yaml"), text)
    }

    fn err(text: &str) -> String {
        yaml(text).unwrap_err().to_string()
    }

    #[test]
    fn envoy_file_parses_as_is() {
        let c = yaml(
            "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n  - key: database\n    value: default\n    rate_limit:\n      unit: SECOND\n      requests_per_unit: 0\n    shadow_mode: true\n",
        )
        .unwrap();
        let d = &c.rules.domains["mongo_cps"];
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].value, ValueMatch::Exact("users".into()));
        let l = &d[0].limits[0];
        assert_eq!(
            (l.requests_per_unit, l.unit, l.name.as_str()),
            (500, Unit::Second, "database=users")
        );
        assert_eq!(l.spec.as_ref().unwrap().kind, Kind::Gcra);
        assert!(d[1].limits[0].spec.is_none(), "0 per unit blocks");
        assert!(d[1].shadow);
    }

    #[test]
    fn extensions_and_toml_give_the_same_rules() {
        let y = yaml(
            "domains:\n  - domain: edge\n    descriptors:\n      - key: user\n        rate_limits:\n          - {requests_per_unit: 100, window: 30s, algorithm: sliding-log, name: short}\n          - {rate: 1000/h, burst: 9}\n",
        )
        .unwrap();
        let t = parse(
            Path::new("limits.toml"),
            "[[domains]]\ndomain = \"edge\"\n[[domains.descriptors]]\nkey = \"user\"\nrate_limits = [\n  { requests_per_unit = 100, window = \"30s\", algorithm = \"sliding-log\", name = \"short\" },\n  { rate = \"1000/h\", burst = 9 },\n]\n",
        )
        .unwrap();
        let (a, b) = (
            &y.rules.domains["edge"][0].limits,
            &t.rules.domains["edge"][0].limits,
        );
        assert_eq!(a, b);
        assert_eq!(a[0].unit, Unit::Unknown);
        assert_eq!(a[0].window, Duration::from_secs(30));
        assert_eq!(a[1].name, "user#2");
        assert_eq!(a[1].unit, Unit::Hour);
        assert_eq!(a[1].spec.as_ref().unwrap().capacity, Some(10));
        // RateLimit-Policy: the sustained rate (and a bucket's capacity)
        let f = |l: &LimitDef| (l.fields.q, l.fields.w, l.fields.capacity);
        assert_eq!(f(&a[1]), (1000, 3600, Some(10)));
        assert_eq!(f(&a[0]), (100, 30, None));
    }

    #[test]
    fn errors_name_the_file_and_the_place() {
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
        );
        assert!(
            e.starts_with("limits.yaml: domain \"d\" > k > rate_limit: unit \"fortnight\""),
            "{e}"
        );
        let e = err("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n");
        assert!(e.contains("requests_per_unit is missing"), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n",
        );
        assert!(e.contains("unknown algorithm \"magic\""), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
        );
        assert!(
            e.starts_with("limits.yaml: ") && e.contains("unknown field `rate_limt`"),
            "{e}"
        );
        assert!(e.contains("line 4"), "{e}");
        let e = err("domain: d\ndescriptors:\n  - key: k\n  - key: k\n");
        assert!(e.contains("duplicate descriptor"), "{e}");
        let e = err("domains: [{domain: a}, {domain: a}]\n");
        assert!(e.contains("defined twice"), "{e}");
        let e = err("listen: {resp: 127.0.0.1:6379}\n");
        assert!(e.contains("6379 is Redis's own port"), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 0s, requests_per_unit: 3}\n",
        );
        assert!(e.contains("longer than 0"), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3, burst: 1, capacity: 2}\n",
        );
        assert!(e.contains("either burst or capacity"), "{e}");
        let e = err("store: {type: redis, redis: {fault_policy: maybe}}\n");
        assert!(e.contains("fail-open or fail-closed"), "{e}");
        let e = parse(Path::new("limits.json"), "{}")
            .unwrap_err()
            .to_string();
        assert!(e.contains(".yaml, .yml or .toml"), "{e}");
        let e = parse(Path::new("l.toml"), "domain = 3")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("l.toml: ") && e.contains("invalid type"),
            "{e}"
        );
        let e = load(Path::new("/nonexistent/limits.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/limits.yaml: cannot read"), "{e}");
    }

    #[test]
    fn fleet_strategies_are_checked_against_the_store() {
        let c = yaml("fleet: {strategy: local, nodes: 3}\n").unwrap();
        assert_eq!(
            (c.settings.fleet.strategy, c.settings.fleet.nodes),
            (Some(Strategy::Local), 3)
        );
        let c = yaml("store: {type: redis}\nfleet: {strategy: hybrid, nodes: 2, lease: 5, lease_ttl: 500ms}\n").unwrap();
        assert_eq!(
            c.settings.fleet,
            FleetSettings {
                strategy: Some(Strategy::Hybrid),
                nodes: 2,
                lease: 5,
                lease_ttl: Duration::from_millis(500)
            }
        );
        assert!(err("fleet: {strategy: shared}\n").contains("set store type redis"));
        assert!(
            err("store: {type: redis}\nfleet: {strategy: local, nodes: 2}\n")
                .contains("takes store type memory")
        );
        assert!(err("fleet: {strategy: local}\n").contains("needs nodes"));
        assert!(err("fleet: {strategy: local, nodes: 0}\n").contains("nodes must be at least 1"));
        assert!(err("fleet: {strategy: sticky, nodes: 2}\n").contains("floodgate proxy"));
        assert!(
            err("fleet: {strategy: gossip}\n").contains("expected single, local, shared or hybrid")
        );
    }

    #[test]
    fn wildcards_unlimited_and_defaults() {
        let c = yaml(
            "defaults: {algorithm: fixed-window}\nunknown_domain: allow\ndomain: d\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: vip\n    rate_limit: {unlimited: true}\n",
        )
        .unwrap();
        let d = &c.rules.domains["d"];
        assert_eq!(d[0].value, ValueMatch::Prefix("/api/".into()));
        assert_eq!(
            d[0].limits[0].spec.as_ref().unwrap().kind,
            Kind::FixedWindow
        );
        assert!(d[1].unlimited && d[1].limits.is_empty());
        assert_eq!(c.rules.unknown_domain, UnknownDomain::Allow);
        assert_eq!(c.settings.grpc, Some("127.0.0.1:8081".parse().unwrap()));
        assert_eq!(c.settings.resp, Some("127.0.0.1:16379".parse().unwrap()));
        let e = err(
            "domain: d\ndescriptors:\n  - key: vip\n    rate_limit: {unlimited: true, unit: second, requests_per_unit: 1}\n",
        );
        assert!(e.contains("unlimited: true takes no unit"), "{e}");
    }
}
