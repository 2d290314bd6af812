//! In-flight leases in Redis against the core: the same random acquire / renew / release
//! sequences give the same decisions (caller time, on the shared Redis under a prefix of
//! this test's own, and through the Redis module in a server of the test's own); every
//! key has a TTL; Redis TIME mode; bad input.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::inflight::{KeyedInFlight, LeaseId, LeaseTtl};
use floodgate_core::{Clock, Nanos};
use std::sync::Arc;

use floodgate_redis::{RedisInFlight, RedisStore, StoreConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn config(prefix: &str) -> StoreConfig {
    StoreConfig {
        prefix: prefix.to_string(),
        timeout: Duration::from_secs(5),
        ..StoreConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_match_the_core_exactly() {
    let prefix = common::unique_prefix("inflight-diff");
    let store = common::store_with(
        common::SHARED,
        StoreConfig {
            // simulated time runs apart from real time: keep keys for the whole test
            expiry_padding: Duration::from_secs(600),
            ..config(&prefix)
        },
    )
    .await;
    leases_match_the_core(&[store], &prefix, 2000).await;
}

/// The same sequences through the Redis module (`FG.ACQUIRE`, `FG.RENEW`,
/// `FG.RELEASE`): no script runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_modules_leases_match_the_core_exactly() {
    let prefix = common::unique_prefix("inflight-mod");
    let (server, store) = common::module_store(&prefix).await;
    leases_match_the_core(&[store], &prefix, 2000).await;
    assert!(common::calls(&server, "fg.acquire") > 3000);
    assert!(common::calls(&server, "fg.release") > 1000);
    assert!(common::calls(&server, "fg.renew") > 500);
    assert_eq!(common::calls(&server, "evalsha"), 0);
}

/// Each call sent at random to a store with the module or one without, on the same
/// keys: a lease taken by either is renewed and released by either, as the core says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_shared_by_the_module_and_the_scripts() {
    let prefix = common::unique_prefix("inflight-shared");
    let (server, module) = common::module_store(&prefix).await;
    let scripts = common::store_with(
        &server.url(),
        common::sim_config(&prefix, floodgate_redis::ModuleUse::Never),
    )
    .await;
    leases_match_the_core(&[module, scripts], &prefix, 2000).await;
    assert!(common::calls(&server, "fg.acquire") > 500);
    assert!(common::calls(&server, "evalsha") > 500);
}

async fn leases_match_the_core(stores: &[Arc<RedisStore>], prefix: &str, ops: u32) {
    let mut tasks = Vec::new();
    for (seed, n) in [(1u64, 1u64), (2, 2), (3, 4), (4, 7)] {
        let sides: Vec<RedisInFlight> = stores
            .iter()
            .map(|s| RedisInFlight::new(s.clone(), n).unwrap())
            .collect();
        tasks.push(tokio::spawn(async move {
            let core: KeyedInFlight<u8> = KeyedInFlight::new(n, 100).unwrap();
            let mut rng = StdRng::seed_from_u64(0x1F11 + seed);
            // the present, in whole microseconds (Redis keeps microseconds): leases expire
            // in real time too, so the simulated clock starts at the wall clock
            let mut now_us = floodgate_core::WallClock.now().0 / 1_000;
            // core id -> redis id, with the key, of every lease ever granted
            let mut leases: Vec<(u8, LeaseId, LeaseId)> = Vec::new();
            // each sequence on keys of its own
            let (mut granted, mut denied, mut freed) = (0, 0, 0);
            for _ in 0..ops {
                let redis = &sides[rng.random_range(0..sides.len())];
                let now = Nanos(now_us * 1_000);
                match rng.random_range(0..10) {
                    // shorter waits for larger limits, so that every limit is reached often
                    0..=1 => now_us += rng.random_range(0..30_000 / n),
                    2..=5 => {
                        let k = rng.random_range(0..3u8);
                        let ttl = LeaseTtl::new(Duration::from_micros(rng.random_range(1..60_000)))
                            .unwrap();
                        let c = core.acquire(&k, now, ttl);
                        let r = redis.acquire_at(&[seed as u8, k], now, ttl).await.unwrap();
                        match (c, r) {
                            (Ok(c), Ok(r)) => {
                                assert_eq!(c.decision, r.decision);
                                assert_eq!(c.expires, r.expires);
                                leases.push((k, c.id, r.id));
                                granted += 1;
                            }
                            (Err(c), Err(r)) => {
                                assert_eq!(c, r);
                                denied += 1;
                            }
                            (c, r) => panic!("core {c:?} but redis {r:?}"),
                        }
                    }
                    6..=7 if !leases.is_empty() => {
                        let (k, c, r) = leases[rng.random_range(0..leases.len())];
                        let k = if rng.random_range(0..8) == 0 {
                            (k + 1) % 3
                        } else {
                            k
                        };
                        let a = core.release(&k, c, now);
                        let b = redis.release_at(&[seed as u8, k], r, now).await.unwrap();
                        assert_eq!(a, b, "release");
                        freed += u32::from(a);
                    }
                    8 if !leases.is_empty() => {
                        let (k, c, r) = leases[rng.random_range(0..leases.len())];
                        let ttl = LeaseTtl::new(Duration::from_micros(rng.random_range(1..60_000)))
                            .unwrap();
                        let a = core.renew(&k, c, now, ttl);
                        let b = redis.renew_at(&[seed as u8, k], r, now, ttl).await.unwrap();
                        assert_eq!(a, b, "renew");
                    }
                    _ => {
                        let k = rng.random_range(0..3u8);
                        // an id never issued
                        let a = core.release(&k, LeaseId(u64::MAX), now);
                        let b = redis
                            .release_at(&[seed as u8, k], LeaseId(u64::MAX), now)
                            .await
                            .unwrap();
                        assert!(!a && !b);
                    }
                }
            }
            (granted, denied, freed)
        }));
    }
    let mut totals = HashMap::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let (g, d, f) = t.await.unwrap();
        assert!(
            g > 20 && d > 5 && f > 5,
            "sequence {i}: granted {g}, denied {d}, freed {f}"
        );
        totals.insert(i, (g, d, f));
    }
    println!("granted / denied / freed per sequence: {totals:?}");
    common::assert_ttls_and_clean(&stores[0], prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_time_leases_expire_and_keys_carry_ttls() {
    let prefix = common::unique_prefix("inflight-time");
    let store = common::store_with(common::SHARED, config(&prefix)).await;
    redis_time_leases(store, &prefix).await;
}

/// The same at the primary's clock read by the module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_modules_redis_time_leases_expire_and_keys_carry_ttls() {
    let prefix = common::unique_prefix("inflight-time-mod");
    let server = common::Server::start_with_module();
    let store = common::store_with(&server.url(), config(&prefix)).await;
    assert!(store.uses_module());
    redis_time_leases(store, &prefix).await;
    assert!(common::calls(&server, "fg.acquire") >= 5);
    assert_eq!(common::calls(&server, "evalsha"), 0);
}

async fn redis_time_leases(store: Arc<RedisStore>, prefix: &str) {
    let gpu = RedisInFlight::new(store.clone(), 2).unwrap();
    let ttl = LeaseTtl::new(Duration::from_millis(300)).unwrap();
    let a = gpu.acquire(b"gpu", ttl).await.unwrap().unwrap();
    let b = gpu.acquire(b"gpu", ttl).await.unwrap().unwrap();
    assert_eq!(b.decision.remaining, 0);
    let d = gpu.acquire(b"gpu", ttl).await.unwrap().unwrap_err();
    assert!(
        d.retry_after.unwrap() <= Duration::from_millis(300),
        "{d:?}"
    );
    let pttl: i64 = store
        .command(redis::cmd("PTTL").arg(gpu.redis_key(b"gpu").unwrap()))
        .await
        .unwrap();
    assert!(pttl > 0 && pttl <= 301, "PTTL {pttl}");
    assert!(gpu.release(b"gpu", a.id).await.unwrap());
    assert!(!gpu.release(b"gpu", a.id).await.unwrap(), "twice: a no-op");
    assert!(gpu.renew(b"gpu", b.id, ttl).await.unwrap());
    let c = gpu.acquire(b"gpu", ttl).await.unwrap().unwrap();
    // a holder that dies: both places come back when the leases expire
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(
        !gpu.release(b"gpu", c.id).await.unwrap(),
        "expired: frees nothing"
    );
    assert!(
        !gpu.renew(b"gpu", b.id, ttl).await.unwrap(),
        "expired: not renewed"
    );
    let x = gpu.acquire(b"gpu", ttl).await.unwrap().unwrap();
    assert_eq!(x.decision.remaining, 1);
    assert!(common::assert_ttls_and_clean(&store, prefix).await >= 1);
}

#[tokio::test]
async fn bad_input_is_an_error_naming_it() {
    let prefix = common::unique_prefix("inflight-bad");
    let store = common::store_with(common::SHARED, config(&prefix)).await;
    let e = RedisInFlight::new(store.clone(), 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_in_flight"), "{e}");
    let gpu = RedisInFlight::new(store.clone(), 1).unwrap();
    let ttl = LeaseTtl::new(Duration::from_secs(1)).unwrap();
    let e = gpu
        .acquire(&[b'x'; 2000], ttl)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("2000 bytes"), "{e}");
    let e = gpu
        .acquire_at(b"k", Nanos(u64::MAX), ttl)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of range"), "{e}");
    assert!(!gpu.release(b"never", LeaseId(7)).await.unwrap());
    assert!(!gpu.renew(b"never", LeaseId(7), ttl).await.unwrap());
    common::assert_ttls_and_clean(&store, &prefix).await;
}

/// Lease ids are below 2^63: a non-negative RESP integer, and a signed 64-bit integer in
/// every client (floodgate server's doors refuse ids from 2^63 up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_ids_fit_63_bits() {
    let prefix = common::unique_prefix("inflight-ids");
    let store = common::store_with(common::SHARED, config(&prefix)).await;
    let ttl = LeaseTtl::new(Duration::from_secs(5)).unwrap();
    for _ in 0..8 {
        // a fresh RedisInFlight draws a fresh random seed
        let leases = RedisInFlight::new(store.clone(), 64).unwrap();
        for _ in 0..32 {
            let lease = leases.acquire(b"ids", ttl).await.unwrap().unwrap();
            assert!(lease.id.0 < 1 << 63, "{:?}", lease.id);
            assert!(leases.release(b"ids", lease.id).await.unwrap());
        }
    }
    common::assert_ttls_and_clean(&store, &prefix).await;
}
