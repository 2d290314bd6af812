//! The proxy's per upstream server metrics: requests by status class, whether the server
//! is taken, requests in flight and ejections. Registered by every [`Metrics`](super::Metrics)
//! (a surface without upstream groups shows the families empty); a server's handles are
//! taken once, when its group is built, so the request path touches no label map.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::StripedCounter;
use super::names;

/// The `class` label of [`names::UPSTREAM_REQUESTS`]: the response's status class, or
/// `error` when no response head came (connect failure, failed response, timeout).
pub const UPSTREAM_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "error"];

/// Labels of the per server gauges and of [`names::UPSTREAM_EJECTIONS`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    /// The group's name (`default` for the top-level `upstream`).
    pub upstream: String,
    /// The server's URL as configured.
    pub server: String,
}

/// Labels of [`names::UPSTREAM_REQUESTS`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerClassLabels {
    /// The group's name.
    pub upstream: String,
    /// The server's URL as configured.
    pub server: String,
    /// One of [`UPSTREAM_CLASSES`].
    pub class: &'static str,
}

/// The registered families (clones share the series: a reloaded limiter's
/// [`Metrics::successor`](super::Metrics::successor) goes on counting in them).
#[derive(Clone, Default)]
pub(super) struct UpstreamFamilies {
    requests: Family<ServerClassLabels, StripedCounter>,
    up: Family<ServerLabels, Gauge>,
    in_flight: Family<ServerLabels, Gauge>,
    ejections: Family<ServerLabels, Counter>,
}

impl UpstreamFamilies {
    pub(super) fn register(registry: &mut Registry) -> UpstreamFamilies {
        let f = UpstreamFamilies::default();
        registry.register(
            names::UPSTREAM_REQUESTS,
            "Proxy: requests sent to each upstream server, by status class (error: no response head)",
            f.requests.clone(),
        );
        registry.register(
            names::UPSTREAM_UP,
            "Proxy: 1 while an upstream server is taken, 0 while it is ejected (passive health) or its probe fails",
            f.up.clone(),
        );
        registry.register(
            names::UPSTREAM_IN_FLIGHT,
            "Proxy: requests sent to each upstream server whose response has not ended (its body read to the end, or dropped)",
            f.in_flight.clone(),
        );
        registry.register(
            names::UPSTREAM_EJECTIONS,
            "Proxy: times each upstream server was ejected after consecutive failures",
            f.ejections.clone(),
        );
        f
    }

    pub(super) fn server(&self, upstream: &str, server: &str) -> ServerMetrics {
        let labels = ServerLabels {
            upstream: upstream.to_string(),
            server: server.to_string(),
        };
        ServerMetrics {
            requests: UPSTREAM_CLASSES.map(|class| {
                self.requests.get_or_create_owned(&ServerClassLabels {
                    upstream: upstream.to_string(),
                    server: server.to_string(),
                    class,
                })
            }),
            up: self.up.get_or_create_owned(&labels),
            in_flight: self.in_flight.get_or_create_owned(&labels),
            ejections: self.ejections.get_or_create_owned(&labels),
        }
    }
}

/// One upstream server's metric handles (clones share the counts).
#[derive(Clone, Debug)]
pub struct ServerMetrics {
    /// Striped per thread: the workers count without sharing a cache line.
    requests: [StripedCounter; 6],
    /// 1 while taken, 0 while ejected or failing its probe.
    pub up: Gauge,
    /// Requests whose response has not ended (set by the proxy when it renders the
    /// metrics, from its own count).
    pub in_flight: Gauge,
    /// Ejections.
    pub ejections: Counter,
}

impl ServerMetrics {
    /// Count a request: `status` is the response's, `None` when no response head came.
    pub fn request(&self, status: Option<u16>) {
        let i = match status {
            Some(s @ 100..=599) => usize::from(s / 100 - 1),
            _ => 5,
        };
        self.requests[i].inc();
    }

    /// Requests counted under `class` (one of [`UPSTREAM_CLASSES`]).
    pub fn request_count(&self, class: &str) -> u64 {
        UPSTREAM_CLASSES
            .iter()
            .position(|c| *c == class)
            .map_or(0, |i| self.requests[i].get())
    }
}
