//! The proxy over real loopback HTTP in front of a real backend.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn fire(c: &TestClient, addr: std::net::SocketAddr, n: usize) -> (Vec<Got>, Duration) {
    let start = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { get(&c, addr, "/", &[]).await })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    (out, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_nodelay_over_loopback_and_metrics() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(
        "[[policy]]\nname = \"default\"\nrate = \"10/s\"\nburst = 20\nnodelay = true\n",
        backend.addr,
    )
    .await;
    let c = client();
    // warm 30 pooled connections to the proxy so the burst is "at once"
    let (out, took) = fire(&c, p.addr, 30).await;
    let passed = out.iter().filter(|g| g.status == 200).count();
    let rejected = out.iter().filter(|g| g.status == 429).count();
    assert_eq!(passed + rejected, 30);
    // 21 exactly when the burst lands within one leak interval (100 ms), as it does on
    // loopback; a slow CI machine may leak one more slot per 100 ms taken
    let slack = (took.as_millis() / 100) as usize;
    assert!(
        (21..=21 + slack).contains(&passed),
        "passed {passed} in {took:?}"
    );
    assert_eq!(backend.arrivals().len(), passed);
    let ok = out.iter().find(|g| g.status == 200).unwrap();
    // the sustained rate, 10 per second; the 21 at once as the bucket's capacity
    assert_eq!(
        ok.headers["ratelimit-policy"],
        r#""default";q=10;w=1;floodgate-capacity=21"#
    );
    assert!(
        ok.headers["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with(r#""default";r="#)
    );
    let denied = out.iter().find(|g| g.status == 429).unwrap();
    assert_eq!(
        denied.headers["ratelimit"].to_str().unwrap(),
        r#""default";r=0;t=1"#
    );
    let ra: u64 = denied.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&ra), "100 ms + up to 1 s of jitter: {ra}");
    // the backend saw X-Forwarded-For with the peer
    assert_eq!(
        backend.arrivals()[0].headers["x-forwarded-for"],
        "127.0.0.1"
    );
    // metrics and health on the admin listener
    let m = get(&c, p.admin, "/metrics", &[]).await;
    let text = String::from_utf8_lossy(&m.body);
    assert!(
        text.contains(&format!(
            r#"floodgate_decisions_total{{policy="default",outcome="rejected"}} {rejected}"#
        )),
        "{text}"
    );
    assert!(
        text.contains(r#"floodgate_store_keys{policy="default"} 1"#),
        "{text}"
    );
    assert!(text.contains("floodgate_proxy_request_duration_seconds_bucket"));
    assert!(text.contains("floodgate_decision_duration_seconds_count"));
    // without Accept: the Prometheus text 0.0.4 (tests/surfaces_agree.rs runs promtool on it)
    assert_eq!(
        m.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(!text.contains("# EOF"), "{text}");
    // a scraper asking for OpenMetrics gets it
    let om = get(
        &c,
        p.admin,
        "/metrics",
        &[(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )],
    )
    .await;
    assert_eq!(
        om.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(String::from_utf8_lossy(&om.body).ends_with("# EOF\n"));
    assert_eq!(get(&c, p.admin, "/healthz", &[]).await.body, "ok\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nodelay_backend_sees_excess_spaced_at_100ms() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(
        "[[policy]]\nname = \"default\"\nrate = \"10/s\"\nburst = 20\n",
        backend.addr,
    )
    .await;
    let c = client();
    let (out, took) = fire(&c, p.addr, 21).await;
    assert!(out.iter().all(|g| g.status == 200));
    let mut at: Vec<Instant> = backend.arrivals().iter().map(|a| a.at).collect();
    at.sort();
    let span = at[20] - at[0];
    // 20 excess requests spaced at 100 ms: 2.0 s from first to last (tolerant bounds)
    assert!(
        span >= Duration::from_millis(1850) && span <= Duration::from_millis(2600),
        "{span:?}"
    );
    let gaps: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    let median = {
        let mut g = gaps.clone();
        g.sort();
        g[g.len() / 2]
    };
    assert!((80..=130).contains(&median), "gaps {gaps:?}");
    assert!(took >= Duration::from_millis(1900));
    let delayed = out
        .iter()
        .filter(|g| g.headers.contains_key("x-ratelimit-delay-ms"))
        .count();
    assert!(delayed >= 19, "{delayed}");
    let m = p.limiter.render_metrics();
    assert!(m.contains("floodgate_delay_seconds_count"), "{m}");
}

#[tokio::test]
async fn spoofed_forwarded_for_from_untrusted_peer_is_ignored() {
    let backend = Backend::start().await;
    let cfg = "[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"1/min\"\n";
    // 127.0.0.1 is not trusted: the header is ignored, both requests are the same client
    let p = RunningProxy::start(
        &format!("[client_ip]\ntrusted_proxies = [\"10.0.0.0/8\"]\n{cfg}"),
        backend.addr,
    )
    .await;
    let c = client();
    let a = get(&c, p.addr, "/", &[("x-forwarded-for", "1.1.1.1")]).await;
    let b = get(&c, p.addr, "/", &[("x-forwarded-for", "2.2.2.2")]).await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 429));
    assert_eq!(
        backend.arrivals()[0].headers["x-forwarded-for"],
        "1.1.1.1, 127.0.0.1"
    );
    // trusted: the header's right-most untrusted hop is the client
    let p = RunningProxy::start(
        &format!("[client_ip]\ntrusted_proxies = [\"127.0.0.0/8\"]\n{cfg}"),
        backend.addr,
    )
    .await;
    let a = get(&c, p.addr, "/", &[("x-forwarded-for", "1.1.1.1")]).await;
    let b = get(&c, p.addr, "/", &[("x-forwarded-for", "9.9.9.9, 2.2.2.2")]).await;
    let d = get(&c, p.addr, "/", &[("x-forwarded-for", "2.2.2.2")]).await;
    assert_eq!(
        (a.status.as_u16(), b.status.as_u16(), d.status.as_u16()),
        (200, 200, 429)
    );
}

#[tokio::test]
async fn dead_and_slow_upstreams_map_to_502_and_504() {
    // a port with nothing listening
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let cfg = "upstream_timeout = \"300ms\"\n[[policy]]\nname = \"p\"\nrate = \"100/s\"\nburst = 100\nnodelay = true\n";
    let p = RunningProxy::start(cfg, dead).await;
    let c = client();
    let g = get(&c, p.addr, "/", &[]).await;
    assert_eq!(g.status, 502);
    assert!(
        g.headers.contains_key("ratelimit"),
        "limited responses carry headers"
    );
    let backend = Backend::start().await;
    let p2 = RunningProxy::start(cfg, backend.addr).await;
    let t = Instant::now();
    let g = get(&c, p2.addr, "/slow", &[]).await;
    assert_eq!(g.status, 504);
    assert!(t.elapsed() < Duration::from_millis(1500));
    let m = p.limiter.render_metrics();
    assert!(
        m.contains(r#"floodgate_upstream_errors_total{kind="connect"} 1"#),
        "{m}"
    );
}

#[tokio::test]
async fn bad_requests_get_4xx_and_the_proxy_survives() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(
        "[[policy]]\nname = \"p\"\nrate = \"100/s\"\nburst = 100\nnodelay = true\n",
        backend.addr,
    )
    .await;
    // giant header: hyper refuses it (431), no panic
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let big = "a".repeat(1_000_000);
    let _ = s
        .write_all(format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n").as_bytes())
        .await;
    let mut buf = vec![0u8; 256];
    let n = s.read(&mut buf).await.unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || head.starts_with("HTTP/1.1 431"), "{head}");
    // malformed request line
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GARBAGE\x00\x01 / HTTP/9.9\r\n\r\n")
        .await
        .unwrap();
    let n = s.read(&mut buf).await.unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || head.starts_with("HTTP/1.1 400"), "{head}");
    // invalid UTF-8 in a header value is forwarded byte for byte
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nhost: x\r\nx-api-key: \xff\xfe\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).await.unwrap();
    assert!(
        resp.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    // still serving
    assert_eq!(get(&client(), p.addr, "/", &[]).await.status, 200);
}

#[tokio::test]
async fn http2_prior_knowledge_and_streamed_bodies() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(
        "[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\nrate = \"100/s\"\ncapacity = 50\n",
        backend.addr,
    )
    .await;
    let g = get(&h2_client(), p.addr, "/", &[]).await;
    assert_eq!(g.status, 200);
    assert_eq!(
        g.headers["ratelimit-policy"],
        r#""p";q=100;w=1;floodgate-capacity=50"#
    );
    // a 4 MB body through the proxy and back
    let body: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
    for c in [client(), h2_client()] {
        let req = Request::post(format!("http://{}/echo", p.addr))
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let g = send(&c, req).await;
        assert_eq!(g.status, 200);
        assert_eq!(g.body.len(), body.len());
        assert!(g.body == body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_drains_held_requests_on_worker_threads() {
    graceful_shutdown_drains_held_requests(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_drains_held_requests_on_the_callers_runtime() {
    graceful_shutdown_drains_held_requests(0).await;
}

async fn graceful_shutdown_drains_held_requests(workers: usize) {
    let backend = Backend::start().await;
    let mut p = RunningProxy::start_with_workers(
        "[[policy]]\nname = \"p\"\nrate = \"2/s\"\nburst = 2\n",
        backend.addr,
        workers,
    )
    .await;
    let c = client();
    // request 1 passes, 2 and 3 are held 500 ms and 1 s
    let (tx, mut rx) = tokio::sync::mpsc::channel(3);
    for _ in 0..3 {
        let (c, tx, addr) = (c.clone(), tx.clone(), p.addr);
        tokio::spawn(async move {
            let _ = tx.send(get(&c, addr, "/", &[]).await.status.as_u16()).await;
        });
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(p.limiter.waiting(), 2);
    p.shutdown();
    let mut st = Vec::new();
    for _ in 0..3 {
        st.push(rx.recv().await.unwrap());
    }
    assert_eq!(st, vec![200, 200, 200]);
    tokio::time::timeout(Duration::from_secs(5), &mut p.task)
        .await
        .expect("proxy stops after draining")
        .unwrap();
    // and it no longer accepts
    assert!(tokio::net::TcpStream::connect(p.addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_charges_nothing_for_denied_requests_under_concurrency() {
    // per key 100/h (never binds here) and global 15/h on "/"; "/only-key" reads the
    // per-key policy alone, so its X-RateLimit-Remaining shows what each key was charged
    let backend = Backend::start().await;
    let prefix = format!("fg-http-race-{}-{}:", std::process::id(), fastrand::u64(..));
    let cfg = format!(
        "store = \"redis://127.0.0.1:6379/\"\n[redis]\nprefix = \"{prefix}\"\ntimeout = \"2s\"\n\
         [headers]\nlegacy = \"delta\"\n\
         [[policy]]\nname = \"per-key\"\nalgorithm = \"fixed-window\"\nrate = \"100/h\"\nkey = \"header:x-api-key\"\n\
         [[policy]]\nname = \"global\"\nalgorithm = \"fixed-window\"\nrate = \"15/h\"\nkey = \"global\"\n\
         [[route]]\nprefix = \"/only-key\"\npolicies = [\"per-key\"]\n\
         [[route]]\nprefix = \"/\"\npolicies = [\"per-key\", \"global\"]\n"
    );
    let p = RunningProxy::start(&cfg, backend.addr).await;
    let c = client();
    let keys = ["k0", "k1", "k2", "k3"];
    let mut tasks = Vec::new();
    for i in 0..40usize {
        let c = c.clone();
        let addr = p.addr;
        tasks.push(tokio::spawn(async move {
            let key = keys[i % 4];
            let g = get(&c, addr, "/", &[("x-api-key", key)]).await;
            (key, g.status.as_u16())
        }));
    }
    let mut admitted = std::collections::HashMap::new();
    for t in tasks {
        let (key, status) = t.await.unwrap();
        assert!(status == 200 || status == 429, "{status}");
        *admitted.entry(key).or_insert(0u64) += u64::from(status == 200);
    }
    assert_eq!(admitted.values().sum::<u64>(), 15, "{admitted:?}");
    for key in keys {
        let g = get(&c, p.addr, "/only-key", &[("x-api-key", key)]).await;
        let left = g.headers["x-ratelimit-remaining"].to_str().unwrap();
        let r: u64 = left.parse().unwrap_or_else(|_| panic!("{left}"));
        // 100 - this look's own unit - what the key was charged
        assert_eq!(
            100 - 1 - r,
            admitted.get(key).copied().unwrap_or(0),
            "{key}: charged for denied requests ({left} left)"
        );
    }
    delete_redis_keys(&prefix);
}

/// Two policies on the Redis store, all or nothing: the fourth request is denied by the
/// global limit and not charged by its per-key one. (The global limit is a sliding log: a
/// fixed window aligned to the clock could roll over between the requests.)
#[tokio::test]
async fn redis_store_all_or_nothing_and_fault_outcome() {
    let backend = Backend::start().await;
    let prefix = format!("fg-http-test-{}-{}:", std::process::id(), fastrand::u64(..));
    let cfg = format!(
        "store = \"redis://127.0.0.1:6379/\"\n[redis]\nprefix = \"{prefix}\"\ntimeout = \"500ms\"\n\
         [headers]\nlegacy = \"delta\"\n\
         [[policy]]\nname = \"per-key\"\nalgorithm = \"gcra\"\nrate = \"100/10s\"\ncapacity = 100\nkey = \"header:x-api-key\"\n\
         [[policy]]\nname = \"global\"\nalgorithm = \"sliding-log\"\nrate = \"3/10s\"\nkey = \"global\"\n\
         [[route]]\nprefix = \"/only-key\"\npolicies = [\"per-key\"]\n\
         [[route]]\nprefix = \"/\"\npolicies = [\"per-key\", \"global\"]\n"
    );
    let p = RunningProxy::start(&cfg, backend.addr).await;
    let c = client();
    let mut st = Vec::new();
    for i in 0..4 {
        let g = get(
            &c,
            p.addr,
            "/",
            &[("x-api-key", if i < 3 { "a" } else { "b" })],
        )
        .await;
        st.push(g.status.as_u16());
        if i == 3 {
            assert!(g.headers.contains_key("retry-after"));
            // b was denied by global and not charged by per-key: a look at per-key alone
            // finds 100 - its own unit left
            let look = get(&c, p.addr, "/only-key", &[("x-api-key", "b")]).await;
            assert_eq!(look.headers["x-ratelimit-remaining"], "99");
        }
    }
    assert_eq!(st, vec![200, 200, 200, 429]);
    // a dead Redis: the configured outcome (fail open by default), counted as a fault
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg_dead = cfg.replace("redis://127.0.0.1:6379/", &format!("redis://{dead}/"));
    // starts anyway (decisions follow the fault policy; connects in the background)
    let limiter = floodgate_proxy::config::Config::parse(&cfg_dead, std::path::Path::new("x.toml"))
        .unwrap()
        .build()
        .await
        .expect("a Redis that does not answer is not a start error");
    assert!(!limiter.store_reachable());
    let m = limiter.render_metrics();
    assert!(m.contains("floodgate_store_up 0"), "{m}");
    delete_redis_keys(&prefix);
}

/// `floodgate_waiting_requests` on the metrics endpoint, as a number.
async fn waiting_gauge(c: &TestClient, admin: std::net::SocketAddr) -> i64 {
    let m = get(c, admin, "/metrics", &[]).await;
    let text = String::from_utf8_lossy(&m.body).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("floodgate_waiting_requests "))
        .unwrap_or_else(|| panic!("no floodgate_waiting_requests in {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Requests waiting in a `max_in_flight` queue are counted in `floodgate_waiting_requests`
/// (with the leaky queues' held requests): one request holds the only place of the policy
/// on the backend's 2 s `/slow`, three more wait in its queue and the gauge on the admin
/// listener's `/metrics` reads 3; as each finishes the next is leased and the gauge falls
/// to 0, every request answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_an_in_flight_place_are_counted_in_the_waiting_gauge() {
    const WAITERS: i64 = 3;
    let backend = Backend::start().await;
    let mut p = RunningProxy::start(
        "[[policy]]\nname = \"one\"\nmax_in_flight = 1\nlease_ttl = \"60s\"\n\
         queue = 10\nqueue_timeout = \"30s\"\nkey = \"global\"\n",
        backend.addr,
    )
    .await;
    let c = client();
    assert_eq!(waiting_gauge(&c, p.admin).await, 0);
    let send = |c: &TestClient| {
        let (c, addr) = (c.clone(), p.addr);
        tokio::spawn(async move { get(&c, addr, "/slow", &[]).await.status.as_u16() })
    };
    let mut sent = vec![send(&c)];
    // the first holds the place once the backend has it
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend.arrivals().is_empty() {
        assert!(Instant::now() < deadline, "the first request never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sent.extend((0..WAITERS).map(|_| send(&c)));
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut seen = 0;
    while seen != WAITERS {
        assert!(
            Instant::now() < deadline,
            "{seen} waiting on the gauge, {WAITERS} in the queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = waiting_gauge(&c, p.admin).await;
    }
    assert_eq!(
        backend.arrivals().len(),
        1,
        "the waiters are not at the backend"
    );
    let mut statuses = Vec::new();
    for h in sent {
        statuses.push(h.await.unwrap());
    }
    assert_eq!(statuses, vec![200; WAITERS as usize + 1]);
    assert_eq!(backend.arrivals().len(), WAITERS as usize + 1);
    assert_eq!(waiting_gauge(&c, p.admin).await, 0);
    p.shutdown();
}
