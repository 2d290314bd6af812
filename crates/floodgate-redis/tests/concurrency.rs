//! Many tokio tasks and several OS processes on one key of the shared Redis admit exactly
//! the limit; the local cache of denials saves round trips under a flood without ever
//! admitting more.

mod common;

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::algorithms::*;
use floodgate_core::{AnyAlgorithm, Kind, Rate};
use floodgate_redis::{RedisLimiter, Source, StoreConfig};

const LIMIT: u64 = 40;

fn algorithm(kind: &str) -> AnyAlgorithm {
    let hour = Duration::from_secs(3600);
    let rate = Rate::new(LIMIT, hour).unwrap();
    match kind.parse::<Kind>().unwrap() {
        Kind::Gcra => AnyAlgorithm::Gcra(Gcra::new(rate, LIMIT).unwrap()),
        Kind::TokenBucket => AnyAlgorithm::TokenBucket(TokenBucket::new(LIMIT, rate).unwrap()),
        Kind::SlidingLog => AnyAlgorithm::SlidingLog(SlidingLog::new(LIMIT, hour).unwrap()),
        Kind::FixedWindow => AnyAlgorithm::FixedWindow(FixedWindow::new(LIMIT, hour).unwrap()),
        other => panic!("not in this test: {other}"),
    }
}

const KINDS: [&str; 4] = ["gcra", "token-bucket", "sliding-log", "fixed-window"];

async fn limiter(prefix: &str, kind: &str, cache: bool) -> RedisLimiter {
    let store = common::store_with(
        common::SHARED,
        StoreConfig {
            prefix: prefix.to_string(),
            timeout: Duration::from_secs(5),
            deny_cache_keys: if cache { 1000 } else { 0 },
            ..StoreConfig::default()
        },
    )
    .await;
    RedisLimiter::new(store, algorithm(kind)).unwrap()
}

/// Not a test on its own: the body of the child processes of `processes_and_tasks...`.
#[tokio::test]
async fn hammer_child() {
    let Ok(spec) = std::env::var("FG_HAMMER") else {
        return;
    };
    let [prefix, kind, n]: [&str; 3] = spec.split('|').collect::<Vec<_>>().try_into().unwrap();
    let l = limiter(prefix, kind, false).await;
    let mut admitted = 0;
    for _ in 0..n.parse::<u32>().unwrap() {
        admitted += l.try_check(b"shared", 1).await.unwrap().allowed as u32;
    }
    println!("ADMITTED={admitted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_tasks_admit_exactly_the_limit() {
    let prefix = common::unique_prefix("conc");
    for kind in KINDS {
        let kprefix = format!("{prefix}{kind}:");
        // 3 child processes x 40 requests, started first ...
        let children: Vec<_> = (0..3)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["hammer_child", "--exact", "--nocapture"])
                    .env("FG_HAMMER", format!("{kprefix}|{kind}|40"))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // ... and 24 tasks x 5 requests in this process, at the same time
        let l = Arc::new(limiter(&kprefix, kind, false).await);
        let tasks: Vec<_> = (0..24)
            .map(|_| {
                let l = l.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    for _ in 0..5 {
                        n += l.try_check(b"shared", 1).await.unwrap().allowed as u64;
                    }
                    n
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        let in_process = admitted;
        for c in children {
            let out = tokio::task::spawn_blocking(move || c.wait_with_output().unwrap())
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let n: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("ADMITTED="))
                .unwrap_or_else(|| panic!("child said: {text}"))
                .parse()
                .unwrap();
            admitted += n;
        }
        // 120 + 120 requests for a limit of 40 per hour: exactly 40, from both sides
        assert_eq!(admitted, LIMIT, "{kind}: {in_process} in-process");
        assert!(l.try_check(b"shared", 1).await.unwrap().remaining == 0);
        common::assert_ttls_and_clean(l.store(), &kprefix).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cache_saves_round_trips_and_never_admits_more() {
    let prefix = common::unique_prefix("flood");
    for kind in KINDS {
        let kprefix = format!("{prefix}{kind}:");
        let l = Arc::new(limiter(&kprefix, kind, true).await);
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let l = l.clone();
                tokio::spawn(async move {
                    let (mut admitted, mut cached) = (0u64, 0u64);
                    for _ in 0..125 {
                        let o = l.check(b"flooded", 1).await.unwrap();
                        admitted += o.decision.allowed as u64;
                        if o.source == Source::DenyCache {
                            assert!(!o.decision.allowed && o.decision.retry_after.is_some());
                            cached += 1;
                        }
                    }
                    (admitted, cached)
                })
            })
            .collect();
        let (mut admitted, mut cached) = (0, 0);
        for t in tasks {
            let (a, c) = t.await.unwrap();
            admitted += a;
            cached += c;
        }
        let stats = l.store().stats();
        assert_eq!(admitted, LIMIT, "{kind}");
        assert_eq!(stats.deny_cache_hits, cached);
        assert_eq!(stats.redis_calls + cached, 2000, "{kind}: {stats:?}");
        // 2000 requests, 40 admitted: all but a few of the 1960 denials are local
        assert!(
            cached >= 1900,
            "{kind}: only {cached} answered locally, {stats:?}"
        );
        // a smaller request than the cached denial still goes to Redis
        let o = l.check(b"flooded", 0).await.unwrap();
        assert_eq!(o.source, Source::Redis);
        common::assert_ttls_and_clean(l.store(), &kprefix).await;
    }
}
