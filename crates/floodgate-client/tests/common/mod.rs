//! A small rate-limited HTTP/1.1 server on loopback for the client tests and the
//! naive-vs-polite example. It limits with `floodgate_core` and answers with `RateLimit`,
//! `RateLimit-Policy` and `Retry-After` per the draft's form, and logs every request
//! (arrival time, method, status) so tests can measure what clients actually sent.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use floodgate_core::algorithms::FixedWindow;
use floodgate_core::decision::ceil_secs;
use floodgate_core::{Clock, Limiter, MonotonicClock};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpListener;

/// How `Retry-After` is written.
#[derive(Debug, Clone, Copy)]
pub enum RetryAfter {
    /// `delay-seconds`.
    Seconds(u64),
    /// An `HTTP-date` this many seconds from the response (whole seconds: the date format
    /// has no fraction).
    DateIn(u64),
}

/// What the server does.
pub enum Behavior {
    /// A fixed window of `limit` per `window` (one global key): 200 with `RateLimit` and
    /// `RateLimit-Policy`; 429 with `Retry-After` (seconds) when over.
    Limited { limit: u64, window: Duration },
    /// Deny the first `n` requests with 429 and this `Retry-After`, then 200.
    DenyFirst { n: u64, retry_after: RetryAfter },
    /// Always this status, with an optional `Retry-After`.
    Always(StatusCode, Option<RetryAfter>),
}

/// One request as the server saw it.
#[derive(Debug, Clone, Copy)]
pub struct Hit {
    /// Arrival, since the server started (tokio's clock: virtual under a paused clock).
    pub at: Duration,
    /// Arrival, wall clock.
    pub wall: SystemTime,
    pub method: MethodKind,
    pub status: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    Get,
    Post,
    Put,
    Other,
}

struct State {
    behavior: Behavior,
    fixed: Option<Limiter<FixedWindow>>,
    clock: MonotonicClock,
    /// On tokio's clock, so that arrivals are in virtual time under a paused clock.
    started: tokio::time::Instant,
    seen: AtomicU64,
    log: Mutex<Vec<Hit>>,
}

/// A running server; it stops with the runtime that spawned it.
#[derive(Clone)]
pub struct TestServer {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl TestServer {
    pub async fn start(behavior: Behavior) -> TestServer {
        let fixed = match &behavior {
            Behavior::Limited { limit, window } => Some(Limiter::new(
                FixedWindow::new(*limit, *window).expect("valid window"),
            )),
            _ => None,
        };
        let state = Arc::new(State {
            behavior,
            fixed,
            clock: MonotonicClock::new(),
            started: tokio::time::Instant::now(),
            seen: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
        });
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(handle(&st, req)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        TestServer { addr, state }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state.log.lock().clone()
    }

    pub fn count(&self, status: u16) -> usize {
        self.state
            .log
            .lock()
            .iter()
            .filter(|h| h.status == status)
            .count()
    }

    pub fn total(&self) -> usize {
        self.state.log.lock().len()
    }
}

fn handle(st: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let n = st.seen.fetch_add(1, Ordering::SeqCst);
    let mut resp = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    let h = resp.headers_mut();
    let status = match &st.behavior {
        Behavior::Limited { limit, window } => {
            let d = st.fixed.as_ref().expect("limiter").check(st.clock.now(), 1);
            let w = window.as_secs().max(1);
            h.insert(
                "ratelimit-policy",
                format!("\"default\";q={limit};w={w}")
                    .parse()
                    .expect("header"),
            );
            h.insert(
                "ratelimit",
                format!(
                    "\"default\";r={};t={}",
                    d.remaining,
                    ceil_secs(d.reset_after)
                )
                .parse()
                .expect("header"),
            );
            if d.allowed {
                StatusCode::OK
            } else {
                let ra = d.retry_after.map(ceil_secs).unwrap_or(1);
                h.insert("retry-after", ra.into());
                StatusCode::TOO_MANY_REQUESTS
            }
        }
        Behavior::DenyFirst {
            n: deny,
            retry_after,
        } => {
            if n < *deny {
                set_retry_after(h, *retry_after);
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            }
        }
        Behavior::Always(s, ra) => {
            if let Some(ra) = ra {
                set_retry_after(h, *ra);
            }
            *s
        }
    };
    *resp.status_mut() = status;
    let method = match *req.method() {
        Method::GET => MethodKind::Get,
        Method::POST => MethodKind::Post,
        Method::PUT => MethodKind::Put,
        _ => MethodKind::Other,
    };
    st.log.lock().push(Hit {
        at: st.started.elapsed(),
        wall: SystemTime::now(),
        method,
        status: status.as_u16(),
    });
    resp
}

fn set_retry_after(h: &mut http::HeaderMap, ra: RetryAfter) {
    let v = match ra {
        RetryAfter::Seconds(s) => s.to_string(),
        RetryAfter::DateIn(s) => {
            httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(s))
        }
    };
    h.insert("retry-after", v.parse().expect("header"));
}

/// The floodgate proxy (crate floodgate-proxy) on loopback in front of a backend that always
/// answers 200, limiting all clients together with one policy named "default".
pub struct FloodgateProxy {
    pub addr: SocketAddr,
    pub backend: TestServer,
}

impl FloodgateProxy {
    pub async fn start(spec: floodgate_core::Spec) -> FloodgateProxy {
        use floodgate_http::{KeySource, Policy, RateLimiter};
        use floodgate_proxy::proxy::{Proxy, ProxySettings};
        let backend = TestServer::start(Behavior::Always(StatusCode::OK, None)).await;
        let limiter = RateLimiter::builder()
            .policy(Policy::new("default", spec).key(KeySource::global()))
            .build()
            .expect("limiter");
        let upstream = format!("http://{}", backend.addr).parse().expect("uri");
        let settings = ProxySettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            // The proxy's own HTTP/1 path stamps a connection's idle start with the std
            // clock; under tokio's paused clock (the pacing grid) that start lies far in
            // the virtual past and kept-alive connections would be closed at once. No
            // test here waits for the head timeout.
            head_timeout: Duration::from_secs(86_400),
            ..ProxySettings::new(upstream)
        };
        let proxy = Proxy::bind(limiter, &settings).await.expect("bind proxy");
        let addr = proxy.local_addr();
        tokio::spawn(proxy.run(std::future::pending()));
        FloodgateProxy { addr, backend }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

/// Mean and standard deviation of durations, in seconds.
pub fn mean_std(xs: &[Duration]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().map(Duration::as_secs_f64).sum::<f64>() / n;
    let var = xs
        .iter()
        .map(|x| (x.as_secs_f64() - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt())
}
