//! Gradient2: the limit follows the ratio of a long-term to the current RTT.

use crate::time::duration_to_nanos;

use super::{LimitAlgorithm, Sample, check_range};
use crate::ConfigError;

/// Exponential average with a warm-up: the plain mean of the first `warmup` samples, then
/// `value = value x (1 - f) + sample x f` with `f = 2 / (window + 1)`
/// (concurrency-limits' `ExpAvgMeasurement`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpAvg {
    window: usize,
    warmup: usize,
    count: usize,
    sum: f64,
    value: f64,
}

impl ExpAvg {
    /// An empty average.
    pub fn new(window: usize, warmup: usize) -> Self {
        ExpAvg {
            window,
            warmup,
            count: 0,
            sum: 0.0,
            value: 0.0,
        }
    }

    /// Add a sample; returns the new value.
    pub fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / self.count as f64;
        } else {
            let f = 2.0 / (self.window as f64 + 1.0);
            self.value = self.value * (1.0 - f) + sample * f;
        }
        self.value
    }

    /// The current value.
    pub fn value(&self) -> f64 {
        self.value
    }

    /// Multiply the current value by `factor`.
    pub fn scale(&mut self, factor: f64) {
        self.value *= factor;
    }
}

/// Gradient2 settings (concurrency-limits' `Gradient2Limit` defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gradient2Config {
    /// Starting limit (default 20).
    pub initial: usize,
    /// Floor (default 20).
    pub min: usize,
    /// Ceiling (default 200).
    pub max: usize,
    /// Smoothing of limit changes, in `(0, 1]` (default 0.2).
    pub smoothing: f64,
    /// RTT growth tolerated before the limit comes down, >= 1 (default 1.5).
    pub rtt_tolerance: f64,
    /// Headroom added to `limit x gradient` (default 4).
    pub queue_size: usize,
    /// Samples in the long-term RTT average (default 600; the first 10 are a plain mean).
    pub long_window: usize,
}

impl Default for Gradient2Config {
    fn default() -> Self {
        Gradient2Config {
            initial: 20,
            min: 20,
            max: 200,
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            queue_size: 4,
            long_window: 600,
        }
    }
}

/// Gradient2, per sample with `short = rtt`:
///
/// * `long = long_avg.add(rtt)`; if `long / short > 2`, the stored average is scaled by
///   0.95 (the gradient below still uses `long` before scaling)
/// * `inflight < limit / 2`: unchanged (app-limited)
/// * `gradient = max(0.5, min(1.0, tolerance x long / short))`
/// * `new = limit x gradient + queue_size`
/// * `limit = clamp(limit x (1 - smoothing) + new x smoothing, min, max)`
///
/// Drops do not enter the formula: RTT alone drives it, as in concurrency-limits.
#[derive(Debug, Clone)]
pub struct Gradient2 {
    cfg: Gradient2Config,
    estimated: f64,
    long: ExpAvg,
    last_gradient: f64,
}

impl Gradient2 {
    /// Validate and build.
    pub fn new(cfg: Gradient2Config) -> Result<Self, ConfigError> {
        check_range(cfg.min, cfg.initial, cfg.max)?;
        if !(cfg.smoothing > 0.0 && cfg.smoothing <= 1.0) {
            return Err(ConfigError::Inconsistent(format!(
                "Gradient2 smoothing must be in (0, 1], got {}",
                cfg.smoothing
            )));
        }
        if !(cfg.rtt_tolerance >= 1.0 && cfg.rtt_tolerance.is_finite()) {
            return Err(ConfigError::Inconsistent(format!(
                "Gradient2 rtt_tolerance must be >= 1, got {}",
                cfg.rtt_tolerance
            )));
        }
        if cfg.long_window == 0 {
            return Err(ConfigError::Inconsistent(
                "Gradient2 long_window must be >= 1".into(),
            ));
        }
        Ok(Gradient2 {
            cfg,
            estimated: cfg.initial as f64,
            long: ExpAvg::new(cfg.long_window, 10),
            last_gradient: 1.0,
        })
    }

    /// The limit before truncation to an integer.
    pub fn estimated(&self) -> f64 {
        self.estimated
    }

    /// The long-term RTT average, in nanoseconds.
    pub fn long_rtt_nanos(&self) -> f64 {
        self.long.value()
    }

    /// The gradient of the last sample that changed the limit.
    pub fn last_gradient(&self) -> f64 {
        self.last_gradient
    }
}

impl LimitAlgorithm for Gradient2 {
    fn limit(&self) -> usize {
        self.estimated as usize
    }

    fn on_sample(&mut self, s: &Sample) -> usize {
        let short = duration_to_nanos(s.rtt).max(1) as f64;
        let long = self.long.add(short);
        if long / short > 2.0 {
            self.long.scale(0.95);
        }
        if (s.inflight as f64) < self.estimated / 2.0 {
            return self.limit();
        }
        let gradient = (self.cfg.rtt_tolerance * long / short).clamp(0.5, 1.0);
        self.last_gradient = gradient;
        let new = self.estimated * gradient + self.cfg.queue_size as f64;
        let new = self.estimated * (1.0 - self.cfg.smoothing) + new * self.cfg.smoothing;
        self.estimated = new.clamp(self.cfg.min as f64, self.cfg.max as f64);
        self.limit()
    }
}
