//! Test helpers: a real loopback backend that records arrivals, a proxy started
//! in-process on free ports, and a small client.
#![allow(dead_code)]

pub mod recorder;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate_proxy::config::Config;
use floodgate_proxy::proxy::{Proxy, ProxySettings};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// One request as the backend saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub at: Instant,
    pub path: String,
    pub headers: HeaderMap,
    /// Which backend connection it came on (0, 1, ... in accept order).
    pub conn: usize,
    pub version: http::Version,
}

/// A hyper backend on 127.0.0.1:0. `/slow` answers after 2 s; `/echo` streams the request
/// body back; `/collect` reads the whole body, then echoes it; `/empty` is a 204;
/// `/close` answers "ok" with `Connection: close`; `/big` sends 4 MB; everything else
/// answers "ok".
pub struct Backend {
    pub addr: SocketAddr,
    pub arrivals: Arc<Mutex<Vec<Arrival>>>,
    /// Connections accepted so far.
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl Backend {
    pub async fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let rec = arrivals.clone();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let conn = accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let rec = rec.clone();
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let rec = rec.clone();
                    async move {
                        rec.lock().unwrap().push(Arrival {
                            at: Instant::now(),
                            path: req.uri().path().to_string(),
                            headers: req.headers().clone(),
                            conn,
                            version: req.version(),
                        });
                        let path = req.uri().path().to_string();
                        let body: http_body_util::combinators::BoxBody<Bytes, hyper::Error> =
                            match req.uri().path() {
                                "/slow" => {
                                    tokio::time::sleep(Duration::from_secs(2)).await;
                                    Full::new(Bytes::from_static(b"slow"))
                                        .map_err(|e| match e {})
                                        .boxed()
                                }
                                "/echo" => req.into_body().boxed(),
                                // the whole body first, then the answer: no response head
                                // can leave before the body has ended (or failed)
                                "/collect" => match req.into_body().collect().await {
                                    Ok(b) => {
                                        Full::new(b.to_bytes()).map_err(|e| match e {}).boxed()
                                    }
                                    Err(_) => Full::new(Bytes::from_static(b"bad body"))
                                        .map_err(|e| match e {})
                                        .boxed(),
                                },
                                "/empty" => {
                                    http_body_util::Empty::new().map_err(|e| match e {}).boxed()
                                }
                                "/big" => Full::new(Bytes::from(vec![b'x'; 4 << 20]))
                                    .map_err(|e| match e {})
                                    .boxed(),
                                _ => Full::new(Bytes::from_static(b"ok"))
                                    .map_err(|e| match e {})
                                    .boxed(),
                            };
                        let mut resp = Response::new(body);
                        match path.as_str() {
                            "/empty" => *resp.status_mut() = StatusCode::NO_CONTENT,
                            "/close" => {
                                resp.headers_mut().insert(
                                    http::header::CONNECTION,
                                    http::HeaderValue::from_static("close"),
                                );
                            }
                            _ => {}
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Backend {
            addr,
            arrivals,
            connections,
        }
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }
}

/// A running in-process proxy.
pub struct RunningProxy {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub limiter: floodgate_http::RateLimiter,
    stop: Option<oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl RunningProxy {
    /// Start from TOML text; `upstream` and ports are filled in. Served on two worker
    /// threads, as `floodgate proxy` serves.
    pub async fn start(toml: &str, upstream: SocketAddr) -> RunningProxy {
        Self::start_with_workers(toml, upstream, 2).await
    }

    /// As [`start`](Self::start), with `workers` worker threads (0: on the test's own
    /// runtime, the library's default).
    pub async fn start_with_workers(
        toml: &str,
        upstream: SocketAddr,
        workers: usize,
    ) -> RunningProxy {
        let cfg = Config::parse(toml, Path::new("test.toml")).unwrap();
        let limiter = cfg.build().await.unwrap();
        let mut settings = ProxySettings::new(format!("http://{upstream}").parse().unwrap());
        settings.listen = "127.0.0.1:0".parse().unwrap();
        settings.admin = Some("127.0.0.1:0".parse().unwrap());
        cfg.apply_to(&mut settings);
        settings.shutdown_grace = Duration::from_secs(5);
        settings.workers = workers;
        let proxy = Proxy::bind(limiter.clone(), &settings).await.unwrap();
        let addr = proxy.local_addr();
        let admin = proxy.admin_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(proxy.run(async {
            let _ = rx.await;
        }));
        RunningProxy {
            addr,
            admin,
            limiter,
            stop: Some(tx),
            task,
        }
    }

    pub fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn h2_client() -> TestClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A finished response.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub async fn send(c: &TestClient, req: Request<Full<Bytes>>) -> Got {
    let resp = c.request(req).await.expect("request failed");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub async fn get(c: &TestClient, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut b = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    send(c, b.body(Full::new(Bytes::new())).unwrap()).await
}

/// What the raw backend saw: (connection number, request line).
pub type Seen = Arc<Mutex<Vec<(usize, String)>>>;

/// A backend that reads request heads (no bodies) and answers each with
/// `answer(connection, request on that connection, request line)`: the bytes to write,
/// and whether to close the connection afterwards.
pub async fn raw_backend(
    answer: impl Fn(usize, usize, &str) -> (Vec<u8>, bool) + Send + Sync + 'static,
) -> (SocketAddr, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let answer = Arc::new(answer);
    let log = seen.clone();
    tokio::spawn(async move {
        let mut conn_no = 0;
        while let Ok((s, _)) = l.accept().await {
            let (answer, log) = (answer.clone(), log.clone());
            let conn = conn_no;
            conn_no += 1;
            tokio::spawn(serve_raw(s, conn, answer, log));
        }
    });
    (addr, seen)
}

async fn serve_raw(
    mut s: TcpStream,
    conn: usize,
    answer: Arc<impl Fn(usize, usize, &str) -> (Vec<u8>, bool)>,
    log: Seen,
) {
    let mut buf = Vec::new();
    let mut nth = 0;
    loop {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let line = head.lines().next().unwrap_or("").to_string();
        log.lock().unwrap().push((conn, line.clone()));
        let (bytes, close) = answer(conn, nth, &line);
        nth += 1;
        if s.write_all(&bytes).await.is_err() || close {
            return;
        }
    }
}

/// Delete the keys under `prefix` on the shared Redis (127.0.0.1:6379), with redis-cli.
pub fn delete_redis_keys(prefix: &str) {
    let out = std::process::Command::new("redis-cli")
        .args(["--scan", "--pattern", &format!("{prefix}*")])
        .output()
        .unwrap();
    for k in String::from_utf8_lossy(&out.stdout).lines() {
        let _ = std::process::Command::new("redis-cli")
            .args(["del", k])
            .output();
    }
}

/// A key prefix of this test's own on the shared Redis: `fgtest:NAME:PID:NANOS:`.
pub fn redis_prefix(name: &str) -> String {
    format!(
        "fgtest:{name}:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// The shared Redis (127.0.0.1:6379) with keys under `prefix`, 2 s per call.
pub async fn redis_store(prefix: &str) -> Arc<floodgate_redis::RedisStore> {
    Arc::new(
        floodgate_redis::RedisStore::connect(
            "redis://127.0.0.1:6379",
            floodgate_redis::StoreConfig {
                prefix: prefix.to_string(),
                timeout: Duration::from_secs(2),
                ..floodgate_redis::StoreConfig::default()
            },
        )
        .await
        .unwrap(),
    )
}
