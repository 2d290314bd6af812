//! Requests without a body take the proxy's direct HTTP/1.1 way upstream (the task
//! writes the head and reads the response from the socket itself). These tests put a
//! raw TCP backend behind the real proxy on loopback, writing exact bytes: chunked and
//! close-delimited bodies, interim responses, malformed heads, bodies cut short, and
//! pooled connections the upstream drops without a word.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};

const UNLIMITED: &str =
    "[[policy]]\nname = \"p\"\nrate = \"100000/s\"\nburst = 100000\nnodelay = true\n";

/// Send one request on its own client connection; the status and the body, or the
/// body's error.
async fn fetch(
    proxy: SocketAddr,
    method: Method,
    path: &str,
) -> (StatusCode, Result<Bytes, String>) {
    let c = client();
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{proxy}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = c.request(req).await.expect("request failed");
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| e.to_string());
    (status, body)
}

/// The client's exchange fails (the head never arrives, or the body ends in an error):
/// a body that went wrong upstream never reaches the client looking complete.
async fn assert_cut(proxy: SocketAddr, path: &str) {
    let req = Request::get(format!("http://{proxy}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    match client().request(req).await {
        Err(_) => {}
        Ok(resp) => {
            let body = resp.into_body().collect().await;
            assert!(body.is_err(), "{path}: the body looked complete: {body:?}");
        }
    }
}

fn conns(seen: &Seen) -> Vec<usize> {
    seen.lock().unwrap().iter().map(|(c, _)| *c).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_are_decoded_and_their_connection_reused() {
    let (addr, seen) = raw_backend(|_, _, _| {
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
                .to_vec(),
            false,
        )
    })
    .await;
    let p = RunningProxy::start_with_workers(UNLIMITED, addr, 1).await;
    for _ in 0..5 {
        let (status, body) = fetch(p.addr, Method::GET, "/").await;
        assert_eq!(status, 200);
        assert_eq!(body.unwrap(), "hello world");
    }
    assert_eq!(
        conns(&seen),
        vec![0; 5],
        "one upstream connection for all five"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_delimited_by_close_is_read_to_the_end_and_not_reused() {
    let (addr, seen) =
        raw_backend(|_, _, _| (b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(), true)).await;
    let p = RunningProxy::start_with_workers(UNLIMITED, addr, 1).await;
    for _ in 0..3 {
        let (status, body) = fetch(p.addr, Method::GET, "/").await;
        assert_eq!(status, 200);
        assert_eq!(body.unwrap(), "until the end");
    }
    assert_eq!(conns(&seen), vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_responses_are_skipped_and_head_or_204_have_no_body() {
    let (addr, _) = raw_backend(|_, _, line| {
        let bytes: &[u8] = if line.starts_with("HEAD") {
            // a HEAD response announces a length it does not send
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
        } else if line.contains("/nc") {
            b"HTTP/1.1 204 No Content\r\n\r\n"
        } else {
            b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        };
        (bytes.to_vec(), false)
    })
    .await;
    let p = RunningProxy::start_with_workers(UNLIMITED, addr, 1).await;
    for _ in 0..2 {
        let (s, b) = fetch(p.addr, Method::GET, "/").await;
        assert_eq!((s, b.unwrap()), (StatusCode::OK, Bytes::from("ok")));
        let (s, b) = fetch(p.addr, Method::HEAD, "/").await;
        assert_eq!((s, b.unwrap()), (StatusCode::OK, Bytes::new()));
        let (s, b) = fetch(p.addr, Method::GET, "/nc").await;
        assert_eq!((s, b.unwrap()), (StatusCode::NO_CONTENT, Bytes::new()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_responses_are_502_and_counted() {
    let (addr, _) = raw_backend(|_, _, line| {
        let bytes: &[u8] = if line.contains("/cl") {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"
        } else if line.contains("/chunk") {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
        } else {
            b"NOT HTTP AT ALL\r\n\r\n"
        };
        (bytes.to_vec(), false)
    })
    .await;
    let p = RunningProxy::start_with_workers(UNLIMITED, addr, 1).await;
    let (s, _) = fetch(p.addr, Method::GET, "/cl").await;
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    let (s, _) = fetch(p.addr, Method::GET, "/garbage").await;
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    // a malformed chunked body: the head is fine (200), the body then fails, so the
    // client's connection is cut instead of being handed a wrong body
    assert_cut(p.addr, "/chunk").await;
    let metrics = p.limiter.render_metrics();
    // the upstream was reached: its responses failed, the connection did not
    assert!(
        metrics.contains("floodgate_upstream_errors_total{kind=\"response\"} 2")
            && metrics.contains("floodgate_upstream_errors_total{kind=\"connect\"} 0"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_short_fails_the_clients_response_and_the_proxy_goes_on() {
    let (addr, seen) = raw_backend(|_, _, line| {
        if line.contains("/short") {
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf".to_vec(),
                true,
            )
        } else {
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
                false,
            )
        }
    })
    .await;
    let p = RunningProxy::start_with_workers(UNLIMITED, addr, 1).await;
    assert_cut(p.addr, "/short").await;
    let (s, b) = fetch(p.addr, Method::GET, "/").await;
    assert_eq!((s, b.unwrap()), (StatusCode::OK, Bytes::from("ok")));
    assert_eq!(conns(&seen), vec![0, 1], "the cut connection is not reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_dropped_silently_is_retried_only_for_idempotent_methods() {
    // every connection answers its first request and drops the second unanswered,
    // as an upstream does when its keep-alive timeout races the proxy's next request
    let (addr, seen) = raw_backend(|_, nth, _| {
        if nth == 0 {
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
                false,
            )
        } else {
            (Vec::new(), true)
        }
    })
    .await;
    let p = RunningProxy::start_with_workers(UNLIMITED, addr, 1).await;
    let (s, _) = fetch(p.addr, Method::GET, "/warm").await;
    assert_eq!(s, StatusCode::OK);
    // GET on the pooled connection: dropped unanswered, sent again on a new one
    let (s, b) = fetch(p.addr, Method::GET, "/get").await;
    assert_eq!((s, b.unwrap()), (StatusCode::OK, Bytes::from("ok")));
    // a POST without a body on the (now pooled) second connection: dropped, and not
    // sent again (it may have been acted on): 502
    let (s, _) = fetch(p.addr, Method::POST, "/post").await;
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    let lines: Vec<(usize, String)> = seen.lock().unwrap().clone();
    let posts = lines.iter().filter(|(_, l)| l.starts_with("POST")).count();
    let gets: Vec<usize> = lines
        .iter()
        .filter(|(_, l)| l.starts_with("GET /get"))
        .map(|(c, _)| *c)
        .collect();
    assert_eq!(
        gets,
        vec![0, 1],
        "the GET went out twice: pooled, then fresh"
    );
    assert_eq!(posts, 1, "the POST went out once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_timeout_restarts_with_each_request_on_a_kept_connection() {
    // the connection's timer is moved forward per request: requests spread over more
    // than one timeout on one connection all succeed, and a slow one still times out
    let (addr, seen) = raw_backend(|_, _, line| {
        if line.contains("/slow") {
            std::thread::sleep(std::time::Duration::from_millis(600));
        }
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            false,
        )
    })
    .await;
    let cfg = format!("upstream_timeout = \"300ms\"\n{UNLIMITED}");
    let p = RunningProxy::start_with_workers(&cfg, addr, 1).await;
    for _ in 0..8 {
        let (s, b) = fetch(p.addr, Method::GET, "/").await;
        assert_eq!((s, b.unwrap()), (StatusCode::OK, Bytes::from("ok")));
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    }
    assert_eq!(conns(&seen), vec![0; 8], "one kept connection");
    let (s, _) = fetch(p.addr, Method::GET, "/slow").await;
    assert_eq!(s, StatusCode::GATEWAY_TIMEOUT);
    let (s, _) = fetch(p.addr, Method::GET, "/").await;
    assert_eq!(s, StatusCode::OK, "the proxy goes on after a timeout");
}
