//! `[headers]`: which rate-limit headers a response carries.

use std::time::Duration;

use floodgate_core::de::duration;
use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::Renamed;
use crate::headers::{HeaderOptions, ResetFormat};

/// `[headers]`: which rate-limit headers a response carries.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "HeadersTable")]
pub struct HeadersSection {
    /// `ratelimit`: `RateLimit-Policy` and `RateLimit` (default true).
    pub ratelimit: bool,
    /// `legacy`: `off` (default, `None`), `delta` or `epoch`: the `X-RateLimit-Limit`,
    /// `-Remaining` and `-Reset` trio, its reset in seconds from now or at a Unix time.
    pub legacy: Option<ResetFormat>,
    /// `delay`: `X-RateLimit-Delay-Ms` on a request floodgate held (default true; only
    /// the proxy holds requests).
    pub delay: bool,
    /// `retry_after_jitter`: `Retry-After` = ceil(retry + uniform(0, jitter)) (`None`:
    /// 1 s; 0 turns the jitter off).
    pub retry_after_jitter: Option<Duration>,
    /// Old spellings read.
    pub renamed: Vec<Renamed>,
}

impl Default for HeadersSection {
    fn default() -> Self {
        HeadersSection {
            ratelimit: true,
            legacy: None,
            delay: true,
            retry_after_jitter: None,
            renamed: Vec::new(),
        }
    }
}

impl HeadersSection {
    /// The jitter of `Retry-After`.
    pub fn retry_after_jitter(&self) -> Duration {
        self.retry_after_jitter.unwrap_or(Duration::from_secs(1))
    }

    /// The engine's header options.
    pub fn options(&self) -> HeaderOptions {
        HeaderOptions {
            ratelimit: self.ratelimit,
            legacy: self.legacy,
            delay: self.delay,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadersTable {
    #[serde(default = "yes")]
    ratelimit: bool,
    #[serde(default, deserialize_with = "legacy_headers")]
    legacy: Option<Option<ResetFormat>>,
    #[serde(default = "yes")]
    delay: bool,
    #[serde(default, deserialize_with = "opt_duration")]
    retry_after_jitter: Option<Duration>,
    /// Old (floodgate server): `true` is `legacy = "delta"`.
    x_ratelimit: Option<bool>,
}

fn yes() -> bool {
    true
}

fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// `legacy`: `off`, `delta` or `epoch` (`Some(None)` is `off`).
pub fn legacy_headers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<ResetFormat>>, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "off" => Ok(Some(None)),
        "delta" => Ok(Some(Some(ResetFormat::Delta))),
        "epoch" => Ok(Some(Some(ResetFormat::Epoch))),
        _ => Err(de::Error::custom(format!(
            "{s:?}: expected off, delta or epoch"
        ))),
    }
}

impl TryFrom<HeadersTable> for HeadersSection {
    type Error = String;
    fn try_from(t: HeadersTable) -> Result<HeadersSection, String> {
        let mut renamed = Vec::new();
        let legacy = match (t.legacy, t.x_ratelimit) {
            (Some(_), Some(_)) => {
                return Err(
                    "set legacy (off, delta or epoch), not also its old spelling x_ratelimit"
                        .into(),
                );
            }
            (Some(l), None) => l,
            (None, Some(x)) => {
                let new = if x { "delta" } else { "off" };
                renamed.push(Renamed::new(
                    format!("headers.x_ratelimit = {x}"),
                    format!("headers.legacy = \"{new}\""),
                ));
                x.then_some(ResetFormat::Delta)
            }
            (None, None) => None,
        };
        Ok(HeadersSection {
            ratelimit: t.ratelimit,
            legacy,
            delay: t.delay,
            retry_after_jitter: t.retry_after_jitter,
            renamed,
        })
    }
}
