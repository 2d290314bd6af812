//! The fleet-wide in-flight limit, proved with real processes over loopback: three
//! `floodgate proxy` nodes on the shared Redis (127.0.0.1:6379, a key prefix of this test's
//! own, deleted at the end) with `max_in_flight = 4` on one key, in front of a backend
//! that records how many requests it serves at each instant (each held ~50 ms).
//!
//! 1. Sixty concurrent clients spread over the nodes: the backend never serves more than
//!    four at once, and serves four most of the time (the utilisation is printed).
//! 2. One node is killed (SIGKILL) holding four leases: the other nodes admit nothing
//!    until the leases expire (TTL 1 s), then the fleet serves four at once again; the
//!    time to recovery is printed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

mod common;
use common::{Proc, free_port, wait_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");
const N: usize = 4;
const LEASE_TTL: Duration = Duration::from_secs(1);

/// What the backend saw: `(instant, requests being served from then on)` at every change,
/// for the requests to `/` (the load); `/slow` requests are counted apart.
#[derive(Default)]
struct Seen {
    serving: AtomicUsize,
    peak: AtomicUsize,
    slow: AtomicUsize,
    served: AtomicU64,
    steps: Mutex<Vec<(Instant, usize)>>,
}

/// Counts a request as served until dropped (the response sent, or the connection gone).
struct Serving(Arc<Seen>);

impl Serving {
    fn start(seen: &Arc<Seen>) -> Serving {
        let now = seen.serving.fetch_add(1, Ordering::SeqCst) + 1;
        seen.peak.fetch_max(now, Ordering::SeqCst);
        seen.steps.lock().unwrap().push((Instant::now(), now));
        Serving(seen.clone())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let mut steps = self.0.steps.lock().unwrap();
        let now = self.0.serving.fetch_sub(1, Ordering::SeqCst) - 1;
        steps.push((Instant::now(), now));
        self.0.served.fetch_add(1, Ordering::SeqCst);
    }
}

/// A backend holding `/` for 50 ms and `/slow` for 5 s.
async fn backend(seen: Arc<Seen>) -> SocketAddr {
    common::serve(move |req| {
        let seen = seen.clone();
        async move {
            if req.uri().path() == "/slow" {
                seen.slow.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
            } else {
                let _serving = Serving::start(&seen);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            hyper::Response::new(Full::new(Bytes::from_static(b"ok")))
        }
    })
    .await
}

/// Three proxies on the shared Redis; processes, files and keys removed on drop.
struct Fleet {
    nodes: Vec<(SocketAddr, SocketAddr, Option<Proc>)>,
    dir: PathBuf,
    prefix: String,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
        common::delete_redis_keys(&self.prefix);
    }
}

async fn start(upstream: SocketAddr) -> Fleet {
    let tag = format!(
        "fg-inflight-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let prefix = format!("{tag}:");
    let dir = std::env::temp_dir().join(&tag);
    std::fs::create_dir_all(&dir).unwrap();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let (listen, admin) = (free_port(), free_port());
        let cfg = dir.join(format!("node{i}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "listen = \"{listen}\"\nadmin = \"{admin}\"\nupstream = \"http://{upstream}\"\n\
                 store = \"redis://127.0.0.1:6379/\"\n\
                 [redis]\nprefix = \"{prefix}\"\ntimeout = \"2s\"\n\
                 [deny]\nretry_after_jitter = \"0s\"\n\
                 [[policy]]\nname = \"gpu\"\nmax_in_flight = {N}\nlease_ttl = \"{}ms\"\n\
                 queue = 100\nqueue_timeout = \"10s\"\nkey = \"global\"\n",
                LEASE_TTL.as_millis()
            ),
        )
        .unwrap();
        let child = Command::new(BIN)
            .args(["proxy", "--threads", "1", "--config"])
            .arg(&cfg)
            .env("FLOODGATE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        nodes.push((listen, admin, Some(Proc(child))));
    }
    for (listen, admin, _) in &nodes {
        wait_listening(*listen).await;
        wait_listening(*admin).await;
    }
    Fleet { nodes, dir, prefix }
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(64)
        .build_http::<Full<Bytes>>()
}

async fn get(c: &HttpClient, addr: SocketAddr, path: &str) -> (u16, hyper::HeaderMap) {
    let req = hyper::Request::get(format!("http://{addr}{path}"))
        .body(Full::default())
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), c.request(req))
        .await
        .expect("request timed out")
        .unwrap();
    let (parts, body) = r.into_parts();
    let _ = body.collect().await;
    (parts.status.as_u16(), parts.headers)
}

/// Time-weighted mean of the backend's concurrency over `[from, to]`, and the share of
/// that span it served `N` at once.
fn utilisation(steps: &[(Instant, usize)], from: Instant, to: Instant) -> (f64, f64) {
    let (mut area, mut full, mut level, mut at) = (0.0, 0.0, 0usize, from);
    for &(t, n) in steps {
        if t > from && t < to {
            let dt = (t - at).as_secs_f64();
            area += dt * level as f64;
            if level == N {
                full += dt;
            }
            at = t;
        }
        level = n;
    }
    let dt = (to - at).as_secs_f64();
    area += dt * level as f64;
    if level == N {
        full += dt;
    }
    let span = (to - from).as_secs_f64();
    (area / span, full / span)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_hold_four_in_flight_and_a_killed_node_frees_its_leases() {
    let seen = Arc::new(Seen::default());
    let upstream = backend(seen.clone()).await;
    let mut fleet = start(upstream).await;
    let c = client();
    let addrs: Vec<SocketAddr> = fleet.nodes.iter().map(|n| n.0).collect();

    // the headers of one admitted request
    let (st, h) = get(&c, addrs[0], "/").await;
    assert_eq!(st, 200);
    assert_eq!(
        h["ratelimit-policy"],
        "\"gpu\";q=4;qu=\"concurrent-requests\""
    );
    assert_eq!(h["ratelimit"], "\"gpu\";r=3;t=0");

    // 1. sixty clients over three nodes for two seconds
    let load = Duration::from_secs(2);
    let start = Instant::now();
    let ok = Arc::new(AtomicU64::new(0));
    let denied = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..60)
        .map(|i| {
            let (c, addr, ok, denied) = (c.clone(), addrs[i % 3], ok.clone(), denied.clone());
            tokio::spawn(async move {
                while start.elapsed() < load {
                    match get(&c, addr, "/").await.0 {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        _ => denied.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for t in clients {
        t.await.unwrap();
    }
    let end = Instant::now();
    let peak = seen.peak.load(Ordering::SeqCst);
    let (mean, full) = utilisation(&seen.steps.lock().unwrap(), start, start + load);
    println!(
        "load: 60 clients over 3 nodes for {load:?} ({:?} in all): {} served, {} denied; \
         backend peak {peak}, mean in flight {mean:.2} of {N} ({:.0}%), {N} at once {:.0}% of the time",
        end - start,
        ok.load(Ordering::Relaxed),
        denied.load(Ordering::Relaxed),
        100.0 * mean / N as f64,
        100.0 * full,
    );
    assert!(peak <= N, "the backend served {peak} at once");
    assert!(
        mean / N as f64 > 0.5,
        "utilisation {mean:.2} of {N}: the fleet should keep the backend busy"
    );

    // 2. node 0 takes all four places with slow requests, and is killed
    let slow: Vec<_> = (0..N)
        .map(|_| {
            let (c, addr) = (c.clone(), addrs[0]);
            tokio::spawn(async move {
                let req = hyper::Request::get(format!("http://{addr}/slow"))
                    .body(Full::default())
                    .unwrap();
                let _ = c.request(req).await;
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.slow.load(Ordering::SeqCst) < N {
        assert!(
            Instant::now() < deadline,
            "the slow requests did not arrive"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // the leases were taken before the requests reached the backend
    let killed_at = Instant::now();
    drop(fleet.nodes[0].2.take()); // SIGKILL, reaped
    for t in slow {
        t.abort();
    }
    // the other nodes queue their clients until the dead node's leases expire
    let served_before = seen.served.load(Ordering::SeqCst);
    let first_ok: Arc<Mutex<Option<Duration>>> = Arc::default();
    let recovery: Vec<_> = (0..8)
        .map(|i| {
            let (c, addr, first_ok) = (c.clone(), addrs[1 + i % 2], first_ok.clone());
            tokio::spawn(async move {
                for _ in 0..6 {
                    let (st, _) = get(&c, addr, "/").await;
                    if st == 200 {
                        first_ok.lock().unwrap().get_or_insert(killed_at.elapsed());
                    }
                }
            })
        })
        .collect();
    for t in recovery {
        t.await.unwrap();
    }
    let first = first_ok.lock().unwrap().expect("the fleet recovered");
    // from the backend's record: the first instant after the kill at which it served N
    let back_to_n = seen
        .steps
        .lock()
        .unwrap()
        .iter()
        .find(|(t, n)| *t > killed_at && *n == N)
        .map(|(t, _)| *t - killed_at);
    println!(
        "kill: node 0 killed holding {N} leases (TTL {LEASE_TTL:?}): first admitted request \
         answered elsewhere after {first:?}, {N} in flight again after {back_to_n:?}; {} served since",
        seen.served.load(Ordering::SeqCst) - served_before
    );
    assert!(
        first >= LEASE_TTL / 2,
        "nothing is admitted while the dead node's leases live: {first:?}"
    );
    assert!(
        first <= LEASE_TTL + Duration::from_millis(500),
        "the dead node's leases expire within their TTL: {first:?}"
    );
    let back = back_to_n.expect("the fleet served 4 at once again");
    assert!(back <= LEASE_TTL + Duration::from_millis(800), "{back:?}");
    assert!(seen.peak.load(Ordering::SeqCst) <= N);
}
