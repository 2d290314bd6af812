//! All-or-nothing over several policies on the real Redis (`multi::check_all`): the same
//! decisions as the core's in-process `check_all`, nothing charged for a denied request
//! even under contention, keys put back exactly, faults answered by the fault policy.

mod common;

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::algorithms::FixedWindow;
use floodgate_core::multi::{Check as CoreCheck, check_all as core_check_all};
use floodgate_core::{Algorithm, AnyAlgorithm, KeyedLimiter, Nanos};
use floodgate_redis::multi::{Check, check_all, check_all_at};
use floodgate_redis::{Error, FaultPolicy, ModuleUse, RedisLimiter, Source, StoreConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn config(prefix: &str) -> StoreConfig {
    StoreConfig {
        prefix: prefix.to_string(),
        timeout: Duration::from_secs(5),
        // simulated time runs far ahead of real time: keep keys for the whole test
        expiry_padding: Duration::from_secs(600),
        deny_cache_keys: 0,
        ..StoreConfig::default()
    }
}

fn window(limit: u64, secs: u64) -> AnyAlgorithm {
    AnyAlgorithm::FixedWindow(FixedWindow::new(limit, Duration::from_secs(secs)).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_match_the_core_all_or_nothing() {
    let prefix = common::unique_prefix("multi-diff");
    let store = common::store_with(
        common::SHARED,
        StoreConfig {
            module: ModuleUse::Never,
            ..config(&prefix)
        },
    )
    .await;
    all_or_nothing_matches_the_core(store, &prefix).await;
}

/// The same through the Redis module: one `FG.DECIDE` per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_module_matches_the_core_all_or_nothing() {
    let prefix = common::unique_prefix("multi-diffmod");
    let (server, store) = common::module_store(&prefix).await;
    all_or_nothing_matches_the_core(store, &prefix).await;
    assert!(common::calls(&server, "fg.decide") > 1000);
    assert_eq!(common::calls(&server, "evalsha"), 0);
}

async fn all_or_nothing_matches_the_core(
    store: std::sync::Arc<floodgate_redis::RedisStore>,
    prefix: &str,
) {
    let configs = common::configs();
    let n = configs.len();
    let mut tasks = Vec::new();
    // every algorithm as the first policy, paired with another algorithm (and a third
    // policy on every fourth pair)
    for i in 0..n {
        let mut policies = vec![configs[i].clone(), configs[(i * 7 + 3) % n].clone()];
        if i % 4 == 0 {
            policies.push(configs[(i * 5 + 1) % n].clone());
        }
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let scale = policies.iter().map(|p| p.1).min().unwrap();
            let limit = policies.iter().map(|p| p.0.limit()).min().unwrap();
            let redis: Vec<RedisLimiter> = policies
                .iter()
                .map(|(a, _)| RedisLimiter::new(store.clone(), a.clone()).unwrap())
                .collect();
            let core: Vec<KeyedLimiter<Vec<u8>, AnyAlgorithm>> = policies
                .iter()
                .map(|(a, _)| KeyedLimiter::new(a.clone(), 16).unwrap())
                .collect();
            let mut rng = StdRng::seed_from_u64(0x3u64 << 40 | i as u64);
            let mut now: u64 = 1_700_000_000_000_000_000 + rng.random_range(0..1_000_000_000_000);
            let (mut admitted, mut denied) = (0, 0);
            for op in 0..300 {
                now += match rng.random_range(0..10) {
                    0..=4 => 0,
                    5..=7 => rng.random_range(0..=scale / limit.clamp(1, 1000) + 1),
                    8 => rng.random_range(0..=scale),
                    _ => 1,
                };
                // policy 0 per client (three clients), the others one key each
                let client = rng.random_range(0..3u8);
                let users: Vec<Vec<u8>> = (0..policies.len())
                    .map(|p| {
                        let mut u = vec![b'p', p as u8, i as u8];
                        if p == 0 {
                            u.push(client);
                        }
                        u
                    })
                    .collect();
                let costs: Vec<u64> = (0..policies.len())
                    .map(|_| match rng.random_range(0..12) {
                        0 => 0,
                        1 => rng.random_range(1..=limit.min(1_000_000)),
                        _ => 1,
                    })
                    .collect();
                let core_checks: Vec<CoreCheck<'_, Vec<u8>, AnyAlgorithm>> = core
                    .iter()
                    .zip(&users)
                    .zip(&costs)
                    .map(|((limiter, key), &cost)| CoreCheck { limiter, key, cost })
                    .collect();
                let expect = core_check_all(&core_checks, Nanos(now));
                let checks: Vec<Check<'_>> = redis
                    .iter()
                    .zip(&users)
                    .zip(&costs)
                    .map(|((limiter, user), &cost)| Check {
                        limiter,
                        user,
                        cost,
                    })
                    .collect();
                let got = check_all_at(&checks, Nanos(now)).await.unwrap();
                assert_eq!(got.source, Source::Redis);
                assert_eq!(
                    (got.allowed, &got.decisions),
                    (expect.allowed, &expect.decisions),
                    "pair {i} {policies:?}, op {op}, t={now}, costs {costs:?}"
                );
                admitted += u32::from(expect.allowed);
                denied += u32::from(!expect.allowed);
            }
            assert!(
                admitted > 0 && denied > 0,
                "pair {i}: admitted {admitted}, denied {denied}"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    common::assert_ttls_and_clean(&store, prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_charges_no_policy_under_contention() {
    // per client 3 an hour, global 40 an hour; 16 tasks, 20 clients, 200 requests: the
    // global limit binds mid-way while tasks race on it
    let prefix = common::unique_prefix("multi-race");
    let store = common::store_with(common::SHARED, config(&prefix)).await;
    let per_client = Arc::new(RedisLimiter::new(store.clone(), window(3, 3600)).unwrap());
    let global = Arc::new(RedisLimiter::new(store.clone(), window(40, 3600)).unwrap());
    let mut tasks = Vec::new();
    for t in 0..16u32 {
        let (per_client, global) = (per_client.clone(), global.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u64;
            for r in 0..13u32 {
                let client = format!("c{}", (t * 13 + r) % 20);
                let out = check_all(&[
                    Check {
                        limiter: &per_client,
                        user: client.as_bytes(),
                        cost: 1,
                    },
                    Check {
                        limiter: &global,
                        user: b"all",
                        cost: 1,
                    },
                ])
                .await
                .unwrap();
                assert_eq!(out.source, Source::Redis);
                admitted += u64::from(out.allowed);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    // what each policy was charged, read with cost-0 looks
    let global_used = 40 - global.try_check(b"all", 0).await.unwrap().remaining;
    let mut per_client_used = 0;
    for c in 0..20 {
        let d = per_client
            .try_check(format!("c{c}").as_bytes(), 0)
            .await
            .unwrap();
        per_client_used += 3 - d.remaining;
    }
    assert_eq!(admitted, 40, "the global limit is reached exactly");
    assert_eq!(global_used, admitted);
    assert_eq!(
        per_client_used, admitted,
        "per-client units charged for denied requests"
    );
    common::assert_ttls_and_clean(&store, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_put_back_with_their_value_and_expiry() {
    let prefix = common::unique_prefix("multi-back");
    let store = common::store_with(common::SHARED, config(&prefix)).await;
    let a = RedisLimiter::new(store.clone(), window(10, 3600)).unwrap();
    let b = RedisLimiter::new(store.clone(), window(1, 3600)).unwrap();
    let checks = |cost_b| {
        [
            Check {
                limiter: &a,
                user: b"x",
                cost: 2,
            },
            Check {
                limiter: &b,
                user: b"y",
                cost: cost_b,
            },
        ]
    };
    // one admitted request: a holds 2 of 10, b 1 of 1
    assert!(check_all(&checks(1)).await.unwrap().allowed);
    let key_a = a.redis_key(b"x").unwrap();
    let key_b = b.redis_key(b"y").unwrap();
    let get = |k: Vec<u8>| {
        let store = store.clone();
        async move {
            let v: Option<Vec<u8>> = store.command(redis::cmd("GET").arg(&k)).await.unwrap();
            let ttl: i64 = store.command(redis::cmd("PTTL").arg(&k)).await.unwrap();
            (v, ttl)
        }
    };
    let (va, ta) = get(key_a.clone()).await;
    let (vb, _) = get(key_b.clone()).await;
    // denied by b: a is charged inside the script, then put back; one round trip
    let calls = store.stats().redis_calls;
    let out = check_all(&checks(1)).await.unwrap();
    assert_eq!(store.stats().redis_calls - calls, 1, "one round trip");
    assert!(!out.allowed);
    assert_eq!(out.decisions[0].remaining, 8, "a's view at cost 0");
    assert!(out.decisions[0].allowed && !out.decisions[1].allowed);
    let (va2, ta2) = get(key_a.clone()).await;
    let (vb2, _) = get(key_b.clone()).await;
    assert_eq!((va2, vb2), (va, vb));
    assert!(ta2 <= ta && ta - ta2 < 1000, "expiry {ta} then {ta2}");
    // a key that did not exist is deleted again
    let fresh = [
        Check {
            limiter: &a,
            user: b"new",
            cost: 1,
        },
        Check {
            limiter: &b,
            user: b"y",
            cost: 1,
        },
    ];
    assert!(!check_all(&fresh).await.unwrap().allowed);
    assert_eq!(get(a.redis_key(b"new").unwrap()).await.0, None);
    common::assert_ttls_and_clean(&store, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiters_on_two_stores_are_refused() {
    let p = common::unique_prefix("multi-mixed");
    let s1 = common::store_with(common::SHARED, config(&p)).await;
    let s2 = common::store_with(common::SHARED, config(&p)).await;
    let a = RedisLimiter::new(s1, window(1, 1)).unwrap();
    let b = RedisLimiter::new(s2, window(1, 1)).unwrap();
    let e = check_all(&[
        Check {
            limiter: &a,
            user: b"k",
            cost: 1,
        },
        Check {
            limiter: &b,
            user: b"k",
            cost: 1,
        },
    ])
    .await
    .unwrap_err();
    assert!(matches!(e, Error::MixedStores { index: 1 }), "{e}");
    assert!(e.to_string().contains("one store"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_too_long_is_an_error_and_charges_nothing() {
    let prefix = common::unique_prefix("multi-long");
    let store = common::store_with(
        common::SHARED,
        StoreConfig {
            max_key_len: 16,
            ..config(&prefix)
        },
    )
    .await;
    let a = RedisLimiter::new(store.clone(), window(5, 60)).unwrap();
    let b = RedisLimiter::new(store.clone(), window(5, 60)).unwrap();
    let long = [b'x'; 17];
    let calls = store.stats().redis_calls;
    let e = check_all(&[
        Check {
            limiter: &a,
            user: b"short",
            cost: 1,
        },
        Check {
            limiter: &b,
            user: &long,
            cost: 1,
        },
    ])
    .await
    .unwrap_err();
    assert!(matches!(e, Error::KeyTooLong { len: 17, max: 16 }), "{e}");
    assert_eq!(store.stats().redis_calls, calls, "nothing sent");
    assert_eq!(a.try_check(b"short", 0).await.unwrap().remaining, 5);
    common::assert_ttls_and_clean(&store, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_is_answered_by_the_fault_policy_for_every_policy() {
    let mut server = common::Server::start();
    for (policy, allowed) in [
        (FaultPolicy::FailOpen, true),
        (FaultPolicy::FailClosed, false),
    ] {
        let store = common::store_with(
            &server.url(),
            StoreConfig {
                timeout: Duration::from_millis(200),
                policy,
                ..config("fg:")
            },
        )
        .await;
        let a = RedisLimiter::new(store.clone(), window(5, 60)).unwrap();
        let b = RedisLimiter::new(store.clone(), window(5, 60)).unwrap();
        let checks = [
            Check {
                limiter: &a,
                user: b"k",
                cost: 1,
            },
            Check {
                limiter: &b,
                user: b"g",
                cost: 1,
            },
        ];
        assert!(check_all(&checks).await.unwrap().allowed);
        server.kill();
        let degraded = store.stats().degraded;
        let out = check_all(&checks).await.unwrap();
        assert_eq!(
            store.stats().degraded - degraded,
            2,
            "one degraded decision per policy"
        );
        assert!(
            matches!(out.source, Source::Fault(_)),
            "{policy:?}: {:?}",
            out.source
        );
        assert_eq!(out.allowed, allowed, "{policy:?}");
        assert_eq!(out.decisions.len(), 2);
        assert!(out.decisions.iter().all(|d| d.allowed == allowed));
        server.restart();
    }
}
