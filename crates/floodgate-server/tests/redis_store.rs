//! The server with its state in Redis: the shared Redis on 6379 (unique prefix, keys
//! removed after) for answers, and a redis-server of our own, killed mid-test, for the
//! fault policy (short timeout, circuit breaker, fail-open / fail-closed).

mod common;

use std::time::{Duration, Instant};

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use floodgate_reliability::procs::RedisServer;

fn unique_prefix(name: &str) -> String {
    format!(
        "fgtest:server:{name}:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// The shared Redis and the keys under `prefix` on it.
async fn keys_under(prefix: &str) -> (redis::aio::MultiplexedConnection, Vec<Vec<u8>>) {
    let mut c = redis::Client::open("redis://127.0.0.1:6379/")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut c)
        .await
        .unwrap();
    (c, keys)
}

/// How many keys there are under `prefix` (deleting none).
async fn count_prefix(prefix: &str) -> usize {
    keys_under(prefix).await.1.len()
}

async fn delete_prefix(prefix: &str) -> usize {
    let (mut c, keys) = keys_under(prefix).await;
    for k in &keys {
        let _: i64 = redis::cmd("DEL").arg(k).query_async(&mut c).await.unwrap();
    }
    keys.len()
}

fn redis_config(url: &str, prefix: &str, policy: &str) -> String {
    format!(
        r#"
store:
  type: redis
  redis: {{url: "{url}", prefix: "{prefix}", timeout: 50ms, fault_policy: {policy}, breaker_open_for: 200ms}}
headers: {{retry_after_jitter: 0s}}
domain: edge
descriptors:
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: 3}}
"#
    )
}

#[tokio::test]
async fn grpc_and_resp_answer_from_redis() {
    let prefix = unique_prefix("answers");
    let srv = start(&redis_config(
        "redis://127.0.0.1:6379",
        &prefix,
        "fail-open",
    ))
    .await;
    let mut c = srv.client().await;
    let hit = || req("edge", vec![desc(&[("user", "alice")])], 0);
    for remaining in [2, 1, 0] {
        let r = call(&mut c, hit()).await.unwrap();
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (Code::Ok as i32, remaining)
        );
    }
    // the admin key lookup reads the Redis counter: nothing consumed, no key created
    let addr = srv.running.http.expect("the HTTP listener");
    let name = http(addr, "GET", "/admin/api/overview", b"").await.json()["policies"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let held = count_prefix(&prefix).await;
    for key in ["5:alice", "5:alice", "6:nobody", "6:nobody"] {
        let v = http(
            addr,
            "GET",
            &format!("/admin/api/key?policy={name}&key={key}"),
            b"",
        )
        .await;
        assert_eq!(v.status, 200, "{}", v.body);
        let left = if key == "5:alice" { 0 } else { 3 };
        assert_eq!(v.json()["remaining"], left, "{key}: {}", v.body);
        assert_eq!(v.json()["allowed"], left > 0, "{key}: {}", v.body);
    }
    assert_eq!(count_prefix(&prefix).await, held);
    let r = call(&mut c, hit()).await.unwrap();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let ra: u64 = header(&r, "Retry-After").unwrap().parse().unwrap();
    assert!((19..=20).contains(&ra), "{ra}");
    // a second server on the same Redis shares the counters
    let other = start(&redis_config(
        "redis://127.0.0.1:6379",
        &prefix,
        "fail-open",
    ))
    .await;
    let mut c2 = other.client().await;
    assert_eq!(
        call(&mut c2, hit()).await.unwrap().overall_code,
        Code::OverLimit as i32
    );
    // CL.THROTTLE through the GCRA script: redis-cell's answers (durations truncated:
    // the second call comes microseconds after the first, 3.99... s from full capacity)
    let mut rc = redis::Client::open(format!("redis://{}/", srv.running.resp.unwrap()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let t = |q: &str| {
        let mut cmd = redis::cmd("CL.THROTTLE");
        cmd.arg("k").arg(15).arg(30).arg(60).arg(q);
        cmd
    };
    let a: Vec<i64> = t("1").query_async(&mut rc).await.unwrap();
    let b: Vec<i64> = t("1").query_async(&mut rc).await.unwrap();
    let p: Vec<i64> = t("0").query_async(&mut rc).await.unwrap();
    assert_eq!(
        (a, b, p),
        (
            vec![0, 16, 15, -1, 2],
            vec![0, 16, 14, -1, 3],
            vec![0, 16, 14, -1, 3]
        )
    );
    other.stop().await;
    srv.stop().await;
    assert!(
        delete_prefix(&prefix).await >= 2,
        "the keys were under the prefix"
    );
}

/// The value of the series `series` (name and labels) in `m`; 0 when absent.
fn metric(m: &str, series: &str) -> u64 {
    m.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

async fn fault_run(policy: &str) -> (Vec<i32>, String, Srv) {
    let mut redis = RedisServer::start().expect("redis-server on a free port");
    let url = redis.url();
    let srv = start(&redis_config(&url, "fg:", policy)).await;
    let mut c = srv.client().await;
    let hit = || req("edge", vec![desc(&[("user", "bob")])], 0);
    assert_eq!(
        call(&mut c, hit()).await.unwrap().overall_code,
        Code::Ok as i32
    );
    redis.kill();
    let mut codes = Vec::new();
    for _ in 0..6 {
        let t = Instant::now();
        let r = call(&mut c, hit()).await.unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(1000),
            "answered within the short timeout: {:?}",
            t.elapsed()
        );
        codes.push(r.overall_code);
    }
    let m = srv.running.engine.metrics().render();
    (codes, m, srv)
}

#[tokio::test]
async fn redis_down_fails_open_fast_and_is_counted() {
    let (codes, m, srv) = fault_run("fail-open").await;
    assert!(codes.iter().all(|&c| c == Code::Ok as i32), "{codes:?}");
    let faults: u64 = ["timeout", "circuit_open", "unavailable"]
        .iter()
        .map(|k| metric(&m, &format!("floodgate_store_errors_total{{kind=\"{k}\"}}")))
        .sum();
    assert!(faults > 0, "{m}");
    assert!(
        m.contains("floodgate_requests_total{outcome=\"store_error_allowed\"} 6"),
        "{m}"
    );
    assert!(m.contains("floodgate_redis_degraded_total 6"), "{m}");
    assert!(m.contains("floodgate_redis_calls_total"), "{m}");
    srv.stop().await;
}

#[tokio::test]
async fn redis_down_fails_closed_when_configured() {
    let (codes, m, srv) = fault_run("fail-closed").await;
    assert!(
        codes.iter().all(|&c| c == Code::OverLimit as i32),
        "{codes:?}"
    );
    assert!(
        metric(&m, "floodgate_store_errors_total{kind=\"circuit_open\"}") > 0,
        "the breaker opened: {m}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn several_limits_on_redis_are_all_or_nothing() {
    let prefix = unique_prefix("multi");
    let cfg = format!(
        r#"
store:
  type: redis
  redis: {{url: "redis://127.0.0.1:6379", prefix: "{prefix}"}}
domain: edge
descriptors:
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: 3}}
  - key: path
    rate_limit: {{unit: minute, requests_per_unit: 100}}
"#
    );
    let srv = start(&cfg).await;
    let mut c = srv.client().await;
    let both = || {
        req(
            "edge",
            vec![desc(&[("path", "/q")]), desc(&[("user", "alice")])],
            0,
        )
    };
    for left in [99, 98, 97] {
        let r = call(&mut c, both()).await.unwrap();
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, left);
    }
    // alice is over her limit: the path limit is not charged for the denied request
    let r = call(&mut c, both()).await.unwrap();
    assert_eq!(
        (
            r.overall_code,
            r.statuses[0].code,
            r.statuses[1].code,
            r.statuses[0].limit_remaining
        ),
        (
            Code::OverLimit as i32,
            Code::Ok as i32,
            Code::OverLimit as i32,
            97
        )
    );
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/q")])], 0))
        .await
        .unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 96);
    srv.stop().await;
    assert!(delete_prefix(&prefix).await > 0);
}

/// A `max_in_flight` rule on the shared Redis holds across servers: a lease taken
/// through one server's `/v1/check` fills the rule for the other, which can release it.
#[tokio::test]
async fn a_max_in_flight_rule_holds_across_servers_on_redis() {
    let prefix = unique_prefix("rule-inflight");
    let yaml = format!(
        r#"
store:
  type: redis
  redis: {{url: "redis://127.0.0.1:6379", prefix: "{prefix}", timeout: 500ms}}
domain: edge
descriptors:
  - key: model
    max_in_flight: 1
    lease_ttl: 30s
"#
    );
    let (a, b) = (start(&yaml).await, start(&yaml).await);
    let (ha, hb) = (a.running.http.unwrap(), b.running.http.unwrap());
    let body = br#"{"domain": "edge", "descriptors": [[{"key": "model", "value": "m"}]]}"#;
    let first = http(ha, "POST", "/v1/check", body).await;
    assert_eq!(first.status, 200, "{:?}", first.json());
    let lease = first.json()["in_flight"][0].clone();
    assert_eq!(http(hb, "POST", "/v1/check", body).await.status, 429);
    let release = serde_json::json!({"key": lease["key"], "lease": lease["lease"]}).to_string();
    let r = http(hb, "POST", "/v1/release", release.as_bytes()).await;
    assert_eq!(r.json()["released"], true, "{:?}", r.json());
    assert_eq!(http(hb, "POST", "/v1/check", body).await.status, 200);
    a.stop().await;
    b.stop().await;
    assert!(delete_prefix(&prefix).await >= 1);
}

/// A key lookup Redis cannot answer is the store's fault, not the client's: `503` with the
/// `{"error": ...}` body naming the fault, on the server's HTTP listener, with a
/// redis-server of our own stopped (the call times out), continued and killed (connection
/// refused, then the breaker open); bad input stays a `400` meanwhile.
#[tokio::test]
async fn key_lookup_is_a_503_naming_the_fault_when_redis_fails() {
    let mut redis = RedisServer::start().expect("redis-server on a free port");
    let url = redis.url();
    let srv = start(&redis_config(&url, "fg:", "fail-open")).await;
    let mut c = srv.client().await;
    let hit = || req("edge", vec![desc(&[("user", "alice")])], 0);
    assert_eq!(
        call(&mut c, hit()).await.unwrap().overall_code,
        Code::Ok as i32
    );
    let addr = srv.running.http.expect("the HTTP listener");
    let name = http(addr, "GET", "/admin/api/overview", b"").await.json()["policies"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let lookup = format!("/admin/api/key?policy={name}&key=5:alice");
    let v = http(addr, "GET", &lookup, b"").await;
    assert_eq!(
        (v.status, v.json()["remaining"].clone()),
        (200, 2.into()),
        "{}",
        v.body
    );

    assert!(redis.pause(), "SIGSTOP to redis-server");
    let t = Instant::now();
    let v = http(addr, "GET", &lookup, b"").await;
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(v.status, 503, "{}", v.body);
    let e = v.json()["error"]
        .as_str()
        .expect("an error message")
        .to_string();
    assert!(e.contains("redis") && e.contains("timed out"), "{e}");
    let v = http(addr, "GET", &lookup, b"").await;
    assert_eq!(v.status, 503, "{}", v.body);
    for bad in [
        "/admin/api/key?policy=nope&key=5:alice".to_string(),
        format!("/admin/api/key?policy={name}&key=%zz"),
    ] {
        let v = http(addr, "GET", &bad, b"").await;
        assert_eq!(v.status, 400, "{bad}: {}", v.body);
        assert!(v.json()["error"].is_string(), "{bad}: {}", v.body);
    }

    assert!(redis.resume(), "SIGCONT to redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = http(addr, "GET", &lookup, b"").await;
        if v.status == 200 {
            assert_eq!(v.json()["remaining"], 2, "{}", v.body);
            break;
        }
        assert_eq!(v.status, 503, "{}", v.body);
        assert!(Instant::now() < deadline, "Redis is back: {}", v.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    redis.kill();
    for _ in 0..3 {
        let v = http(addr, "GET", &lookup, b"").await;
        assert_eq!(v.status, 503, "{}", v.body);
        let e = v.json()["error"]
            .as_str()
            .expect("an error message")
            .to_string();
        assert!(e.starts_with("decision store redis"), "{e}");
    }
    srv.stop().await;
}
