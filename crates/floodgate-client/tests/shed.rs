//! Server-side load shedding over loopback: the adaptive limiter in front of a handler,
//! as a tower layer; requests beyond the limit get 503 at once.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floodgate_client::concurrency::{AdaptiveLimiter, Aimd, AimdConfig, LoadShedLayer};
use floodgate_core::MonotonicClock;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceBuilder;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shed_layer_admits_at_most_limit_and_answers_503() {
    // A fixed limit of 4 (min = max) so the test is about admission, not adaptation.
    let limiter = AdaptiveLimiter::new(
        Aimd::new(AimdConfig {
            initial: 4,
            min: 4,
            max: 4,
            ..AimdConfig::default()
        })
        .unwrap(),
        Arc::new(MonotonicClock::new()),
    );
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    {
        let (limiter, running, peak) = (limiter.clone(), running.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (running, peak) = (running.clone(), peak.clone());
                let svc = ServiceBuilder::new()
                    .layer(LoadShedLayer::new(limiter.clone()))
                    .service_fn(move |_req: Request<Incoming>| {
                        let (running, peak) = (running.clone(), peak.clone());
                        async move {
                            let n = running.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(n, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            running.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                                b"done",
                            ))))
                        }
                    });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc))
                        .await;
                });
            }
        });
    }
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/"))
                    .body(Empty::new())
                    .unwrap();
                let resp = client.request(req).await.unwrap();
                let status = resp.status();
                let _ = resp.into_body().collect().await;
                status
            })
        })
        .collect();
    let mut ok = 0;
    let mut shed = 0;
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::SERVICE_UNAVAILABLE => shed += 1,
            s => panic!("unexpected {s}"),
        }
    }
    println!(
        "ok {ok}, shed {shed}, peak in handler {}",
        peak.load(Ordering::SeqCst)
    );
    assert!(peak.load(Ordering::SeqCst) <= 4);
    assert!(ok >= 4, "{ok}");
    assert!(shed >= 8, "{shed}");
    assert_eq!(ok + shed, 20);
    assert_eq!((limiter.limit(), limiter.inflight()), (4, 0));
}
