//! The fields of an adaptive policy as every configuration names them (the proxy's
//! `[[policy]]` keys, the server's `adaptive:` entries, Python's `Policy(...)` keywords):
//! one place for their defaults and checks.

use std::time::Duration;

use super::{AdaptiveSpec, AlgorithmKind, DropOn, Latency};

/// The `Retry-After` of a request an adaptive policy sheds (503), seconds: overload
/// passes as requests finish, not at a quota's reset.
pub const SHED_RETRY_AFTER_SECS: u64 = 1;

/// The floor of an adaptive policy without `min_limit`.
pub const DEFAULT_MIN_LIMIT: usize = 1;
/// The ceiling of an adaptive policy without `max_limit`.
pub const DEFAULT_MAX_LIMIT: usize = 200;
/// The start of an adaptive policy without `initial_limit` (raised to the floor).
pub const DEFAULT_INITIAL_LIMIT: usize = 20;
/// The queue timeout of an adaptive policy with a `queue` and no `queue_timeout`.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(1);

/// The fields of an adaptive policy as a configuration names them (the proxy's
/// `[[policy]]` keys, the server's `adaptive:` entries, Python's `Policy(...)` keywords),
/// `None` where not given: the one
/// place their defaults and checks live.
#[derive(Debug, Clone, Copy)]
pub struct AdaptiveFields<'a> {
    /// `adaptive`: `"gradient2"`, `"vegas"` or `"aimd"`.
    pub algorithm: &'a str,
    /// The floor, in requests at once (default [`DEFAULT_MIN_LIMIT`]).
    pub min_limit: Option<usize>,
    /// The ceiling, in requests at once (default [`DEFAULT_MAX_LIMIT`]).
    pub max_limit: Option<usize>,
    /// The start (default [`DEFAULT_INITIAL_LIMIT`] within the floor and ceiling).
    pub initial_limit: Option<usize>,
    /// `"head"` (default) or `"end"`: where a request's latency ends.
    pub latency: Option<&'a str>,
    /// Responses that count as drops: `5xx`, `timeout` (default both).
    pub drop_on: Option<&'a [String]>,
    /// Requests that wait for a permit (default 0: none wait).
    pub queue: Option<usize>,
    /// How long one waits (default [`DEFAULT_QUEUE_TIMEOUT`] with a queue, else zero).
    pub queue_timeout: Option<Duration>,
}

impl AdaptiveFields<'_> {
    /// Fields naming `algorithm` and nothing else.
    pub fn new(algorithm: &str) -> AdaptiveFields<'_> {
        AdaptiveFields {
            algorithm,
            min_limit: None,
            max_limit: None,
            initial_limit: None,
            latency: None,
            drop_on: None,
            queue: None,
            queue_timeout: None,
        }
    }

    /// The spec these fields describe (no classes), or a message naming the bad field.
    pub fn spec(&self) -> Result<AdaptiveSpec, String> {
        let algorithm =
            AlgorithmKind::parse(self.algorithm).map_err(|e| format!("adaptive: {e}"))?;
        let min = self.min_limit.unwrap_or(DEFAULT_MIN_LIMIT);
        let max = self.max_limit.unwrap_or(DEFAULT_MAX_LIMIT);
        let initial = self
            .initial_limit
            .unwrap_or(DEFAULT_INITIAL_LIMIT.clamp(min, max.max(min)));
        let mut spec = AdaptiveSpec::new(algorithm, min, initial, max)
            .map_err(|e| format!("min_limit, initial_limit, max_limit: {e}"))?;
        spec.latency = match self.latency {
            None | Some("head") => Latency::Head,
            Some("end") => Latency::End,
            Some(other) => {
                return Err(format!("latency: {other:?} is not \"head\" or \"end\""));
            }
        };
        if let Some(words) = self.drop_on {
            spec.drop_on = DropOn::parse(words).map_err(|e| format!("drop_on: {e}"))?;
        }
        let queue = self.queue.unwrap_or(0);
        let timeout = self.queue_timeout.unwrap_or(if queue > 0 {
            DEFAULT_QUEUE_TIMEOUT
        } else {
            Duration::ZERO
        });
        spec.with_queue(queue, timeout).map_err(|e| e.to_string())
    }
}
