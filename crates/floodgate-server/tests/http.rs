//! HTTP/JSON over real TCP: /v1/check, /metrics, /healthz, and bad bodies.

mod common;

use common::*;

const CONFIG: &str = r#"
headers: {retry_after_jitter: 0s, x_ratelimit: true}
policies:
  api: {rate: 2/min}
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: queue
        rate_limit: {rate: 1/s, burst: 3, algorithm: leaky-queue}
  - domain: other
    descriptors: []
"#;

#[tokio::test]
async fn check_answers_the_decision_with_headers() {
    let srv = start(CONFIG).await;
    let addr = srv.running.http.unwrap();
    let body = br#"{"domain": "edge", "descriptors": [[{"key": "user", "value": "alice"}]]}"#;
    let r = http(addr, "POST", "/v1/check", body).await;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(
        (j["allowed"].as_bool(), j["code"].as_str()),
        (Some(true), Some("OK"))
    );
    assert_eq!(
        (j["limit"].as_u64(), j["remaining"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(j["descriptors"][0]["limits"][0]["name"], "user");
    assert_eq!(j["descriptors"][0]["limits"][0]["algorithm"], "gcra");
    assert_eq!(j["descriptors"][0]["limits"][0]["unit"], "minute");
    let policy = "\"user\";q=2;w=60;floodgate-capacity=2";
    assert_eq!(r.header("RateLimit-Policy"), Some(policy));
    assert_eq!(j["headers"]["RateLimit-Policy"], policy);
    assert_eq!(j["headers"]["RateLimit"], "\"user\";r=2;t=60");
    assert_eq!(r.header("X-RateLimit-Limit"), Some("2"));
    assert_eq!(r.header("X-RateLimit-Remaining"), Some("1"));
    http(addr, "POST", "/v1/check", body).await;
    let r = http(addr, "POST", "/v1/check", body).await;
    assert_eq!(r.status, 429);
    let j = r.json();
    assert_eq!(j["code"], "OVER_LIMIT");
    assert_eq!(r.header("Retry-After"), Some("30"));
    let retry_ms = j["retry_after_ms"].as_u64().unwrap();
    assert!((29_000..=30_000).contains(&retry_ms), "{retry_ms}");
    // cost 0 peeks, in the descriptor object form
    let peek = br#"{"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "bob"}], "cost": 0}]}"#;
    let r = http(addr, "POST", "/v1/check", peek).await;
    assert_eq!((r.status, r.json()["remaining"].as_u64()), (200, Some(2)));
    srv.stop().await;
}

#[tokio::test]
async fn policy_form_and_delaying_queue() {
    let srv = start(CONFIG).await;
    let addr = srv.running.http.unwrap();
    let r = http(addr, "POST", "/v1/check", br#"{"key": "client-7"}"#).await;
    assert_eq!(
        (r.status, r.json()["remaining"].as_u64()),
        (200, Some(1)),
        "the only policy is the default"
    );
    let r = http(
        addr,
        "POST",
        "/v1/check",
        br#"{"policy": "api", "key": "client-7", "cost": 2}"#,
    )
    .await;
    assert_eq!(r.status, 429);
    let r = http(
        addr,
        "POST",
        "/v1/check",
        br#"{"policy": "nope", "key": "k"}"#,
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["error"],
        "unknown policy \"nope\"; configured policies: api"
    );
    // nginx-style queue: 1/s with burst 3 -> the 2nd..4th are admitted with growing delays
    let q = br#"{"domain": "edge", "descriptors": [[{"key": "queue", "value": "q"}]]}"#;
    let delays: Vec<u64> = futures_delays(addr, q, 5).await;
    assert_eq!(delays[..4], [0, 1000, 2000, 3000]);
    assert_eq!(delays[4], u64::MAX, "the 5th is over the burst");
    srv.stop().await;
}

async fn futures_delays(addr: std::net::SocketAddr, body: &[u8], n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = http(addr, "POST", "/v1/check", body).await;
        let j = r.json();
        out.push(if r.status == 200 {
            // milliseconds rounded up; the calls are a few ms apart, so round to seconds
            (j["delay_ms"].as_u64().unwrap() + 500) / 1000 * 1000
        } else {
            u64::MAX
        });
    }
    out
}

#[tokio::test]
async fn bad_bodies_get_clear_4xx_json_errors() {
    let srv = start(CONFIG).await;
    let addr = srv.running.http.unwrap();
    let cases: &[(&[u8], u16, &str)] = &[
        (b"{\"domain\": ", 400, "invalid JSON: EOF while parsing"),
        (b"[1, 2]", 400, "the body must be a JSON object"),
        (b"{}", 400, "the body needs descriptors (with domain) or key (with policy)"),
        (b"{\"descriptors\": []}", 400, "domain is required; configured domains: edge, other"),
        (b"{\"domain\": \"edge\", \"descriptors\": []}", 400, "the descriptor list must not be empty"),
        (b"{\"domain\": \"nope\", \"descriptors\": [[{\"key\": \"a\"}]]}", 404, "unknown domain \"nope\""),
        (b"{\"domain\": \"edge\", \"descriptors\": [[{\"value\": \"a\"}]]}", 400, "descriptors[0][0].key must be a string"),
        (b"{\"domain\": \"edge\", \"descriptors\": [[{\"key\": \"a\", \"vale\": 1}]]}", 400, "descriptors[0][0]: unknown field \"vale\""),
        (b"{\"domain\": \"edge\", \"descriptors\": [3]}", 400, "descriptors[0] must be a list of entries"),
        (b"{\"domain\": \"edge\", \"descriptors\": [[{\"key\": \"user\", \"value\": \"a\"}]], \"cost\": -1}", 400, "cost must be a non-negative integer, got -1"),
        (b"{\"domain\": \"edge\", \"descriptors\": [[{\"key\": \"user\", \"value\": \"a\"}]], \"cost\": 1.5}", 400, "cost must be a non-negative integer, got 1.5"),
        (b"{\"key\": \"k\", \"descriptors\": [[{\"key\": \"a\"}]]}", 400, "give either descriptors"),
        (b"{\"domian\": \"edge\"}", 400, "unknown field \"domian\""),
        (b"{\"key\": 7}", 400, "key must be a string, got 7"),
    ];
    for (body, status, msg) in cases {
        let r = http(addr, "POST", "/v1/check", body).await;
        assert_eq!(
            r.status,
            *status,
            "{}: {}",
            String::from_utf8_lossy(body),
            r.body
        );
        let e = r.json()["error"].as_str().unwrap().to_string();
        assert!(e.contains(msg), "{}: {e}", String::from_utf8_lossy(body));
    }
    let many: Vec<String> = (0..65)
        .map(|i| format!("[{{\"key\": \"user\", \"value\": \"{i}\"}}]"))
        .collect();
    let body = format!(
        "{{\"domain\": \"edge\", \"descriptors\": [{}]}}",
        many.join(",")
    );
    let r = http(addr, "POST", "/v1/check", body.as_bytes()).await;
    assert_eq!(r.status, 400);
    assert!(
        r.body
            .contains("65 descriptors is more than the maximum of 64"),
        "{}",
        r.body
    );
    let big = vec![b' '; (1 << 20) + 10];
    let r = http(addr, "POST", "/v1/check", &big).await;
    assert_eq!(r.status, 413);
    assert!(r.body.contains("larger than 1048576 bytes"), "{}", r.body);
    let r = http(addr, "GET", "/v1/check", b"").await;
    assert_eq!(r.status, 405);
    let r = http(addr, "GET", "/nope", b"").await;
    assert_eq!(r.status, 404);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("POST /v1/check")
    );
    // still serving
    let ok = br#"{"domain": "edge", "descriptors": [[{"key": "user", "value": "z"}]]}"#;
    assert_eq!(http(addr, "POST", "/v1/check", ok).await.status, 200);
    srv.stop().await;
}

#[tokio::test]
async fn metrics_and_health() {
    let srv = start(CONFIG).await;
    let addr = srv.running.http.unwrap();
    let r = http(addr, "GET", "/healthz", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "serving");
    let body = br#"{"domain": "edge", "descriptors": [[{"key": "user", "value": "m"}]]}"#;
    for _ in 0..3 {
        http(addr, "POST", "/v1/check", body).await;
    }
    let r = http(addr, "GET", "/metrics", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").unwrap(),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(!r.body.contains("# EOF"));
    let m = r.body;
    for line in [
        "floodgate_descriptor_decisions_total{domain=\"edge\",descriptor=\"user\",outcome=\"passed\"} 2",
        "floodgate_descriptor_decisions_total{domain=\"edge\",descriptor=\"user\",outcome=\"rejected\"} 1",
        "floodgate_decisions_total{policy=\"user\",outcome=\"passed\"} 2",
        "floodgate_decisions_total{policy=\"user\",outcome=\"rejected\"} 1",
        "floodgate_near_limit_total{domain=\"edge\",descriptor=\"user\"} 1",
        "floodgate_requests_total{outcome=\"passed\"} 2",
        "floodgate_requests_total{outcome=\"rejected\"} 1",
        "floodgate_request_duration_seconds_count{front=\"http\"} 3",
        "floodgate_config_generation 1",
        "floodgate_config_last_reload_success 1",
    ] {
        assert!(m.contains(line), "missing {line} in\n{m}");
    }
    assert!(
        !m.contains("descriptor=\"user\",outcome=\"unlimited\""),
        "no impossible series"
    );
    srv.stop().await;
}

/// A POST with the exact bytes `head` (the request line and fields, without the final
/// blank line) and `body`: the status and the body of the answer.
async fn raw_post(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{head}\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

#[tokio::test]
async fn the_v1_calls_take_json_only() {
    let srv = start(CONFIG).await;
    let addr = srv.running.http.unwrap();
    let check = br#"{"policy": "api", "key": "ct", "cost": 0}"#;
    let acquire = br#"{"key": "gpu", "max_in_flight": 1, "ttl_ms": 1000}"#;
    // (path, Content-Type line or none, body, status, what the error names)
    type Row<'a> = (&'a str, Option<&'a str>, &'a [u8], u16, &'a str);
    let rows: &[Row<'_>] = &[
        (
            "/v1/check",
            Some("text/plain"),
            check,
            415,
            r#"(got \"text/plain\")"#,
        ),
        (
            "/v1/check",
            Some("application/x-www-form-urlencoded"),
            check,
            415,
            "x-www-form-urlencoded",
        ),
        (
            "/v1/check",
            Some("multipart/form-data; boundary=x"),
            check,
            415,
            "multipart",
        ),
        ("/v1/check", None, check, 415, "(got none)"),
        ("/v1/check", Some("application/jsonx"), check, 415, "jsonx"),
        (
            "/v1/acquire",
            Some("text/plain"),
            acquire,
            415,
            "Content-Type: application/json",
        ),
        (
            "/v1/reserve",
            Some("text/plain"),
            check,
            415,
            "Content-Type: application/json",
        ),
        ("/v1/check", Some("application/json"), check, 200, ""),
        (
            "/v1/check",
            Some("Application/JSON; charset=utf-8"),
            check,
            200,
            "",
        ),
        (
            "/v1/check",
            Some(" application/json ;charset=UTF-8"),
            check,
            200,
            "",
        ),
    ];
    for (path, ct, body, status, names) in rows {
        let head = match ct {
            Some(ct) => format!("POST {path} HTTP/1.1\r\nContent-Type: {ct}"),
            None => format!("POST {path} HTTP/1.1"),
        };
        let (got, text) = raw_post(addr, &head, body).await;
        assert_eq!(got, *status, "{path} with {ct:?}: {text}");
        assert!(text.contains(names), "{path} with {ct:?}: {text}");
    }
    // a refused acquire took no lease: the one place is still free
    let (got, text) = raw_post(
        addr,
        "POST /v1/acquire HTTP/1.1\r\nContent-Type: application/json",
        acquire,
    )
    .await;
    assert_eq!(got, 200, "{text}");
    // metrics and health stay plain GETs
    assert_eq!(http(addr, "GET", "/healthz", b"").await.status, 200);
    srv.stop().await;
}
