//! What the metrics and the admin API show of the quota buckets: per bucket, each live
//! client's demand and share, as this replica last divided it (with Redis, the clients
//! of every replica). Entries are dropped when the bucket's time to live passes without a
//! division; at most a bounded number of buckets are shown.
//!
//! `floodgate_quota_demand{bucket,client}` and `floodgate_quota_assigned{bucket,client}`
//! (requests per second), and `floodgate_quota_limit{bucket}`, are read from here at
//! scrape time, as are the counts of the stream's messages: usage reports received
//! (`floodgate_quota_reports_total`, each answered) and assignments pushed unasked
//! (`floodgate_quota_pushes_total`), the round trips the quota clients make.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use floodgate_core::Clock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// One bucket as last divided.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BucketView {
    /// The rule that matched (`DOMAIN|key=value,...`, or `(default)`).
    pub rule: String,
    /// The global limit, requests per second.
    pub limit: f64,
    /// When it was last divided, ms since the Unix epoch.
    pub divided_ms: u64,
    /// How long that division holds, ms.
    pub ttl_ms: u64,
    /// Each live client: its demand and its share, requests per second.
    pub clients: Vec<ClientView>,
}

/// One client of a bucket.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClientView {
    /// The client.
    pub client: String,
    /// Its demand, requests per second.
    pub demand: f64,
    /// Its share, requests per second.
    pub share: f64,
}

/// The buckets shown, by bucket name.
pub struct QuotaView {
    buckets: Mutex<BTreeMap<String, BucketView>>,
    max: usize,
    clock: Arc<dyn Clock>,
    reports: AtomicU64,
    pushes: AtomicU64,
}

impl std::fmt::Debug for QuotaView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaView").field("max", &self.max).finish()
    }
}

impl QuotaView {
    /// A view of at most `max` buckets, ageing by `clock` (ns since the Unix epoch).
    pub fn new(max: usize, clock: Arc<dyn Clock>) -> QuotaView {
        QuotaView {
            buckets: Mutex::new(BTreeMap::new()),
            max,
            clock,
            reports: AtomicU64::new(0),
            pushes: AtomicU64::new(0),
        }
    }

    /// Count one message of usage reports received (each is answered).
    pub fn count_report(&self) {
        self.reports.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one message of assignments pushed without a report asking.
    pub fn count_push(&self) {
        self.pushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages of usage reports received, and of assignments pushed, since start.
    pub fn messages(&self) -> (u64, u64) {
        (
            self.reports.load(Ordering::Relaxed),
            self.pushes.load(Ordering::Relaxed),
        )
    }

    fn now_ms(&self) -> u64 {
        self.clock.now().0 / 1_000_000
    }

    /// Record `bucket`'s latest division (ignored for a new bucket when `max` are shown
    /// and none has expired).
    pub fn set(&self, bucket: &str, view: BucketView) {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !b.contains_key(bucket) && b.len() >= self.max {
            let now = self.now_ms();
            b.retain(|_, v| v.divided_ms.saturating_add(v.ttl_ms) > now);
            if b.len() >= self.max {
                return;
            }
        }
        b.insert(bucket.to_string(), view);
    }

    /// The buckets whose last division still holds, by name.
    pub fn snapshot(&self) -> BTreeMap<String, BucketView> {
        let now = self.now_ms();
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        b.retain(|_, v| v.divided_ms.saturating_add(v.ttl_ms) > now);
        b.clone()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    bucket: String,
    client: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BucketLabels {
    bucket: String,
}

/// The metrics collector over a [`QuotaView`].
#[derive(Debug)]
pub struct QuotaCollector(pub Arc<QuotaView>);

impl Collector for QuotaCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (reports, pushes) = self.0.messages();
        for (name, help, n) in [
            (
                "floodgate_quota_reports",
                "Quota streams: messages of usage reports received (each answered)",
                reports,
            ),
            (
                "floodgate_quota_pushes",
                "Quota streams: messages of assignments pushed without a report asking",
                pushes,
            ),
        ] {
            ConstCounter::new(n).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        let buckets = self.0.snapshot();
        if buckets.is_empty() {
            return Ok(());
        }
        let mut limit = encoder.encode_descriptor(
            "floodgate_quota_limit",
            "Quota bucket: the global limit divided among its clients, requests per second",
            None,
            MetricType::Gauge,
        )?;
        for (bucket, v) in &buckets {
            let labels = BucketLabels {
                bucket: bucket.clone(),
            };
            ConstGauge::new(v.limit).encode(limit.encode_family(&labels)?)?;
        }
        for (name, help, pick) in [
            (
                "floodgate_quota_demand",
                "Quota bucket: a client's reported demand (allowed + denied over the elapsed time), requests per second",
                (|c: &ClientView| c.demand) as fn(&ClientView) -> f64,
            ),
            (
                "floodgate_quota_assigned",
                "Quota bucket: a client's share of the limit, requests per second",
                |c: &ClientView| c.share,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (bucket, v) in &buckets {
                for c in &v.clients {
                    let labels = ClientLabels {
                        bucket: bucket.clone(),
                        client: c.client.clone(),
                    };
                    ConstGauge::new(pick(c)).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::{ManualClock, Nanos};
    use prometheus_client::registry::Registry;

    fn scrape(view: &Arc<QuotaView>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(QuotaCollector(view.clone())));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn the_metrics_show_each_clients_share_and_count_the_messages() {
        let clock = Arc::new(ManualClock::new(Nanos::from_secs(1_000)));
        let view = Arc::new(QuotaView::new(10, clock.clone()));
        let text = scrape(&view);
        assert!(text.contains("floodgate_quota_reports_total 0"), "{text}");
        assert!(!text.contains("floodgate_quota_limit"), "{text}");
        view.count_report();
        view.count_report();
        view.count_push();
        view.set(
            "edge|policy=api",
            BucketView {
                rule: "edge|policy=api".into(),
                limit: 100.0,
                divided_ms: 1_000_000,
                ttl_ms: 2_000,
                clients: vec![
                    ClientView {
                        client: "a-0".into(),
                        demand: 160.0,
                        share: 60.0,
                    },
                    ClientView {
                        client: "a-1".into(),
                        demand: 40.0,
                        share: 40.0,
                    },
                ],
            },
        );
        let text = scrape(&view);
        for line in [
            "floodgate_quota_reports_total 2",
            "floodgate_quota_pushes_total 1",
            "floodgate_quota_limit{bucket=\"edge|policy=api\"} 100.0",
            "floodgate_quota_demand{bucket=\"edge|policy=api\",client=\"a-0\"} 160.0",
            "floodgate_quota_assigned{bucket=\"edge|policy=api\",client=\"a-1\"} 40.0",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        // the division's time to live passed: the bucket leaves, the counts stay
        clock.advance(std::time::Duration::from_secs(3));
        let text = scrape(&view);
        assert!(!text.contains("floodgate_quota_limit"), "{text}");
        assert!(text.contains("floodgate_quota_reports_total 2"), "{text}");
    }
}
