//! Response headers rendered from [`Decision`]s: the RateLimit fields of
//! draft-ietf-httpapi-ratelimit-headers (draft 11), the legacy `X-RateLimit-*` trio,
//! `Retry-After` with jitter, and the delay header.
//!
//! * `RateLimit-Policy: "per-ip";q=100;w=60, "global";q=5000;w=60`: one member per
//!   policy checked; `q` is the decision's `limit`, `w` the seconds to refill it (see
//!   [`crate::policy::advertised_window`]).
//! * `RateLimit: "per-ip";r=15;t=23, "global";r=4100;t=2`: `r` is `remaining`, `t` is
//!   `reset_after` in seconds rounded up.
//! * `Retry-After: 7` on denials: `ceil(retry_after + uniform(0, jitter))` seconds, so
//!   never earlier than the true retry time rounded up.
//! * `X-RateLimit-Limit/Remaining/Reset` (optional): from the most restrictive policy;
//!   reset in delta seconds or Unix epoch seconds.
//! * `X-RateLimit-Delay-Ms: 300` when the request was held (leaky queue), in
//!   milliseconds rounded up.
//!
//! Both RateLimit fields are Structured Fields Lists serialized with the `sfv` crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_core::decision::ceil_secs;
use floodgate_core::{Algorithm, Decision};
use http::{HeaderMap, HeaderName, HeaderValue};
use sfv::{Integer, ItemSerializer, KeyRef, ListSerializer, StringRef};
use smallvec::SmallVec;

use crate::policy::{PolicyInfo, advertised_window};

/// `RateLimit-Policy`.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `X-RateLimit-Delay-Ms`: how long floodgate held the request, in milliseconds.
pub static X_RATELIMIT_DELAY_MS: HeaderName = HeaderName::from_static("x-ratelimit-delay-ms");

/// How the legacy `X-RateLimit-Reset` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetFormat {
    /// Seconds from now (most APIs).
    Delta,
    /// Unix epoch seconds (GitHub).
    Epoch,
}

/// Which headers to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderOptions {
    /// `RateLimit-Policy` and `RateLimit` (draft 11). Default on.
    pub ratelimit: bool,
    /// The legacy `X-RateLimit-*` trio, and its reset format. Default off.
    pub legacy: Option<ResetFormat>,
    /// `X-RateLimit-Delay-Ms` on delayed requests. Default on.
    pub delay: bool,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        HeaderOptions {
            ratelimit: true,
            legacy: None,
            delay: true,
        }
    }
}

/// The largest Structured Fields Integer (15 digits); larger values are capped.
const SF_INT_MAX: u64 = 999_999_999_999_999;

fn sf_int(v: u64) -> u64 {
    v.min(SF_INT_MAX)
}

fn int(v: u64) -> Integer {
    Integer::constant(sf_int(v) as i64)
}

/// The `RateLimit-Policy` value for these policies and decisions; `None` for none.
/// A single policy reporting its algorithm's own limit (the usual case) reuses the value
/// rendered when the limiter was built.
pub fn ratelimit_policy(items: &[(&PolicyInfo, Decision)]) -> Option<HeaderValue> {
    if let [(p, d)] = items
        && let Some(v) = &p.advertised
        && d.limit == p.algorithm.limit()
    {
        return Some(v.clone());
    }
    policy_value(items.iter().map(|(p, d)| (*p, d.limit)))
}

/// The `RateLimit-Policy` value for policies at these limits (`q`); `None` for none.
pub fn policy_value<'a>(
    items: impl IntoIterator<Item = (&'a PolicyInfo, u64)>,
) -> Option<HeaderValue> {
    let mut ser = ListSerializer::new();
    for (p, limit) in items {
        let Ok(name) = StringRef::from_str(&p.name) else {
            continue; // names are validated at build time
        };
        let w = ceil_secs(advertised_window(&p.spec, limit)).max(1);
        ser.bare_item(name)
            .parameter(KeyRef::constant("q"), int(limit))
            .parameter(KeyRef::constant("w"), int(w));
    }
    ser.finish().and_then(|s| HeaderValue::try_from(s).ok())
}

/// `name` as a Structured Fields string (`"default"`), serialized by `sfv`; `None` if it
/// is not printable ASCII.
pub fn sf_string(name: &str) -> Option<String> {
    let name = StringRef::from_str(name).ok()?;
    Some(ItemSerializer::new().bare_item(name).finish())
}

/// The `RateLimit` value for these policies and decisions; `None` for none. Each member is
/// the policy's name as serialized once by `sfv` ([`PolicyInfo::sf_name`]) followed by
/// its two integer parameters (`;r=15;t=23`): per request, only two integers are written.
pub fn ratelimit(items: &[(&PolicyInfo, Decision)]) -> Option<HeaderValue> {
    let mut buf = Vec::with_capacity(32 * items.len());
    let mut num = itoa::Buffer::new();
    for (p, d) in items {
        let Some(name) = &p.sf_name else {
            continue;
        };
        if !buf.is_empty() {
            buf.extend_from_slice(b", ");
        }
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b";r=");
        buf.extend_from_slice(num.format(sf_int(d.remaining)).as_bytes());
        buf.extend_from_slice(b";t=");
        buf.extend_from_slice(num.format(sf_int(ceil_secs(d.reset_after))).as_bytes());
    }
    if buf.is_empty() {
        return None;
    }
    HeaderValue::from_maybe_shared(bytes::Bytes::from(buf)).ok()
}

/// `Retry-After` in whole seconds for a true retry time and a jitter span: the true time
/// plus a uniform extra in `[0, jitter]`, rounded up. Never below `ceil_secs(retry)`.
pub fn retry_after_secs(retry: Duration, jitter: Duration, rng: &mut fastrand::Rng) -> u64 {
    let span = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    let extra = if span == 0 { 0 } else { rng.u64(0..=span) };
    ceil_secs(retry.saturating_add(Duration::from_nanos(extra)))
}

/// The most restrictive decision: the binding denial if any, else the least remaining.
pub fn most_restrictive<'a>(items: &'a [(&PolicyInfo, Decision)]) -> Option<&'a Decision> {
    items
        .iter()
        .map(|(_, d)| d)
        .filter(|d| !d.allowed)
        .max_by_key(|d| d.retry_after.map_or(u128::MAX, |r| r.as_nanos()))
        .or_else(|| items.iter().map(|(_, d)| d).min_by_key(|d| d.remaining))
}

/// Write the RateLimit and legacy headers for `items` into `headers`.
pub fn write(headers: &mut HeaderMap, items: &[(&PolicyInfo, Decision)], opts: &HeaderOptions) {
    render(items, opts).insert_into(headers);
}

/// Rendered rate-limit header fields not yet in a map, in the order they are inserted
/// (at most one value per name). The request path holds these instead of a `HeaderMap`
/// of its own and inserts them straight into the response's map.
#[derive(Debug, Default)]
pub(crate) struct RateHeaders {
    fields: SmallVec<[(&'static HeaderName, HeaderValue); 3]>,
}

impl RateHeaders {
    /// Add a field (inserted after those already added).
    pub(crate) fn push(&mut self, name: &'static HeaderName, value: HeaderValue) {
        self.fields.push((name, value));
    }

    /// Insert every field into `headers`, replacing values of the same names, as
    /// `HeaderMap::insert` (and `HeaderMap::extend` with a map) does.
    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        for (name, value) in self.fields {
            headers.insert(name.clone(), value);
        }
    }

    /// The fields as a map.
    pub(crate) fn into_map(self) -> HeaderMap {
        let mut h = HeaderMap::new();
        self.insert_into(&mut h);
        h
    }
}

/// The RateLimit and legacy headers for `items` (what [`write`] inserts).
pub(crate) fn render(items: &[(&PolicyInfo, Decision)], opts: &HeaderOptions) -> RateHeaders {
    let mut headers = RateHeaders::default();
    if items.is_empty() {
        return headers;
    }
    if opts.ratelimit {
        if let Some(v) = ratelimit_policy(items) {
            headers.push(&RATELIMIT_POLICY, v);
        }
        if let Some(v) = ratelimit(items) {
            headers.push(&RATELIMIT, v);
        }
    }
    if let (Some(fmt), Some(d)) = (opts.legacy, most_restrictive(items)) {
        let reset = ceil_secs(d.reset_after);
        let reset = match fmt {
            ResetFormat::Delta => reset,
            ResetFormat::Epoch => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|n| n.as_secs())
                .unwrap_or(0)
                .saturating_add(reset),
        };
        headers.push(&X_RATELIMIT_LIMIT, HeaderValue::from(d.limit));
        headers.push(&X_RATELIMIT_REMAINING, HeaderValue::from(d.remaining));
        headers.push(&X_RATELIMIT_RESET, HeaderValue::from(reset));
    }
    headers
}

/// Milliseconds, rounded up.
pub fn ceil_millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::{Kind, Rate, Spec};

    fn info(name: &str, kind: Kind, rate: &str, cap: Option<u64>) -> PolicyInfo {
        let mut spec = Spec::new(kind, rate.parse::<Rate>().unwrap());
        spec.capacity = cap;
        PolicyInfo::new(0, name.into(), spec.clone(), spec.build().unwrap())
    }

    #[test]
    fn draft_11_syntax() {
        let a = info("default", Kind::FixedWindow, "100/min", None);
        let b = info("burst", Kind::Gcra, "10/s", Some(20));
        let d1 = Decision::allow(100, 15, Duration::from_millis(22_001));
        let d2 = Decision::deny(20, 0, Duration::from_millis(100), Duration::from_secs(2));
        let items = [(&a, d1), (&b, d2)];
        assert_eq!(
            ratelimit_policy(&items).unwrap(),
            r#""default";q=100;w=60, "burst";q=20;w=2"#
        );
        assert_eq!(
            ratelimit(&items).unwrap(),
            r#""default";r=15;t=23, "burst";r=0;t=2"#
        );
        // the values parse back as Structured Fields Lists
        let parsed: sfv::List = sfv::Parser::new(r#""default";r=15;t=23, "burst";r=0;t=2"#)
            .parse()
            .unwrap();
        assert_eq!(parsed.len(), 2);
    }

    /// The `RateLimit` value as `sfv` serializes the whole list.
    fn ratelimit_by_sfv(items: &[(&PolicyInfo, Decision)]) -> Option<String> {
        let mut ser = ListSerializer::new();
        for (p, d) in items {
            let Ok(name) = StringRef::from_str(&p.name) else {
                continue;
            };
            ser.bare_item(name)
                .parameter(KeyRef::constant("r"), int(d.remaining))
                .parameter(KeyRef::constant("t"), int(ceil_secs(d.reset_after)));
        }
        ser.finish()
    }

    #[test]
    fn ratelimit_matches_sfv_serializing_the_whole_list() {
        let mut rng = fastrand::Rng::with_seed(7);
        let names = [
            "default",
            "a\"quoted\\name",
            "x",
            "per key",
            "\u{e9}t\u{e9}",
        ];
        for _ in 0..500 {
            let n = rng.usize(1..=3);
            let infos: Vec<PolicyInfo> = (0..n)
                .map(|_| info(names[rng.usize(..names.len())], Kind::Gcra, "10/s", None))
                .collect();
            let big = [
                0,
                1,
                59,
                999_999_999_999_999,
                1_000_000_000_000_000,
                u64::MAX,
            ];
            let items: Vec<(&PolicyInfo, Decision)> = infos
                .iter()
                .map(|p| {
                    let r = if rng.bool() {
                        rng.u64(..)
                    } else {
                        big[rng.usize(..big.len())]
                    };
                    let t = Duration::from_nanos(rng.u64(..));
                    (p, Decision::allow(10, r, t))
                })
                .collect();
            let ours = ratelimit(&items).map(|v| v.to_str().unwrap().to_string());
            assert_eq!(
                ours,
                ratelimit_by_sfv(&items),
                "{:?}",
                infos.iter().map(|p| &p.name).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn cached_policy_value_matches_a_fresh_rendering() {
        for (kind, rate, cap) in [
            (Kind::FixedWindow, "100/min", None),
            (Kind::Gcra, "10/s", Some(20)),
            (Kind::TokenBucket, "5/s", Some(50)),
            (Kind::LeakyQueue, "2/s", None),
        ] {
            let p = info("p", kind, rate, cap);
            let limit = p.algorithm.limit();
            let fresh = policy_value([(&p, limit)]).unwrap();
            assert!(fresh.to_str().unwrap().contains(&format!(";q={limit};")));
            let d = Decision::allow(limit, 1, Duration::from_secs(1));
            assert_eq!(ratelimit_policy(&[(&p, d)]).unwrap(), fresh);
            // a decision reporting another limit is rendered afresh, not from the cache
            let other = Decision::allow(limit + 7, 1, Duration::from_secs(1));
            assert_eq!(
                ratelimit_policy(&[(&p, other)]).unwrap(),
                policy_value([(&p, limit + 7)]).unwrap()
            );
            assert_ne!(ratelimit_policy(&[(&p, other)]).unwrap(), fresh);
        }
    }

    #[test]
    fn legacy_delta_and_epoch() {
        let a = info("default", Kind::Gcra, "10/s", None);
        let items = [(&a, Decision::allow(10, 3, Duration::from_millis(700)))];
        let mut h = HeaderMap::new();
        let mut opts = HeaderOptions {
            legacy: Some(ResetFormat::Delta),
            ..Default::default()
        };
        write(&mut h, &items, &opts);
        assert_eq!(h["x-ratelimit-limit"], "10");
        assert_eq!(h["x-ratelimit-remaining"], "3");
        assert_eq!(h["x-ratelimit-reset"], "1");
        opts.legacy = Some(ResetFormat::Epoch);
        write(&mut h, &items, &opts);
        let epoch: u64 = h["x-ratelimit-reset"].to_str().unwrap().parse().unwrap();
        assert!(epoch > 1_700_000_000);
    }

    #[test]
    fn retry_after_never_early_and_spread() {
        let mut rng = fastrand::Rng::with_seed(7);
        let retry = Duration::from_millis(2_300);
        let v: Vec<u64> = (0..1000)
            .map(|_| retry_after_secs(retry, Duration::from_secs(10), &mut rng))
            .collect();
        assert!(v.iter().all(|&s| (3..=13).contains(&s)));
        let distinct: std::collections::BTreeSet<_> = v.iter().collect();
        assert!(distinct.len() >= 10, "{distinct:?}");
        assert_eq!(retry_after_secs(retry, Duration::ZERO, &mut rng), 3);
    }
}
