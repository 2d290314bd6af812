//! Prometheus metrics (text exposition via `prometheus-client`): the one vocabulary of
//! the layer, the proxy and the server. The names ([`names`]), label sets (the `*Labels`
//! types) and outcome words ([`DecisionOutcome::label`], [`RequestOutcome::label`],
//! [`StoreErrorKind::label`](crate::StoreErrorKind::label)) are defined here and nowhere
//! else; `docs/metrics.md` lists every metric of every surface.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `floodgate_decisions_total` | counter | `policy`, `outcome` = passed, delayed, rejected, delayed_dry_run, rejected_dry_run |
//! | `floodgate_requests_total` | counter | `outcome` = passed, delayed, rejected, allowlisted, unlimited, missing_key_denied, missing_key_allowed, queue_full, store_error_allowed, store_error_denied, invalid (refused before the limiter: the proxy's request checks, the server's malformed requests); the server also unknown_domain, error |
//! | `floodgate_delay_seconds` | histogram | time requests were held (leaky queue) |
//! | `floodgate_waiting_requests` | gauge | requests being held now: by a leaky queue's delay or waiting in a `max_in_flight` queue |
//! | `floodgate_decision_duration_seconds` | histogram | time to decide (key extraction + store) |
//! | `floodgate_store_errors_total` | counter | `kind` = timeout, circuit_open, unavailable, refused: decision-store faults |
//! | `floodgate_store_keys` | gauge | `policy`: keys held (in-process store) |
//! | `floodgate_store_evicted_total` | counter | `policy`: live keys evicted to respect the key cap |
//! | `floodgate_inflight_leases` | gauge | `policy`: in-flight leases held through this node (`max_in_flight` policies) |
//! | `floodgate_proxy_request_duration_seconds` | histogram | proxy: whole request, first byte in to response head out |
//! | `floodgate_upstream_errors_total` | counter | proxy: `kind` = connect (unreachable), response (closed, reset or malformed response), timeout (no response head in time) |
//! | `floodgate_upstream_requests_total` | counter | proxy: `upstream` (group), `server` (URL), `class` = 1xx..5xx, error (no response head) |
//! | `floodgate_upstream_up` | gauge | proxy: `upstream`, `server`: 1 taken, 0 ejected or failing its probe |
//! | `floodgate_upstream_in_flight` | gauge | proxy: `upstream`, `server`: requests sent whose response body has not ended |
//! | `floodgate_upstream_ejections_total` | counter | proxy: `upstream`, `server`: ejections after consecutive failures |
//! | `floodgate_store_events_total` | counter | `event`: the store's own counters (hybrid: `lease_admit` = checks admitted from a local lease, `round_trip` = calls to the shared counter) |
//! | `floodgate_invalid_requests_total` | counter | proxy: `reason` a request was refused before the limiter looked (see [`INVALID_REASONS`]) |
//! | `floodgate_client_timeouts_total` | counter | proxy: `kind` = send (the client did not read the response), body (the client's request body stalled), handshake (no TLS handshake in time) |
//! | `floodgate_client_connections_total` | counter | proxy: `outcome` = accepted, refused_total (the connection cap), refused_per_client (the per-address cap) |
//! | `floodgate_settle_abandoned_total` | counter | `outcome` = settled (the cost arrived after the client left), abort_cost (it did not: the route's abort cost was charged) |
//! | `floodgate_fleet_requests_total` | counter | sticky fleet: `event` = forwarded (to the owner), received (from a node), fallback (owner unreachable: decided here), failed (owner failed mid-request) |
//! | `floodgate_config_reloads_total` | counter | proxy: `result` = ok, error: configuration reloads (SIGHUP, file watch) |
//! | `floodgate_access_log_dropped_total` | counter | proxy: access log lines dropped because the writer's queue was full (a slow disk) |
//! | `floodgate_adaptive_limit` | gauge | `policy`: an adaptive policy's current concurrency limit |
//! | `floodgate_adaptive_in_flight` | gauge | `policy`, `class`: requests holding an adaptive permit |
//! | `floodgate_adaptive_shed_total` | counter | `policy`, `class`: requests refused with 503 (dry-run: that would have been) |
//! | `floodgate_adaptive_latency_seconds` | histogram | `policy`: latency samples fed to the algorithm (to the response head or the body's end) |

pub mod adaptive;
pub mod exposition;
pub use exposition::Exposition;
pub mod striped;
pub mod upstream;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use std::sync::Arc;

pub use striped::{StripedCounter, StripedGauge, StripedHistogram};

use crate::store::PolicyStats;

use crate::fault::StoreError;

/// The metric names every surface shares, as registered (a counter's exposition adds
/// `_total`).
pub mod names {
    /// Counter `{policy, outcome}`: one per policy checked per request.
    pub const DECISIONS: &str = "floodgate_decisions";
    /// Counter `{outcome}`: one per request.
    pub const REQUESTS: &str = "floodgate_requests";
    /// Counter `{kind}`: decision-store faults.
    pub const STORE_ERRORS: &str = "floodgate_store_errors";
    /// Counter `{event}`: the store's own events (hybrid: `lease_admit`, `round_trip`).
    pub const STORE_EVENTS: &str = "floodgate_store_events";
    /// Gauge `{policy}`: keys held in process.
    pub const STORE_KEYS: &str = "floodgate_store_keys";
    /// Counter `{policy}`: live keys evicted to respect the key cap.
    pub const STORE_EVICTED: &str = "floodgate_store_evicted";
    /// Gauge: 1 while the decision store answers, 0 while every decision is the fault
    /// policy's ([`DecisionStore::reachable`](crate::DecisionStore::reachable)).
    pub const STORE_UP: &str = "floodgate_store_up";
    /// Gauge `{policy}`: in-flight leases held through this node.
    pub const INFLIGHT_LEASES: &str = "floodgate_inflight_leases";
    /// Counter `{upstream, server, class}`: proxy, requests sent to each upstream server.
    pub const UPSTREAM_REQUESTS: &str = "floodgate_upstream_requests";
    /// Gauge `{upstream, server}`: proxy, 1 while the server is taken, 0 while ejected.
    pub const UPSTREAM_UP: &str = "floodgate_upstream_up";
    /// Gauge `{upstream, server}`: proxy, requests waiting for the server's response head.
    pub const UPSTREAM_IN_FLIGHT: &str = "floodgate_upstream_in_flight";
    /// Counter `{upstream, server}`: proxy, ejections after consecutive failures.
    pub const UPSTREAM_EJECTIONS: &str = "floodgate_upstream_ejections";
    /// Gauge `{policy}`: an adaptive policy's current concurrency limit.
    pub const ADAPTIVE_LIMIT: &str = "floodgate_adaptive_limit";
    /// Gauge `{policy, class}`: requests holding an adaptive policy's permit.
    pub const ADAPTIVE_IN_FLIGHT: &str = "floodgate_adaptive_in_flight";
    /// Counter `{policy, class}`: requests an adaptive policy refused (or, dry-run, would
    /// have).
    pub const ADAPTIVE_SHED: &str = "floodgate_adaptive_shed";
    /// Histogram `{policy}`: the latency samples of an adaptive policy, seconds.
    pub const ADAPTIVE_LATENCY: &str = "floodgate_adaptive_latency_seconds";
}

/// Labels of [`names::DECISIONS`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The policy's name, as in `RateLimit-Policy`.
    pub policy: String,
    /// A [`DecisionOutcome::label`].
    pub outcome: &'static str,
}

/// Labels of [`names::REQUESTS`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// A [`RequestOutcome::label`].
    pub outcome: &'static str,
}

/// Labels of the per-policy store metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// The policy's name.
    pub policy: String,
}

/// Labels of [`names::STORE_EVENTS`] and the fleet's events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// The event.
    pub event: &'static str,
}

/// Labels of `floodgate_invalid_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Labels of `floodgate_config_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Labels with a `kind`: [`names::STORE_ERRORS`] (a
/// [`StoreErrorKind::label`](crate::StoreErrorKind::label)), upstream errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The kind.
    pub kind: &'static str,
}

/// Every store fault kind, as labelled.
pub const STORE_ERROR_KINDS: [&str; 4] = ["timeout", "circuit_open", "unavailable", "refused"];

/// A policy decision outcome, as nginx's `$limit_req_status` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionOutcome {
    /// Admitted at once.
    Passed = 0,
    /// Admitted after a delay.
    Delayed = 1,
    /// Rejected.
    Rejected = 2,
    /// Dry-run: would have been delayed.
    DelayedDryRun = 3,
    /// Dry-run: would have been rejected.
    RejectedDryRun = 4,
}

const DECISION_OUTCOMES: [&str; 5] = [
    "passed",
    "delayed",
    "rejected",
    "delayed_dry_run",
    "rejected_dry_run",
];

impl DecisionOutcome {
    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        DECISION_OUTCOMES[self as usize]
    }
}

/// What happened to a request as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum RequestOutcome {
    Passed = 0,
    Delayed,
    Rejected,
    Allowlisted,
    Unlimited,
    MissingKeyDenied,
    MissingKeyAllowed,
    QueueFull,
    StoreErrorAllowed,
    StoreErrorDenied,
    /// Refused before the limiter looked: by the proxy (a malformed or ambiguous target,
    /// method, `Host` or key header; the reason is in `floodgate_invalid_requests_total`),
    /// or by the server (malformed, above a cap).
    Invalid,
    /// Server: no rule names the request's domain (or policy).
    UnknownDomain,
    /// Server: the store refused the check (not a fault the fault policy covers).
    Error,
}

/// The outcomes only the server has (not pre-created by the layer and the proxy).
const SERVER_ONLY: usize = 2;

impl RequestOutcome {
    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        REQUEST_OUTCOMES[self as usize]
    }
}

const REQUEST_OUTCOMES: [&str; 13] = [
    "passed",
    "delayed",
    "rejected",
    "allowlisted",
    "unlimited",
    "missing_key_denied",
    "missing_key_allowed",
    "queue_full",
    "store_error_allowed",
    "store_error_denied",
    "invalid",
    "unknown_domain",
    "error",
];

/// The `reason` label values of `floodgate_invalid_requests_total`, each counted from 0.
pub const INVALID_REASONS: [&str; 7] = [
    // a head hyper's parser refused (400, or 431 when too large): malformed framing,
    // bare CR, obs-fold, NUL, conflicting lengths...; an HTTP/2 field value with
    // leading or trailing whitespace
    "head",
    // not origin-form, absolute http(s) or `OPTIONS *` (or unusable after normalizing)
    "target",
    // a path the proxy will not forward (encoded `/`, `\` or NUL, a bad escape, a
    // dot or empty segment with `;` parameters)
    "path",
    // not an upper-case token
    "method",
    // CONNECT and TRACE (405)
    "method_not_allowed",
    // missing (HTTP/1.1, HTTP/2), repeated, empty or malformed `Host`
    "host",
    // a header a policy keys on, repeated
    "key_header",
];

/// The `kind` label values of `floodgate_client_timeouts_total`.
pub const CLIENT_TIMEOUT_KINDS: [&str; 3] = ["send", "body", "handshake"];

/// The `outcome` label values of `floodgate_settle_abandoned_total`: an exchange its
/// client abandoned was `settled` with the cost that arrived after, or charged its
/// route's `abort_cost`.
pub const SETTLE_ABANDONED_OUTCOMES: [&str; 2] = ["settled", "abort_cost"];

/// The `outcome` label values of `floodgate_client_connections_total`.
pub const CLIENT_CONNECTION_OUTCOMES: [&str; 3] =
    ["accepted", "refused_total", "refused_per_client"];

/// All metrics of one limiter (and its proxy). Counters are pre-created per policy and
/// outcome so the request path touches no label map.
pub struct Metrics {
    /// Shared by a limiter's successors ([`Metrics::successor`]).
    registry: Arc<Registry>,
    decisions_family: Family<DecisionLabels, StripedCounter>,
    decisions: Vec<[StripedCounter; 5]>,
    requests: Vec<StripedCounter>,
    /// Time requests were held, seconds.
    pub delay_seconds: StripedHistogram,
    /// Requests held now: by a leaky queue's delay or in a `max_in_flight` queue
    /// ([`LeasePolicy::attach_waiting_gauge`](crate::inflight::LeasePolicy::attach_waiting_gauge)).
    pub waiting: Gauge,
    /// Decision latency, seconds.
    pub decision_seconds: StripedHistogram,
    store_errors: [Counter; 4],
    keys: Family<PolicyLabels, Gauge>,
    evicted: Family<PolicyLabels, Counter>,
    store_up: Gauge,
    policy_names: Vec<String>,
    /// Proxy: request latency, seconds.
    pub proxy_seconds: StripedHistogram,
    upstream_errors: Family<KindLabels, Counter>,
    invalid: Family<ReasonLabels, Counter>,
    client_timeouts: Family<KindLabels, Counter>,
    client_connections: Family<OutcomeLabels, Counter>,
    settle_abandoned: Family<OutcomeLabels, Counter>,
    fleet: Family<EventLabels, Counter>,
    store_events: Family<EventLabels, Counter>,
    leases: Family<PolicyLabels, Gauge>,
    config_reloads: Family<ResultLabels, Counter>,
    /// Proxy: access log lines dropped, the writer's queue full.
    access_log_dropped: Counter,
    upstreams: upstream::UpstreamFamilies,
    adaptive: adaptive::AdaptiveFamilies,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics for these policy names (in policy index order).
    pub fn new(policy_names: &[String]) -> Metrics {
        let mut registry = Registry::default();
        let decisions_family = Family::<DecisionLabels, StripedCounter>::default();
        let decisions = policy_names
            .iter()
            .map(|p| {
                DECISION_OUTCOMES.map(|o| {
                    decisions_family.get_or_create_owned(&DecisionLabels {
                        policy: p.clone(),
                        outcome: o,
                    })
                })
            })
            .collect();
        registry.register(
            names::DECISIONS,
            "Policy decisions by policy and outcome",
            decisions_family.clone(),
        );
        let requests_family = Family::<OutcomeLabels, StripedCounter>::default();
        let own = REQUEST_OUTCOMES.len() - SERVER_ONLY;
        let requests = REQUEST_OUTCOMES
            .iter()
            .enumerate()
            .map(|(i, o)| {
                if i < own {
                    requests_family.get_or_create_owned(&OutcomeLabels { outcome: o })
                } else {
                    StripedCounter::default()
                }
            })
            .collect();
        registry.register(
            names::REQUESTS,
            "Requests by what the limiter did with them",
            requests_family,
        );
        let delay_seconds = StripedHistogram::new(exponential_buckets(0.001, 2.0, 17));
        registry.register(
            "floodgate_delay_seconds",
            "Time requests were held by a leaky queue",
            delay_seconds.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "floodgate_waiting_requests",
            "Requests being held now (a leaky queue's delay, an in-flight queue's wait)",
            waiting.clone(),
        );
        let decision_seconds = StripedHistogram::new(exponential_buckets(1e-6, 2.0, 20));
        registry.register(
            "floodgate_decision_duration_seconds",
            "Time to decide on a request (key extraction and store)",
            decision_seconds.clone(),
        );
        let store_errors_family = Family::<KindLabels, Counter>::default();
        let store_errors = STORE_ERROR_KINDS
            .map(|kind| store_errors_family.get_or_create_owned(&KindLabels { kind }));
        registry.register(
            names::STORE_ERRORS,
            "Decision store faults by kind",
            store_errors_family,
        );
        let keys = Family::<PolicyLabels, Gauge>::default();
        registry.register(names::STORE_KEYS, "Keys held per policy", keys.clone());
        let store_up = Gauge::default();
        store_up.set(1);
        registry.register(
            names::STORE_UP,
            "1 while the decision store answers, 0 while decisions are the fault policy's",
            store_up.clone(),
        );
        let evicted = Family::<PolicyLabels, Counter>::default();
        registry.register(
            names::STORE_EVICTED,
            "Live keys evicted to respect the key cap",
            evicted.clone(),
        );
        let proxy_seconds = StripedHistogram::new(exponential_buckets(1e-5, 2.0, 24));
        registry.register(
            "floodgate_proxy_request_duration_seconds",
            "Proxy: time from request to response head",
            proxy_seconds.clone(),
        );
        let upstream_errors = Family::<KindLabels, Counter>::default();
        for kind in ["connect", "response", "timeout"] {
            let _ = upstream_errors.get_or_create(&KindLabels { kind });
        }
        registry.register(
            "floodgate_upstream_errors",
            "Proxy: upstream failures (connect = 502, timeout = 504)",
            upstream_errors.clone(),
        );
        let invalid = Family::<ReasonLabels, Counter>::default();
        for reason in INVALID_REASONS {
            let _ = invalid.get_or_create(&ReasonLabels { reason });
        }
        registry.register(
            "floodgate_invalid_requests",
            "Proxy: requests refused before the limiter looked, by reason",
            invalid.clone(),
        );
        let client_timeouts = Family::<KindLabels, Counter>::default();
        for kind in CLIENT_TIMEOUT_KINDS {
            let _ = client_timeouts.get_or_create(&KindLabels { kind });
        }
        registry.register(
            "floodgate_client_timeouts",
            "Proxy: client connections cut because the client stalled (send: not reading the response; body: request body idle, answered 408)",
            client_timeouts.clone(),
        );
        let client_connections = Family::<OutcomeLabels, Counter>::default();
        for outcome in CLIENT_CONNECTION_OUTCOMES {
            let _ = client_connections.get_or_create(&OutcomeLabels { outcome });
        }
        registry.register(
            "floodgate_client_connections",
            "Proxy: client connections accepted, or refused by the total or per-address cap",
            client_connections.clone(),
        );
        let settle_abandoned = Family::<OutcomeLabels, Counter>::default();
        for outcome in SETTLE_ABANDONED_OUTCOMES {
            let _ = settle_abandoned.get_or_create(&OutcomeLabels { outcome });
        }
        registry.register(
            "floodgate_settle_abandoned",
            "Exchanges on a route that settles its cost, abandoned by their client: settled with the cost that arrived after, or charged the abort cost",
            settle_abandoned.clone(),
        );
        let fleet = Family::<EventLabels, Counter>::default();
        registry.register(
            "floodgate_fleet_requests",
            "Sticky fleet: requests forwarded to their owner node, received from a node, decided here because the owner was unreachable, failed at the owner",
            fleet.clone(),
        );
        let store_events = Family::<EventLabels, Counter>::default();
        registry.register(
            names::STORE_EVENTS,
            "Decision store events (hybrid: lease_admit, round_trip)",
            store_events.clone(),
        );
        let leases = Family::<PolicyLabels, Gauge>::default();
        registry.register(
            names::INFLIGHT_LEASES,
            "In-flight leases held through this node, per max_in_flight policy",
            leases.clone(),
        );
        let config_reloads = Family::<ResultLabels, Counter>::default();
        // both series from the start, at 0: a dashboard's rate() and an alert on errors
        // see them before the first reload
        for result in ["ok", "error"] {
            let _ = config_reloads.get_or_create(&ResultLabels { result });
        }
        registry.register(
            "floodgate_config_reloads",
            "Proxy: configuration reload attempts by result",
            config_reloads.clone(),
        );
        let access_log_dropped = Counter::default();
        registry.register(
            "floodgate_access_log_dropped",
            "Proxy: access log lines dropped because the writer's queue was full",
            access_log_dropped.clone(),
        );
        let upstreams = upstream::UpstreamFamilies::register(&mut registry);
        let adaptive = adaptive::AdaptiveFamilies::register(&mut registry);
        Metrics {
            adaptive,
            access_log_dropped,
            upstreams,
            leases,
            fleet,
            store_events,
            registry: Arc::new(registry),
            decisions_family,
            config_reloads,
            decisions,
            requests,
            delay_seconds,
            waiting,
            decision_seconds,
            store_errors,
            keys,
            evicted,
            store_up,
            policy_names: policy_names.to_vec(),
            proxy_seconds,
            upstream_errors,
            invalid,
            client_timeouts,
            client_connections,
            settle_abandoned,
        }
    }

    /// The metrics of a limiter that replaces this one's (a reloaded configuration with
    /// these policy names, in index order): every series is shared, so counters go on
    /// counting across the reload; a policy seen before keeps its decision counters, a
    /// new one starts at 0, a removed one's series stay at their last values.
    pub fn successor(&self, policy_names: &[String]) -> Metrics {
        let decisions = policy_names
            .iter()
            .map(|p| {
                DECISION_OUTCOMES.map(|o| {
                    self.decisions_family.get_or_create_owned(&DecisionLabels {
                        policy: p.clone(),
                        outcome: o,
                    })
                })
            })
            .collect();
        Metrics {
            registry: self.registry.clone(),
            decisions_family: self.decisions_family.clone(),
            decisions,
            requests: self.requests.clone(),
            delay_seconds: self.delay_seconds.clone(),
            waiting: self.waiting.clone(),
            decision_seconds: self.decision_seconds.clone(),
            store_errors: self.store_errors.clone(),
            keys: self.keys.clone(),
            evicted: self.evicted.clone(),
            store_up: self.store_up.clone(),
            policy_names: policy_names.to_vec(),
            proxy_seconds: self.proxy_seconds.clone(),
            upstream_errors: self.upstream_errors.clone(),
            invalid: self.invalid.clone(),
            client_timeouts: self.client_timeouts.clone(),
            client_connections: self.client_connections.clone(),
            settle_abandoned: self.settle_abandoned.clone(),
            fleet: self.fleet.clone(),
            store_events: self.store_events.clone(),
            leases: self.leases.clone(),
            config_reloads: self.config_reloads.clone(),
            access_log_dropped: self.access_log_dropped.clone(),
            upstreams: self.upstreams.clone(),
            adaptive: self.adaptive.clone(),
        }
    }

    /// Count an access log line dropped because the writer's queue was full.
    pub fn access_log_dropped(&self) {
        self.access_log_dropped.inc();
    }

    /// Access log lines dropped so far.
    pub fn access_log_dropped_count(&self) -> u64 {
        self.access_log_dropped.get()
    }

    /// Count a configuration reload (`ok`: it was applied).
    pub fn config_reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.config_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Reloads counted with this result ([`config_reload`](Self::config_reload)).
    pub fn config_reload_count(&self, ok: bool) -> u64 {
        let result = if ok { "ok" } else { "error" };
        self.config_reloads
            .get_or_create(&ResultLabels { result })
            .get()
    }

    /// Count a policy decision.
    pub fn decision(&self, policy: usize, outcome: DecisionOutcome) {
        if let Some(c) = self.decisions.get(policy) {
            c[outcome as usize].inc();
        }
    }

    /// The gauge of in-flight leases of the policy named `policy`
    /// ([`names::INFLIGHT_LEASES`]); attach it with
    /// [`LeasePolicy::attach_gauge`](crate::inflight::LeasePolicy::attach_gauge).
    pub fn lease_gauge(&self, policy: &str) -> Gauge {
        self.leases
            .get_or_create(&PolicyLabels {
                policy: policy.to_string(),
            })
            .clone()
    }

    /// Count a request outcome.
    pub fn request(&self, outcome: RequestOutcome) {
        self.requests[outcome as usize].inc();
    }

    /// The count of a request outcome (for tests and logs).
    pub fn request_count(&self, outcome: RequestOutcome) -> u64 {
        self.requests[outcome as usize].get()
    }

    /// Count a store fault under its kind.
    pub fn store_error(&self, e: &StoreError) {
        let i = STORE_ERROR_KINDS
            .iter()
            .position(|k| *k == e.label())
            .unwrap_or(0);
        self.store_errors[i].inc();
    }

    /// Store faults counted, all kinds.
    pub fn store_error_count(&self) -> u64 {
        self.store_errors.iter().map(Counter::get).sum()
    }

    /// The metric handles of adaptive policy `policy` with `classes` (in class order).
    pub fn adaptive(&self, policy: &str, classes: &[String]) -> crate::adaptive::AdaptiveMetrics {
        self.adaptive.policy(policy, classes)
    }

    /// The metric handles of server `server` (its URL) of upstream group `upstream`.
    pub fn upstream_server(&self, upstream: &str, server: &str) -> upstream::ServerMetrics {
        self.upstreams.server(upstream, server)
    }

    /// Count an upstream failure: `"connect"`, `"response"` or `"timeout"`.
    pub fn upstream_error(&self, kind: &'static str) {
        self.upstream_errors
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Count a request the proxy refused before the limiter looked: `reason` (one of
    /// [`INVALID_REASONS`]) in `floodgate_invalid_requests_total`, and the outcome
    /// `invalid` in `floodgate_requests_total`.
    pub fn invalid(&self, reason: &'static str) {
        self.request(RequestOutcome::Invalid);
        self.invalid.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// The count of refused requests with `reason`.
    pub fn invalid_count(&self, reason: &'static str) -> u64 {
        self.invalid.get_or_create(&ReasonLabels { reason }).get()
    }

    /// Count a client timeout: `"send"`, `"body"` or `"handshake"` (TLS)
    /// ([`CLIENT_TIMEOUT_KINDS`]).
    pub fn client_timeout(&self, kind: &'static str) {
        self.client_timeouts
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// The count of client timeouts of `kind`.
    pub fn client_timeout_count(&self, kind: &'static str) -> u64 {
        self.client_timeouts
            .get_or_create(&KindLabels { kind })
            .get()
    }

    /// Count a client connection: `"accepted"`, `"refused_total"` or
    /// `"refused_per_client"` ([`CLIENT_CONNECTION_OUTCOMES`]).
    pub fn client_connection(&self, outcome: &'static str) {
        self.client_connections
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The count of client connections with `outcome`.
    pub fn client_connection_count(&self, outcome: &'static str) -> u64 {
        self.client_connections
            .get_or_create(&OutcomeLabels { outcome })
            .get()
    }

    /// Count an abandoned exchange's settle: `"settled"` or `"abort_cost"`
    /// ([`SETTLE_ABANDONED_OUTCOMES`]).
    pub fn settle_abandoned(&self, outcome: &'static str) {
        self.settle_abandoned
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The count of abandoned exchanges settled with `outcome`.
    pub fn settle_abandoned_count(&self, outcome: &'static str) -> u64 {
        self.settle_abandoned
            .get_or_create(&OutcomeLabels { outcome })
            .get()
    }

    /// Count a sticky-fleet event: `"forwarded"`, `"received"`, `"fallback"`, `"failed"`.
    pub fn fleet(&self, event: &'static str) {
        self.fleet.get_or_create(&EventLabels { event }).inc();
    }

    /// The count of a sticky-fleet event.
    pub fn fleet_count(&self, event: &'static str) -> u64 {
        self.fleet.get_or_create(&EventLabels { event }).get()
    }

    /// Bring the store event counters up to `events` (monotonic totals from the store).
    pub fn update_store_events(&self, events: &[(&'static str, u64)]) {
        for &(event, total) in events {
            let c = self.store_events.get_or_create(&EventLabels { event });
            let seen = c.get();
            if total > seen {
                c.inc_by(total - seen);
            }
        }
    }

    /// Set the store's reachability gauge ([`names::STORE_UP`]).
    pub fn update_store_up(&self, reachable: bool) {
        self.store_up.set(i64::from(reachable));
    }

    /// Refresh the store gauges from `stats` (indexed like the policies).
    pub fn update_store(&self, stats: &[PolicyStats]) {
        for (name, st) in self.policy_names.iter().zip(stats) {
            let labels = PolicyLabels {
                policy: name.clone(),
            };
            self.keys
                .get_or_create(&labels)
                .set(i64::try_from(st.keys).unwrap_or(i64::MAX));
            let c = self.evicted.get_or_create(&labels);
            let seen = c.get();
            if st.evicted > seen {
                c.inc_by(st.evicted - seen);
            }
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        self.encode_as(Exposition::OpenMetrics)
    }

    /// The text exposition in `format` (the one a scraper's `Accept` asks for:
    /// [`Exposition::negotiate`]).
    pub fn encode_as(&self, format: Exposition) -> String {
        format.encode(&self.registry)
    }
}
