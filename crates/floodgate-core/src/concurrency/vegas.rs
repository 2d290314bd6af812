//! TCP Vegas applied to concurrency.

use std::time::Duration;

use crate::time::duration_to_nanos;

use super::{LimitAlgorithm, Sample, check_range, log10_root};
use crate::ConfigError;

/// Vegas settings (concurrency-limits' `VegasLimit` defaults; `min` is this crate's
/// addition, 1 there).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VegasConfig {
    /// Starting limit (default 20).
    pub initial: usize,
    /// Floor (default 1).
    pub min: usize,
    /// Ceiling (default 1000).
    pub max: usize,
    /// `limit = (1 - smoothing) x limit + smoothing x new`, in `(0, 1]` (default 1.0).
    pub smoothing: f64,
    /// `rtt_noload` is re-probed (reset to the current RTT) after about
    /// `probe_multiplier x limit` samples, times a jitter in `[0.5, 1)` (default 30).
    pub probe_multiplier: usize,
    /// Seed of the probe jitter.
    pub seed: u64,
}

impl Default for VegasConfig {
    fn default() -> Self {
        VegasConfig {
            initial: 20,
            min: 1,
            max: 1000,
            smoothing: 1.0,
            probe_multiplier: 30,
            seed: 0,
        }
    }
}

/// Vegas: `rtt_noload` is the minimum RTT seen (re-probed now and then);
/// `queue = ceil(limit x (1 - rtt_noload / rtt))`; with `L = max(1, log10(limit))` (real),
/// `alpha = 3L`, `beta = 6L`:
///
/// * drop: `limit - L`
/// * `inflight x 2 < limit`: unchanged (app-limited)
/// * `queue <= L`: `limit + beta`
/// * `queue < alpha`: `limit + L`
/// * `queue > beta`: `limit - L`
/// * otherwise unchanged;
///
/// then clamp to `[min, max]` and smooth. A sample with a new minimum RTT, or one that
/// triggers a probe, only updates `rtt_noload`.
#[derive(Debug, Clone)]
pub struct Vegas {
    cfg: VegasConfig,
    estimated: f64,
    rtt_noload: u64,
    probe_count: usize,
    probe_jitter: f64,
    rng: SplitMix64,
}

impl Vegas {
    /// Validate and build.
    pub fn new(cfg: VegasConfig) -> Result<Self, ConfigError> {
        check_range(cfg.min, cfg.initial, cfg.max)?;
        if !(cfg.smoothing > 0.0 && cfg.smoothing <= 1.0) {
            return Err(ConfigError::Inconsistent(format!(
                "Vegas smoothing must be in (0, 1], got {}",
                cfg.smoothing
            )));
        }
        let mut rng = SplitMix64(cfg.seed);
        let probe_jitter = rng.jitter();
        Ok(Vegas {
            cfg,
            estimated: cfg.initial as f64,
            rtt_noload: 0,
            probe_count: 0,
            probe_jitter,
            rng,
        })
    }

    /// The no-load RTT estimate (zero before the first sample).
    pub fn rtt_noload(&self) -> Duration {
        Duration::from_nanos(self.rtt_noload)
    }

    /// The limit before truncation to an integer.
    pub fn estimated(&self) -> f64 {
        self.estimated
    }
}

impl LimitAlgorithm for Vegas {
    fn limit(&self) -> usize {
        self.estimated as usize
    }

    fn on_sample(&mut self, s: &Sample) -> usize {
        let rtt = duration_to_nanos(s.rtt).max(1);
        self.probe_count += 1;
        if self.cfg.probe_multiplier > 0
            && self.probe_jitter * (self.cfg.probe_multiplier as f64) * self.estimated
                <= self.probe_count as f64
        {
            self.probe_jitter = self.rng.jitter();
            self.probe_count = 0;
            self.rtt_noload = rtt;
            return self.limit();
        }
        if self.rtt_noload == 0 || rtt < self.rtt_noload {
            self.rtt_noload = rtt;
            return self.limit();
        }
        let limit = self.estimated;
        let queue = (limit * (1.0 - self.rtt_noload as f64 / rtt as f64)).ceil();
        let l = log10_root(limit);
        let (alpha, beta, threshold) = (3.0 * l, 6.0 * l, l);
        let new = if s.dropped {
            limit - l
        } else if (s.inflight as f64) * 2.0 < limit {
            return self.limit();
        } else if queue <= threshold {
            limit + beta
        } else if queue < alpha {
            limit + l
        } else if queue > beta {
            limit - l
        } else {
            return self.limit();
        };
        let new = new.clamp(self.cfg.min as f64, self.cfg.max as f64);
        self.estimated = (1.0 - self.cfg.smoothing) * limit + self.cfg.smoothing * new;
        self.limit()
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a seeded, dependency-free source of the probe
/// jitter, so that a Vegas run is a pure function of its config and samples.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `[0.5, 1)`: 53 random bits as a fraction of 2^53, halved, plus 0.5.
    fn jitter(&mut self) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        0.5 + unit / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn jitter_stays_in_half_open_range_and_depends_on_the_seed() {
        let mut a = SplitMix64(7);
        let mut b = SplitMix64(8);
        let (xs, ys): (Vec<f64>, Vec<f64>) = (0..1000).map(|_| (a.jitter(), b.jitter())).unzip();
        assert!(xs.iter().chain(&ys).all(|x| (0.5..1.0).contains(x)));
        assert_ne!(xs, ys);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((0.7..0.8).contains(&mean), "mean {mean}");
    }
}
