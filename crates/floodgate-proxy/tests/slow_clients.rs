//! Slow and greedy clients, with short configured timeouts:
//! a client that never reads its response and a request body that stalls free the
//! upstream connection within the configured times; the connection caps refuse the
//! excess, counted; an upstream `Content-Length` over 2^63-1 is a 502.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::RunningProxy;
use common::recorder::{Recorder, exchange, sample};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const POLICY: &str =
    "[[policy]]\nname = \"p\"\nrate = \"100000/s\"\nburst = 100000\nnodelay = true\n";

/// Wait until the backend has seen `n` connections end; when the last did.
async fn backend_closed(backend: &Recorder, n: usize, within: Duration) -> Option<Instant> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(t) = backend.closed.lock().unwrap().get(n - 1) {
            return Some(*t);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_frees_the_upstream_within_the_send_timeout() {
    let backend = Recorder::start().await;
    let cfg = format!("send_timeout = \"300ms\"\n{POLICY}");
    let p = RunningProxy::start(&cfg, backend.addr).await;
    // the proxy's own path (no body), then hyper's (a body)
    for (n, req) in [
        &b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"POST /big HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        let start = Instant::now();
        s.write_all(req).await.unwrap();
        // 32 MiB come back; this client reads none of it
        let closed = backend_closed(&backend, n + 1, Duration::from_secs(10))
            .await
            .expect("the upstream connection was not freed within 10 s");
        let took = closed - start;
        assert!(took < Duration::from_secs(3), "{n}: {took:?}");
        drop(s);
    }
    let m = p.limiter.render_metrics();
    assert_eq!(
        sample(&m, r#"floodgate_client_timeouts_total{kind="send"}"#),
        2,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408_within_the_body_timeout() {
    let backend = Recorder::start().await;
    let cfg = format!("body_timeout = \"300ms\"\nupstream_timeout = \"10s\"\n{POLICY}");
    let p = RunningProxy::start(&cfg, backend.addr).await;
    let start = Instant::now();
    // five bytes of ten, then nothing
    let got = exchange(
        p.addr,
        b"POST /collect HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello",
        1,
    )
    .await;
    let took = start.elapsed();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, 408, "{}", got[0].head);
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );
    backend_closed(&backend, 1, Duration::from_secs(3))
        .await
        .expect("the upstream connection was not freed");
    let m = p.limiter.render_metrics();
    assert_eq!(
        sample(&m, r#"floodgate_client_timeouts_total{kind="body"}"#),
        1
    );
    for kind in ["connect", "response", "timeout"] {
        let series = format!("floodgate_upstream_errors_total{{kind=\"{kind}\"}}");
        assert_eq!(sample(&m, &series), 0, "{kind}");
    }
    // the same when the upstream timeout comes first: still the client's stall, 408
    let cfg = format!("body_timeout = \"10s\"\nupstream_timeout = \"300ms\"\n{POLICY}");
    let p = RunningProxy::start(&cfg, backend.addr).await;
    let got = exchange(
        p.addr,
        b"POST /collect HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello",
        1,
    )
    .await;
    assert_eq!(got[0].status, 408, "{}", got[0].head);
    let m = p.limiter.render_metrics();
    assert_eq!(
        sample(&m, r#"floodgate_upstream_errors_total{kind="timeout"}"#),
        0
    );
}

/// Connect from `ip` (a loopback address), send a request and say whether it was served.
async fn served_from(ip: &str, proxy: SocketAddr) -> (bool, Option<TcpStream>) {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{ip}:0").parse().unwrap()).unwrap();
    let mut s = sock.connect(proxy).await.unwrap();
    if s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .is_err()
    {
        return (false, None);
    }
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 && buf.starts_with(b"HTTP/1.1 200") => (true, Some(s)),
        _ => (false, None),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_caps_refuse_the_excess_counted() {
    let backend = Recorder::start().await;
    let cfg = format!("max_connections = 3\nmax_connections_per_client = 2\n{POLICY}");
    let p = RunningProxy::start(&cfg, backend.addr).await;
    let (ok1, c1) = served_from("127.0.0.1", p.addr).await;
    let (ok2, _c2) = served_from("127.0.0.1", p.addr).await;
    assert!(ok1 && ok2);
    // a third from the same address: over the per-client cap
    assert!(!served_from("127.0.0.1", p.addr).await.0);
    // another address fits under the total cap, a further one does not
    let (ok3, _c3) = served_from("127.0.0.2", p.addr).await;
    assert!(ok3);
    assert!(!served_from("127.0.0.3", p.addr).await.0);
    // a connection that ends gives its place back
    drop(c1);
    let mut ok = false;
    for _ in 0..50 {
        if served_from("127.0.0.3", p.addr).await.0 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "the place of a closed connection was not given back");
    let m = p.limiter.render_metrics();
    assert_eq!(
        sample(
            &m,
            r#"floodgate_client_connections_total{outcome="refused_per_client"}"#
        ),
        1
    );
    assert!(
        sample(
            &m,
            r#"floodgate_client_connections_total{outcome="refused_total"}"#
        ) >= 1
    );
}

/// An upstream `Content-Length` above 2^63-1 is a bad response: 502, counted (finding
/// 7); 2^63-1 itself is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_length_over_two_to_the_63_is_a_bad_gateway() {
    let backend = Recorder::start().await;
    let p = RunningProxy::start(POLICY, backend.addr).await;
    for (req, path) in [
        ("GET /huge-length HTTP/1.1\r\nHost: a\r\n\r\n", "direct"),
        (
            "POST /huge-length HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
            "hyper",
        ),
    ] {
        let got = exchange(p.addr, req.as_bytes(), 1).await;
        assert_eq!(got[0].status, 502, "{path}: {:?}", got[0].head);
    }
    let m = p.limiter.render_metrics();
    assert_eq!(
        sample(&m, r#"floodgate_upstream_errors_total{kind="response"}"#),
        2
    );
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /max-length HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("content-length: 9223372036854775807"),
        "{head}"
    );
}

/// An upstream that reads a request head and never its body: the upstream's stall, not
/// the client's, so a 504 counted as an upstream timeout, not a 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_the_body_is_a_gateway_timeout() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            held.push(s); // open, never read again
        }
    });
    let cfg = format!("body_timeout = \"10s\"\nupstream_timeout = \"500ms\"\n{POLICY}");
    let p = RunningProxy::start(&cfg, upstream).await;
    let body = vec![b'x'; 16 << 20];
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // the client sends all it can; what does not fit waits in its own buffers
    let (mut r, mut w) = s.into_split();
    tokio::spawn(async move {
        let _ = w.write_all(&body).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|x| x == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), r.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            other => panic!("no response: {other:?}"),
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
    let m = p.limiter.render_metrics();
    assert_eq!(
        sample(&m, r#"floodgate_upstream_errors_total{kind="timeout"}"#),
        1
    );
    assert_eq!(
        sample(&m, r#"floodgate_client_timeouts_total{kind="body"}"#),
        0
    );
}
