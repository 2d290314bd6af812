//! The admin API's key lookup on the Redis store, through a real proxy over loopback, on
//! the Redis at 127.0.0.1:6379 under a key prefix of this test's own (deleted at the end):
//! the lookup shows the remaining the last response's `X-RateLimit-Remaining` showed, twice
//! (it consumes nothing and leaves the key's value and expiry as they were), and a key
//! never seen shows the full limit and creates no Redis key.

mod common;

use common::*;

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
        let toml = format!(
            "admin_keys = \"plain\"\n\
             [[policy]]\nname = \"api\"\nalgorithm = \"{alg}\"\nrate = \"5/3600s\"\n\
             key = \"header:x-api-key\"\n\
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
    use floodgate_http::admin::AdminRequest;
    use floodgate_http::{DecisionStore, HybridStore, KeySource, Policy, RateLimiter, Route};
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
