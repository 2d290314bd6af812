//! Upstream groups over real loopback servers, each answering its own name: round robin
//! spreads evenly, least requests avoids a slow server, the hash keeps a key on one
//! server and moves about 1/N of the keys when a server is added, a killed server is
//! ejected (requests keep succeeding on the others) and taken again once back and past
//! its back-off, a failing probe takes a server out without client traffic, a route
//! sends to the group it names, the per server metrics show on /metrics, and a request
//! is in flight at its server until its response body has ended.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{TestClient, client, get};
use floodgate_proxy::config::Config;
use floodgate_proxy::proxy::{Proxy, ProxySettings};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// A loopback server answering its name: `/slow...` after `delay`, `/healthz` 200 or 500
/// as `healthy` says, anything else at once. Killing it closes its listener and every
/// connection it holds.
struct Named {
    name: &'static str,
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    /// When each client request arrived.
    hit_times: Arc<std::sync::Mutex<Vec<Instant>>>,
    probes: Arc<AtomicUsize>,
    healthy: Arc<AtomicBool>,
    delay: Duration,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Named {
    async fn start(name: &'static str, delay: Duration) -> Named {
        let mut n = Named {
            name,
            addr: "127.0.0.1:0".parse().unwrap(),
            hits: Arc::default(),
            hit_times: Arc::default(),
            probes: Arc::default(),
            healthy: Arc::new(AtomicBool::new(true)),
            delay,
            task: None,
        };
        n.serve(TcpListener::bind("127.0.0.1:0").await.unwrap());
        n
    }

    fn serve(&mut self, listener: TcpListener) {
        self.addr = listener.local_addr().unwrap();
        let times = self.hit_times.clone();
        let (name, hits, probes, healthy, delay) = (
            self.name,
            self.hits.clone(),
            self.probes.clone(),
            self.healthy.clone(),
            self.delay,
        );
        self.task = Some(tokio::spawn(async move {
            // the connections live in the set: aborting this task closes them all
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (hits, probes, healthy) = (hits.clone(), probes.clone(), healthy.clone());
                let times = times.clone();
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (hits, probes, healthy) = (hits.clone(), probes.clone(), healthy.clone());
                    let times = times.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let mut resp = Response::new(Full::new(Bytes::from(name)));
                        if path == "/healthz" {
                            probes.fetch_add(1, Ordering::SeqCst);
                            if !healthy.load(Ordering::SeqCst) {
                                *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                            }
                            return Ok::<_, Infallible>(resp);
                        }
                        times.lock().unwrap().push(Instant::now());
                        hits.fetch_add(1, Ordering::SeqCst);
                        if path.starts_with("/slow") {
                            tokio::time::sleep(delay).await;
                        }
                        Ok(resp)
                    }
                });
                conns.spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        }));
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn kill(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }

    /// Serve again on the same port.
    async fn revive(&mut self) {
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

const POLICY: &str = "[[policy]]\nname = \"p\"\nrate = \"100000/s\"\nburst = 100000\nnodelay = true\nkey = \"header:x-api-key\"\n\n[deny]\nmissing_key = \"allow\"\n";

/// A proxy on two workers from `toml` (its own listen and admin ports).
struct Running {
    addr: SocketAddr,
    admin: SocketAddr,
    _stop: oneshot::Sender<()>,
}

async fn proxy(toml: &str) -> Running {
    let cfg = Config::parse(toml, Path::new("test.toml")).unwrap();
    let limiter = cfg.build().await.unwrap();
    let mut settings = ProxySettings::new(cfg.upstream.clone().unwrap_or_default());
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.admin = Some("127.0.0.1:0".parse().unwrap());
    cfg.apply_to(&mut settings);
    settings.workers = 2;
    let p = Proxy::bind(limiter, &settings).await.unwrap();
    let (addr, admin) = (p.local_addr(), p.admin_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(p.run(async {
        let _ = rx.await;
    }));
    Running {
        addr,
        admin,
        _stop: tx,
    }
}

fn group(name: &str, servers: &[&Named], extra: &str) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("{:?}", s.url())).collect();
    format!(
        "[upstreams.{name}]\nservers = [{}]\n{extra}\n",
        list.join(", ")
    )
}

/// Who answered `path`, `n` times in a row.
async fn answers(
    c: &TestClient,
    addr: SocketAddr,
    path: &str,
    n: usize,
) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..n {
        let got = get(c, addr, path, &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
        *seen
            .entry(String::from_utf8_lossy(&got.body).into_owned())
            .or_default() += 1;
    }
    seen
}

async fn metrics(c: &TestClient, admin: SocketAddr) -> String {
    String::from_utf8(get(c, admin, "/metrics", &[]).await.body.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_spreads_evenly_and_counts_per_server_on_metrics() {
    let servers = [
        Named::start("a", Duration::ZERO).await,
        Named::start("b", Duration::ZERO).await,
        Named::start("c", Duration::ZERO).await,
    ];
    let refs: Vec<&Named> = servers.iter().collect();
    let toml = format!(
        "{POLICY}{}[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\nupstream = \"api\"\n",
        group("api", &refs, "balance = \"round-robin\"")
    );
    let p = proxy(&toml).await;
    let c = client();
    let seen = answers(&c, p.addr, "/x", 300).await;
    assert_eq!(
        seen,
        BTreeMap::from([("a".into(), 100), ("b".into(), 100), ("c".into(), 100)])
    );
    let m = metrics(&c, p.admin).await;
    for s in &servers {
        let line = format!(
            "floodgate_upstream_requests_total{{upstream=\"api\",server=\"{}\",class=\"2xx\"}} 100",
            s.url()
        );
        assert!(m.contains(&line), "{line} not in\n{m}");
        let up = format!(
            "floodgate_upstream_up{{upstream=\"api\",server=\"{}\"}} 1",
            s.url()
        );
        assert!(m.contains(&up), "{up} not in\n{m}");
        let idle = format!(
            "floodgate_upstream_in_flight{{upstream=\"api\",server=\"{}\"}} 0",
            s.url()
        );
        assert!(m.contains(&idle), "{idle} not in\n{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_requests_prefers_the_idle_server_when_one_is_slow() {
    let fast = Named::start("fast", Duration::from_millis(5)).await;
    let slow = Named::start("slow", Duration::from_millis(400)).await;
    let toml = format!(
        "{POLICY}{}[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\nupstream = \"api\"\n",
        group("api", &[&fast, &slow], "balance = \"least-requests\"")
    );
    let p = proxy(&toml).await;
    let c = client();
    // eight clients, each sending twelve requests one after the other
    let mut tasks = JoinSet::new();
    for _ in 0..8 {
        let c = c.clone();
        let addr = p.addr;
        tasks.spawn(async move { answers(&c, addr, "/slow", 12).await });
    }
    let mut total: BTreeMap<String, usize> = BTreeMap::new();
    while let Some(r) = tasks.join_next().await {
        for (k, v) in r.unwrap() {
            *total.entry(k).or_default() += v;
        }
    }
    let (f, s) = (
        total.get("fast").copied().unwrap_or(0),
        total.get("slow").copied().unwrap_or(0),
    );
    assert_eq!(f + s, 96);
    // round robin would give the slow server 48; least requests gives it a request
    // only while it has none in flight (at most 8 at once, each taking 400 ms)
    assert!(s <= 16, "slow {s}, fast {f}");
    assert!(slow.hits() >= 1, "the slow server is still used when idle");
}

/// The server each of `keys` policy keys reaches, asked three times (always the same).
async fn owners(c: &TestClient, addr: SocketAddr, keys: usize) -> Vec<String> {
    let mut out = Vec::new();
    for k in 0..keys {
        let key = format!("user{k}");
        let mut seen = Vec::new();
        for _ in 0..3 {
            let got = get(c, addr, "/x", &[("x-api-key", &key)]).await;
            assert_eq!(got.status, StatusCode::OK);
            seen.push(String::from_utf8_lossy(&got.body).into_owned());
        }
        assert!(seen.iter().all(|s| *s == seen[0]), "{key}: {seen:?}");
        out.push(seen.remove(0));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_keeps_a_key_on_one_server_and_moves_about_one_in_n_when_one_is_added() {
    let s = [
        Named::start("a", Duration::ZERO).await,
        Named::start("b", Duration::ZERO).await,
        Named::start("c", Duration::ZERO).await,
        Named::start("d", Duration::ZERO).await,
    ];
    let route = "[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\nupstream = \"api\"\n";
    let three = proxy(&format!(
        "{POLICY}{}{route}",
        group("api", &[&s[0], &s[1], &s[2]], "balance = \"hash\"")
    ))
    .await;
    let four = proxy(&format!(
        "{POLICY}{}{route}",
        group("api", &[&s[0], &s[1], &s[2], &s[3]], "balance = \"hash\"")
    ))
    .await;
    let c = client();
    let keys = 200;
    let before = owners(&c, three.addr, keys).await;
    let after = owners(&c, four.addr, keys).await;
    for name in ["a", "b", "c"] {
        let n = before.iter().filter(|o| *o == name).count();
        assert!((35..=100).contains(&n), "{name} holds {n} of {keys} keys");
    }
    let moved: Vec<(&String, &String)> =
        before.iter().zip(&after).filter(|(x, y)| x != y).collect();
    // consistent: only keys the new server takes move, about a quarter of them
    assert!(moved.iter().all(|(_, to)| to.as_str() == "d"), "{moved:?}");
    assert!(
        (25..=80).contains(&moved.len()),
        "{} of {keys} keys moved",
        moved.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_ejected_and_taken_again_after_it_comes_back() {
    let a = Named::start("a", Duration::ZERO).await;
    let b = Named::start("b", Duration::ZERO).await;
    let mut c_srv = Named::start("c", Duration::ZERO).await;
    let toml = format!(
        "{POLICY}{}[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\nupstream = \"api\"\n",
        group(
            "api",
            &[&a, &b, &c_srv],
            "max_fails = 2\nfail_timeout = \"1s\""
        )
    );
    let p = proxy(&toml).await;
    let c = client();
    answers(&c, p.addr, "/x", 30).await;
    assert_eq!(c_srv.hits(), 10);
    c_srv.kill().await;
    let killed_at = Instant::now();
    // every request still succeeds: a failed connect tries another server
    let seen = answers(&c, p.addr, "/x", 60).await;
    assert_eq!(seen.get("c"), None);
    assert_eq!(seen.values().sum::<usize>(), 60);
    let m = metrics(&c, p.admin).await;
    let url = c_srv.url();
    for line in [
        format!("floodgate_upstream_up{{upstream=\"api\",server=\"{url}\"}} 0"),
        format!("floodgate_upstream_ejections_total{{upstream=\"api\",server=\"{url}\"}} 1"),
        format!(
            "floodgate_upstream_requests_total{{upstream=\"api\",server=\"{url}\",class=\"error\"}} 2"
        ),
    ] {
        assert!(m.contains(&line), "{line} not in\n{m}");
    }
    let status = get(&c, p.admin, "/admin/upstreams", &[]).await;
    let json: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    assert_eq!(json["api"]["servers"][2]["up"], false, "{json}");
    assert_eq!(json["api"]["servers"][0]["up"], true, "{json}");
    // the killed server: its 10 answers, the 2 connects that failed, its ejection
    let killed = &json["api"]["servers"][2];
    assert_eq!(
        killed["requests"],
        serde_json::json!({"1xx": 0, "2xx": 10, "3xx": 0, "4xx": 0, "5xx": 0, "error": 2}),
        "{json}"
    );
    assert_eq!(killed["requests_total"], 12, "{json}");
    assert_eq!(killed["failures"], 2, "{json}");
    assert_eq!(killed["ejections"], 1, "{json}");
    assert_eq!(killed["in_flight"], 0, "{json}");
    assert_eq!(json["api"]["servers"][0]["ejections"], 0, "{json}");
    // back, and past its back-off: taken again
    c_srv.revive().await;
    let start = Instant::now();
    while c_srv.hits() == 10 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "c is not taken again"
        );
        answers(&c, p.addr, "/x", 3).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ejected after the kill, for fail_timeout at least: no request came before
    let back = c_srv.hit_times.lock().unwrap()[10];
    assert!(
        back >= killed_at + Duration::from_secs(1),
        "taken again {:?} after the kill, before its back-off",
        back - killed_at
    );
    let seen = answers(&c, p.addr, "/x", 30).await;
    assert_eq!(seen.get("c"), Some(&10), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_server_ejected_the_answer_is_502_saying_so() {
    let mut a = Named::start("a", Duration::ZERO).await;
    let mut b = Named::start("b", Duration::ZERO).await;
    let toml = format!(
        "{POLICY}{}[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\nupstream = \"api\"\n",
        group("api", &[&a, &b], "max_fails = 1\nfail_timeout = \"30s\"")
    );
    let p = proxy(&toml).await;
    a.kill().await;
    b.kill().await;
    let c = client();
    // the first finds both dead (a connect each), the second finds none left to try
    let first = get(&c, p.addr, "/x", &[]).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    let second = get(&c, p.addr, "/x", &[]).await;
    assert_eq!(second.status, StatusCode::BAD_GATEWAY);
    let body = String::from_utf8_lossy(&second.body);
    assert!(
        body.contains("upstream \"api\": no server is available (every server is ejected after failures; the first is tried again in"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_failing_its_probe_is_taken_out_without_client_traffic() {
    let a = Named::start("a", Duration::ZERO).await;
    let b = Named::start("b", Duration::ZERO).await;
    b.healthy.store(false, Ordering::SeqCst);
    let toml = format!(
        "{POLICY}{}[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\nupstream = \"api\"\n",
        group(
            "api",
            &[&a, &b],
            "[upstreams.api.probe]\npath = \"/healthz\"\ninterval = \"100ms\"\ntimeout = \"1s\""
        )
    );
    let p = proxy(&toml).await;
    let c = client();
    let url = b.url();
    let down = format!("floodgate_upstream_up{{upstream=\"api\",server=\"{url}\"}} 0");
    let start = Instant::now();
    while !metrics(&c, p.admin).await.contains(&down) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "b never shown down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(b.hits(), 0, "no client request was sent");
    assert!(b.probes.load(Ordering::SeqCst) >= 1);
    let seen = answers(&c, p.addr, "/x", 20).await;
    assert_eq!(seen, BTreeMap::from([("a".into(), 20)]));
    // healthy again: taken after the next probe
    b.healthy.store(true, Ordering::SeqCst);
    let up = format!("floodgate_upstream_up{{upstream=\"api\",server=\"{url}\"}} 1");
    let start = Instant::now();
    while !metrics(&c, p.admin).await.contains(&up) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "b never shown up again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = answers(&c, p.addr, "/x", 20).await;
    assert_eq!(seen, BTreeMap::from([("a".into(), 10), ("b".into(), 10)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_sends_to_the_upstream_it_names_and_others_to_the_default() {
    let api1 = Named::start("api-1", Duration::ZERO).await;
    let api2 = Named::start("api-2", Duration::ZERO).await;
    let web = Named::start("web", Duration::ZERO).await;
    let toml = format!(
        "upstream = {:?}\n{POLICY}{}[[route]]\nprefix = \"/api\"\npolicies = [\"p\"]\nupstream = \"api\"\n\n[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\n",
        web.url(),
        group("api", &[&api1, &api2], "")
    );
    let p = proxy(&toml).await;
    let c = client();
    assert_eq!(
        answers(&c, p.addr, "/api/orders", 10).await,
        BTreeMap::from([("api-1".into(), 5), ("api-2".into(), 5)])
    );
    assert_eq!(
        answers(&c, p.addr, "/index.html", 4).await,
        BTreeMap::from([("web".into(), 4)])
    );
}

/// The `floodgate_upstream_in_flight` line of `server` in group `api`.
fn in_flight_line(metrics: &str, server: SocketAddr) -> Option<&str> {
    let prefix =
        format!("floodgate_upstream_in_flight{{upstream=\"api\",server=\"http://{server}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_in_flight_until_its_response_body_ends() {
    // a server that sends the head and half the body, then the rest when told
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let (rest_tx, rest_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request head came whole");
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf:")
            .await
            .unwrap();
        let _ = rest_rx.await;
        s.write_all(b"done!").await.unwrap();
        // the connection is kept open, as a pooled one would be
        let _ = s.read(&mut buf).await;
    });
    let toml = format!(
        "{POLICY}[upstreams.api]\nservers = [\"http://{server}\"]\n\n[[route]]\nprefix = \"/\"\npolicies = [\"p\"]\nupstream = \"api\"\n"
    );
    let p = proxy(&toml).await;
    let c = client();
    assert_eq!(
        in_flight_line(&metrics(&c, p.admin).await, server),
        Some("0")
    );
    let mut conn = TcpStream::connect(p.addr).await.unwrap();
    conn.write_all(b"GET /stream HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    // the head and the first half: the response has begun, its body not ended
    let mut got = Vec::new();
    read_until(&mut conn, &mut got, b"half:").await;
    assert_eq!(
        in_flight_line(&metrics(&c, p.admin).await, server),
        Some("1")
    );
    rest_tx.send(()).unwrap();
    read_until(&mut conn, &mut got, b"done!").await;
    // the body has ended: no longer in flight (the count is given back as the last
    // frame is read, before it is written to the client)
    assert_eq!(
        in_flight_line(&metrics(&c, p.admin).await, server),
        Some("0")
    );
}

/// Read from `conn` onto `got` until it ends with `suffix` (the connection must not close
/// before).
async fn read_until(conn: &mut TcpStream, got: &mut Vec<u8>, suffix: &[u8]) {
    let mut buf = vec![0u8; 4096];
    while !got.ends_with(suffix) {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "the response so far: {:?}",
            String::from_utf8_lossy(got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn an_unknown_upstream_in_a_route_is_a_config_error_at_its_place() {
    let toml = format!(
        "{POLICY}\n[upstreams.api]\nservers = [\"http://127.0.0.1:9000\"]\n\n[[route]]\nprefix = \"/api\"\npolicies = [\"p\"]\nupstream = \"apj\"\n"
    );
    let e = Config::parse(&toml, Path::new("floodgate.toml"))
        .unwrap_err()
        .to_string();
    let line = toml
        .lines()
        .position(|l| l.starts_with("upstream = "))
        .unwrap()
        + 1;
    assert_eq!(
        e,
        format!("floodgate.toml:{line}:12: route \"/api\": unknown upstream \"apj\"; defined: api")
    );
}
