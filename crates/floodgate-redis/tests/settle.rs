//! Reserve and settle on the real Redis at Redis's own time: the instant charged comes
//! back from Redis, a debt extends the key's expiry, and bad settles are refused without
//! changing anything; through the scripts and through the Redis module.

mod common;

use std::time::Duration;

use floodgate_core::algorithms::{FixedWindow, Gcra, TokenBucket};
use floodgate_core::{AnyAlgorithm, Charge, Nanos, Rate};
use floodgate_redis::{Error, RedisLimiter, StoreConfig};

async fn limiter(url: &str, prefix: &str, alg: AnyAlgorithm) -> RedisLimiter {
    let store = common::store_with(
        url,
        StoreConfig {
            prefix: prefix.to_string(),
            deny_cache_keys: 0,
            ..StoreConfig::default()
        },
    )
    .await;
    RedisLimiter::new(store, alg).unwrap()
}

async fn pttl(l: &RedisLimiter, user: &[u8]) -> i64 {
    let key = l.redis_key(user).unwrap();
    l.store()
        .command(redis::cmd("PTTL").arg(key))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_debt_at_redis_time_extends_the_expiry_and_a_refund_gives_back() {
    a_debt_at_redis_time(common::SHARED).await;
}

/// The same through the Redis module (`FG.RESERVE`, `FG.SETTLE`), at the primary's clock.
#[tokio::test]
async fn the_modules_debt_at_redis_time_extends_the_expiry_and_a_refund_gives_back() {
    let server = common::Server::start_with_module();
    a_debt_at_redis_time(&server.url()).await;
    assert!(common::calls(&server, "fg.settle") >= 2);
    assert_eq!(common::calls(&server, "evalsha"), 0);
}

async fn a_debt_at_redis_time(url: &str) {
    let prefix = common::unique_prefix("settle");
    // 1,000 units a minute, estimated at 1, used 1,300: 300 units (18 s) of debt
    let tb = TokenBucket::new(1_000, Rate::per_minute(1_000).unwrap()).unwrap();
    let l = limiter(url, &prefix, AnyAlgorithm::TokenBucket(tb)).await;
    let (d, charge) = l.reserve(b"u", 1).await.unwrap();
    assert!(d.allowed);
    let charge = charge.unwrap();
    let wall = floodgate_core::Clock::now(&floodgate_core::WallClock);
    assert!(
        charge.at.0.abs_diff(wall.0) < 5_000_000_000,
        "Redis TIME: {charge:?}"
    );
    let s = l.settle(b"u", charge, 1_300).await.unwrap();
    assert_eq!((s.charged, s.decision.remaining), (1_299, 0));
    // full again 60 s + 18 s from now: the expiry follows
    let ttl = pttl(&l, b"u").await;
    assert!((77_000..=78_100).contains(&ttl), "PTTL {ttl}");
    let d = l.try_check(b"u", 1).await.unwrap();
    assert!(!d.allowed);
    assert!(d.retry_after.unwrap() > Duration::from_secs(18));
    // an estimate of 0 is not admitted while in debt
    let (d, c) = l.reserve(b"u", 0).await.unwrap();
    assert!(!d.allowed && c.is_none());

    let (_, c) = l.reserve(b"v", 500).await.unwrap();
    let s = l.settle(b"v", c.unwrap(), 120).await.unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (380, 880));
    common::assert_ttls_and_clean(l.store(), &prefix).await;
}

#[tokio::test]
async fn bad_settles_are_refused_and_change_nothing() {
    bad_settles(common::SHARED).await;
}

/// The same through the Redis module.
#[tokio::test]
async fn the_module_refuses_bad_settles_and_changes_nothing() {
    let server = common::Server::start_with_module();
    bad_settles(&server.url()).await;
    // (the store refuses the bad ones before sending them: one settle reaches Redis)
    assert_eq!(common::calls(&server, "fg.settle"), 1);
    assert_eq!(common::calls(&server, "evalsha"), 0);
}

async fn bad_settles(url: &str) {
    let prefix = common::unique_prefix("settlebad");
    let fw = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
    let l = limiter(url, &prefix, AnyAlgorithm::FixedWindow(fw)).await;
    let (_, c) = l.reserve(b"u", 4).await.unwrap();
    let c = c.unwrap();
    // an estimate no reservation of this policy could have charged
    let forged = Charge { cost: 11, ..c };
    let e = l.settle(b"u", forged, 0).await.unwrap_err();
    assert!(matches!(e, Error::Settle(_)), "{e}");
    assert!(e.to_string().contains("above the limit 10"), "{e}");
    // a debt beyond the exact range
    let e = l.settle(b"u", c, u64::MAX).await.unwrap_err();
    assert!(matches!(e, Error::Settle(_)), "{e}");
    // a time out of range
    let late = Charge {
        at: Nanos(u64::MAX),
        ..c
    };
    assert!(matches!(
        l.settle(b"u", late, 0).await,
        Err(Error::TimeOutOfRange { .. })
    ));
    assert_eq!(
        l.try_check(b"u", 0).await.unwrap().remaining,
        6,
        "nothing changed"
    );
    // a key never charged refunds nothing
    let s = l.settle(b"other", c, 0).await.unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (0, 10));

    // GCRA at 1 per day with a tolerance near the scripts' bound: a debt that would not
    // be exact is refused
    let g = Gcra::from_cell(100, 1, 86_400).unwrap();
    let l = limiter(url, &prefix, AnyAlgorithm::Gcra(g)).await;
    let (_, c) = l.reserve(b"g", 1).await.unwrap();
    let e = l.settle(b"g", c.unwrap(), 200).await.unwrap_err();
    assert!(matches!(e, Error::Settle(_)), "{e}");
    assert_eq!(l.try_check(b"g", 0).await.unwrap().remaining, 100);
    common::assert_ttls_and_clean(l.store(), &prefix).await;
}
