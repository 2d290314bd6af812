//! `floodgate.RequestLimiter`: the decision procedure `floodgate proxy` runs for a
//! request (floodgate-http's `RateLimiter`: routes, policies, keys with the client IP
//! behind trusted proxies, allowlists, the store and its fault policy, the RateLimit
//! headers, the denial with its jittered `Retry-After`, dry runs, costs settled after
//! the response), for a Python application that serves the request itself. `Policy`
//! and `Route` take the fields of the proxy's `[[policy]]` and `[[route]]` tables, with
//! the same meaning and defaults.

mod adaptive;
mod build;
mod fields;
mod limiter;
mod scope;
mod verdict;

use std::time::Duration;

use floodgate_core::{Kind, Rate};
use floodgate_http::adaptive::{AdaptiveFields, AdaptivePolicy};
use floodgate_http::key::{KeyPart, KeySource};
use floodgate_http::policy::{InFlightSpec, Policy, Route};
use floodgate_http::settle::SettleSpec;
use floodgate_http::shape::{RateShape, rate_spec};
use http::{HeaderName, Method};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::args::{ConfigError, config_seconds, uint};

pub use limiter::PyRequestLimiter;
pub use verdict::PyVerdict;

/// The lease TTL of a `max_in_flight` policy without `lease_ttl_s` (the proxy's).
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// One named limit, as the proxy's `[[policy]]` table: `rate` (`"10/s"`, `"100/min"`,
/// `"5000/h"`), `algorithm` (default `"leaky-queue"`, as nginx and the proxy), `burst`
/// (nginx's: capacity - 1) or `capacity` (default 1), `nodelay`/`delay` (leaky queue),
/// `key`: `"ip"` (default), `"global"`, `"route"`, `"header:NAME"`, `"provided"` (the key
/// the caller passes to `decide(keys=...)`) or a list of these (joined). `dry_run`
/// decides and reports without enforcing; `advertise` shows a dry run in the headers.
/// `max_in_flight=N` (instead of a rate) admits at most N requests of one key at once,
/// each holding a lease until `Verdict.finish()` (or `lease_ttl_s`, default 30).
/// `adaptive="gradient2"` (or `"vegas"`, `"aimd"`; instead of a rate) is one concurrency
/// limit for every request it applies to (key `"global"` unless `key` says otherwise)
/// that follows the latency from `decide` to `Verdict.finish()`, between `min_limit`
/// (default 1) and `max_limit` (default 200) from `initial_limit` (default 20), with
/// `queue` requests waiting up to `queue_timeout_s` (default 0: none wait; 1 s with a
/// queue), `drop_on` (`["5xx", "timeout"]`, the default) and `classes`, a list of
/// `{"name": str, "share": float, "match": {"header", "value", "method", "route",
/// "key"}}` (the proxy's `[[policy.class]]`, highest priority first). A refused
/// request gets the proxy's 503 with `Retry-After`.
#[pyclass(name = "Policy", module = "floodgate", frozen)]
pub struct PyPolicy {
    pub(crate) policy: Policy,
    repr: String,
}

#[pymethods]
impl PyPolicy {
    #[new]
    #[pyo3(signature = (name, rate=None, *, algorithm="leaky-queue", burst=None, capacity=None, key=None, dry_run=false, advertise=false, nodelay=false, delay=None, max_in_flight=None, lease_ttl_s=None, adaptive=None, min_limit=None, max_limit=None, initial_limit=None, queue=None, queue_timeout_s=None, drop_on=None, classes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        rate: Option<&str>,
        algorithm: &str,
        burst: Option<&Bound<'_, PyAny>>,
        capacity: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        dry_run: bool,
        advertise: bool,
        nodelay: bool,
        delay: Option<&Bound<'_, PyAny>>,
        max_in_flight: Option<&Bound<'_, PyAny>>,
        lease_ttl_s: Option<f64>,
        adaptive: Option<&str>,
        min_limit: Option<&Bound<'_, PyAny>>,
        max_limit: Option<&Bound<'_, PyAny>>,
        initial_limit: Option<&Bound<'_, PyAny>>,
        queue: Option<&Bound<'_, PyAny>>,
        queue_timeout_s: Option<f64>,
        drop_on: Option<Vec<String>>,
        classes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let err =
            |field: &str, m: String| ConfigError::new_err(format!("policy {name:?}: {field}: {m}"));
        let count = |v: Option<&Bound<'_, PyAny>>, field: &str| -> PyResult<Option<u64>> {
            v.map(|v| {
                uint(v, field, 0).map_err(|e| {
                    ConfigError::new_err(format!("policy {name:?}: {}", e.value(v.py())))
                })
            })
            .transpose()
        };
        if advertise && !dry_run {
            return Err(err(
                "advertise",
                "applies to a dry_run policy (an enforced policy is always advertised)".into(),
            ));
        }
        let (burst, capacity, delay) = (
            count(burst, "burst")?,
            count(capacity, "capacity")?,
            count(delay, "delay")?,
        );
        let limits = (
            count(min_limit, "min_limit")?,
            count(max_limit, "max_limit")?,
            count(initial_limit, "initial_limit")?,
            count(queue, "queue")?,
        );
        let adaptive_given = limits != (None, None, None, None)
            || queue_timeout_s.is_some()
            || drop_on.is_some()
            || classes.is_some();
        let max_in_flight = count(max_in_flight, "max_in_flight")?;
        let policy = if let Some(word) = adaptive {
            if rate.is_some()
                || burst.is_some()
                || capacity.is_some()
                || nodelay
                || delay.is_some()
                || max_in_flight.is_some()
                || lease_ttl_s.is_some()
            {
                return Err(err("adaptive", "limits requests at once by latency: remove rate, burst, capacity, nodelay, delay, max_in_flight and lease_ttl_s (a rate or max_in_flight goes in a policy of its own, listed on the same route)".into()));
            }
            let size = |v: Option<u64>| v.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
            let queue_timeout = queue_timeout_s
                .map(|s| crate::args::config_duration(s, "queue_timeout_s", true))
                .transpose()?;
            let spec = AdaptiveFields {
                algorithm: word,
                min_limit: size(limits.0),
                max_limit: size(limits.1),
                initial_limit: size(limits.2),
                latency: None,
                drop_on: drop_on.as_deref(),
                queue: size(limits.3),
                queue_timeout,
            }
            .spec()
            .map_err(|m| ConfigError::new_err(format!("policy {name:?}: {m}")))?;
            let mut adaptive = AdaptivePolicy::new(spec);
            if let Some(c) = classes {
                let (specs, matches) = adaptive::class_list(c)
                    .map_err(|m| ConfigError::new_err(format!("policy {name:?}: classes: {m}")))?;
                adaptive.spec = adaptive
                    .spec
                    .with_classes(specs)
                    .map_err(|e| ConfigError::new_err(format!("policy {name:?}: classes: {e}")))?;
                adaptive.matches = matches;
            }
            Policy::adaptive(name, adaptive)
        } else if adaptive_given {
            return Err(err("adaptive", "min_limit, max_limit, initial_limit, queue, queue_timeout_s, drop_on and classes apply only with adaptive=\"gradient2\" (or \"vegas\", \"aimd\")".into()));
        } else {
            match max_in_flight {
                Some(n) => {
                    if rate.is_some()
                        || burst.is_some()
                        || capacity.is_some()
                        || nodelay
                        || delay.is_some()
                    {
                        return Err(err("max_in_flight", "limits requests at once, not a rate: remove rate, burst, capacity, nodelay and delay (a rate goes in a policy of its own, listed on the same route)".into()));
                    }
                    let ttl = match lease_ttl_s {
                        Some(s) => config_seconds(s, "lease_ttl_s")?,
                        None => DEFAULT_LEASE_TTL,
                    };
                    let spec = InFlightSpec::new(n, ttl)
                        .map_err(|e| err("max_in_flight", e.to_string()))?;
                    Policy::max_in_flight(name, spec)
                }
                None => {
                    if lease_ttl_s.is_some() {
                        return Err(err("lease_ttl_s", "applies only with max_in_flight".into()));
                    }
                    let rate = rate.ok_or_else(|| {
                        err(
                            "rate",
                            "is required (COUNT/PERIOD such as \"10/s\"), or max_in_flight".into(),
                        )
                    })?;
                    let rate: Rate = rate
                        .parse()
                        .map_err(|e: floodgate_core::ConfigError| err("rate", e.to_string()))?;
                    let kind: Kind =
                        algorithm
                            .parse()
                            .map_err(|e: floodgate_core::ConfigError| {
                                err("algorithm", e.to_string())
                            })?;
                    let shape = RateShape {
                        burst,
                        capacity,
                        nodelay,
                        delay,
                    };
                    let spec = rate_spec(kind, rate, shape)
                        .map_err(|m| ConfigError::new_err(format!("policy {name:?}: {m}")))?;
                    Policy::new(name, spec)
                }
            }
        };
        let key = match key {
            None if adaptive.is_some() => KeySource::global(),
            None => KeySource::ip(),
            Some(k) => key_source(k, name)?,
        };
        let policy = policy.key(key).dry_run(dry_run).advertise(advertise);
        policy
            .validate()
            .map_err(|e| ConfigError::new_err(format!("policy {name:?}: {e}")))?;
        let repr = format!("Policy({name:?}, key={:?})", policy.key);
        Ok(PyPolicy { policy, repr })
    }

    /// The policy's name (as in `RateLimit-Policy`, and in Redis keys).
    #[getter]
    fn name(&self) -> &str {
        &self.policy.name
    }

    fn __repr__(&self) -> String {
        self.repr.clone()
    }
}

/// A policy's `key=`: one part or a list of parts.
fn key_source(k: &Bound<'_, PyAny>, policy: &str) -> PyResult<KeySource> {
    let part = |p: &Bound<'_, PyAny>| -> PyResult<KeyPart> {
        let s = p.cast::<PyString>().map_err(|_| {
            ConfigError::new_err(format!("policy {policy:?}: key: each part must be a str"))
        })?;
        match s.to_str()? {
            "provided" => Ok(KeyPart::provided(policy)),
            s => KeyPart::parse(s)
                .map_err(|m| ConfigError::new_err(format!("policy {policy:?}: {m}, or provided"))),
        }
    };
    if k.is_instance_of::<PyString>() {
        return Ok(KeySource(vec![part(k)?]));
    }
    let parts: Vec<KeyPart> = if let Ok(l) = k.cast::<PyList>() {
        l.iter().map(|p| part(&p)).collect::<PyResult<_>>()?
    } else if let Ok(t) = k.cast::<PyTuple>() {
        t.iter().map(|p| part(&p)).collect::<PyResult<_>>()?
    } else {
        return Err(ConfigError::new_err(format!(
            "policy {policy:?}: key must be a str or a list of str"
        )));
    };
    if parts.is_empty() {
        return Err(ConfigError::new_err(format!(
            "policy {policy:?}: key list is empty"
        )));
    }
    Ok(KeySource(parts))
}

/// Requests a set of policies applies to, as the proxy's `[[route]]` table: every path
/// starting with `prefix` (default `"/"`; the route with the longest matching prefix
/// wins, the first listed among equal ones, as in the proxy), `methods` (default any; GET covers
/// HEAD), `policies`: `{"name": cost, ...}` or a list of names each at `cost` (default
/// 1). `estimate` (or `estimate_header`, a request header carrying it) admits at an
/// estimate and settles the actual cost after the response (`Verdict.settle`);
/// `cost_header` names the response header carrying it (for a middleware to read);
/// `abort_cost` is charged when the actual cost never comes (default: the estimate).
#[pyclass(name = "Route", module = "floodgate", frozen)]
pub struct PyRoute {
    pub(crate) route: Route,
}

#[pymethods]
impl PyRoute {
    #[new]
    #[pyo3(signature = (prefix="/", *, policies, methods=None, cost=None, estimate=None, estimate_header=None, cost_header=None, abort_cost=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        prefix: &str,
        policies: &Bound<'_, PyAny>,
        methods: Option<Vec<String>>,
        cost: Option<&Bound<'_, PyAny>>,
        estimate: Option<&Bound<'_, PyAny>>,
        estimate_header: Option<&str>,
        cost_header: Option<&str>,
        abort_cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let err = |m: String| ConfigError::new_err(format!("route {prefix:?}: {m}"));
        let count = |v: Option<&Bound<'_, PyAny>>, field: &str| -> PyResult<Option<u64>> {
            v.map(|v| uint(v, field, 0).map_err(|e| err(e.value(v.py()).to_string())))
                .transpose()
        };
        if !prefix.starts_with('/') {
            return Err(err("prefix must start with /".into()));
        }
        let mut route = Route::prefix(prefix);
        if let Some(ms) = methods {
            let mut parsed = Vec::with_capacity(ms.len());
            for m in ms {
                parsed.push(
                    Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                        .map_err(|_| err(format!("methods: invalid HTTP method {m:?}")))?,
                );
            }
            route = route.methods(parsed);
        }
        let default_cost = count(cost, "cost")?.unwrap_or(1);
        if let Ok(d) = policies.cast::<PyDict>() {
            if cost.is_some() {
                return Err(err(
                    "cost applies to a list of policies; a dict gives each its cost".into(),
                ));
            }
            for (k, v) in d.iter() {
                let name: String = k
                    .extract()
                    .map_err(|_| err("policies: names must be str".into()))?;
                let c = uint(&v, "cost", 0)
                    .map_err(|e| err(format!("policies[{name:?}]: {}", e.value(v.py()))))?;
                route = route.policy(name, c);
            }
        } else if let Ok(names) = policies.extract::<Vec<String>>() {
            if policies.is_instance_of::<PyString>() {
                return Err(err(
                    "policies must be a list of names or a dict of name: cost, not a str".into(),
                ));
            }
            for n in names {
                route = route.policy(n, default_cost);
            }
        } else {
            return Err(err(
                "policies must be a list of names or a dict of name: cost".into(),
            ));
        }
        if route.policies.is_empty() {
            return Err(err("policies is empty: name at least one".into()));
        }
        for (i, (n, _)) in route.policies.iter().enumerate() {
            if route.policies[..i].iter().any(|(m, _)| m == n) {
                return Err(err(format!("policy {n:?} is listed twice")));
            }
        }
        let header = |h: Option<&str>, field: &str| -> PyResult<Option<HeaderName>> {
            h.map(|h| {
                HeaderName::from_bytes(h.trim().as_bytes())
                    .map_err(|_| err(format!("{field}: {h:?} is not a valid header name")))
            })
            .transpose()
        };
        let estimate = count(estimate, "estimate")?;
        let estimate_header = header(estimate_header, "estimate_header")?;
        let cost_header = header(cost_header, "cost_header")?;
        let abort_cost = count(abort_cost, "abort_cost")?;
        let settles = estimate.is_some() || estimate_header.is_some() || cost_header.is_some();
        if abort_cost.is_some() && !settles {
            return Err(err("abort_cost applies to a route that settles its cost (estimate, estimate_header or cost_header)".into()));
        }
        if settles {
            route = route.settle(SettleSpec {
                estimate: estimate.unwrap_or(1),
                estimate_header,
                cost_header,
                cost_trailer: None,
                abort_cost,
                abort_drain_timeout: SettleSpec::DEFAULT_ABORT_DRAIN_TIMEOUT,
                abort_drain_bytes: SettleSpec::DEFAULT_ABORT_DRAIN_BYTES,
            });
        }
        Ok(PyRoute { route })
    }

    /// The path prefix.
    #[getter]
    fn prefix(&self) -> &str {
        &self.route.prefix
    }

    fn __repr__(&self) -> String {
        let policies: Vec<String> = self
            .route
            .policies
            .iter()
            .map(|(n, c)| format!("{n:?}: {c}"))
            .collect();
        format!(
            "Route({:?}, policies={{{}}})",
            self.route.prefix,
            policies.join(", ")
        )
    }
}
