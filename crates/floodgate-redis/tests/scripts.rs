//! Script behaviour on a real Redis: exact arithmetic, CL.THROTTLE replies, NOSCRIPT
//! reloads, one round trip per decision, and keys that expire by themselves.

mod common;

use std::time::Duration;

use floodgate_core::algorithms::*;
use floodgate_core::{Algorithm, AnyAlgorithm, Nanos, Rate};
use floodgate_redis::{RedisLimiter, StoreConfig, ThrottleArgs};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The Lua muldiv and time helpers, checked against u128 arithmetic on many random and
/// edge-case operands (including quotient estimates that are off by one).
#[tokio::test]
async fn lua_arithmetic_is_exact() {
    let mut conn = common::raw_conn(common::SHARED).await;
    let src = concat!(
        include_str!("../lua/time.lua"),
        include_str!("../lua/muldiv.lua"),
        r#"
local out = {}
for i = 1, #ARGV, 3 do
  local x, y, z = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local q, r = muldivmod(x, y, z)
  if q == nil then out[#out + 1] = 'big' else out[#out + 1] = string.format('%d %d', q, r) end
end
local s, n = tparse('1700000000123456789')
local ts, tn = tadd(s, n, 3999999999999999)
out[#out + 1] = tfmt(ts, tn) .. ' ' .. string.format('%d', tdiff(ts, tn, s, n))
return out
"#
    );
    let script = redis::Script::new(src);
    let mut rng = StdRng::seed_from_u64(7);
    let lim: u64 = 1 << 50;
    let mut cases: Vec<(u64, u64, u64)> = vec![
        (lim - 1, lim - 1, lim - 1),
        (lim - 1, lim - 1, 1),
        ((1 << 53) - 1, 3, lim - 1),
        (1_700_000_000, 1_000_000_000, 60_000_000_000),
        (9_999_999_999, 1_000_000_000, 10_000),
        (0, 5, 7),
        (12345, 0, 7),
    ];
    for _ in 0..3000 {
        let bits = |rng: &mut StdRng| 1u64 << rng.random_range(1..=50);
        let (bx, by, bz) = (bits(&mut rng), bits(&mut rng), bits(&mut rng));
        let x = rng.random_range(0..bx);
        let y = rng.random_range(0..by);
        let z = rng.random_range(1..bz);
        cases.push((x, y, z));
        // q x z - 1, q x z, q x z + 1 for a random q: exercise every correction branch
        let q = rng.random_range(1..1u64 << 20);
        let z = rng.random_range(1..1u64 << 30);
        for p in [q * z - 1, q * z, q * z + 1] {
            cases.push((p, 1, z));
            if p % 3 == 0 {
                cases.push((p / 3, 3, z));
            }
        }
    }
    for chunk in cases.chunks(500) {
        let mut inv = script.prepare_invoke();
        for (x, y, z) in chunk {
            inv.arg(*x).arg(*y).arg(*z);
        }
        let out: Vec<String> = inv.invoke_async(&mut conn).await.unwrap();
        for ((x, y, z), got) in chunk.iter().zip(&out) {
            let p = *x as u128 * *y as u128;
            let (q, r) = (p / *z as u128, p % *z as u128);
            let want = if q >= 1 << 51 {
                "big".to_string()
            } else {
                format!("{q} {r}")
            };
            assert_eq!(got, &want, "{x} x {y} / {z}");
        }
        assert_eq!(
            out.last().unwrap(),
            &format!(
                "{} 3999999999999999",
                1_700_000_000_123_456_789u64 + 3_999_999_999_999_999
            )
        );
    }
}

/// redis-cell's replies (reference examples measured against the module), through the
/// library call and Redis TIME: durations truncated to whole seconds.
#[tokio::test]
async fn throttle_replies_like_redis_cell() {
    let prefix = common::unique_prefix("cell");
    let store = common::store(common::SHARED, &prefix).await;
    let a = ThrottleArgs::parse("15", "30", "60", None).unwrap();
    assert_eq!(
        store.throttle(b"user123", &a).await.unwrap(),
        [0, 16, 15, -1, 2]
    );
    // a few microseconds later: 3.99999... s to full capacity, truncated
    assert_eq!(
        store.throttle(b"user123", &a).await.unwrap(),
        [0, 16, 14, -1, 3]
    );
    let peek = ThrottleArgs::parse("15", "30", "60", Some("0")).unwrap();
    assert_eq!(
        store.throttle(b"fresh", &peek).await.unwrap(),
        [0, 16, 16, -1, 0]
    );
    let big = ThrottleArgs::parse("4", "1", "1", Some("6")).unwrap();
    assert_eq!(store.throttle(b"k", &big).await.unwrap(), [1, 5, 5, -1, 0]);
    // the burst of 16 runs out, then retry_after is one emission interval (2 s) less the
    // time since the first call, truncated: 1 s; reset_after 32 s less that time: 31 s
    for _ in 0..14 {
        assert_eq!(store.throttle(b"user123", &a).await.unwrap()[0], 0);
    }
    let r = store.throttle(b"user123", &a).await.unwrap();
    assert_eq!(r, [1, 16, 0, 1, 31]);
    // peeks and denials never leave a key without TTL, and fresh peeks create none
    assert_eq!(common::assert_ttls_and_clean(&store, &prefix).await, 1);
}

/// SCRIPT FLUSH on our own server: the next call reloads the script transparently.
#[tokio::test]
async fn noscript_reloads_transparently() {
    let server = common::Server::start();
    let store = common::store(&server.url(), "fg:").await;
    let limiter = RedisLimiter::new(
        store.clone(),
        AnyAlgorithm::Gcra(Gcra::new(Rate::per_second(1).unwrap(), 3).unwrap()),
    )
    .unwrap();
    assert_eq!(limiter.try_check(b"a", 1).await.unwrap().remaining, 2);
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(limiter.try_check(b"a", 1).await.unwrap().remaining, 1);
    let stats = server.cli(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_script|load:calls=2"), "{stats}");
    // 2 decisions + 2 NOSCRIPT answers (the first call, and the one after the flush)
    assert!(stats.contains("cmdstat_evalsha:calls=4,"), "{stats}");
    assert!(stats.contains("failed_calls=2"), "{stats}");
}

/// Exactly one command reaches Redis per decision, for every algorithm.
#[tokio::test]
async fn one_round_trip_per_decision() {
    let server = common::Server::start();
    let store = common::store(&server.url(), "fg:").await;
    let algs = all_algorithms();
    for alg in &algs {
        let l = RedisLimiter::new(store.clone(), alg.clone()).unwrap();
        l.try_check(b"warm", 1).await.unwrap(); // loads the script (NOSCRIPT + LOAD)
    }
    let before = common::commandstats(&server);
    let n = 50;
    for alg in &algs {
        let l = RedisLimiter::new(store.clone(), alg.clone()).unwrap();
        for i in 0..n {
            l.try_check(format!("k{}", i % 5).as_bytes(), 1)
                .await
                .unwrap();
        }
    }
    let after = common::commandstats(&server);
    let delta = |c: &str| after.get(c).copied().unwrap_or(0) - before.get(c).copied().unwrap_or(0);
    let decisions = n * algs.len() as u64;
    assert_eq!(delta("evalsha"), decisions);
    // everything else that ran was inside the scripts (TIME, GET, SET) or this INFO
    let top_level: u64 = after
        .keys()
        .filter(|c| !["evalsha", "time", "get", "set", "info"].contains(&c.as_str()))
        .map(|c| delta(c))
        .sum();
    assert_eq!(top_level, 0, "{before:?} -> {after:?}");
    assert_eq!(delta("info"), 1);
}

fn all_algorithms() -> Vec<AnyAlgorithm> {
    let r = Rate::per_second(10).unwrap();
    let w = Duration::from_secs(1);
    vec![
        AnyAlgorithm::FixedWindow(FixedWindow::new(10, w).unwrap()),
        AnyAlgorithm::SlidingLog(SlidingLog::new(10, w).unwrap()),
        AnyAlgorithm::SlidingCounter(SlidingCounter::new(10, w).unwrap()),
        AnyAlgorithm::TokenBucket(TokenBucket::new(10, r).unwrap()),
        AnyAlgorithm::Leaky(LeakyBucket::meter(10, r).unwrap()),
        AnyAlgorithm::Leaky(LeakyBucket::queue(r, 9, DelayMode::After(2)).unwrap()),
        AnyAlgorithm::Gcra(Gcra::new(r, 10).unwrap()),
    ]
}

/// Keys get a TTL equal to the time until full capacity and vanish by themselves then;
/// after that the key behaves as fresh.
#[tokio::test]
async fn keys_expire_when_back_at_full_capacity() {
    let prefix = common::unique_prefix("expire");
    let store = common::store(common::SHARED, &prefix).await;
    // 1 s to refill / leave the window for every algorithm
    let r = Rate::new(5, Duration::from_secs(1)).unwrap();
    let w = Duration::from_secs(1);
    let algs = vec![
        AnyAlgorithm::FixedWindow(FixedWindow::new(5, w).unwrap()),
        AnyAlgorithm::SlidingLog(SlidingLog::new(5, w).unwrap()),
        AnyAlgorithm::SlidingCounter(SlidingCounter::new(5, w).unwrap()),
        AnyAlgorithm::TokenBucket(TokenBucket::new(5, r).unwrap()),
        AnyAlgorithm::Leaky(LeakyBucket::meter(5, r).unwrap()),
        AnyAlgorithm::Gcra(Gcra::new(r, 5).unwrap()),
    ];
    for alg in &algs {
        let l = RedisLimiter::new(store.clone(), alg.clone()).unwrap();
        let d = l.try_check(b"user", 5).await.unwrap();
        assert!(d.allowed && d.remaining == 0, "{alg:?}: {d:?}");
        let key = l.redis_key(b"user").unwrap();
        let pttl: i64 = store.command(redis::cmd("PTTL").arg(&key)).await.unwrap();
        let full = d.reset_after.as_millis() as i64;
        assert!(
            pttl > 0 && pttl <= full + 1,
            "{alg:?}: pttl {pttl}, reset {full} ms"
        );
    }
    // the sliding counter's key lives until the end of the next window: at most 2 s
    tokio::time::sleep(Duration::from_millis(2300)).await;
    assert!(
        common::keys_with_pttl(&store, &prefix).await.is_empty(),
        "keys did not expire"
    );
    for alg in &algs {
        let l = RedisLimiter::new(store.clone(), alg.clone()).unwrap();
        assert_eq!(l.peek_remaining(b"user").await, 5, "{alg:?}");
    }
}

trait Peek {
    async fn peek_remaining(&self, user: &[u8]) -> u64;
}

impl Peek for RedisLimiter {
    async fn peek_remaining(&self, user: &[u8]) -> u64 {
        self.try_check_at(
            user,
            Nanos(floodgate_core::Clock::now(&floodgate_core::WallClock).0),
            0,
        )
        .await
        .unwrap()
        .remaining
    }
}

#[tokio::test]
async fn caller_time_mode_uses_the_callers_clock() {
    let prefix = common::unique_prefix("caller");
    let store = common::store_with(
        common::SHARED,
        StoreConfig {
            prefix: prefix.clone(),
            time: floodgate_redis::TimeSource::Caller,
            ..StoreConfig::default()
        },
    )
    .await;
    let l = RedisLimiter::new(
        store.clone(),
        AnyAlgorithm::FixedWindow(FixedWindow::new(2, Duration::from_secs(3600)).unwrap()),
    )
    .unwrap();
    let o = l.check(b"u", 2).await.unwrap();
    assert!(
        o.decision.allowed && o.source == floodgate_redis::Source::Redis,
        "{o:?}"
    );
    let o = l.check(b"u", 1).await.unwrap();
    assert!(
        !o.decision.allowed && o.source == floodgate_redis::Source::Redis,
        "{o:?}"
    );
    // a caller time in the next hour's window is a fresh window
    let next = Nanos(
        (floodgate_core::Clock::now(&floodgate_core::WallClock).0 / 3_600_000_000_000 + 1)
            * 3_600_000_000_000,
    );
    assert!(l.check_at(b"u", next, 1).await.unwrap().decision.allowed);
    common::assert_ttls_and_clean(&store, &prefix).await;
}

/// A GCRA key written in the previous stored format (decimal nanoseconds) before an
/// upgrade keeps its state: the script reads it exactly as the core's TAT, and the next
/// admitted call rewrites it in the current 12-byte format, which reads back the same.
#[tokio::test]
async fn gcra_reads_the_previous_decimal_format() {
    let prefix = common::unique_prefix("gcra-format");
    let store = common::store(common::SHARED, &prefix).await;
    let g = Gcra::new(Rate::per_second(10).unwrap(), 5).unwrap(); // T 100 ms, tau 500 ms
    let l = RedisLimiter::new(store.clone(), AnyAlgorithm::Gcra(g.clone())).unwrap();
    let now = Nanos(1_700_000_000_123_456_789);
    // (stored TAT, instant, cost): ahead by less than tau (admitted), ahead so far that
    // cost 2 is denied, behind now, and TATs of at most 9 digits (seconds part 0)
    let cases = [
        (now.0 + 250_000_001, now, 1),
        (now.0 + 400_000_000, now, 2),
        (now.0 - 7_000_000_000, now, 1),
        (999_999_999, Nanos(900_000_000), 3),
        (5, Nanos(1), 1),
    ];
    for (i, (tat, at, cost)) in cases.into_iter().enumerate() {
        let user = format!("u{i}");
        let key = l.redis_key(user.as_bytes()).unwrap();
        let _: () = store
            .command(
                redis::cmd("SET")
                    .arg(&key)
                    .arg(tat.to_string())
                    .arg("PX")
                    .arg(60_000),
            )
            .await
            .unwrap();
        let mut state = GcraState { tat: Nanos(tat) };
        let want = g.check(&mut state, at, cost);
        let got = l.try_check_at(user.as_bytes(), at, cost).await.unwrap();
        assert_eq!(got, want, "case {i}: TAT {tat}, now {at:?}, cost {cost}");
        let stored: Vec<u8> = store.command(redis::cmd("GET").arg(&key)).await.unwrap();
        if want.allowed {
            assert!(stored.len() == 12 && stored[0] < 3, "case {i}: {stored:?}");
        } else {
            assert_eq!(
                stored,
                tat.to_string().into_bytes(),
                "case {i}: denial wrote"
            );
        }
        // the rewritten (or untouched) value reads back as the core's state
        let later = Nanos(at.0 + 30_000_000);
        let want = g.check(&mut state, later, 1);
        let got = l.try_check_at(user.as_bytes(), later, 1).await.unwrap();
        assert_eq!(got, want, "case {i}: the call after");
    }
    assert_eq!(common::assert_ttls_and_clean(&store, &prefix).await, 5);
}
