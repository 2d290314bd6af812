//! Front door 3: HTTP/JSON, and the operations endpoints.
//!
//! * `POST /v1/check`: `{"domain": "edge", "descriptors": [[{"key": "user", "value": "42"}]],
//!   "cost": 1}` (Envoy's descriptors; a descriptor may also be
//!   `{"entries": [...], "cost": 2}`), or `{"policy": "api", "key": "user:42", "cost": 1}`
//!   (a named policy of the config applied to any key). `domain` may be left out when
//!   one domain is configured, `policy` when one policy is. Answers `200` when allowed,
//!   `429` when over limit, with the decision as JSON and the headers a proxy should copy
//!   both in the body (`headers`) and on the response itself. A descriptor reaching a
//!   `max_in_flight` rule takes a lease when the check is admitted, answered in
//!   `in_flight` for `/v1/release` ([`inflight`]).
//! * `POST /v1/reserve` and `POST /v1/settle`: admit at an estimate, settle the actual
//!   cost later ([`settle`]).
//! * `POST /v1/acquire`, `/v1/renew`, `/v1/release`: in-flight leases
//!   ([`crate::http_leases`]).
//! * `POST /v1/adaptive/acquire`, `/v1/adaptive/release`: permits of the adaptive
//!   policies, for callers that report each request's end ([`adaptive`]).
//! * `GET /metrics`: Prometheus (OpenMetrics text).
//! * `GET /healthz`: `200 {"status":"serving","config_generation":N,"store":"ok"}`
//!   (`"store":"degraded"` while the decision store does not answer and the fault
//!   policy decides), `503` while shutting down.
//! * `GET /admin`, `/admin/api/...`: who is being limited (floodgate-engine's admin page
//!   and API, [`floodgate_engine::admin`]); `GET /admin/api/quota`: per quota bucket, each
//!   client's demand and share ([`crate::quota::QuotaView`]).
//!
//! `/v1` and `/admin` answer only a `Host` that is a loopback name or address
//! (`localhost`, `127.0.0.0/8`, `[::1]`, any port) or one of `http.allowed_hosts`; any
//! other (or none) gets `421` with `{"error": ...}` (a guard against DNS rebinding:
//! [`floodgate_engine::admin::AllowedHosts`]). `/metrics` and `/healthz` answer any.
//!
//! Bad requests get `400` (`413` for a body above `limits.max_request_bytes`, `404` for an
//! unknown domain or policy, `405` for a wrong method), always with `{"error": "..."}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use floodgate_engine::admin::{AdminRequest, AllowedHosts, misdirected};
use floodgate_engine::metrics::{Exposition, RequestOutcome};
use serde_json::{Value, json};

use crate::descriptors::{CheckError, DescriptorIn, Engine, Entry, Generation, Matched, Outcome};
use crate::http_leases;
use crate::leases::{DoorError, ceil_ms};
use crate::metrics::AuthFailure;
use floodgate_engine::CallerLimits;

pub mod adaptive;
pub mod conn;
mod host;
pub mod inflight;
pub mod settle;

use host::{admin_reply, host_guard, host_of};

/// State shared by the HTTP handlers.
#[derive(Debug)]
pub struct HttpState {
    /// The limiter.
    pub engine: Arc<Engine>,
    /// Set when shutdown begins: `/healthz` answers 503.
    pub shutting_down: AtomicBool,
    /// In-flight leases (`/v1/acquire`, `/v1/renew`, `/v1/release`), shared with the
    /// RESP door.
    pub leases: Arc<CallerLimits>,
    /// The token the `/v1` calls must carry as `Authorization: Bearer <token>` (`None`:
    /// none asked).
    pub token: Option<crate::config::Password>,
    /// `Host` names `/v1` and `/admin` answer besides loopback ones.
    pub allowed_hosts: AllowedHosts,
    /// Permits of the adaptive policies held by callers (`/v1/adaptive/...`).
    pub adaptive: Arc<crate::adaptive::AdaptiveLeases>,
}

/// The router.
pub fn router(state: Arc<HttpState>) -> Router {
    Router::new()
        .route("/v1/check", post(check).fallback(method_not_allowed))
        .route(
            "/v1/reserve",
            post(settle::reserve).fallback(method_not_allowed),
        )
        .route(
            "/v1/settle",
            post(settle::settle).fallback(method_not_allowed),
        )
        .route(
            "/v1/acquire",
            post(|s, b| lease(s, "acquire", b)).fallback(method_not_allowed),
        )
        .route(
            "/v1/renew",
            post(|s, b| lease(s, "renew", b)).fallback(method_not_allowed),
        )
        .route(
            "/v1/release",
            post(|s, b| lease(s, "release", b)).fallback(method_not_allowed),
        )
        .route(
            "/v1/adaptive/acquire",
            post(|s, b| adaptive_call(s, true, b)).fallback(method_not_allowed),
        )
        .route(
            "/v1/adaptive/release",
            post(|s, b| adaptive_call(s, false, b)).fallback(method_not_allowed),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            json_only,
        ))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), bearer))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            host_guard,
        ))
        .route("/metrics", get(metrics).fallback(method_not_allowed))
        .route("/healthz", get(healthz).fallback(method_not_allowed))
        .fallback(fallback)
        .with_state(state)
}

/// Whether `value` is a `Content-Type` of JSON: `application/json`, any case, with or
/// without parameters (`; charset=utf-8`).
fn is_json(value: &[u8]) -> bool {
    let essence = value.split(|&b| b == b';').next().unwrap_or_default();
    essence
        .trim_ascii()
        .eq_ignore_ascii_case(b"application/json")
}

/// The `/v1` calls take JSON only: a body of another type (a browser's cross-site form
/// sends `text/plain` or a form type without asking first) gets `415` and is not read.
async fn json_only(
    State(s): State<Arc<HttpState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let ok = req
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| is_json(v.as_bytes()));
    if ok {
        return next.run(req).await;
    }
    s.engine
        .metrics()
        .request("http", RequestOutcome::Invalid, Duration::ZERO);
    let got = req.headers().get(header::CONTENT_TYPE).map_or_else(
        || "none".to_string(),
        |v| format!("{:?}", String::from_utf8_lossy(v.as_bytes())),
    );
    error(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!("the body must be JSON: send Content-Type: application/json (got {got})"),
    )
}

/// With `http.token` configured, the `/v1` calls need `Authorization: Bearer <token>`
/// (compared in constant time): without it `401` with `WWW-Authenticate: Bearer`, with
/// another token `401` too; both counted in `floodgate_auth_failures_total{front="http"}`
/// and read no body. Checked before the content type.
async fn bearer(
    State(s): State<Arc<HttpState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(token) = &s.token else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .and_then(|v| {
            let (scheme, rest) = v.split_at_checked(7)?;
            scheme.eq_ignore_ascii_case(b"bearer ").then_some(rest)
        });
    let (failure, message) = match given {
        Some(t) if token.matches(t) => return next.run(req).await,
        Some(_) => (
            AuthFailure::WrongPassword,
            "the bearer token is not this server's",
        ),
        None => (
            AuthFailure::NoAuth,
            "this call needs Authorization: Bearer <token> (http.token)",
        ),
    };
    s.engine.metrics().auth_failure("http", failure);
    let mut resp = error(StatusCode::UNAUTHORIZED, message);
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"floodgate\""),
    );
    resp
}

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// Paths of no route: the admin page and API under `/admin` (rendered by
/// floodgate-engine), else 404.
async fn fallback(State(s): State<Arc<HttpState>>, req: axum::extract::Request) -> Response {
    let uri = req.uri();
    let asked = AdminRequest {
        method: req.method().as_str(),
        path: uri.path(),
        query: uri.query(),
    };
    let admin_path = asked
        .path
        .strip_prefix("/admin")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if admin_path && !s.allowed_hosts.allows(host_of(&req)) {
        return admin_reply(misdirected(host_of(&req), "http.allowed_hosts"));
    }
    if asked.path == "/admin/api/quota" && asked.method == "GET" {
        // per quota bucket: each client's demand and share (docs/quota.md)
        return axum::Json(s.engine.metrics().quota.snapshot()).into_response();
    }
    match s.engine.admin(&asked).await {
        Some(reply) => admin_reply(reply),
        None => not_found().await,
    }
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint; try POST /v1/check, /v1/reserve, /v1/settle, /v1/acquire, /v1/renew or /v1/release, GET /metrics, GET /healthz, GET /admin",
    )
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this endpoint",
    )
}

async fn healthz(State(s): State<Arc<HttpState>>) -> Response {
    if s.shutting_down.load(Ordering::Relaxed) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    let g = s.engine.current();
    // serving either way: while the store does not answer, the fault policy decides
    let store = if g.store_reachable() {
        "ok"
    } else {
        "degraded"
    };
    axum::Json(json!({ "status": "serving", "config_generation": g.id, "store": store }))
        .into_response()
}

async fn metrics(State(s): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    let format = Exposition::negotiate(&headers);
    (
        [(header::CONTENT_TYPE, format.content_type())],
        s.engine.metrics().render_as(format),
    )
        .into_response()
}

/// Milliseconds, rounded up (never earlier than the truth).
pub(crate) fn ms(d: Duration) -> u64 {
    ceil_ms(d)
}

fn bad(msg: impl Into<String>) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, msg.into())
}

fn as_cost(v: &Value, at: &str) -> Result<u64, (StatusCode, String)> {
    v.as_u64()
        .ok_or_else(|| bad(format!("{at} must be a non-negative integer, got {v}")))
}

fn entries<'a>(v: &'a Value, at: &str) -> Result<Vec<Entry<'a>>, (StatusCode, String)> {
    let list = v.as_array().ok_or_else(|| {
        bad(format!(
            "{at} must be a list of {{\"key\", \"value\"}} objects"
        ))
    })?;
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            let obj = e
                .as_object()
                .ok_or_else(|| bad(format!("{at}[{i}] must be an object with key and value")))?;
            if let Some(k) = obj.keys().find(|k| *k != "key" && *k != "value") {
                return Err(bad(format!(
                    "{at}[{i}]: unknown field {k:?} (expected key, value)"
                )));
            }
            let key = obj
                .get("key")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{at}[{i}].key must be a string")))?;
            let value = match obj.get("value") {
                None => "",
                Some(v) => v
                    .as_str()
                    .ok_or_else(|| bad(format!("{at}[{i}].value must be a string")))?,
            };
            Ok(Entry { key, value })
        })
        .collect()
}

/// A check's error as an HTTP status and message.
pub(crate) fn to_http(e: CheckError) -> (StatusCode, String) {
    let status = if e.is_not_found() {
        StatusCode::NOT_FOUND
    } else if e.is_internal() {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::BAD_REQUEST
    };
    (status, e.to_string())
}

/// The policy named, or the only one configured.
pub(crate) fn policy_or_default(
    generation: &Generation,
    named: Option<&str>,
) -> Result<String, (StatusCode, String)> {
    let policies = &generation.rules.policies;
    match named {
        Some(p) => Ok(p.to_string()),
        None if policies.len() == 1 => Ok(policies.keys().next().cloned().unwrap_or_default()),
        None => Err(bad(format!(
            "policy is required; configured policies: {}",
            policies.keys().cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Check the JSON body; `Ok` carries the outcome, `Err` the status and message.
async fn run_check(
    engine: &Engine,
    door: &CallerLimits,
    body: &[u8],
) -> Result<inflight::Checked, (StatusCode, String)> {
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("the body must be a JSON object"))?;
    const FIELDS: [&str; 5] = ["domain", "descriptors", "key", "policy", "cost"];
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown field {k:?}; expected {}",
            FIELDS.join(", ")
        )));
    }
    let cost = match obj.get("cost") {
        None => 1,
        Some(c) => as_cost(c, "cost")?,
    };
    let string = |name: &str| -> Result<Option<&str>, (StatusCode, String)> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(bad(format!("{name} must be a string, got {other}"))),
        }
    };
    let generation = engine.current();
    match (obj.get("descriptors"), string("key")?) {
        (Some(_), Some(_)) => Err(bad(
            "give either descriptors (with domain) or key (with policy), not both",
        )),
        (None, None) => Err(bad(
            "the body needs descriptors (with domain) or key (with policy)",
        )),
        (None, Some(key)) => {
            if obj.contains_key("domain") {
                return Err(bad(
                    "domain goes with descriptors; the key form takes a policy",
                ));
            }
            let policy = policy_or_default(&generation, string("policy")?)?;
            engine
                .check_policy(&policy, key, cost)
                .await
                .map(inflight::Checked::plain)
                .map_err(to_http)
        }
        (Some(descs), None) => {
            if obj.contains_key("policy") {
                return Err(bad(
                    "policy goes with key; the descriptors form takes a domain",
                ));
            }
            let domain = match string("domain")? {
                Some(d) => d.to_string(),
                None if generation.rules.domains.len() == 1 => generation
                    .rules
                    .domains
                    .keys()
                    .next()
                    .cloned()
                    .unwrap_or_default(),
                None => {
                    return Err(bad(format!(
                        "domain is required; configured domains: {}",
                        generation
                            .rules
                            .domains
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            };
            let list = descs
                .as_array()
                .ok_or_else(|| bad("descriptors must be a list"))?;
            let max = generation.rules.caps.max_descriptors;
            if list.len() > max {
                return Err(bad(format!(
                    "{} descriptors is more than the maximum of {max} (limits.max_descriptors)",
                    list.len()
                )));
            }
            let mut descriptors = Vec::with_capacity(list.len());
            for (i, d) in list.iter().enumerate() {
                let at = format!("descriptors[{i}]");
                let (es, c) = match d {
                    Value::Array(_) => (entries(d, &at)?, cost),
                    Value::Object(o) => {
                        if let Some(k) = o.keys().find(|k| *k != "entries" && *k != "cost") {
                            return Err(bad(format!(
                                "{at}: unknown field {k:?} (expected entries, cost)"
                            )));
                        }
                        let es = entries(
                            o.get("entries")
                                .ok_or_else(|| bad(format!("{at}.entries is missing")))?,
                            &format!("{at}.entries"),
                        )?;
                        let c = match o.get("cost") {
                            None => cost,
                            Some(c) => as_cost(c, &format!("{at}.cost"))?,
                        };
                        (es, c)
                    }
                    _ => {
                        return Err(bad(format!(
                            "{at} must be a list of entries or {{\"entries\", \"cost\"}}"
                        )));
                    }
                };
                descriptors.push(DescriptorIn {
                    entries: es,
                    cost: c,
                });
            }
            inflight::check(engine, door, &domain, &descriptors).await
        }
    }
}

fn opt_ms(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| ms(d).into())
}

/// The JSON of an outcome.
pub fn outcome_json(o: &Outcome) -> Value {
    let all: Vec<_> = o
        .statuses
        .iter()
        .flat_map(|s| s.limits.iter().filter(move |_| !s.shadow).cloned())
        .collect();
    let binding = floodgate_engine::headers::binding(&all).map(|(_, d)| *d);
    let descriptors: Vec<Value> = o
        .statuses
        .iter()
        .map(|s| {
            json!({
                "code": if s.over_limit { "OVER_LIMIT" } else { "OK" },
                "matched": match s.matched {
                    Matched::NoRule => "no_rule",
                    Matched::Unlimited => "unlimited",
                    Matched::Limited => "limited",
                },
                "shadow": s.shadow,
                "limits": s.limits.iter().map(|(l, d)| json!({
                    "name": l.def.name,
                    "algorithm": l.def.algorithm(),
                    "requests_per_unit": l.def.requests_per_unit,
                    "unit": l.def.unit.name(),
                    "window_ms": ms(l.def.window),
                    "allowed": d.allowed,
                    "limit": d.limit,
                    "remaining": d.remaining,
                    "retry_after_ms": opt_ms(d.retry_after.filter(|_| !d.allowed)),
                    "reset_after_ms": ms(d.reset_after),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let headers: serde_json::Map<String, Value> = o
        .headers
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::String(v.clone())))
        .collect();
    json!({
        "allowed": !o.over_limit,
        "code": if o.over_limit { "OVER_LIMIT" } else { "OK" },
        "limit": binding.map(|d| d.limit),
        "remaining": binding.map(|d| d.remaining),
        "retry_after_ms": opt_ms(binding.and_then(|d| d.retry_after.filter(|_| !d.allowed))),
        "reset_after_ms": binding.map(|d| ms(d.reset_after)),
        "delay_ms": ms(o.delay),
        "descriptors": descriptors,
        "headers": headers,
    })
}

/// `200` or `429` with `json` and the outcome's headers on the response itself.
pub(crate) fn outcome_response(outcome: &Outcome, json: Value) -> Response {
    let status = if outcome.over_limit {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    let mut resp = (status, axum::Json(json)).into_response();
    for (k, v) in &outcome.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(*k), HeaderValue::try_from(v.as_str())) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

async fn check(State(s): State<Arc<HttpState>>, body: Body) -> Response {
    let start = Instant::now();
    let engine = &s.engine;
    let max = engine.current().rules.caps.max_request_bytes;
    let bytes = match axum::body::to_bytes(body, max).await {
        Ok(b) => b,
        Err(_) => {
            engine
                .metrics()
                .request("http", RequestOutcome::Invalid, start.elapsed());
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {max} bytes (limits.max_request_bytes)"),
            );
        }
    };
    match run_check(engine, &s.leases, &bytes).await {
        Ok(checked) => {
            let outcome = &checked.outcome;
            let mut json = outcome_json(outcome);
            json["in_flight"] = checked.in_flight_json();
            if let Some((_, d)) = &checked.denied {
                json["retry_after_ms"] = opt_ms(d.retry_after);
            }
            let resp = outcome_response(outcome, json);
            engine
                .metrics()
                .request("http", outcome.request_outcome(), start.elapsed());
            resp
        }
        Err((status, msg)) => {
            let outcome = match status {
                StatusCode::NOT_FOUND => RequestOutcome::UnknownDomain,
                StatusCode::INTERNAL_SERVER_ERROR => RequestOutcome::Error,
                _ => RequestOutcome::Invalid,
            };
            engine.metrics().request("http", outcome, start.elapsed());
            error(status, msg)
        }
    }
}

/// `POST /v1/acquire`, `/v1/renew`, `/v1/release` ([`http_leases`]).
async fn lease(State(s): State<Arc<HttpState>>, op: &'static str, body: Body) -> Response {
    let start = Instant::now();
    let metrics = s.engine.metrics();
    let Ok(bytes) = axum::body::to_bytes(body, http_leases::MAX_BODY).await else {
        metrics.request("http", RequestOutcome::Invalid, start.elapsed());
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {} bytes", http_leases::MAX_BODY),
        );
    };
    let max_key = s.engine.current().rules.caps.max_value_bytes;
    match http_leases::run(&s.leases, op, &bytes, max_key).await {
        Ok((status, v)) => answered(metrics, start, status, v),
        Err(e @ DoorError::Store(_)) => {
            metrics.request("http", RequestOutcome::Error, start.elapsed());
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(e) => {
            metrics.request("http", RequestOutcome::Invalid, start.elapsed());
            error(StatusCode::BAD_REQUEST, e.to_string())
        }
    }
}

/// `/v1/adaptive/acquire` (`acquire`) or `/v1/adaptive/release`.
async fn adaptive_call(State(s): State<Arc<HttpState>>, acquire: bool, body: Body) -> Response {
    let start = Instant::now();
    let metrics = s.engine.metrics();
    let Ok(bytes) = axum::body::to_bytes(body, adaptive::MAX_BODY).await else {
        metrics.request("http", RequestOutcome::Invalid, start.elapsed());
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {} bytes", adaptive::MAX_BODY),
        );
    };
    let answer = if acquire {
        let generation = s.engine.current();
        adaptive::acquire(&s.adaptive, &generation, &bytes).await
    } else {
        adaptive::release(&s.adaptive, &bytes)
    };
    match answer {
        Ok((status, v)) => answered(metrics, start, status, v),
        Err(e) => {
            metrics.request("http", RequestOutcome::Invalid, start.elapsed());
            match e {
                adaptive::AdaptiveError::Invalid(m) => error(StatusCode::BAD_REQUEST, m),
                adaptive::AdaptiveError::UnknownPolicy(m) => error(StatusCode::NOT_FOUND, m),
            }
        }
    }
}

/// The JSON answer of a lease or adaptive call, counted as passed (`200`) or rejected,
/// with `Retry-After` (seconds, rounded up, at least 1) from its `retry_after_ms`.
fn answered(
    metrics: &crate::metrics::Metrics,
    start: Instant,
    status: StatusCode,
    v: Value,
) -> Response {
    let outcome = if status == StatusCode::OK {
        RequestOutcome::Passed
    } else {
        RequestOutcome::Rejected
    };
    metrics.request("http", outcome, start.elapsed());
    let retry = v["retry_after_ms"].as_u64();
    let mut resp = (status, axum::Json(v)).into_response();
    if let Some(retry_ms) = retry {
        let secs = retry_ms.div_ceil(1000).max(1);
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}
