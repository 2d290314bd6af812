//! What each worker hands back at the end of a run, for the report.

use hdrhistogram::Histogram;

use crate::histogram::{Percentiles, new_histogram};
use crate::stats::Advertised;

/// What each worker hands back at the end.
#[derive(Default)]
pub(crate) struct WorkerSummary {
    pub advertised: Advertised,
    pub examples: [Option<String>; 3],
    /// Polite only.
    pub waits: Waits,
}

/// What a polite worker waited for.
#[derive(Default)]
pub(crate) struct Waits {
    /// Slept before attempts because of pacing or a host blocked by `Retry-After`, ns.
    pub paced_ns: u64,
    /// Slept between an attempt and its retry (`Retry-After` plus jitter, or backoff), ns.
    pub retry_ns: u64,
    /// Each retry wait, µs: created on the first retry (an HDR histogram of 1 µs to 1 h
    /// is about 360 KB, and a run may have thousands of workers that never retry).
    retry_wait: Option<Histogram<u64>>,
    /// Requests stopped (deadline or Ctrl-C) while waiting.
    pub abandoned: u64,
}

impl Waits {
    /// Note one retry wait of `us` microseconds (clamped to the histogram's bounds).
    pub(crate) fn record_retry_wait(&mut self, us: u64) {
        self.retry_wait
            .get_or_insert_with(|| new_histogram(3))
            .saturating_record(us.max(1));
    }

    /// The retry waits' percentiles (all zero when none was recorded).
    pub(crate) fn retry_wait(&self) -> Percentiles {
        self.retry_wait
            .as_ref()
            .map(Percentiles::of)
            .unwrap_or_default()
    }

    pub(crate) fn merge(&mut self, other: &Waits) {
        self.paced_ns += other.paced_ns;
        self.retry_ns += other.retry_ns;
        self.abandoned += other.abandoned;
        if let Some(theirs) = &other.retry_wait {
            self.retry_wait
                .get_or_insert_with(|| new_histogram(3))
                .add(theirs)
                .expect("histograms of the same bounds");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_never_retries_holds_no_histogram() {
        let mut w = WorkerSummary::default();
        assert!(w.waits.retry_wait.is_none());
        assert_eq!(w.waits.retry_wait(), Percentiles::default());
        let mut total = Waits::default();
        total.merge(&w.waits);
        assert!(total.retry_wait.is_none());
        w.waits.record_retry_wait(1500);
        w.waits.record_retry_wait(0);
        total.merge(&w.waits);
        let p = total.retry_wait();
        assert_eq!(p.count, 2);
        assert_eq!(p.max_ms, 1.5);
    }
}
