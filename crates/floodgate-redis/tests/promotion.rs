//! A primary and a replica (`REPLICAOF`) on free ports, both with floodgate's Redis
//! module: traffic on the primary with time moving, every key's value and absolute expiry
//! the same bytes on the replica; then the replica promoted (`REPLICAOF NO ONE`) goes on
//! deciding exactly as the core does from where the primary left off. The same with
//! redis-cell 0.2.2 prints how its replica drifts (a report, not a pass condition).

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_core::{Algorithm, AnyState, Nanos};
use floodgate_redis::{ModuleUse, RedisLimiter, RedisStore, StoreConfig, TimeSource};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A replica of `primary`, with `extra` arguments (a module to load), its link up.
fn replica_of(primary: &common::Server, extra: &[String]) -> common::Server {
    let mut args: Vec<String> = extra.to_vec();
    args.extend([
        "--replicaof".into(),
        "127.0.0.1".into(),
        primary.port.to_string(),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let replica = common::Server::start_with(&refs);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            Instant::now() < deadline,
            "the replica's link did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    replica
}

/// Every key of `server`: (name, value, `PEXPIRETIME`).
fn dump(server: &common::Server) -> Vec<(Vec<u8>, Vec<u8>, i64)> {
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let v: Vec<u8> = redis::cmd("GET").arg(&k).query(&mut c).unwrap();
            let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(&mut c).unwrap();
            (k, v, at)
        })
        .collect()
}

fn wait_replicated(primary: &common::Server) {
    let acked = primary.cli(&["WAIT", "1", "5000"]);
    assert_eq!(acked, "1", "the replica acknowledged every write");
}

/// 3000 checks at instants moving on from `now`, each on a random configuration and key,
/// every decision the core's (`models`); how many were denied.
async fn drive(
    store: &std::sync::Arc<RedisStore>,
    configs: &[(floodgate_core::AnyAlgorithm, u64)],
    models: &mut [HashMap<u8, AnyState>],
    rng: &mut StdRng,
    now: &mut u64,
) -> usize {
    let limiters: Vec<RedisLimiter> = configs
        .iter()
        .map(|(a, _)| RedisLimiter::new(store.clone(), a.clone()).unwrap())
        .collect();
    let mut denied = 0;
    for op in 0..3000 {
        let i = rng.random_range(0..configs.len());
        let alg = &configs[i].0;
        // one clock for all: steps of up to 2 ms, so the fast limits deny
        *now += rng.random_range(0..=2_000_000);
        let cost = match rng.random_range(0..10) {
            0 => 0,
            1 => alg.limit().min(1000),
            _ => 1,
        };
        let key = rng.random_range(0..2u8);
        let expect = alg.check(models[i].entry(key).or_default(), Nanos(*now), cost);
        let got = limiters[i]
            .try_check_at(&[b'p', i as u8, key], Nanos(*now), cost)
            .await
            .unwrap();
        assert_eq!(got, expect, "{alg:?} op {op}");
        denied += usize::from(!got.allowed);
    }
    denied
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_continues_where_the_primary_left_off() {
    let primary = common::Server::start_with_module();
    let replica = replica_of(&primary, &common::load_module_args());
    // caller-time traffic (the instants given, so every decision is known exactly)
    let prefix = "promo:";
    let sim = common::store_with(
        &primary.url(),
        common::sim_config(prefix, ModuleUse::Always),
    )
    .await;
    // and Redis-time traffic: the module reads the primary's clock, real time moving
    let live = common::store_with(
        &primary.url(),
        StoreConfig {
            prefix: "live:".into(),
            timeout: Duration::from_secs(5),
            time: TimeSource::Redis,
            deny_cache_keys: 0,
            module: ModuleUse::Always,
            ..StoreConfig::default()
        },
    )
    .await;
    let configs = common::configs();
    let mut models: Vec<HashMap<u8, AnyState>> = vec![HashMap::new(); configs.len()];
    let mut rng = StdRng::seed_from_u64(0x9E0);
    let mut now: u64 = 1_700_000_000_000_000_000;
    let denied_before = drive(&sim, &configs, &mut models, &mut rng, &mut now).await;
    let gcra = RedisLimiter::new(live.clone(), configs[4].0.clone()).unwrap();
    for i in 0..300u32 {
        gcra.try_check(&[b'l', (i % 20) as u8], 1).await.unwrap();
        if i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    wait_replicated(&primary);
    let (p, r) = (dump(&primary), dump(&replica));
    assert!(p.len() > 50, "{} keys", p.len());
    assert_eq!(p, r, "every key's bytes and absolute expiry on the replica");
    assert!(
        p.iter().all(|(_, _, at)| *at > 0),
        "every key has an expiry"
    );
    // promote the replica; the primary is left alone (it would be gone)
    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let promoted = common::store_with(
        &replica.url(),
        common::sim_config(prefix, ModuleUse::Always),
    )
    .await;
    let denied_after = drive(&promoted, &configs, &mut models, &mut rng, &mut now).await;
    assert!(
        denied_before > 100 && denied_after > 100,
        "{denied_before} {denied_after}"
    );
    assert_eq!(
        dump(&primary),
        p,
        "nothing more was written on the old primary"
    );
}

/// redis-cell 0.2.2, built (or found in the cache) by scripts/lib/redis-cell.sh; `None`
/// when it cannot be built here.
fn redis_cell() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/lib/redis-cell.sh"))
        .current_dir(&root)
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// redis-cell replicates `CL.THROTTLE` itself, and each replica decides it again on its
/// own clock: the replica's values and expiries drift from the primary's. Printed, not
/// asserted (it is redis-cell's behaviour, brandur/redis-cell#31).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cell_replica_drift_report() {
    let Some(cell) = redis_cell() else {
        eprintln!("redis-cell could not be built here: no drift report");
        return;
    };
    let load = vec!["--loadmodule".to_string(), cell.display().to_string()];
    let primary = common::Server::start_with(&[&load[0], &load[1]]);
    let replica = replica_of(&primary, &load);
    let client = redis::Client::open(primary.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    for i in 0..3000u32 {
        let key = format!("cell{}", i % 100);
        let _: Vec<i64> = redis::cmd("CL.THROTTLE")
            .arg(&key)
            .arg(9)
            .arg(100)
            .arg(60)
            .arg(1)
            .query(&mut c)
            .unwrap();
        if i % 300 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // (redis-cell may replicate nothing: WAIT is not asserted)
    let acked = primary.cli(&["WAIT", "1", "2000"]);
    let (p, r) = (dump(&primary), dump(&replica));
    let on_replica: HashMap<&[u8], (&[u8], i64)> =
        r.iter().map(|(k, v, at)| (&k[..], (&v[..], *at))).collect();
    let missing = p
        .iter()
        .filter(|(k, ..)| !on_replica.contains_key(&k[..]))
        .count();
    let values = p
        .iter()
        .filter(|(k, v, _)| on_replica.get(&k[..]).is_some_and(|(rv, _)| rv != v))
        .count();
    let gaps: Vec<i64> = p
        .iter()
        .filter_map(|(k, _, at)| on_replica.get(&k[..]).map(|(_, rat)| rat - at))
        .collect();
    let differ = gaps.iter().filter(|d| **d != 0).count();
    let worst = gaps.iter().map(|d| d.abs()).max().unwrap_or(0);
    // promoted, the replica answers from its own state: the same peek on both
    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let peek = |s: &common::Server, k: &str| s.cli(&["CL.THROTTLE", k, "9", "100", "60", "0"]);
    let replies = (0..100)
        .filter(|i| {
            let k = format!("cell{i}");
            peek(&primary, &k) != peek(&replica, &k)
        })
        .count();
    println!(
        "redis-cell 0.2.2 replica drift (WAIT 1 answered {acked}): {} keys on the primary after 3000 CL.THROTTLE calls; on the replica {missing} missing, {values} with other bytes, {differ} with another expiry (at most {worst} ms apart); {replies} of 100 peeks differ after promotion",
        p.len()
    );
}
