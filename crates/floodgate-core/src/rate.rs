//! Rates (`COUNT` per `PERIOD`) and durations, with the parsers used by every config surface.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::ConfigError;
use crate::time::duration_to_nanos;

/// `count` units per `period`. Both are validated positive; the emission interval
/// (`period / count`) is at least one nanosecond.
///
/// ```
/// use floodgate_core::Rate;
/// let r: Rate = "100/min".parse().unwrap();
/// assert_eq!(r.count(), 100);
/// assert_eq!(r.period_nanos(), 60_000_000_000);
/// assert_eq!(r.emission_interval_nanos(), 600_000_000); // one unit every 0.6 s
/// assert!("10/q".parse::<Rate>().unwrap_err().to_string().contains("unknown unit \"q\""));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period_ns: u64,
}

impl Rate {
    /// `count` per `period`.
    pub fn new(count: u64, period: Duration) -> Result<Rate, ConfigError> {
        Rate::from_nanos(count, duration_to_nanos(period))
    }

    /// `count` per `period_ns` nanoseconds.
    pub fn from_nanos(count: u64, period_ns: u64) -> Result<Rate, ConfigError> {
        if count == 0 {
            return Err(ConfigError::Zero { what: "rate count" });
        }
        if period_ns == 0 {
            return Err(ConfigError::Zero {
                what: "rate period",
            });
        }
        if period_ns / count == 0 {
            return Err(ConfigError::Overflow {
                what: "rate",
                detail: format!("{count} per {period_ns} ns is more than one unit per nanosecond"),
            });
        }
        Ok(Rate { count, period_ns })
    }

    /// `n` per second.
    pub fn per_second(n: u64) -> Result<Rate, ConfigError> {
        Rate::from_nanos(n, 1_000_000_000)
    }

    /// `n` per minute.
    pub fn per_minute(n: u64) -> Result<Rate, ConfigError> {
        Rate::from_nanos(n, 60_000_000_000)
    }

    /// A rate of `per_second` units per second, which may be fractional (`2.5`).
    /// Represented exactly to one part in a million.
    pub fn per_second_f64(per_second: f64) -> Result<Rate, ConfigError> {
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(ConfigError::NotPositiveFinite {
                what: "rate per second",
                value: per_second.to_string(),
            });
        }
        if per_second.fract() == 0.0 && per_second < 1e9 {
            return Rate::per_second(per_second as u64);
        }
        // count per 1000 s keeps three decimals exactly; beyond that, per 10^6 s.
        let scaled = per_second * 1e6;
        if scaled >= u64::MAX as f64 {
            return Err(ConfigError::Overflow {
                what: "rate per second",
                detail: format!("{per_second} is above one unit per nanosecond"),
            });
        }
        let count = scaled.round().max(1.0) as u64;
        Rate::from_nanos(count, 1_000_000 * 1_000_000_000)
    }

    /// Units per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period in nanoseconds.
    pub fn period_nanos(&self) -> u64 {
        self.period_ns
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// Nanoseconds between units at this rate (`period / count`, truncated; at least 1).
    #[inline]
    pub fn emission_interval_nanos(&self) -> u64 {
        self.period_ns / self.count
    }

    /// Units per second, as a float (for display and headers).
    pub fn per_second_value(&self) -> f64 {
        self.count as f64 * 1e9 / self.period_ns as f64
    }

    /// Units that accrue over `elapsed_ns`, scaled by `scale` (e.g. 10^9 for nano-units),
    /// computed exactly in 128-bit and saturating.
    #[inline]
    pub(crate) fn accrued_scaled(&self, elapsed_ns: u64, scale: u64) -> u128 {
        (elapsed_ns as u128)
            .checked_mul(self.count as u128)
            .and_then(|v| v.checked_mul(scale as u128))
            .map_or(u128::MAX, |v| v / self.period_ns as u128)
    }

    /// Nanoseconds needed to accrue `units_scaled` (scaled by `scale`), rounded up.
    #[inline]
    pub(crate) fn time_for_scaled(&self, units_scaled: u128, scale: u64) -> u64 {
        let denom = self.count as u128 * scale as u128;
        units_scaled
            .checked_mul(self.period_ns as u128)
            .map_or(u64::MAX, |v| {
                u64::try_from(v.div_ceil(denom)).unwrap_or(u64::MAX)
            })
    }
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match format_duration(self.period()).as_str() {
            "1s" => write!(f, "{}/s", self.count),
            "60s" => write!(f, "{}/min", self.count),
            "3600s" => write!(f, "{}/h", self.count),
            p => write!(f, "{}/{p}", self.count),
        }
    }
}

impl FromStr for Rate {
    type Err = ConfigError;

    /// Parses `COUNT/PERIOD`: `10/s`, `10r/s` (nginx style), `100/min`, `5000/h`, `100/30s`,
    /// `1/1.5s`; also `COUNT per PERIOD` (`100 per hour`, `10 per 2 minutes`: the notation
    /// of Python's `limits` package). The period is a [`parse_duration`] string whose number
    /// may be omitted.
    fn from_str(input: &str) -> Result<Rate, ConfigError> {
        let bad = |reason: String| ConfigError::InvalidRate {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        let (count, period) = s
            .split_once('/')
            .or_else(|| split_per(s))
            .ok_or_else(|| bad("missing '/' (or ' per ') between count and period".into()))?;
        let count = count.trim();
        let count = count.strip_suffix('r').unwrap_or(count).trim();
        let count: u64 = count
            .parse()
            .map_err(|_| bad(format!("count {count:?} is not a whole number")))?;
        if count == 0 {
            return Err(bad("count must be at least 1".into()));
        }
        let period = period.trim();
        let period = if period.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            period.to_string()
        } else {
            format!("1{period}")
        };
        let period = parse_duration(&period).map_err(|e| match e {
            ConfigError::InvalidDuration { reason, .. } => bad(reason),
            other => other,
        })?;
        Rate::new(count, period).map_err(|e| bad(e.to_string()))
    }
}

/// `"100 per hour"` -> `("100", "hour")`: split at the word `per` (any case) between
/// spaces.
fn split_per(s: &str) -> Option<(&str, &str)> {
    let lower = s.to_ascii_lowercase();
    let at = lower.find(" per ")?;
    Some((&s[..at], &s[at + " per ".len()..]))
}

/// Parses a duration: a non-negative decimal number and a unit (`ns`, `us`, `ms`, `s`,
/// `m`/`min`, `h`, `d`, also long forms such as `sec`, `minute`, `hours`). A bare number
/// is rejected: the unit is required, so `60` cannot mean milliseconds to one reader and
/// seconds to another.
///
/// ```
/// use floodgate_core::rate::parse_duration;
/// use std::time::Duration;
/// assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
/// assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
/// assert!(parse_duration("30").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, ConfigError> {
    let bad = |reason: String| ConfigError::InvalidDuration {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| bad("missing unit".into()))?;
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(bad("missing number".into()));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| bad(format!("{num:?} is not a number")))?;
    let unit_ns: f64 = match unit.trim() {
        "ns" | "nanos" => 1.0,
        "us" | "µs" | "micros" => 1e3,
        "ms" | "millis" => 1e6,
        "s" | "sec" | "secs" | "second" | "seconds" => 1e9,
        "m" | "min" | "mins" | "minute" | "minutes" => 60e9,
        "h" | "hr" | "hour" | "hours" => 3600e9,
        "d" | "day" | "days" => 86400e9,
        other => return Err(bad(format!("unknown unit {other:?}"))),
    };
    let ns = value * unit_ns;
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return Err(bad("too large".into()));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// Formats a duration compactly for display: `1s`, `60s`, `1.5s`, `250ms`.
pub fn format_duration(d: Duration) -> String {
    let ns = duration_to_nanos(d);
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) && ns < 1_000_000_000 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}s", ns as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(
            "10/s".parse::<Rate>().unwrap(),
            Rate::per_second(10).unwrap()
        );
        assert_eq!(
            "10r/s".parse::<Rate>().unwrap(),
            Rate::per_second(10).unwrap()
        );
        assert_eq!(
            "100/min".parse::<Rate>().unwrap(),
            Rate::per_minute(100).unwrap()
        );
        assert_eq!(
            "100/60s".parse::<Rate>().unwrap(),
            Rate::per_minute(100).unwrap()
        );
        assert_eq!(
            " 5 / 1.5s ".parse::<Rate>().unwrap(),
            Rate::new(5, Duration::from_millis(1500)).unwrap()
        );
        // the `limits` notation (slowapi, Flask-Limiter)
        assert_eq!(
            "100 per hour".parse::<Rate>().unwrap(),
            Rate::new(100, Duration::from_secs(3600)).unwrap()
        );
        assert_eq!(
            "10 PER 2 minutes".parse::<Rate>().unwrap(),
            Rate::new(10, Duration::from_secs(120)).unwrap()
        );
        assert_eq!(
            "10/minute".parse::<Rate>().unwrap(),
            Rate::per_minute(10).unwrap()
        );
    }

    #[test]
    fn rejects_junk_with_reasons() {
        for (input, needle) in [
            ("10/q", "unknown unit \"q\""),
            ("10", "missing '/' (or ' per ')"),
            ("10 perhour", "missing '/'"),
            ("10 per fortnight", "unknown unit \"fortnight\""),
            ("0/s", "at least 1"),
            ("-1/s", "not a whole number"),
            ("ten/s", "not a whole number"),
            ("10/0s", "at least 1"),
            ("99999999999999999999/s", "not a whole number"),
            ("2000000000/s", "more than one unit per nanosecond"),
            ("1/1e400s", "unknown unit"),
        ] {
            let err = input.parse::<Rate>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input}: {err}");
            assert!(err.contains(input), "{input}: {err}");
        }
    }

    #[test]
    fn fractional_rates() {
        let r = Rate::per_second_f64(2.0).unwrap();
        assert_eq!(r, Rate::per_second(2).unwrap());
        let r = Rate::per_second_f64(0.5).unwrap();
        assert_eq!(r.emission_interval_nanos(), 2_000_000_000);
        assert!(Rate::per_second_f64(f64::NAN).is_err());
        assert!(Rate::per_second_f64(-1.0).is_err());
        assert!(Rate::per_second_f64(0.0).is_err());
        assert!(Rate::per_second_f64(1e30).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86400));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1..2s").is_err());
        assert!(parse_duration("99999999999999999999999d").is_err());
        assert_eq!(format_duration(Duration::from_secs(60)), "60s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }
}
