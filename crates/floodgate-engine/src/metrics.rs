//! Prometheus metrics of the layer and the proxy (text exposition via
//! `prometheus-client`).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `floodgate_decisions_total` | counter | `policy`, `outcome` = passed, delayed, rejected, delayed_dry_run, rejected_dry_run |
//! | `floodgate_requests_total` | counter | `outcome` = passed, delayed, rejected, allowlisted, unlimited, missing_key_denied, missing_key_allowed, queue_full, store_error_allowed, store_error_denied, invalid (refused by the proxy before the limiter) |
//! | `floodgate_delay_seconds` | histogram | time requests were held (leaky queue) |
//! | `floodgate_waiting_requests` | gauge | requests being held now |
//! | `floodgate_decision_duration_seconds` | histogram | time to decide (key extraction + store) |
//! | `floodgate_store_errors_total` | counter | decision-store faults |
//! | `floodgate_store_keys` | gauge | `policy`: keys held (in-process store) |
//! | `floodgate_store_evicted_total` | counter | `policy`: live keys evicted to respect the key cap |
//! | `floodgate_proxy_request_duration_seconds` | histogram | proxy: whole request, first byte in to response head out |
//! | `floodgate_upstream_errors_total` | counter | proxy: `kind` = connect (unreachable), response (closed, reset or malformed response), timeout (no response head in time) |
//! | `floodgate_store_events_total` | counter | `event`: the store's own counters (hybrid: `lease_admit` = checks admitted from a local lease, `round_trip` = calls to the shared counter) |
//! | `floodgate_invalid_requests_total` | counter | proxy: `reason` a request was refused before the limiter looked (see [`INVALID_REASONS`]) |
//! | `floodgate_client_timeouts_total` | counter | proxy: `kind` = send (the client did not read the response), body (the client's request body stalled) |
//! | `floodgate_client_connections_total` | counter | proxy: `outcome` = accepted, refused_total (the connection cap), refused_per_client (the per-address cap) |
//! | `floodgate_fleet_requests_total` | counter | sticky fleet: `event` = forwarded (to the owner), received (from a node), fallback (owner unreachable: decided here), failed (owner failed mid-request) |

pub mod striped;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

pub use striped::{StripedCounter, StripedHistogram};

use crate::store::PolicyStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    policy: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

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
    /// Refused by the proxy before the limiter looked (a malformed or ambiguous target,
    /// method, `Host` or key header); the reason is in `floodgate_invalid_requests_total`.
    Invalid,
}

const REQUEST_OUTCOMES: [&str; 11] = [
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
];

/// The `reason` label values of `floodgate_invalid_requests_total`, each counted from 0.
pub const INVALID_REASONS: [&str; 7] = [
    // a head hyper's parser refused (400, or 431 when too large): malformed framing,
    // bare CR, obs-fold, NUL, conflicting lengths...
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
pub const CLIENT_TIMEOUT_KINDS: [&str; 2] = ["send", "body"];

/// The `outcome` label values of `floodgate_client_connections_total`.
pub const CLIENT_CONNECTION_OUTCOMES: [&str; 3] =
    ["accepted", "refused_total", "refused_per_client"];

/// All metrics of one limiter (and its proxy). Counters are pre-created per policy and
/// outcome so the request path touches no label map.
pub struct Metrics {
    registry: Registry,
    decisions: Vec<[StripedCounter; 5]>,
    requests: Vec<StripedCounter>,
    /// Time requests were held, seconds.
    pub delay_seconds: StripedHistogram,
    /// Requests held now.
    pub waiting: Gauge,
    /// Decision latency, seconds.
    pub decision_seconds: StripedHistogram,
    /// Store faults.
    pub store_errors: Counter,
    keys: Family<PolicyLabels, Gauge>,
    evicted: Family<PolicyLabels, Counter>,
    policy_names: Vec<String>,
    /// Proxy: request latency, seconds.
    pub proxy_seconds: StripedHistogram,
    upstream_errors: Family<KindLabels, Counter>,
    invalid: Family<ReasonLabels, Counter>,
    client_timeouts: Family<KindLabels, Counter>,
    client_connections: Family<OutcomeLabels, Counter>,
    fleet: Family<EventLabels, Counter>,
    store_events: Family<EventLabels, Counter>,
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
            "floodgate_decisions",
            "Policy decisions by policy and outcome",
            decisions_family,
        );
        let requests_family = Family::<OutcomeLabels, StripedCounter>::default();
        let requests = REQUEST_OUTCOMES
            .iter()
            .map(|o| requests_family.get_or_create_owned(&OutcomeLabels { outcome: o }))
            .collect();
        registry.register(
            "floodgate_requests",
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
            "Requests being held now",
            waiting.clone(),
        );
        let decision_seconds = StripedHistogram::new(exponential_buckets(1e-6, 2.0, 20));
        registry.register(
            "floodgate_decision_duration_seconds",
            "Time to decide on a request (key extraction and store)",
            decision_seconds.clone(),
        );
        let store_errors = Counter::default();
        registry.register(
            "floodgate_store_errors",
            "Decision store faults",
            store_errors.clone(),
        );
        let keys = Family::<PolicyLabels, Gauge>::default();
        registry.register("floodgate_store_keys", "Keys held per policy", keys.clone());
        let evicted = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "floodgate_store_evicted",
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
        let fleet = Family::<EventLabels, Counter>::default();
        registry.register(
            "floodgate_fleet_requests",
            "Sticky fleet: requests forwarded to their owner node, received from a node, decided here because the owner was unreachable, failed at the owner",
            fleet.clone(),
        );
        let store_events = Family::<EventLabels, Counter>::default();
        registry.register(
            "floodgate_store_events",
            "Decision store events (hybrid: lease_admit, round_trip)",
            store_events.clone(),
        );
        Metrics {
            fleet,
            store_events,
            registry,
            decisions,
            requests,
            delay_seconds,
            waiting,
            decision_seconds,
            store_errors,
            keys,
            evicted,
            policy_names: policy_names.to_vec(),
            proxy_seconds,
            upstream_errors,
            invalid,
            client_timeouts,
            client_connections,
        }
    }

    /// Count a policy decision.
    pub fn decision(&self, policy: usize, outcome: DecisionOutcome) {
        if let Some(c) = self.decisions.get(policy) {
            c[outcome as usize].inc();
        }
    }

    /// Count a request outcome.
    pub fn request(&self, outcome: RequestOutcome) {
        self.requests[outcome as usize].inc();
    }

    /// The count of a request outcome (for tests and logs).
    pub fn request_count(&self, outcome: RequestOutcome) -> u64 {
        self.requests[outcome as usize].get()
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

    /// Count a client timeout: `"send"` or `"body"` ([`CLIENT_TIMEOUT_KINDS`]).
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

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
