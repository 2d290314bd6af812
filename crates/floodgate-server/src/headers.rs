//! The response headers a proxy should add, rendered from the decisions of one request.
//!
//! The same rendering as `floodgate proxy` and the layer: floodgate-engine's
//! ([`floodgate_engine::headers`], on [`floodgate_core::ratelimit_fields`]; the README's
//! "Headers" section and `docs/ratelimit-fields.md` say what the numbers mean and why).
//!
//! * `RateLimit-Policy: "name";q=100;w=60, ...`: every limit that applied, with its
//!   sustained rate (`q` units per `w` seconds; `requests_per_unit` and the unit for the
//!   windowed algorithms and buckets alike, one less per window for a sliding counter)
//!   and, for a bucket algorithm, its capacity (`floodgate-capacity`).
//! * `RateLimit: "name";r=100;t=60, ...`: per limit, what the key can take over the next
//!   `t` seconds at that rate; `r=0` until `t` (the retry time rounded up) when denied.
//! * `Retry-After: 7` when the request is over limit: `ceil(retry + uniform(0, jitter))`,
//!   so never earlier than the true retry time (draft-ietf-httpapi-ratelimit-headers asks
//!   for jitter; RFC 9110 delay-seconds). Absent when the request can never succeed (its
//!   cost is above the limit, or the limit is 0).
//! * Optional, Envoy ratelimit's `X-RateLimit-Limit`, `-Remaining`, `-Reset` (seconds) of
//!   the binding limit: its capacity, what is left right now, the time back to full.

use floodgate_core::Decision;
use floodgate_core::ratelimit_fields::retry_after_secs;
use floodgate_engine::PolicyInfo;
use floodgate_engine::headers::{binding, legacy_reset, ratelimit_policy, ratelimit_text};

use crate::config::HeaderSettings;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: &str = "RateLimit-Policy";
/// `RateLimit`.
pub const RATELIMIT: &str = "RateLimit";
/// `Retry-After`.
pub const RETRY_AFTER: &str = "Retry-After";

/// Render the headers for `applied` limits (enforced ones only, in request order) with
/// their decisions; `over_limit` says whether the request as a whole is denied. The
/// field values are floodgate-engine's rendering (`floodgate_engine::headers`), the one
/// the layer and the proxy write; a name that several limits share is listed once.
pub fn render(
    settings: &HeaderSettings,
    applied: &[(&PolicyInfo, Decision)],
    over_limit: bool,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if applied.is_empty() {
        return out;
    }
    let retry = if over_limit {
        binding(applied).and_then(|(_, d)| d.retry_after).map(|r| {
            retry_after_secs(r, settings.retry_after_jitter, |span| {
                fastrand::u64(0..=span)
            })
        })
    } else {
        None
    };
    if settings.ratelimit {
        let mut members: Vec<(&PolicyInfo, Decision)> = Vec::with_capacity(applied.len());
        for (p, d) in applied {
            if members.iter().all(|(m, _)| m.name != p.name) {
                members.push((p, *d));
            }
        }
        let text = |v: Option<axum::http::HeaderValue>| {
            v.and_then(|v| v.to_str().ok().map(str::to_string))
                .unwrap_or_default()
        };
        out.push((RATELIMIT_POLICY, text(ratelimit_policy(&members))));
        // written once as text (not as a header value, then copied): what `text` keeps
        // of a value, the same string where `to_str` accepts it and empty otherwise
        let mut state = ratelimit_text(&members);
        if !state
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            state.clear();
        }
        out.push((RATELIMIT, state));
    }
    if let Some(r) = retry {
        out.push((RETRY_AFTER, r.to_string()));
    }
    if let Some(fmt) = settings.legacy
        && let Some((_, d)) = binding(applied)
    {
        out.push(("X-RateLimit-Limit", d.limit.to_string()));
        out.push(("X-RateLimit-Remaining", d.remaining.to_string()));
        out.push((
            "X-RateLimit-Reset",
            legacy_reset(fmt, d.reset_after).to_string(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::ratelimit_fields::Advertised;
    use floodgate_core::{Kind, Rate, Spec};
    use std::time::Duration;

    /// A limit of `count` per `w` seconds by `kind` (0 blocks everything).
    fn def(name: &str, kind: Kind, count: u64, w: u64) -> PolicyInfo {
        let window = Duration::from_secs(w);
        let spec = Spec::new(kind, Rate::new(count.max(1), window).unwrap());
        let fields = if count > 0 {
            Advertised::of(&spec)
        } else {
            Advertised::blocked(window)
        };
        PolicyInfo::with_fields(0, name.into(), spec.clone(), spec.build().unwrap(), fields)
    }

    fn settings(jitter_ms: u64) -> HeaderSettings {
        HeaderSettings {
            ratelimit: true,
            legacy: Some(floodgate_engine::headers::ResetFormat::Delta),
            retry_after_jitter: Duration::from_millis(jitter_ms),
        }
    }

    #[test]
    fn allowed_request_lists_policies_and_what_the_key_can_take() {
        let a = def("per-user", Kind::FixedWindow, 100, 60);
        let b = def("global", Kind::Gcra, 1000, 3600);
        let h = render(
            &settings(0),
            &[
                // 59 used 24.5 s into the minute, where a steady client is at 41: 18 ahead
                (&a, Decision::allow(100, 41, Duration::from_millis(35_500))),
                // half an hour back to full: 500 missing, 499 beyond the one just sent
                (&b, Decision::allow(1000, 500, Duration::from_secs(1800))),
            ],
            false,
        );
        assert_eq!(
            h,
            vec![
                (
                    RATELIMIT_POLICY,
                    "\"per-user\";q=100;w=60, \"global\";q=1000;w=3600;floodgate-capacity=1000"
                        .to_string()
                ),
                (
                    RATELIMIT,
                    "\"per-user\";r=82;t=60, \"global\";r=501;t=3600".to_string()
                ),
                ("X-RateLimit-Limit", "100".to_string()),
                ("X-RateLimit-Remaining", "41".to_string()),
                ("X-RateLimit-Reset", "36".to_string()),
            ]
        );
    }

    #[test]
    fn retry_after_with_jitter_is_never_below_the_truth() {
        let a = def("x", Kind::Gcra, 10, 1);
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
            assert_eq!(
                rl, "\"x\";r=0;t=3",
                "t is the retry rounded up, without jitter"
            );
            seen.insert(ra);
        }
        assert!(seen.len() >= 2, "jitter spreads the values: {seen:?}");
        let h = render(&settings(0), &[(&a, d)], true);
        assert!(h.contains(&(RETRY_AFTER, "3".to_string())));
    }

    #[test]
    fn never_admissible_has_no_retry_after_and_names_are_escaped() {
        let a = def("we\"ird\\n\u{e4}me", Kind::Gcra, 0, 1);
        let h = render(
            &settings(0),
            &[(&a, Decision::never(0, 1, 0, Duration::ZERO))],
            true,
        );
        assert!(h.iter().all(|(k, _)| *k != RETRY_AFTER));
        assert_eq!(h[0].1, "\"we\\\"ird\\\\n?me\";q=0;w=1");
        assert_eq!(h[1].1, "\"we\\\"ird\\\\n?me\";r=0;t=1");
    }
}
