use std::collections::HashMap;
use std::sync::Arc;

use floodgate_core::{ManualClock, Rate, Spec};

use super::*;

fn info(name: &str, kind: Kind) -> PolicyInfo {
    let spec = Spec::new(kind, Rate::per_minute(100).unwrap());
    let alg = spec.build().unwrap();
    PolicyInfo::new(0, name.into(), spec, alg)
}

// on a minute boundary
const T0: Nanos = Nanos(1_700_000_040 * NANOS_PER_SEC);

fn at(ns: u64) -> Nanos {
    Nanos(T0.0 + ns)
}

/// The memory of a policy's summaries after `distinct` keys, each denied once and
/// admitted once, all in one minute.
fn memory_after(distinct: u32) -> (usize, usize) {
    let insight = Insight::new("test", KeyDisplay::Plain);
    let p = insight.policy(&info("api", Kind::Gcra));
    for i in 0..distinct {
        let key = i.to_le_bytes();
        p.record_at(T0, &key, DecisionOutcome::Rejected, 1);
        p.record_at(T0, &key, DecisionOutcome::Passed, 1);
    }
    p.memory()
}

/// The summaries' size does not grow with the keys seen: the same entries and bytes
/// after 2,000 and after 1,000,000 distinct keys.
#[test]
fn memory_is_constant_in_the_number_of_keys() {
    let small = memory_after(2_000);
    let large = memory_after(1_000_000);
    assert_eq!(small, large);
    assert_eq!(large.0, SHARDS * 2 * TOP_K);
}

/// The merged view over several minutes keeps the bound of the module docs against
/// exact counts: listed counts are within `error <= N / k` above the truth, and every
/// key above `N / k` is listed.
#[test]
fn merged_minutes_keep_the_error_bound() {
    let insight = Insight::new("test", KeyDisplay::Plain);
    let p = insight.policy(&info("api", Kind::FixedWindow));
    let mut rng = fastrand::Rng::with_seed(5);
    let mut truth: HashMap<Vec<u8>, u64> = HashMap::new();
    for minute in 0..MINUTES as u64 {
        for _ in 0..6_000 {
            let id = (rng.f64().powi(4) * 2_000.0) as u32;
            let key = format!("user-{id}").into_bytes();
            let at = at(minute * 60 * NANOS_PER_SEC + rng.u64(0..60 * NANOS_PER_SEC));
            p.record_at(at, &key, DecisionOutcome::Rejected, 1);
            *truth.entry(key).or_default() += 1;
        }
    }
    let now = at((MINUTES as u64 - 1) * 60 * NANOS_PER_SEC + NANOS_PER_SEC);
    let top = p.top(now, usize::MAX).denied;
    let n: u64 = truth.values().sum();
    assert_eq!(top.total, n);
    assert_eq!(top.bound, n / TOP_K as u64);
    let listed: HashMap<&[u8], &Counter> = top.keys.iter().map(|c| (c.key.as_slice(), c)).collect();
    for c in &top.keys {
        let t = truth.get(&c.key).copied().unwrap_or(0);
        assert!(c.count >= t && c.count - t <= c.error, "{c:?} true {t}");
        assert!(c.error <= top.bound, "{c:?} bound {}", top.bound);
    }
    for (k, t) in &truth {
        if *t > top.bound {
            assert!(listed.contains_key(k.as_slice()), "heavy key {t} missing");
        }
    }
    // a minute later the first minute has left the view
    let later = p.top(Nanos(now.0 + 60 * NANOS_PER_SEC), 1).denied;
    assert!(later.total < n);
}

#[test]
fn a_flooding_key_leads_and_the_timeline_counts_by_second() {
    let insight = Insight::new("test", KeyDisplay::Plain);
    let p = insight.policy(&info("api", Kind::FixedWindow));
    for i in 0..600u64 {
        let at = at(i * NANOS_PER_SEC / 100); // 6 s at 100/s
        p.record_at(at, b"flood", DecisionOutcome::Rejected, 1);
        p.record_at(
            at,
            format!("k{}", i % 3).as_bytes(),
            DecisionOutcome::Passed,
            2,
        );
    }
    let now = at(5 * NANOS_PER_SEC);
    let top = p.top(now, 3);
    assert_eq!(top.denied.keys[0].key, b"flood");
    assert_eq!(
        (top.denied.keys[0].count, top.denied.keys[0].error),
        (600, 0)
    );
    assert_eq!(top.admitted.total, 1_200);
    assert_eq!(top.admitted.keys.len(), 3);
    let tl = p.timeline(now, 10);
    assert_eq!(tl.len(), 10);
    assert_eq!(tl.last().unwrap().second, now.0 / NANOS_PER_SEC);
    assert_eq!(tl[4].decisions, [100, 0, 100, 0, 0]);
    assert_eq!(tl[4].admitted_cost, 200);
    assert_eq!(tl[0].decisions, [0; 5]);
}

#[test]
fn a_reload_keeps_a_policy_by_name_and_updates_its_shape() {
    let insight = Insight::new("test", KeyDisplay::Plain);
    let a = insight.policy(&info("api", Kind::Gcra));
    a.record_at(T0, b"k", DecisionOutcome::Rejected, 1);
    let b = insight.policy(&info("api", Kind::FixedWindow));
    assert!(Arc::ptr_eq(&a, &b));
    assert!(b.shape().windowed);
    insight.policy(&info("other", Kind::Gcra));
    insight.retain(&["other"]);
    assert!(insight.find("api").is_none());
    assert_eq!(insight.policies().len(), 1);
}

#[test]
fn keys_are_shown_plain_truncated_or_hashed() {
    let clock = Arc::new(ManualClock::new(T0));
    let plain = Insight::with_clock("t", KeyDisplay::Plain, clock.clone());
    let trunc = Insight::with_clock("t", KeyDisplay::Truncated, clock.clone());
    let hashed = Insight::with_clock("t", KeyDisplay::Hashed, clock);
    assert_eq!(plain.show_key(b"alice@example.com"), "alice@example.com");
    assert_eq!(trunc.show_key(b"alice@example.com"), "alic…");
    assert_eq!(trunc.show_key(b"bob"), "bob");
    let h = hashed.show_key(b"alice@example.com");
    assert_eq!(h.len(), 17);
    assert!(h.starts_with('#') && !h.contains("alice"));
    assert_eq!(h, hashed.show_key(b"alice@example.com"));
    assert_ne!(h, hashed.show_key(b"bob"));
    assert_eq!("hashed".parse::<KeyDisplay>(), Ok(KeyDisplay::Hashed));
    assert!(
        "secret"
            .parse::<KeyDisplay>()
            .unwrap_err()
            .contains("plain")
    );
}

#[test]
fn reload_history_is_bounded() {
    let insight = Insight::new("test", KeyDisplay::Plain);
    for g in 0..(RELOADS_KEPT as u64 + 5) {
        insight.reloaded(g, g % 2 == 0, format!("reload {g}"));
    }
    let r = insight.reloads();
    assert_eq!(r.len(), RELOADS_KEPT);
    assert_eq!(r[0].generation, 5);
}
