//! The scripts against the core: the same random sequences of (time, key, cost) must give
//! identical decisions, for every algorithm, in caller-time mode on the real Redis.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::{Algorithm, AnyState, Nanos};
use floodgate_redis::{RedisLimiter, StoreConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_match_the_core_exactly() {
    let prefix = common::unique_prefix("diff");
    let store = common::store_with(
        common::SHARED,
        StoreConfig {
            prefix: prefix.clone(),
            timeout: Duration::from_secs(5),
            // simulated time runs far ahead of real time: keep keys for the whole test
            expiry_padding: Duration::from_secs(600),
            deny_cache_keys: 0,
            ..StoreConfig::default()
        },
    )
    .await;
    let mut tasks = Vec::new();
    for (i, (alg, scale)) in common::configs().into_iter().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let limiter = RedisLimiter::new(store, alg.clone()).unwrap();
            let mut rng = StdRng::seed_from_u64(0xF100D + i as u64);
            let mut states: HashMap<u8, AnyState> = HashMap::new();
            let limit = alg.limit();
            let mut now: u64 = 1_700_000_000_000_000_000 + rng.random_range(0..1_000_000_000_000);
            let ops = 1500;
            let (mut admitted, mut denied) = (0, 0);
            for op in 0..ops {
                // time: mostly small steps relative to the algorithm's scale, some jumps,
                // some steps back
                let step = match rng.random_range(0..10) {
                    0..=3 => 0,
                    4..=6 => rng.random_range(0..=scale / limit.clamp(1, 1000) + 1),
                    7 => rng.random_range(0..=scale),
                    8 => rng.random_range(0..=3 * scale),
                    _ => 1,
                };
                now += step;
                let t = if rng.random_range(0..25) == 0 {
                    now - rng.random_range(0..=scale.min(now))
                } else {
                    now
                };
                let cost = match rng.random_range(0..20) {
                    0 => 0,
                    1 => limit + rng.random_range(0..3),
                    2 => u64::MAX,
                    3..=5 => rng.random_range(1..=limit.min(1_000_000)),
                    _ => 1,
                };
                let key = rng.random_range(0..3u8);
                let state = states.entry(key).or_default();
                let expect = alg.check(state, Nanos(t), cost);
                let got = limiter
                    .try_check_at(&[b'k', i as u8, key], Nanos(t), cost)
                    .await
                    .unwrap_or_else(|e| panic!("{alg:?} op {op}: {e}"));
                assert_eq!(
                    got, expect,
                    "{alg:?}, op {op}, t={t}, key {key}, cost {cost}"
                );
                admitted += expect.allowed as u32;
                denied += (!expect.allowed && cost <= limit) as u32;
            }
            assert!(
                admitted > 0 && denied > 0,
                "{alg:?}: admitted {admitted}, rate-limited {denied}"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = common::assert_ttls_and_clean(&store, &prefix).await;
    assert!(n > 0);
}
