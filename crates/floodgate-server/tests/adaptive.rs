//! The adaptive policies of the HTTP door (`/v1/adaptive/acquire` and `/release`) over
//! loopback: permits up to the limit then 503 with `Retry-After`, classes shed lowest
//! first, the limit falling on drops and rising on successes, a permit never released
//! given back at its lease TTL, metrics and the admin API, and bad input answered with
//! exact bodies; bad config refused naming the field.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

/// A fixed limit of 2 (AIMD with floor = ceiling), two classes.
const FIXED: &str = r#"
adaptive:
  backend:
    algorithm: aimd
    min_limit: 2
    max_limit: 2
    classes:
      - {name: critical, share: 0.5}
      - {name: sheddable, share: 0}
  short:
    algorithm: aimd
    min_limit: 1
    max_limit: 1
    lease_ttl: 300ms
  learning:
    algorithm: aimd
    min_limit: 1
    initial_limit: 10
    max_limit: 20
"#;

async fn acquire(http: std::net::SocketAddr, body: Value) -> HttpReply {
    crate::http(
        http,
        "POST",
        "/v1/adaptive/acquire",
        body.to_string().as_bytes(),
    )
    .await
}

async fn release(http: std::net::SocketAddr, body: Value) -> HttpReply {
    crate::http(
        http,
        "POST",
        "/v1/adaptive/release",
        body.to_string().as_bytes(),
    )
    .await
}

fn lease(r: &HttpReply) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["lease"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn permits_up_to_the_limit_then_503_until_one_is_released() {
    let srv = start(FIXED).await;
    let http = srv.running.http.unwrap();
    let a = acquire(http, json!({"policy": "backend", "class": "critical"})).await;
    let v = a.json();
    assert_eq!(
        (
            &v["allowed"],
            &v["policy"],
            &v["class"],
            &v["limit"],
            &v["in_flight"],
            &v["waited_ms"]
        ),
        (
            &json!(true),
            &json!("backend"),
            &json!("critical"),
            &json!(2),
            &json!(1),
            &json!(0)
        ),
        "{v}"
    );
    let a = lease(&a);
    assert!(a.parse::<u64>().unwrap() > 0);
    // no class: the last (lowest) one
    let b = acquire(http, json!({"policy": "backend"})).await;
    assert_eq!(b.json()["class"], "sheddable");
    let b = lease(&b);
    let full = acquire(http, json!({"policy": "backend", "class": "critical"})).await;
    assert_eq!(full.status, 503, "{}", full.body);
    assert_eq!(full.header("retry-after"), Some("1"));
    assert_eq!(
        full.json(),
        json!({"allowed": false, "lease": null, "policy": "backend", "class": "critical",
               "limit": 2, "in_flight": 2, "queue_full": false, "retry_after_ms": 1000})
    );
    // released once frees a place; twice, or an id never granted, frees nothing
    let r = release(http, json!({"lease": a, "status": 200})).await;
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"released":true}"#));
    let r = release(http, json!({"lease": a})).await;
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"released":false}"#));
    let r = release(http, json!({"lease": "12345"})).await;
    assert_eq!(r.body, r#"{"released":false}"#);
    let c = acquire(http, json!({"policy": "backend", "class": "critical"})).await;
    lease(&c);
    assert!(
        release(http, json!({"lease": b, "outcome": "ignore"}))
            .await
            .status
            == 200
    );
    srv.stop().await;
}

#[tokio::test]
async fn the_lowest_class_is_shed_first_and_counted() {
    let srv = start(FIXED).await;
    let http = srv.running.http.unwrap();
    // critical (guaranteed 1 of 2) asks; sheddable borrows the place nobody claims
    let c = lease(&acquire(http, json!({"policy": "backend", "class": "critical"})).await);
    let s = lease(&acquire(http, json!({"policy": "backend", "class": "sheddable"})).await);
    // full: a sheddable request is refused; when the sheddable permit ends, the place
    // goes to critical, and sheddable is still refused while critical holds both
    let shed = acquire(http, json!({"policy": "backend", "class": "sheddable"})).await;
    assert_eq!(shed.status, 503);
    assert_eq!(release(http, json!({"lease": s})).await.status, 200);
    lease(&acquire(http, json!({"policy": "backend", "class": "critical"})).await);
    let shed = acquire(http, json!({"policy": "backend", "class": "sheddable"})).await;
    assert_eq!(shed.status, 503);
    let metrics = crate::http(http, "GET", "/metrics", b"").await.body;
    assert!(
        metrics.contains(r#"floodgate_adaptive_shed_total{policy="backend",class="sheddable"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"floodgate_adaptive_in_flight{policy="backend",class="critical"} 2"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"floodgate_adaptive_limit{policy="backend"} 2"#));
    let admin = crate::http(http, "GET", "/admin/api/adaptive", b"").await;
    assert_eq!(admin.status, 200, "{}", admin.body);
    let v = admin.json();
    let backend = v["adaptive"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "backend")
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    assert_eq!(backend["limit"], 2, "{backend}");
    assert_eq!(backend["in_flight"], 2, "{backend}");
    assert_eq!(release(http, json!({"lease": c})).await.status, 200);
    srv.stop().await;
}

#[tokio::test]
async fn the_limit_falls_on_drops_and_rises_on_successes() {
    let srv = start(FIXED).await;
    let http = srv.running.http.unwrap();
    let limit_now = |r: &HttpReply| r.json()["limit"].as_u64().unwrap();
    let first = acquire(http, json!({"policy": "learning"})).await;
    let start_limit = limit_now(&first);
    assert_eq!(start_limit, 10);
    release(http, json!({"lease": lease(&first), "status": 503})).await;
    let mut low = start_limit;
    for _ in 0..5 {
        let r = acquire(http, json!({"policy": "learning"})).await;
        low = low.min(limit_now(&r));
        let out = release(http, json!({"lease": lease(&r), "outcome": "timeout"})).await;
        assert_eq!(out.body, r#"{"released":true}"#);
    }
    assert!(low < start_limit, "drops lowered the limit: {low}");
    let after_drops = limit_now(&acquire(http, json!({"policy": "learning"})).await);
    // successes (AIMD grows while the permits in flight are near the limit): hold
    // several at once and release them all as successes, a few rounds
    let mut high = after_drops;
    for _ in 0..20 {
        let mut held = Vec::new();
        loop {
            let r = acquire(http, json!({"policy": "learning"})).await;
            if r.status != 200 {
                break;
            }
            high = high.max(limit_now(&r));
            held.push(lease(&r));
        }
        for l in held {
            release(http, json!({"lease": l, "status": 200})).await;
        }
    }
    assert!(
        high > after_drops,
        "successes raised the limit: {after_drops} -> {high}"
    );
    assert!(high <= 20, "never past the ceiling: {high}");
    srv.stop().await;
}

#[tokio::test]
async fn a_permit_never_released_is_given_back_at_its_lease_ttl() {
    let srv = start(FIXED).await;
    let http = srv.running.http.unwrap();
    let held = lease(&acquire(http, json!({"policy": "short"})).await);
    assert_eq!(acquire(http, json!({"policy": "short"})).await.status, 503);
    let mut freed = false;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let r = acquire(http, json!({"policy": "short"})).await;
        if r.status == 200 {
            freed = true;
            break;
        }
    }
    assert!(freed, "the expired permit was given back");
    let r = release(http, json!({"lease": held, "status": 200})).await;
    assert_eq!(r.body, r#"{"released":false}"#, "an expired lease is gone");
    srv.stop().await;
}

#[tokio::test]
async fn bad_calls_get_exact_errors() {
    let srv = start(FIXED).await;
    let http = srv.running.http.unwrap();
    let rows: &[(&str, &str, u16, &str)] = &[
        (
            "acquire",
            "nope",
            400,
            r#"{"error":"invalid JSON: expected ident at line 1 column 2"}"#,
        ),
        (
            "acquire",
            "[]",
            400,
            r#"{"error":"the body must be a JSON object"}"#,
        ),
        (
            "acquire",
            "{}",
            400,
            r#"{"error":"policy must be a string"}"#,
        ),
        (
            "acquire",
            r#"{"policy": 1}"#,
            400,
            r#"{"error":"policy must be a string"}"#,
        ),
        (
            "acquire",
            r#"{"policy": "backend", "cost": 1}"#,
            400,
            r#"{"error":"unknown field \"cost\" (expected policy, class)"}"#,
        ),
        (
            "acquire",
            r#"{"policy": "nope"}"#,
            404,
            r#"{"error":"no adaptive policy \"nope\" (known: backend, learning, short)"}"#,
        ),
        (
            "acquire",
            r#"{"policy": "backend", "class": "vip"}"#,
            400,
            r#"{"error":"class \"vip\" is not one of policy \"backend\"'s: critical, sheddable"}"#,
        ),
        (
            "acquire",
            r#"{"policy": "backend", "class": 1}"#,
            400,
            r#"{"error":"class must be a string"}"#,
        ),
        (
            "release",
            "{}",
            400,
            r#"{"error":"lease must be a string"}"#,
        ),
        (
            "release",
            r#"{"lease": 5}"#,
            400,
            r#"{"error":"lease must be a string"}"#,
        ),
        (
            "release",
            r#"{"lease": "x"}"#,
            400,
            r#"{"error":"lease id \"x\" is not one this server hands out (a decimal integer below 2^63)"}"#,
        ),
        (
            "release",
            r#"{"lease": "1", "status": 700}"#,
            400,
            r#"{"error":"status must be an HTTP status from 100 to 599, got 700"}"#,
        ),
        (
            "release",
            r#"{"lease": "1", "status": 200, "outcome": "success"}"#,
            400,
            r#"{"error":"give status or outcome, not both"}"#,
        ),
        (
            "release",
            r#"{"lease": "1", "outcome": "maybe"}"#,
            400,
            r#"{"error":"outcome must be \"success\", \"dropped\", \"timeout\" or \"ignore\", got \"maybe\""}"#,
        ),
        (
            "release",
            r#"{"lease": "1", "policy": "backend"}"#,
            400,
            r#"{"error":"unknown field \"policy\" (expected lease, status, outcome)"}"#,
        ),
    ];
    for (op, body, status, want) in rows {
        let r = crate::http(http, "POST", &format!("/v1/adaptive/{op}"), body.as_bytes()).await;
        assert_eq!((r.status, r.body.as_str()), (*status, *want), "{op} {body}");
    }
    let big = format!(r#"{{"policy": "{}"}}"#, "x".repeat(5000));
    let r = crate::http(http, "POST", "/v1/adaptive/acquire", big.as_bytes()).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (413, r#"{"error":"the body is larger than 4096 bytes"}"#)
    );
    let r = crate::http(http, "GET", "/v1/adaptive/acquire", b"").await;
    assert_eq!(r.status, 405, "{}", r.body);
    srv.stop().await;
}

#[test]
fn bad_adaptive_config_is_refused_naming_the_field() {
    let rows: &[(&str, &str)] = &[
        (
            "adaptive: {p: {algorithm: fast}}",
            "adaptive.p: adaptive: unknown adaptive algorithm \"fast\"; expected gradient2, vegas or aimd",
        ),
        (
            "adaptive: {p: {algorithm: aimd, min_limit: 5, max_limit: 2}}",
            "adaptive.p: min_limit, initial_limit, max_limit:",
        ),
        (
            "adaptive: {p: {algorithm: aimd, lease_ttl: 0s}}",
            "adaptive.p: lease_ttl:",
        ),
        (
            "adaptive: {p: {algorithm: aimd, queue_timeout: soon}}",
            "adaptive.p: queue_timeout:",
        ),
        (
            "adaptive: {p: {algorithm: aimd, classes: [{name: a, share: 1.5}]}}",
            "adaptive.p: classes:",
        ),
        (
            "adaptive: {p: {algorithm: aimd, drop_on: [4xx]}}",
            "adaptive.p: drop_on: unknown drop_on value \"4xx\"",
        ),
        (
            "policies: {p: {rate: 1/s}}\nadaptive: {p: {algorithm: aimd}}",
            "adaptive.p: a policy of this name is also under policies",
        ),
        (
            "adaptive: {p: {algorithm: aimd, latency: end}}",
            "unknown field `latency`",
        ),
    ];
    for (text, want) in rows {
        let err = floodgate_server::config::parse(Path::new("limits.yaml"), text)
            .err()
            .unwrap_or_else(|| panic!("accepted: {text}"))
            .to_string();
        assert!(err.contains(want), "{text}\n got: {err}\nwant: {want}");
        assert!(err.starts_with("limits.yaml"), "{err}");
    }
}

#[tokio::test]
async fn a_reload_keeps_an_unchanged_policy_and_restarts_a_changed_one() {
    let policy = |max: u32| {
        format!(
            "adaptive:\n  backend: {{algorithm: aimd, min_limit: 1, initial_limit: 2, max_limit: {max}}}\n  other: {{algorithm: vegas}}\n"
        )
    };
    let srv = start_with(&policy(10), "limits.yaml", true).await;
    let http = srv.running.http.unwrap();
    let generation = || srv.running.engine.current().id;
    let held = lease(&acquire(http, json!({"policy": "backend"})).await);
    // another policy changes: backend keeps its limiter and the permit it handed out
    std::fs::write(
        &srv.path,
        policy(10).replace("{algorithm: vegas}", "{algorithm: aimd}"),
    )
    .unwrap();
    assert!(eventually(10, || generation() == 2).await, "reloaded");
    let r = acquire(http, json!({"policy": "backend"})).await;
    assert_eq!(
        r.json()["in_flight"],
        2,
        "the held permit counts: {}",
        r.body
    );
    let second = lease(&r);
    // backend changes: a fresh limiter (old permits release into the old one)
    std::fs::write(&srv.path, policy(12)).unwrap();
    assert!(eventually(10, || generation() == 3).await, "reloaded");
    let r = acquire(http, json!({"policy": "backend"})).await;
    assert_eq!(r.json()["in_flight"], 1, "a fresh limiter: {}", r.body);
    for l in [held, second, lease(&r)] {
        let out = release(http, json!({"lease": l})).await;
        assert_eq!(out.body, r#"{"released":true}"#);
    }
    srv.stop().await;
}
