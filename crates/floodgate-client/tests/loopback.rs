//! The polite client against real rate-limited servers over loopback (hyper via the tower
//! layer, and reqwest via the middleware).

mod common;

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use common::{Behavior, FloodgateProxy, MethodKind, RetryAfter, TestServer, mean_std};
use floodgate_client::backoff::{Backoff, Jitter, RetryBudgetConfig};
use floodgate_client::{
    Polite, PoliteConfig, PoliteLayer, PoliteMiddleware, PoliteService, Streaming,
};
use floodgate_core::{Kind, Spec};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::{Layer, Service, ServiceExt};

type Hyper = Client<HttpConnector, Full<Bytes>>;

fn hyper_client() -> Hyper {
    Client::builder(TokioExecutor::new()).build_http()
}

fn engine(cfg: PoliteConfig) -> Polite {
    Polite::new(cfg).expect("valid config")
}

async fn send(svc: &mut PoliteService<Hyper>, method: Method, url: &str) -> StatusCode {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(b"payload")))
        .expect("request");
    let resp = svc
        .ready()
        .await
        .expect("ready")
        .call(req)
        .await
        .expect("response");
    let status = resp.status();
    let _ = resp.into_body().collect().await;
    status
}

/// A naive client: fire, and on 429 try again after a fixed 50 ms (no headers read, no
/// jitter). Returns how many 429s it received.
async fn naive_worker(client: Hyper, url: String, requests: usize) -> u64 {
    let mut throttled = 0;
    for _ in 0..requests {
        for _ in 0..1000 {
            let req = Request::get(&url)
                .body(Full::new(Bytes::new()))
                .expect("request");
            let resp = client.request(req).await.expect("response");
            let status = resp.status();
            let _ = resp.into_body().collect().await;
            if status == StatusCode::OK {
                break;
            }
            throttled += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    throttled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polite_client_gets_far_fewer_429s_than_naive_at_the_same_load() {
    const WORKERS: usize = 10;
    const PER_WORKER: usize = 6;
    // The floodgate proxy in front of a backend: a fixed window of 20 per second for all.
    let spec = || Spec::new(Kind::FixedWindow, "20/s".parse().expect("rate"));
    let naive_server = FloodgateProxy::start(spec()).await;
    let polite_server = FloodgateProxy::start(spec()).await;

    let naive = {
        let url = naive_server.url("/");
        tokio::spawn(async move {
            let start = Instant::now();
            let client = hyper_client();
            let tasks: Vec<_> = (0..WORKERS)
                .map(|_| tokio::spawn(naive_worker(client.clone(), url.clone(), PER_WORKER)))
                .collect();
            let mut throttled = 0;
            for t in tasks {
                throttled += t.await.expect("worker");
            }
            (throttled, start.elapsed())
        })
    };
    let polite_engine = engine(PoliteConfig {
        max_attempts: 20,
        max_wait: Duration::from_secs(5),
        budget: RetryBudgetConfig {
            percent_can_retry: 1.0,
            ..RetryBudgetConfig::default()
        },
        ..PoliteConfig::default()
    });
    let polite = {
        let url = polite_server.url("/");
        let eng = polite_engine.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let svc = PoliteLayer::new(eng).layer(hyper_client());
            let tasks: Vec<_> = (0..WORKERS)
                .map(|_| {
                    let mut svc = svc.clone();
                    let url = url.clone();
                    tokio::spawn(async move {
                        for _ in 0..PER_WORKER {
                            assert_eq!(send(&mut svc, Method::GET, &url).await, StatusCode::OK);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("worker");
            }
            start.elapsed()
        })
    };
    let (n_429, naive_time) = naive.await.expect("naive");
    let polite_time = polite.await.expect("polite");
    let p_429 = polite_engine.stats().throttled;
    let (n_ok, p_ok) = (naive_server.backend.total(), polite_server.backend.total());
    println!("naive:  {n_ok} ok, {n_429} x 429 in {naive_time:?}");
    println!(
        "polite: {p_ok} ok, {p_429} x 429 in {polite_time:?} ({:?})",
        polite_engine.stats()
    );
    assert_eq!(n_ok, WORKERS * PER_WORKER);
    assert_eq!(p_ok, WORKERS * PER_WORKER);
    assert!(
        n_429 >= 50,
        "the naive client should hit the limit hard, got {n_429}"
    );
    assert!(p_429 * 5 <= n_429, "polite {p_429} vs naive {n_429}");
}

/// 50 independent clients (a fleet, each its own engine) are all denied at once with
/// `Retry-After: 1`. Their retries must wait at least 1 s and be spread by the jitter.
async fn fleet_retry_times(jitter: bool) -> (Vec<Duration>, Duration) {
    const CLIENTS: u64 = 50;
    let server = TestServer::start(Behavior::DenyFirst {
        n: CLIENTS,
        retry_after: RetryAfter::Seconds(1),
    })
    .await;
    let url = server.url("/");
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let cfg = PoliteConfig {
                seed: Some(i),
                retry_after_jitter: if jitter { 0.2 } else { 0.0 },
                retry_after_jitter_min: if jitter {
                    Duration::from_millis(250)
                } else {
                    Duration::ZERO
                },
                ..PoliteConfig::default()
            };
            let mut svc = PoliteLayer::new(engine(cfg)).layer(hyper_client());
            let url = url.clone();
            tokio::spawn(async move { send(&mut svc, Method::GET, &url).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.expect("client"), StatusCode::OK);
    }
    let hits = server.hits();
    assert_eq!(hits.len(), 2 * CLIENTS as usize);
    let last_denial = hits
        .iter()
        .filter(|h| h.status == 429)
        .map(|h| h.at)
        .max()
        .expect("denials");
    let first_denial = hits
        .iter()
        .filter(|h| h.status == 429)
        .map(|h| h.at)
        .min()
        .expect("denials");
    let retries: Vec<Duration> = hits
        .iter()
        .filter(|h| h.status == 200)
        .map(|h| h.at)
        .collect();
    assert!(
        retries
            .iter()
            .all(|&r| r >= first_denial + Duration::from_secs(1)),
        "a retry came before Retry-After elapsed"
    );
    (retries, last_denial - first_denial)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_after_a_mass_denial_are_spread_in_time() {
    let (jittered, denial_span) = fleet_retry_times(true).await;
    let (lockstep, _) = fleet_retry_times(false).await;
    let range = |v: &[Duration]| *v.iter().max().unwrap() - *v.iter().min().unwrap();
    let (_, sd_j) = mean_std(&jittered);
    let (_, sd_l) = mean_std(&lockstep);
    println!(
        "denials spread over {denial_span:?}; retries with jitter: range {:?} sd {:.1} ms; without: range {:?} sd {:.1} ms",
        range(&jittered),
        sd_j * 1e3,
        range(&lockstep),
        sd_l * 1e3
    );
    // uniform(0, 250 ms) has sd 72 ms and a range close to 250 ms for 50 draws.
    assert!(
        range(&jittered) >= Duration::from_millis(150),
        "{:?}",
        range(&jittered)
    );
    assert!(sd_j >= 0.040, "sd {sd_j}");
    assert!(
        sd_j > 2.0 * sd_l,
        "jittered sd {sd_j} vs lockstep sd {sd_l}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_delay_seconds_is_honoured_via_reqwest() {
    let server = TestServer::start(Behavior::DenyFirst {
        n: 1,
        retry_after: RetryAfter::Seconds(1),
    })
    .await;
    let eng = engine(PoliteConfig {
        seed: Some(5),
        ..PoliteConfig::default()
    });
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(PoliteMiddleware::new(eng.clone()))
        .build();
    let resp = client.get(server.url("/x")).send().await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    let hits = server.hits();
    assert_eq!(hits.len(), 2);
    let gap = hits[1].at - hits[0].at;
    // 1 s plus jitter of at most max(250 ms, 20 % of 1 s), plus scheduling slack.
    assert!(
        gap >= Duration::from_secs(1) && gap < Duration::from_millis(1600),
        "{gap:?}"
    );
    assert_eq!(eng.stats().retries, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_http_date_is_honoured() {
    let server = TestServer::start(Behavior::DenyFirst {
        n: 1,
        retry_after: RetryAfter::DateIn(2),
    })
    .await;
    let mut svc = PoliteLayer::new(engine(PoliteConfig::default())).layer(hyper_client());
    assert_eq!(
        send(&mut svc, Method::GET, &server.url("/")).await,
        StatusCode::OK
    );
    let hits = server.hits();
    assert_eq!(hits.len(), 2);
    // The date has whole seconds: the announced instant is floor(denial + 2 s).
    let announced = httpdate::parse_http_date(&httpdate::fmt_http_date(
        hits[0].wall + Duration::from_secs(2),
    ))
    .expect("date");
    assert!(hits[1].wall >= announced, "retried before the date");
    let gap = hits[1].at - hits[0].at;
    assert!(
        gap >= Duration::from_secs(1) && gap < Duration::from_millis(2800),
        "{gap:?}"
    );
    let _ = SystemTime::now();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_budget_caps_retries_during_a_full_outage() {
    let server = TestServer::start(Behavior::Always(StatusCode::SERVICE_UNAVAILABLE, None)).await;
    const REQUESTS: usize = 200;
    let eng = engine(PoliteConfig {
        max_attempts: 4,
        backoff: Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(10),
            jitter: Jitter::Full,
        },
        budget: RetryBudgetConfig {
            ttl: Duration::from_secs(10),
            min_retries_per_sec: 1,
            percent_can_retry: 0.1,
        },
        seed: Some(11),
        ..PoliteConfig::default()
    });
    let svc = PoliteLayer::new(eng.clone()).layer(hyper_client());
    let url = server.url("/");
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let mut svc = svc.clone();
            let url = url.clone();
            tokio::spawn(async move {
                for _ in 0..REQUESTS / 20 {
                    assert_eq!(
                        send(&mut svc, Method::GET, &url).await,
                        StatusCode::SERVICE_UNAVAILABLE
                    );
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("worker");
    }
    let st = eng.stats();
    println!(
        "outage: {} requests reached the server for {REQUESTS} calls; {st:?}",
        server.total()
    );
    // Without a budget: 200 x 4 = 800 attempts. With it: 200 + (1/s x 10 s + 10 % x 200).
    assert!(server.total() <= REQUESTS + 30, "{}", server.total());
    assert_eq!(server.total() as u64, REQUESTS as u64 + st.retries);
    assert!(st.budget_exhausted > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_idempotent_or_opted_in_requests_are_retried() {
    let server = TestServer::start(Behavior::Always(StatusCode::SERVICE_UNAVAILABLE, None)).await;
    let cfg = || PoliteConfig {
        max_attempts: 3,
        backoff: Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
            jitter: Jitter::Full,
        },
        ..PoliteConfig::default()
    };
    let url = server.url("/");
    let mut svc = PoliteLayer::new(engine(cfg())).layer(hyper_client());
    // POST: sent once.
    send(&mut svc, Method::POST, &url).await;
    assert_eq!(server.total(), 1);
    // PUT is idempotent: 3 attempts.
    send(&mut svc, Method::PUT, &url).await;
    assert_eq!(
        server
            .hits()
            .iter()
            .filter(|h| h.method == MethodKind::Put)
            .count(),
        3
    );
    // POST with an Idempotency-Key: 3 attempts.
    let req = Request::post(&url)
        .header("idempotency-key", "k-1")
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("request");
    svc.ready()
        .await
        .expect("ready")
        .call(req)
        .await
        .expect("response");
    assert_eq!(
        server
            .hits()
            .iter()
            .filter(|h| h.method == MethodKind::Post)
            .count(),
        4
    );
    // Explicit opt-in.
    let mut opted = PoliteLayer::new(engine(PoliteConfig {
        retry_non_idempotent: true,
        ..cfg()
    }))
    .layer(hyper_client());
    send(&mut opted, Method::POST, &url).await;
    assert_eq!(
        server
            .hits()
            .iter()
            .filter(|h| h.method == MethodKind::Post)
            .count(),
        7
    );
    // A streaming body is never replayed, even on a GET.
    let before = server.total();
    let mut streaming = PoliteLayer::new(engine(cfg()))
        .layer(Client::builder(TokioExecutor::new()).build_http::<Streaming<Full<Bytes>>>());
    let req = Request::get(&url)
        .body(Streaming::new(Full::new(Bytes::from_static(b"chunk"))))
        .expect("request");
    streaming
        .ready()
        .await
        .expect("ready")
        .call(req)
        .await
        .expect("response");
    assert_eq!(server.total(), before + 1);
    // reqwest: POST once, GET three times.
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(PoliteMiddleware::new(engine(cfg())))
        .build();
    let before = server.total();
    client.post(&url).body("x").send().await.expect("response");
    assert_eq!(server.total(), before + 1);
    client.get(&url).send().await.expect("response");
    assert_eq!(server.total(), before + 4);
}
