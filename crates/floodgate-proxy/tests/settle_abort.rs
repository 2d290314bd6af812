//! A settled cost cannot be dodged by hanging up: through a real proxy over loopback, in
//! front of a real upstream that streams a body the test paces chunk by chunk and ends
//! it with the trailer `x-cost: 1000`, a client that closes its connection at any point
//! (before the head, after the head, after each of the 10 chunks, before the trailer)
//! gets its key charged exactly the reported 1000, as a client that reads to the end
//! does. An upstream that never ends is read for the route's drain timeout only:
//! then its connection is dropped, the route's abort cost charged, and no task is left.
//! A `cost_header` route is charged the header's cost when the client leaves after the
//! head. The key's remaining budget is read through the admin API's key lookup, which
//! consumes nothing; `floodgate_settle_abandoned_total` counts each abandoned exchange.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::channel::{Channel, Sender};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The budget of every key: 10,000 units, refilled by 10,000 per 1,000 h (under one unit
/// over a test's minutes), so the remaining budget shows exactly what was charged.
const BUDGET: u64 = 10_000;
/// The cost the upstream reports.
const COST: u64 = 1000;

type Body = Channel<Bytes, std::io::Error>;

/// The upstream: every request's body is a channel whose sending end goes to the test.
/// `/trailer` ends with the trailer `x-cost` (announced with `Trailer: x-cost`); on
/// `/header` the head carries `x-cost: 1000`. A path ending in `/late` sends its head
/// only once the test adds a permit to `heads`. `closed` counts the connections ended.
struct Upstream {
    addr: SocketAddr,
    bodies: mpsc::UnboundedReceiver<Sender<Bytes, std::io::Error>>,
    heads: Arc<tokio::sync::Semaphore>,
    closed: Arc<AtomicUsize>,
}

async fn upstream() -> Upstream {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, bodies) = mpsc::unbounded_channel();
    let closed = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(tokio::sync::Semaphore::new(0));
    let (ended, permits) = (closed.clone(), heads.clone());
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let tx = tx.clone();
            let (ended, permits) = (ended.clone(), permits.clone());
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (tx, permits) = (tx.clone(), permits.clone());
                async move {
                    let (sender, body): (_, Body) = Channel::new(1);
                    tx.send(sender).unwrap();
                    if req.uri().path().ends_with("/late") {
                        permits.acquire().await.unwrap().forget();
                    }
                    let mut resp = Response::new(body);
                    if req.uri().path().starts_with("/header") {
                        resp.headers_mut().insert("x-cost", HeaderValue::from(COST));
                    } else {
                        resp.headers_mut()
                            .insert("trailer", HeaderValue::from_static("x-cost"));
                    }
                    Ok::<_, Infallible>(resp)
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
                ended.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    Upstream {
        addr,
        bodies,
        heads,
        closed,
    }
}

impl Upstream {
    /// The sending end of the next request's body.
    async fn next_body(&mut self) -> Sender<Bytes, std::io::Error> {
        tokio::time::timeout(Duration::from_secs(5), self.bodies.recv())
            .await
            .expect("the request reached the upstream")
            .unwrap()
    }
}

fn config(extra: &str) -> String {
    format!(
        "admin_keys = \"plain\"\n\
         [[policy]]\nname = \"api\"\nalgorithm = \"token-bucket\"\nrate = \"{BUDGET}/1000h\"\ncapacity = {BUDGET}\n\
         key = \"header:x-api-key\"\n\
         [[route]]\nprefix = \"/trailer\"\npolicies = [\"api\"]\nestimate = 1\n\
         cost_trailer = \"x-cost\"\n{extra}\n\
         [[route]]\nprefix = \"/header\"\npolicies = [\"api\"]\nestimate = 1\n\
         cost_header = \"x-cost\"\n"
    )
}

/// The key's remaining budget, as the admin API's lookup shows it (consuming nothing).
async fn remaining(p: &RunningProxy, key: &str) -> u64 {
    let g = get(
        &client(),
        p.admin,
        &format!("/admin/api/key?policy=api&key={key}"),
        &[],
    )
    .await;
    assert_eq!(g.status, 200, "{}", String::from_utf8_lossy(&g.body));
    let v: serde_json::Value = serde_json::from_slice(&g.body).unwrap();
    v["remaining"].as_u64().unwrap()
}

/// `floodgate_settle_abandoned_total{outcome}` as the admin listener's `/metrics` shows it.
async fn abandoned(p: &RunningProxy, outcome: &str) -> u64 {
    let g = get(&client(), p.admin, "/metrics", &[]).await;
    let text = String::from_utf8_lossy(&g.body).to_string();
    let line = format!("floodgate_settle_abandoned_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("no {line:?} in /metrics"))
        .parse()
        .unwrap()
}

/// Wait (up to 5 s) until `key` has `want` left, then check it stays so a while.
async fn settles_at(p: &RunningProxy, key: &str, want: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = remaining(p, key).await;
    while got != want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        got = remaining(p, key).await;
    }
    assert_eq!(got, want, "{what}: the key has {got} left, not {want}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(remaining(p, key).await, want, "{what}: charged again");
}

/// A client on its own connection: sends `GET path` with `x-api-key: key`.
async fn open(p: &RunningProxy, path: &str, key: &str) -> TcpStream {
    send_request(
        p,
        &format!("GET {path} HTTP/1.1\r\nhost: api\r\nx-api-key: {key}\r\n\r\n"),
    )
    .await
}

/// A client on its own connection: sends `request`.
async fn send_request(p: &RunningProxy, request: &str) -> TcpStream {
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    s
}

/// Read from `s` into `got` until `got` holds `want`.
async fn read_until(s: &mut TcpStream, got: &mut Vec<u8>, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !got.windows(want.len()).any(|w| w == want) {
        let mut buf = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no {:?} in {:?}", want, String::from_utf8_lossy(got)))
            .unwrap();
        assert!(n > 0, "closed before {want:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Close `s` with a reset, so the proxy sees the client gone at once.
fn hang_up(s: TcpStream) {
    s.set_zero_linger().unwrap();
    drop(s);
}

fn chunk(i: usize) -> Bytes {
    Bytes::from(format!("chunk {i} of 10;"))
}

fn cost_trailer() -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("x-cost", HeaderValue::from(COST));
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_at_any_chunk_is_charged_the_trailers_cost() {
    let mut up = upstream().await;
    let p = RunningProxy::start(&config(""), up.addr).await;
    // read: 0 after the head, 1..=9 after that many chunks, 10 before the trailer,
    // 11 to the end (the client that does not hang up)
    for read in 0..=11 {
        let key = format!("k{read}");
        let mut s = open(&p, "/trailer", &key).await;
        let mut tx = up.next_body().await;
        let mut got = Vec::new();
        read_until(&mut s, &mut got, b"\r\n\r\n").await;
        for i in 1..=read.min(10) {
            tx.send_data(chunk(i)).await.unwrap();
            read_until(&mut s, &mut got, &chunk(i)).await;
        }
        if read <= 10 {
            hang_up(s);
            // the proxy notices before the rest comes
            tokio::time::sleep(Duration::from_millis(100)).await;
            // the rest of the body, and the trailer: sent while someone reads them
            for i in read + 1..=10 {
                let _ = tx.send_data(chunk(i)).await;
            }
            let _ = tx.send_trailers(cost_trailer()).await;
        } else {
            tx.send_trailers(cost_trailer()).await.unwrap();
            read_until(&mut s, &mut got, b"0\r\n").await;
        }
        drop(tx);
        settles_at(&p, &key, BUDGET - COST, &format!("after {read} chunks")).await;
    }
    // reads 0 to 9 were abandoned mid-body (the proxy finds the client gone as it writes
    // the next chunk); after 10 chunks the trailer came before any write failed, and
    // settled as for a client still there
    assert_eq!(
        (
            abandoned(&p, "settled").await,
            abandoned(&p, "abort_cost").await
        ),
        (10, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_ends_is_read_for_the_drain_timeout_then_dropped() {
    let mut up = upstream().await;
    // on the test's own runtime, so that its tasks are counted here
    let p = RunningProxy::start_with_workers(
        &config("abort_cost = 500\nabort_drain_timeout = \"300ms\"\n"),
        up.addr,
        0,
    )
    .await;
    // the runtime's tasks with no exchange under way (the pool's reaper is started by
    // the first exchange: one ahead, read to its end)
    let mut s = open(&p, "/trailer", "warm").await;
    let mut tx = up.next_body().await;
    tx.send_trailers(cost_trailer()).await.unwrap();
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"0\r\n").await;
    drop((s, tx));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks = metrics.num_alive_tasks();
    let closed = up.closed.load(Ordering::SeqCst);

    let mut s = open(&p, "/trailer", "endless").await;
    let mut tx = up.next_body().await;
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"\r\n\r\n").await;
    tx.send_data(chunk(1)).await.unwrap();
    read_until(&mut s, &mut got, &chunk(1)).await;
    let left = Instant::now();
    hang_up(s);
    // the upstream streams on until its connection is dropped
    let mut sent = 1;
    while tx.send_data(chunk(sent + 1)).await.is_ok() {
        sent += 1;
        assert!(
            left.elapsed() < Duration::from_secs(5),
            "still read after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let dropped = left.elapsed();
    assert!(
        dropped >= Duration::from_millis(250) && dropped < Duration::from_secs(2),
        "the upstream was read for {dropped:?} after the client left ({sent} chunks), not the 300 ms drain timeout"
    );
    settles_at(&p, "endless", BUDGET - 500, "an endless body").await;
    assert_eq!(
        (
            abandoned(&p, "settled").await,
            abandoned(&p, "abort_cost").await
        ),
        (0, 1)
    );
    // the upstream connection ended, and the runtime holds no task more than before
    let deadline = Instant::now() + Duration::from_secs(5);
    while (up.closed.load(Ordering::SeqCst) == closed || metrics.num_alive_tasks() > tasks)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        up.closed.load(Ordering::SeqCst) > closed,
        "the upstream connection is still open"
    );
    assert!(
        metrics.num_alive_tasks() <= tasks,
        "{} tasks alive, {tasks} before the exchange",
        metrics.num_alive_tasks()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_upstream_after_the_client_left_is_charged_the_abort_cost() {
    let mut up = upstream().await;
    let p = RunningProxy::start(&config("abort_cost = 700\n"), up.addr).await;
    let mut s = open(&p, "/trailer", "failed").await;
    let mut tx = up.next_body().await;
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"\r\n\r\n").await;
    tx.send_data(chunk(1)).await.unwrap();
    read_until(&mut s, &mut got, &chunk(1)).await;
    hang_up(s);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // the proxy finds the client gone as it writes this chunk, and reads on
    tx.send_data(chunk(2)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // then the upstream gives up mid-body: its connection closes before the last chunk
    tx.abort(std::io::Error::other("the upstream gave up"));
    settles_at(&p, "failed", BUDGET - 700, "a failed body").await;
    assert_eq!(
        (
            abandoned(&p, "settled").await,
            abandoned(&p, "abort_cost").await
        ),
        (0, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_after_a_cost_header_is_charged_the_headers_cost() {
    let mut up = upstream().await;
    let p = RunningProxy::start(&config(""), up.addr).await;
    for read in 0..=2 {
        let key = format!("h{read}");
        let mut s = open(&p, "/header", &key).await;
        let mut tx = up.next_body().await;
        let mut got = Vec::new();
        read_until(&mut s, &mut got, b"\r\n\r\n").await;
        for i in 1..=read {
            tx.send_data(chunk(i)).await.unwrap();
            read_until(&mut s, &mut got, &chunk(i)).await;
        }
        hang_up(s);
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(tx);
        settles_at(&p, &key, BUDGET - COST, &format!("after {read} chunks")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_before_the_head_is_charged_the_cost_all_the_same() {
    let mut up = upstream().await;
    let p = RunningProxy::start(&config(""), up.addr).await;
    // a GET (the proxy's own HTTP/1 path) and a POST with a body (hyper's)
    for (method, path, key) in [
        ("GET", "/trailer/late", "get-trailer"),
        ("GET", "/header/late", "get-header"),
        ("POST", "/trailer/late", "post-trailer"),
        ("POST", "/header/late", "post-header"),
    ] {
        let body = if method == "POST" { "{}" } else { "" };
        let s = send_request(
            &p,
            &format!(
                "{method} {path} HTTP/1.1\r\nhost: api\r\nx-api-key: {key}\r\n\
                 content-length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
        .await;
        // the upstream has the request, and holds its head back
        let mut tx = up.next_body().await;
        hang_up(s);
        tokio::time::sleep(Duration::from_millis(100)).await;
        up.heads.add_permits(1);
        for i in 1..=10 {
            let _ = tx.send_data(chunk(i)).await;
        }
        let _ = tx.send_trailers(cost_trailer()).await;
        drop(tx);
        settles_at(&p, key, BUDGET - COST, path).await;
    }
    // the GET on the header route was settled before its head was written; the others
    // were abandoned (the trailer routes read on, the POST on the header route carried)
    assert_eq!(
        (
            abandoned(&p, "settled").await,
            abandoned(&p, "abort_cost").await
        ),
        (3, 0)
    );
}
