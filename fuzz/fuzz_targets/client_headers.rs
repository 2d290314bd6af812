//! The client's readers of `Retry-After`, `RateLimit`, `RateLimit-Policy` and the legacy
//! `X-RateLimit-*` fields: never a panic, and never a value outside the documented ranges
//! (every wait at most `max_wait`, at most `max_members` members, a window in
//! `1..=u32::MAX` s, a capacity of at least 1). What floodgate's
//! own servers write (`floodgate_core::ratelimit_fields`, `httpdate`) reads back as
//! written.
#![no_main]
use std::time::{Duration, UNIX_EPOCH};

use arbitrary::Arbitrary;
use floodgate_client::headers::{
    HeaderLimits, QuotaUnit, parse_legacy, parse_ratelimit, parse_ratelimit_policy,
    parse_retry_after, read_advice,
};
use floodgate_core::ratelimit_fields::{Advertised, SF_INT_MAX, push_state, sf_string};
use floodgate_core::{Kind, Rate, Spec};
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    now_secs: u32,
    max_wait_ms: u32,
    max_members: u8,
    max_field_bytes: u16,
    retry_after: &'a [u8],
    ratelimit: &'a [u8],
    policy: &'a [u8],
    legacy: [Option<&'a [u8]>; 3],
    delay_secs: u32,
    written: Vec<Written>,
}

/// A policy as a floodgate server advertises it, and its state.
#[derive(Arbitrary, Debug)]
struct Written {
    name: String,
    shape: u8,
    kind: u8,
    count: u64,
    period_ns: u64,
    capacity: Option<u64>,
    r: u64,
    t: u64,
}

fuzz_target!(|input: Input<'_>| {
    let limits = HeaderLimits {
        max_wait: Duration::from_millis(u64::from(input.max_wait_ms)),
        max_members: usize::from(input.max_members),
        max_field_bytes: usize::from(input.max_field_bytes),
    };
    let now = UNIX_EPOCH + Duration::from_secs(u64::from(input.now_secs));
    let capped = |d: Duration| d.min(limits.max_wait);

    // any bytes
    if let Some(d) = parse_retry_after(input.retry_after, now, &limits) {
        assert!(d <= limits.max_wait);
    }
    for m in parse_ratelimit(input.ratelimit, &limits)
        .iter()
        .chain(&parse_legacy(
            input.legacy[0],
            input.legacy[1],
            input.legacy[2],
            now,
            &limits,
        ))
    {
        assert!(m.reset.is_none_or(|t| t <= limits.max_wait), "{m:?}");
    }
    assert!(parse_ratelimit(input.ratelimit, &limits).len() <= limits.max_members);
    let policies = parse_ratelimit_policy(input.policy, &limits);
    assert!(policies.len() <= limits.max_members);
    for p in &policies {
        let in_range = |w: Duration| (1..=u64::from(u32::MAX)).contains(&w.as_secs());
        assert!(p.window.is_none_or(in_range), "{p:?}");
        assert!(p.capacity.is_none_or(|c| c >= 1), "{p:?}");
    }
    let mut h = HeaderMap::new();
    for (name, v) in [
        ("retry-after", Some(input.retry_after)),
        ("ratelimit", Some(input.ratelimit)),
        ("ratelimit-policy", Some(input.policy)),
        ("x-ratelimit-limit", input.legacy[0]),
        ("x-ratelimit-remaining", input.legacy[1]),
        ("x-ratelimit-reset", input.legacy[2]),
    ] {
        if let Some(v) = v.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            h.append(name, v);
        }
    }
    let advice = read_advice(&h, now, &limits);
    assert!(advice.retry_after.is_none_or(|d| d <= limits.max_wait));
    assert!(advice.remaining.len() <= limits.max_members);
    assert!(advice.policies.len() <= limits.max_members);

    // what floodgate writes (a field longer than max_field_bytes is ignored whole)
    let fits = |f: &str| f.len() <= limits.max_field_bytes;
    let delay = u64::from(input.delay_secs);
    let secs = delay.to_string();
    let want = fits(&secs).then(|| capped(Duration::from_secs(delay)));
    assert_eq!(parse_retry_after(secs.as_bytes(), now, &limits), want);
    let date = httpdate::fmt_http_date(now + Duration::from_secs(delay));
    let want = (fits(&date) && delay > 0).then(|| capped(Duration::from_secs(delay)));
    assert_eq!(
        parse_retry_after(date.as_bytes(), now, &limits),
        want,
        "{date}"
    );

    let mut policy_field = String::new();
    let mut state_field = String::new();
    let mut expected = Vec::new();
    for w in &input.written {
        let Some(adv) = advertised(w) else { continue };
        let name = sf_string(&w.name);
        if !policy_field.is_empty() {
            policy_field.push_str(", ");
            state_field.push_str(", ");
        }
        policy_field.push_str(&adv.policy_member(&name));
        push_state(&mut state_field, &name, (w.r, w.t));
        expected.push((w, adv));
    }
    let read_policies = parse_ratelimit_policy(policy_field.as_bytes(), &limits);
    let read_states = parse_ratelimit(state_field.as_bytes(), &limits);
    let n = |f: &str| {
        if fits(f) {
            expected.len().min(limits.max_members)
        } else {
            0
        }
    };
    assert_eq!(read_policies.len(), n(&policy_field), "{policy_field}");
    assert_eq!(read_states.len(), n(&state_field), "{state_field}");
    for ((w, adv), (p, s)) in expected.iter().zip(read_policies.iter().zip(&read_states)) {
        let name: String = w
            .name
            .chars()
            .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
            .collect();
        assert_eq!((&p.name, &s.name), (&name, &name));
        assert_eq!(p.quota, adv.q.min(SF_INT_MAX));
        let concurrent = w.shape % 3 == 2;
        let unit = if concurrent {
            QuotaUnit::ConcurrentRequests
        } else {
            QuotaUnit::Requests
        };
        assert_eq!(p.unit, unit);
        if !concurrent {
            let window = (1..=u64::from(u32::MAX)).contains(&adv.w);
            assert_eq!(p.window, window.then(|| Duration::from_secs(adv.w)));
            assert_eq!(
                p.capacity,
                adv.capacity.map(|c| c.min(SF_INT_MAX)).filter(|c| *c >= 1)
            );
        }
        assert_eq!(s.remaining, w.r.min(SF_INT_MAX));
        assert_eq!(
            s.reset,
            Some(capped(Duration::from_secs(w.t.min(SF_INT_MAX))))
        );
    }
});

/// What a server advertises for `w`: a policy of some algorithm and rate, a blocking
/// limit, or an in-flight limit.
fn advertised(w: &Written) -> Option<Advertised> {
    Some(match w.shape % 3 {
        0 => {
            let rate = Rate::from_nanos(w.count, w.period_ns).ok()?;
            let mut spec = Spec::new(Kind::ALL[usize::from(w.kind) % Kind::ALL.len()], rate);
            spec.capacity = w.capacity;
            spec.build().ok()?;
            Advertised::of(&spec)
        }
        1 => Advertised::blocked(Duration::from_nanos(w.period_ns)),
        _ => Advertised::concurrent(w.count),
    })
}
