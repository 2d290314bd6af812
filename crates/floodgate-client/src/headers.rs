//! Reading a server's rate-limit advice from response headers. Pure: no I/O, no clock.
//!
//! Understood fields:
//!
//! * `RateLimit-Policy` and `RateLimit` in the form of draft-ietf-httpapi-ratelimit-headers
//!   (drafts 08 to 11): Structured Fields Lists (RFC 9651) parsed with [`sfv`], one member per
//!   policy, e.g. `RateLimit-Policy: "burst";q=100;w=60,"daily";q=1000;w=86400` and
//!   `RateLimit: "burst";r=50;t=30`. `q`, `w`, `r`, `t` are Integers; `t` is a delta in
//!   seconds, never a timestamp. Policy names may be Strings or Tokens.
//! * `Retry-After` (RFC 9110): `delay-seconds` (digits only) or an `HTTP-date`, read with
//!   [`httpdate`] against a wall-clock `now` passed in.
//! * Legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`. The reset is
//!   read as Unix epoch seconds when it is above [`EPOCH_THRESHOLD_SECS`] (GitHub's form),
//!   otherwise as delta seconds.
//!
//! Headers are advice, not truth. Everything malformed or hostile is ignored, never a panic:
//! a field longer than [`HeaderLimits::max_field_bytes`] is skipped whole, at most
//! [`HeaderLimits::max_members`] list members are read, negative and non-integer values drop
//! their member, a date in the past is ignored, and every duration produced here is at most
//! [`HeaderLimits::max_wait`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use sfv::{BareItem, ListEntry, Parser};

/// Legacy reset values above this many seconds are Unix epoch seconds, not deltas
/// (1e9 s is September 2001; no sane delta is 31 years long).
pub const EPOCH_THRESHOLD_SECS: f64 = 1e9;

/// Bounds applied while reading headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderLimits {
    /// Every duration read from a header is capped at this (default 60 s).
    pub max_wait: Duration,
    /// At most this many members of a list field are read (default 16); the rest are ignored.
    pub max_members: usize,
    /// A field (all its lines joined) longer than this many bytes is ignored whole
    /// (default 4096).
    pub max_field_bytes: usize,
}

impl Default for HeaderLimits {
    fn default() -> Self {
        HeaderLimits {
            max_wait: Duration::from_secs(60),
            max_members: 16,
            max_field_bytes: 4096,
        }
    }
}

/// What a quota counts (`qu` parameter of `RateLimit-Policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuotaUnit {
    /// `"requests"` (the default).
    #[default]
    Requests,
    /// `"content-bytes"`.
    ContentBytes,
    /// `"concurrent-requests"`.
    ConcurrentRequests,
}

/// One member of `RateLimit-Policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Policy name.
    pub name: String,
    /// `q`: the quota, in [`Policy::unit`]s.
    pub quota: u64,
    /// `w`: the window in whole seconds, if given. It is not a wait, so it is not capped, but
    /// only values in `1..=u32::MAX` seconds are kept.
    pub window: Option<Duration>,
    /// `qu`: what the quota counts.
    pub unit: QuotaUnit,
    /// `floodgate-capacity`: what a key at rest admits at once (floodgate's bucket
    /// algorithms), when given as an Integer >= 1. A capacity of 1 tolerates no send
    /// earlier than one `w / q` after the last (see `PacerConfig::timer_resolution`).
    pub capacity: Option<u64>,
}

/// One member of `RateLimit` (or the legacy `X-RateLimit-*` triple, named
/// [`LEGACY_POLICY`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remaining {
    /// Policy name.
    pub name: String,
    /// `r`: quota units left.
    pub remaining: u64,
    /// `t`: time until quota is available again, capped at `max_wait`; `None` when absent
    /// or unusable.
    pub reset: Option<Duration>,
    /// The limit, when known (legacy `X-RateLimit-Limit`).
    pub limit: Option<u64>,
}

/// The policy name given to advice read from the legacy `X-RateLimit-*` fields.
pub const LEGACY_POLICY: &str = "x-ratelimit";

/// All the advice one response carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Advice {
    /// `Retry-After`, capped at `max_wait`. Takes precedence over everything else.
    pub retry_after: Option<Duration>,
    /// `RateLimit` members, then the legacy triple if present.
    pub remaining: Vec<Remaining>,
    /// `RateLimit-Policy` members.
    pub policies: Vec<Policy>,
}

impl Advice {
    /// True when the response said nothing usable.
    pub fn is_empty(&self) -> bool {
        self.retry_after.is_none() && self.remaining.is_empty() && self.policies.is_empty()
    }
}

/// Read every understood field of `headers`. `wall_now` is the current wall-clock time, used
/// for `Retry-After` dates and epoch-second legacy resets.
///
/// ```
/// use floodgate_client::headers::{read_advice, HeaderLimits};
/// use http::HeaderMap;
/// use std::time::{Duration, SystemTime};
///
/// let mut h = HeaderMap::new();
/// h.insert("ratelimit-policy", r#""burst";q=100;w=60"#.parse().unwrap());
/// h.insert("ratelimit", r#""burst";r=50;t=30"#.parse().unwrap());
/// h.insert("retry-after", "120".parse().unwrap());
/// let a = read_advice(&h, SystemTime::now(), &HeaderLimits::default());
/// assert_eq!(a.remaining[0].remaining, 50);
/// assert_eq!(a.remaining[0].reset, Some(Duration::from_secs(30)));
/// assert_eq!(a.policies[0].quota, 100);
/// // 120 s is above the default 60 s cap.
/// assert_eq!(a.retry_after, Some(Duration::from_secs(60)));
/// ```
pub fn read_advice(headers: &HeaderMap, wall_now: SystemTime, limits: &HeaderLimits) -> Advice {
    let retry_after = joined(headers, "retry-after", limits)
        .and_then(|v| parse_retry_after(&v, wall_now, limits));
    let mut remaining = joined(headers, "ratelimit", limits)
        .map(|v| parse_ratelimit(&v, limits))
        .unwrap_or_default();
    let policies = joined(headers, "ratelimit-policy", limits)
        .map(|v| parse_ratelimit_policy(&v, limits))
        .unwrap_or_default();
    let first = |name: &str| headers.get(name).map(|v| v.as_bytes());
    if let Some(l) = parse_legacy(
        first("x-ratelimit-limit"),
        first("x-ratelimit-remaining"),
        first("x-ratelimit-reset"),
        wall_now,
        limits,
    ) && remaining.len() < limits.max_members
    {
        remaining.push(l);
    }
    Advice {
        retry_after,
        remaining,
        policies,
    }
    .with_limits(limits)
}

impl Advice {
    fn with_limits(mut self, limits: &HeaderLimits) -> Self {
        self.remaining.truncate(limits.max_members);
        self.policies.truncate(limits.max_members);
        self
    }
}

/// All lines of a field joined with `", "` (how list fields combine), or `None` when the
/// field is absent or longer than `max_field_bytes`.
fn joined(headers: &HeaderMap, name: &str, limits: &HeaderLimits) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::new();
    let mut any = false;
    for v in headers.get_all(name) {
        if any {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(v.as_bytes());
        any = true;
        if out.len() > limits.max_field_bytes {
            return None;
        }
    }
    any.then_some(out)
}

/// Parse a `Retry-After` value: `delay-seconds` (ASCII digits, optional surrounding spaces)
/// or an `HTTP-date`. Returns the wait from `wall_now`, capped at `limits.max_wait`.
/// Anything else (negative, fractional, empty, a date not after `wall_now`) gives `None`.
///
/// ```
/// use floodgate_client::headers::{parse_retry_after, HeaderLimits};
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
/// let l = HeaderLimits::default();
/// assert_eq!(parse_retry_after(b"5", now, &l), Some(Duration::from_secs(5)));
/// assert_eq!(parse_retry_after(b"Wed, 21 Oct 2015 07:28:30 GMT", now, &l), Some(Duration::from_secs(30)));
/// assert_eq!(parse_retry_after(b"-5", now, &l), None);
/// assert_eq!(parse_retry_after(b"99999999999999999999999", now, &l), Some(l.max_wait));
/// ```
pub fn parse_retry_after(
    value: &[u8],
    wall_now: SystemTime,
    limits: &HeaderLimits,
) -> Option<Duration> {
    if value.len() > limits.max_field_bytes {
        return None;
    }
    let s = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return Some(cap_secs(digits_to_secs(s), limits));
    }
    let at = httpdate::parse_http_date(s).ok()?;
    let wait = at.duration_since(wall_now).ok()?;
    if wait.is_zero() {
        return None;
    }
    Some(wait.min(limits.max_wait))
}

/// A string of ASCII digits as seconds, saturating at `u64::MAX`.
fn digits_to_secs(s: &str) -> u64 {
    s.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    })
}

fn cap_secs(secs: u64, limits: &HeaderLimits) -> Duration {
    Duration::from_secs(secs).min(limits.max_wait)
}

/// Parse a `RateLimit` field: at most `max_members` members with an Integer `r >= 0`;
/// `t` (Integer >= 0, capped at `max_wait`) is optional. Members that are inner lists, have
/// no usable name, or have a missing or negative `r` are skipped. A field that is not a
/// valid Structured Fields List yields nothing.
pub fn parse_ratelimit(value: &[u8], limits: &HeaderLimits) -> Vec<Remaining> {
    let Some(list) = parse_list(value, limits) else {
        return Vec::new();
    };
    list.iter()
        .take(limits.max_members)
        .filter_map(|entry| {
            let ListEntry::Item(item) = entry else {
                return None;
            };
            let name = policy_name(&item.bare_item)?;
            let remaining = non_negative(item.params.get("r")?)?;
            let reset = item
                .params
                .get("t")
                .and_then(non_negative)
                .map(|t| cap_secs(t, limits));
            Some(Remaining {
                name,
                remaining,
                reset,
                limit: None,
            })
        })
        .collect()
}

/// Parse a `RateLimit-Policy` field: at most `max_members` members with an Integer `q >= 0`;
/// `w` is kept only when it is an Integer in `1..=u32::MAX`; an unknown `qu` skips the member
/// (its quota would be misread).
pub fn parse_ratelimit_policy(value: &[u8], limits: &HeaderLimits) -> Vec<Policy> {
    let Some(list) = parse_list(value, limits) else {
        return Vec::new();
    };
    list.iter()
        .take(limits.max_members)
        .filter_map(|entry| {
            let ListEntry::Item(item) = entry else {
                return None;
            };
            let name = policy_name(&item.bare_item)?;
            let quota = non_negative(item.params.get("q")?)?;
            let window = item
                .params
                .get("w")
                .and_then(non_negative)
                .filter(|w| (1..=u64::from(u32::MAX)).contains(w))
                .map(Duration::from_secs);
            let unit = match item.params.get("qu") {
                None => QuotaUnit::Requests,
                Some(BareItem::String(s)) => match s.as_str() {
                    "requests" => QuotaUnit::Requests,
                    "content-bytes" => QuotaUnit::ContentBytes,
                    "concurrent-requests" => QuotaUnit::ConcurrentRequests,
                    _ => return None,
                },
                Some(_) => return None,
            };
            let capacity = item
                .params
                .get("floodgate-capacity")
                .and_then(non_negative)
                .filter(|c| *c >= 1);
            Some(Policy {
                name,
                quota,
                window,
                unit,
                capacity,
            })
        })
        .collect()
}

fn parse_list(value: &[u8], limits: &HeaderLimits) -> Option<sfv::List> {
    if value.len() > limits.max_field_bytes {
        return None;
    }
    Parser::new(value).parse::<sfv::List>().ok()
}

fn policy_name(item: &BareItem) -> Option<String> {
    match item {
        BareItem::String(s) => Some(s.as_str().to_owned()),
        BareItem::Token(t) => Some(t.as_str().to_owned()),
        _ => None,
    }
}

fn non_negative(item: &BareItem) -> Option<u64> {
    let i = item.as_integer()?;
    u64::try_from(i64::from(i)).ok()
}

/// Read the legacy triple. `remaining` is required; `limit` is optional; `reset` is seconds,
/// Unix epoch seconds when above [`EPOCH_THRESHOLD_SECS`] (then relative to `wall_now`; a
/// reset in the past is dropped), else delta seconds. Decimal fractions are accepted in
/// `reset`. The reset is capped at `max_wait`.
pub fn parse_legacy(
    limit: Option<&[u8]>,
    remaining: Option<&[u8]>,
    reset: Option<&[u8]>,
    wall_now: SystemTime,
    limits: &HeaderLimits,
) -> Option<Remaining> {
    let remaining = plain_u64(remaining?)?;
    let limit = limit.and_then(plain_u64);
    let reset = reset.and_then(plain_f64).and_then(|secs| {
        let delta = if secs > EPOCH_THRESHOLD_SECS {
            let now = wall_now.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
            secs - now
        } else {
            secs
        };
        if delta.is_nan() || delta <= 0.0 {
            return None;
        }
        Some(
            Duration::try_from_secs_f64(delta)
                .unwrap_or(limits.max_wait)
                .min(limits.max_wait),
        )
    });
    Some(Remaining {
        name: LEGACY_POLICY.to_owned(),
        remaining,
        reset,
        limit,
    })
}

fn trimmed(v: &[u8]) -> Option<&str> {
    if v.len() > 64 {
        return None;
    }
    let s = std::str::from_utf8(v).ok()?.trim_matches([' ', '\t']);
    (!s.is_empty()).then_some(s)
}

fn plain_u64(v: &[u8]) -> Option<u64> {
    let s = trimmed(v)?;
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn plain_f64(v: &[u8]) -> Option<f64> {
    let s = trimmed(v)?;
    // Digits with at most one '.', nothing else (no sign, exponent, inf or NaN).
    if !s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        || s.bytes().filter(|&b| b == b'.').count() > 1
    {
        return None;
    }
    let x: f64 = s.parse().ok()?;
    x.is_finite().then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l() -> HeaderLimits {
        HeaderLimits::default()
    }

    #[test]
    fn several_policies() {
        let p = parse_ratelimit_policy(
            br#""burst";q=100;w=60,"daily";q=1000;w=86400;qu="requests""#,
            &l(),
        );
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].name, "daily");
        assert_eq!(p[1].window, Some(Duration::from_secs(86400)));
        let r = parse_ratelimit(br#""burst";r=50;t=30, "daily";r=900;t=1000, day;r=1"#, &l());
        assert_eq!(r.len(), 3);
        assert_eq!(r[1].reset, Some(Duration::from_secs(60)));
        assert_eq!(r[2].name, "day");
        assert_eq!(r[2].reset, None);
    }

    #[test]
    fn hostile_members_are_skipped() {
        let r = parse_ratelimit(
            br#""a";r=-1;t=5, "b";r=1.5, "c";t=3, ("x");r=1, "d";r=2;t=-4, 7;r=1"#,
            &l(),
        );
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].name.as_str(), r[0].remaining, r[0].reset),
            ("d", 2, None)
        );
        assert!(parse_ratelimit(b"not a list ;;;", &l()).is_empty());
        let p = parse_ratelimit_policy(br#""a";q=1;qu="bananas", "b";q=1;w=0"#, &l());
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].window, None);
        // floodgate's capacity parameter: an Integer >= 1, anything else is no capacity
        let p = parse_ratelimit_policy(
            br#""a";q=100;w=1;floodgate-capacity=1, "b";q=1;w=1;floodgate-capacity=0, "c";q=1;w=1;floodgate-capacity="5""#,
            &l(),
        );
        let caps: Vec<_> = p.iter().map(|p| p.capacity).collect();
        assert_eq!(caps, [Some(1), None, None]);
    }

    #[test]
    fn member_count_is_capped() {
        let many: String = (0..5000)
            .map(|i| format!("\"p{i}\";r=1;t=1"))
            .collect::<Vec<_>>()
            .join(",");
        // Too long as a field: ignored whole.
        assert!(parse_ratelimit(many.as_bytes(), &l()).is_empty());
        let big = HeaderLimits {
            max_field_bytes: 1 << 20,
            ..l()
        };
        assert_eq!(parse_ratelimit(many.as_bytes(), &big).len(), 16);
    }

    #[test]
    fn retry_after_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(
            parse_retry_after(b" 7 ", now, &l()),
            Some(Duration::from_secs(7))
        );
        assert_eq!(parse_retry_after(b"0", now, &l()), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(b"1.5", now, &l()), None);
        assert_eq!(parse_retry_after(b"", now, &l()), None);
        assert_eq!(parse_retry_after(b"soon", now, &l()), None);
        assert_eq!(
            parse_retry_after(b"Wed, 21 Oct 2015 07:27:00 GMT", now, &l()),
            None,
            "a date in the past is ignored"
        );
        assert_eq!(
            parse_retry_after(b"Wed, 21 Oct 2099 07:27:00 GMT", now, &l()),
            Some(l().max_wait)
        );
    }

    #[test]
    fn legacy_epoch_vs_delta() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let r = parse_legacy(Some(b"60"), Some(b"10"), Some(b"1700000030"), now, &l()).unwrap();
        assert_eq!(
            (r.limit, r.remaining, r.reset),
            (Some(60), 10, Some(Duration::from_secs(30)))
        );
        let r = parse_legacy(None, Some(b"10"), Some(b"30"), now, &l()).unwrap();
        assert_eq!(r.reset, Some(Duration::from_secs(30)));
        let r = parse_legacy(None, Some(b"10"), Some(b"1699999990"), now, &l()).unwrap();
        assert_eq!(r.reset, None, "epoch in the past");
        let r = parse_legacy(None, Some(b"10"), Some(b"99999999999"), now, &l()).unwrap();
        assert_eq!(r.reset, Some(l().max_wait));
        assert!(parse_legacy(None, Some(b"-1"), None, now, &l()).is_none());
        assert!(parse_legacy(None, Some(b"abc"), None, now, &l()).is_none());
        let r = parse_legacy(None, Some(b"1"), Some(b"NaN"), now, &l()).unwrap();
        assert_eq!(r.reset, None);
    }

    #[test]
    fn read_advice_joins_lines() {
        let mut h = HeaderMap::new();
        h.append("ratelimit", r#""a";r=1;t=2"#.parse().unwrap());
        h.append("ratelimit", r#""b";r=3;t=4"#.parse().unwrap());
        h.insert("x-ratelimit-remaining", "9".parse().unwrap());
        let a = read_advice(&h, SystemTime::now(), &l());
        assert_eq!(a.remaining.len(), 3);
        assert_eq!(a.remaining[2].name, LEGACY_POLICY);
        assert!(a.retry_after.is_none());
    }
}
