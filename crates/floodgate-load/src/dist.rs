//! Random durations for simulated traffic and simulated servers: [`Dist`] (a constant or
//! an exponential with a mean), read from `exp:20ms` / `const:20ms`, and
//! [`exponential_ns`], the one exponential draw both Poisson arrivals
//! ([`crate::arrivals`]) and the queueing backend of `floodgate demo backend` use.
//!
//! Every draw takes a seeded [`fastrand::Rng`], so a run is repeatable from its seed.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use floodgate_core::rate::parse_duration;

/// Longest mean accepted (one hour): anything longer is a mistake in units.
pub const MAX_MEAN: Duration = Duration::from_secs(3600);

/// A distribution of durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dist {
    /// Always this long.
    Const(Duration),
    /// Exponentially distributed with this mean (memoryless: the service time of an
    /// M/M/c queue, the gap between Poisson arrivals).
    Exp(Duration),
}

/// Why a distribution was refused; names the text and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid distribution {text:?}: {reason}")]
pub struct DistError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Dist {
    /// The mean duration.
    pub fn mean(&self) -> Duration {
        match *self {
            Dist::Const(d) | Dist::Exp(d) => d,
        }
    }

    /// One draw.
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate_load::dist::Dist;
    /// let mut rng = fastrand::Rng::with_seed(1);
    /// let d: Dist = "const:20ms".parse().unwrap();
    /// assert_eq!(d.sample(&mut rng), Duration::from_millis(20));
    /// ```
    pub fn sample(&self, rng: &mut fastrand::Rng) -> Duration {
        match *self {
            Dist::Const(d) => d,
            Dist::Exp(mean) => Duration::from_nanos(exponential_ns(rng, mean.as_nanos() as f64)),
        }
    }
}

/// An exponential draw with mean `mean_ns` nanoseconds, by inversion: `-mean x ln(1 - u)`
/// with `u` uniform in `[0, 1)`, so the result is finite (at most about 37 means).
pub fn exponential_ns(rng: &mut fastrand::Rng, mean_ns: f64) -> u64 {
    let u = rng.f64();
    let x = -mean_ns * (1.0 - u).ln();
    if x.is_finite() && x > 0.0 {
        x as u64
    } else {
        0
    }
}

impl FromStr for Dist {
    type Err = DistError;

    /// `exp:MEAN` or `const:DURATION`, durations as `20ms`, `1.5s`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate_load::dist::Dist;
    /// assert_eq!("exp:20ms".parse::<Dist>().unwrap(), Dist::Exp(Duration::from_millis(20)));
    /// assert!("exp:0ms".parse::<Dist>().is_err());
    /// assert!("gamma:20ms".parse::<Dist>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Dist, DistError> {
        let bad = |reason: String| DistError {
            text: s.to_string(),
            reason,
        };
        let (kind, rest) = s
            .trim()
            .split_once(':')
            .ok_or_else(|| bad("expected exp:MEAN or const:DURATION, e.g. exp:20ms".into()))?;
        let d = parse_duration(rest.trim()).map_err(|e| bad(e.to_string()))?;
        if d.is_zero() || d > MAX_MEAN {
            return Err(bad(format!(
                "{d:?}; expected above 0 and at most {}s",
                MAX_MEAN.as_secs()
            )));
        }
        match kind.trim().to_ascii_lowercase().as_str() {
            "exp" => Ok(Dist::Exp(d)),
            "const" => Ok(Dist::Const(d)),
            other => Err(bad(format!(
                "unknown kind {other:?}; expected exp or const"
            ))),
        }
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Const(d) => write!(f, "const:{d:?}"),
            Dist::Exp(d) => write!(f, "exp:{d:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_draws_have_the_asked_mean_and_spread() {
        let mut rng = fastrand::Rng::with_seed(7);
        let n = 200_000;
        let draws: Vec<f64> = (0..n)
            .map(|_| exponential_ns(&mut rng, 20e6) as f64 / 1e6)
            .collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        assert!((mean - 20.0).abs() < 0.3, "mean {mean} ms");
        // an exponential's median is ln 2 x mean, its p99 ln 100 x mean
        let mut sorted = draws.clone();
        sorted.sort_by(f64::total_cmp);
        let p50 = sorted[n / 2];
        let p99 = sorted[n * 99 / 100];
        assert!((p50 - 20.0 * 2f64.ln()).abs() < 0.5, "p50 {p50}");
        assert!((p99 - 20.0 * 100f64.ln()).abs() < 3.0, "p99 {p99}");
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let d = Dist::Exp(Duration::from_millis(5));
        let a: Vec<Duration> = {
            let mut r = fastrand::Rng::with_seed(3);
            (0..10).map(|_| d.sample(&mut r)).collect()
        };
        let mut r = fastrand::Rng::with_seed(3);
        let b: Vec<Duration> = (0..10).map(|_| d.sample(&mut r)).collect();
        assert_eq!(a, b);
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn bad_texts_name_what_is_wrong() {
        for (text, part) in [
            ("20ms", "expected exp:MEAN"),
            ("exp:", "exp:"),
            ("exp:-1ms", "exp:-1ms"),
            ("exp:0s", "above 0"),
            ("exp:2h", "at most 3600s"),
            ("uniform:1s", "unknown kind"),
            ("exp:NaNs", "exp:NaNs"),
        ] {
            let e = text.parse::<Dist>().unwrap_err().to_string();
            assert!(e.contains(part), "{text}: {e}");
        }
        assert_eq!(
            " Const: 1s ".parse::<Dist>().unwrap(),
            Dist::Const(Duration::from_secs(1))
        );
        assert_eq!(Dist::Exp(Duration::from_millis(20)).to_string(), "exp:20ms");
    }
}
