//! Real `floodgate proxy` processes under `[fleet] strategy = "quota"`, clients of a real
//! `floodgate server` (its Rate Limit Quota Service), in front of one backend, all on
//! loopback: the fleet's total stays within the server's limit while the busiest proxy
//! gets the larger share; with the server stopped the proxies follow their
//! `no_assignment` fallback, and take assignments again when it is back; a reload that keeps
//! the policies and quota settings keeps the assignments held.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

mod common;
use common::{Proc, checked_proxy, free_port, ok_backend, wait_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// 100/s over every client of bucket `policy = api` in domain `fleet`; the server pushes
/// and clients report every 250 ms; an assignment holds 1 s.
const RULES: &str = "quota:\n  domains:\n    - domain: fleet\n      buckets:\n        - match: {policy: api}\n          rate: 100/s\n          report_interval: 250ms\n          assignment_ttl: 1s\n";

/// A `floodgate server` serving quotas on `grpc`.
fn server(dir: &std::path::Path, grpc: SocketAddr) -> Proc {
    let config = dir.join("limits.yaml");
    std::fs::write(&config, RULES).unwrap();
    let mut child = Command::new(BIN)
        .args(["server", "--config"])
        .arg(&config)
        .args([
            "--grpc",
            &grpc.to_string(),
            "--http",
            "off",
            "--resp",
            "off",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // its first line says it listens
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("grpc="), "{line:?}");
    Proc(child)
}

/// The config of proxy `i` of the quota fleet listening on `listen` in front of
/// `upstream`, falling back to `no_assignment`; `extra` goes at the top level.
fn proxy_config(
    listen: SocketAddr,
    upstream: SocketAddr,
    grpc: SocketAddr,
    no_assignment: &str,
    extra: &str,
) -> String {
    format!(
        "listen = \"{listen}\"\nupstream = \"http://{upstream}\"\n{extra}\
         [deny]\nretry_after_jitter = \"0s\"\n\
         [[policy]]\nname = \"api\"\nalgorithm = \"gcra\"\nrate = \"100/s\"\nkey = \"header:x-api-key\"\n\
         [fleet]\nstrategy = \"quota\"\nquota_server = \"http://{grpc}\"\nquota_domain = \"fleet\"\n\
         report_interval = \"250ms\"\nno_assignment = \"{no_assignment}\"\nnodes = 3\n"
    )
}

/// A proxy of the quota fleet in front of `upstream`, falling back to `no_assignment`.
async fn proxy(
    dir: &std::path::Path,
    i: usize,
    upstream: SocketAddr,
    grpc: SocketAddr,
    no_assignment: &str,
) -> (SocketAddr, Proc) {
    let listen = free_port();
    let cfg = dir.join(format!("proxy{i}.toml"));
    std::fs::write(
        &cfg,
        proxy_config(listen, upstream, grpc, no_assignment, ""),
    )
    .unwrap();
    let p = checked_proxy(&cfg);
    wait_listening(listen).await;
    (listen, p)
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>()
}

async fn get(c: &HttpClient, addr: SocketAddr) -> u16 {
    let req = hyper::Request::get(format!("http://{addr}/"))
        .header("x-api-key", "tenant-1")
        .body(Full::default())
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), c.request(req))
        .await
        .expect("request timed out")
        .unwrap();
    let st = r.status().as_u16();
    let _ = r.into_body().collect().await;
    assert!(matches!(st, 200 | 429), "status {st}");
    st
}

/// Requests to `addr`, one every `pace` from `start` until `end`: the instants (since
/// `start`) of the admitted ones.
async fn drive(
    c: HttpClient,
    addr: SocketAddr,
    pace: Duration,
    start: Instant,
    end: Instant,
) -> Vec<f64> {
    let mut tick = tokio::time::interval(pace);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut admitted = Vec::new();
    while Instant::now() < end {
        tick.tick().await;
        if get(&c, addr).await == 200 {
            admitted.push(start.elapsed().as_secs_f64());
        }
    }
    admitted
}

/// Poll `addr` every 50 ms until a request gets `status` (at most `within`): whether it did.
async fn until_status(c: &HttpClient, addr: SocketAddr, status: u16, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if get(c, addr).await == status {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_proxies_share_the_quota_by_demand_within_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = ok_backend().await;
    let grpc = free_port();
    let _server = server(dir.path(), grpc);
    let mut proxies = Vec::new();
    for i in 0..3 {
        proxies.push(proxy(dir.path(), i, upstream, grpc, "deny_all").await);
    }
    let c = client();
    // every proxy has its first assignment (deny all until then)
    for (addr, _) in &proxies {
        assert!(until_status(&c, *addr, 200, Duration::from_secs(10)).await);
    }
    // skewed demand: 150/s on the first proxy, 15/s on each other; 4 s, the first second
    // a warm-up (shares settle on the reported demands), the last 3 s measured
    let start = Instant::now();
    let end = start + Duration::from_secs(4);
    let paces = [150.0, 15.0, 15.0].map(|r: f64| Duration::from_secs_f64(1.0 / r));
    let tasks: Vec<_> = proxies
        .iter()
        .zip(paces)
        .map(|((addr, _), pace)| tokio::spawn(drive(c.clone(), *addr, pace, start, end)))
        .collect();
    let mut per_proxy = Vec::new();
    for t in tasks {
        let admitted = t.await.unwrap();
        per_proxy.push(admitted.iter().filter(|&&at| at >= 1.0).count());
    }
    let span = start.elapsed().as_secs_f64() - 1.0;
    let total: usize = per_proxy.iter().sum();
    eprintln!("admitted {total} over {span:.2} s: {per_proxy:?}");
    // the target: at most the limit over the span, plus one capacity (100: the bursts
    // of the assignments' token buckets sum to it, one token each of rounding) and the
    // shares moving between proxies (one report interval's worth, 25)
    let bound = (100.0 * span + 100.0 + 3.0 + 25.0).floor() as usize;
    assert!(
        total <= bound,
        "admitted {total} over {span:.2} s; the bound is {bound} ({per_proxy:?})"
    );
    // the limit is used, not left idle (demand is 180/s)
    assert!(
        total as f64 >= 0.6 * 100.0 * span,
        "admitted only {total} over {span:.2} s ({per_proxy:?})"
    );
    // the busy proxy gets more than a third (max-min fair: 70 of 100)
    assert!(
        per_proxy[0] * 3 > total,
        "the busy proxy admitted {} of {total} ({per_proxy:?})",
        per_proxy[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_server_the_fallback_applies_and_assignments_resume_after() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = ok_backend().await;
    let grpc = free_port();
    let server_proc = server(dir.path(), grpc);
    let (addr, _proxy) = proxy(dir.path(), 0, upstream, grpc, "deny_all").await;
    let c = client();
    assert!(
        until_status(&c, addr, 200, Duration::from_secs(10)).await,
        "an assignment admits"
    );
    drop(server_proc);
    // the assignment holds 1 s; then deny all (the fallback), for every request
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..10 {
        assert_eq!(get(&c, addr).await, 429, "the deny-all fallback");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // back on the same address: the proxy reconnects (backoff at most 5 s) and admits
    let _server = server(dir.path(), grpc);
    assert!(
        until_status(&c, addr, 200, Duration::from_secs(10)).await,
        "assignments resume"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_quota_store_so_no_request_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = ok_backend().await;
    let grpc = free_port();
    let _server = server(dir.path(), grpc);
    let (listen, admin) = (free_port(), free_port());
    let cfg = dir.path().join("proxy.toml");
    let admin_line = format!("admin = \"{admin}\"\n");
    std::fs::write(
        &cfg,
        proxy_config(listen, upstream, grpc, "deny_all", &admin_line),
    )
    .unwrap();
    let proxy = checked_proxy(&cfg);
    wait_listening(listen).await;
    let c = client();
    assert!(
        until_status(&c, listen, 200, Duration::from_secs(10)).await,
        "an assignment admits"
    );
    // a change that keeps the policies and the quota settings, then SIGHUP
    let changed = proxy_config(listen, upstream, grpc, "deny_all", &admin_line)
        .replace("retry_after_jitter = \"0s\"", "retry_after_jitter = \"1s\"");
    std::fs::write(&cfg, changed).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &proxy.0.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP failed");
    let reloaded = async {
        loop {
            let req = hyper::Request::get(format!("http://127.0.0.1:{}/metrics", admin.port()))
                .body(Full::default())
                .unwrap();
            if let Ok(r) = c.request(req).await {
                let body = r.into_body().collect().await.unwrap().to_bytes();
                let text = String::from_utf8_lossy(&body).into_owned();
                if text.contains("floodgate_config_reloads_total{result=\"ok\"} 1") {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reloaded)
        .await
        .expect("the proxy reloaded");
    // the first requests after the reload are decided by the assignment already held:
    // a new store would decide its first request of the bucket by deny_all
    for i in 0..5 {
        assert_eq!(get(&c, listen).await, 200, "request {i} after the reload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
