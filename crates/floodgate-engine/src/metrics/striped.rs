//! Counters, gauges and histograms for the request path, split into per-thread stripes: each
//! thread adds to its own cache line, so the proxy's worker threads never contend on a
//! metric (one shared atomic, or a histogram's lock, moved a cache line between cores on
//! every request). Reading sums the stripes; it is exact once the writers are done, and
//! may lag a concurrent write by that write.
//!
//! Both encode as `prometheus-client`'s own counter and histogram do.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Stripes per metric (threads beyond this share stripes, round robin).
const STRIPES: usize = 8;
/// Longest duration a [`StripedHistogram`] adds to its sum whole (2^44 ns, about 4.9
/// hours; longer ones add this): a stripe's 64-bit sum of nanoseconds then wraps only
/// after 2^20 of them, or 584 years of time observed in all.
const MAX_SUMMED_NS: u64 = 1 << 44;
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

/// A count that goes up and down (requests in flight): each thread adds and takes away
/// on its own stripe, so a stripe may go below zero when a count taken on one thread is
/// given back on another; the sum is the count.
#[derive(Debug, Clone, Default)]
pub struct StripedGauge {
    stripes: Arc<[Padded<AtomicI64>; STRIPES]>,
}

impl StripedGauge {
    /// Add one.
    pub fn inc(&self) {
        self.stripes[stripe()].0.fetch_add(1, Ordering::Relaxed);
    }

    /// Take one away.
    pub fn dec(&self) {
        self.stripes[stripe()].0.fetch_sub(1, Ordering::Relaxed);
    }

    /// The count: the sum of the stripes.
    pub fn get(&self) -> i64 {
        self.stripes
            .iter()
            .fold(0i64, |t, s| t.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

/// One thread's share of a histogram: observations per bucket (not cumulative; the last
/// is above every bound) and their sum in nanoseconds.
#[derive(Debug, Default)]
struct HistStripe {
    sum_ns: AtomicU64,
    buckets: [AtomicU64; MAX_BUCKETS + 1],
}

/// A histogram of durations, exposed in seconds, with fixed bucket bounds (upper bounds,
/// inclusive, as Prometheus's `le`). Per observation: a bucket found by binary search,
/// two atomic additions on this thread's stripe.
#[derive(Debug, Clone)]
pub struct StripedHistogram {
    inner: Arc<HistInner>,
}

#[derive(Debug)]
struct HistInner {
    /// Upper bounds, seconds (as given) and nanoseconds (as compared).
    bounds: Vec<f64>,
    bounds_ns: Vec<u64>,
    stripes: [Padded<HistStripe>; STRIPES],
}

impl StripedHistogram {
    /// A histogram with these upper bounds in seconds (sorted here; NaN and negative
    /// bounds are dropped, and any beyond the first [`MAX_BUCKETS`]).
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let mut bounds: Vec<f64> = bounds.into_iter().filter(|b| *b >= 0.0).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        bounds.truncate(MAX_BUCKETS);
        // `as` saturates: bounds past u64 nanoseconds (584 years) hold everything
        let bounds_ns = bounds.iter().map(|b| (b * 1e9).round() as u64).collect();
        StripedHistogram {
            inner: Arc::new(HistInner {
                bounds,
                bounds_ns,
                stripes: Default::default(),
            }),
        }
    }

    /// Record one duration.
    pub fn observe(&self, d: Duration) {
        let inner = &*self.inner;
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let bucket = inner.bounds_ns.partition_point(|b| *b < ns);
        let s = &inner.stripes[stripe()].0;
        s.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        s.sum_ns.fetch_add(ns.min(MAX_SUMMED_NS), Ordering::Relaxed);
    }

    /// (sum in seconds, count, observations per bucket: up to each bound, then above
    /// all of them as +Inf; not cumulative, as the encoder takes them).
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.inner;
        let mut sum_ns = 0u128;
        let mut per = vec![0u64; inner.bounds.len() + 1];
        for s in &inner.stripes {
            let s = &s.0;
            sum_ns += u128::from(s.sum_ns.load(Ordering::Relaxed));
            for (p, b) in per.iter_mut().zip(&s.buckets) {
                *p = p.wrapping_add(b.load(Ordering::Relaxed));
            }
        }
        let count = per.iter().fold(0u64, |t, n| t.wrapping_add(*n));
        let buckets = inner
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(per)
            .collect();
        (sum_ns as f64 / 1e9, count, buckets)
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
        // whole nanoseconds, and powers of two in seconds: sums exact in any order
        let values = [0.0, 2f64.powi(-9), 0.125, 0.5, 0.5, 8.0, 1024.0, 4096.0];
        let ours = StripedHistogram::new(exponential_buckets(1e-5, 2.0, 24));
        let theirs = Histogram::new(exponential_buckets(1e-5, 2.0, 24));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let ours = ours.clone();
                std::thread::spawn(move || {
                    for v in values {
                        ours.observe(Duration::from_secs_f64(v));
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
    fn a_gauge_taken_on_one_thread_and_given_back_on_another_sums_right() {
        let g = StripedGauge::default();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| (0..1000).for_each(|_| g.inc()));
            }
        });
        assert_eq!(g.get(), 3000);
        std::thread::scope(|s| {
            s.spawn(|| (0..2999).for_each(|_| g.dec()));
        });
        assert_eq!(g.get(), 1);
    }

    #[test]
    fn bounds_are_inclusive_and_bad_bounds_are_dropped() {
        let h = StripedHistogram::new([f64::NAN, 2.0, 1.0, 1.0, -3.0]);
        h.observe(Duration::from_secs(1));
        h.observe(Duration::from_nanos(1_000_000_001));
        h.observe(Duration::MAX);
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert_eq!(sum, 2.000000001 + MAX_SUMMED_NS as f64 / 1e9);
        assert_eq!(buckets, vec![(1.0, 1), (2.0, 1), (f64::INFINITY, 1)]);
    }
}
