//! The token budget, end to end: the real `floodgate proxy` binary in front of a backend
//! that reports each request's cost after running it, in a response header or in a
//! trailer after a streamed (chunked) body. A budget of 1,000 units per 2 s (sliding log)
//! with requests admitted at an estimate of 1 and settled at 100 to 300: in every rolling
//! 2 s window the settled cost the backend served stays within 1,000 plus one request's
//! overrun, and a request estimated at 400 that used 50 is refunded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Body, Frame};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

mod common;
use common::{Proc, free_port, wait_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");
const BUDGET: u64 = 1_000;
const WINDOW: Duration = Duration::from_secs(2);
const MAX_OVERRUN: u64 = 300 - 1;

/// A streamed body: two chunks, then the trailer `x-cost-trailer: N`.
struct Streamed(Vec<Frame<Bytes>>);

impl Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(if self.0.is_empty() {
            None
        } else {
            Some(Ok(self.0.remove(0)))
        })
    }
}

type Served = Arc<Mutex<Vec<(Instant, u64)>>>;

/// The backend: serves `x-use: N` units and reports N, in the header `x-cost` on `/h`,
/// in the trailer `x-cost-trailer` after a chunked body on `/t`. Records what it served.
async fn backend() -> (SocketAddr, Served) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let served: Served = Arc::default();
    let s = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = l.accept().await else {
                continue;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let used: u64 = req.headers()["x-use"].to_str().unwrap().parse().unwrap();
                        s.lock().unwrap().push((Instant::now(), used));
                        let resp = if req.uri().path() == "/t" {
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("x-cost-trailer", used.into());
                            let mut r = hyper::Response::new(Streamed(vec![
                                Frame::data(Bytes::from_static(b"generated ")),
                                Frame::data(Bytes::from_static(b"tokens\n")),
                                Frame::trailers(trailers),
                            ]));
                            // announced, as HTTP/1.1 has a server do (hyper sends no other)
                            r.headers_mut()
                                .insert("trailer", "x-cost-trailer".parse().unwrap());
                            r
                        } else {
                            let mut r = hyper::Response::new(Streamed(vec![Frame::data(
                                Bytes::from_static(b"done\n"),
                            )]));
                            r.headers_mut().insert("x-cost", used.into());
                            r
                        };
                        async move { Ok::<_, Infallible>(resp) }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    (addr, served)
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// One request through the proxy; its status and `X-RateLimit-Remaining`.
async fn send(c: &HttpClient, url: String, used: u64, estimate: Option<u64>) -> (u16, u64) {
    let mut req = hyper::Request::get(url).header("x-use", used);
    if let Some(e) = estimate {
        req = req.header("x-cost-estimate", e);
    }
    let resp = c.request(req.body(Empty::new()).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let remaining = resp
        .headers()
        .get("x-ratelimit-remaining")
        .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
    resp.into_body().collect().await.unwrap();
    (status, remaining)
}

/// The largest cost served in any rolling window of `WINDOW`.
fn max_in_window(served: &[(Instant, u64)]) -> u64 {
    let (mut best, mut sum, mut lo) = (0, 0, 0);
    for &(t, c) in served {
        sum += c;
        while served[lo].0 + WINDOW <= t {
            sum -= served[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_budget_holds_with_costs_from_headers_and_trailers() {
    let (upstream, served) = backend().await;
    let listen = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "{listen}"
upstream = "http://{upstream}"

[headers]
legacy = "delta"

[[policy]]
name = "tokens"
algorithm = "sliding-log"
rate = "{BUDGET}/2s"
key = "global"

[[route]]
prefix = "/"
policies = ["tokens"]
estimate = 1
estimate_header = "x-cost-estimate"
cost_header = "x-cost"
cost_trailer = "x-cost-trailer"
"#
        ),
    )
    .unwrap();
    let child = Command::new(BIN)
        .arg("proxy")
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let _child = Proc(child);
    wait_listening(listen).await;
    let c: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    // the refund path: estimated at 400, used 50: 350 come back at once
    let (status, remaining) = send(&c, format!("http://{listen}/h"), 50, Some(400)).await;
    assert_eq!((status, remaining), (200, 950));

    for path in ["h", "t"] {
        tokio::time::sleep(WINDOW).await; // a fresh window for each way of reporting
        let from = served.lock().unwrap().len();
        let (mut admitted, mut denied) = (0u32, 0u32);
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < Duration::from_millis(4_500) {
            n += 1;
            let used = 100 + (n * 37) % 201; // 100 to 300
            let (status, _) = send(&c, format!("http://{listen}/{path}"), used, None).await;
            if status == 200 {
                admitted += 1;
                if path == "t" {
                    // the trailer is settled once the body has ended, in the proxy
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            } else {
                assert_eq!(status, 429);
                denied += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let served = served.lock().unwrap()[from..].to_vec();
        let max = max_in_window(&served);
        let total: u64 = served.iter().map(|s| s.1).sum();
        println!(
            "{path}: {admitted} admitted, {denied} denied, {total} units served in 4.5 s, at most {max} in any 2 s"
        );
        assert!(
            admitted > 5 && denied > 0,
            "{path}: {admitted} admitted, {denied} denied"
        );
        assert!(
            max <= BUDGET + MAX_OVERRUN,
            "{path}: {max} units in a 2 s window, above {BUDGET} + {MAX_OVERRUN}"
        );
        // the budget was used, not refused: at least one window's worth was served
        assert!(total >= BUDGET, "{path}: only {total} units served");
    }
}
