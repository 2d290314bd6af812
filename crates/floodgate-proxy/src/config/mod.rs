//! The TOML configuration of `floodgate proxy` (the same file can build a layer with
//! [`Config::limiter_builder`]). [`Config`] is the file; the sections are in `sections`,
//! the string forms (rates, durations, keys, stores) in `de`.
//!
//! Every table rejects unknown fields, and every error names the file, the line and
//! column, and the field (`floodgate.toml:7:8: invalid rate "10/q": unknown unit "q"; ...`).
//!
//! Every field, with its default, is in the book's configuration reference
//! (`docs/proxy.md`, "Configuration"), which a test holds to these types: the reference
//! exists once.

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

mod de;
mod sections;
#[cfg(test)]
mod tests;

use de::*;
pub use de::{KeySpec, StoreSpec, parse_upstream};
pub use sections::*;

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
            if let Some(spec) = r.settle() {
                route = route.settle(spec);
            }
            b = b.route(route);
        }
        b
    }
}
