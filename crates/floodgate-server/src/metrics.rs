//! Prometheus metrics (OpenMetrics text at `GET /metrics`).
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `floodgate_decisions_total` | domain, descriptor, outcome | one per descriptor per request: `ok`, `over_limit`, `shadow_over_limit`, `unlimited`, `no_rule` |
//! | `floodgate_near_limit_total` | domain, descriptor | admitted with at least 80% of the limit used (Envoy's near-limit ratio) |
//! | `floodgate_requests_total` | front, result | one per request: `ok`, `over_limit`, `invalid`, `unknown_domain`, `error` |
//! | `floodgate_request_duration_seconds` | front | latency inside the server (decode to reply) |
//! | `floodgate_store_faults_total` | kind | Redis `timeout`, `error`, `circuit_open`: decisions made by the fault policy |
//! | `floodgate_redis_*` | | the Redis store's counters (calls, timeouts, deny-cache hits, ...) |
//! | `floodgate_fleet_events_total` | event | hybrid fleet: `lease_admit` (no round trip), `round_trip` |
//! | `floodgate_config_reloads_total` | result | `ok` or `error` |
//! | `floodgate_config_last_reload_success` | | 1 when the last reload attempt succeeded |
//! | `floodgate_config_generation` | | generation of the config being served (1 at startup) |
//!
//! The `descriptor` label is the rule's path in the config (`database=users.remote_address`),
//! never a request value, unless the rule asks for `detailed_metric` or `value_to_metric`.
//! Unknown domains are counted under `domain="(unknown)"` so clients cannot add labels.

use std::sync::Arc;
use std::time::Duration;

use floodgate_redis::RedisStore;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of `floodgate_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
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

/// Labels of per-front metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FrontLabels {
    /// `grpc`, `http` or `resp`.
    pub front: &'static str,
}

/// Labels of `floodgate_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `grpc`, `http` or `resp`.
    pub front: &'static str,
    /// `ok`, `over_limit`, `invalid`, `unknown_domain`, `error`.
    pub result: &'static str,
}

/// Labels with one `kind` or `result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The kind.
    pub kind: &'static str,
}

/// Labels of `floodgate_fleet_events_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// `lease_admit` or `round_trip`.
    pub event: &'static str,
}

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
    /// Decisions by domain, descriptor, outcome.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Near-limit admissions.
    pub near_limit: Family<RuleLabels, Counter>,
    /// Requests by front and result.
    pub requests: Family<RequestLabels, Counter>,
    /// Latency by front.
    pub latency: Family<FrontLabels, Histogram, fn() -> Histogram>,
    /// Redis faults by kind.
    pub store_faults: Family<KindLabels, Counter>,
    /// Reloads by result.
    pub reloads: Family<ResultLabels, Counter>,
    /// Fleet events (hybrid: decisions admitted from a lease, round trips).
    pub fleet_events: Family<EventLabels, Counter>,
    /// 1 when the last reload attempt succeeded.
    pub last_reload_success: Gauge,
    /// The config generation served.
    pub generation: Gauge,
}

impl Metrics {
    /// A registry with every metric registered; `redis` adds the store's counters.
    pub fn new(redis: Option<Arc<RedisStore>>) -> Metrics {
        let mut registry = Registry::with_prefix("floodgate");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Decisions per descriptor, by domain, rule and outcome",
            decisions.clone(),
        );
        let near_limit = Family::<RuleLabels, Counter>::default();
        registry.register(
            "near_limit",
            "Admitted decisions with at least 80% of the limit used",
            near_limit.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests by front door and result",
            requests.clone(),
        );
        let latency = Family::<FrontLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register(
            "request_duration_seconds",
            "Time from a decoded request to its reply, by front door",
            latency.clone(),
        );
        let store_faults = Family::<KindLabels, Counter>::default();
        registry.register(
            "store_faults",
            "Decisions made by the Redis fault policy, by fault",
            store_faults.clone(),
        );
        let reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Config reload attempts by result",
            reloads.clone(),
        );
        let fleet_events = Family::<EventLabels, Counter>::default();
        registry.register(
            "fleet_events",
            "Fleet hybrid strategy: decisions admitted from a local lease, round trips to Redis",
            fleet_events.clone(),
        );
        let last_reload_success = Gauge::default();
        last_reload_success.set(1);
        registry.register(
            "config_last_reload_success",
            "1 when the last config reload succeeded (or none was tried)",
            last_reload_success.clone(),
        );
        let generation = Gauge::default();
        registry.register(
            "config_generation",
            "Generation of the config being served",
            generation.clone(),
        );
        if let Some(store) = redis {
            registry.register_collector(Box::new(RedisCollector(store)));
        }
        Metrics {
            registry,
            decisions,
            near_limit,
            requests,
            latency,
            store_faults,
            reloads,
            fleet_events,
            last_reload_success,
            generation,
        }
    }

    /// Count one request of `front` with `result` taking `elapsed`.
    pub fn request(&self, front: &'static str, result: &'static str, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels { front, result })
            .inc();
        self.latency
            .get_or_create(&FrontLabels { front })
            .observe(elapsed.as_secs_f64());
    }

    /// The counter of one decision outcome (resolve once, increment on the hot path).
    pub fn decision_counter(
        &self,
        domain: &str,
        descriptor: &str,
        outcome: &'static str,
    ) -> Counter {
        self.decisions.get_or_create_owned(&DecisionLabels {
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

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
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
