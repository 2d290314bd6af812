//! Real HTTP servers on 127.0.0.1:0 for the tests: axum over tokio, nothing mocked.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use floodgate_core::algorithms::{FixedWindow, Gcra};
use floodgate_core::{Algorithm, Clock, Limiter, Rate, WallClock};
use parking_lot::Mutex;

/// Serve `app` on a free loopback port; the task ends with the test's runtime.
pub async fn serve(app: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

/// Arrival times of every request a server received.
#[derive(Default)]
pub struct Arrivals {
    pub count: AtomicU64,
    pub times: Mutex<Vec<Instant>>,
}

impl Arrivals {
    pub fn note(&self) -> u64 {
        self.times.lock().push(Instant::now());
        self.count.fetch_add(1, Ordering::SeqCst)
    }
}

/// Every third request (by arrival) gets a 429, the others a 200; all carry RateLimit
/// headers.
pub async fn mix_server() -> (SocketAddr, Arc<Arrivals>) {
    let arrivals = Arc::new(Arrivals::default());
    let app = Router::new()
        .route(
            "/",
            get(|State(a): State<Arc<Arrivals>>| async move {
                let n = a.note();
                let mut h = HeaderMap::new();
                h.insert(
                    "ratelimit-policy",
                    HeaderValue::from_static("\"mix\";q=2;w=3"),
                );
                h.insert(
                    "ratelimit",
                    HeaderValue::from_str(&format!("\"mix\";r={};t=1", 2 - n % 3)).unwrap(),
                );
                if n % 3 == 2 {
                    h.insert("retry-after", HeaderValue::from_static("1"));
                    (StatusCode::TOO_MANY_REQUESTS, h, "slow down")
                } else {
                    (StatusCode::OK, h, "ok")
                }
            }),
        )
        .with_state(arrivals.clone());
    (serve(app).await.0, arrivals)
}

/// 200 for everything, arrivals recorded.
pub async fn ok_server() -> (SocketAddr, Arc<Arrivals>) {
    let arrivals = Arc::new(Arrivals::default());
    let app = Router::new()
        .route(
            "/",
            get(|State(a): State<Arc<Arrivals>>| async move {
                a.note();
                "ok"
            }),
        )
        .with_state(arrivals.clone());
    (serve(app).await.0, arrivals)
}

/// A server that, when request number `at` arrives, stalls every request (that one and
/// all arriving in the next `stall`) until `stall` has passed; otherwise answers at once.
pub async fn stall_server(at: u64, stall: Duration) -> SocketAddr {
    struct S {
        n: AtomicU64,
        until: Mutex<Option<tokio::time::Instant>>,
        at: u64,
        stall: Duration,
    }
    let s = Arc::new(S {
        n: AtomicU64::new(0),
        until: Mutex::new(None),
        at,
        stall,
    });
    let app = Router::new()
        .route(
            "/",
            get(|State(s): State<Arc<S>>| async move {
                let n = s.n.fetch_add(1, Ordering::SeqCst);
                let until = {
                    let mut u = s.until.lock();
                    if n == s.at {
                        *u = Some(tokio::time::Instant::now() + s.stall);
                    }
                    *u
                };
                if let Some(until) = until {
                    tokio::time::sleep_until(until).await;
                }
                "ok"
            }),
        )
        .with_state(s);
    serve(app).await.0
}

/// A server that sleeps `delay` before answering.
pub async fn slow_server(delay: Duration) -> SocketAddr {
    let app = Router::new().route(
        "/",
        get(move || async move {
            tokio::time::sleep(delay).await;
            "late"
        }),
    );
    serve(app).await.0
}

/// A server that closes the connection after every response (so each request connects
/// anew), and the handle to abort it (its port then refuses connections).
pub async fn closing_server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let app = Router::new().route("/", get(|| async { ([("connection", "close")], "bye") }));
    serve(app).await
}

/// One limiter in front of a trivial handler, deciding on the wall clock (windows aligned
/// to the Unix epoch, as in production): 200 when admitted, 429 with Retry-After otherwise.
pub async fn limited_server<A>(alg: A, policy: &'static str) -> SocketAddr
where
    A: Algorithm + Send + Sync + 'static,
    A::State: Send,
{
    let limiter = Arc::new(Limiter::new(alg));
    let app = Router::new()
        .route(
            "/",
            get(move |State(l): State<Arc<Limiter<A>>>| async move {
                let d = l.check(WallClock.now(), 1);
                let mut h = HeaderMap::new();
                h.insert("ratelimit-policy", HeaderValue::from_static(policy));
                if d.allowed {
                    (StatusCode::OK, h).into_response()
                } else {
                    let secs = d.retry_after.map_or(1, floodgate_core::decision::ceil_secs);
                    h.insert("retry-after", HeaderValue::from(secs));
                    (StatusCode::TOO_MANY_REQUESTS, h).into_response()
                }
            }),
        )
        .with_state(limiter);
    serve(app).await.0
}

pub fn fixed_window(limit: u64, window: Duration) -> FixedWindow {
    FixedWindow::new(limit, window).unwrap()
}

pub fn gcra(per_second: u64, capacity: u64) -> Gcra {
    Gcra::new(Rate::per_second(per_second).unwrap(), capacity).unwrap()
}

/// The floodgate reverse proxy (floodgate-proxy's `Proxy`) on a free loopback port, with
/// one global policy `spec`, in front of a backend answering 200 to everything. Its
/// responses carry `RateLimit-Policy` and `RateLimit`, its denials (429) `Retry-After`.
/// Returns the proxy's address and the backend's arrivals (the requests it let through).
pub async fn floodgate_proxy(spec: floodgate_core::Spec) -> (SocketAddr, Arc<Arrivals>) {
    use floodgate_http::{KeySource, Policy, RateLimiter};
    use floodgate_proxy::proxy::{Proxy, ProxySettings};
    let (backend, arrivals) = ok_server().await;
    let limiter = RateLimiter::builder()
        .policy(Policy::new("default", spec).key(KeySource::global()))
        .build()
        .expect("limiter");
    let upstream = format!("http://{backend}").parse().expect("uri");
    let settings = ProxySettings {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..ProxySettings::new(upstream)
    };
    let proxy = Proxy::bind(limiter, &settings).await.expect("bind proxy");
    let addr = proxy.local_addr();
    tokio::spawn(proxy.run(std::future::pending()));
    (addr, arrivals)
}

/// 429 with `Retry-After: 1` to every request of any method, arrivals recorded.
pub async fn always_429_server() -> (SocketAddr, Arc<Arrivals>) {
    let arrivals = Arc::new(Arrivals::default());
    let app = Router::new()
        .route(
            "/",
            axum::routing::any(|State(a): State<Arc<Arrivals>>| async move {
                a.note();
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "1")],
                    "slow down",
                )
            }),
        )
        .with_state(arrivals.clone());
    (serve(app).await.0, arrivals)
}
