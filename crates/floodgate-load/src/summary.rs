//! What each worker hands back at the end of a run, for the report.

use hdrhistogram::Histogram;

use crate::histogram::new_histogram;
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
pub(crate) struct Waits {
    /// Slept before attempts because of pacing or a host blocked by `Retry-After`, ns.
    pub paced_ns: u64,
    /// Slept between an attempt and its retry (`Retry-After` plus jitter, or backoff), ns.
    pub retry_ns: u64,
    /// Each retry wait, µs.
    pub retry_wait: Histogram<u64>,
    /// Requests stopped (deadline or Ctrl-C) while waiting.
    pub abandoned: u64,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            paced_ns: 0,
            retry_ns: 0,
            retry_wait: new_histogram(3),
            abandoned: 0,
        }
    }
}

impl Waits {
    pub(crate) fn merge(&mut self, other: &Waits) {
        self.paced_ns += other.paced_ns;
        self.retry_ns += other.retry_ns;
        self.abandoned += other.abandoned;
        self.retry_wait
            .add(&other.retry_wait)
            .expect("histograms of the same bounds");
    }
}
