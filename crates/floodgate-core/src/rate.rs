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

    /// Parses one rate, `COUNT/PERIOD` or `COUNT per PERIOD`: `10/s`, `10r/s` (nginx
    /// style), `100/min`, `5000/h`, `100/30s`, `1/1.5s`, and the notation of Python's
    /// `limits` package (slowapi, Flask-Limiter): `10/minute`, `10 per minute`,
    /// `10/2 minutes`, `10 per 2 minutes`, `1/day`, `5/month`. The period is a number
    /// (which may be omitted, meaning 1) and a unit: any unit of [`parse_duration`], or one
    /// of the words `second`, `minute`, `hour`, `day`, `month` (30 days) or `year`
    /// (360 days, twelve such months, as `limits` counts them), singular or plural, in any
    /// case. Several limits in one string (`1/second; 100/minute`) are refused here: see
    /// [`Rate::parse_many`].
    ///
    /// ```
    /// use floodgate_core::Rate;
    /// let r: Rate = "10 per 2 minutes".parse().unwrap();
    /// assert_eq!((r.count(), r.period_nanos()), (10, 120_000_000_000));
    /// assert_eq!("100/Hour".parse::<Rate>().unwrap(), "100/h".parse::<Rate>().unwrap());
    /// ```
    fn from_str(input: &str) -> Result<Rate, ConfigError> {
        let s = input.trim();
        if s.contains(SEPARATORS) {
            return Err(invalid(
                input,
                "several limits separated by ',', ';' or '|' where one rate is expected".into(),
            ));
        }
        parse_one(s).map_err(|reason| invalid(input, reason))
    }
}

/// The characters that separate the limits of a multi-limit string, as in `limits`.
const SEPARATORS: [char; 3] = [',', ';', '|'];

fn invalid(input: &str, reason: String) -> ConfigError {
    ConfigError::InvalidRate {
        input: input.to_string(),
        reason,
    }
}

impl Rate {
    /// Parses several limits in one string, separated by `;`, `,` or `|`, each in the
    /// notation of [`Rate::from_str`]: `"1/second; 100/minute"` is two rates, in the order
    /// written. An empty string, an empty limit (`"1/s;"`) or a bad one is an error naming
    /// the limit by its position.
    ///
    /// ```
    /// use floodgate_core::Rate;
    /// let rates = Rate::parse_many("1/second; 100 per minute").unwrap();
    /// assert_eq!(rates, vec!["1/s".parse().unwrap(), "100/min".parse().unwrap()]);
    /// let err = Rate::parse_many("1/second; 100/fortnight").unwrap_err().to_string();
    /// assert!(err.contains("limit 2 of 2 (\"100/fortnight\"): unknown unit \"fortnight\""), "{err}");
    /// ```
    pub fn parse_many(input: &str) -> Result<Vec<Rate>, ConfigError> {
        if input.trim().is_empty() {
            return Err(invalid(input, "empty: no limit given".into()));
        }
        let parts: Vec<&str> = input.split(SEPARATORS).collect();
        let n = parts.len();
        parts
            .iter()
            .enumerate()
            .map(|(i, part)| {
                let part = part.trim();
                if part.is_empty() {
                    return Err(invalid(input, format!("limit {} of {n} is empty", i + 1)));
                }
                parse_one(part).map_err(|reason| {
                    invalid(
                        input,
                        format!("limit {} of {n} ({part:?}): {reason}", i + 1),
                    )
                })
            })
            .collect()
    }
}

/// One trimmed rate; the error is the reason, without the input.
fn parse_one(s: &str) -> Result<Rate, String> {
    if s.is_empty() {
        return Err("empty: expected a count and a period".into());
    }
    let (count, period) = match s.split_once('/') {
        Some(split) => split,
        // `per` in any case; ASCII lowering keeps every byte offset.
        None => match s.to_ascii_lowercase().find("per") {
            Some(i) => (&s[..i], &s[i + 3..]),
            None => return Err("missing '/' or 'per' between count and period".into()),
        },
    };
    let count = count.trim();
    let count = count.strip_suffix('r').unwrap_or(count).trim();
    let count: u64 = count.parse().map_err(|_| {
        if !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()) {
            format!("count {count} is too large (at most {})", u64::MAX)
        } else {
            format!("count {count:?} is not a whole number")
        }
    })?;
    if count == 0 {
        return Err("count must be at least 1".into());
    }
    let period = period.trim();
    if period.is_empty() {
        return Err("missing period after the count".into());
    }
    if period.starts_with('-') {
        return Err(format!("period {period:?} is negative"));
    }
    let (num, unit) = split_number(period);
    let value: f64 = if num.is_empty() {
        1.0
    } else {
        num.parse()
            .map_err(|_| format!("{num:?} is not a number"))?
    };
    let unit = unit.trim();
    let unit_ns = unit_nanos(unit)
        .or_else(|| rate_word_nanos(unit))
        .ok_or_else(|| format!("unknown unit {unit:?}"))?;
    let period = nanos_of(value, unit_ns).ok_or_else(|| "period too large".to_string())?;
    Rate::new(count, period).map_err(|e| e.to_string())
}

/// The leading decimal number of `s` and the rest.
fn split_number(s: &str) -> (&str, &str) {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s.split_at(split)
}

/// Nanoseconds per unit of [`parse_duration`]'s units (exact spelling).
fn unit_nanos(unit: &str) -> Option<f64> {
    Some(match unit {
        "ns" | "nanos" => 1.0,
        "us" | "µs" | "micros" => 1e3,
        "ms" | "millis" => 1e6,
        "s" | "sec" | "secs" | "second" | "seconds" => 1e9,
        "m" | "min" | "mins" | "minute" | "minutes" => 60e9,
        "h" | "hr" | "hour" | "hours" => 3600e9,
        "d" | "day" | "days" => 86400e9,
        _ => return None,
    })
}

/// Nanoseconds per unit of the `limits` words, in any case, singular or plural:
/// `second`, `minute`, `hour`, `day`, `month` (30 days), `year` (360 days).
fn rate_word_nanos(unit: &str) -> Option<f64> {
    let lower = unit.to_ascii_lowercase();
    let word = lower.strip_suffix('s').unwrap_or(&lower);
    Some(match word {
        "second" => 1e9,
        "minute" => 60e9,
        "hour" => 3600e9,
        "day" => 86400e9,
        "month" => 30.0 * 86400e9,
        "year" => 360.0 * 86400e9,
        _ => return None,
    })
}

/// `value` units of `unit_ns` nanoseconds, rounded; `None` when it does not fit.
fn nanos_of(value: f64, unit_ns: f64) -> Option<Duration> {
    let ns = value * unit_ns;
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return None;
    }
    Some(Duration::from_nanos(ns.round() as u64))
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
    let (num, unit) = split_number(s);
    if unit.is_empty() {
        return Err(bad("missing unit".into()));
    }
    if num.is_empty() {
        return Err(bad("missing number".into()));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| bad(format!("{num:?} is not a number")))?;
    let unit = unit.trim();
    let unit_ns = unit_nanos(unit).ok_or_else(|| bad(format!("unknown unit {unit:?}")))?;
    nanos_of(value, unit_ns).ok_or_else(|| bad("too large".into()))
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
    }

    #[test]
    fn rejects_junk_with_reasons() {
        for (input, needle) in [
            ("10/q", "unknown unit \"q\""),
            ("10", "missing '/'"),
            ("0/s", "at least 1"),
            ("-1/s", "not a whole number"),
            ("ten/s", "not a whole number"),
            ("10/0s", "at least 1"),
            ("99999999999999999999/s", "too large"),
            ("2000000000/s", "more than one unit per nanosecond"),
            ("1/1e400s", "unknown unit"),
        ] {
            let err = input.parse::<Rate>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input}: {err}");
            assert!(err.contains(input), "{input}: {err}");
        }
    }

    /// (input, count, period in seconds): the notation of Python's `limits`, which
    /// crates/floodgate-py/tests/test_rates.py also feeds to `limits.parse_many`.
    const LIMITS_FORMS: &[(&str, u64, u64)] = &[
        ("10/minute", 10, 60),
        ("10 per minute", 10, 60),
        ("100 per hour", 100, 3600),
        ("10/2 minutes", 10, 120),
        ("10 per 2 minutes", 10, 120),
        ("10per2minutes", 10, 120),
        ("1/second", 1, 1),
        ("3 / 5 seconds", 3, 5),
        ("7/day", 7, 86_400),
        ("7/days", 7, 86_400),
        ("5/month", 5, 30 * 86_400),
        ("5/year", 5, 360 * 86_400),
        ("2 PER 3 Hours", 2, 3 * 3600),
        ("10/MINUTE", 10, 60),
    ];

    #[test]
    fn parses_the_limits_notation() {
        for &(input, count, secs) in LIMITS_FORMS {
            let r: Rate = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(
                (r.count(), r.period()),
                (count, Duration::from_secs(secs)),
                "{input}"
            );
        }
    }

    #[test]
    fn parses_many() {
        let rates = Rate::parse_many("1/second; 100/minute, 1000 per 2 hours|5/s").unwrap();
        let got: Vec<(u64, u64)> = rates
            .iter()
            .map(|r| (r.count(), r.period().as_secs()))
            .collect();
        assert_eq!(got, vec![(1, 1), (100, 60), (1000, 7200), (5, 1)]);
        assert_eq!(
            Rate::parse_many(" 10/s ").unwrap(),
            vec![Rate::per_second(10).unwrap()]
        );
        for (input, needle) in [
            ("", "empty: no limit given"),
            ("  ", "empty: no limit given"),
            ("1/s;", "limit 2 of 2 is empty"),
            (";1/s", "limit 1 of 2 is empty"),
            ("1/s;;2/s", "limit 2 of 3 is empty"),
            (
                "1/s; 0/min",
                "limit 2 of 2 (\"0/min\"): count must be at least 1",
            ),
            (
                "1/s, 10/fortnight",
                "limit 2 of 2 (\"10/fortnight\"): unknown unit \"fortnight\"",
            ),
        ] {
            let err = Rate::parse_many(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
            assert!(err.contains(&format!("{input:?}")), "{input:?}: {err}");
        }
        let err = "1/second; 100/minute"
            .parse::<Rate>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("several limits"), "{err}");
    }

    #[test]
    fn refuses_bad_notation_with_reasons() {
        for (input, needle) in [
            ("", "empty"),
            ("10 minute", "missing '/' or 'per'"),
            ("10/", "missing period"),
            ("10 per", "missing period"),
            ("/minute", "count \"\" is not a whole number"),
            ("1.5/minute", "not a whole number"),
            ("nan/minute", "not a whole number"),
            ("10/nan", "unknown unit \"nan\""),
            ("10/inf seconds", "unknown unit \"inf seconds\""),
            ("10/-1 minutes", "negative"),
            ("-10 per minute", "not a whole number"),
            ("0 per minute", "at least 1"),
            ("10/0 minutes", "at least 1"),
            ("10/fortnight", "unknown unit \"fortnight\""),
            ("10/mins!", "unknown unit"),
            ("10/minutess", "unknown unit"),
            ("10/1e30 years", "unknown unit"),
            ("10/99999999999999 years", "period too large"),
            (
                "18446744073709551616/minute",
                "too large (at most 18446744073709551615)",
            ),
            ("10/1..2 minutes", "is not a number"),
        ] {
            let err = input.parse::<Rate>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
            assert!(err.contains(&format!("{input:?}")), "{input:?}: {err}");
        }
    }

    proptest::proptest! {
        /// Any text: an answer, never a panic; an accepted rate prints back to itself.
        #[test]
        fn any_text_parses_or_is_refused(s in "\\PC{0,24}") {
            if let Ok(r) = s.parse::<Rate>() {
                proptest::prop_assert_eq!(r.to_string().parse::<Rate>().unwrap(), r);
            }
            let _ = Rate::parse_many(&s);
        }

        /// `COUNT SEP [N] WORD[s]` in `limits`' notation is COUNT per N x the word's length.
        #[test]
        fn limits_forms_parse_exactly(
            count in 1u64..1_000_000,
            sep in proptest::sample::select(vec!["/", " / ", " per ", "per", " PER "]),
            n in proptest::option::of(1u64..500),
            unit in proptest::sample::select(vec![
                ("second", 1u64), ("minute", 60), ("hour", 3600), ("day", 86_400),
                ("month", 30 * 86_400), ("year", 360 * 86_400),
            ]),
            plural in proptest::bool::ANY,
        ) {
            let (word, secs) = unit;
            let n_text = n.map(|n| format!("{n} ")).unwrap_or_default();
            let s = format!("{count}{sep}{n_text}{word}{}", if plural { "s" } else { "" });
            let r: Rate = s.parse().unwrap();
            proptest::prop_assert_eq!(r.count(), count);
            proptest::prop_assert_eq!(r.period(), Duration::from_secs(n.unwrap_or(1) * secs));
            let many = Rate::parse_many(&format!("{s}; {s}")).unwrap();
            proptest::prop_assert_eq!(many, vec![r, r]);
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
