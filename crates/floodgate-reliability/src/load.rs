//! The load side: HTTP/1.1 clients over loopback that time every request, and a rude
//! client that sends half a request body and hangs up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;

/// A pooled HTTP/1.1 client.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A new pooled client.
pub fn client() -> HttpClient {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(c)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh request id (unique in this process), sent as `x-req-id`.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// One request and what came back.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Index of the target (proxy) it went to.
    pub target: usize,
    /// Its `x-client` key.
    pub key: Arc<str>,
    /// Its `x-req-id`.
    pub id: u64,
    /// When it was sent.
    pub sent: Instant,
    /// Time to the complete response (head and body); the hang bound when none came.
    pub took: Duration,
    /// The status; `None` when no response came (connection error or the hang bound).
    pub status: Option<u16>,
    /// Whether the response carried a `RateLimit` header (a decision from the store).
    pub ratelimit: bool,
    /// What the binding policy had left right now (`X-RateLimit-Remaining`), when present.
    pub remaining: Option<u64>,
    /// Whether the request was held (`X-RateLimit-Delay-Ms`).
    pub delayed: bool,
    /// Why there was no response.
    pub error: Option<String>,
}

/// A request's description: path and key (`x-client`), and whether to close the
/// connection after it.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Request path.
    pub path: String,
    /// `x-client` value; `None` sends a fresh key per request (`<prefix>-<id>`).
    pub key: Option<String>,
    /// Key prefix for fresh keys.
    pub fresh_prefix: String,
    /// Send `Connection: close` (a new TCP connection per request).
    pub close: bool,
}

impl Shape {
    /// `GET path` with a fixed key, on a kept-alive connection.
    pub fn keyed(path: &str, key: &str) -> Shape {
        Shape {
            path: path.into(),
            key: Some(key.into()),
            fresh_prefix: String::new(),
            close: false,
        }
    }
}

/// Send one `GET` and time it; `hang` bounds the wait (a request past it is a hang).
pub async fn send(
    c: &HttpClient,
    target: usize,
    addr: SocketAddr,
    shape: &Shape,
    hang: Duration,
) -> Sample {
    let id = next_id();
    let key: Arc<str> = match &shape.key {
        Some(k) => k.as_str().into(),
        None => format!("{}-{id}", shape.fresh_prefix).into(),
    };
    let mut b = http::Request::get(format!("http://{addr}{}", shape.path))
        .header("x-client", &*key)
        .header("x-req-id", id.to_string());
    if shape.close {
        b = b.header("connection", "close");
    }
    let req = b.body(Full::new(Bytes::new())).expect("a valid request");
    let sent = Instant::now();
    let fut = async {
        let resp = c.request(req).await.map_err(|e| format!("{e:?}"))?;
        let status = resp.status().as_u16();
        let rl = resp
            .headers()
            .get("ratelimit")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // the RateLimit field says what the key can take at the sustained rate; what is
        // left right now is the legacy field's
        let remaining = resp
            .headers()
            .get("x-ratelimit-remaining")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let delayed = resp.headers().contains_key("x-ratelimit-delay-ms");
        resp.into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?;
        Ok::<_, String>((status, rl, remaining, delayed))
    };
    let (status, rl, remaining, delayed, error) = match tokio::time::timeout(hang, fut).await {
        Ok(Ok((s, rl, left, d))) => (Some(s), rl, left, d, None),
        Ok(Err(e)) => (None, None, None, false, Some(e)),
        Err(_) => (
            None,
            None,
            None,
            false,
            Some(format!("no response within {hang:?}")),
        ),
    };
    Sample {
        target,
        key,
        id,
        sent,
        took: sent.elapsed(),
        status,
        ratelimit: rl.is_some(),
        remaining,
        delayed,
        error,
    }
}

/// A worker: `shape` to `addr` every `gap` until `stop`.
#[derive(Debug, Clone)]
pub struct Worker {
    /// Target index (for the samples).
    pub target: usize,
    /// Where to send.
    pub addr: SocketAddr,
    /// What to send.
    pub shape: Shape,
    /// Pause between the end of one request and the next.
    pub gap: Duration,
}

/// Running workers; [`stop`](Load::stop) ends them and returns every sample.
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Sample>>>,
}

impl Load {
    /// Start `workers`, each on its own pooled client; `hang` bounds every request.
    pub fn start(workers: Vec<Worker>, hang: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = workers
            .into_iter()
            .map(|w| {
                let stop = stop.clone();
                tokio::spawn(async move {
                    let c = client();
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        out.push(send(&c, w.target, w.addr, &w.shape, hang).await);
                        tokio::time::sleep(w.gap).await;
                    }
                    out
                })
            })
            .collect();
        Load { stop, tasks }
    }

    /// Stop every worker (each finishes its request in flight) and collect the samples,
    /// sorted by send time. A worker that panicked counts in the second value.
    pub async fn stop(self) -> (Vec<Sample>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        let mut panics = 0;
        for t in self.tasks {
            match t.await {
                Ok(v) => all.extend(v),
                Err(_) => panics += 1,
            }
        }
        all.sort_by_key(|s| s.sent);
        (all, panics)
    }
}

/// `GET path` on `addr`; the body when the status is 200 (2 s bound).
pub async fn get_text(addr: SocketAddr, path: &str) -> Option<String> {
    let c = client();
    let req = http::Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .ok()?;
    let fut = async {
        let r = c.request(req).await.ok()?;
        if r.status() != 200 {
            return None;
        }
        let b = r.into_body().collect().await.ok()?.to_bytes();
        Some(String::from_utf8_lossy(&b).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(2), fut)
        .await
        .ok()
        .flatten()
}

/// A rude client: `POST path` announcing `announced` body bytes, sends `sent` of them
/// (`chunked` uses one chunk of `announced` bytes instead of Content-Length), then closes
/// the connection without reading the response. Returns whether the bytes were written.
pub async fn half_body(
    addr: SocketAddr,
    path: &str,
    key: &str,
    announced: usize,
    sent: usize,
    chunked: bool,
) -> bool {
    let Ok(Ok(mut s)) =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await
    else {
        return false;
    };
    let framing = if chunked {
        format!("transfer-encoding: chunked\r\n\r\n{announced:x}\r\n")
    } else {
        format!("content-length: {announced}\r\n\r\n")
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nx-client: {key}\r\nx-req-id: {}\r\n{framing}",
        next_id()
    );
    let body = vec![b'x'; sent];
    let ok = tokio::time::timeout(Duration::from_secs(2), async {
        s.write_all(head.as_bytes()).await?;
        s.write_all(&body).await?;
        s.flush().await
    })
    .await
    .is_ok_and(|r| r.is_ok());
    drop(s);
    ok
}
