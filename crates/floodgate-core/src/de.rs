//! Deserialization of the config forms (feature `serde`): a [`Rate`] from `"COUNT/PERIOD"`,
//! a [`Kind`] from its name, and durations from `"250ms"`, `"1.5s"`, `"2m"` through the
//! functions here (for `#[serde(deserialize_with = ...)]`). A bad value is refused inside
//! deserialization, so the format library attaches the place in the file.

use std::time::Duration;

use serde::de::{Deserialize, Deserializer, Error};

use crate::rate::parse_duration;
use crate::{Kind, Rate};

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
        let s = String::deserialize(d)?;
        s.parse::<Rate>().map_err(D::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        let s = String::deserialize(d)?;
        s.parse::<Kind>().map_err(D::Error::custom)
    }
}

/// A duration written `"250ms"`, `"1.5s"`, `"2m"` (any unit of
/// [`parse_duration`]); 0 is allowed.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map_err(|e| D::Error::custom(format!("{s:?}: {e}")))
}

/// A timeout: a duration above zero (a timeout of 0 would fail every call).
pub fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let t = duration(d)?;
    if t.is_zero() {
        return Err(D::Error::custom(
            "a timeout of 0 would fail every request; give a duration above zero, e.g. \"30s\"",
        ));
    }
    Ok(t)
}

/// A duration above zero (`what` is not a timeout: a lease's lifetime, say).
pub fn positive_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let t = duration(d)?;
    if t.is_zero() {
        return Err(D::Error::custom("must be above 0"));
    }
    Ok(t)
}

/// A count of at least 1.
pub fn positive_count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 {
        return Err(D::Error::custom("must be at least 1, got 0"));
    }
    usize::try_from(n).map_err(|_| D::Error::custom(format!("{n} is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct T {
        rate: Option<Rate>,
        kind: Option<Kind>,
        #[serde(default, deserialize_with = "opt_timeout")]
        timeout: Option<Duration>,
        #[serde(default, deserialize_with = "opt_count")]
        count: Option<usize>,
    }

    fn opt_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        timeout(d).map(Some)
    }

    fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
        positive_count(d).map(Some)
    }

    fn parse(json: &str) -> Result<T, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn config_forms_parse_and_bad_values_say_why() {
        let t =
            parse(r#"{"rate": "10/s", "kind": "gcra", "timeout": "50ms", "count": 3}"#).unwrap();
        assert_eq!(t.rate, Some("10/s".parse().unwrap()));
        assert_eq!(t.kind, Some(Kind::Gcra));
        assert_eq!(t.timeout, Some(Duration::from_millis(50)));
        assert_eq!(t.count, Some(3));
        let e = parse(r#"{"rate": "10/q"}"#).unwrap_err();
        assert!(
            e.contains("invalid rate \"10/q\": unknown unit \"q\""),
            "{e}"
        );
        let e = parse(r#"{"kind": "magic"}"#).unwrap_err();
        assert!(e.contains("magic"), "{e}");
        let e = parse(r#"{"timeout": "0s"}"#).unwrap_err();
        assert!(e.contains("a timeout of 0"), "{e}");
        let e = parse(r#"{"timeout": "soon"}"#).unwrap_err();
        assert!(e.contains("\"soon\""), "{e}");
        let e = parse(r#"{"count": 0}"#).unwrap_err();
        assert!(e.contains("must be at least 1"), "{e}");
    }
}
