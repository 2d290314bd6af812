//! Prometheus metrics (OpenMetrics text at `GET /metrics`), in floodgate-engine's one
//! vocabulary ([`floodgate_engine::metrics`]: the layer, the proxy and the server export
//! the same names, labels and outcome words for the same events; `docs/metrics.md` lists
//! them all).
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `floodgate_decisions_total` | policy, outcome | one per limit checked per request (as the layer's policies): `passed`, `delayed`, `rejected`, `delayed_dry_run`, `rejected_dry_run` (shadow mode) |
//! | `floodgate_requests_total` | outcome | one per request: `passed`, `delayed`, `rejected`, `store_error_allowed`, `store_error_denied`, and the server's `invalid`, `unknown_domain`, `error` |
//! | `floodgate_store_errors_total` | kind | store faults: `timeout`, `circuit_open`, `unavailable`, `refused` |
//! | `floodgate_store_events_total` | event | hybrid fleet: `lease_admit` (no round trip), `round_trip` |
//! | `floodgate_store_keys` | policy | in-process store: keys held (summed over the limits of one name) |
//! | `floodgate_store_evicted_total` | policy | in-process store: live keys evicted to respect `max_keys` |
//! | `floodgate_descriptor_decisions_total` | domain, descriptor, outcome | server: one per descriptor per request (Envoy's per-rule stats): `passed`, `rejected`, `rejected_dry_run`, `unlimited`, `no_rule`, `unknown_domain` |
//! | `floodgate_near_limit_total` | domain, descriptor | server: admitted with at least 80% of the limit used (Envoy's near-limit ratio) |
//! | `floodgate_request_duration_seconds` | front | server: latency inside the server (decode to reply), by door |
//! | `floodgate_redis_*` | | the Redis store's counters (calls, timeouts, deny-cache hits, ...) |
//! | `floodgate_auth_failures_total` | front, reason | server: clients refused: `wrong_password`, `no_auth` (a RESP command before `AUTH`, an HTTP `/v1` call without a token), `tls_handshake` |
//! | `floodgate_connections_refused_total` | front, reason | server: client connections closed at accept: `total` (the door's connection cap), `per_client` (its per-address cap) |
//! | `floodgate_connection_timeouts_total` | front, phase | server: client connections closed for a timeout: `preface` (gRPC), `head` (HTTP), `idle`, `request` (a call's request, a body, a command) |
//! | `floodgate_config_reloads_total` | result | `ok` or `error` |
//! | `floodgate_config_last_reload_success` | | 1 when the last reload attempt succeeded |
//! | `floodgate_config_generation` | | generation of the config being served (1 at startup) |
//! | `floodgate_quota_limit` | bucket | quota: a bucket's global limit, requests per second |
//! | `floodgate_quota_demand` | bucket, client | quota: a client's reported demand, requests per second |
//! | `floodgate_quota_assigned` | bucket, client | quota: a client's share of the bucket's limit, requests per second |
//! | `floodgate_quota_reports_total` | | quota: messages of usage reports received (each answered: one round trip) |
//! | `floodgate_quota_pushes_total` | | quota: messages of assignments pushed without a report asking |
//! | `floodgate_adaptive_limit`, `_in_flight`, `_shed_total`, `_latency_seconds` | policy (class) | the adaptive policies of `/v1/adaptive` (the proxy's and the layer's families) |
//!
//! The `descriptor` label is the rule's path in the config (`database=users.remote_address`),
//! never a request value, unless the rule asks for `detailed_metric` or `value_to_metric`.
//! Unknown domains are counted under `domain="(unknown)"` so clients cannot add labels.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use floodgate_engine::insight::{Insight, KeyDisplay};
use floodgate_engine::metrics::{
    DecisionLabels, DecisionOutcome, EventLabels, Exposition, KindLabels, OutcomeLabels,
    PolicyLabels, RequestOutcome, STORE_ERROR_KINDS, names,
};
use floodgate_engine::{DecisionStore, StoreError};
use floodgate_redis::RedisStore;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of `floodgate_descriptor_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DescriptorLabels {
    /// The domain.
    pub domain: String,
    /// The rule's path.
    pub descriptor: String,
    /// The outcome.
    pub outcome: &'static str,
}

/// Labels of `floodgate_near_limit_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// The domain.
    pub domain: String,
    /// The rule's path.
    pub descriptor: String,
}

/// Labels of per-door metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FrontLabels {
    /// `grpc`, `http` or `resp`.
    pub front: &'static str,
}

/// Why a client was refused before any command or call was answered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum AuthFailure {
    /// `AUTH` (or `HELLO ... AUTH`) with a wrong user name or password; another bearer
    /// token.
    WrongPassword,
    /// A command or call sent before authenticating (no `AUTH`, no bearer token).
    NoAuth,
    /// The TLS handshake failed: not TLS, no or an untrusted client certificate, timeout.
    TlsHandshake,
}

impl AuthFailure {
    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            AuthFailure::WrongPassword => "wrong_password",
            AuthFailure::NoAuth => "no_auth",
            AuthFailure::TlsHandshake => "tls_handshake",
        }
    }
}

/// Labels of `floodgate_auth_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    /// `grpc`, `http` or `resp`.
    pub front: &'static str,
    /// [`AuthFailure::label`].
    pub reason: &'static str,
}

/// Labels of `floodgate_connections_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `grpc`, `http` or `resp`.
    pub front: &'static str,
    /// `total` or `per_client`.
    pub reason: &'static str,
}

/// Labels of `floodgate_connection_timeouts_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// `grpc`, `http` or `resp`.
    pub front: &'static str,
    /// `preface`, `head`, `idle` or `request`.
    pub phase: &'static str,
}

/// The timeout phases of each door, as `floodgate_connection_timeouts_total` counts them.
pub const TIMEOUT_PHASES: [(&str, &[&str]); 3] = [
    ("grpc", &["preface", "idle", "request"]),
    ("http", &["head", "idle", "request"]),
    ("resp", &["idle", "request"]),
];

/// Labels of the reload counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok` or `error`.
    pub result: &'static str,
}

fn latency_histogram() -> Histogram {
    // 10 us .. ~5 s
    Histogram::new([
        0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01,
        0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    ])
}

/// Every metric of the server.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Decisions by policy (limit name) and outcome.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Decisions by domain, descriptor, outcome.
    pub descriptor_decisions: Family<DescriptorLabels, Counter>,
    /// Near-limit admissions.
    pub near_limit: Family<RuleLabels, Counter>,
    /// Requests by outcome.
    pub requests: Family<OutcomeLabels, Counter>,
    /// Latency by door.
    pub latency: Family<FrontLabels, Histogram, fn() -> Histogram>,
    /// Store faults by kind.
    pub store_errors: Family<KindLabels, Counter>,
    /// Reloads by result.
    pub reloads: Family<ResultLabels, Counter>,
    /// Clients refused by authentication or TLS, by door and reason.
    pub auth_failures: Family<AuthLabels, Counter>,
    /// Client connections refused at accept, by door and cap.
    pub connections_refused: Family<RefusedLabels, Counter>,
    /// Client connections closed for a timeout, by door and phase.
    pub connection_timeouts: Family<PhaseLabels, Counter>,
    store_events: Arc<Mutex<StoreEvents>>,
    /// 1 when the last reload attempt succeeded.
    pub last_reload_success: Gauge,
    /// The config generation served.
    pub generation: Gauge,
    /// Who is being limited: the admin API's source, fed where decisions are counted.
    pub insight: Arc<Insight>,
    /// `requests` and `latency` series resolved on first use (no label lookup per call).
    resolved: Resolved,
    /// Quota buckets: each client's demand and share (`floodgate_quota_*`).
    pub quota: Arc<crate::quota::QuotaView>,
    /// The adaptive policies' series (`floodgate_adaptive_*`).
    pub adaptive: floodgate_engine::metrics::adaptive::AdaptiveFamilies,
}

/// Series of `requests` (by outcome) and `latency` (by door) resolved once: each is
/// created in its family on first use, as `get_or_create` would, then used directly.
#[derive(Debug, Default)]
struct Resolved {
    requests: [OnceLock<Counter>; REQUEST_OUTCOME_COUNT],
    latency: [OnceLock<Histogram>; FRONTS.len()],
}

/// Most quota buckets shown in metrics and the admin API.
const QUOTA_BUCKETS_SHOWN: usize = 10_000;

/// How many [`RequestOutcome`]s there are.
const REQUEST_OUTCOME_COUNT: usize = RequestOutcome::Error as usize + 1;

/// The doors whose latency series are resolved once.
const FRONTS: [&str; 3] = ["grpc", "http", "resp"];

impl Metrics {
    /// A registry with every metric registered; `redis` adds the store's counters. The
    /// admin API shows keys plain.
    pub fn new(redis: Option<Arc<RedisStore>>) -> Metrics {
        Metrics::with_keys(redis, KeyDisplay::Plain)
    }

    /// As [`new`](Self::new), the admin API showing keys as `keys`.
    pub fn with_keys(redis: Option<Arc<RedisStore>>, keys: KeyDisplay) -> Metrics {
        let mut registry = Registry::default();
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            names::DECISIONS,
            "Policy decisions by policy and outcome",
            decisions.clone(),
        );
        let requests = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            names::REQUESTS,
            "Requests by what the limiter did with them",
            requests.clone(),
        );
        let store_errors = Family::<KindLabels, Counter>::default();
        for kind in STORE_ERROR_KINDS {
            let _ = store_errors.get_or_create(&KindLabels { kind });
        }
        registry.register(
            names::STORE_ERRORS,
            "Decision store faults by kind",
            store_errors.clone(),
        );
        let store_events = Arc::new(Mutex::new(StoreEvents::default()));
        registry.register_collector(Box::new(StoreEventsCollector(store_events.clone())));
        let server = registry.sub_registry_with_prefix("floodgate");
        let descriptor_decisions = Family::<DescriptorLabels, Counter>::default();
        server.register(
            "descriptor_decisions",
            "Decisions per descriptor, by domain, rule and outcome",
            descriptor_decisions.clone(),
        );
        let near_limit = Family::<RuleLabels, Counter>::default();
        server.register(
            "near_limit",
            "Admitted decisions with at least 80% of the limit used",
            near_limit.clone(),
        );
        let latency = Family::<FrontLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        server.register(
            "request_duration_seconds",
            "Time from a decoded request to its reply, by front door",
            latency.clone(),
        );
        let reloads = Family::<ResultLabels, Counter>::default();
        // both series from the start, at 0: a dashboard's rate() and an alert on errors
        // see them before the first reload
        for result in ["ok", "error"] {
            let _ = reloads.get_or_create(&ResultLabels { result });
        }
        server.register(
            "config_reloads",
            "Config reload attempts by result",
            reloads.clone(),
        );
        let auth_failures = Family::<AuthLabels, Counter>::default();
        server.register(
            "auth_failures",
            "Clients refused by authentication or TLS, by door and reason",
            auth_failures.clone(),
        );
        let last_reload_success = Gauge::default();
        last_reload_success.set(1);
        server.register(
            "config_last_reload_success",
            "1 when the last config reload succeeded (or none was tried)",
            last_reload_success.clone(),
        );
        let generation = Gauge::default();
        server.register(
            "config_generation",
            "Generation of the config being served",
            generation.clone(),
        );
        let connections_refused = Family::<RefusedLabels, Counter>::default();
        let connection_timeouts = Family::<PhaseLabels, Counter>::default();
        for (front, phases) in TIMEOUT_PHASES {
            for reason in ["total", "per_client"] {
                let _ = connections_refused.get_or_create(&RefusedLabels { front, reason });
            }
            for &phase in phases {
                let _ = connection_timeouts.get_or_create(&PhaseLabels { front, phase });
            }
        }
        server.register(
            "connections_refused",
            "Client connections closed at accept by the door's connection caps (total, per_client)",
            connections_refused.clone(),
        );
        server.register(
            "connection_timeouts",
            "Client connections closed for a timeout, by door and phase (preface, head, idle, request)",
            connection_timeouts.clone(),
        );
        if let Some(store) = redis {
            server.register_collector(Box::new(RedisCollector(store)));
        }
        let quota = Arc::new(crate::quota::QuotaView::new(
            QUOTA_BUCKETS_SHOWN,
            Arc::new(floodgate_core::time::WallClock),
        ));
        registry.register_collector(Box::new(crate::quota::QuotaCollector(quota.clone())));
        let adaptive =
            floodgate_engine::metrics::adaptive::AdaptiveFamilies::register(&mut registry);
        Metrics {
            adaptive,
            registry,
            decisions,
            descriptor_decisions,
            near_limit,
            requests,
            latency,
            store_errors,
            reloads,
            auth_failures,
            connections_refused,
            connection_timeouts,
            store_events,
            last_reload_success,
            generation,
            insight: Arc::new(Insight::new("server", keys)),
            resolved: Resolved::default(),
            quota,
        }
    }

    /// Count a connection of door `front` refused by a cap.
    pub fn connection_refused(&self, front: &'static str, refused: floodgate_net::Refused) {
        let reason = match refused {
            floodgate_net::Refused::Total => "total",
            floodgate_net::Refused::PerClient => "per_client",
        };
        self.connections_refused
            .get_or_create(&RefusedLabels { front, reason })
            .inc();
    }

    /// Count a connection of door `front` closed for a timeout in `phase` (one of
    /// [`TIMEOUT_PHASES`]).
    pub fn connection_timeout(&self, front: &'static str, phase: &'static str) {
        self.connection_timeouts
            .get_or_create(&PhaseLabels { front, phase })
            .inc();
    }

    /// Count one request of door `front` with `outcome` taking `elapsed`.
    pub fn request(&self, front: &'static str, outcome: RequestOutcome, elapsed: Duration) {
        let labels = || OutcomeLabels {
            outcome: outcome.label(),
        };
        match self.resolved.requests.get(outcome as usize) {
            Some(c) => c
                .get_or_init(|| self.requests.get_or_create_owned(&labels()))
                .inc(),
            None => self.requests.get_or_create(&labels()).inc(),
        };
        let secs = elapsed.as_secs_f64();
        match FRONTS.iter().position(|f| *f == front) {
            Some(i) => self.resolved.latency[i]
                .get_or_init(|| self.latency.get_or_create_owned(&FrontLabels { front }))
                .observe(secs),
            None => self
                .latency
                .get_or_create(&FrontLabels { front })
                .observe(secs),
        }
    }

    /// Count one client refused at door `front` for `reason`.
    pub fn auth_failure(&self, front: &'static str, reason: AuthFailure) {
        self.auth_failures
            .get_or_create(&AuthLabels {
                front,
                reason: reason.label(),
            })
            .inc();
    }

    /// The counter of one policy decision outcome (resolve once, increment on the hot
    /// path).
    pub fn decision_counter(&self, policy: &str, outcome: DecisionOutcome) -> Counter {
        self.decisions.get_or_create_owned(&DecisionLabels {
            policy: policy.to_string(),
            outcome: outcome.label(),
        })
    }

    /// The counter of one descriptor decision outcome.
    pub fn descriptor_counter(
        &self,
        domain: &str,
        descriptor: &str,
        outcome: &'static str,
    ) -> Counter {
        self.descriptor_decisions
            .get_or_create_owned(&DescriptorLabels {
                domain: domain.to_string(),
                descriptor: descriptor.to_string(),
                outcome,
            })
    }

    /// The near-limit counter of a rule.
    pub fn near_limit_counter(&self, domain: &str, descriptor: &str) -> Counter {
        self.near_limit.get_or_create_owned(&RuleLabels {
            domain: domain.to_string(),
            descriptor: descriptor.to_string(),
        })
    }

    /// Count a store fault under its kind.
    pub fn store_error(&self, e: &StoreError) {
        self.store_errors
            .get_or_create(&KindLabels { kind: e.label() })
            .inc();
    }

    /// Export `store`'s counters from now on (a reload's new store); `policies` names its
    /// policies in index order. The event totals of the store it replaces are carried
    /// over, so the event counters stay monotonic.
    pub fn set_store(&self, store: Arc<dyn DecisionStore>, policies: Vec<String>) {
        let mut ev = self.store_events.lock().unwrap_or_else(|p| p.into_inner());
        ev.policies = policies;
        if let Some(old) = ev.current.take() {
            for (event, n) in old.events() {
                match ev.carried.iter_mut().find(|(e, _)| *e == event) {
                    Some((_, total)) => *total += n,
                    None => ev.carried.push((event, n)),
                }
            }
        }
        ev.current = Some(store);
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        self.render_as(Exposition::OpenMetrics)
    }

    /// The text exposition in `format` (the one a scraper's `Accept` asks for:
    /// [`Exposition::negotiate`]).
    pub fn render_as(&self, format: Exposition) -> String {
        format.encode(&self.registry)
    }
}

/// The store's own event counters: those of stores replaced by reloads, and the current
/// one's.
#[derive(Default)]
struct StoreEvents {
    carried: Vec<(&'static str, u64)>,
    current: Option<Arc<dyn DecisionStore>>,
    policies: Vec<String>,
}

impl std::fmt::Debug for StoreEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreEvents")
            .field("carried", &self.carried)
            .finish_non_exhaustive()
    }
}

/// Encodes the store's own metrics at scrape time: `floodgate_store_up`,
/// `floodgate_store_events_total{event}`,
/// and for the in-process store `floodgate_store_keys{policy}` and
/// `floodgate_store_evicted_total{policy}` (summed over the limits of one name).
#[derive(Debug)]
struct StoreEventsCollector(Arc<Mutex<StoreEvents>>);

impl Collector for StoreEventsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (totals, per_policy, up) = {
            let ev = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let up = ev.current.as_ref().is_none_or(|s| s.reachable());
            let mut per_policy: Vec<(String, u64, u64)> = Vec::new();
            let stats = ev.current.as_ref().map(|s| s.stats()).unwrap_or_default();
            for (name, st) in ev.policies.iter().zip(stats) {
                match per_policy.iter_mut().find(|(n, _, _)| n == name) {
                    Some((_, keys, evicted)) => {
                        *keys += st.keys;
                        *evicted += st.evicted;
                    }
                    None => per_policy.push((name.clone(), st.keys, st.evicted)),
                }
            }
            let mut totals = ev.carried.clone();
            for (event, n) in ev.current.as_ref().map(|s| s.events()).unwrap_or_default() {
                match totals.iter_mut().find(|(e, _)| *e == event) {
                    Some((_, total)) => *total += n,
                    None => totals.push((event, n)),
                }
            }
            (totals, per_policy, up)
        };
        ConstGauge::new(i64::from(up)).encode(encoder.encode_descriptor(
            names::STORE_UP,
            "1 while the decision store answers, 0 while decisions are the fault policy's",
            None,
            MetricType::Gauge,
        )?)?;
        if !per_policy.is_empty() {
            let mut keys = encoder.encode_descriptor(
                names::STORE_KEYS,
                "Keys held per policy",
                None,
                MetricType::Gauge,
            )?;
            for (policy, n, _) in &per_policy {
                let labels = PolicyLabels {
                    policy: policy.clone(),
                };
                ConstGauge::new(i64::try_from(*n).unwrap_or(i64::MAX))
                    .encode(keys.encode_family(&labels)?)?;
            }
            let mut evicted = encoder.encode_descriptor(
                names::STORE_EVICTED,
                "Live keys evicted to respect the key cap",
                None,
                MetricType::Counter,
            )?;
            for (policy, _, n) in per_policy {
                ConstCounter::new(n).encode(evicted.encode_family(&PolicyLabels { policy })?)?;
            }
        }
        if totals.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            names::STORE_EVENTS,
            "Decision store events (hybrid: lease_admit, round_trip)",
            None,
            MetricType::Counter,
        )?;
        for (event, n) in totals {
            ConstCounter::new(n).encode(family.encode_family(&EventLabels { event })?)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct RedisCollector(Arc<RedisStore>);

impl Collector for RedisCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.stats();
        let counters = [
            ("redis_calls", "Script calls sent to Redis", s.redis_calls),
            ("redis_timeouts", "Redis calls that timed out", s.timeouts),
            ("redis_errors", "Redis calls that failed", s.errors),
            (
                "redis_degraded",
                "Decisions made under the fault policy",
                s.degraded,
            ),
            (
                "redis_circuit_rejected",
                "Calls not sent: circuit open",
                s.circuit_rejected,
            ),
            (
                "redis_circuit_opened",
                "Times the circuit opened",
                s.circuit_opened,
            ),
            (
                "redis_deny_cache_hits",
                "Denials answered from the local cache",
                s.deny_cache_hits,
            ),
        ];
        for (name, help, v) in counters {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(v).encode(m)?;
        }
        Ok(())
    }
}
