//! `max_in_flight` on descriptor rules through the HTTP door, over loopback: admitted
//! checks hold leases the caller releases with `/v1/release`, a full rule answers 429
//! with `Retry-After`, and with rate limits on the same request all-or-nothing (a rate
//! denial holds no lease, a concurrency denial charges no rate). Bad values refused.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: model
    max_in_flight: 2
    lease_ttl: 60s
  - key: user
    max_in_flight: 1
    rate_limit:
      unit: minute
      requests_per_unit: 2
"#;

async fn check(http: std::net::SocketAddr, key: &str, value: &str) -> HttpReply {
    let body = format!(
        r#"{{"domain": "edge", "descriptors": [[{{"key": "{key}", "value": "{value}"}}]]}}"#
    );
    crate::http(http, "POST", "/v1/check", body.as_bytes()).await
}

async fn release(http: std::net::SocketAddr, lease: &Value) -> bool {
    let body = serde_json::json!({"key": lease["key"], "lease": lease["lease"]}).to_string();
    let r = crate::http(http, "POST", "/v1/release", body.as_bytes()).await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    r.json()["released"].as_bool().unwrap()
}

#[tokio::test]
async fn two_in_flight_then_429_until_one_is_released() {
    let srv = start(CONFIG).await;
    let http = srv.running.http.unwrap();
    let a = check(http, "model", "x").await;
    assert_eq!(a.status, 200, "{:?}", a.json());
    let a = a.json()["in_flight"][0].clone();
    assert!(a["lease"].as_str().unwrap().parse::<u64>().is_ok(), "{a}");
    assert_eq!(a["key"], r#"rule|edge|model#in-flight|["x"]"#);
    assert_eq!(
        (a["limit"].clone(), a["remaining"].clone()),
        (2.into(), 1.into())
    );
    let b = check(http, "model", "x").await;
    assert_eq!(b.status, 200);
    assert!(
        b.header("ratelimit-policy")
            .unwrap()
            .contains(r#"q=2;qu="concurrent-requests""#),
        "{:?}",
        b.header("ratelimit-policy")
    );
    // another value has its own places
    let other = check(http, "model", "y").await;
    assert_eq!(other.status, 200);
    let full = check(http, "model", "x").await;
    assert_eq!(full.status, 429, "{:?}", full.json());
    // the earliest lease's expiry, rounded up, plus the configured jitter
    let retry: u64 = full.header("retry-after").unwrap().parse().unwrap();
    assert!((60..=62).contains(&retry), "{retry}");
    let v = full.json();
    assert_eq!(v["in_flight"][0]["lease"], Value::Null);
    assert!(v["retry_after_ms"].as_u64().unwrap() > 59_000, "{v}");
    assert_eq!(v["descriptors"][0]["code"], "OVER_LIMIT");
    // a peek (cost 0) takes no lease
    let body =
        br#"{"domain": "edge", "descriptors": [[{"key": "model", "value": "x"}]], "cost": 0}"#;
    let peek = crate::http(http, "POST", "/v1/check", body).await;
    assert_eq!(peek.status, 200, "{:?}", peek.json());
    assert_eq!(peek.json()["in_flight"], Value::Array(vec![]));
    // released once frees a place; twice frees nothing
    assert!(release(http, &a).await);
    assert!(!release(http, &a).await);
    assert_eq!(check(http, "model", "x").await.status, 200);
    assert_eq!(check(http, "model", "x").await.status, 429);
    srv.stop().await;
}

#[tokio::test]
async fn rates_and_leases_are_all_or_nothing() {
    let srv = start(CONFIG).await;
    let http = srv.running.http.unwrap();
    // 1st: a lease and a rate unit
    let first = check(http, "user", "u").await;
    assert_eq!(first.status, 200, "{:?}", first.json());
    let v = first.json();
    let lease = v["in_flight"][0].clone();
    let policy = first.header("ratelimit-policy").unwrap().to_string();
    assert!(
        policy.contains(r#"q=1;qu="concurrent-requests""#),
        "{policy}"
    );
    assert!(policy.contains("q=2;w=60"), "{policy}");
    assert_eq!(v["descriptors"][0]["limits"][0]["remaining"], 1);
    // in flight: denied for concurrency, charged no rate
    for _ in 0..3 {
        let r = check(http, "user", "u").await;
        assert_eq!(r.status, 429);
        assert_eq!(r.json()["in_flight"][0]["lease"], Value::Null);
        assert!(r.header("retry-after").is_some());
    }
    assert!(release(http, &lease).await);
    // the rate's second unit is still there
    let second = check(http, "user", "u").await;
    assert_eq!(second.status, 200, "{:?}", second.json());
    let lease = second.json()["in_flight"][0].clone();
    assert_eq!(second.json()["descriptors"][0]["limits"][0]["remaining"], 0);
    assert!(release(http, &lease).await);
    // the rate denies: the lease it took is given back
    let denied = check(http, "user", "u").await;
    assert_eq!(denied.status, 429);
    let v = denied.json();
    assert_eq!(v["in_flight"], Value::Array(vec![]), "{v}");
    assert_eq!(v["descriptors"][0]["limits"][0]["allowed"], false);
    // the place is free: an acquire on the rule's key (N=1) is granted
    let key = lease["key"].as_str().unwrap();
    let body = serde_json::json!({"key": key, "max_in_flight": 1, "ttl_ms": 1000}).to_string();
    let r = crate::http(http, "POST", "/v1/acquire", body.as_bytes()).await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    srv.stop().await;
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    let bad = |rule: &str| {
        let yaml = format!("domain: edge\ndescriptors:\n  - key: k\n{rule}");
        floodgate_server::config::parse(Path::new("limits.yaml"), &yaml)
            .unwrap_err()
            .to_string()
    };
    let e = bad("    max_in_flight: 0\n");
    assert!(e.contains("max_in_flight"), "{e}");
    let e = bad("    max_in_flight: 2\n    lease_ttl: 0s\n");
    assert!(e.contains("lease_ttl"), "{e}");
    let e = bad("    max_in_flight: 2\n    lease_ttl: 2d\n");
    assert!(e.contains("lease_ttl"), "{e}");
    let e = bad("    max_in_flight: 2\n    lease_ttl: soon\n");
    assert!(e.contains("lease_ttl"), "{e}");
    let e = bad("    lease_ttl: 5s\n");
    assert!(
        e.contains("lease_ttl applies only with max_in_flight"),
        "{e}"
    );
    let e = bad("    max_in_flight: -1\n");
    assert!(e.contains("max_in_flight"), "{e}");
    let e = bad("    max_in_flight: 2\n    shadow_mode: true\n");
    assert!(e.contains("shadow_mode"), "{e}");
    let e = bad("    max_in_flight: 2\n    rate_limit: {unlimited: true}\n");
    assert!(e.contains("unlimited"), "{e}");
    // the TOML form and the default TTL
    let ok = floodgate_server::config::parse(
        Path::new("limits.toml"),
        "domain = \"edge\"\n[[descriptors]]\nkey = \"k\"\nmax_in_flight = 3\n",
    )
    .unwrap();
    let d = &ok.rules.domains["edge"][0];
    let spec = d.in_flight.unwrap();
    assert_eq!(spec.limit, 3);
    assert_eq!(spec.ttl.get(), std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn the_grpc_door_applies_the_rates_and_ignores_max_in_flight() {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    let srv = start(CONFIG).await;
    let mut c = srv.client().await;
    // N=1 on user, 2 a minute: two admitted at once (no lease), the third denied by the rate
    for want in [Code::Ok, Code::Ok, Code::OverLimit] {
        let r = call(&mut c, req("edge", vec![desc(&[("user", "g")])], 1))
            .await
            .unwrap();
        assert_eq!(r.overall_code, want as i32);
    }
    // and no lease was taken: the rule's key (N=1) is free
    let http = srv.running.http.unwrap();
    let body = serde_json::json!({
        "key": r#"rule|edge|user#in-flight|["g"]"#, "max_in_flight": 1, "ttl_ms": 1000
    })
    .to_string();
    let r = crate::http(http, "POST", "/v1/acquire", body.as_bytes()).await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    srv.stop().await;
}
