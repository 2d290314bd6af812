//! The polite client against a real `floodgate proxy` with `max_in_flight = 2` over
//! loopback: it reads `qu="concurrent-requests"` as a cap on its own concurrency (at most
//! two requests in flight to the host), not as a rate, and so gets no 429 at all.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floodgate_client::{Polite, PoliteConfig, PoliteLayer};
use floodgate_http::{InFlightSpec, KeySource, Policy, RateLimiter};
use floodgate_proxy::proxy::{Proxy, ProxySettings};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Layer, Service, ServiceExt};

/// A backend holding every request 30 ms, recording the most it served at once.
async fn backend(now: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (now, peak) = (now.clone(), peak.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| {
                    let (now, peak) = (now.clone(), peak.clone());
                    async move {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                            b"ok",
                        ))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_policy_caps_the_clients_own_concurrency() {
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let upstream = backend(now, peak.clone()).await;
    let limiter = RateLimiter::builder()
        .policy(
            Policy::max_in_flight(
                "gpu",
                InFlightSpec::new(2, Duration::from_secs(30)).unwrap(),
            )
            .key(KeySource::global()),
        )
        .build()
        .unwrap();
    let settings = ProxySettings::new(format!("http://{upstream}").parse().unwrap());
    let settings = ProxySettings {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..settings
    };
    let proxy = Proxy::bind(limiter, &settings).await.unwrap();
    let addr = proxy.local_addr();
    tokio::spawn(proxy.run(std::future::pending()));

    let polite = Polite::new(PoliteConfig::default()).unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let svc = PoliteLayer::new(polite.clone()).layer(client);
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let mut svc = svc.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                let resp = svc.ready().await.unwrap().call(req).await.unwrap();
                let status = resp.status();
                let _ = resp.into_body().collect().await;
                status
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    let stats = polite.stats();
    println!(
        "12 requests, max_in_flight = 2: {} throttled, backend peak {}, cap learned {:?}",
        stats.throttled,
        peak.load(Ordering::SeqCst),
        polite.concurrency_cap(&addr.to_string())
    );
    assert_eq!(polite.concurrency_cap(&addr.to_string()), Some(2));
    assert_eq!(stats.throttled, 0, "the client kept to the cap: {stats:?}");
    assert!(peak.load(Ordering::SeqCst) <= 2);
}
