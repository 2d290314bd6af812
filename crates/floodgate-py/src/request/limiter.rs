//! `floodgate.RequestLimiter`: floodgate-http's `RateLimiter` built from `Policy` and
//! `Route` objects and the proxy's settings, deciding on requests given as method, path,
//! headers, client address and caller keys.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use floodgate_engine::fault::StoreFailure;
use floodgate_engine::headers::{HeaderOptions, ResetFormat};
use floodgate_http::key::{ClientIpConfig, ForwardedHeader, MissingKey};
use floodgate_http::policy::{Policy, Route};
use floodgate_http::{DecidedRequest, RateLimiter, RateLimiterBuilder};
use http::StatusCode;
use ipnet::IpNet;
use pyo3::prelude::*;

use super::build::request;
use super::fields::text_bytes;
use super::scope::{ScopeVerdict, scope_request};
use super::verdict::PyVerdict;
use super::{PyPolicy, PyRoute};
use crate::args::{ConfigError, config_duration, uint};
use crate::runtime;
use crate::store::PyRedisStore;

/// What the 400 to a request without a client address tells a Python caller to do (the
/// Rust advice names `floodgate_http::PeerAddr`).
const NO_PEER_HINT: &str = "the server gave no client address: pass client= to \
RequestLimiter.decide, key the policy by \"header:NAME\" or \"provided\", or set \
missing_key=\"allow\" or \"fallback\"";

/// Everything a limiter is built from (kept to build it again in a forked child, whose
/// Redis connection is its own).
#[derive(Clone)]
struct Settings {
    policies: Vec<Policy>,
    routes: Vec<Route>,
    client_ip: ClientIpConfig,
    store_failure: StoreFailure,
    deny_status: StatusCode,
    missing_key: MissingKey,
    missing_key_status: StatusCode,
    jitter: Duration,
    headers: HeaderOptions,
    max_keys: usize,
    allow_nets: Vec<IpNet>,
    allow_keys: Vec<Vec<u8>>,
}

impl Settings {
    fn builder(&self) -> RateLimiterBuilder {
        let mut b = RateLimiter::builder()
            .admin_keys("python", Default::default())
            .client_ip(self.client_ip.clone())
            .store_failure(self.store_failure)
            .deny_status(self.deny_status)
            .missing_key(self.missing_key.clone())
            .missing_key_status(self.missing_key_status)
            .retry_after_jitter(self.jitter)
            .headers(self.headers)
            .max_keys(self.max_keys)
            .record_decisions(true)
            .no_peer_hint(NO_PEER_HINT);
        for n in &self.allow_nets {
            b = b.allow_net(*n);
        }
        for k in &self.allow_keys {
            b = b.allow_key(k.clone());
        }
        for p in &self.policies {
            b = b.policy(p.clone());
        }
        for r in &self.routes {
            b = b.route(r.clone());
        }
        b
    }

    /// The limiter, on `store` when given (connected in this process).
    fn build(&self, py: Python<'_>, store: Option<&PyRedisStore>) -> PyResult<RateLimiter> {
        let b = self.builder();
        let cfg = |e: floodgate_http::BuildError| ConfigError::new_err(e.to_string());
        let Some(store) = store else {
            return b.build().map_err(cfg);
        };
        let infos = b.policy_infos().map_err(cfg)?;
        let shared = store.shared(py)?;
        let ds = shared
            .decision_store(&infos)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        b.store(ds, shared.name()).build().map_err(cfg)
    }
}

/// The decision procedure of `floodgate proxy` for requests a Python application serves
/// itself: `policies` (a list of `Policy`), `routes` (a list of `Route`; none: every
/// request is checked against every policy at cost 1), and the proxy's settings with
/// its defaults: `store` (`None`: in process; a `RedisStore`), `on_store_failure`
/// (`"allow"`, default, or `"deny"`: 503), `trusted_proxies` (CIDRs whose
/// `forwarded_header` is believed), `ipv4_prefix`/`ipv6_prefix` (32/64),
/// `deny_status` (429), `missing_key` (`"deny"` with `missing_key_status` 400,
/// `"allow"`, or `"fallback"` to `fallback_key`), `retry_after_jitter_s` (1.0),
/// `max_keys` (1 000 000 per policy, in process), `ratelimit_headers` (True),
/// `legacy_headers` (`None`, `"delta"` or `"epoch"`), `delay_header` (True),
/// `allowlist_ips`, `allowlist_keys`.
#[pyclass(name = "RequestLimiter", module = "floodgate", frozen)]
pub struct PyRequestLimiter {
    settings: Settings,
    store: Option<Py<PyRedisStore>>,
    /// The limiter and the process it was built in.
    limiter: Mutex<(u64, RateLimiter)>,
}

impl PyRequestLimiter {
    /// This process's limiter (a forked child builds its own on Redis: the parent's
    /// connection is not usable there; in process, the copied state is kept).
    fn limiter(&self, py: Python<'_>) -> PyResult<RateLimiter> {
        {
            let g = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
            // in process the copied state is kept
            if self.store.is_none() || g.0 == runtime::process() {
                return Ok(g.1.clone());
            }
        }
        let process = runtime::process();
        let store = self.store.as_ref().map(|s| s.get());
        let fresh = self.settings.build(py, store)?;
        let mut g = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
        let stale = std::mem::replace(&mut *g, (process, fresh.clone()));
        std::mem::forget(stale);
        Ok(fresh)
    }
}

fn choice<'a>(v: &'a str, field: &str, allowed: &[&str]) -> PyResult<&'a str> {
    if allowed.contains(&v) {
        Ok(v)
    } else {
        Err(ConfigError::new_err(format!(
            "{field} {v:?}: expected one of {}",
            allowed.join(", ")
        )))
    }
}

fn status(v: &Bound<'_, PyAny>, field: &str, client_only: bool) -> PyResult<StatusCode> {
    let n = uint(v, field, 400).map_err(|e| ConfigError::new_err(e.value(v.py()).to_string()))?;
    u16::try_from(n)
        .ok()
        .and_then(|n| StatusCode::from_u16(n).ok())
        .filter(|s| s.is_client_error() || (!client_only && s.is_server_error()))
        .ok_or_else(|| {
            let want = if client_only { "a 4xx" } else { "a 4xx or 5xx" };
            ConfigError::new_err(format!("{field} {n} is not {want} status"))
        })
}

fn net(s: &str, field: &str) -> PyResult<IpNet> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            ConfigError::new_err(format!(
                "{field}: {s:?} is not an IP address or CIDR (e.g. 10.0.0.0/8, 2001:db8::/32)"
            ))
        })
}

fn prefix_len(v: u8, max: u8, field: &str) -> PyResult<u8> {
    if v > max {
        return Err(ConfigError::new_err(format!(
            "{field} must be 0..={max}, got {v}"
        )));
    }
    Ok(v)
}

#[pymethods]
impl PyRequestLimiter {
    #[new]
    #[pyo3(signature = (policies, *, routes=None, store=None, on_store_failure="allow", trusted_proxies=Vec::new(), forwarded_header="x-forwarded-for", ipv4_prefix=32, ipv6_prefix=64, deny_status=None, missing_key="deny", fallback_key=None, missing_key_status=None, retry_after_jitter_s=1.0, max_keys=None, ratelimit_headers=true, legacy_headers=None, delay_header=true, allowlist_ips=Vec::new(), allowlist_keys=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        policies: Vec<PyRef<'_, PyPolicy>>,
        routes: Option<Vec<PyRef<'_, PyRoute>>>,
        store: Option<Py<PyRedisStore>>,
        on_store_failure: &str,
        trusted_proxies: Vec<String>,
        forwarded_header: &str,
        ipv4_prefix: u8,
        ipv6_prefix: u8,
        deny_status: Option<&Bound<'_, PyAny>>,
        missing_key: &str,
        fallback_key: Option<&Bound<'_, PyAny>>,
        missing_key_status: Option<&Bound<'_, PyAny>>,
        retry_after_jitter_s: f64,
        max_keys: Option<&Bound<'_, PyAny>>,
        ratelimit_headers: bool,
        legacy_headers: Option<&str>,
        delay_header: bool,
        allowlist_ips: Vec<String>,
        allowlist_keys: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        if policies.is_empty() {
            return Err(ConfigError::new_err(
                "policies is empty: at least one Policy is required",
            ));
        }
        let store_failure = match choice(
            on_store_failure,
            "on_store_failure",
            &["allow", "deny", "fail-open", "fail-closed"],
        )? {
            "allow" | "fail-open" => StoreFailure::Allow,
            _ => StoreFailure::Deny,
        };
        let header = match choice(
            forwarded_header,
            "forwarded_header",
            &["x-forwarded-for", "forwarded"],
        )? {
            "forwarded" => ForwardedHeader::Forwarded,
            _ => ForwardedHeader::XForwardedFor,
        };
        let missing_key = match choice(missing_key, "missing_key", &["deny", "allow", "fallback"])?
        {
            "deny" => MissingKey::Deny,
            "allow" => MissingKey::Allow,
            _ => MissingKey::Fallback(
                fallback_key
                    .map(|k| text_bytes(k, "fallback_key"))
                    .transpose()?
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| {
                        ConfigError::new_err("missing_key=\"fallback\" needs fallback_key")
                    })?,
            ),
        };
        let legacy = match legacy_headers {
            None | Some("off") => None,
            Some(v) => Some(
                match choice(v, "legacy_headers", &["off", "delta", "epoch"])? {
                    "delta" => ResetFormat::Delta,
                    _ => ResetFormat::Epoch,
                },
            ),
        };
        let max_keys = match max_keys {
            Some(m) => {
                let n = uint(m, "max_keys", 1)
                    .map_err(|e| ConfigError::new_err(e.value(m.py()).to_string()))?;
                if n == 0 {
                    return Err(ConfigError::new_err("max_keys must be at least 1"));
                }
                usize::try_from(n).unwrap_or(usize::MAX)
            }
            None => 1_000_000,
        };
        let settings = Settings {
            policies: policies.iter().map(|p| p.policy.clone()).collect(),
            routes: routes
                .unwrap_or_default()
                .iter()
                .map(|r| r.route.clone())
                .collect(),
            client_ip: ClientIpConfig {
                trusted_proxies: trusted_proxies
                    .iter()
                    .map(|s| net(s, "trusted_proxies"))
                    .collect::<PyResult<_>>()?,
                header,
                ipv4_prefix: prefix_len(ipv4_prefix, 32, "ipv4_prefix")?,
                ipv6_prefix: prefix_len(ipv6_prefix, 128, "ipv6_prefix")?,
            },
            store_failure,
            deny_status: match deny_status {
                Some(s) => status(s, "deny_status", false)?,
                None => StatusCode::TOO_MANY_REQUESTS,
            },
            missing_key,
            missing_key_status: match missing_key_status {
                Some(s) => status(s, "missing_key_status", true)?,
                None => StatusCode::BAD_REQUEST,
            },
            jitter: config_duration(retry_after_jitter_s, "retry_after_jitter_s", true)?,
            headers: HeaderOptions {
                ratelimit: ratelimit_headers,
                legacy,
                delay: delay_header,
            },
            max_keys,
            allow_nets: allowlist_ips
                .iter()
                .map(|s| net(s, "allowlist_ips"))
                .collect::<PyResult<_>>()?,
            allow_keys: allowlist_keys
                .iter()
                .map(|k| text_bytes(k, "allowlist_keys"))
                .collect::<PyResult<_>>()?,
        };
        let limiter = settings.build(py, store.as_ref().map(|s| s.get()))?;
        Ok(PyRequestLimiter {
            settings,
            store,
            limiter: Mutex::new((runtime::process(), limiter)),
        })
    }

    /// Decide on a request: `method` (`"GET"`), `path` (str or bytes, with or without the
    /// query), `headers` (a mapping or `(name, value)` pairs, str or bytes, as ASGI and
    /// WSGI give them), `client` (the connecting peer: an address, or ASGI's
    /// `(host, port)`), `keys` (for policies keyed `"provided"`: one key for all, or
    /// `{policy name: key}`). In process the decision runs with the GIL held (it never
    /// waits, and releasing the GIL would cost more than it); the GIL is released while
    /// a decision waits (a Redis round trip, an in-flight queue).
    #[pyo3(signature = (method, path, headers=None, client=None, keys=None))]
    fn decide(
        &self,
        py: Python<'_>,
        method: &str,
        path: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        client: Option<&Bound<'_, PyAny>>,
        keys: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyVerdict> {
        let req = request(method, path, headers, client, keys)?;
        let limiter = self.limiter(py)?;
        let decision = async move { PyVerdict::of(limiter.decide_request(&req).await).await };
        if self.store.is_none() {
            runtime::run_now(py, decision)
        } else {
            runtime::block_on(py, decision)
        }
    }

    /// As `decide`, awaitable: never blocks the event loop (a Redis round trip or an
    /// in-flight queue waits on the module's I/O threads).
    #[pyo3(signature = (method, path, headers=None, client=None, keys=None))]
    fn decide_async<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        path: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        client: Option<&Bound<'_, PyAny>>,
        keys: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = request(method, path, headers, client, keys)?;
        let limiter = self.limiter(py)?;
        runtime::awaitable(py, async move {
            Ok(PyVerdict::of(limiter.decide_request(&req).await).await)
        })
    }

    /// Decide on the request of an ASGI HTTP `scope` (its `method`, `raw_path` or
    /// `path`, `headers` and `client` host), as `decide` does with them, in one call:
    /// returns the header fields to add, `[(name, value), ...]` as bytes, when the
    /// request passes at once holding nothing to release (no lease, adaptive permit or
    /// reservation), else the `Verdict` (denied, delayed, or holding something: act on
    /// it and `finish()` it). `TypeError` for a scope of another shape, `ValueError` for
    /// content HTTP cannot carry (a client host that is not an IP address among them).
    #[pyo3(signature = (scope, keys=None))]
    fn decide_scope<'py>(
        &self,
        py: Python<'py>,
        scope: &Bound<'py, PyAny>,
        keys: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = scope_request(scope, keys)?;
        let decided = match ScopeVerdict::decide(self.limiter(py)?, req) {
            // passed at once holding nothing: the fields, with no runtime involved
            Ok(DecidedRequest::Plain { headers, .. }) => {
                return ScopeVerdict::Pass(headers).into_pyobject(py);
            }
            Ok(now) => runtime::run_now(py, ScopeVerdict::of(now))?,
            Err(pending) if self.store.is_none() => runtime::run_now(py, pending)?,
            Err(pending) => runtime::block_on(py, pending)?,
        };
        decided.into_pyobject(py)
    }

    /// As `decide_scope`, awaitable: never blocks the event loop. The scope is read
    /// before this returns (a `TypeError` or `ValueError` is raised here, not awaited).
    #[pyo3(signature = (scope, keys=None))]
    fn decide_scope_async<'py>(
        &self,
        py: Python<'py>,
        scope: &Bound<'py, PyAny>,
        keys: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = scope_request(scope, keys)?;
        match ScopeVerdict::decide(self.limiter(py)?, req) {
            Ok(now) => runtime::awaitable(py, async move { Ok(ScopeVerdict::of(now).await) }),
            Err(pending) => runtime::awaitable(py, async move { Ok(pending.await) }),
        }
    }

    /// Whether a decision may wait on I/O: `True` on a `RedisStore` (a round trip), where
    /// an `asyncio` caller awaits `decide_async`; `False` in process, where `decide`
    /// never waits and costs less than handing the call to the I/O threads.
    #[getter]
    fn waits(&self) -> bool {
        self.store.is_some()
    }

    /// The policy names, in order.
    #[getter]
    fn policies(&self) -> Vec<String> {
        self.settings
            .policies
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    /// Whether the decision store answers (always True in process).
    fn store_reachable(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.limiter(py)?.store_reachable())
    }

    /// The limiter's metrics in the Prometheus/OpenMetrics text format (the proxy's
    /// metric names).
    fn metrics(&self, py: Python<'_>) -> PyResult<String> {
        let limiter = self.limiter(py)?;
        Ok(py.detach(|| limiter.render_metrics()))
    }

    fn __repr__(&self) -> String {
        format!(
            "RequestLimiter(policies={:?}, routes={}, store={})",
            self.policies(),
            self.settings.routes.len(),
            if self.store.is_some() {
                "redis"
            } else {
                "memory"
            }
        )
    }
}
