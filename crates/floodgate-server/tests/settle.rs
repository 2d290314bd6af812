//! Reserve and settle over the wire: the HTTP API's /v1/reserve and /v1/settle and the
//! RESP door's FG.RESERVE and FG.SETTLE, with bad input refused and nothing minted.

mod common;

use common::*;

const CONFIG: &str = r#"
headers: {retry_after_jitter: 0s, x_ratelimit: true}
policies:
  tokens: {rate: 1000/min, algorithm: token-bucket}
"#;

#[tokio::test]
async fn http_reserve_and_settle_with_debt_refund_and_bad_input() {
    let srv = start(CONFIG).await;
    let addr = srv.running.http.unwrap();
    let r = http(
        addr,
        "POST",
        "/v1/reserve",
        br#"{"key": "u", "estimate": 1}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["remaining"].as_u64(), Some(999));
    let id = j["reservation"].as_str().unwrap().to_string();
    // bad actual costs change nothing
    for bad in [
        r#"-5"#, r#"1.5"#, r#"1e30"#, r#""NaN""#, r#""-1""#, r#"null"#,
    ] {
        let body = format!(r#"{{"reservation": "{id}", "actual": {bad}}}"#);
        let r = http(addr, "POST", "/v1/settle", body.as_bytes()).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    let body = format!(r#"{{"reservation": "{id}", "actual": 1300}}"#);
    let r = http(addr, "POST", "/v1/settle", body.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(
        (j["charged"].as_u64(), j["remaining"].as_u64()),
        (Some(1299), Some(0))
    );
    // settled once: again, or an id never made, is 404
    let r = http(addr, "POST", "/v1/settle", body.as_bytes()).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("settled already"), "{}", r.body);
    let r = http(
        addr,
        "POST",
        "/v1/settle",
        br#"{"reservation": "12345", "actual": 0}"#,
    )
    .await;
    assert_eq!(r.status, 404);
    // in debt: the next reservation is denied, with nothing to settle
    let r = http(
        addr,
        "POST",
        "/v1/reserve",
        br#"{"key": "u", "estimate": 0}"#,
    )
    .await;
    assert_eq!(r.status, 429);
    assert!(r.json()["reservation"].is_null());
    // a refund on another key
    let r = http(
        addr,
        "POST",
        "/v1/reserve",
        br#"{"key": "v", "estimate": 400}"#,
    )
    .await;
    let id = r.json()["reservation"].as_str().unwrap().to_string();
    let body = format!(r#"{{"reservation": "{id}", "actual": "50"}}"#);
    let j = http(addr, "POST", "/v1/settle", body.as_bytes())
        .await
        .json();
    assert_eq!(
        (j["refunded"].as_u64(), j["remaining"].as_u64()),
        (Some(350), Some(950))
    );
    for bad in [
        r#"{"key": "v", "estimate": -1}"#,
        r#"{"key": "v", "estimate": "x"}"#,
        r#"{"estimate": 1}"#,
    ] {
        let r = http(addr, "POST", "/v1/reserve", bad.as_bytes()).await;
        assert_eq!(r.status, 400, "{bad}");
    }
    srv.stop().await;
}

#[tokio::test]
async fn resp_reserve_and_settle() {
    let srv = start(CONFIG).await;
    let url = format!("redis://{}/", srv.running.resp.unwrap());
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let r: Vec<i64> = redis::cmd("FG.RESERVE")
        .arg("tokens")
        .arg("u")
        .arg("100")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(&r[..3], &[0, 1000, 900]);
    let id = r[5];
    assert!(id > 0);
    let s: Vec<i64> = redis::cmd("FG.SETTLE")
        .arg(id)
        .arg(40)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(&s[..3], &[0, 60, 960]);
    let again: redis::RedisResult<Vec<i64>> = redis::cmd("FG.SETTLE")
        .arg(id)
        .arg(40)
        .query_async(&mut c)
        .await;
    assert!(
        again
            .unwrap_err()
            .to_string()
            .contains("unknown reservation")
    );
    for (id, actual) in [
        ("1", "-3"),
        ("x", "1"),
        ("1", "NaN"),
        ("1", "99999999999999999999"),
    ] {
        let e: redis::RedisResult<Vec<i64>> = redis::cmd("FG.SETTLE")
            .arg(id)
            .arg(actual)
            .query_async(&mut c)
            .await;
        assert!(
            e.unwrap_err().to_string().contains("is not a cost"),
            "{id} {actual}"
        );
    }
    let e: redis::RedisResult<Vec<i64>> = redis::cmd("FG.RESERVE")
        .arg("nope")
        .arg("u")
        .arg("1")
        .query_async(&mut c)
        .await;
    assert!(e.is_err());
    // CL.THROTTLE is untouched
    let t: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg("k")
        .arg(15)
        .arg(30)
        .arg(60)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(t, [0, 16, 15, -1, 2]);
    srv.stop().await;
}
