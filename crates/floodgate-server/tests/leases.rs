//! In-flight leases through the server's doors, over loopback: `FG.ACQUIRE`, `FG.RENEW`
//! and `FG.RELEASE` with the `redis` crate as the client, `/v1/acquire`, `/v1/renew` and
//! `/v1/release` with JSON, one table behind both; bad input is an error naming what was
//! wrong, and a double release or an unknown lease a no-op answering 0 / false.

mod common;

use common::*;

async fn cmd<T: redis::FromRedisValue>(
    c: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await
}

/// `/v1/acquire` on key `gpu`, two at once, a minute's lease.
async fn acquire_two(http: std::net::SocketAddr) -> HttpReply {
    crate::http(
        http,
        "POST",
        "/v1/acquire",
        br#"{"key": "gpu", "max_in_flight": 2, "ttl_ms": 60000}"#,
    )
    .await
}

#[tokio::test]
async fn resp_and_http_share_one_lease_table() {
    let srv = start("").await;
    let mut c = resp_client(&srv).await;
    let a: Vec<i64> = cmd(&mut c, &["FG.ACQUIRE", "gpu", "2", "60000"])
        .await
        .unwrap();
    assert_eq!(a[..5], [0, 2, 1, -1, 60000]);
    let lease = a[5].to_string();
    let b: Vec<i64> = cmd(&mut c, &["FG.ACQUIRE", "gpu", "2", "60000"])
        .await
        .unwrap();
    assert_eq!(b[2], 0);
    // full: limited, retry at the earliest expiry, no lease
    let d: Vec<i64> = cmd(&mut c, &["FG.ACQUIRE", "gpu", "2", "60000"])
        .await
        .unwrap();
    assert_eq!((d[0], d[1], d[2], d[5]), (1, 2, 0, -1));
    assert!(d[3] > 59_000 && d[3] <= 60_000, "{d:?}");
    // the HTTP door sees the same leases
    let http = srv.running.http.unwrap();
    let r = acquire_two(http).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.json()["lease"], serde_json::Value::Null);
    // renew, release once (1), twice (0), an unknown id (0)
    let one: i64 = cmd(&mut c, &["FG.RENEW", "gpu", &lease, "1000"])
        .await
        .unwrap();
    assert_eq!(one, 1);
    let one: i64 = cmd(&mut c, &["FG.RELEASE", "gpu", &lease]).await.unwrap();
    assert_eq!(one, 1);
    let zero: i64 = cmd(&mut c, &["FG.RELEASE", "gpu", &lease]).await.unwrap();
    assert_eq!(zero, 0);
    let zero: i64 = cmd(&mut c, &["FG.RELEASE", "gpu", "12345"]).await.unwrap();
    assert_eq!(zero, 0);
    // the freed place, over HTTP, then released over HTTP
    let r = acquire_two(http).await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    let v = r.json();
    assert_eq!(
        (v["allowed"].clone(), v["remaining"].clone()),
        (true.into(), 0.into())
    );
    let id = v["lease"].as_str().unwrap().to_string();
    let body = format!(r#"{{"key": "gpu", "lease": "{id}", "ttl_ms": 5000}}"#);
    let r = crate::http(http, "POST", "/v1/renew", body.as_bytes()).await;
    assert_eq!(r.json()["renewed"], true);
    let body = format!(r#"{{"key": "gpu", "lease": "{id}"}}"#);
    let r = crate::http(http, "POST", "/v1/release", body.as_bytes()).await;
    assert_eq!((r.status, r.json()["released"].clone()), (200, true.into()));
    let r = crate::http(http, "POST", "/v1/release", body.as_bytes()).await;
    assert_eq!(
        (r.status, r.json()["released"].clone()),
        (200, false.into())
    );
    srv.stop().await;
}

#[tokio::test]
async fn bad_input_is_an_error_naming_it() {
    let srv = start("").await;
    let mut c = resp_client(&srv).await;
    for (args, says) in [
        (&["FG.ACQUIRE", "k", "0", "1000"][..], "max_in_flight"),
        (&["FG.ACQUIRE", "k", "x", "1000"][..], "max_in_flight"),
        (&["FG.ACQUIRE", "k", "1", "0"][..], "ttl_ms"),
        (&["FG.ACQUIRE", "k", "1", "999999999999"][..], "ttl_ms"),
        (&["FG.ACQUIRE", "k", "1"][..], "Usage: FG.ACQUIRE"),
        (&["FG.RELEASE", "k", "-3"][..], "lease id"),
        (&["FG.RELEASE", "k", "abc"][..], "lease id"),
        (&["FG.RENEW", "k", "1", "0"][..], "ttl_ms"),
        (&["FG.RELEASE", "k"][..], "Usage"),
    ] {
        let e = cmd::<redis::Value>(&mut c, args)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{args:?}: {e}");
    }
    let http = srv.running.http.unwrap();
    for (path, body, says) in [
        (
            "/v1/acquire",
            &br#"{"key": "k", "max_in_flight": 0, "ttl_ms": 10}"#[..],
            "max_in_flight",
        ),
        (
            "/v1/acquire",
            br#"{"key": "k", "max_in_flight": 1, "ttl_ms": 0}"#,
            "ttl_ms",
        ),
        (
            "/v1/acquire",
            br#"{"key": "k", "max_in_flight": 1}"#,
            "ttl_ms",
        ),
        (
            "/v1/acquire",
            br#"{"key": 5, "max_in_flight": 1, "ttl_ms": 10}"#,
            "key",
        ),
        (
            "/v1/acquire",
            br#"{"key": "k", "max_in_flight": 1, "ttl_ms": 10, "x": 1}"#,
            "unknown field",
        ),
        ("/v1/release", br#"{"key": "k", "lease": 5}"#, "lease"),
        ("/v1/release", br#"{"key": "k", "lease": "-5"}"#, "lease id"),
        ("/v1/renew", br#"{"key": "k", "lease": "5"}"#, "ttl_ms"),
        ("/v1/release", b"not json", "invalid JSON"),
    ] {
        let r = crate::http(http, "POST", path, body).await;
        assert_eq!(r.status, 400, "{path} {}", String::from_utf8_lossy(body));
        let e = r.json()["error"].as_str().unwrap().to_string();
        assert!(e.contains(says), "{path}: {e}");
    }
    let r = crate::http(http, "GET", "/v1/acquire", b"").await;
    assert_eq!(r.status, 405);
    srv.stop().await;
}
