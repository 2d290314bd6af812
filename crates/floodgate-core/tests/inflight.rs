//! Property tests of the in-flight lease table against a plain reference model: never more
//! than N live leases per key, expired leases free their place, a lease is released at
//! most once, and every decision's fields are the model's.

use std::time::Duration;

use floodgate_core::inflight::{KeyedInFlight, LeaseId, LeaseTtl};
use floodgate_core::{Decision, Nanos};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Advance time by this many µs.
    Wait(u64),
    /// Acquire on key k with a TTL in µs.
    Acquire(u8, u64),
    /// Release the i-th lease ever issued (modulo their count), on its own key or another.
    Release(usize, bool),
    /// Renew the i-th lease ever issued with a TTL in µs.
    Renew(usize, u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            (0u64..400).prop_map(Op::Wait),
            (0u8..3, 1u64..1000).prop_map(|(k, t)| Op::Acquire(k, t)),
            (any::<usize>(), any::<bool>()).prop_map(|(i, o)| Op::Release(i, o)),
            (any::<usize>(), 1u64..1000).prop_map(|(i, t)| Op::Renew(i, t)),
        ],
        1..300,
    )
}

/// The reference: per key, the list of (id, expiry) never released.
#[derive(Default)]
struct Model {
    leases: Vec<(u8, LeaseId, u64, bool)>, // key, id, expiry (ns), released
}

impl Model {
    fn live(&self, k: u8, now: u64) -> Vec<u64> {
        self.leases
            .iter()
            .filter(|l| l.0 == k && !l.3 && l.2 > now)
            .map(|l| l.2)
            .collect()
    }
}

proptest! {
    #[test]
    fn never_more_than_n_and_every_field_is_the_models(n in 1u64..5, ops in ops()) {
        let table: KeyedInFlight<u8> = KeyedInFlight::new(n, 1000).unwrap();
        let mut model = Model::default();
        let mut now = 1_000_000_000_000u64;
        for op in ops {
            match op {
                Op::Wait(us) => now += us * 1000,
                Op::Acquire(k, ttl_us) => {
                    let ttl = LeaseTtl::new(Duration::from_micros(ttl_us)).unwrap();
                    let live = model.live(k, now);
                    let got = table.acquire(&k, Nanos(now), ttl);
                    let until = |t: u64| Duration::from_nanos(t - now);
                    if (live.len() as u64) < n {
                        let lease = got.expect("a free place must be granted");
                        let exp = now + ttl_us * 1000;
                        prop_assert_eq!(lease.expires, Nanos(exp));
                        let latest = live.iter().copied().max().unwrap_or(0).max(exp);
                        prop_assert_eq!(
                            lease.decision,
                            Decision::allow(n, n - live.len() as u64 - 1, until(latest))
                        );
                        model.leases.push((k, lease.id, exp, false));
                    } else {
                        let d = got.expect_err("N live leases: denied");
                        let earliest = *live.iter().min().unwrap();
                        let latest = *live.iter().max().unwrap();
                        prop_assert_eq!(d, Decision::deny(n, 0, until(earliest), until(latest)));
                    }
                }
                Op::Release(i, other_key) => {
                    if model.leases.is_empty() { continue; }
                    let i = i % model.leases.len();
                    let (k, id, exp, released) = model.leases[i];
                    let key = if other_key { (k + 1) % 3 } else { k };
                    let freed = table.release(&key, id, Nanos(now));
                    let expect = !other_key && !released && exp > now;
                    prop_assert_eq!(freed, expect, "release of lease {} twice or expired", i);
                    if !other_key { model.leases[i].3 = true; }
                }
                Op::Renew(i, ttl_us) => {
                    if model.leases.is_empty() { continue; }
                    let i = i % model.leases.len();
                    let (k, id, exp, released) = model.leases[i];
                    let ttl = LeaseTtl::new(Duration::from_micros(ttl_us)).unwrap();
                    let ok = table.renew(&k, id, Nanos(now), ttl);
                    prop_assert_eq!(ok, !released && exp > now);
                    if ok { model.leases[i].2 = now + ttl_us * 1000; }
                }
            }
            for k in 0..3u8 {
                let live = table.in_flight(&k, Nanos(now));
                prop_assert!(live <= n, "key {} holds {} > {}", k, live, n);
                prop_assert_eq!(live, model.live(k, now).len() as u64);
            }
        }
    }

    #[test]
    fn expired_leases_free_capacity(n in 1u64..8, ttl_us in 1u64..10_000) {
        let table: KeyedInFlight<String> = KeyedInFlight::new(n, 10).unwrap();
        let ttl = LeaseTtl::new(Duration::from_micros(ttl_us)).unwrap();
        let t0 = Nanos::from_secs(1);
        for _ in 0..n { table.acquire("k", t0, ttl).unwrap(); }
        let d = table.acquire("k", t0, ttl).unwrap_err();
        prop_assert_eq!(d.retry_after, Some(Duration::from_micros(ttl_us)));
        // one ns before expiry: still full; at expiry: all N places again
        let before = Nanos(t0.0 + ttl_us * 1000 - 1);
        prop_assert!(table.acquire("k", before, ttl).is_err());
        let at = Nanos(t0.0 + ttl_us * 1000);
        for _ in 0..n { prop_assert!(table.acquire("k", at, ttl).is_ok()); }
        prop_assert!(table.acquire("k", at, ttl).is_err());
    }

    #[test]
    fn releasing_twice_never_frees_two_places(n in 2u64..6, extra in 1usize..5) {
        let table: KeyedInFlight<String> = KeyedInFlight::new(n, 10).unwrap();
        let ttl = LeaseTtl::new(Duration::from_secs(60)).unwrap();
        let now = Nanos::from_secs(1);
        let ids: Vec<LeaseId> = (0..n).map(|_| table.acquire("k", now, ttl).unwrap().id).collect();
        prop_assert!(table.release("k", ids[0], now));
        for _ in 0..extra { prop_assert!(!table.release("k", ids[0], now)); }
        // exactly one place came back
        prop_assert!(table.acquire("k", now, ttl).is_ok());
        prop_assert!(table.acquire("k", now, ttl).is_err());
        prop_assert_eq!(table.in_flight("k", now), n);
    }
}

#[test]
fn many_threads_on_one_key_never_exceed_n() {
    let table = std::sync::Arc::new(KeyedInFlight::<String>::new(4, 100).unwrap());
    let ttl = LeaseTtl::new(Duration::from_secs(60)).unwrap();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let running = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (table, peak, running) = (table.clone(), peak.clone(), running.clone());
            std::thread::spawn(move || {
                use std::sync::atomic::Ordering::SeqCst;
                for _ in 0..2000 {
                    if let Ok(l) = table.acquire("gpu", Nanos::from_secs(1), ttl) {
                        let r = running.fetch_add(1, SeqCst) + 1;
                        peak.fetch_max(r, SeqCst);
                        running.fetch_sub(1, SeqCst);
                        assert!(table.release("gpu", l.id, Nanos::from_secs(1)));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(peak.load(std::sync::atomic::Ordering::SeqCst) <= 4);
    assert_eq!(table.in_flight("gpu", Nanos::from_secs(1)), 0);
}
