//! What the admin API shows of an adaptive policy ([`AdaptiveView`]), as
//! [`PartitionedLimiter::view`](super::PartitionedLimiter::view) reads it: the same
//! figures as the `floodgate_adaptive_*` metrics, counted by the limiter itself.

use std::time::Duration;

/// An adaptive policy now: its limit, the permits held and the queue, per class the
/// permits held and the requests shed, and the latency samples.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveView {
    /// The policy's name.
    pub name: String,
    /// The algorithm's config name (`aimd`, `gradient2`, `vegas`).
    pub algorithm: &'static str,
    /// The current limit `L` (permits at once).
    pub limit: usize,
    /// The floor of the limit.
    pub min_limit: usize,
    /// The ceiling of the limit.
    pub max_limit: usize,
    /// Permits held, all classes.
    pub in_flight: usize,
    /// Requests waiting in the queue, all classes.
    pub queued: usize,
    /// The queue's bound (0: no queue).
    pub queue: usize,
    /// The classes, highest priority first.
    pub classes: Vec<ClassView>,
    /// Latency samples fed to the algorithm since start (requests released with an
    /// outcome other than `Ignore`).
    pub samples: u64,
    /// Their mean (`None` before the first).
    pub mean_latency: Option<Duration>,
}

/// One class of an [`AdaptiveView`].
#[derive(Debug, Clone, PartialEq)]
pub struct ClassView {
    /// The class's name.
    pub name: String,
    /// Its guaranteed share of the limit, in `[0, 1]`.
    pub share: f64,
    /// Permits it holds.
    pub in_flight: usize,
    /// Its requests waiting in the queue.
    pub queued: usize,
    /// Its requests refused with 503 (dry-run: that would have been) since start.
    pub shed: u64,
}
