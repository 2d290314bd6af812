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
    /// Used by [`Gradient2Baseline::LongAverage`] only.
    pub long_window: usize,
    /// What the current RTT is compared with (default
    /// [`Gradient2Baseline::LongAverage`], concurrency-limits' way).
    pub baseline: Gradient2Baseline,
}

/// What Gradient2 compares the current RTT with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gradient2Baseline {
    /// concurrency-limits: every sample is compared with the exponential average of the
    /// last `long_window` samples. That average follows a sustained rise, so under an
    /// overload that lasts, latency that grew by less than `rtt_tolerance` becomes the
    /// new baseline and the limit keeps growing (up to `max`).
    LongAverage,
    /// The limit moves once per round of `round` samples (>= 1), from the round's mean
    /// RTT. The baseline is the floor of the round means: a round below it lowers it at
    /// once; a round above it raises it by `rise` (in `[0, 1]`) of the gap. A queue that
    /// persists so becomes the baseline only slowly (with `rise = 0.001`, about 1 % of
    /// the gap per 10 rounds), so under a lasting overload the limit settles where the
    /// round mean is `rtt_tolerance` times the floor (plus `queue_size` of headroom)
    /// instead of growing; a backend that became slower for good is followed at that
    /// pace, its limit meanwhile lower than needed (the safe side).
    Floor {
        /// Samples per round.
        round: usize,
        /// Share of the gap to a higher round mean the floor rises by, per round.
        rise: f64,
    },
}

impl Gradient2Baseline {
    /// The server side's choice: rounds of 20 samples, a floor rising by 0.1 % of the
    /// gap per round.
    pub const SERVER: Gradient2Baseline = Gradient2Baseline::Floor {
        round: 20,
        rise: 0.001,
    };
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
            baseline: Gradient2Baseline::LongAverage,
        }
    }
}

/// Gradient2. With [`Gradient2Baseline::LongAverage`] (concurrency-limits), per sample
/// with `short = rtt`:
///
/// * `long = long_avg.add(rtt)`; if `long / short > 2`, the stored average is scaled by
///   0.95 (the gradient below still uses `long` before scaling)
/// * `inflight < limit / 2`: unchanged (app-limited)
/// * `gradient = max(0.5, min(1.0, tolerance x long / short))`
/// * `new = limit x gradient + queue_size`
/// * `limit = clamp(limit x (1 - smoothing) + new x smoothing, min, max)`
///
/// With [`Gradient2Baseline::Floor`], per round of `round` samples, with `short` the
/// round's mean RTT and `long` the floor (module docs of the variant): the same formula,
/// where a round is app-limited when the largest `inflight` of its samples is below
/// `limit / 2`.
///
/// Drops do not enter the formula: RTT alone drives it, as in concurrency-limits.
///
/// ```
/// use floodgate_core::concurrency::{Gradient2, Gradient2Baseline, Gradient2Config, LimitAlgorithm, Sample};
/// use floodgate_core::Nanos;
/// use std::time::Duration;
///
/// let mut g = Gradient2::new(Gradient2Config {
///     min: 1,
///     baseline: Gradient2Baseline::SERVER,
///     ..Gradient2Config::default()
/// })?;
/// let s = |ms| Sample { start: Nanos::ZERO, rtt: Duration::from_millis(ms), inflight: 100, dropped: false };
/// // a floor of 20 ms, then a lasting overload at three times it: the limit comes down
/// // and stays down, the floor rising only slowly
/// (0..20).for_each(|_| { g.on_sample(&s(20)); });
/// let before = g.limit();
/// (0..2000).for_each(|_| { g.on_sample(&s(60)); });
/// assert!(g.limit() < before / 2, "{}", g.limit());
/// assert!(g.long_rtt_nanos() < 30e6, "{}", g.long_rtt_nanos());
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gradient2 {
    cfg: Gradient2Config,
    estimated: f64,
    long: ExpAvg,
    last_gradient: f64,
    round: Round,
    floor: Option<f64>,
}

/// The samples of the current round ([`Gradient2Baseline::Floor`]).
#[derive(Debug, Clone, Copy, Default)]
struct Round {
    count: usize,
    sum_nanos: f64,
    max_inflight: usize,
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
        if let Gradient2Baseline::Floor { round, rise } = cfg.baseline {
            if round == 0 {
                return Err(ConfigError::Inconsistent(
                    "Gradient2 round must be >= 1".into(),
                ));
            }
            if !(0.0..=1.0).contains(&rise) {
                return Err(ConfigError::Inconsistent(format!(
                    "Gradient2 rise must be in [0, 1], got {rise}"
                )));
            }
        }
        Ok(Gradient2 {
            cfg,
            estimated: cfg.initial as f64,
            long: ExpAvg::new(cfg.long_window, 10),
            last_gradient: 1.0,
            round: Round::default(),
            floor: None,
        })
    }

    /// The limit before truncation to an integer.
    pub fn estimated(&self) -> f64 {
        self.estimated
    }

    /// The baseline RTT, in nanoseconds: the long-term average
    /// ([`Gradient2Baseline::LongAverage`]) or the floor ([`Gradient2Baseline::Floor`]; 0
    /// before the first round).
    pub fn long_rtt_nanos(&self) -> f64 {
        match self.cfg.baseline {
            Gradient2Baseline::LongAverage => self.long.value(),
            Gradient2Baseline::Floor { .. } => self.floor.unwrap_or(0.0),
        }
    }

    /// `new = limit x gradient + queue_size`, smoothed and clamped.
    fn step(&mut self, long: f64, short: f64) {
        let gradient = (self.cfg.rtt_tolerance * long / short).clamp(0.5, 1.0);
        self.last_gradient = gradient;
        let new = self.estimated * gradient + self.cfg.queue_size as f64;
        let new = self.estimated * (1.0 - self.cfg.smoothing) + new * self.cfg.smoothing;
        self.estimated = new.clamp(self.cfg.min as f64, self.cfg.max as f64);
    }

    /// [`Gradient2Baseline::Floor`]: take the sample into the round; at its end, move the
    /// floor and the limit.
    fn on_round_sample(&mut self, rtt: f64, inflight: usize, round: usize, rise: f64) {
        let r = &mut self.round;
        r.count += 1;
        r.sum_nanos += rtt;
        r.max_inflight = r.max_inflight.max(inflight);
        if r.count < round {
            return;
        }
        let r = std::mem::take(&mut self.round);
        let short = (r.sum_nanos / r.count as f64).max(1.0);
        let floor = match self.floor {
            Some(f) if short >= f => f + (short - f) * rise,
            _ => short,
        };
        self.floor = Some(floor);
        if (r.max_inflight as f64) < self.estimated / 2.0 {
            return;
        }
        self.step(floor, short);
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
        if let Gradient2Baseline::Floor { round, rise } = self.cfg.baseline {
            self.on_round_sample(short, s.inflight, round, rise);
            return self.limit();
        }
        let long = self.long.add(short);
        if long / short > 2.0 {
            self.long.scale(0.95);
        }
        if (s.inflight as f64) < self.estimated / 2.0 {
            return self.limit();
        }
        self.step(long, short);
        self.limit()
    }
}
