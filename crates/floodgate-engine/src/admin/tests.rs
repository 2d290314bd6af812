use floodgate_core::{Kind, Rate, Spec};
use serde_json::Value;

use super::*;
use crate::insight::KeyDisplay;
use crate::metrics::DecisionOutcome;
use crate::{LocalStore, PolicyInfo, StoreCheck};

/// Run `f` to its end on a current-thread runtime.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// A store with the default `peek`: it cannot be read without consuming.
struct Unreadable;

impl crate::DecisionStore for Unreadable {
    fn check<'a>(
        &'a self,
        _: &'a [StoreCheck<'a>],
    ) -> crate::store::BoxFuture<'a, Result<floodgate_core::multi::MultiDecision, crate::StoreError>>
    {
        unreachable!("the admin API never checks")
    }
}

struct Fixture {
    infos: Vec<PolicyInfo>,
    store: LocalStore,
    insight: Insight,
}

fn fixture(display: KeyDisplay) -> Fixture {
    let spec = Spec::new(Kind::FixedWindow, Rate::per_minute(5).unwrap());
    let infos = vec![{
        let alg = spec.build().unwrap();
        PolicyInfo::new(0, "api".into(), spec, alg)
    }];
    let store = LocalStore::new(&infos, 100).unwrap();
    let insight = Insight::new("test", display);
    let p = insight.policy(&infos[0]);
    let key = b"user-1".to_vec();
    for _ in 0..8 {
        let d = store
            .check_now(&[StoreCheck {
                policy: &infos[0],
                key: &key,
                cost: 1,
            }])
            .unwrap();
        let o = if d.allowed {
            DecisionOutcome::Passed
        } else {
            DecisionOutcome::Rejected
        };
        p.record(&key, o, 1);
    }
    insight.set_config(serde_json::json!({"store": "redis://u:pw@h:1"}));
    insight.reloaded(1, true, "loaded at startup");
    Fixture {
        infos,
        store,
        insight,
    }
}

fn get(f: &Fixture, path: &str, query: Option<&str>) -> (u16, Value) {
    let peek = StorePeek {
        policies: &f.infos,
        store: &f.store,
    };
    let r = block_on(respond(
        &f.insight,
        &peek,
        &AdminRequest {
            method: "GET",
            path,
            query,
        },
    ))
    .expect("an admin path");
    if r.content_type.starts_with("text/html") {
        return (r.status, Value::String(r.body));
    }
    (r.status, serde_json::from_str(&r.body).expect("JSON"))
}

#[test]
fn overview_lists_decisions_boundaries_top_keys_and_config() {
    let f = fixture(KeyDisplay::Plain);
    let (s, v) = get(&f, "/admin/api/overview", Some("seconds=120"));
    assert_eq!(s, 200, "{v}");
    let p = &v["policies"][0];
    assert_eq!(p["name"], "api");
    assert_eq!(p["windowed"], true);
    assert_eq!(p["timeline"]["seconds"], 120);
    let sum = |k: &str| -> u64 {
        p["timeline"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .sum()
    };
    assert_eq!((sum("passed"), sum("rejected")), (5, 3));
    // 120 s hold at least one minute boundary
    let b = p["boundaries_ms"].as_array().unwrap();
    assert!(!b.is_empty() && b.iter().all(|m| m.as_u64().unwrap() % 60_000 == 0));
    assert_eq!(p["top"]["denied"]["keys"][0]["key"], "user-1");
    assert_eq!(p["top"]["denied"]["keys"][0]["count"], 3);
    assert_eq!(p["top"]["admitted"]["keys"][0]["count"], 5);
    assert_eq!(v["config"]["store"], "redis://***@h:1");
    assert_eq!(v["reloads"][0]["message"], "loaded at startup");
}

#[test]
fn key_lookup_peeks_without_consuming() {
    let f = fixture(KeyDisplay::Hashed);
    let q = Some("policy=api&key=user-1");
    let (s, v) = get(&f, "/admin/api/key", q);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["allowed"], false);
    assert_eq!(v["remaining"], 0);
    assert_eq!(v["limit"], 5);
    assert!(v["key"].as_str().unwrap().starts_with('#'));
    assert_eq!(v["recent"]["denied"]["count"], 3);
    let (_, fresh) = get(&f, "/admin/api/key", Some("policy=api&key=nobody"));
    assert_eq!(
        (fresh["allowed"].clone(), fresh["remaining"].clone()),
        (true.into(), 5.into())
    );
    // peeking again changes nothing
    let (_, again) = get(&f, "/admin/api/key", Some("policy=api&key=nobody"));
    assert_eq!(again["remaining"], 5);
    let (_, top) = get(&f, "/admin/api/top", Some("policy=api&n=1"));
    assert_eq!(top["policies"][0]["denied"]["keys"][0]["key"], v["key"]);
}

#[test]
fn bad_input_is_a_400_with_a_message() {
    let f = fixture(KeyDisplay::Plain);
    let long_key = format!("policy=api&key={}", "k".repeat(MAX_KEY_BYTES + 1));
    let huge = "x=".to_string() + &"y".repeat(MAX_QUERY_BYTES);
    for (path, q, words) in [
        (
            "/admin/api/key",
            Some("policy=nope&key=a"),
            "unknown policy",
        ),
        ("/admin/api/key", Some("policy=api"), "key is required"),
        ("/admin/api/key", Some("key=a"), "policy is required"),
        ("/admin/api/key", Some("policy=api&key="), "empty"),
        ("/admin/api/key", Some(long_key.as_str()), "longer"),
        (
            "/admin/api/key",
            Some("policy=api&key=%G1"),
            "percent-escape",
        ),
        ("/admin/api/top", Some(huge.as_str()), "longer"),
        ("/admin/api/top", Some("policy=nope"), "unknown policy"),
        ("/admin/api/top", Some("n=0"), "from 1 to 100"),
        (
            "/admin/api/overview",
            Some("seconds=100000"),
            "from 1 to 180",
        ),
        (
            "/admin/api/overview",
            Some("bogus=1"),
            "unknown query parameter",
        ),
        ("/admin/api/config", Some("n=1"), "takes none"),
    ] {
        let (s, v) = get(&f, path, q);
        assert_eq!(s, 400, "{path}?{q:?}: {v}");
        let e = v["error"].as_str().unwrap();
        assert!(e.contains(words), "{path}: {e:?} lacks {words:?}");
    }
    let (s, v) = get(&f, "/admin/api/nothing", None);
    assert_eq!(s, 404);
    assert!(v["error"].as_str().is_some());
    let unreadable = Unreadable;
    let peek = StorePeek {
        policies: &f.infos,
        store: &unreadable,
    };
    let post = AdminRequest {
        method: "POST",
        path: "/admin/api/top",
        query: None,
    };
    assert_eq!(
        block_on(respond(&f.insight, &peek, &post)).unwrap().status,
        405
    );
    let r = block_on(respond(
        &f.insight,
        &peek,
        &AdminRequest {
            method: "GET",
            path: "/admin/api/key",
            query: Some("policy=api&key=a"),
        },
    ))
    .unwrap();
    assert_eq!(r.status, 400);
    assert!(r.body.contains("cannot be read"), "{}", r.body);
    // not ours
    for path in ["/metrics", "/administrator", "/"] {
        let req = AdminRequest {
            method: "GET",
            path,
            query: None,
        };
        assert!(block_on(respond(&f.insight, &peek, &req)).is_none());
    }
}

#[test]
fn the_page_is_self_contained() {
    let f = fixture(KeyDisplay::Plain);
    let (s, page) = get(&f, "/admin", None);
    assert_eq!(s, 200);
    let page = page.as_str().unwrap();
    assert!(page.contains("/admin/api/overview"));
    // no external assets: every src/href is relative to this listener
    for attr in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "@import",
    ] {
        assert!(!page.contains(attr), "the page loads {attr}");
    }
}

#[test]
fn the_page_runs_under_its_content_security_policy() {
    // one inline script and one style, each allowed by its hash; no inline style
    // attribute or event handler, which a hash does not allow
    assert_eq!(PAGE.matches("<script").count(), 1);
    assert_eq!(PAGE.matches("<style").count(), 1);
    assert!(!PAGE.contains("style=\"") && !PAGE.contains(" onclick"));
    let csp = content_security_policy();
    assert_eq!(csp.matches("'sha256-").count(), 2, "{csp}");
    assert!(
        csp.starts_with("default-src 'none'; script-src 'sha256-"),
        "{csp}"
    );
    let h = security_headers();
    assert_eq!(h[0], ("x-content-type-options", "nosniff"));
    assert_eq!(h[1].1, csp);
}

#[test]
fn adaptive_shows_the_limit_the_permits_and_per_class_the_shed() {
    use crate::adaptive::{AdaptiveSpec, AlgorithmKind, ClassSpec, Outcome, PartitionedLimiter};
    use floodgate_core::{ManualClock, Nanos};
    use std::sync::Arc;
    let mut f = fixture(KeyDisplay::Plain);
    // no adaptive policy: an empty list, in the overview too
    let (s, v) = get(&f, "/admin/api/adaptive", None);
    assert_eq!((s, &v["adaptive"]), (200, &serde_json::json!([])), "{v}");
    let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 2, 2, 2)
        .unwrap()
        .with_classes(vec![
            ClassSpec {
                name: "critical".into(),
                share: 1.0,
            },
            ClassSpec {
                name: "batch".into(),
                share: 0.0,
            },
        ])
        .unwrap();
    let clock = Arc::new(ManualClock::new(Nanos::ZERO));
    let limiter = PartitionedLimiter::new("backend", spec, clock.clone()).unwrap();
    f.infos.push(PolicyInfo::adaptive(1, limiter.clone()));
    // critical holds one permit for 30 ms and releases it; holds another; batch is shed
    let first = limiter.try_acquire(0).unwrap();
    clock.advance(std::time::Duration::from_millis(30));
    first.release(Outcome::Success);
    let _held = limiter.try_acquire(0).unwrap();
    assert!(limiter.try_acquire(1).is_err());
    let (s, v) = get(&f, "/admin/api/adaptive", None);
    assert_eq!(s, 200, "{v}");
    let expected = serde_json::json!([{
        "name": "backend",
        "algorithm": "aimd",
        "limit": 2,
        "min_limit": 2,
        "max_limit": 2,
        "in_flight": 1,
        "queued": 0,
        "queue": 0,
        "samples": 1,
        "mean_latency_ms": 30.0,
        "classes": [
            { "name": "critical", "share": 1.0, "in_flight": 1, "queued": 0, "shed": 0 },
            { "name": "batch", "share": 0.0, "in_flight": 0, "queued": 0, "shed": 1 },
        ],
    }]);
    assert_eq!(v["adaptive"], expected);
    assert_eq!(v["surface"], "test");
    let (_, o) = get(&f, "/admin/api/overview", None);
    assert_eq!(o["adaptive"], expected);
    // it takes no parameter
    let (s, v) = get(&f, "/admin/api/adaptive", Some("n=1"));
    assert_eq!(s, 400, "{v}");
}
