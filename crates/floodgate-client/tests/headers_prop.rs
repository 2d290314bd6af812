//! Property tests: the header readers never panic on arbitrary bytes and never produce a
//! wait above the configured cap.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_client::headers::{
    HeaderLimits, parse_legacy, parse_ratelimit, parse_ratelimit_policy, parse_retry_after,
    read_advice,
};
use floodgate_client::pacing::{Pacer, PacerConfig};
use floodgate_core::Nanos;
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn limits(cap_ms: u64) -> HeaderLimits {
    HeaderLimits {
        max_wait: Duration::from_millis(cap_ms),
        ..HeaderLimits::default()
    }
}

/// Bytes that look like header values often enough to reach deep into the parsers.
fn headerish() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "[\"a-z0-9;=,.:\\- ()*?]{0,120}".prop_map(String::into_bytes),
        (any::<i64>(), any::<i64>(), "[a-z]{1,5}")
            .prop_map(|(r, t, n)| format!("\"{n}\";r={r};t={t}, {n};q={t};w={r}").into_bytes()),
        any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        (0u64..u64::MAX / 1_000_000_000).prop_map(|s| {
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s % 8_000_000_000))
                .into_bytes()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic_and_respect_the_cap(
        v in headerish(),
        now_secs in 0u64..5_000_000_000,
        cap_ms in 0u64..120_000,
    ) {
        let now = UNIX_EPOCH + Duration::from_secs(now_secs);
        let l = limits(cap_ms);
        if let Some(w) = parse_retry_after(&v, now, &l) {
            prop_assert!(w <= l.max_wait);
        }
        for r in parse_ratelimit(&v, &l) {
            prop_assert!(r.reset.is_none_or(|t| t <= l.max_wait));
        }
        prop_assert!(parse_ratelimit_policy(&v, &l).len() <= l.max_members);
        if let Some(r) = parse_legacy(Some(&v), Some(&v), Some(&v), now, &l) {
            prop_assert!(r.reset.is_none_or(|t| t <= l.max_wait));
        }
    }

    #[test]
    fn whole_header_maps_and_pacing_stay_capped(
        values in proptest::collection::vec(headerish(), 6),
        now_secs in 0u64..5_000_000_000,
        cap_ms in 1u64..120_000,
        seed in any::<u64>(),
    ) {
        let names = ["retry-after", "ratelimit", "ratelimit-policy", "x-ratelimit-limit",
            "x-ratelimit-remaining", "x-ratelimit-reset"];
        let mut h = HeaderMap::new();
        for (n, v) in names.iter().zip(&values) {
            if let Ok(v) = HeaderValue::from_bytes(v) {
                h.append(*n, v);
            }
        }
        let l = limits(cap_ms);
        let a = read_advice(&h, UNIX_EPOCH + Duration::from_secs(now_secs), &l);
        prop_assert!(a.retry_after.is_none_or(|w| w <= l.max_wait));
        prop_assert!(a.remaining.len() <= l.max_members);
        let mut p = Pacer::new(PacerConfig { max_wait: l.max_wait, ..PacerConfig::default() });
        let mut rng = StdRng::seed_from_u64(seed);
        let t = Nanos::from_secs(now_secs);
        // the path the polite engine takes: with the policies, so a hostile q or w is covered
        p.observe_with_policies("h", &a.remaining, &a.policies, t, &mut rng);
        for _ in 0..50 {
            prop_assert!(p.reserve("h", t) <= l.max_wait);
        }
    }
}

#[test]
fn thousands_of_members_are_cheap_and_capped() {
    let big: String = (0..20_000)
        .map(|i| format!("\"p{i}\";r={i};t=1"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut h = HeaderMap::new();
    h.insert("ratelimit", HeaderValue::from_str(&big).unwrap());
    let a = read_advice(&h, SystemTime::now(), &HeaderLimits::default());
    assert!(
        a.remaining.is_empty(),
        "an oversized field is ignored whole"
    );
    let l = HeaderLimits {
        max_field_bytes: usize::MAX,
        ..HeaderLimits::default()
    };
    assert_eq!(
        read_advice(&h, SystemTime::now(), &l).remaining.len(),
        l.max_members
    );
}
