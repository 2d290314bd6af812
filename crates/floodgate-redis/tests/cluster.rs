//! A real 3-master Redis Cluster on free loopback ports, started and torn down here: every
//! algorithm runs on it (each script touches one hash tag), hostile keys spread over the
//! masters, and the answers match a single Redis; several policies on one request give
//! the in-process all-or-nothing's decisions.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_core::algorithms::*;
use floodgate_core::{AnyAlgorithm, Nanos, Rate};
use floodgate_redis::{ModuleUse, RedisLimiter, RedisStore, StoreConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_master_cluster() {
    three_masters(false).await;
}

/// The same with floodgate's Redis module loaded on every master: the store sends
/// `FG.DECIDE` (its key first, so the client routes it as it routes a script's key),
/// and the settles and leases go to the scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_master_cluster_with_the_module() {
    three_masters(true).await;
}

async fn three_masters(module: bool) {
    let mut args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
    ]
    .map(String::from)
    .to_vec();
    if module {
        args.extend(common::load_module_args());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let nodes: Vec<common::Server> = (0..3).map(|_| common::Server::start_with(&args)).collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !nodes
        .iter()
        .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    {
        assert!(Instant::now() < deadline, "cluster did not become ok");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}")).collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let config = StoreConfig {
        prefix: "fg:".into(),
        timeout: Duration::from_secs(2),
        expiry_padding: Duration::from_secs(60),
        deny_cache_keys: 0,
        module: if module {
            ModuleUse::Always
        } else {
            ModuleUse::Never
        },
        ..StoreConfig::default()
    };
    let cluster = std::sync::Arc::new(
        RedisStore::connect_cluster(&url_refs, config)
            .await
            .unwrap(),
    );
    assert_eq!(cluster.uses_module(), module);
    let r = Rate::per_second(5).unwrap();
    let w = Duration::from_secs(1);
    let algs = [
        AnyAlgorithm::FixedWindow(FixedWindow::new(5, w).unwrap()),
        AnyAlgorithm::SlidingLog(SlidingLog::new(5, w).unwrap()),
        AnyAlgorithm::SlidingCounter(SlidingCounter::new(5, w).unwrap()),
        AnyAlgorithm::TokenBucket(TokenBucket::new(5, r).unwrap()),
        AnyAlgorithm::Leaky(LeakyBucket::meter(5, r).unwrap()),
        AnyAlgorithm::Leaky(LeakyBucket::queue(r, 4, DelayMode::After(1)).unwrap()),
        AnyAlgorithm::Gcra(Gcra::new(r, 5).unwrap()),
    ];
    let users: Vec<Vec<u8>> = (0..30)
        .map(|i| match i % 3 {
            0 => format!("user{i}").into_bytes(),
            1 => format!("{{evil}}{i} }}{{").into_bytes(),
            _ => vec![0, 255, b'{', i as u8, b'}', b' '],
        })
        .collect();
    let t = Nanos(1_700_000_000_000_000_000);
    for alg in &algs {
        let l = RedisLimiter::new(cluster.clone(), alg.clone()).unwrap();
        for u in &users {
            let mut state = Default::default();
            for step in 0..8u64 {
                let now = Nanos(t.0 + step * 50_000_000);
                let expect = floodgate_core::Algorithm::check(alg, &mut state, now, 1);
                let got = l.try_check_at(u, now, 1).await.unwrap();
                assert_eq!(got, expect, "{alg:?} {u:?} step {step}");
            }
        }
    }
    // the keys landed on every master, and each has a TTL
    let mut per_node = Vec::new();
    for n in &nodes {
        // each master, directly: SCAN and PTTL its own keys (binary names included)
        let node = common::store(&n.url(), "fg:").await;
        let keys = common::keys_with_pttl(&node, "fg:").await;
        for (k, pttl) in &keys {
            assert!(*pttl > 0, "{k:?}: {pttl}");
        }
        per_node.push(keys.len());
    }
    assert_eq!(
        per_node.iter().sum::<usize>(),
        algs.len() * users.len(),
        "{per_node:?}"
    );
    assert!(per_node.iter().all(|&n| n > 0), "{per_node:?}");
    // CL.THROTTLE on the cluster
    let a = floodgate_redis::ThrottleArgs::parse("15", "30", "60", None).unwrap();
    assert_eq!(
        cluster.throttle(b"user123", &a).await.unwrap(),
        [0, 16, 15, -1, 2]
    );
    // several policies on one request: the keys lie in different slots, so a dry run
    // then the charges; uncontended, the decisions are the in-process all-or-nothing's
    let per_user = RedisLimiter::new(cluster.clone(), algs[6].clone()).unwrap();
    let global = RedisLimiter::new(cluster.clone(), algs[3].clone()).unwrap();
    let core_user = floodgate_core::KeyedLimiter::new(algs[6].clone(), 64).unwrap();
    let core_global = floodgate_core::KeyedLimiter::new(algs[3].clone(), 64).unwrap();
    let (mut admitted, mut denied) = (0, 0);
    for step in 0..120u64 {
        let now = Nanos(t.0 + 10_000_000_000 + step * 30_000_000);
        let user = [b'm', (step % 3) as u8];
        let all = b"all".to_vec();
        let user_key = user.to_vec();
        let expect = floodgate_core::multi::check_all(
            &[
                floodgate_core::multi::Check {
                    limiter: &core_user,
                    key: &user_key,
                    cost: 1,
                },
                floodgate_core::multi::Check {
                    limiter: &core_global,
                    key: &all,
                    cost: 1,
                },
            ],
            now,
        );
        let got = floodgate_redis::multi::check_all_at(
            &[
                floodgate_redis::multi::Check {
                    limiter: &per_user,
                    user: &user,
                    cost: 1,
                },
                floodgate_redis::multi::Check {
                    limiter: &global,
                    user: b"all",
                    cost: 1,
                },
            ],
            now,
        )
        .await
        .unwrap();
        assert_eq!(
            (got.allowed, &got.decisions),
            (expect.allowed, &expect.decisions),
            "multi step {step}"
        );
        admitted += u32::from(expect.allowed);
        denied += u32::from(!expect.allowed);
    }
    assert!(admitted > 0 && denied > 0, "{admitted} {denied}");
    // in-flight leases: one key per call, so any slot; the core's decisions
    let leases = floodgate_redis::RedisInFlight::new(cluster.clone(), 2).unwrap();
    let core = floodgate_core::inflight::KeyedInFlight::<Vec<u8>>::new(2, 64).unwrap();
    let ttl = floodgate_core::inflight::LeaseTtl::new(Duration::from_secs(5)).unwrap();
    for u in &users {
        for _ in 0..3 {
            let (got, expect) = (
                leases.acquire_at(u, t, ttl).await.unwrap(),
                core.acquire(u, t, ttl),
            );
            assert_eq!(got.map(|l| l.decision), expect.map(|l| l.decision), "{u:?}");
        }
    }
    // reserve and settle: one key per call, so any slot; the core's answers, the key's
    // expiry set again
    for alg in &algs {
        let l = RedisLimiter::new(cluster.clone(), alg.clone()).unwrap();
        for u in &users {
            let user = [b"settle:".as_slice(), u].concat();
            let mut state = Default::default();
            for (step, (est, actual)) in [(1u64, 3u64), (2, 0), (1, 1)].into_iter().enumerate() {
                let now = Nanos(t.0 + 20_000_000_000 + step as u64 * 10_000_000);
                let (got, charge) = l
                    .reserve_at(&user, floodgate_redis::Now::Caller(now), est)
                    .await
                    .unwrap();
                let expect = floodgate_core::Settle::reserve(alg, &mut state, now, est);
                assert_eq!(got, expect, "{alg:?} {u:?} reserve {step}");
                let Some(charge) = charge else { continue };
                let got = l
                    .settle_at(&user, floodgate_redis::Now::Caller(now), charge, actual)
                    .await
                    .unwrap();
                let expect =
                    floodgate_core::Settle::settle(alg, &mut state, now, charge, actual).unwrap();
                assert_eq!(got, expect, "{alg:?} {u:?} settle {step}");
            }
        }
    }
    if module {
        let calls = |name: &str| -> u64 {
            nodes
                .iter()
                .map(|n| common::commandstats(n).get(name).copied().unwrap_or(0))
                .sum()
        };
        assert!(
            calls("fg.decide") > 1000,
            "{} FG.DECIDE calls",
            calls("fg.decide")
        );
        // reservations, settles and leases went to the module on every master they
        // hashed to, and no script ran
        assert!(calls("fg.reserve") >= 10 && calls("fg.settle") >= 10);
        assert!(calls("fg.acquire") >= 10);
        assert_eq!(calls("evalsha") + calls("eval"), 0);
    }
    drop(nodes); // SIGKILL all three and remove their directories
}
