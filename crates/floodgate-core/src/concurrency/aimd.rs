//! Additive increase, multiplicative decrease.

use std::time::Duration;

use super::{LimitAlgorithm, Sample, check_range};
use crate::ConfigError;

/// AIMD settings (concurrency-limits' `AIMDLimit` defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AimdConfig {
    /// Starting limit (default 20).
    pub initial: usize,
    /// Floor (default 20).
    pub min: usize,
    /// Ceiling (default 200).
    pub max: usize,
    /// Factor applied on a drop, in `[0.5, 1)` (default 0.9).
    pub backoff_ratio: f64,
    /// An RTT above this counts as a drop (default 5 s).
    pub timeout: Duration,
}

impl Default for AimdConfig {
    fn default() -> Self {
        AimdConfig {
            initial: 20,
            min: 20,
            max: 200,
            backoff_ratio: 0.9,
            timeout: Duration::from_secs(5),
        }
    }
}

/// On a drop or `rtt > timeout`: `limit = floor(limit x backoff_ratio)`; else when
/// `inflight x 2 >= limit`: `limit + 1`; then clamp to `[min, max]`.
///
/// ```
/// use floodgate_core::concurrency::{Aimd, AimdConfig, LimitAlgorithm, Sample};
/// use floodgate_core::Nanos;
/// use std::time::Duration;
///
/// let mut a = Aimd::new(AimdConfig { initial: 50, min: 1, ..AimdConfig::default() })?;
/// let s = |inflight, dropped| Sample { start: Nanos::ZERO, rtt: Duration::from_millis(5), inflight, dropped };
/// assert_eq!(a.on_sample(&s(30, false)), 51);
/// assert_eq!(a.on_sample(&s(10, false)), 51); // app-limited: unchanged
/// assert_eq!(a.on_sample(&s(30, true)), 45); // floor(51 x 0.9)
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    cfg: AimdConfig,
    limit: usize,
}

impl Aimd {
    /// Validate and build.
    pub fn new(cfg: AimdConfig) -> Result<Self, ConfigError> {
        check_range(cfg.min, cfg.initial, cfg.max)?;
        if !(0.5..1.0).contains(&cfg.backoff_ratio) {
            return Err(ConfigError::Inconsistent(format!(
                "AIMD backoff_ratio must be in [0.5, 1), got {}",
                cfg.backoff_ratio
            )));
        }
        Ok(Aimd {
            cfg,
            limit: cfg.initial,
        })
    }
}

impl LimitAlgorithm for Aimd {
    fn limit(&self) -> usize {
        self.limit
    }

    fn on_sample(&mut self, s: &Sample) -> usize {
        let mut limit = self.limit;
        if s.dropped || s.rtt > self.cfg.timeout {
            limit = (limit as f64 * self.cfg.backoff_ratio) as usize;
        } else if s.inflight.saturating_mul(2) >= limit {
            limit += 1;
        }
        self.limit = limit.clamp(self.cfg.min, self.cfg.max);
        self.limit
    }
}
