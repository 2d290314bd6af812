//! Outcomes per time bucket, by send time on the wall clock.
//!
//! Bucket edges are at `k x width + phase` ns since the Unix epoch, where `phase` is the
//! window offset modulo the width: when the window is a multiple of the bucket width,
//! every window boundary falls on a bucket edge. A run long enough to need more than
//! [`MAX_BUCKETS`] buckets has its bucket width doubled (neighbours merged) as often as
//! needed, so memory stays bounded whatever the duration.

use hdrhistogram::Histogram;

use crate::histogram::new_histogram;

/// The most buckets kept; beyond, the width doubles.
pub const MAX_BUCKETS: usize = 4096;

/// One bucket's counts (by send time) and response latencies (µs).
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Requests sent.
    pub sent: u64,
    /// Responses with a status that is not a denial.
    pub admitted: u64,
    /// Responses with a denial status.
    pub denied: u64,
    /// Requests without a response.
    pub errors: u64,
    /// Of `sent`, attempts that were retries (polite client only).
    pub retries: u64,
    /// Latency of responses, µs (2 significant digits: enough for a p99 line).
    pub latency: Histogram<u64>,
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket {
            sent: 0,
            admitted: 0,
            denied: 0,
            errors: 0,
            retries: 0,
            latency: new_histogram(2),
        }
    }
}

impl Bucket {
    fn merge(&mut self, other: &Bucket) {
        self.sent += other.sent;
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.errors += other.errors;
        self.retries += other.retries;
        self.latency
            .add(&other.latency)
            .expect("histograms of the same bounds");
    }
}

/// Buckets from the one containing the start of the run onwards.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Wall instant (ns since the epoch) where bucket 0 starts.
    pub origin: u64,
    /// Bucket width, ns.
    pub width: u64,
    phase: u64,
    /// The buckets; index `k` covers `[origin + k x width, origin + (k+1) x width)`.
    pub buckets: Vec<Bucket>,
}

impl Timeline {
    /// A timeline starting at wall instant `start` with buckets of `width` ns whose edges
    /// are at multiples of `width` plus `phase`.
    pub fn new(start: u64, width: u64, phase: u64) -> Timeline {
        let width = width.max(1);
        let phase = phase % width;
        Timeline {
            origin: align_down(start, width, phase),
            width,
            phase,
            buckets: Vec::new(),
        }
    }

    /// The bucket for wall instant `t` (clamped to the first bucket if earlier).
    pub fn bucket_mut(&mut self, t: u64) -> &mut Bucket {
        let mut idx = (t.saturating_sub(self.origin) / self.width) as usize;
        while idx >= MAX_BUCKETS {
            self.coarsen();
            idx = (t.saturating_sub(self.origin) / self.width) as usize;
        }
        if idx >= self.buckets.len() {
            self.buckets.resize_with(idx + 1, Bucket::default);
        }
        &mut self.buckets[idx]
    }

    /// Double the width, merging neighbours.
    fn coarsen(&mut self) {
        let width = self.width * 2;
        let origin = align_down(self.origin, width, self.phase);
        let mut merged: Vec<Bucket> = Vec::new();
        for (k, b) in self.buckets.iter().enumerate() {
            let start = self.origin + k as u64 * self.width;
            let j = ((start - origin) / width) as usize;
            if j >= merged.len() {
                merged.resize_with(j + 1, Bucket::default);
            }
            merged[j].merge(b);
        }
        self.origin = origin;
        self.width = width;
        self.buckets = merged;
    }

    /// Wall instant where bucket `k` starts.
    pub fn start_of(&self, k: usize) -> u64 {
        self.origin + k as u64 * self.width
    }
}

fn align_down(t: u64, width: u64, phase: u64) -> u64 {
    let p = (t % width + width - phase % width) % width;
    t - p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_align_to_the_phase() {
        let mut t = Timeline::new(1_234, 100, 30);
        assert_eq!(t.origin, 1_230);
        t.bucket_mut(1_229).sent += 1; // before the origin: clamped into bucket 0
        t.bucket_mut(1_330).sent += 1;
        assert_eq!(t.buckets.len(), 2);
        assert_eq!(t.start_of(1), 1_330);
    }

    #[test]
    fn long_runs_coarsen_without_losing_counts() {
        let mut t = Timeline::new(0, 10, 0);
        for i in 0..(MAX_BUCKETS as u64 * 3) {
            let b = t.bucket_mut(i * 10 + 5);
            b.sent += 1;
            b.latency.record(i + 1).unwrap();
        }
        assert!(t.buckets.len() <= MAX_BUCKETS);
        assert_eq!(t.width, 40);
        let total: u64 = t.buckets.iter().map(|b| b.sent).sum();
        assert_eq!(total, MAX_BUCKETS as u64 * 3);
        assert!(
            t.buckets
                .iter()
                .take(t.buckets.len() - 1)
                .all(|b| b.sent == 4)
        );
        let hist_total: u64 = t.buckets.iter().map(|b| b.latency.len()).sum();
        assert_eq!(hist_total, total);
    }
}
