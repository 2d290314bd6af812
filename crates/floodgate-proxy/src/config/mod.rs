//! The TOML configuration of `floodgate proxy` (the same file can build a layer with
//! [`Config::limiter_builder`]). [`Config`] is the file; the sections are in `sections`,
//! the string forms (rates, durations, keys, stores) in `de`.
//!
//! Every table rejects unknown fields, and every error names the file, the line and
//! column, and the field (`floodgate.toml:7:8: policy[0].rate: invalid rate "10/q": unknown
//! unit "q"; ...`), in the form floodgate server's errors take too
//! ([`floodgate_engine::config::ConfigError`]). `[store]`, `[fleet]` and `[headers]` are the
//! sections both share (`floodgate_engine::config`); a key read in an old spelling is
//! listed in [`Config::renamed`] and logged when the file is loaded.
//!
//! Every field, with its default, is in the book's configuration reference
//! (`docs/proxy.md`, "Configuration"), which a test holds to these types: the reference
//! exists once.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use floodgate_core::{Kind, Rate, Spec};
use floodgate_engine::HybridLeases;
use floodgate_engine::config::fault_policy_legacy;
/// The sections shared with floodgate server.
pub use floodgate_engine::config::{
    FleetNodes, FleetSection, HeadersSection, OpenedStore, RedisSection, Renamed, StoreKind,
    StoreSection, StoreSettings,
};
use http::{HeaderName, Method, StatusCode, Uri};
use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use floodgate_engine::admin::AllowedHosts;
use floodgate_engine::fault::StoreFailure;
use floodgate_engine::fleet::{Fleet, Strategy};
use floodgate_engine::insight::KeyDisplay;
use floodgate_http::builder::{BuildError, RateLimiterBuilder};
use floodgate_http::key::MissingKey;
use floodgate_http::key::{ClientIpConfig, ForwardedHeader, KeyPart, KeySource};
use floodgate_http::policy::{Policy, Route};

/// A config error located in its file: `FILE:LINE:COLUMN: FIELD: MESSAGE`, as floodgate
/// server's.
pub use floodgate_engine::config::ConfigError as ConfigFileError;

mod adaptive;
mod de;
mod sections;
#[cfg(test)]
mod tests;
mod upstreams;

pub use adaptive::{ClassSection, MatchSection};
use de::*;
pub use de::{KeySpec, parse_admin, parse_upstream};
pub use sections::*;
pub use upstreams::{ProbeSection, ServerEntry, UpstreamSection};

/// Why `[tls]` and a sticky fleet do not go together.
pub const STICKY_TLS: &str = "fleet strategy \"sticky\" forwards requests to the owning node's listener in cleartext, which a TLS listener does not take; use strategy \"shared\" or \"hybrid\" with [tls]";

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Proxy listen address (default 127.0.0.1:8080).
    pub listen: Option<SocketAddr>,
    /// The backend, `http://host:port` or `https://host:port`.
    #[serde(default, deserialize_with = "de_opt_upstream")]
    pub upstream: Option<Uri>,
    /// TLS on the listener.
    pub tls: Option<TlsSection>,
    /// How an `https://` upstream is verified.
    pub upstream_tls: Option<UpstreamTlsSection>,
    /// `[tls]` loaded (certificates read and checked) by [`Config::parse`].
    #[serde(skip)]
    pub listener_tls: Option<crate::settings::ListenerTls>,
    /// Named groups of upstream servers, `[upstreams.NAME]`; a route sends to one with
    /// `upstream = "NAME"`.
    #[serde(default)]
    pub upstreams: std::collections::BTreeMap<String, Spanned<UpstreamSection>>,
    /// Admin listener (`/metrics`, `/healthz`, `/admin`): `ip:port`, or a port alone,
    /// which binds 127.0.0.1.
    #[serde(default, deserialize_with = "de_admin")]
    pub admin: Option<SocketAddr>,
    /// How the admin API and page show keys: `plain` (default), `truncated`, `hashed`.
    #[serde(default, deserialize_with = "de_key_display")]
    pub admin_keys: KeyDisplay,
    /// `Host` names the admin API and page answer besides loopback ones (`localhost`,
    /// `127.0.0.0/8`, `[::1]`), any port: host names or IP addresses, without a port.
    /// Any other `Host` gets 421 (a guard against DNS rebinding).
    #[serde(default, deserialize_with = "de_allowed_hosts")]
    pub admin_allowed_hosts: AllowedHosts,
    /// Where decisions are made (shared with floodgate server).
    #[serde(default)]
    pub store: StoreSection,
    /// Old spelling of `store.max_keys`.
    #[serde(default, deserialize_with = "de_opt_count")]
    pub max_keys: Option<usize>,
    /// Time allowed for the upstream's response head (default 30 s), else 504.
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub upstream_timeout: Option<Duration>,
    /// Time allowed to connect to the upstream (default 5 s), else 502.
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub connect_timeout: Option<Duration>,
    /// How long a client connection may wait for a request head with no request in
    /// flight (default 30 s), else it is closed.
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub head_timeout: Option<Duration>,
    /// How long a write to a client may make no progress (default 30 s), else the
    /// connection is closed.
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub send_timeout: Option<Duration>,
    /// How long a client's request body may stall (default 30 s), else 408.
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub body_timeout: Option<Duration>,
    /// Most client connections at once (default 16 384).
    #[serde(default, deserialize_with = "de_cap")]
    pub max_connections: Option<usize>,
    /// Most client connections at once from one address (default 1 024).
    #[serde(default, deserialize_with = "de_cap")]
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
    /// Response headers (shared with floodgate server).
    #[serde(default)]
    pub headers: HeadersSection,
    /// Leaky-queue holding.
    #[serde(default)]
    pub delay: DelaySection,
    /// Bypass lists.
    #[serde(default)]
    pub allowlist: AllowlistSection,
    /// Old spelling of `[store.redis]`.
    pub redis: Option<RedisSection>,
    /// A fleet of proxies sharing the limits (shared with floodgate server; the proxy
    /// knows its peers by address).
    #[serde(default)]
    pub fleet: FleetSection,
    /// The policies.
    #[serde(rename = "policy", default)]
    pub policies: Vec<Spanned<PolicySection>>,
    /// The routes.
    #[serde(rename = "route", default)]
    pub routes: Vec<RouteSection>,
    /// `[log]`: the rejection log.
    #[serde(default)]
    pub log: LogSection,
    /// Keys read in an old spelling (logged by [`Config::load`]).
    #[serde(skip)]
    pub renamed: Vec<Renamed>,
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
        s.admin_allowed_hosts = self.admin_allowed_hosts.clone();
        if let Some(t) = &self.listener_tls {
            s.tls = Some(t.clone());
        }
        if let Some(u) = &self.upstream_tls {
            s.upstream_tls = u.options();
        }
        s.access_log = self.log.access_log();
        s.upstream_groups = self.upstream_groups();
        s.route_upstreams = self.route_upstreams();
    }

    /// The upstream group each route names, in route order (`None`: the group `default`).
    pub fn route_upstreams(&self) -> Vec<Option<String>> {
        self.routes
            .iter()
            .map(|r| r.upstream.as_ref().map(|n| n.get_ref().clone()))
            .collect()
    }

    /// The upstream groups this file defines, as [`UpstreamSection::group`] reads them
    /// (the top-level `upstream` not among them).
    pub fn upstream_groups(&self) -> Vec<crate::upstreams::GroupSpec> {
        self.upstreams
            .iter()
            .map(|(name, g)| g.get_ref().group(name))
            .collect()
    }

    /// The names of the upstream groups this file defines: `default` first when the
    /// top-level `upstream` is set, then the `[upstreams.NAME]` tables.
    pub fn upstream_names(&self) -> Vec<&str> {
        let top = self
            .upstream
            .as_ref()
            .filter(|u| u.authority().is_some())
            .map(|_| crate::upstreams::DEFAULT_GROUP);
        top.into_iter()
            .chain(self.upstreams.keys().map(String::as_str))
            .collect()
    }

    /// Check that every route of this file (a reload's) names a group of `running` (the
    /// file the proxy started with: its groups are read at startup only); the error is
    /// placed at the route's `upstream`.
    pub fn check_route_upstreams(
        &self,
        running: &Config,
        path: &Path,
        src: &str,
    ) -> Result<(), ConfigFileError> {
        let known = running.upstream_names();
        for r in &self.routes {
            if let Some(n) = &r.upstream
                && !known.contains(&n.get_ref().as_str())
            {
                return Err(ConfigFileError::at(
                    path,
                    src,
                    n.span().start,
                    "",
                    format!(
                        "route {:?}: upstream {:?} is not one of the running proxy's ({}); upstream groups are read at startup only: restart to add one",
                        r.prefix,
                        n.get_ref(),
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Load `[tls]`'s certificates and check `[upstream_tls]`'s CA bundle; an error is
    /// placed at the field whose file fails.
    fn load_tls(&mut self, path: &Path, src: &str) -> Result<(), ConfigFileError> {
        use floodgate_net::tls::{CertStore, TlsError, pem};
        let at = |span: Range<usize>, field: &str, message: String| {
            ConfigFileError::at(path, src, span.start, field, message)
        };
        let file_error = |e: &TlsError| match e {
            TlsError::Read { field, .. } | TlsError::Pem { field, .. } => Some(*field),
            TlsError::Rustls(_) => None,
        };
        if let Some(u) = &self.upstream_tls
            && let Some(ca) = &u.ca_file
        {
            pem::root_store("ca_file", ca.get_ref())
                .map_err(|e| at(ca.span(), "upstream_tls", e.to_string()))?;
        }
        let Some(t) = &self.tls else { return Ok(()) };
        if self.fleet.strategy == Some(Strategy::Sticky) {
            return Err(ConfigFileError::in_section(path, src, "tls", STICKY_TLS));
        }
        let files = t
            .files()
            .map_err(|m| ConfigFileError::in_section(path, src, "tls", m))?;
        // each certificate alone first, so that an error points at its file
        for (f, [cert_span, key_span]) in &files {
            if let Err(e) = CertStore::load(vec![f.clone()]) {
                let span = match file_error(&e) {
                    Some("cert_file") => cert_span.clone(),
                    _ => key_span.clone(),
                };
                return Err(at(span, "tls", e.to_string()));
            }
        }
        let store = CertStore::load(files.into_iter().map(|(f, _)| f).collect())
            .map_err(|e| ConfigFileError::in_section(path, src, "tls", e.to_string()))?;
        let reload = t
            .reload_interval
            .unwrap_or(crate::settings::DEFAULT_TLS_RELOAD);
        let tls = crate::settings::ListenerTls::new(
            store,
            t.min_version.unwrap_or_default(),
            Some(reload).filter(|d| !d.is_zero()),
            t.handshake_timeout
                .unwrap_or(floodgate_net::tls::HANDSHAKE_TIMEOUT),
        )
        .map_err(|e| ConfigFileError::in_section(path, src, "tls", e.to_string()))?;
        self.listener_tls = Some(tls);
        Ok(())
    }

    /// An error at the first policy the fleet cannot run: with strategy `hybrid`, a
    /// delaying leaky-queue (leases admit at once).
    fn check_policies_fit_fleet(&self, path: &Path, src: &str) -> Result<(), ConfigFileError> {
        if self.fleet.strategy != Some(Strategy::Hybrid) {
            return Ok(());
        }
        let unleasable = self.policies.iter().enumerate().find(|(_, p)| {
            let p = p.get_ref();
            p.algorithm == Kind::LeakyQueue
                && !p.nodelay
                && p.max_in_flight.is_none()
                && p.adaptive.is_none()
        });
        match unleasable {
            None => Ok(()),
            Some((i, p)) => Err(ConfigFileError::at(
                path,
                src,
                p.span().start,
                "",
                format!(
                    "policy[{i}] {:?}: fleet strategy \"hybrid\" admits from leases at once; a delaying leaky-queue cannot be leased (set nodelay = true or algorithm = \"gcra\")",
                    p.get_ref().name
                ),
            )),
        }
    }

    /// Take the `[fleet]` of the running proxy (`running`, read at startup: the fleet
    /// is restart-only) in place of this file's, and check this file's policies
    /// against it (an error locates the first one it cannot run).
    pub fn keep_running_fleet(
        &mut self,
        running: &Config,
        path: &Path,
        src: &str,
    ) -> Result<(), ConfigFileError> {
        self.fleet.clone_from(&running.fleet);
        self.check_policies_fit_fleet(path, src)
    }

    /// Parse `src` (read from `path`, for messages).
    pub fn parse(src: &str, path: &Path) -> Result<Config, ConfigFileError> {
        let invalid = |span: Option<std::ops::Range<usize>>, message: String| {
            ConfigFileError::at(path, src, span.map_or(0, |s| s.start), "", message)
        };
        let in_section = |section: &str, message: String| {
            ConfigFileError::in_section(path, src, section, message)
        };
        let mut cfg: Config = floodgate_engine::config::from_toml(path, src)?;
        cfg.read_old_spellings()
            .map_err(|(s, m)| in_section(s, m))?;
        // checks that span several fields, located at their table
        let mut names: Vec<&str> = Vec::new();
        for (i, p) in cfg.policies.iter().enumerate() {
            let span = Some(p.span());
            let pol = p.get_ref();
            pol.policy()
                .map_err(|m| invalid(span.clone(), format!("policy[{i}] {:?}: {m}", pol.name)))?
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
            if let Some(m) = r.abort_options_error() {
                return Err(invalid(None, m));
            }
            if let Some(spec) = r.settle()
                && spec.cost_header.is_none()
                && spec.cost_trailer.is_none()
            {
                return Err(invalid(
                    None,
                    format!(
                        "route {:?}: estimate/estimate_header settle the cost after the response, which needs cost_header or cost_trailer to say where the actual cost is",
                        r.prefix
                    ),
                ));
            }
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
        upstreams::check(&cfg.upstreams, &cfg.routes, cfg.upstream.is_some(), invalid)?;
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
        if cfg.store.resp_max_keys.is_some() {
            return Err(in_section(
                "store",
                "resp_max_keys is floodgate server's (keys of CL.THROTTLE, its RESP door); floodgate proxy has none".into(),
            ));
        }
        if cfg.delay.max_waiting == Some(0) {
            return Err(invalid(None, "delay.max_waiting must be at least 1".into()));
        }
        if cfg.fleet.strategy.is_some() {
            cfg.fleet.fleet().map_err(|m| in_section("fleet", m))?;
            cfg.fleet
                .check_store(&cfg.store)
                .map_err(|e| in_section("fleet", e.to_string()))?;
            cfg.check_policies_fit_fleet(path, src)?;
        }
        // last: it reads the certificate files
        cfg.load_tls(path, src)?;
        Ok(cfg)
    }

    /// The file `src` as the admin API shows it: its tables as JSON, secrets redacted
    /// (`null` if it does not parse).
    pub fn shown(src: &str) -> serde_json::Value {
        floodgate_engine::config::shown(Path::new("floodgate.toml"), src)
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
        let src = std::fs::read_to_string(path).map_err(|e| ConfigFileError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let cfg = Config::parse(&src, path)?;
        floodgate_engine::config::warn_renamed(path, &cfg.renamed);
        Ok(cfg)
    }

    /// Move what old spellings say into the shared sections, noting each in `renamed`:
    /// `store = "redis://…"`, `max_keys`, `[redis]`, `deny.store_error` and
    /// `deny.retry_after_jitter`. An error names the section and says what to write.
    fn read_old_spellings(&mut self) -> Result<(), (&'static str, String)> {
        let shorthand = !self.store.renamed.is_empty();
        let mut renamed = std::mem::take(&mut self.store.renamed);
        renamed.append(&mut self.headers.renamed);
        if let Some(mut r) = self.redis.take() {
            if self.store.redis.is_some() && !shorthand {
                return Err((
                    "redis",
                    "set [store.redis] or its old spelling [redis], not both".into(),
                ));
            }
            if r.url == RedisSection::default().url
                && let Some(s) = &self.store.redis
            {
                r.url = s.url.clone();
            }
            self.store.redis = Some(r);
            renamed.push(Renamed::new("[redis]", "[store.redis]"));
        }
        if let Some(n) = self.max_keys.take() {
            if self.store.max_keys.is_some() {
                return Err((
                    "max_keys",
                    "set store.max_keys or its old spelling max_keys, not both".into(),
                ));
            }
            self.store.max_keys = Some(n);
            renamed.push(Renamed::new("max_keys", "store.max_keys"));
        }
        if let Some(f) = self.deny.store_error.take() {
            let mut r = self.store.redis();
            if r.fault_policy != StoreFailure::Allow && r.fault_policy != f {
                return Err((
                    "deny",
                    "set store.redis.fault_policy or its old spelling deny.store_error, not both"
                        .into(),
                ));
            }
            r.fault_policy = f;
            self.store.redis = Some(r);
            let (old, new) = match f {
                StoreFailure::Allow => ("allow", "fail-open"),
                StoreFailure::Deny => ("deny", "fail-closed"),
            };
            renamed.push(Renamed::new(
                format!("deny.store_error = \"{old}\""),
                format!("store.redis.fault_policy = \"{new}\""),
            ));
        }
        if let Some(j) = self.deny.retry_after_jitter.take() {
            if self.headers.retry_after_jitter.is_some() {
                return Err(("deny", "set headers.retry_after_jitter or its old spelling deny.retry_after_jitter, not both".into()));
            }
            self.headers.retry_after_jitter = Some(j);
            renamed.push(Renamed::new(
                "deny.retry_after_jitter",
                "headers.retry_after_jitter",
            ));
        }
        self.renamed = renamed;
        Ok(())
    }

    /// The `[fleet]`, validated (`None` without one).
    pub fn fleet(&self) -> Option<Fleet> {
        // validated in parse()
        self.fleet.fleet().ok().flatten()
    }

    /// Build the limiter with its store, opened as floodgate server opens its own
    /// ([`Config::open_store`]): in-process, or on Redis through
    /// [`floodgate_engine::SharedStore`] (with the `hybrid` fleet strategy, a
    /// [`floodgate_engine::HybridStore`] on it). A Redis that does not answer yet is not
    /// an error: the limiter starts, decides under the fault policy and connects in the
    /// background ([`floodgate_http::RateLimiter::store_reachable`] says when it has).
    pub async fn build(&self) -> Result<floodgate_http::RateLimiter, BuildConfigError> {
        let store = self.open_store().await?;
        self.build_on(&store, None)
    }

    /// Open the store `[store]` and `[fleet]` describe ([`StoreSettings::open`], as
    /// floodgate server opens its own): nothing in process; on Redis, a connection (with
    /// the `hybrid` strategy's leases), kept for every limiter built on it. `Err`: a URL
    /// or setting that cannot work, naming the URL without its password.
    pub async fn open_store(&self) -> Result<OpenedStore, BuildConfigError> {
        let settings = self.store.settings();
        // the cap on leases is the store's (`store.max_keys`), set by `open`
        let hybrid = self
            .fleet()
            .as_ref()
            .and_then(|f| HybridLeases::of(f, settings.max_keys()));
        settings
            .open(hybrid, "proxy")
            .await
            .map_err(|e| BuildConfigError::Store {
                url: redact(&self.store.redis().url),
                message: e.to_string(),
            })
    }

    /// Build the limiter on `store` (opened at startup: a reload keeps the store, its key
    /// cap and its fault policy, which are read at startup only), replacing `prev` when
    /// given (a reload: [`floodgate_http::RateLimiterBuilder::succeed`] keeps its metrics,
    /// insight and the in-process state of unchanged policies).
    pub fn build_on(
        &self,
        store: &OpenedStore,
        prev: Option<&floodgate_http::RateLimiter>,
    ) -> Result<floodgate_http::RateLimiter, BuildConfigError> {
        let mut builder = self
            .limiter_builder()
            .store_failure(store.fault_policy().failure);
        if let Some(n) = store.max_keys() {
            builder = builder.max_keys(n);
        }
        if let Some(p) = prev {
            builder = builder.succeed(p);
        }
        let OpenedStore::Shared { store: shared, .. } = store else {
            return Ok(builder.build()?);
        };
        let infos = builder.policy_infos()?;
        let decisions = shared
            .decision_store(&infos)
            .map_err(|e| BuildConfigError::Store {
                url: redact(&self.store.redis().url),
                message: e.kind.to_string(),
            })?;
        let builder = builder.store(decisions, shared.name());
        let builder = match self.fleet() {
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
        let mut b = floodgate_http::RateLimiter::builder()
            .admin_keys("proxy", self.admin_keys)
            .client_ip(ClientIpConfig {
                trusted_proxies,
                header: self.client_ip.header,
                ipv4_prefix: self.client_ip.ipv4_prefix.unwrap_or(32),
                ipv6_prefix: self.client_ip.ipv6_prefix.unwrap_or(64),
            })
            .deny_status(self.deny.status.unwrap_or(StatusCode::TOO_MANY_REQUESTS))
            .retry_after_jitter(self.headers.retry_after_jitter())
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
            .store_failure(self.store.settings().store_failure())
            .headers(self.headers.options())
            .max_waiting(self.delay.max_waiting.unwrap_or(10_000))
            .max_keys(self.store.max_keys())
            .rejection_log(self.log.rejection_log())
            .record_decisions(self.log.access_log.is_some());
        for n in &self.allowlist.ips {
            b = b.allow_net(*n);
        }
        for k in &self.allowlist.keys {
            b = b.allow_key(k.as_bytes().to_vec());
        }
        for p in &self.policies {
            let p = p.get_ref();
            // validated in parse(); were it not, a route naming it fails to build
            let Ok(policy) = p.policy() else {
                continue;
            };
            b = b.policy(
                policy
                    .key(p.key.clone().map_or_else(
                        || {
                            if p.adaptive.is_some() {
                                KeySource::global()
                            } else {
                                KeySource::ip()
                            }
                        },
                        |k| k.0,
                    ))
                    .dry_run(p.dry_run)
                    .advertise(p.advertise),
            );
        }
        if let Some(f) = fleet {
            b = b.fleet(f);
        }
        if let Some(q) = &self.fleet.quota {
            b = b.quota(q.clone());
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
            if let Some(spec) = r.settle() {
                route = route.settle(spec);
            }
            b = b.route(route);
        }
        b
    }
}
