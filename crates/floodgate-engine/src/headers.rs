//! Response headers rendered from [`Decision`]s: the RateLimit fields of
//! draft-ietf-httpapi-ratelimit-headers, the legacy `X-RateLimit-*` trio, `Retry-After`
//! with jitter, and the delay header.
//!
//! * `RateLimit-Policy: "per-ip";q=100;w=60, "global";q=5000;w=60`: one member per
//!   policy checked, its sustained rate (`q` units per `w` seconds) and, for the bucket
//!   algorithms, `floodgate-capacity`.
//! * `RateLimit: "per-ip";r=100;t=60, "global";r=0;t=2`: what the key can take over the
//!   next `t` seconds at that rate; `r=0` until `t` after a denial.
//!
//! Both come from [`floodgate_core::ratelimit_fields`], the rendering the server's
//! headers use too (the README's "Headers" section and `docs/ratelimit-fields.md` say
//! what the numbers mean and why).
//!
//! * `Retry-After: 7` on denials: `ceil(retry_after + uniform(0, jitter))` seconds, so
//!   never earlier than the true retry time rounded up
//!   ([`floodgate_core::ratelimit_fields::retry_after_secs`]).
//! * `X-RateLimit-Limit/Remaining/Reset` (optional): from the most restrictive policy;
//!   the capacity, what is left right now, and the time back to full capacity in delta
//!   seconds or Unix epoch seconds.
//! * `X-RateLimit-Delay-Ms: 300` when the request was held (leaky queue), in
//!   milliseconds rounded up.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_core::Decision;
use floodgate_core::decision::ceil_secs;
use floodgate_core::ratelimit_fields::push_state;
use http::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use crate::store::PolicyInfo;

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

/// The config form: `delta` or `epoch` (`legacy = "off"` is no format at all).
#[cfg(feature = "config")]
impl<'de> serde::Deserialize<'de> for ResetFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ResetFormat, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        match s.as_str() {
            "delta" => Ok(ResetFormat::Delta),
            "epoch" => Ok(ResetFormat::Epoch),
            _ => Err(serde::de::Error::custom(format!(
                "{s:?}: expected delta or epoch"
            ))),
        }
    }
}

/// Which headers to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderOptions {
    /// `RateLimit-Policy` and `RateLimit`. Default on.
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

/// The `RateLimit-Policy` value for these policies; `None` for none. A single policy (the
/// usual case) reuses the value rendered when the limiter was built.
pub fn ratelimit_policy(items: &[(&PolicyInfo, Decision)]) -> Option<HeaderValue> {
    match items {
        [] => None,
        [(p, _)] => p.policy_value.clone(),
        _ => {
            let mut v = String::with_capacity(48 * items.len());
            for (p, _) in items {
                if !v.is_empty() {
                    v.push_str(", ");
                }
                v.push_str(&p.policy_member);
            }
            HeaderValue::try_from(v).ok()
        }
    }
}

/// The `RateLimit` value for these policies and decisions; `None` for none. Each member is
/// the policy's name as serialized once ([`PolicyInfo::sf_name`]) followed by its two
/// integer parameters (`;r=100;t=1`): per request, only two integers are written.
pub fn ratelimit(items: &[(&PolicyInfo, Decision)]) -> Option<HeaderValue> {
    if items.is_empty() {
        return None;
    }
    HeaderValue::from_maybe_shared(bytes::Bytes::from(ratelimit_text(items))).ok()
}

/// The text of [`ratelimit`]'s value (empty for no items), for a caller that keeps it as
/// a string: not validated as a header value.
pub fn ratelimit_text(items: &[(&PolicyInfo, Decision)]) -> String {
    let mut buf = String::with_capacity(32 * items.len());
    for (p, d) in items {
        if !buf.is_empty() {
            buf.push_str(", ");
        }
        push_state(&mut buf, &p.sf_name, p.fields.state(d));
    }
    buf
}

/// The binding decision of a set: the denied one with the longest retry (a denial that
/// can never succeed, `retry_after: None`, binds over any retry), else the admitted one
/// with the fewest remaining. Later items win ties among denials, earlier ones among
/// admissions.
pub fn binding<T>(items: &[(T, Decision)]) -> Option<&(T, Decision)> {
    items
        .iter()
        .filter(|(_, d)| !d.allowed)
        .max_by_key(|(_, d)| d.retry_after.map_or(u128::MAX, |r| r.as_nanos()))
        .or_else(|| items.iter().min_by_key(|(_, d)| d.remaining))
}

/// The most restrictive decision ([`binding`]'s).
pub fn most_restrictive<'a>(items: &'a [(&PolicyInfo, Decision)]) -> Option<&'a Decision> {
    binding(items).map(|(_, d)| d)
}

/// Write the RateLimit and legacy headers for `items` into `headers`.
pub fn write(headers: &mut HeaderMap, items: &[(&PolicyInfo, Decision)], opts: &HeaderOptions) {
    render(items, opts).insert_into(headers);
}

/// Rendered rate-limit header fields not yet in a map, in the order they are inserted
/// (at most one value per name). The request path holds these instead of a `HeaderMap`
/// of its own and inserts them straight into the response's map.
#[derive(Debug, Default)]
pub struct RateHeaders {
    fields: SmallVec<[(&'static HeaderName, HeaderValue); 3]>,
}

impl RateHeaders {
    /// Add a field (inserted after those already added).
    pub fn push(&mut self, name: &'static HeaderName, value: HeaderValue) {
        self.fields.push((name, value));
    }

    /// Insert every field into `headers`, replacing values of the same names, as
    /// `HeaderMap::insert` (and `HeaderMap::extend` with a map) does.
    pub fn insert_into(self, headers: &mut HeaderMap) {
        for (name, value) in self.fields {
            headers.insert(name.clone(), value);
        }
    }

    /// The fields, in the order they were added.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&HeaderName, &HeaderValue)> {
        self.fields.iter().map(|(name, value)| (*name, value))
    }

    /// The fields as a map.
    pub fn into_map(self) -> HeaderMap {
        let mut h = HeaderMap::new();
        self.insert_into(&mut h);
        h
    }
}

/// The RateLimit and legacy headers for `items` (what [`write()`] inserts).
pub fn render(items: &[(&PolicyInfo, Decision)], opts: &HeaderOptions) -> RateHeaders {
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
        let reset = legacy_reset(fmt, d.reset_after);
        headers.push(&X_RATELIMIT_LIMIT, HeaderValue::from(d.limit));
        headers.push(&X_RATELIMIT_REMAINING, HeaderValue::from(d.remaining));
        headers.push(&X_RATELIMIT_RESET, HeaderValue::from(reset));
    }
    headers
}

/// The value of `X-RateLimit-Reset` for a reset `reset_after` from now: whole seconds,
/// rounded up, from now ([`ResetFormat::Delta`]) or since the Unix epoch by the system
/// clock ([`ResetFormat::Epoch`]).
pub fn legacy_reset(fmt: ResetFormat, reset_after: Duration) -> u64 {
    let reset = ceil_secs(reset_after);
    match fmt {
        ResetFormat::Delta => reset,
        ResetFormat::Epoch => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|n| n.as_secs())
            .unwrap_or(0)
            .saturating_add(reset),
    }
}

/// Milliseconds, rounded up.
pub fn ceil_millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::ratelimit_fields::SF_INT_MAX;
    use floodgate_core::{Kind, Rate, Spec};
    use sfv::{Integer, KeyRef, ListSerializer, StringRef};

    fn info(name: &str, kind: Kind, rate: &str, cap: Option<u64>) -> PolicyInfo {
        let mut spec = Spec::new(kind, rate.parse::<Rate>().unwrap());
        spec.capacity = cap;
        PolicyInfo::new(0, name.into(), spec.clone(), spec.build().unwrap())
    }

    #[test]
    fn ratelimit_fields_syntax() {
        let a = info("default", Kind::FixedWindow, "100/min", None);
        let b = info("burst", Kind::Gcra, "10/s", Some(20));
        // 85 used 38 s into the window: 21 ahead of the steady 64
        let d1 = Decision::allow(100, 15, Duration::from_millis(22_001));
        let d2 = Decision::deny(20, 0, Duration::from_millis(100), Duration::from_secs(2));
        let items = [(&a, d1), (&b, d2)];
        let policy = ratelimit_policy(&items).unwrap();
        let state = ratelimit(&items).unwrap();
        assert_eq!(
            policy,
            r#""default";q=100;w=60, "burst";q=10;w=1;floodgate-capacity=20"#
        );
        assert_eq!(state, r#""default";r=79;t=60, "burst";r=0;t=1"#);
        // the values parse back as Structured Fields Lists
        for v in [policy, state] {
            let parsed: sfv::List = sfv::Parser::new(v.as_bytes()).parse().unwrap();
            assert_eq!(parsed.len(), 2);
        }
        // one policy: the value rendered when the limiter was built
        assert_eq!(
            ratelimit_policy(&items[1..]).unwrap(),
            r#""burst";q=10;w=1;floodgate-capacity=20"#
        );
        assert!(ratelimit_policy(&[]).is_none() && ratelimit(&[]).is_none());
    }

    fn int(v: u64) -> Integer {
        Integer::constant(v.min(SF_INT_MAX) as i64)
    }

    /// Both fields as `sfv` serializes the whole lists.
    fn by_sfv(items: &[(&PolicyInfo, Decision)]) -> (String, String) {
        let (mut policy, mut state) = (ListSerializer::new(), ListSerializer::new());
        for (p, d) in items {
            let name = StringRef::from_str(&p.name).unwrap();
            let a = &p.fields;
            let member = policy
                .bare_item(name)
                .parameter(KeyRef::constant("q"), int(a.q))
                .parameter(KeyRef::constant("w"), int(a.w));
            if let Some(c) = a.capacity {
                member.parameter(KeyRef::constant("floodgate-capacity"), int(c));
            }
            let (r, t) = a.state(d);
            state
                .bare_item(name)
                .parameter(KeyRef::constant("r"), int(r))
                .parameter(KeyRef::constant("t"), int(t));
        }
        (policy.finish().unwrap(), state.finish().unwrap())
    }

    #[test]
    fn fields_match_sfv_serializing_the_whole_lists() {
        let mut rng = fastrand::Rng::with_seed(7);
        let names = ["default", "a\"quoted\\name", "x", "per key"];
        let kinds = Kind::ALL;
        let rates = ["10/s", "1/h", "1000000000/s", "7/333ms"];
        for _ in 0..500 {
            let n = rng.usize(1..=3);
            let infos: Vec<PolicyInfo> = (0..n)
                .map(|_| {
                    let cap = rng.bool().then(|| rng.u64(1..1000));
                    info(
                        names[rng.usize(..names.len())],
                        kinds[rng.usize(..kinds.len())],
                        rates[rng.usize(..rates.len())],
                        cap,
                    )
                })
                .collect();
            let items: Vec<(&PolicyInfo, Decision)> = infos
                .iter()
                .map(|p| {
                    let r = rng.u64(..);
                    let t = Duration::from_nanos(rng.u64(..));
                    let d = if rng.bool() {
                        Decision::allow(10, r, t)
                    } else {
                        Decision::deny(10, r, Duration::from_nanos(rng.u64(..)), t)
                    };
                    (p, d)
                })
                .collect();
            let ours = (
                ratelimit_policy(&items)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string(),
                ratelimit(&items).unwrap().to_str().unwrap().to_string(),
            );
            assert_eq!(
                ours,
                by_sfv(&items),
                "{:?}",
                infos.iter().map(|p| &p.name).collect::<Vec<_>>()
            );
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
        use floodgate_core::ratelimit_fields::retry_after_secs;
        let mut rng = fastrand::Rng::with_seed(7);
        let retry = Duration::from_millis(2_300);
        let v: Vec<u64> = (0..1000)
            .map(|_| retry_after_secs(retry, Duration::from_secs(10), |s| rng.u64(0..=s)))
            .collect();
        assert!(v.iter().all(|&s| (3..=13).contains(&s)));
        let distinct: std::collections::BTreeSet<_> = v.iter().collect();
        assert!(distinct.len() >= 10, "{distinct:?}");
    }
}
