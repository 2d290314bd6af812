//! Three real `floodgate proxy` processes on loopback ports in front of one backend, one
//! test per fleet strategy. The shared and hybrid fleets use the Redis on 127.0.0.1:6379
//! under a unique key prefix (deleted at the end).
//!
//! Bounds: a GCRA with capacity `C` and rate `r` admits at most `C + r x t` units in any
//! span `t` (from full). The span is measured by the client around all its requests,
//! so it contains every decision.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

mod common;
use common::{Proc, checked_proxy, free_port, wait_listening};

#[derive(Debug, Clone)]
struct Arrival {
    key: String,
    forwarded_by: Option<String>,
}

type Log = Arc<Mutex<Vec<Arrival>>>;

/// A backend that records every request it receives.
async fn backend() -> (SocketAddr, Log) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let log: Log = Arc::default();
    let lg = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let lg = lg.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let h = |n: &str| {
                            req.headers()
                                .get(n)
                                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                        };
                        lg.lock().unwrap().push(Arrival {
                            key: h("x-api-key").unwrap_or_default(),
                            forwarded_by: h("floodgate-forwarded-by"),
                        });
                        async move {
                            // echo the body: it must stream through a forwarding node
                            let body = req.into_body().collect().await.map(|b| b.to_bytes());
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(
                                body.unwrap_or_else(|_| Bytes::from_static(b"body failed")),
                            )))
                        }
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, log)
}

struct Node {
    listen: SocketAddr,
    admin: SocketAddr,
    proc: Proc,
}

/// Three proxies, cleaned up (processes, config files, Redis keys) on drop.
struct Fleet {
    nodes: Vec<Node>,
    dir: PathBuf,
    prefix: String,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
        let keys = Command::new("redis-cli")
            .args([
                "-p",
                "6379",
                "--scan",
                "--pattern",
                &format!("{}*", self.prefix),
            ])
            .output();
        if let Ok(keys) = keys {
            for k in String::from_utf8_lossy(&keys.stdout).lines() {
                let _ = Command::new("redis-cli")
                    .args(["-p", "6379", "del", k])
                    .output();
            }
        }
    }
}

fn unique(tag: &str) -> String {
    format!(
        "fg-fleet-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Start three proxies with `[fleet] strategy = ...`, `policy` (TOML `[[policy]]` tables)
/// and `extra` fleet settings. Shared and hybrid fleets get the Redis store.
async fn start(strategy: &str, upstream: SocketAddr, policy: &str, extra: &str) -> Fleet {
    let tag = unique(strategy);
    let prefix = format!("{tag}:");
    let dir = std::env::temp_dir().join(&tag);
    std::fs::create_dir_all(&dir).unwrap();
    let listens: Vec<SocketAddr> = (0..3).map(|_| free_port()).collect();
    let nodes = listens
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let store = if matches!(strategy, "shared" | "hybrid") {
        format!(
            "store = \"redis://127.0.0.1:6379/\"\n[redis]\nprefix = \"{prefix}\"\ntimeout = \"2s\"\n"
        )
    } else {
        String::new()
    };
    let mut out = Vec::new();
    for (i, listen) in listens.iter().enumerate() {
        let admin = free_port();
        let cfg = dir.join(format!("node{i}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "listen = \"{listen}\"\nadmin = \"{admin}\"\nupstream = \"http://{upstream}\"\n\
                 upstream_timeout = \"20s\"\n{store}\
                 [deny]\nstore_error = \"deny\"\nretry_after_jitter = \"0s\"\n\
                 {policy}\n\
                 [fleet]\nstrategy = \"{strategy}\"\nnodes = [{nodes}]\nself = \"{listen}\"\n{extra}"
            ),
        )
        .unwrap();
        out.push(Node {
            listen: *listen,
            admin,
            proc: checked_proxy(&cfg),
        });
    }
    for n in &out {
        wait_listening(n.listen).await;
        wait_listening(n.admin).await;
    }
    Fleet {
        nodes: out,
        dir,
        prefix,
    }
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>()
}

async fn get(c: &HttpClient, addr: SocketAddr, key: &str) -> u16 {
    let req = hyper::Request::get(format!("http://{addr}/"))
        .header("x-api-key", key)
        .body(Full::default())
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), c.request(req))
        .await
        .expect("request timed out")
        .unwrap();
    let st = r.status().as_u16();
    let _ = r.into_body().collect().await;
    assert!(matches!(st, 200 | 429), "status {st}");
    st
}

/// One metric sample from a node's /metrics (0 when absent).
async fn metric(c: &HttpClient, admin: SocketAddr, line_start: &str) -> u64 {
    let r = c
        .get(format!("http://{admin}/metrics").parse().unwrap())
        .await
        .unwrap();
    let text = r.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&text)
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Ticks every `pace` (a late tick is not made up for: the load only gets lighter).
fn pacer(pace: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(pace);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

/// `rounds` requests for `key`, round-robin over the nodes, one every `pace`;
/// `(admitted per node, span in seconds)`.
async fn round_robin(
    c: &HttpClient,
    f: &Fleet,
    key: &str,
    rounds: usize,
    pace: Duration,
) -> ([usize; 3], f64) {
    let start = Instant::now();
    let mut ok = [0usize; 3];
    let mut tick = pacer(pace);
    for i in 0..rounds {
        tick.tick().await;
        ok[i % 3] += usize::from(get(c, f.nodes[i % 3].listen, key).await == 200);
    }
    (ok, start.elapsed().as_secs_f64())
}

/// GCRA bound: capacity + rate x span, one unit of rounding.
fn bound(capacity: u64, per_sec: f64, span: f64) -> usize {
    (capacity as f64 + per_sec * span).floor() as usize + 1
}

const SHARED_POLICY: &str = "[[policy]]\nname = \"api\"\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 9\nkey = \"header:x-api-key\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_three_proxies_admit_the_global_limit_once() {
    let (upstream, log) = backend().await;
    let f = start("shared", upstream, SHARED_POLICY, "").await;
    let c = client();
    // capacity 10, 5/s: a naive fleet would admit 30 at once
    let (ok, span) = round_robin(&c, &f, "k-shared", 90, Duration::from_millis(15)).await;
    let total: usize = ok.iter().sum();
    let arrived = log.lock().unwrap().len();
    eprintln!(
        "shared: admitted {ok:?} = {total} in {span:.3}s (bound {})",
        bound(10, 5.0, span)
    );
    assert_eq!(arrived, total);
    assert!(
        ok.iter().all(|&n| n > 0),
        "every proxy served traffic: {ok:?}"
    );
    assert!(total >= 10, "the burst is admitted: {total}");
    assert!(
        total <= bound(10, 5.0, span),
        "{total} > limit in {span:.3}s"
    );
    assert!(total < 30, "not N times the limit: {total}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_three_proxies_stay_within_the_limit_plus_nodes_times_lease() {
    let (upstream, log) = backend().await;
    // capacity 60, 20/s; leases of at most 5 units: bound + 3 x 5
    let policy = "[[policy]]\nname = \"api\"\nalgorithm = \"gcra\"\nrate = \"20/s\"\nburst = 59\nkey = \"header:x-api-key\"\n";
    let f = start(
        "hybrid",
        upstream,
        policy,
        "lease = 5\nlease_ttl = \"2s\"\n",
    )
    .await;
    let c = client();
    let (ok, span) = round_robin(&c, &f, "k-hybrid", 240, Duration::from_millis(6)).await;
    let total: usize = ok.iter().sum();
    let arrived = log.lock().unwrap().len();
    let limit = bound(60, 20.0, span);
    eprintln!("hybrid: admitted {ok:?} = {total} in {span:.3}s (bound {limit} + 15)");
    assert_eq!(arrived, total);
    assert!(
        ok.iter().all(|&n| n > 0),
        "every proxy served traffic: {ok:?}"
    );
    assert!(total >= 40, "most of the burst is admitted: {total}");
    assert!(total <= limit + 15, "{total} > {limit} + 15 in {span:.3}s");
    assert!(total < 180, "not N times the limit: {total}");
    // leases saved round trips while the key was far from its limit
    let (mut leased, mut trips) = (0, 0);
    for n in &f.nodes {
        leased += metric(
            &c,
            n.admin,
            "floodgate_store_events_total{event=\"lease_admit\"}",
        )
        .await;
        trips += metric(
            &c,
            n.admin,
            "floodgate_store_events_total{event=\"round_trip\"}",
        )
        .await;
    }
    eprintln!("hybrid: {leased} checks admitted from leases, {trips} round trips for 240 requests");
    assert!(leased > 0, "no lease was spent");
    assert!(trips < 240, "{trips} round trips");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_non_owners_forward_to_the_owner_which_counts_exactly() {
    let (upstream, log) = backend().await;
    let f = start("sticky", upstream, SHARED_POLICY, "").await;
    let names: Vec<String> = f.nodes.iter().map(|n| n.listen.to_string()).collect();
    let ring = floodgate_dist::Rendezvous::new(names.clone());
    let c = client();
    // two keys owned by each node
    let mut keys: Vec<String> = Vec::new();
    for owner in &names {
        keys.extend(
            (0..)
                .map(|i| format!("k-sticky-{i}"))
                .filter(|k| ring.owner(format!("api\x1f{k}").as_bytes()).unwrap() == owner)
                .take(2),
        );
    }
    let start_t = Instant::now();
    let mut ok = vec![0usize; keys.len()];
    let mut tick = pacer(Duration::from_millis(5));
    for round in 0..30 {
        for (k, key) in keys.iter().enumerate() {
            tick.tick().await;
            ok[k] += usize::from(get(&c, f.nodes[(round + k) % 3].listen, key).await == 200);
        }
    }
    let span = start_t.elapsed().as_secs_f64();
    let arrivals = log.lock().unwrap().clone();
    let mut forwarded_by_node = [0u64; 3];
    for (k, key) in keys.iter().enumerate() {
        let owner = ring.owner(format!("api\x1f{key}").as_bytes()).unwrap();
        let mine: Vec<&Arrival> = arrivals.iter().filter(|a| &a.key == key).collect();
        assert_eq!(mine.len(), ok[k], "{key}");
        // exact on the owner: the limit once, not once per node
        assert!(
            ok[k] >= 10 && ok[k] <= bound(10, 5.0, span),
            "{key}: {} in {span:.3}s",
            ok[k]
        );
        for a in &mine {
            if let Some(by) = &a.forwarded_by {
                assert_ne!(by, owner, "{key}: the owner never forwards its own keys");
                forwarded_by_node[names.iter().position(|n| n == by).unwrap()] += 1;
            }
        }
        // two thirds of the admitted requests entered at a non-owner
        let forwarded = mine.iter().filter(|a| a.forwarded_by.is_some()).count();
        assert!(forwarded > 0, "{key}: nothing forwarded");
    }
    eprintln!(
        "sticky: admitted {ok:?} in {span:.3}s; backend saw forwarded-by {forwarded_by_node:?}"
    );
    // per-node metrics agree: every node forwarded and received
    let mut fwd = 0;
    let mut rcv = 0;
    for n in &f.nodes {
        let a = metric(
            &c,
            n.admin,
            "floodgate_fleet_requests_total{event=\"forwarded\"}",
        )
        .await;
        let b = metric(
            &c,
            n.admin,
            "floodgate_fleet_requests_total{event=\"received\"}",
        )
        .await;
        assert!(
            a > 0 && b > 0,
            "node {}: forwarded {a}, received {b}",
            n.listen
        );
        fwd += a;
        rcv += b;
    }
    assert_eq!(fwd, rcv, "every forwarded request was received once");
    assert_eq!(
        fwd,
        30 * keys.len() as u64 * 2 / 3,
        "exactly the non-owner entries"
    );

    // a body streams through the forwarding node to the owner and back
    let fresh = (0..)
        .map(|i| format!("k-body-{i}"))
        .find(|k| ring.owner(format!("api\x1f{k}").as_bytes()).unwrap() == names[1])
        .unwrap();
    let payload = Bytes::from(vec![b'x'; 100_000]);
    let req = hyper::Request::post(format!("http://{}/upload", f.nodes[0].listen))
        .header("x-api-key", &fresh)
        .body(Full::new(payload.clone()))
        .unwrap();
    let r = c.request(req).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().contains_key("ratelimit"),
        "the owner's headers come back"
    );
    assert_eq!(r.into_body().collect().await.unwrap().to_bytes(), payload);
    let last = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.forwarded_by.as_deref(), Some(names[0].as_str()));

    // the owner of a key goes away: its requests are decided where they arrive (fallback)
    let mut f = f;
    let dead = 2;
    let victim = (0..)
        .map(|i| format!("k-orphan-{i}"))
        .find(|k| ring.owner(format!("api\x1f{k}").as_bytes()).unwrap() == names[dead])
        .unwrap();
    let gone = f.nodes.remove(dead);
    let dead_addr = gone.listen;
    drop(gone.proc);
    // unreachable, and the peers' connections to it seen closed (a request already sent
    // to an owner that dies gets a 502, as with any proxy)
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(dead_addr).await.is_ok() {
        assert!(Instant::now() < deadline, "node did not stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let entry = f.nodes[0].listen;
    let mut admitted = 0;
    for _ in 0..12 {
        admitted += usize::from(get(&c, entry, &victim).await == 200);
    }
    let fallback = metric(
        &c,
        f.nodes[0].admin,
        "floodgate_fleet_requests_total{event=\"fallback\"}",
    )
    .await;
    eprintln!("sticky, owner down: {admitted} of 12 admitted locally, fallback {fallback}");
    assert!(fallback >= 1, "fallback counted: {fallback}");
    assert!(
        (10..=12).contains(&admitted),
        "a fresh burst on the entry node: {admitted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_each_proxy_admits_its_share() {
    let (upstream, log) = backend().await;
    // capacity 30, 3/s over 3 nodes: each node enforces capacity 10, 1/s
    let policy = "[[policy]]\nname = \"api\"\nalgorithm = \"gcra\"\nrate = \"3/s\"\nburst = 29\nkey = \"header:x-api-key\"\n";
    let f = start("local", upstream, policy, "").await;
    let c = client();
    let (ok, span) = round_robin(&c, &f, "k-spread", 90, Duration::from_millis(15)).await;
    let total: usize = ok.iter().sum();
    eprintln!("local, spread: admitted {ok:?} = {total} in {span:.3}s");
    for n in ok {
        assert!(
            n >= 10 && n <= bound(10, 1.0, span),
            "a node admitted {n}: {ok:?}"
        );
    }
    // the price: a client stuck on one node gets a third of its limit
    let start_t = Instant::now();
    let mut pinned = 0;
    for _ in 0..30 {
        pinned += usize::from(get(&c, f.nodes[0].listen, "k-pinned").await == 200);
    }
    let span = start_t.elapsed().as_secs_f64();
    eprintln!("local, pinned: admitted {pinned} of 30 in {span:.3}s");
    assert!(pinned >= 10 && pinned <= bound(10, 1.0, span), "{pinned}");
    assert_eq!(log.lock().unwrap().len(), total + pinned);
}
