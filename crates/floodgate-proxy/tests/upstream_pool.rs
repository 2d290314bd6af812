//! The proxy's own HTTP/1.1 upstream pool, over loopback with a real hyper backend:
//! connections are reused, a connection the upstream closes is replaced without an
//! error, and a response abandoned half-read does not poison the pool.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};

const UNLIMITED: &str =
    "[[policy]]\nname = \"p\"\nrate = \"100000/s\"\nburst = 100000\nnodelay = true\n";

/// One client connection to the proxy (a pooled client may open a second one when it
/// sends before its first is back in its pool).
async fn one_connection(
    addr: std::net::SocketAddr,
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_reuse_one_upstream_connection() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(UNLIMITED, backend.addr).await;
    let mut c = one_connection(p.addr).await;
    for i in 0..30 {
        // bodies, empty 204s and HEADs all leave the connection reusable
        let (method, path, want) = match i % 4 {
            0 | 1 => ("GET", "/", 200),
            2 => ("GET", "/empty", 204),
            _ => ("HEAD", "/", 200),
        };
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", p.addr.to_string())
            .body(Full::new(Bytes::new()))
            .unwrap();
        c.ready().await.unwrap();
        let resp = c.send_request(req).await.unwrap();
        assert_eq!(resp.status(), want, "request {i}: {method} {path}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let want_body: &[u8] = if method == "GET" && want == 200 {
            b"ok"
        } else {
            b""
        };
        assert_eq!(&body[..], want_body, "request {i}");
    }
    let conns: Vec<usize> = backend.arrivals().iter().map(|a| a.conn).collect();
    assert_eq!(
        conns,
        vec![0; 30],
        "one client connection, one upstream connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_closing_its_connection_is_replaced_without_an_error() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(UNLIMITED, backend.addr).await;
    let mut one = one_connection(p.addr).await;
    for i in 0..20 {
        let path = if i % 2 == 0 { "/close" } else { "/" };
        let req = Request::get(path)
            .header("host", p.addr.to_string())
            .body(Full::new(Bytes::new()))
            .unwrap();
        one.ready().await.unwrap();
        let resp = one.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "request {i} ({path})");
        // the upstream's Connection: close is hop-by-hop: not passed on, so the client
        // keeps its connection to the proxy
        assert!(!resp.headers().contains_key("connection"), "request {i}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "ok");
    }
    let c = client();
    // the first /close opened a connection; each /close retired its connection, and
    // the request after it opened the next: 11
    assert_eq!(backend.connections.load(Ordering::SeqCst), 11);
    let m = get(&c, p.admin, "/metrics", &[]).await;
    let text = String::from_utf8_lossy(&m.body);
    for kind in ["connect", "response", "timeout"] {
        let zero = format!("floodgate_upstream_errors_total{{kind=\"{kind}\"}} 0");
        assert!(text.contains(&zero), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_abandoned_half_read_does_not_poison_the_pool() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(UNLIMITED, backend.addr).await;
    for _ in 0..3 {
        // a client that reads the head of a 4 MB response, then hangs up
        let c = client();
        let req = Request::get(format!("http://{}/big", p.addr))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.data_ref().is_some_and(|d| !d.is_empty()));
        drop(body);
        drop(c);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let c = client();
    for i in 0..10 {
        let got = get(&c, p.addr, "/", &[]).await;
        assert_eq!(
            (got.status.as_u16(), &got.body[..]),
            (200, &b"ok"[..]),
            "request {i}"
        );
    }
    // a whole 4 MB body still comes through intact
    let got = get(&c, p.addr, "/big", &[]).await;
    assert_eq!(got.body.len(), 4 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_is_kept_and_http2_clients_get_one_from_their_authority() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(UNLIMITED, backend.addr).await;
    let got = get(&client(), p.addr, "/", &[("host", "api.example")]).await;
    assert_eq!(got.status, 200);
    let got = get(&h2_client(), p.addr, "/h2", &[]).await;
    assert_eq!(got.status, 200);
    let a = backend.arrivals();
    assert_eq!(a[0].headers["host"], "api.example");
    assert_eq!(a[0].version, http::Version::HTTP_11);
    // an HTTP/2 request carries :authority, not Host; HTTP/1.1 upstream needs a Host
    assert_eq!(a[1].headers["host"], p.addr.to_string());
    assert_eq!(a[1].version, http::Version::HTTP_11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_upstream_gets_http2() {
    let backend = Backend::start().await;
    let cfg = format!("upstream_http2 = true\n{UNLIMITED}");
    let p = RunningProxy::start(&cfg, backend.addr).await;
    for c in [client(), h2_client()] {
        let got = get(&c, p.addr, "/", &[]).await;
        assert_eq!((got.status.as_u16(), &got.body[..]), (200, &b"ok"[..]));
    }
    let a = backend.arrivals();
    assert_eq!(a.len(), 2);
    assert!(
        a.iter().all(|a| a.version == http::Version::HTTP_2),
        "{a:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_with_and_without_a_body_reach_the_upstream_with_the_same_fields() {
    // without a body the proxy writes the head itself (the direct way); with one, hyper's
    // client does: the upstream must not be able to tell them apart
    let backend = Backend::start().await;
    let p = RunningProxy::start(UNLIMITED, backend.addr).await;
    let mut c = one_connection(p.addr).await;
    for body in ["", "payload"] {
        let req = Request::post("/fields")
            .header("host", "api.example.test")
            .header("x-forwarded-for", "1.2.3.4")
            .header("x-forwarded-for", "5.6.7.8")
            .header("connection", "keep-alive, x-secret")
            .header("x-secret", "dropped")
            .header("keep-alive", "timeout=5")
            .header("te", "trailers")
            .header("x-kept", "yes")
            .header("x-many", "1")
            .header("x-many", "2")
            .header("content-length", body.len())
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        c.ready().await.unwrap();
        let resp = c.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap();
    }
    // the lengths are the bodies' own: one field each, 0 without a body
    let lengths: Vec<Vec<String>> = backend
        .arrivals()
        .iter()
        .map(|a| {
            a.headers
                .get_all("content-length")
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect()
        })
        .collect();
    assert_eq!(lengths, vec![vec!["0".to_string()], vec!["7".to_string()]]);
    let got: Vec<Vec<(String, String)>> = backend
        .arrivals()
        .iter()
        .map(|a| {
            let mut f: Vec<(String, String)> = a
                .headers
                .iter()
                .filter(|(n, _)| *n != "content-length")
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
                .collect();
            f.sort();
            f
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("host", "api.example.test"),
        ("x-forwarded-for", "1.2.3.4, 5.6.7.8, 127.0.0.1"),
        ("x-kept", "yes"),
        ("x-many", "1"),
        ("x-many", "2"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, vec![want.clone(), want]);
}
