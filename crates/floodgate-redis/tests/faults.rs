//! Redis faults on our own redis-server: SIGSTOP (slow), SIGKILL and restart mid-load.
//! No panic, no caller waits past the timeout (+ slack), the fault policy is applied and
//! marked, a dead Redis costs one timeout per breaker interval, and service is back within
//! a second of Redis returning.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::algorithms::Gcra;
use floodgate_core::{AnyAlgorithm, Rate};
use floodgate_redis::{Fault, FaultPolicy, Outcome, RedisLimiter, Source, StoreConfig};
use tokio::sync::Mutex;

const TIMEOUT: Duration = Duration::from_millis(50);
const OPEN_FOR: Duration = Duration::from_millis(100);
// scheduling slack on a loaded 2-core CI machine
const SLACK: Duration = Duration::from_millis(150);

#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    took: Duration,
    outcome: Outcome,
}

async fn limiter(url: &str, policy: FaultPolicy) -> Arc<RedisLimiter> {
    let store = common::store_with(
        url,
        StoreConfig {
            prefix: "fg:".into(),
            timeout: TIMEOUT,
            breaker_open_for: OPEN_FOR,
            policy,
            deny_cache_keys: 0,
            ..StoreConfig::default()
        },
    )
    .await;
    let gcra = Gcra::new(Rate::per_second(1_000_000).unwrap(), 1_000_000).unwrap();
    Arc::new(RedisLimiter::new(store, AnyAlgorithm::Gcra(gcra)).unwrap())
}

/// Four callers each asking every 2 ms until `stop`, recording every call.
fn load(
    l: Arc<RedisLimiter>,
    log: Arc<Mutex<Vec<Sample>>>,
    stop: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|i| {
            let (l, log) = (l.clone(), log.clone());
            tokio::spawn(async move {
                let key = format!("caller{i}");
                while Instant::now() < stop {
                    let t0 = Instant::now();
                    let outcome = l.check(key.as_bytes(), 1).await.expect("no input error");
                    log.lock().await.push(Sample {
                        at: t0,
                        took: t0.elapsed(),
                        outcome,
                    });
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_kill_restart_under_load() {
    let mut server = common::Server::start();
    let open = limiter(&server.url(), FaultPolicy::FailOpen).await;
    let closed = limiter(&server.url(), FaultPolicy::FailClosed).await;
    let (log_open, log_closed) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let start = Instant::now();
    let stop = start + Duration::from_millis(2600);
    let mut tasks = load(open.clone(), log_open.clone(), stop);
    tasks.extend(load(closed.clone(), log_closed.clone(), stop));

    tokio::time::sleep(Duration::from_millis(300)).await;
    // each fault has two instants: before the signal is sent (`kill` is a process, it can
    // take tens of ms to run) and after it has surely taken effect; a sample belongs to
    // a window only where its state is certain
    let pausing_at = Instant::now();
    server.pause();
    let paused_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resuming_at = Instant::now();
    server.resume();
    let resumed_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let server_port = server.port;
    let handle = tokio::task::spawn_blocking(move || {
        server.kill();
        server
    });
    server = handle.await.unwrap();
    let killed_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let restarting_at = Instant::now();
    let handle = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    });
    server = handle.await.unwrap();
    assert_eq!(server.port, server_port);
    let restarted_at = Instant::now();
    for t in tasks {
        t.await.unwrap();
    }

    for (policy, log, l) in [
        (FaultPolicy::FailOpen, log_open, &open),
        (FaultPolicy::FailClosed, log_closed, &closed),
    ] {
        let log = log.lock().await.clone();
        assert!(log.len() > 200, "{policy:?}: only {} calls", log.len());
        // nobody waits past the timeout
        let worst = log.iter().map(|s| s.took).max().unwrap();
        assert!(
            worst <= TIMEOUT + SLACK,
            "{policy:?}: a caller waited {worst:?}"
        );
        // healthy before the pause: Redis answered, except where a starved call really
        // hit the per-call timeout (a loaded 2-core machine can do that) and the breaker
        // that timeout opened; never an error, and nearly always Redis
        let before: Vec<&Sample> = log.iter().filter(|s| s.at + TIMEOUT < pausing_at).collect();
        let from_redis = before
            .iter()
            .filter(|s| s.outcome.source == Source::Redis)
            .count();
        for s in &before {
            assert!(
                matches!(
                    s.outcome.source,
                    Source::Redis | Source::Fault(Fault::Timeout | Fault::CircuitOpen)
                ),
                "{policy:?}: before the pause: {s:?}"
            );
        }
        assert!(
            from_redis * 10 >= before.len() * 9,
            "{policy:?}: only {from_redis} of {} decisions before the pause came from Redis",
            before.len()
        );
        // during the pause and while dead: degraded, policy applied, marked
        let faulty: Vec<&Sample> = log
            .iter()
            .filter(|s| {
                (s.at > paused_at + TIMEOUT && s.at + TIMEOUT < resuming_at)
                    || (s.at > killed_at + TIMEOUT && s.at < restarting_at)
            })
            .collect();
        assert!(faulty.len() > 50, "{policy:?}");
        for s in &faulty {
            assert!(s.outcome.degraded(), "{policy:?}: {s:?}");
            assert_eq!(
                s.outcome.decision.allowed,
                policy == FaultPolicy::FailOpen,
                "{policy:?}: {s:?}"
            );
        }
        // the breaker: one timeout (or error) per interval, not one per request
        let stats = l.store().stats();
        eprintln!(
            "{policy:?}: {} calls, worst wait {worst:?}, {} faulty, {stats:?}",
            log.len(),
            faulty.len()
        );
        let dead_ms = 500 + 600;
        let max_probes = dead_ms / OPEN_FOR.as_millis() as u64 + 8;
        assert!(
            stats.timeouts + stats.errors <= max_probes + 8,
            "{policy:?}: {stats:?}"
        );
        assert!(
            stats.circuit_rejected > 10 * (stats.timeouts + stats.errors) / 2,
            "{policy:?}: {stats:?}"
        );
        assert_eq!(
            stats.degraded,
            log.iter().filter(|s| s.outcome.degraded()).count() as u64
        );
        // back within a second of each return
        for back in [resumed_at, restarted_at] {
            let first_ok = log
                .iter()
                .filter(|s| s.at >= back && s.outcome.source == Source::Redis)
                .map(|s| s.at)
                .min();
            if back == restarted_at && first_ok.is_none() {
                // the run ended just after the restart: check directly below
                continue;
            }
            let first_ok = first_ok.unwrap_or_else(|| panic!("{policy:?}: never recovered"));
            assert!(
                first_ok - back < Duration::from_secs(1),
                "{policy:?}: recovered after {:?}",
                first_ok - back
            );
        }
    }
    // after the restart, both limiters reach Redis again within a second
    for l in [&open, &closed] {
        let deadline = restarted_at + Duration::from_secs(1);
        loop {
            let o = l.check(b"after", 1).await.unwrap();
            if o.source == Source::Redis {
                break;
            }
            assert!(Instant::now() < deadline, "not back within 1 s: {o:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A store made while its Redis is down (`connect_or_retry`): returned at once with the
/// connection error, every decision the fault policy's, not reachable; once a Redis
/// listens on the address, decisions come from it and the store reports reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_made_while_redis_is_down_decides_on_redis_once_it_answers() {
    let mut server = common::Server::start();
    let url = server.url();
    server.kill();
    let config = StoreConfig {
        prefix: common::unique_prefix("late"),
        timeout: TIMEOUT,
        connect_timeout: Duration::from_millis(200),
        breaker_open_for: OPEN_FOR,
        policy: FaultPolicy::FailOpen,
        deny_cache_keys: 0,
        ..StoreConfig::default()
    };
    let t0 = Instant::now();
    let (store, err) = floodgate_redis::RedisStore::connect_or_retry(&url, config)
        .await
        .expect("an unreachable Redis is not an error");
    let err = err.expect("the connection error beside the store");
    assert!(err.to_string().contains("cannot connect"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(!store.reachable());
    // the background probe finds nothing either
    tokio::time::sleep(OPEN_FOR * 4).await;
    assert!(!store.reachable());
    let gcra = Gcra::new(Rate::per_second(1000).unwrap(), 10).unwrap();
    let l = RedisLimiter::new(store.clone(), AnyAlgorithm::Gcra(gcra)).unwrap();
    let o = l.check(b"k", 1).await.expect("a fault, not an input error");
    assert!(o.degraded(), "{o:?}");
    assert!(o.decision.allowed, "fail open");

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.reachable() {
        assert!(Instant::now() < deadline, "the store never reached Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut last = None;
    for _ in 0..50 {
        let o = l.check(b"k", 1).await.unwrap();
        if !o.degraded() {
            last = Some(o);
            break;
        }
        tokio::time::sleep(OPEN_FOR).await;
    }
    let o = last.expect("decisions from Redis once it answers");
    assert_eq!(o.source, Source::Redis, "{o:?}");
    assert_eq!(o.decision.remaining, 9, "the first charge on Redis: {o:?}");
}
