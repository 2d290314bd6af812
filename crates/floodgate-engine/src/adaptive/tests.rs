//! The partitioned limiter on an explicit clock: no timed thresholds, only what the
//! rule and the algorithm say for a given sequence of events.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{ManualClock, Nanos};

use super::*;

fn classes() -> Vec<ClassSpec> {
    vec![
        ClassSpec {
            name: "critical".into(),
            share: 0.5,
        },
        ClassSpec {
            name: "default".into(),
            share: 0.3,
        },
        ClassSpec {
            name: "sheddable".into(),
            share: 0.2,
        },
    ]
}

const CRITICAL: usize = 0;
const DEFAULT: usize = 1;
const SHEDDABLE: usize = 2;

fn limiter(
    kind: AlgorithmKind,
    min: usize,
    initial: usize,
    max: usize,
) -> (PartitionedLimiter, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Nanos(1_000_000_000)));
    let spec = AdaptiveSpec::new(kind, min, initial, max)
        .unwrap()
        .with_classes(classes())
        .unwrap();
    (
        PartitionedLimiter::new("backend", spec, clock.clone()).unwrap(),
        clock,
    )
}

/// Run `n` rounds: each takes as many permits of `class` as admitted (up to `want`),
/// lets `rtt` pass and releases them all as `outcome`. Returns the limit after each round.
fn rounds(
    l: &PartitionedLimiter,
    clock: &ManualClock,
    class: usize,
    want: usize,
    rtt: Duration,
    outcome: Outcome,
    n: usize,
) -> Vec<usize> {
    (0..n)
        .map(|_| {
            let permits: Vec<_> = (0..want).map_while(|_| l.try_acquire(class).ok()).collect();
            clock.advance(rtt);
            for p in permits {
                p.release(outcome);
            }
            l.limit()
        })
        .collect()
}

#[test]
fn limit_falls_under_rising_latency_and_recovers_after() {
    let (l, clock) = limiter(AlgorithmKind::Gradient2, 4, 40, 200);
    let base = Duration::from_millis(10);
    // warm up at the baseline, the limit in use
    rounds(&l, &clock, CRITICAL, 200, base, Outcome::Success, 30);
    let before = l.limit();
    let under = rounds(&l, &clock, CRITICAL, 200, base * 8, Outcome::Success, 40);
    let low = *under.iter().min().unwrap();
    assert!(low < before, "limit did not fall: {before} -> {low}");
    let after = rounds(&l, &clock, CRITICAL, 200, base, Outcome::Success, 200);
    assert!(
        *after.last().unwrap() > low,
        "no recovery from {low}: {after:?}"
    );
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn aimd_drops_bring_the_limit_to_its_floor_not_below() {
    let (l, clock) = limiter(AlgorithmKind::Aimd, 4, 20, 50);
    let lows = rounds(
        &l,
        &clock,
        CRITICAL,
        50,
        Duration::from_millis(5),
        Outcome::Dropped,
        50,
    );
    assert_eq!(*lows.last().unwrap(), 4);
    assert!(lows.iter().all(|x| *x >= 4));
    let up = rounds(
        &l,
        &clock,
        CRITICAL,
        50,
        Duration::from_millis(5),
        Outcome::Success,
        50,
    );
    assert!(*up.last().unwrap() > 4);
}

#[test]
fn critical_admitted_while_sheddable_refused_under_pressure() {
    // L = 10: guarantees critical 5, default 3, sheddable 2
    let (l, _clock) = limiter(AlgorithmKind::Aimd, 10, 10, 10);
    // every class asks; sheddable takes its 2, default its 3, critical 4 of its 5
    let shed: Vec<_> = (0..2).map(|_| l.try_acquire(SHEDDABLE).unwrap()).collect();
    let def: Vec<_> = (0..3).map(|_| l.try_acquire(DEFAULT).unwrap()).collect();
    let mut crit: Vec<_> = (0..4).map(|_| l.try_acquire(CRITICAL).unwrap()).collect();
    // one place left, reserved for critical (demanding, 1 under its guarantee)
    let r = l.try_acquire(SHEDDABLE).unwrap_err();
    assert_eq!((r.class, r.queue_full, r.limit), (SHEDDABLE, false, 10));
    assert!(l.try_acquire(DEFAULT).is_err());
    crit.push(l.try_acquire(CRITICAL).unwrap());
    assert_eq!(l.in_flight(), 10);
    // full: nobody, critical included (never more than L in flight)
    assert!(l.try_acquire(CRITICAL).is_err());
    drop((shed, def, crit));
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn a_class_borrows_what_idle_classes_leave_unused() {
    let (l, clock) = limiter(AlgorithmKind::Aimd, 10, 10, 10);
    // only sheddable asks: it borrows the whole limit
    let shed: Vec<_> = (0..10).map(|_| l.try_acquire(SHEDDABLE).unwrap()).collect();
    assert_eq!(l.class_in_flight(SHEDDABLE), 10);
    // critical arrives: the limit is full, refused now...
    assert!(l.try_acquire(CRITICAL).is_err());
    // ...and as sheddable's permits come back, critical is demanding: its guarantee is
    // kept from sheddable
    drop(shed);
    let crit: Vec<_> = (0..5).map(|_| l.try_acquire(CRITICAL).unwrap()).collect();
    // sheddable: 5 in flight + critical's 0 unused + default idle -> it borrows default's
    let more: Vec<_> = (0..5).map(|_| l.try_acquire(SHEDDABLE).unwrap()).collect();
    assert!(l.try_acquire(SHEDDABLE).is_err());
    drop(more);
    // default arrives: within its guarantee of 3
    let def: Vec<_> = (0..3).map(|_| l.try_acquire(DEFAULT).unwrap()).collect();
    // sheddable may have its own 2
    let own: Vec<_> = (0..2).map(|_| l.try_acquire(SHEDDABLE).unwrap()).collect();
    assert!(l.try_acquire(SHEDDABLE).is_err());
    drop((crit, def, own));
    // past the demand window the other classes are idle again: sheddable borrows all
    clock.advance(Duration::from_secs(2));
    let all: Vec<_> = (0..10).map(|_| l.try_acquire(SHEDDABLE).unwrap()).collect();
    assert_eq!(all.len(), 10);
}

#[test]
fn a_higher_class_borrows_from_a_lower_one_first() {
    let (l, _clock) = limiter(AlgorithmKind::Aimd, 10, 10, 10);
    let _shed = l.try_acquire(SHEDDABLE).unwrap();
    // critical above its guarantee of 5: borrows, nothing is reserved above it
    let crit: Vec<_> = (0..9).map(|_| l.try_acquire(CRITICAL).unwrap()).collect();
    assert_eq!(crit.len(), 9);
    assert!(l.try_acquire(CRITICAL).is_err());
}

#[tokio::test(start_paused = true)]
async fn queue_serves_the_highest_class_first_then_first_come() {
    let clock = Arc::new(ManualClock::new(Nanos(1)));
    let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 2, 2, 2)
        .unwrap()
        .with_classes(vec![
            ClassSpec {
                name: "critical".into(),
                share: 0.0,
            },
            ClassSpec {
                name: "sheddable".into(),
                share: 0.0,
            },
        ])
        .unwrap()
        .with_queue(10, Duration::from_secs(5))
        .unwrap();
    let l = PartitionedLimiter::new("q", spec, clock).unwrap();
    let a = l.try_acquire(1).unwrap();
    let b = l.try_acquire(1).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (name, class) in [("s1", 1), ("s2", 1), ("c1", 0), ("c2", 0)] {
        let (l, order) = (l.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let got = l.acquire(class).await.unwrap();
            order.lock().unwrap().push(name);
            // hold it until released by the test's next step
            tokio::time::sleep(Duration::from_millis(10)).await;
            got.permit.release(Outcome::Ignore);
        }));
        tokio::task::yield_now().await;
    }
    assert_eq!(l.queued(), 4);
    a.release(Outcome::Ignore);
    b.release(Outcome::Ignore);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["c1", "c2", "s1", "s2"]);
    assert_eq!((l.queued(), l.in_flight()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn queue_refuses_past_its_deadline_and_when_full() {
    let clock = Arc::new(ManualClock::new(Nanos(1)));
    let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 1, 1, 1)
        .unwrap()
        .with_queue(1, Duration::from_millis(200))
        .unwrap();
    let l = PartitionedLimiter::new("q", spec, clock).unwrap();
    let held = l.try_acquire(0).unwrap();
    let waiter = {
        let l = l.clone();
        tokio::spawn(async move { l.acquire(0).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(l.queued(), 1);
    // the queue is full: refused at once
    let full = l.acquire(0).await.unwrap_err();
    assert!(full.queue_full);
    let start = tokio::time::Instant::now();
    let timed_out = waiter.await.unwrap().unwrap_err();
    assert!(!timed_out.queue_full);
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert_eq!(l.queued(), 0);
    drop(held);
    assert_eq!(l.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_leaves_the_queue_and_its_place() {
    let clock = Arc::new(ManualClock::new(Nanos(1)));
    let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 1, 1, 1)
        .unwrap()
        .with_queue(4, Duration::from_secs(10))
        .unwrap();
    let l = PartitionedLimiter::new("q", spec, clock).unwrap();
    let held = l.try_acquire(0).unwrap();
    let waiter = {
        let l = l.clone();
        tokio::spawn(async move { l.acquire(0).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(l.queued(), 1);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(l.queued(), 0);
    drop(held);
    assert_eq!(l.in_flight(), 0);
    assert!(l.try_acquire(0).is_ok());
}

#[test]
fn dry_run_admits_and_says_it_would_refuse() {
    let (l, _clock) = limiter(AlgorithmKind::Aimd, 2, 2, 2);
    let (a, no) = l.admit_shadow(CRITICAL);
    let (b, _) = l.admit_shadow(CRITICAL);
    let (c, yes) = l.admit_shadow(SHEDDABLE);
    assert!(!no && yes);
    assert_eq!(l.in_flight(), 3);
    drop((a, b, c));
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn bad_specs_are_errors_naming_the_field() {
    let err = |r: Result<AdaptiveSpec, floodgate_core::ConfigError>| r.unwrap_err().to_string();
    assert!(err(AdaptiveSpec::new(AlgorithmKind::Vegas, 0, 1, 2)).contains("min (0)"));
    assert!(err(AdaptiveSpec::new(AlgorithmKind::Vegas, 5, 4, 8)).contains("initial (4)"));
    assert!(
        err(AdaptiveSpec::new(AlgorithmKind::Vegas, 1, 1, MAX_LIMIT + 1)).contains("max_limit")
    );
    let ok = || AdaptiveSpec::new(AlgorithmKind::Gradient2, 1, 10, 100).unwrap();
    assert!(err(ok().with_queue(3, Duration::ZERO)).contains("queue_timeout"));
    assert!(err(ok().with_queue(3, Duration::from_secs(7200))).contains("queue_timeout"));
    let class = |name: &str, share: f64| ClassSpec {
        name: name.into(),
        share,
    };
    assert!(err(ok().with_classes(vec![])).contains("classes"));
    assert!(err(ok().with_classes(vec![class("a", f64::NAN)])).contains("share"));
    assert!(err(ok().with_classes(vec![class("a", -0.1)])).contains("share"));
    assert!(err(ok().with_classes(vec![class("a", 0.7), class("b", 0.7)])).contains("above 1"));
    assert!(err(ok().with_classes(vec![class("a", 0.1), class("a", 0.1)])).contains("twice"));
    assert!(err(ok().with_classes(vec![class("a b", 0.1)])).contains("class name"));
    assert!(
        AlgorithmKind::parse("cubic")
            .unwrap_err()
            .to_string()
            .contains("gradient2")
    );
    assert!(
        DropOn::parse(&["4xx"])
            .unwrap_err()
            .to_string()
            .contains("4xx")
    );
}

#[test]
fn drop_on_maps_statuses_to_outcomes() {
    let both = DropOn::default();
    assert_eq!(both.outcome(Some(200)), Outcome::Success);
    assert_eq!(both.outcome(Some(429)), Outcome::Success);
    assert_eq!(both.outcome(Some(500)), Outcome::Dropped);
    assert_eq!(both.outcome(None), Outcome::Dropped);
    let timeouts = DropOn::parse(&["timeout"]).unwrap();
    assert_eq!(timeouts.outcome(Some(500)), Outcome::Success);
    assert_eq!(timeouts.outcome(Some(504)), Outcome::Dropped);
    let none = DropOn::parse::<&str>(&[]).unwrap();
    assert_eq!(none.outcome(Some(504)), Outcome::Success);
}

#[test]
fn restart_times_from_now() {
    let (l, clock) = limiter(AlgorithmKind::Aimd, 1, 5, 5);
    let mut p = l.try_acquire(CRITICAL).unwrap();
    let granted = p.start();
    clock.advance(Duration::from_millis(100));
    p.restart();
    assert_eq!(
        p.start(),
        granted.saturating_add(Duration::from_millis(100))
    );
    p.release(Outcome::Success);
}

/// A limit of 1 with the three classes and a queue of `queue` places, each waited on at
/// most `timeout`.
fn one_place(queue: usize, timeout: Duration) -> PartitionedLimiter {
    one_place_on(Arc::new(ManualClock::new(Nanos(1))), queue, timeout)
}

/// [`one_place`] on `clock`.
fn one_place_on(clock: Arc<ManualClock>, queue: usize, timeout: Duration) -> PartitionedLimiter {
    let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 1, 1, 1)
        .unwrap()
        .with_classes(classes())
        .unwrap()
        .with_queue(queue, timeout)
        .unwrap();
    PartitionedLimiter::new("q", spec, clock).unwrap()
}

/// [`one_place`] with waits of 10 s, after ten critical requests of 10 ms each (its mean
/// latency: 10 ms).
fn one_place_learnt(queue: usize) -> PartitionedLimiter {
    let clock = Arc::new(ManualClock::new(Nanos(1)));
    let l = one_place_on(clock.clone(), queue, Duration::from_secs(10));
    rounds(
        &l,
        &clock,
        CRITICAL,
        1,
        Duration::from_millis(10),
        Outcome::Success,
        10,
    );
    l
}

type Waiting = tokio::task::JoinHandle<(Result<Admitted, Refused>, tokio::time::Instant)>;

/// Queue a request of `class` (the limit is full) and return its task, which ends with
/// the outcome and when it came.
async fn queue_one(l: &PartitionedLimiter, class: usize) -> Waiting {
    let task = {
        let l = l.clone();
        tokio::spawn(async move {
            let r = l.acquire(class).await;
            (r, tokio::time::Instant::now())
        })
    };
    tokio::task::yield_now().await;
    task
}

/// The class a waiter got its permit as, releasing it at once.
async fn served(task: Waiting) -> usize {
    let (r, _) = task.await.unwrap();
    let got = r.unwrap();
    let class = got.permit.class();
    got.permit.release(Outcome::Ignore);
    class
}

/// A waiter's refusal, which must be the queue-full one.
async fn evicted(task: Waiting) -> Refused {
    let (r, _) = task.await.unwrap();
    let refused = r.unwrap_err();
    assert!(refused.queue_full, "evicted as queue-full: {refused:?}");
    refused
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_evicts_the_lowest_class_last_queued_for_a_higher_one() {
    let l = one_place(3, Duration::from_secs(10));
    let held = l.try_acquire(CRITICAL).unwrap();
    let s1 = queue_one(&l, SHEDDABLE).await;
    let d1 = queue_one(&l, DEFAULT).await;
    let s2 = queue_one(&l, SHEDDABLE).await;
    assert_eq!(l.queued(), 3);
    // critical takes the place of the last sheddable, then of the first, then default's
    let c1 = queue_one(&l, CRITICAL).await;
    assert_eq!(l.queued(), 3);
    assert_eq!(evicted(s2).await.class, SHEDDABLE);
    let c2 = queue_one(&l, CRITICAL).await;
    assert_eq!(evicted(s1).await.class, SHEDDABLE);
    let c3 = queue_one(&l, CRITICAL).await;
    assert_eq!(evicted(d1).await.class, DEFAULT);
    assert_eq!(l.queued(), 3);
    // only critical waits now: one more critical finds the queue full
    let full = l.acquire(CRITICAL).await.unwrap_err();
    assert!(full.queue_full);
    assert_eq!(l.queued(), 3);
    held.release(Outcome::Ignore);
    // the queue was full: under pressure, newest first
    for c in [c3, c2, c1] {
        assert_eq!(served(c).await, CRITICAL);
    }
    assert_eq!((l.queued(), l.in_flight()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_never_evicted_by_its_own_class_or_a_lower_one() {
    let l = one_place(2, Duration::from_secs(10));
    let held = l.try_acquire(CRITICAL).unwrap();
    let c1 = queue_one(&l, CRITICAL).await;
    let d1 = queue_one(&l, DEFAULT).await;
    for class in [SHEDDABLE, DEFAULT] {
        let r = l.acquire(class).await.unwrap_err();
        assert_eq!((r.class, r.queue_full), (class, true));
        assert_eq!(l.queued(), 2);
    }
    let c2 = queue_one(&l, CRITICAL).await;
    assert_eq!(evicted(d1).await.class, DEFAULT);
    // two critical waiters: neither is evicted by a third
    let r = l.acquire(CRITICAL).await.unwrap_err();
    assert!(r.queue_full);
    held.release(Outcome::Ignore);
    // under pressure (the queue was full), newest first
    assert_eq!(served(c2).await, CRITICAL);
    assert_eq!(served(c1).await, CRITICAL);
    assert_eq!((l.queued(), l.in_flight()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn eviction_keeps_every_waiters_deadline() {
    let timeout = Duration::from_millis(200);
    let l = one_place(2, timeout);
    let held = l.try_acquire(CRITICAL).unwrap();
    let start = tokio::time::Instant::now();
    let s1 = queue_one(&l, SHEDDABLE).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let d1 = queue_one(&l, DEFAULT).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // at 100 ms critical evicts the sheddable waiter, which is refused then, not later
    let c1 = queue_one(&l, CRITICAL).await;
    let (r, at) = s1.await.unwrap();
    assert!(r.unwrap_err().queue_full);
    assert_eq!(at - start, Duration::from_millis(100));
    // the others wait out their own deadlines: queued at 50 and 100 ms
    let (r, at) = d1.await.unwrap();
    assert!(!r.unwrap_err().queue_full);
    assert_eq!(at - start, Duration::from_millis(250));
    let (r, at) = c1.await.unwrap();
    assert!(!r.unwrap_err().queue_full);
    assert_eq!(at - start, Duration::from_millis(300));
    assert_eq!(l.queued(), 0);
    drop(held);
    assert_eq!(l.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_class_under_pressure_is_served_newest_first_and_waits_are_cut_to_the_latency() {
    // the mean latency: 10 ms
    let l = one_place_learnt(3);
    let held = l.try_acquire(CRITICAL).unwrap();
    // no pressure yet: waiters with the whole queue_timeout
    let d1 = queue_one(&l, DEFAULT).await;
    let d2 = queue_one(&l, DEFAULT).await;
    let s1 = queue_one(&l, SHEDDABLE).await;
    // default takes sheddable's place (sheddable is under pressure, default is not)
    let d3 = queue_one(&l, DEFAULT).await;
    assert_eq!(evicted(s1).await.class, SHEDDABLE);
    // a default request finds the queue full of its own class: default under pressure
    assert!(l.acquire(DEFAULT).await.unwrap_err().queue_full);
    // a place frees up (d1 goes away); a default request queued now waits PRESSURE_WAIT x 10 ms
    d1.abort();
    let _ = d1.await;
    assert_eq!(l.queued(), 2);
    let start = tokio::time::Instant::now();
    let d4 = queue_one(&l, DEFAULT).await;
    let (r, at) = d4.await.unwrap();
    assert!(!r.unwrap_err().queue_full);
    assert_eq!(at - start, Duration::from_millis(10) * PRESSURE_WAIT);
    // a freed permit goes to the default waiter queued last
    held.release(Outcome::Ignore);
    tokio::task::yield_now().await;
    assert!(d3.is_finished() && !d2.is_finished());
    assert_eq!(served(d3).await, DEFAULT);
    assert_eq!(served(d2).await, DEFAULT);
    assert_eq!((l.queued(), l.in_flight()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn the_highest_class_stays_first_come_while_it_only_queues() {
    let l = one_place_learnt(2);
    let held = l.try_acquire(CRITICAL).unwrap();
    let c1 = queue_one(&l, CRITICAL).await;
    let d1 = queue_one(&l, DEFAULT).await;
    // critical takes default's place: default is under pressure, critical is not
    let c2 = queue_one(&l, CRITICAL).await;
    assert_eq!(evicted(d1).await.class, DEFAULT);
    held.release(Outcome::Ignore);
    tokio::task::yield_now().await;
    assert!(c1.is_finished() && !c2.is_finished());
    assert_eq!(served(c1).await, CRITICAL);
    assert_eq!(served(c2).await, CRITICAL);
    assert_eq!((l.queued(), l.in_flight()), (0, 0));
}
