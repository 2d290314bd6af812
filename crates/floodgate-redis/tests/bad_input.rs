//! Bad input gets a typed error with a clear message, never a panic: invalid limits,
//! parameters outside the scripts' exact range, long keys, a port that speaks another
//! protocol, a Redis that answers an error, a password-protected Redis.

mod common;

use std::time::Duration;

use floodgate_core::algorithms::*;
use floodgate_core::{AnyAlgorithm, Denial, Nanos, Rate};
use floodgate_redis::{Error, RedisLimiter, RedisStore, StoreConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn parameters_outside_the_exact_range_are_refused() {
    let store = common::store(common::SHARED, "fgtest:bad:").await;
    let day = 86_400u64;
    let cases: Vec<(AnyAlgorithm, &str)> = vec![
        // tau = 101 weeks: beyond 2^50 ns
        (
            AnyAlgorithm::Gcra(Gcra::from_cell(100, 1, 7 * day).unwrap()),
            "burst tolerance (emission interval x capacity) is outside what the Redis scripts compute exactly",
        ),
        (
            AnyAlgorithm::FixedWindow(FixedWindow::new(10, Duration::from_secs(30 * day)).unwrap()),
            "window is outside",
        ),
        (
            AnyAlgorithm::SlidingLog(SlidingLog::new(10, Duration::from_nanos(5_000)).unwrap()),
            "5000 ns is shorter than the minimum of 10000 ns",
        ),
        (
            AnyAlgorithm::TokenBucket(
                TokenBucket::new(2_000_000, Rate::per_second(1).unwrap()).unwrap(),
            ),
            "capacity in nano-units",
        ),
        (
            AnyAlgorithm::Leaky(
                LeakyBucket::meter(1000, Rate::new(1, Duration::from_secs(86_400)).unwrap())
                    .unwrap(),
            ),
            "time to refill the whole capacity",
        ),
    ];
    for (alg, needle) in cases {
        let err = RedisLimiter::new(store.clone(), alg.clone()).unwrap_err();
        assert!(matches!(err, Error::Domain { .. }), "{alg:?}: {err:?}");
        assert!(err.to_string().contains(needle), "{alg:?}: {err}");
    }
    // invalid limits are refused by the core before Redis is involved
    assert!(Gcra::from_cell(1, 0, 60).is_err());
    assert!(FixedWindow::new(0, Duration::from_secs(1)).is_err());
    assert!(SlidingLog::new(1, Duration::ZERO).is_err());
    assert!(Rate::new(1, Duration::ZERO).is_err());
}

#[tokio::test]
async fn long_keys_huge_costs_and_bad_times() {
    let prefix = common::unique_prefix("bad");
    let store = common::store_with(
        common::SHARED,
        StoreConfig {
            prefix: prefix.clone(),
            max_key_len: 64,
            timeout: Duration::from_secs(5),
            ..StoreConfig::default()
        },
    )
    .await;
    let l = RedisLimiter::new(
        store.clone(),
        AnyAlgorithm::TokenBucket(TokenBucket::new(5, Rate::per_second(1).unwrap()).unwrap()),
    )
    .unwrap();
    let err = l.check(&[b'x'; 65], 1).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "key of 65 bytes is longer than the maximum of 64 bytes (StoreConfig::max_key_len)"
    );
    assert!(l.check(&[b'x'; 64], 1).await.unwrap().decision.allowed);
    // cost above the burst: a typed denial that says it can never succeed
    for cost in [6, u64::MAX] {
        let d = l.try_check(b"k", cost).await.unwrap();
        assert!(!d.allowed && d.retry_after.is_none());
        assert_eq!(d.denial, Some(Denial::CostExceedsLimit { cost, limit: 5 }));
    }
    let err = l.try_check_at(b"k", Nanos(u64::MAX), 1).await.unwrap_err();
    assert!(matches!(err, Error::TimeOutOfRange { .. }), "{err}");
    assert!(
        RedisStore::connect(
            common::SHARED,
            StoreConfig {
                prefix: "a{b".into(),
                ..Default::default()
            }
        )
        .await
        .unwrap_err()
        .to_string()
        .contains("must not contain '{' or '}'")
    );
    common::assert_ttls_and_clean(&store, &prefix).await;
}

/// A TCP server on loopback that answers anything with an HTTP error.
async fn not_redis() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        for _ in 0..8 {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            });
        }
    });
    (port, task)
}

#[tokio::test]
async fn a_port_that_speaks_something_else() {
    let (port, task) = not_redis().await;
    let t0 = std::time::Instant::now();
    let err = RedisStore::connect(&format!("redis://127.0.0.1:{port}"), StoreConfig::default())
        .await
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(2));
    let msg = err.to_string();
    assert!(
        matches!(err, Error::NotRedis { .. } | Error::Connect { .. }),
        "{err:?}"
    );
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    task.abort();
    // nothing listening at all
    let port = common::free_port();
    let err = RedisStore::connect(&format!("redis://127.0.0.1:{port}"), StoreConfig::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "cannot connect to Redis at redis://127.0.0.1:{port}"
        )),
        "{err}"
    );
    let err = RedisStore::connect("http://nope", StoreConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Url { .. }), "{err:?}");
}

#[tokio::test]
async fn a_redis_that_answers_errors() {
    let server = common::Server::start_with(&["--requirepass", "s3cret"]);
    // no password: refused with Redis's reason
    let err = RedisStore::connect(&server.url(), StoreConfig::default())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("NOAUTH") || msg.contains("Authentication"),
        "{msg}"
    );
    assert!(msg.contains(&format!("127.0.0.1:{}", server.port)), "{msg}");
    // wrong password: the message never shows it
    let err = RedisStore::connect(
        &format!("redis://:wrong@127.0.0.1:{}", server.port),
        StoreConfig::default(),
    )
    .await
    .unwrap_err();
    assert!(!err.to_string().contains("wrong"), "{err}");
    // the right password in the URL
    let store = common::store(&format!("redis://:s3cret@127.0.0.1:{}", server.port), "fg:").await;
    let l = RedisLimiter::new(
        store.clone(),
        AnyAlgorithm::Gcra(Gcra::new(Rate::per_second(1).unwrap(), 2).unwrap()),
    )
    .unwrap();
    assert!(l.try_check(b"u", 1).await.unwrap().allowed);
    // the key holds something else: Redis answers WRONGTYPE, we pass it on typed
    let key = l.redis_key(b"hashed").unwrap();
    let _: i64 = store
        .command(redis::cmd("HSET").arg(&key).arg("f").arg("v"))
        .await
        .unwrap();
    let err = l.try_check(b"hashed", 1).await.unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    // ... and check() applies the fault policy, marked
    let o = l.check(b"hashed", 1).await.unwrap();
    assert!(o.degraded() && o.decision.allowed, "{o:?}");
    // garbage in a key of ours: a script error, typed
    let key = l.redis_key(b"garbage").unwrap();
    let _: () = store
        .command(redis::cmd("SET").arg(&key).arg("not a number"))
        .await
        .unwrap();
    let err = l.try_check(b"garbage", 1).await.unwrap_err();
    assert!(err.to_string().starts_with("Redis error:"), "{err}");
}
