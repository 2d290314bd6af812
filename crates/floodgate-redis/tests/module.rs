//! The store and floodgate's Redis module (`floodgate-redis-module`): found on connect,
//! forced either way by `StoreConfig::module`, found without `COMMAND` when an ACL
//! forbids it, sharing keys with the scripts (a limit used by clients with and without
//! the module, decided as the core decides), and the module answering reservations,
//! settles and in-flight leases too.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::{Algorithm, AnyState, Nanos};
use floodgate_redis::{Error, ModuleUse, RedisInFlight, RedisLimiter, RedisStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn found_on_connect_or_forced_either_way() {
    let with = common::Server::start_with_module();
    let without = common::Server::start();
    let connect = |url: String, m| async move {
        RedisStore::connect(&url, common::sim_config("fgm:", m)).await
    };
    assert!(
        connect(with.url(), ModuleUse::Auto)
            .await
            .unwrap()
            .uses_module()
    );
    assert!(
        connect(with.url(), ModuleUse::Always)
            .await
            .unwrap()
            .uses_module()
    );
    assert!(
        !connect(with.url(), ModuleUse::Never)
            .await
            .unwrap()
            .uses_module()
    );
    assert!(
        !connect(without.url(), ModuleUse::Auto)
            .await
            .unwrap()
            .uses_module()
    );
    assert!(
        !connect(without.url(), ModuleUse::Never)
            .await
            .unwrap()
            .uses_module()
    );
    match connect(without.url(), ModuleUse::Always).await {
        Err(e @ Error::ModuleMissing { .. }) => {
            assert!(e.to_string().contains("FG.DECIDE is unknown"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // an ACL user that may not run COMMAND: the module is found by an FG.ACQUIRE without
    // arguments (its usage line), and not found where the server answers "unknown command"
    for (server, found) in [(&with, true), (&without, false)] {
        let ok = server.cli(&[
            "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-command",
        ]);
        assert_eq!(ok, "OK");
        let url = format!("redis://app:pw@127.0.0.1:{}", server.port);
        let store = connect(url, ModuleUse::Auto).await.unwrap();
        assert_eq!(store.uses_module(), found);
        let e = store
            .command::<redis::Value>(redis::cmd("COMMAND").arg("INFO").arg("get"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no permissions"), "{e}");
    }
}

/// With `auto`, a server that loses the module (unloaded here; a failover to a server
/// without it alike) is answered by the scripts from the next call on, on the same keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_the_scripts_when_the_module_goes() {
    use floodgate_core::AnyAlgorithm;
    use floodgate_core::algorithms::FixedWindow;

    let mut args = common::load_module_args();
    args.extend(["--enable-module-command".into(), "yes".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = common::Server::start_with(&args);
    let store =
        common::store_with(&server.url(), common::sim_config("fgg:", ModuleUse::Auto)).await;
    assert!(store.uses_module());
    let alg = AnyAlgorithm::FixedWindow(FixedWindow::new(3, Duration::from_secs(60)).unwrap());
    let limiter = RedisLimiter::new(store.clone(), alg.clone()).unwrap();
    let other = RedisLimiter::new(store.clone(), alg.clone()).unwrap();
    let t = Nanos(1_700_000_000_000_000_000);
    let mut state = AnyState::default();
    assert_eq!(
        limiter.try_check_at(b"u", t, 1).await.unwrap(),
        alg.check(&mut state, t, 1)
    );
    assert_eq!(server.cli(&["MODULE", "UNLOAD", "floodgate"]), "OK");
    assert_eq!(
        limiter.try_check_at(b"u", t, 1).await.unwrap(),
        alg.check(&mut state, t, 1)
    );
    assert!(!store.uses_module());
    let out = floodgate_redis::multi::check_all_at(
        &[
            floodgate_redis::multi::Check {
                limiter: &limiter,
                user: b"u",
                cost: 1,
            },
            floodgate_redis::multi::Check {
                limiter: &other,
                user: b"v",
                cost: 1,
            },
        ],
        t,
    )
    .await
    .unwrap();
    assert!(out.allowed);
    assert_eq!(out.decisions[0], alg.check(&mut state, t, 1));
    assert!(
        common::calls(&server, "evalsha") >= 2,
        "the scripts answered"
    );
}

/// Clients with the module and clients without it share one limit: every call goes to
/// either at random, on the same keys, and every decision is the core's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_and_scripts_share_keys() {
    let prefix = common::unique_prefix("shared");
    let (server, module) = common::module_store(&prefix).await;
    let scripts =
        common::store_with(&server.url(), common::sim_config(&prefix, ModuleUse::Never)).await;
    assert!(module.uses_module() && !scripts.uses_module());
    let mut tasks = Vec::new();
    for (i, (alg, scale)) in common::configs().into_iter().enumerate() {
        let limiters = [
            RedisLimiter::new(module.clone(), alg.clone()).unwrap(),
            RedisLimiter::new(scripts.clone(), alg.clone()).unwrap(),
        ];
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(0x5A4E + i as u64);
            let mut states: HashMap<u8, AnyState> = HashMap::new();
            let limit = alg.limit();
            let mut now: u64 = 1_700_000_000_000_000_000 + rng.random_range(0..1_000_000_000_000);
            for op in 0..200 {
                now += match rng.random_range(0..4) {
                    0 => 0,
                    1 | 2 => rng.random_range(0..=scale / limit.clamp(1, 1000) + 1),
                    _ => rng.random_range(0..=scale),
                };
                let cost = match rng.random_range(0..10) {
                    0 => 0,
                    1 => rng.random_range(1..=limit.min(1_000_000)),
                    _ => 1,
                };
                let key = rng.random_range(0..2u8);
                let side = rng.random_range(0..2usize);
                let expect = alg.check(states.entry(key).or_default(), Nanos(now), cost);
                let got = limiters[side]
                    .try_check_at(&[b'k', i as u8, key], Nanos(now), cost)
                    .await
                    .unwrap();
                assert_eq!(got, expect, "{alg:?} op {op} via {side}, cost {cost}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    common::assert_ttls_and_clean(&module, &prefix).await;
    assert!(common::calls(&server, "fg.decide") > 1000);
    assert!(common::calls(&server, "evalsha") > 1000);
}

/// A sliding log's stored total is what it holds for the module as for the scripts: on
/// values whose total disagrees with their counts (as something else could write them),
/// `FG.DECIDE` and the sliding-log script give the same decision and write the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_logs_stored_total_counts_for_the_module_as_for_the_scripts() {
    use floodgate_core::AnyAlgorithm;
    use floodgate_core::algorithms::SlidingLog;
    use redis::AsyncCommands;

    let prefix = common::unique_prefix("total");
    let (server, module) = common::module_store(&prefix).await;
    let scripts =
        common::store_with(&server.url(), common::sim_config(&prefix, ModuleUse::Never)).await;
    let mut raw = common::raw_conn(&server.url()).await;
    let mut rng = StdRng::seed_from_u64(0x7074);
    let (mut denied, mut admitted) = (0, 0);
    for case in 0..400 {
        let limit = rng.random_range(1..=40u64);
        let w = rng.random_range(1..=5_000_000_000u64);
        let alg =
            AnyAlgorithm::SlidingLog(SlidingLog::new(limit, Duration::from_nanos(w)).unwrap());
        let sides = [
            RedisLimiter::new(module.clone(), alg.clone()).unwrap(),
            RedisLimiter::new(scripts.clone(), alg).unwrap(),
        ];
        let now = 1_700_000_000_000_000_000 + rng.random_range(0..1_000_000_000_000u64);
        // entries oldest first, some expired, then a stored total that says more or
        // fewer units than their counts, never fewer than the expired ones
        let mut t = now - rng.random_range(0..=2 * w);
        let (mut entries, mut gone, mut live) = (Vec::new(), 0u64, 0u64);
        for _ in 0..rng.random_range(1..=150) {
            t += rng.random_range(0..=w / 50 + 1);
            if t > now {
                break;
            }
            let c = rng.random_range(1..=3u64);
            if t + w <= now {
                gone += c;
            } else {
                live += c;
            }
            entries.push(format!(" {t} {c}"));
        }
        let total = gone + rng.random_range(0..=live + limit + 2);
        let value = format!("{total}{}", entries.concat());
        let cost = rng.random_range(0..=4u64);
        let key = sides[0].redis_key(format!("u{case}").as_bytes()).unwrap();
        let mut got = Vec::new();
        for side in &sides {
            let _: () = raw.set_ex(&key, &value, 600).await.unwrap();
            let d = side
                .try_check_at(format!("u{case}").as_bytes(), Nanos(now), cost)
                .await
                .unwrap();
            let after: Vec<u8> = raw.get(&key).await.unwrap();
            got.push((d, after));
        }
        assert_eq!(
            got[0], got[1],
            "{value} at {now}, limit {limit}, window {w}, cost {cost}"
        );
        if got[0].0.allowed {
            admitted += 1;
        } else {
            denied += 1;
        }
    }
    assert!(
        admitted > 50 && denied > 50,
        "{admitted} admitted, {denied} denied"
    );
    assert!(common::calls(&server, "fg.decide") >= 400);
    assert!(common::calls(&server, "evalsha") >= 400);
}

/// On a store that uses the module, reservations and settles are `FG.RESERVE` and
/// `FG.SETTLE`, checks `FG.DECIDE` and in-flight leases `FG.ACQUIRE` and `FG.RELEASE`,
/// all seeing each other's writes; no script runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_and_leases_are_the_modules() {
    use floodgate_core::AnyAlgorithm;
    use floodgate_core::algorithms::Gcra;
    use floodgate_core::inflight::LeaseTtl;

    let (server, store) = common::module_store("fgf:").await;
    let calls = |name: &str| common::calls(&server, name);
    let alg =
        AnyAlgorithm::Gcra(Gcra::new(floodgate_core::Rate::per_second(10).unwrap(), 3).unwrap());
    let limiter = RedisLimiter::new(store.clone(), alg).unwrap();
    let t = Nanos(1_700_000_000_000_000_000);
    assert!(limiter.try_check_at(b"u", t, 1).await.unwrap().allowed);
    assert_eq!(calls("fg.decide"), 1);
    let (d, charge) = limiter
        .reserve_at(b"u", floodgate_redis::Now::Caller(t), 2)
        .await
        .unwrap();
    assert!(d.allowed);
    assert_eq!(
        d.remaining, 0,
        "the check's charge is seen by the reservation"
    );
    let s = limiter
        .settle_at(b"u", floodgate_redis::Now::Caller(t), charge.unwrap(), 0)
        .await
        .unwrap();
    assert_eq!(s.refunded, 2);
    assert_eq!((calls("fg.reserve"), calls("fg.settle")), (1, 1));
    // and the refund is seen by the check
    assert_eq!(limiter.try_check_at(b"u", t, 0).await.unwrap().remaining, 2);
    let leases = RedisInFlight::new(store.clone(), 1).unwrap();
    let ttl = LeaseTtl::new(Duration::from_secs(5)).unwrap();
    let lease = leases.acquire(b"u", ttl).await.unwrap().unwrap();
    assert!(leases.acquire(b"u", ttl).await.unwrap().is_err());
    assert!(leases.renew(b"u", lease.id, ttl).await.unwrap());
    assert!(leases.release(b"u", lease.id).await.unwrap());
    assert_eq!(
        (calls("fg.acquire"), calls("fg.renew"), calls("fg.release")),
        (2, 1, 1)
    );
    assert_eq!(calls("fg.decide"), 2);
    assert_eq!(calls("evalsha"), 0, "no script ran");
    assert_eq!(calls("eval"), 0);
}
