//! The scripts against the core: the same random sequences of (time, key, cost) must give
//! identical decisions, for every algorithm, in caller-time mode on the real Redis.

mod common;

use std::collections::HashMap;

use floodgate_core::{Algorithm, AnyState, Nanos};
use std::sync::Arc;

use floodgate_redis::{ModuleUse, RedisLimiter, RedisStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_match_the_core_exactly() {
    let prefix = common::unique_prefix("diff");
    let store = common::store_with(
        common::SHARED,
        common::sim_config(&prefix, ModuleUse::Never),
    )
    .await;
    checks_match_the_core(store, &prefix).await;
}

/// The same sequences through the Redis module (`FG.DECIDE`), in a redis-server of the
/// test's own with the module loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_module_matches_the_core_exactly() {
    let prefix = common::unique_prefix("diffmod");
    let (server, store) = common::module_store(&prefix).await;
    checks_match_the_core(store, &prefix).await;
    assert!(common::calls(&server, "fg.decide") > 10_000);
    assert_eq!(common::calls(&server, "evalsha"), 0);
}

async fn checks_match_the_core(store: Arc<RedisStore>, prefix: &str) {
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
    let n = common::assert_ttls_and_clean(&store, prefix).await;
    assert!(n > 0);
}

/// Reserve and settle sequences against the core: every reservation's decision and
/// instant, every settlement (units charged, refunded, the state after it) and every
/// check in between must be identical, settles coming at once, later, out of order or
/// never, with actual costs below, at and above the estimate (debt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_match_the_core_exactly() {
    let prefix = common::unique_prefix("diffsettle");
    let store = common::store_with(
        common::SHARED,
        common::sim_config(&prefix, ModuleUse::Never),
    )
    .await;
    settles_match_the_core(&[store], &prefix, 2000).await;
}

/// With the module: the checks go to `FG.DECIDE`, the reservations and settles to
/// `FG.RESERVE` and `FG.SETTLE`; no script runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_match_the_core_with_the_module() {
    let prefix = common::unique_prefix("diffsettlemod");
    let (server, store) = common::module_store(&prefix).await;
    settles_match_the_core(&[store], &prefix, 2000).await;
    assert!(common::calls(&server, "fg.decide") > 10_000);
    assert!(common::calls(&server, "fg.reserve") > 10_000);
    assert!(common::calls(&server, "fg.settle") > 10_000);
    assert_eq!(common::calls(&server, "evalsha"), 0);
}

/// Reservations, settles and checks sent at random to a store with the module and one
/// without, on the same keys: a reservation made by either is settled by either, and
/// every answer is the core's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_shared_by_the_module_and_the_scripts() {
    let prefix = common::unique_prefix("diffsettleshared");
    let (server, module) = common::module_store(&prefix).await;
    let scripts =
        common::store_with(&server.url(), common::sim_config(&prefix, ModuleUse::Never)).await;
    assert!(module.uses_module() && !scripts.uses_module());
    settles_match_the_core(&[module, scripts], &prefix, 1000).await;
    assert!(common::calls(&server, "fg.settle") > 1000);
    assert!(common::calls(&server, "evalsha") > 1000);
}

async fn settles_match_the_core(stores: &[Arc<RedisStore>], prefix: &str, ops: u32) {
    use floodgate_core::{Charge, Settle};
    use floodgate_redis::Now;

    let mut tasks = Vec::new();
    for (i, (alg, scale)) in common::configs().into_iter().enumerate() {
        let limiters: Vec<RedisLimiter> = stores
            .iter()
            .map(|s| RedisLimiter::new(s.clone(), alg.clone()).unwrap())
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(0x5E771E + i as u64);
            let mut states: HashMap<u8, AnyState> = HashMap::new();
            let mut open: Vec<(u8, Charge, u64)> = Vec::new();
            let limit = alg.limit();
            let small = limit.min(1_000_000);
            let mut now: u64 = 1_700_000_000_000_000_000 + rng.random_range(0..1_000_000_000_000);
            let (mut refunds, mut debts, mut refused) = (0, 0, 0u32);
            for op in 0..ops {
                let limiter = &limiters[rng.random_range(0..limiters.len())];
                now += match rng.random_range(0..10) {
                    0..=3 => 0,
                    4..=7 => rng.random_range(0..=scale / limit.clamp(1, 1000) + 1),
                    8 => rng.random_range(0..=scale),
                    _ => rng.random_range(0..=2 * scale),
                };
                let t = Nanos(now);
                let key = rng.random_range(0..3u8);
                let user = [b's', i as u8, key];
                let ctx = format!("{alg:?}, op {op}, t={now}, key {key}");
                match rng.random_range(0..10) {
                    0..=4 => {
                        let est = match rng.random_range(0..6) {
                            0 => 0,
                            1 => small,
                            _ => rng.random_range(1..=small.min(5)),
                        };
                        let state = states.entry(key).or_default();
                        let expect = alg.reserve(state, t, est);
                        let (got, charge) = limiter
                            .reserve_at(&user, Now::Caller(t), est)
                            .await
                            .unwrap();
                        assert_eq!(got, expect, "reserve {est}: {ctx}");
                        assert_eq!(charge.is_some(), expect.allowed, "{ctx}");
                        if let Some(c) = charge {
                            assert_eq!(c, Charge { cost: est, at: t }, "{ctx}");
                            let actual = match rng.random_range(0..4) {
                                0 => 0,
                                1 => est,
                                2 => rng.random_range(0..=est),
                                _ => est + rng.random_range(0..=3 * small),
                            };
                            open.push((key, c, actual));
                        }
                    }
                    5..=7 if !open.is_empty() => {
                        // the oldest or any open reservation; the rest may never settle
                        let j = if rng.random_range(0..2) == 0 {
                            0
                        } else {
                            rng.random_range(0..open.len())
                        };
                        let (key, charge, actual) = open.remove(j);
                        let user = [b's', i as u8, key];
                        let got = match limiter
                            .settle_at(&user, Now::Caller(t), charge, actual)
                            .await
                        {
                            // a debt beyond the scripts' exact range (GCRA at 1 per day,
                            // a tolerance near 104 days) is refused, and changes nothing
                            Err(floodgate_redis::Error::Settle(_)) => {
                                refused += 1;
                                continue;
                            }
                            other => other.unwrap_or_else(|e| panic!("settle: {ctx}: {e}")),
                        };
                        let state = states.entry(key).or_default();
                        let expect = alg.settle(state, t, charge, actual).unwrap();
                        assert_eq!(got, expect, "settle {charge:?} at {actual}: {ctx}");
                        refunds += (expect.refunded > 0) as u32;
                        debts += (expect.charged > 0 && expect.decision.remaining == 0) as u32;
                    }
                    _ => {
                        let cost = rng.random_range(0..=small.min(3));
                        let state = states.entry(key).or_default();
                        let expect = alg.check(state, t, cost);
                        let got = limiter.try_check_at(&user, t, cost).await.unwrap();
                        assert_eq!(got, expect, "check {cost}: {ctx}");
                    }
                }
            }
            (refunds, debts, refused)
        }));
    }
    let (mut refunds, mut debts, mut refused) = (0, 0, 0u32);
    for t in tasks {
        let (r, d, x) = t.await.unwrap();
        (refunds, debts, refused) = (refunds + r, debts + d, refused + x);
    }
    // every path was taken: refunds, debts that leave nothing, refusals (rare)
    assert!(
        refunds > 100 && debts > 100 && refused < ops * 5 / 8,
        "{refunds} refunds, {debts} debts, {refused} refused"
    );
    common::assert_ttls_and_clean(&stores[0], prefix).await;
}
