//! An adaptive policy in front of a real backend over loopback: a tokio HTTP server with
//! 4 workers (a request waits for a worker, then works 5 ms: latency grows with the
//! requests in flight), the layer in front, clients speaking HTTP/1.1 over TCP. Under
//! overload the limit falls and critical requests keep succeeding while sheddable ones
//! get 503; once the overload stops, the limit recovers. Directions only, no timing
//! thresholds; every loop is bounded in count and time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use floodgate_http::adaptive::{AdaptivePolicy, AdaptiveSpec, AlgorithmKind, ClassMatch};
use floodgate_http::{Policy, RateLimiter};
use http::HeaderName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

const WORKERS: usize = 4;
const WORK: Duration = Duration::from_millis(5);

/// One request over a new connection: its status (0 when the exchange failed).
async fn get_status(addr: SocketAddr, critical: bool) -> u16 {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let priority = if critical { "critical" } else { "batch" };
        let head = format!(
            "GET / HTTP/1.1\r\nHost: backend\r\nx-priority: {priority}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let line = String::from_utf8_lossy(&buf);
        line.split(' ').nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// `clients` loops, each of `count` requests of one class: (ok, shed) per class, the
/// critical ones first.
async fn load(
    addr: SocketAddr,
    clients: usize,
    count: usize,
    sheddable: bool,
) -> [(usize, usize); 2] {
    let counts: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    for i in 0..clients {
        let critical = !sheddable || i % 2 == 0;
        let counts = counts.clone();
        tasks.push(tokio::spawn(async move {
            let base = if critical { 0 } else { 2 };
            for _ in 0..count {
                match get_status(addr, critical).await {
                    200 => counts[base].fetch_add(1, Ordering::Relaxed),
                    503 => {
                        // a refused client comes back soon: the pressure stays
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        counts[base + 1].fetch_add(1, Ordering::Relaxed)
                    }
                    other => panic!("status {other}"),
                };
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let c = |i: usize| counts[i].load(Ordering::Relaxed);
    [(c(0), c(1)), (c(2), c(3))]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_sheds_sheddable_first_and_the_limit_recovers() {
    tokio::time::timeout(Duration::from_secs(120), run())
        .await
        .expect("bounded in time");
}

async fn run() {
    let priority = HeaderName::from_static("x-priority");
    let spec = AdaptiveSpec::new(AlgorithmKind::Gradient2, 2, 40, 100).unwrap();
    let policy = AdaptivePolicy::new(spec)
        .class("critical", 0.6, [ClassMatch::header(priority, "critical")])
        .unwrap()
        .class("sheddable", 0.0, [])
        .unwrap();
    let limiter = RateLimiter::builder()
        .policy(Policy::adaptive("backend", policy))
        .build()
        .unwrap();
    let adaptive = limiter.policies()[0].adaptive.clone().unwrap();
    let workers = Arc::new(Semaphore::new(WORKERS));
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let workers = workers.clone();
                async move {
                    let _worker = workers.acquire().await.unwrap();
                    tokio::time::sleep(WORK).await;
                    "ok"
                }
            }),
        )
        .layer(limiter.layer());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    // overload: 40 clients (half critical) against 4 workers; watch the limit
    let start = adaptive.limit();
    let low = Arc::new(AtomicUsize::new(start));
    let watch = {
        let (low, adaptive) = (low.clone(), adaptive.clone());
        tokio::spawn(async move {
            for _ in 0..20_000 {
                low.fetch_min(adaptive.limit(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let [(crit_ok, crit_shed), (shed_ok, shed_shed)] = load(addr, 40, 40, true).await;
    watch.abort();
    let low = low.load(Ordering::Relaxed).min(adaptive.limit());
    let after_overload = adaptive.limit();
    eprintln!(
        "limit {start} -> low {low}, end of overload {after_overload}; critical ok {crit_ok} shed {crit_shed}; sheddable ok {shed_ok} shed {shed_shed}"
    );
    assert!(low < start, "the limit fell: {start} -> {low}");
    assert!(crit_ok > 0 && shed_shed > 0);
    // critical keeps succeeding where sheddable is refused: a larger share of it passes
    let ratio = |ok: usize, shed: usize| ok as f64 / (ok + shed).max(1) as f64;
    assert!(
        ratio(crit_ok, crit_shed) > ratio(shed_ok, shed_shed),
        "critical {crit_ok}/{crit_shed}, sheddable {shed_ok}/{shed_shed}"
    );
    let text = limiter.render_metrics();
    assert!(text.contains("floodgate_adaptive_shed_total{policy=\"backend\",class=\"sheddable\"}"));
    // the overload stops: as many clients as workers, the limit in use; it recovers
    let mut recovered = after_overload;
    for _ in 0..20 {
        load(addr, WORKERS, 10, false).await;
        recovered = adaptive.limit();
        if recovered > after_overload.max(low) {
            break;
        }
    }
    eprintln!("recovered to {recovered}");
    assert!(recovered > low, "no recovery: low {low}, now {recovered}");
    server.abort();
}
