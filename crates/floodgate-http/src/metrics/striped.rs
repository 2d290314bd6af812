//! Counters and histograms for the request path, split into per-thread stripes: each
//! thread adds to its own cache line, so the proxy's worker threads never contend on a
//! metric (one shared atomic, or a histogram's lock, moved a cache line between cores on
//! every request). Reading sums the stripes; it is exact once the writers are done, and
//! may lag a concurrent write by that write.
//!
//! Both encode as `prometheus-client`'s own counter and histogram do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Stripes per metric (threads beyond this share stripes, round robin).
const STRIPES: usize = 8;
/// Most bucket bounds a [`StripedHistogram`] takes.
pub const MAX_BUCKETS: usize = 30;

/// This thread's stripe.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// A value alone on its cache lines (two: adjacent-line prefetching pairs them).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// A monotonic counter.
#[derive(Debug, Clone, Default)]
pub struct StripedCounter {
    stripes: Arc<[Padded<AtomicU64>; STRIPES]>,
}

impl StripedCounter {
    /// Add one.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// Add `v`.
    pub fn inc_by(&self, v: u64) {
        self.stripes[stripe()].0.fetch_add(v, Ordering::Relaxed);
    }

    /// The total.
    pub fn get(&self) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |t, s| t.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

impl TypedMetric for StripedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for StripedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// One thread's share of a histogram: observations per bucket (not cumulative; the last
/// is above every bound), their count and their sum (f64 bits).
#[derive(Debug, Default)]
struct HistStripe {
    count: AtomicU64,
    sum: AtomicU64,
    buckets: [AtomicU64; MAX_BUCKETS + 1],
}

/// A histogram with fixed bucket bounds (upper bounds, inclusive, as Prometheus's `le`).
#[derive(Debug, Clone)]
pub struct StripedHistogram {
    inner: Arc<HistInner>,
}

#[derive(Debug)]
struct HistInner {
    bounds: Vec<f64>,
    stripes: [Padded<HistStripe>; STRIPES],
}

impl StripedHistogram {
    /// A histogram with these upper bounds (sorted ascending; at most [`MAX_BUCKETS`],
    /// the rest are dropped; NaN bounds are dropped).
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let mut bounds: Vec<f64> = bounds.into_iter().filter(|b| !b.is_nan()).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        bounds.truncate(MAX_BUCKETS);
        StripedHistogram {
            inner: Arc::new(HistInner {
                bounds,
                stripes: Default::default(),
            }),
        }
    }

    /// Record `v` (NaN counts in the top bucket and adds nothing to the sum).
    pub fn observe(&self, v: f64) {
        let inner = &*self.inner;
        let bucket = if v.is_nan() {
            inner.bounds.len()
        } else {
            inner.bounds.partition_point(|b| *b < v)
        };
        let s = &inner.stripes[stripe()].0;
        s.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        s.count.fetch_add(1, Ordering::Relaxed);
        if !v.is_nan() {
            // this thread's stripe: the exchange practically never retries
            let _ = s
                .sum
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                    Some((f64::from_bits(bits) + v).to_bits())
                });
        }
    }

    /// (sum, count, observations per bucket: up to each bound, then above all of them
    /// as +Inf; not cumulative, as the encoder takes them).
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.inner;
        let mut sum = 0.0;
        let mut count = 0u64;
        let mut per = vec![0u64; inner.bounds.len() + 1];
        for s in &inner.stripes {
            let s = &s.0;
            sum += f64::from_bits(s.sum.load(Ordering::Relaxed));
            count = count.wrapping_add(s.count.load(Ordering::Relaxed));
            for (p, b) in per.iter_mut().zip(&s.buckets) {
                *p = p.wrapping_add(b.load(Ordering::Relaxed));
            }
        }
        let buckets = inner
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(per)
            .collect();
        (sum, count, buckets)
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.snapshot().1
    }
}

impl TypedMetric for StripedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for StripedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    use prometheus_client::registry::Registry;

    fn text(name: &str, metric: impl prometheus_client::registry::Metric) -> String {
        let mut r = Registry::default();
        r.register(name, "help", metric);
        let mut out = String::new();
        encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn encodes_as_prometheus_clients_own_metrics() {
        // powers of two: their sums are exact in any order
        let values = [
            2f64.powi(-17),
            2f64.powi(-10),
            0.5,
            0.5,
            8.0,
            2f64.powi(30),
            0.0,
            -1.0,
        ];
        let ours = StripedHistogram::new(exponential_buckets(1e-5, 2.0, 24));
        let theirs = Histogram::new(exponential_buckets(1e-5, 2.0, 24));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let ours = ours.clone();
                std::thread::spawn(move || {
                    for v in values {
                        ours.observe(v);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for _ in 0..4 {
            for v in values {
                theirs.observe(v);
            }
        }
        assert_eq!(ours.count(), 32);
        assert_eq!(text("h", ours), text("h", theirs));

        let c = StripedCounter::default();
        let p = Counter::<u64>::default();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.inc();
                        p.inc();
                    }
                });
            }
        });
        assert_eq!(c.get(), 3000);
        assert_eq!(text("c", c), text("c", p));
    }

    #[test]
    fn nan_and_bad_bounds_do_not_panic() {
        let h = StripedHistogram::new([f64::NAN, 2.0, 1.0, 1.0]);
        h.observe(f64::NAN);
        h.observe(1.0);
        h.observe(f64::INFINITY);
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert_eq!(sum, f64::INFINITY);
        assert_eq!(buckets, vec![(1.0, 1), (2.0, 0), (f64::INFINITY, 2)]);
    }
}
