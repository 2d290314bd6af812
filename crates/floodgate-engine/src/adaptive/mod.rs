//! Adaptive concurrency limits with priority classes, for every surface: one limit `L`
//! that adapts to the backend's latency (an algorithm of [`floodgate_core::concurrency`]:
//! AIMD, Vegas, Gradient2), shared by classes of requests (e.g. `critical`, `default`,
//! `sheddable`), each with a guaranteed share of `L`. Under pressure the lowest class is
//! refused first. The spec is [`AdaptiveSpec`]; the limiter is [`PartitionedLimiter`],
//! whose [`AdaptivePermit`]s time each request and feed the algorithm.
//!
//! # The admission rule
//! Classes are listed highest priority first. With `L` the current limit, `total` the
//! requests in flight (all classes), `in_flight(c)` those of class `c`, and the guarantee
//! `g(c) = floor(share(c) x L)`, a request of class `c` is admitted when
//!
//! 1. `total < L` (never more than `L` in flight), and
//! 2. either `in_flight(c) < g(c)` (within its guarantee), or
//!    `total + reserved_above(c) < L` (it borrows capacity nobody above it has a claim on),
//!
//! where `reserved_above(c)` is the sum over the classes `h` above `c` that are
//! **demanding** (a request of `h` arrived within the last [`AdaptiveSpec::demand_window`])
//! of `g(h) - in_flight(h)` (0 when negative). So a class borrows freely what idle
//! classes leave unused; a class above it that starts asking again gets its guarantee
//! back as the borrowed permits are released (requests finish; none is cut). The highest
//! class borrows from everyone; the lowest is refused first. A class with share 0 only
//! ever borrows.
//!
//! # The queue
//! With `queue = M`, up to `M` refused requests (all classes) wait for a permit, each at
//! most `queue_timeout`; when a permit is released the waiters are served highest class
//! first (first come, first served within a class), each as far as the rule above
//! admits it. Past its deadline a waiter is refused.
//!
//! When the queue is full and a request of class `c` is not admitted, it takes the place
//! of a waiter of a lower class if there is one: the waiter of the lowest class below
//! `c`, the one queued last within that class, is refused as if the queue had been full
//! (a surface answers 503 with `Retry-After`) and the request is queued. A waiter is
//! never evicted by a request of its own class or of a lower one, and a waiter's
//! deadline stays what it was. So under overload the queue fills with the highest
//! classes asking, and a freed permit goes to them.
//!
//! **A class under pressure**: for a [`AdaptiveSpec::demand_window`] after a request of
//! class `c` lost its place for a full queue (refused at once, or evicted by a higher
//! class), the waiters of `c` are served last come first, and a request of `c` queued
//! then waits at most [`PRESSURE_WAIT`] times the mean latency of the requests let
//! through (an exponential average of [`LATENCY_WINDOW`] samples), or `queue_timeout`
//! if that is shorter. A class that overflows the queue asks for more than the backend
//! will take of it in time: the ones served are then those that waited least, so the
//! latency of what gets through stays near the backend's own, and those left over are
//! refused sooner. A class that only queues bursts, as the highest class does while it
//! asks for less than the capacity, stays first come first with the whole
//! `queue_timeout`.
//!
//! # Samples
//! A permit is released with an [`Outcome`]: `Success` (its latency is a sample),
//! `Dropped` (a sample with `dropped`: a 5xx or an upstream timeout, as
//! [`DropOn`] says) or `Ignore` (no sample: the client went away). A surface releases it
//! on the response head or the body's end ([`Latency`]). Time comes from a
//! [`floodgate_core::Clock`].

mod fields;
mod limiter;
#[cfg(test)]
mod tests;
mod view;

use std::time::Duration;

use floodgate_core::ConfigError;
use floodgate_core::concurrency::{
    Aimd, AimdConfig, Gradient2, Gradient2Baseline, Gradient2Config, LimitAlgorithm, Vegas,
    VegasConfig,
};

pub use fields::{
    AdaptiveFields, DEFAULT_INITIAL_LIMIT, DEFAULT_MAX_LIMIT, DEFAULT_MIN_LIMIT,
    DEFAULT_QUEUE_TIMEOUT, SHED_RETRY_AFTER_SECS,
};
pub use limiter::{AdaptivePermit, Admitted, Outcome, PartitionedLimiter, Refused};
pub use view::{AdaptiveView, ClassView};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// The most classes an adaptive policy may have.
pub const MAX_CLASSES: usize = 16;

/// The longest queue timeout accepted.
pub const MAX_QUEUE_TIMEOUT: Duration = crate::inflight::MAX_QUEUE_TIMEOUT;

/// The highest `max_limit` accepted.
pub const MAX_LIMIT: usize = 1_000_000;

/// A request of a class under pressure (module docs, the queue) waits at most this many
/// times the mean latency of the requests let through (or `queue_timeout`, if shorter).
pub const PRESSURE_WAIT: u32 = 2;

/// Samples in the exponential average of the latency that [`PRESSURE_WAIT`] multiplies
/// (the first 10 are a plain mean).
pub const LATENCY_WINDOW: usize = 40;

/// The algorithm driving the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgorithmKind {
    /// Additive increase, multiplicative decrease ([`Aimd`]): down by 10% on a drop or a
    /// latency above its timeout (5 s), up by 1 otherwise.
    Aimd,
    /// TCP Vegas ([`Vegas`]): from the queue estimated against the lowest latency seen.
    Vegas,
    /// Gradient2 ([`Gradient2`]): from the ratio of a baseline to the current latency,
    /// here in rounds of samples against the floor of the round means
    /// ([`Gradient2Baseline::SERVER`]), so that a lasting overload does not become the
    /// baseline: the limit settles where latency is `rtt_tolerance` (1.5) times the
    /// floor, near the backend's own concurrency, instead of growing to the ceiling.
    Gradient2,
}

impl AlgorithmKind {
    /// The config word: `aimd`, `vegas`, `gradient2`.
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmKind::Aimd => "aimd",
            AlgorithmKind::Vegas => "vegas",
            AlgorithmKind::Gradient2 => "gradient2",
        }
    }

    /// The kind named `word`, or an error listing the three.
    pub fn parse(word: &str) -> Result<AlgorithmKind, ConfigError> {
        match word {
            "aimd" => Ok(AlgorithmKind::Aimd),
            "vegas" => Ok(AlgorithmKind::Vegas),
            "gradient2" => Ok(AlgorithmKind::Gradient2),
            other => Err(ConfigError::Inconsistent(format!(
                "unknown adaptive algorithm {other:?}; expected gradient2, vegas or aimd"
            ))),
        }
    }
}

/// When a request's latency is taken, and its permit released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Latency {
    /// At the response head (the time to first byte of the backend's answer).
    #[default]
    Head,
    /// At the end of the response body (a streaming answer holds its permit until done).
    End,
}

/// Which responses count as drops (the backend overloaded) rather than successes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropOn {
    /// Every 5xx status.
    pub server_errors: bool,
    /// An upstream timeout: status 504 (what the proxy answers when no response head
    /// came in time), and a service error (no response at all).
    pub timeouts: bool,
}

impl Default for DropOn {
    fn default() -> Self {
        DropOn {
            server_errors: true,
            timeouts: true,
        }
    }
}

impl DropOn {
    /// From the config words `5xx` and `timeout` (an empty list: nothing is a drop).
    pub fn parse<S: AsRef<str>>(words: &[S]) -> Result<DropOn, ConfigError> {
        let mut d = DropOn {
            server_errors: false,
            timeouts: false,
        };
        for w in words {
            match w.as_ref() {
                "5xx" => d.server_errors = true,
                "timeout" => d.timeouts = true,
                other => {
                    return Err(ConfigError::Inconsistent(format!(
                        "unknown drop_on value {other:?}; expected \"5xx\" or \"timeout\""
                    )));
                }
            }
        }
        Ok(d)
    }

    /// The outcome of a response with `status` (`None`: the service failed with no
    /// response).
    pub fn outcome(self, status: Option<u16>) -> Outcome {
        match status {
            None if self.timeouts => Outcome::Dropped,
            None => Outcome::Success,
            Some(504) if self.timeouts || self.server_errors => Outcome::Dropped,
            Some(500..=599) if self.server_errors => Outcome::Dropped,
            Some(_) => Outcome::Success,
        }
    }
}

/// One priority class: its name and guaranteed share of the limit.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSpec {
    /// The name (`class` label of the metrics): 1 to 64 printable ASCII characters.
    pub name: String,
    /// The fraction of the limit guaranteed to the class, in `[0, 1]`.
    pub share: f64,
}

/// An adaptive policy: algorithm, floor, ceiling, start, when latency is taken, what is
/// a drop, the queue and the classes (highest priority first).
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveSpec {
    /// The algorithm.
    pub algorithm: AlgorithmKind,
    /// The floor: the limit never goes below it (>= 1).
    pub min_limit: usize,
    /// The ceiling: the limit never goes above it (<= [`MAX_LIMIT`]).
    pub max_limit: usize,
    /// The limit at start, in `[min_limit, max_limit]`.
    pub initial_limit: usize,
    /// When latency is taken.
    pub latency: Latency,
    /// Which responses are drops.
    pub drop_on: DropOn,
    /// Requests that may wait for a permit (0: refused at once).
    pub queue: usize,
    /// The longest a request waits in the queue.
    pub queue_timeout: Duration,
    /// A class is demanding (its unused guarantee is kept from the classes below it)
    /// while one of its requests arrived within this long (default 1 s).
    pub demand_window: Duration,
    /// The classes, highest priority first (at least one; shares summing to at most 1).
    pub classes: Vec<ClassSpec>,
}

impl AdaptiveSpec {
    /// Floor, ceiling and start for `algorithm`, latency at the head, drops on 5xx and
    /// timeouts, no queue, one class `default` with the whole limit.
    pub fn new(
        algorithm: AlgorithmKind,
        min_limit: usize,
        initial_limit: usize,
        max_limit: usize,
    ) -> Result<AdaptiveSpec, ConfigError> {
        let spec = AdaptiveSpec {
            algorithm,
            min_limit,
            max_limit,
            initial_limit,
            latency: Latency::Head,
            drop_on: DropOn::default(),
            queue: 0,
            queue_timeout: Duration::ZERO,
            demand_window: Duration::from_secs(1),
            classes: vec![ClassSpec {
                name: "default".into(),
                share: 1.0,
            }],
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Let up to `queue` requests wait up to `timeout` each.
    pub fn with_queue(mut self, queue: usize, timeout: Duration) -> Result<Self, ConfigError> {
        self.queue = queue;
        self.queue_timeout = timeout;
        self.validate()?;
        Ok(self)
    }

    /// These classes (highest priority first) instead.
    pub fn with_classes(mut self, classes: Vec<ClassSpec>) -> Result<Self, ConfigError> {
        self.classes = classes;
        self.validate()?;
        Ok(self)
    }

    /// Check every field; the error names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        floodgate_core::concurrency::check_range(
            self.min_limit,
            self.initial_limit,
            self.max_limit,
        )?;
        if self.max_limit > MAX_LIMIT {
            return Err(ConfigError::Overflow {
                what: "max_limit",
                detail: format!("{} is above the maximum of {MAX_LIMIT}", self.max_limit),
            });
        }
        if self.queue > 0 && self.queue_timeout.is_zero() {
            return Err(ConfigError::Zero {
                what: "queue_timeout (with a queue)",
            });
        }
        if self.queue_timeout > MAX_QUEUE_TIMEOUT {
            return Err(ConfigError::Overflow {
                what: "queue_timeout",
                detail: format!(
                    "{:?} is above the maximum of {MAX_QUEUE_TIMEOUT:?}",
                    self.queue_timeout
                ),
            });
        }
        if self.demand_window.is_zero() {
            return Err(ConfigError::Zero {
                what: "demand_window",
            });
        }
        if self.classes.is_empty() || self.classes.len() > MAX_CLASSES {
            return Err(ConfigError::Inconsistent(format!(
                "an adaptive policy needs 1 to {MAX_CLASSES} classes, got {}",
                self.classes.len()
            )));
        }
        let mut sum = 0.0;
        for (i, c) in self.classes.iter().enumerate() {
            if c.name.is_empty()
                || c.name.len() > 64
                || !c
                    .name
                    .bytes()
                    .all(|b| (0x21..0x7f).contains(&b) && b != b'"')
            {
                return Err(ConfigError::Inconsistent(format!(
                    "class name {:?} must be 1 to 64 printable ASCII characters without spaces or quotes",
                    c.name
                )));
            }
            if self.classes[..i].iter().any(|o| o.name == c.name) {
                return Err(ConfigError::Inconsistent(format!(
                    "class {:?} is listed twice",
                    c.name
                )));
            }
            if !(c.share.is_finite() && (0.0..=1.0).contains(&c.share)) {
                return Err(ConfigError::Inconsistent(format!(
                    "class {:?}: share must be within [0, 1], got {}",
                    c.name, c.share
                )));
            }
            sum += c.share;
        }
        if sum > 1.0 + 1e-9 {
            return Err(ConfigError::Inconsistent(format!(
                "the classes' shares add up to {sum}, above 1"
            )));
        }
        Ok(())
    }

    /// The algorithm, built at the spec's floor, ceiling and start (otherwise
    /// concurrency-limits' defaults).
    pub fn build_algorithm(&self) -> Result<Box<dyn LimitAlgorithm>, ConfigError> {
        let (min, initial, max) = (self.min_limit, self.initial_limit, self.max_limit);
        Ok(match self.algorithm {
            AlgorithmKind::Aimd => Box::new(Aimd::new(AimdConfig {
                min,
                initial,
                max,
                ..AimdConfig::default()
            })?),
            AlgorithmKind::Vegas => Box::new(Vegas::new(VegasConfig {
                min,
                initial,
                max,
                ..VegasConfig::default()
            })?),
            AlgorithmKind::Gradient2 => Box::new(Gradient2::new(Gradient2Config {
                min,
                initial,
                max,
                baseline: Gradient2Baseline::SERVER,
                ..Gradient2Config::default()
            })?),
        })
    }

    /// The index of the class named `name`.
    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.name == name)
    }
}

/// What a surface does with a request's permits when the response head comes (`status`;
/// `None`: the service failed with no response): each permit whose latency is taken at
/// the head ([`Latency::Head`]), or whose request failed, is released now with the
/// outcome its [`DropOn`] gives; the others get that outcome preset and are returned, to
/// be held by the body until its end
/// ([`LeaseBody::with_permits`](crate::leases::LeaseBody::with_permits)).
pub fn at_head(permits: Vec<AdaptivePermit>, status: Option<u16>) -> Vec<AdaptivePermit> {
    let mut held = Vec::new();
    for mut p in permits {
        let Some(spec) = p.spec() else { continue };
        let outcome = spec.drop_on.outcome(status);
        if spec.latency == Latency::Head || status.is_none() {
            p.release(outcome);
        } else {
            p.preset(outcome);
            held.push(p);
        }
    }
    held
}

/// One adaptive policy's series, by class index (the metrics' `adaptive` makes them).
#[derive(Clone, Debug)]
pub struct AdaptiveMetrics {
    /// `floodgate_adaptive_limit{policy}`.
    pub limit: Gauge,
    /// `floodgate_adaptive_in_flight{policy, class}`, by class index.
    pub in_flight: Vec<Gauge>,
    /// `floodgate_adaptive_shed_total{policy, class}`, by class index.
    pub shed: Vec<Counter>,
    /// `floodgate_adaptive_latency_seconds{policy}`.
    pub latency: Histogram,
}
