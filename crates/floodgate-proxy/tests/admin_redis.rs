//! The admin API's key lookup on the Redis store, through a real proxy over loopback, on
//! the Redis at 127.0.0.1:6379 under a key prefix of this test's own (deleted at the end):
//! the lookup shows the remaining the last response's `X-RateLimit-Remaining` showed, twice
//! (it consumes nothing and leaves the key's value and expiry as they were), and a key
//! never seen shows the full limit and creates no Redis key.

mod common;

use common::*;
use floodgate_reliability::procs::RedisServer;

/// The keys under `prefix` on the shared Redis, sorted.
fn keys(prefix: &str) -> Vec<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["--scan", "--pattern", &format!("{prefix}*")])
        .output()
        .expect("redis-cli");
    let mut ks: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    ks.sort();
    ks
}

/// `redis-cli COMMAND key` (GET, PTTL).
fn cli(command: &str, key: &str) -> String {
    let out = std::process::Command::new("redis-cli")
        .args([command, key])
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn lookup(c: &TestClient, p: &RunningProxy, key: &str) -> serde_json::Value {
    let g = get(
        c,
        p.admin,
        &format!("/admin/api/key?policy=api&key={key}"),
        &[],
    )
    .await;
    assert_eq!(g.status, 200, "{}", String::from_utf8_lossy(&g.body));
    serde_json::from_slice(&g.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_lookup_reads_redis_without_consuming_or_creating() {
    let base = redis_prefix("admin-peek");
    let backend = Backend::start().await;
    let c = client();
    for alg in ["fixed-window", "gcra", "token-bucket", "sliding-log"] {
        let prefix = format!("{base}{alg}:");
        // the windowed algorithms have no capacity; the buckets take the count at once
        let capacity = if alg == "gcra" || alg == "token-bucket" {
            "capacity = 5\n"
        } else {
            ""
        };
        let toml = format!(
            "admin_keys = \"plain\"\n\
             [[policy]]\nname = \"api\"\nalgorithm = \"{alg}\"\nrate = \"5/3600s\"\n\
             {capacity}key = \"header:x-api-key\"\n\
             [store]\ntype = \"redis\"\n\
             [store.redis]\nurl = \"redis://127.0.0.1:6379/\"\nprefix = \"{prefix}\"\n\
             timeout = \"2s\"\n\
             [headers]\nlegacy = \"delta\"\n"
        );
        let mut p = RunningProxy::start(&toml, backend.addr).await;
        let mut last = None;
        for _ in 0..3 {
            let g = get(&c, p.addr, "/", &[("x-api-key", "alice")]).await;
            assert_eq!(g.status, 200, "{alg}: {:?}", g.body);
            last = Some(
                g.headers["x-ratelimit-remaining"]
                    .to_str()
                    .unwrap()
                    .to_string(),
            );
        }
        let header: u64 = last.unwrap().parse().unwrap();
        let held = keys(&prefix);
        assert_eq!(held.len(), 1, "{alg}: {held:?}");
        let (value, ttl) = (cli("GET", &held[0]), cli("PTTL", &held[0]));
        for _ in 0..2 {
            let v = lookup(&c, &p, "alice").await;
            assert_eq!(v["remaining"], header, "{alg}: {v}");
            assert_eq!(v["limit"], 5, "{alg}: {v}");
            assert_eq!(v["allowed"], header > 0, "{alg}: {v}");
        }
        // nothing written: the same value, and an expiry not pushed out
        assert_eq!(cli("GET", &held[0]), value, "{alg}");
        let ttl_after: i64 = cli("PTTL", &held[0]).parse().unwrap();
        assert!(
            ttl_after <= ttl.parse::<i64>().unwrap(),
            "{alg}: {ttl} -> {ttl_after}"
        );
        // a key never seen: the full limit, and no key made for it
        for _ in 0..2 {
            let v = lookup(&c, &p, "nobody").await;
            assert_eq!(
                (v["remaining"].clone(), v["allowed"].clone()),
                (5.into(), true.into()),
                "{alg}: {v}"
            );
        }
        assert_eq!(keys(&prefix), held, "{alg}");
        // the next request is told one less than the lookups showed: none was consumed
        let g = get(&c, p.addr, "/", &[("x-api-key", "alice")]).await;
        let next: u64 = g.headers["x-ratelimit-remaining"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(next + 1, header, "{alg}");
        p.shutdown();
        delete_redis_keys(&prefix);
        assert!(keys(&prefix).is_empty());
    }
}

/// The hybrid store's lookup reads the shared counter: what the requests (each a round
/// trip or a lease taken from it) left there, consuming nothing and creating no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_lookup_on_the_hybrid_store_reads_the_shared_counter() {
    use std::sync::Arc;
    use std::time::Duration;

    use floodgate_core::{Kind, Spec};
    use floodgate_engine::HybridStore;
    use floodgate_engine::admin::AdminRequest;
    use floodgate_http::{DecisionStore, KeySource, Policy, RateLimiter, Route};
    use tower::{Layer, Service, ServiceExt};

    let prefix = redis_prefix("admin-peek-hybrid");
    let redis = redis_store(&prefix).await;
    let builder = || {
        RateLimiter::builder()
            .policy(
                Policy::new(
                    "api",
                    Spec::new(Kind::FixedWindow, "5/3600s".parse().unwrap()),
                )
                .key(KeySource::header(http::HeaderName::from_static(
                    "x-api-key",
                ))),
            )
            .route(Route::prefix("/").policy("api", 1))
    };
    let infos = builder().policy_infos().unwrap();
    // one node, leases of one unit: every request is taken from the shared counter
    let hybrid: Arc<dyn DecisionStore> = Arc::new(
        HybridStore::with_lease(redis, &infos, 1, 1, Duration::from_secs(30), 1000).unwrap(),
    );
    let limiter = builder().store(hybrid, "hybrid").build().unwrap();
    let backend = tower::service_fn(
        |_req: http::Request<http_body_util::Full<bytes::Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"ok"),
            )))
        },
    );
    let mut svc = limiter.layer().layer(backend);
    for _ in 0..3 {
        let req = http::Request::get("/")
            .header("x-api-key", "alice")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let r = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let held = keys(&prefix);
    let ask = |key: &'static str| {
        let limiter = limiter.clone();
        async move {
            let q = format!("policy=api&key={key}");
            let reply = limiter
                .admin(&AdminRequest {
                    method: "GET",
                    path: "/admin/api/key",
                    query: Some(&q),
                })
                .await
                .expect("an admin path");
            assert_eq!(reply.status, 200, "{}", reply.body);
            serde_json::from_str::<serde_json::Value>(&reply.body).unwrap()
        }
    };
    for _ in 0..2 {
        let v = ask("alice").await;
        // 3 taken from the shared counter (and at most one more leased), none by the
        // lookups
        let left = v["remaining"].as_u64().unwrap();
        assert!((1..=2).contains(&left), "{v}");
        assert_eq!(v["limit"], 5, "{v}");
        assert_eq!(ask("nobody").await["remaining"], 5);
    }
    let first = ask("alice").await["remaining"].clone();
    assert_eq!(ask("alice").await["remaining"], first);
    assert_eq!(keys(&prefix), held);
    delete_redis_keys(&prefix);
}

/// A lookup Redis cannot answer is the store's fault, not the client's: `503` with the
/// `{"error": ...}` body naming the fault, on a redis-server of the test's own that is
/// stopped (the call times out), continued (answers again) and killed (connection
/// refused, then the breaker open); bad input stays a `400` meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_lookup_is_a_503_naming_the_fault_when_redis_fails() {
    use std::time::{Duration, Instant};

    let mut redis = RedisServer::start().expect("redis-server on a free port");
    let backend = Backend::start().await;
    let c = client();
    let toml = format!(
        "[[policy]]\nname = \"api\"\nalgorithm = \"fixed-window\"\nrate = \"5/3600s\"\n\
         key = \"header:x-api-key\"\n\
         [store]\ntype = \"redis\"\n\
         [store.redis]\nurl = \"{}\"\nprefix = \"fg:\"\n\
         timeout = \"200ms\"\nbreaker_open_for = \"300ms\"\n",
        redis.url()
    );
    let mut p = RunningProxy::start(&toml, backend.addr).await;
    let ask = |path: &'static str| {
        let c = c.clone();
        let admin = p.admin;
        async move {
            let g = get(&c, admin, path, &[]).await;
            let body = String::from_utf8_lossy(&g.body).to_string();
            let v: serde_json::Value = serde_json::from_str(&body).expect(&body);
            (g.status.as_u16(), v)
        }
    };
    let lookup = "/admin/api/key?policy=api&key=alice";
    assert_eq!(
        get(&c, p.addr, "/", &[("x-api-key", "alice")]).await.status,
        200
    );
    let (s, v) = ask(lookup).await;
    assert_eq!((s, v["remaining"].clone()), (200, 4.into()), "{v}");

    // stopped: the call times out, then the breaker is open; both are 503s
    assert!(redis.pause(), "SIGSTOP to redis-server");
    let t = Instant::now();
    let (s, v) = ask(lookup).await;
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(s, 503, "{v}");
    let e = v["error"].as_str().expect("an error message");
    assert!(e.contains("redis") && e.contains("timed out"), "{e}");
    let (s, v) = ask(lookup).await;
    assert_eq!(s, 503, "{v}");
    assert!(v["error"].as_str().unwrap().contains("redis"), "{v}");
    // bad input is still the client's: 400, with the store down
    for bad in [
        "/admin/api/key?policy=nope&key=alice",
        "/admin/api/key?policy=api&key=%zz",
    ] {
        let (s, v) = ask(bad).await;
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(v["error"].is_string(), "{bad}: {v}");
    }

    // continued: answered again once the breaker lets a probe through
    assert!(redis.resume(), "SIGCONT to redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = ask(lookup).await;
        if s == 200 {
            assert_eq!(v["remaining"], 4, "{v}");
            break;
        }
        assert_eq!(s, 503, "{v}");
        assert!(
            Instant::now() < deadline,
            "Redis is back but lookups fail: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // killed: connection refused (or the breaker open after it), a 503 each time
    redis.kill();
    for _ in 0..3 {
        let (s, v) = ask(lookup).await;
        assert_eq!(s, 503, "{v}");
        let e = v["error"].as_str().expect("an error message");
        assert!(e.starts_with("decision store redis"), "{e}");
    }
    p.shutdown();
}
