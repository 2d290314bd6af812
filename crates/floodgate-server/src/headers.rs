//! The response headers a proxy should add, rendered from the decisions of one request.
//!
//! The same rendering as `floodgate proxy` (the HTTP section of the README), from the core
//! [`Decision`]:
//!
//! * `RateLimit-Policy: "name";q=100;w=60, ...`: every limit that applied, `q` the limit
//!   (capacity: what a key at rest admits at once) and `w` the seconds to refill `q` at
//!   the limit's rate (the window for windowed algorithms), rounded up, at least 1. With
//!   the default capacity (the rate's count) that is `requests_per_unit` and the unit.
//! * `RateLimit: "name";r=7;t=12, ...`: per limit, `r` remaining now and `t` the seconds
//!   until the key is back at full capacity (`reset_after`, rounded up).
//! * `Retry-After: 7` when the request is over limit: `ceil(retry + uniform(0, jitter))`,
//!   so never earlier than the true retry time (draft-ietf-httpapi-ratelimit-headers asks
//!   for jitter; RFC 9110 delay-seconds). Absent when the request can never succeed (its
//!   cost is above the limit, or the limit is 0).
//! * Optional, Envoy ratelimit's `X-RateLimit-Limit`, `-Remaining`, `-Reset` (seconds) of
//!   the binding limit.

use std::fmt::Write;
use std::time::Duration;

use floodgate_core::Decision;
use floodgate_core::decision::ceil_secs;

use crate::config::{HeaderSettings, LimitDef};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: &str = "RateLimit-Policy";
/// `RateLimit`.
pub const RATELIMIT: &str = "RateLimit";
/// `Retry-After`.
pub const RETRY_AFTER: &str = "Retry-After";

/// A limit's name as a Structured Fields String: printable ASCII, `"` and `\` escaped,
/// anything else replaced by `?`.
pub fn sf_string(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            ' '..='~' => s.push(c),
            _ => s.push('?'),
        }
    }
    s.push('"');
    s
}

/// Retry-After seconds for a true `retry` and a jitter span: never below `ceil(retry)`.
///
/// ```
/// use floodgate_server::headers::retry_after_secs;
/// use std::time::Duration;
/// let s = retry_after_secs(Duration::from_millis(2_300), Duration::from_secs(2));
/// assert!((3..=5).contains(&s));
/// assert_eq!(retry_after_secs(Duration::from_millis(2_300), Duration::ZERO), 3);
/// ```
pub fn retry_after_secs(retry: Duration, jitter: Duration) -> u64 {
    let extra = match u64::try_from(jitter.as_nanos()) {
        Ok(0) => 0,
        Ok(j) => fastrand::u64(0..=j),
        Err(_) => fastrand::u64(..),
    };
    ceil_secs(retry.saturating_add(Duration::from_nanos(extra)))
}

/// The binding decision of a set: the denied one with the longest retry ("never" binds
/// over any retry), else the admitted one with the fewest remaining.
pub fn binding<T>(items: &[(T, Decision)]) -> Option<&(T, Decision)> {
    let denied = items
        .iter()
        .filter(|(_, d)| !d.allowed)
        .max_by_key(|(_, d)| d.retry_after.map_or((1, 0), |r| (0, r.as_nanos())));
    denied.or_else(|| items.iter().min_by_key(|(_, d)| d.remaining))
}

/// Render the headers for `applied` limits (enforced ones only, in request order) with
/// their decisions; `over_limit` says whether the request as a whole is denied.
pub fn render(
    settings: &HeaderSettings,
    applied: &[(&LimitDef, Decision)],
    over_limit: bool,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if applied.is_empty() {
        return out;
    }
    let retry = if over_limit {
        binding(applied)
            .and_then(|(_, d)| d.retry_after)
            .map(|r| retry_after_secs(r, settings.retry_after_jitter))
    } else {
        None
    };
    let t_of = |d: &Decision| -> u64 { ceil_secs(d.reset_after) };
    if settings.ratelimit {
        let mut policy = String::new();
        let mut state = String::new();
        let mut seen: Vec<&str> = Vec::with_capacity(applied.len());
        for (def, d) in applied {
            if seen.contains(&def.name.as_str()) {
                continue;
            }
            seen.push(&def.name);
            let name = sf_string(&def.name);
            let w = ceil_secs(def.policy_window()).max(1);
            if !policy.is_empty() {
                policy.push_str(", ");
                state.push_str(", ");
            }
            let _ = write!(policy, "{name};q={};w={w}", d.limit);
            let _ = write!(state, "{name};r={};t={}", d.remaining, t_of(d));
        }
        out.push((RATELIMIT_POLICY, policy));
        out.push((RATELIMIT, state));
    }
    if let Some(r) = retry {
        out.push((RETRY_AFTER, r.to_string()));
    }
    if settings.x_ratelimit
        && let Some((_, d)) = binding(applied)
    {
        out.push(("X-RateLimit-Limit", d.limit.to_string()));
        out.push(("X-RateLimit-Remaining", d.remaining.to_string()));
        out.push(("X-RateLimit-Reset", t_of(d).to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Unit;

    fn def(name: &str, q: u64, w: u64) -> LimitDef {
        LimitDef {
            name: name.into(),
            explicit_name: None,
            replaces: vec![],
            spec: None,
            requests_per_unit: q,
            unit: Unit::Unknown,
            window: Duration::from_secs(w),
        }
    }

    fn settings(jitter_ms: u64) -> HeaderSettings {
        HeaderSettings {
            ratelimit: true,
            x_ratelimit: true,
            retry_after_jitter: Duration::from_millis(jitter_ms),
        }
    }

    #[test]
    fn allowed_request_lists_policies_and_remaining() {
        let a = def("per-user", 100, 60);
        let b = def("global", 1000, 3600);
        let h = render(
            &settings(0),
            &[
                (&a, Decision::allow(100, 41, Duration::from_millis(35_500))),
                (&b, Decision::allow(1000, 500, Duration::from_secs(1800))),
            ],
            false,
        );
        assert_eq!(
            h,
            vec![
                (
                    RATELIMIT_POLICY,
                    "\"per-user\";q=100;w=60, \"global\";q=1000;w=3600".to_string()
                ),
                (
                    RATELIMIT,
                    "\"per-user\";r=41;t=36, \"global\";r=500;t=1800".to_string()
                ),
                ("X-RateLimit-Limit", "100".to_string()),
                ("X-RateLimit-Remaining", "41".to_string()),
                ("X-RateLimit-Reset", "36".to_string()),
            ]
        );
    }

    #[test]
    fn retry_after_with_jitter_is_never_below_the_truth() {
        let a = def("x", 10, 1);
        let truth = Duration::from_millis(2_300);
        let d = Decision::deny(10, 0, truth, Duration::from_secs(1));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..500 {
            let h = render(&settings(2_000), &[(&a, d)], true);
            let ra: u64 = h
                .iter()
                .find(|(k, _)| *k == RETRY_AFTER)
                .unwrap()
                .1
                .parse()
                .unwrap();
            assert!((3..=5).contains(&ra), "{ra}");
            let rl = &h.iter().find(|(k, _)| *k == RATELIMIT).unwrap().1;
            assert_eq!(rl, "\"x\";r=0;t=1", "t is the reset, without jitter");
            seen.insert(ra);
        }
        assert!(seen.len() >= 2, "jitter spreads the values: {seen:?}");
        let h = render(&settings(0), &[(&a, d)], true);
        assert!(h.contains(&(RETRY_AFTER, "3".to_string())));
    }

    #[test]
    fn never_admissible_has_no_retry_after_and_names_are_escaped() {
        let a = def("we\"ird\\näme", 0, 1);
        let h = render(
            &settings(0),
            &[(&a, Decision::never(0, 1, 0, Duration::ZERO))],
            true,
        );
        assert!(h.iter().all(|(k, _)| *k != RETRY_AFTER));
        assert!(
            h[0].1.starts_with("\"we\\\"ird\\\\n?me\";q=0;w=1"),
            "{}",
            h[0].1
        );
    }
}
