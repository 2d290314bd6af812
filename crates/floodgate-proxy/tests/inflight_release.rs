//! A `max_in_flight = 1` proxy gives its lease back however a request ends: a request
//! with a body (hyper's way to the upstream) and one without (the proxy's own HTTP/1
//! way), an upstream that times out (504), an upstream that is down (502), and a client
//! that goes away while the upstream is still working. After each, the next request is
//! admitted at once.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use floodgate_http::{InFlightSpec, KeySource, Policy, RateLimiter};
use floodgate_proxy::proxy::{Proxy, ProxySettings};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

mod common;

async fn proxy(upstream: SocketAddr) -> (SocketAddr, RateLimiter) {
    let limiter = RateLimiter::builder()
        .policy(
            Policy::max_in_flight(
                "one",
                InFlightSpec::new(1, Duration::from_secs(60)).unwrap(),
            )
            .key(KeySource::global()),
        )
        .build()
        .unwrap();
    let settings = ProxySettings {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        upstream_timeout: Duration::from_millis(300),
        ..ProxySettings::new(format!("http://{upstream}").parse().unwrap())
    };
    let p = Proxy::bind(limiter.clone(), &settings).await.unwrap();
    let addr = p.local_addr();
    tokio::spawn(p.run(std::future::pending()));
    (addr, limiter)
}

async fn send(addr: SocketAddr, method: &str, path: &str, body: &'static [u8]) -> u16 {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::from_static(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    status
}

fn held(limiter: &RateLimiter) -> String {
    limiter
        .render_metrics()
        .lines()
        .find(|l| l.starts_with("floodgate_inflight_leases{"))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_request_ends_gives_the_lease_back() {
    let (addr, limiter) = proxy(common::Backend::start().await.addr).await;
    for _ in 0..3 {
        assert_eq!(send(addr, "GET", "/", b"").await, 200); // the proxy's own HTTP/1 way
        assert_eq!(send(addr, "POST", "/", b"a body").await, 200); // hyper's way
    }
    // the upstream times out: 504, and the place is free again
    assert_eq!(send(addr, "GET", "/slow", b"").await, 504);
    assert_eq!(send(addr, "POST", "/slow", b"x").await, 504);
    assert_eq!(send(addr, "GET", "/", b"").await, 200);
    // a client that goes away (closes its connection) while the upstream works: the
    // place is held while the proxy still waits for the upstream (the backend is still
    // working on it), and free at the latest when the upstream answers or times out
    for (method, body) in [("GET", ""), ("POST", "x")] {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "{method} /slow HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        tokio::io::AsyncWriteExt::write_all(&mut c, head.as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            send(addr, "GET", "/", b"").await,
            429,
            "the slow one holds the place"
        );
        let gone = std::time::Instant::now();
        drop(c);
        let mut freed = None;
        for _ in 0..200 {
            if send(addr, "GET", "/", b"").await == 200 {
                freed = Some(gone.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let freed = freed.expect("the lease came back");
        println!("{method}: the place was free {freed:?} after the client went away");
        assert!(freed < Duration::from_millis(800), "{freed:?}");
    }
    assert!(held(&limiter).ends_with(" 0"), "{}", held(&limiter));
    // an upstream that is down: 502, and the place is free again
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (addr, limiter) = proxy(dead).await;
    assert_eq!(send(addr, "GET", "/", b"").await, 502);
    assert_eq!(send(addr, "POST", "/", b"x").await, 502);
    assert!(held(&limiter).ends_with(" 0"), "{}", held(&limiter));
}
