//! The client side's head timeout over loopback: a connection that waits too long for
//! a request head (slowloris, or idle between requests) is closed; a request waiting
//! on a slow upstream is not cut, however long it takes within the upstream timeout.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CFG: &str = "head_timeout = \"300ms\"\n[[policy]]\nname = \"p\"\nrate = \"100000/s\"\nburst = 100000\nnodelay = true\n";

/// Read until the proxy closes the connection; how long that took and what came.
async fn until_closed(s: &mut TcpStream) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (start.elapsed(), got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the connection was not closed within 5 s"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_never_completes_is_closed_after_the_head_timeout() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let (took, got) = until_closed(&mut s).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    assert!(backend.arrivals().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_its_last_response() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // requests spread over more than one timeout keep the connection: each starts the
    // idle clock again
    for _ in 0..4 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let (took, _) = until_closed(&mut s).await;
    assert!(took < Duration::from_millis(2000), "{took:?}");
    assert_eq!(backend.arrivals().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_on_a_slow_upstream_is_not_cut() {
    // the backend's /slow answers after 2 s, over six times the head timeout
    let backend = Backend::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("no response")
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_handed_to_hyper_is_closed_when_idle_too() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // a body: from here on the connection is hyper's
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    let (took, _) = until_closed(&mut s).await;
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(2000),
        "{took:?}"
    );
}

/// HTTP/2 frame types in `bytes` (a server's side of a connection), in order.
fn h2_frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while bytes.len() >= 9 {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        types.push(bytes[3]);
        bytes = &bytes[(9 + len).min(bytes.len())..];
    }
    types
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_gets_a_goaway_before_it_is_closed() {
    const SETTINGS: u8 = 0x4;
    const GOAWAY: u8 = 0x7;
    let backend = Backend::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // h2c with prior knowledge: the preface and an empty SETTINGS frame, then nothing
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let (took, got) = until_closed(&mut s).await;
    let types = h2_frame_types(&got);
    assert_eq!(types.first(), Some(&SETTINGS), "{types:?}");
    assert!(
        types.contains(&GOAWAY),
        "closed without a GOAWAY: frames {types:?}"
    );
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(2000),
        "{took:?}"
    );
}
