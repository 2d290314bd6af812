//! The adaptive policies' metrics: the limit, the permits held and the requests shed per
//! class, the latency samples. Registered by every [`Metrics`](super::Metrics) (a surface
//! without adaptive policies shows the families empty); a policy's handles are taken once,
//! when its limiter is built ([`super::Metrics::adaptive`]), so the request path touches
//! no label map.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{PolicyLabels, names};
use crate::adaptive::AdaptiveMetrics;

/// Labels of the per class series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyClassLabels {
    /// The adaptive policy's name.
    pub policy: String,
    /// The class's name.
    pub class: String,
}

fn latency_histogram() -> Histogram {
    // 100 µs to about 52 s
    Histogram::new(exponential_buckets(1e-4, 2.0, 20))
}

/// The registered families (clones share the series); a surface with a registry of its
/// own (floodgate server's) registers them there.
#[derive(Clone, Debug)]
pub struct AdaptiveFamilies {
    limit: Family<PolicyLabels, Gauge>,
    in_flight: Family<PolicyClassLabels, Gauge>,
    shed: Family<PolicyClassLabels, Counter>,
    latency: Family<PolicyLabels, Histogram, fn() -> Histogram>,
}

impl AdaptiveFamilies {
    /// Register the four families (`floodgate_adaptive_*`) in `registry`.
    pub fn register(registry: &mut Registry) -> AdaptiveFamilies {
        let f = AdaptiveFamilies {
            limit: Family::default(),
            in_flight: Family::default(),
            shed: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        };
        registry.register(
            names::ADAPTIVE_LIMIT,
            "Adaptive policies: the current concurrency limit",
            f.limit.clone(),
        );
        registry.register(
            names::ADAPTIVE_IN_FLIGHT,
            "Adaptive policies: requests holding a permit, per class",
            f.in_flight.clone(),
        );
        registry.register(
            names::ADAPTIVE_SHED,
            "Adaptive policies: requests refused (503) or, dry-run, that would have been, per class",
            f.shed.clone(),
        );
        registry.register(
            names::ADAPTIVE_LATENCY,
            "Adaptive policies: the latency samples fed to the limit's algorithm",
            f.latency.clone(),
        );
        f
    }

    /// The series of adaptive policy `policy` with these classes (taken once, when its
    /// limiter is built).
    pub fn policy(&self, policy: &str, classes: &[String]) -> AdaptiveMetrics {
        let p = PolicyLabels {
            policy: policy.to_string(),
        };
        let labels = |class: &String| PolicyClassLabels {
            policy: policy.to_string(),
            class: class.clone(),
        };
        AdaptiveMetrics {
            limit: self.limit.get_or_create_owned(&p),
            in_flight: classes
                .iter()
                .map(|c| self.in_flight.get_or_create_owned(&labels(c)))
                .collect(),
            shed: classes
                .iter()
                .map(|c| self.shed.get_or_create_owned(&labels(c)))
                .collect(),
            latency: self.latency.get_or_create_owned(&p),
        }
    }
}
