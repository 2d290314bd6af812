//! Reserve and settle through the [`DecisionStore`] trait: in process, on the real Redis
//! and on the hybrid store (with the `redis` feature), each all-or-nothing.

use std::sync::Arc;

use floodgate_core::{Kind, ManualClock, Nanos, Rate, Spec};
use floodgate_engine::{DecisionStore, LocalStore, PolicyInfo, StoreCheck};

fn policy(index: usize, name: &str, kind: Kind, rate: &str) -> PolicyInfo {
    let spec = Spec::new(kind, rate.parse::<Rate>().unwrap());
    PolicyInfo::new(index, name.into(), spec.clone(), spec.build().unwrap())
}

fn policies() -> Vec<PolicyInfo> {
    vec![
        policy(0, "per-user", Kind::TokenBucket, "1000/min"),
        policy(1, "global", Kind::FixedWindow, "1500/min"),
    ]
}

/// Reserve at 1 and settle at 300 until denied; then check the refund path and that a
/// denied reservation charged nothing. Returns what was admitted.
async fn budget(store: &dyn DecisionStore, p: &[PolicyInfo], user: &[u8]) -> u64 {
    let user = user.to_vec();
    let all = b"*".to_vec();
    let checks = |est| {
        [
            StoreCheck {
                policy: &p[0],
                key: &user,
                cost: est,
            },
            StoreCheck {
                policy: &p[1],
                key: &all,
                cost: est,
            },
        ]
    };
    let mut admitted = 0;
    for _ in 0..10 {
        let c = checks(1);
        let (d, r) = store.reserve(&c).await.unwrap();
        let Some(r) = r else {
            assert!(!d.allowed);
            break;
        };
        let s = store.settle(r, 300).await.unwrap();
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|s| s.charged == 299));
        admitted += 300;
    }
    admitted
}

#[tokio::test]
async fn in_process_a_debt_stops_the_next_reservation_and_a_refund_gives_back() {
    let p = policies();
    let clock = Arc::new(ManualClock::new(Nanos::from_secs(1_700_000_000)));
    let store = LocalStore::with_clock(&p, 100, clock).unwrap();
    // 4 x 300 = 1,200 > 1,000: the fourth settle puts the user in debt, the fifth is denied
    assert_eq!(budget(&store, &p, b"alice").await, 1_200);
    let (d, r) = store
        .reserve(&[StoreCheck {
            policy: &p[0],
            key: &b"alice".to_vec(),
            cost: 0,
        }])
        .await
        .unwrap();
    assert!(
        !d.allowed && r.is_none(),
        "an estimate of 0 waits for the debt"
    );
    // bob's reservation of 200 is refunded to 50; the global window (1,200 of 1,500 used)
    // is refunded too
    let bob = b"bob".to_vec();
    let all = b"*".to_vec();
    let c = [
        StoreCheck {
            policy: &p[0],
            key: &bob,
            cost: 200,
        },
        StoreCheck {
            policy: &p[1],
            key: &all,
            cost: 200,
        },
    ];
    let (d, r) = store.reserve(&c).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.decisions[1].remaining, 100);
    let s = store.settle(r.unwrap(), 50).await.unwrap();
    assert_eq!((s[0].refunded, s[0].decision.remaining), (150, 950));
    assert_eq!((s[1].refunded, s[1].decision.remaining), (150, 250));
    // a global denial charges bob nothing
    let c = [
        StoreCheck {
            policy: &p[0],
            key: &bob,
            cost: 300,
        },
        StoreCheck {
            policy: &p[1],
            key: &all,
            cost: 300,
        },
    ];
    let (d, r) = store.reserve(&c).await.unwrap();
    assert!(!d.allowed && r.is_none());
    assert_eq!(d.decisions[0].remaining, 950);
}

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;
    use floodgate_engine::{HybridStore, RedisDecisionStore};
    use floodgate_redis::{RedisStore, StoreConfig};
    use std::time::Duration;

    async fn connect(prefix: &str) -> Arc<RedisStore> {
        let config = StoreConfig {
            prefix: prefix.into(),
            deny_cache_keys: 0,
            ..StoreConfig::default()
        };
        Arc::new(
            RedisStore::connect("redis://127.0.0.1:6379", config)
                .await
                .unwrap(),
        )
    }

    async fn clean(store: &RedisStore, prefix: &str) {
        let keys: Vec<Vec<u8>> = store
            .command(redis::cmd("KEYS").arg(format!("{prefix}*")))
            .await
            .unwrap();
        for k in keys {
            let _: i64 = store.command(redis::cmd("DEL").arg(k)).await.unwrap();
        }
    }

    fn prefix(name: &str) -> String {
        format!("fgtest:engine-settle:{name}:{}:", std::process::id())
    }

    #[tokio::test]
    async fn on_redis_and_hybrid_the_same_budget_holds_and_a_denial_refunds_the_others() {
        let p = policies();
        for hybrid in [false, true] {
            let prefix = prefix(if hybrid { "hybrid" } else { "redis" });
            let r = connect(&prefix).await;
            let store: Box<dyn DecisionStore> = if hybrid {
                Box::new(
                    HybridStore::with_lease(r.clone(), &p, 2, 10, Duration::from_secs(1), 100)
                        .unwrap(),
                )
            } else {
                Box::new(RedisDecisionStore::new(r.clone(), &p).unwrap())
            };
            assert_eq!(budget(&*store, &p, b"alice").await, 1_200);
            // the global window has 300 left: bob's 400 is denied there, and his own
            // policy, reserved first, is refunded in full
            let bob = b"bob".to_vec();
            let all = b"*".to_vec();
            let c = [
                StoreCheck {
                    policy: &p[0],
                    key: &bob,
                    cost: 400,
                },
                StoreCheck {
                    policy: &p[1],
                    key: &all,
                    cost: 400,
                },
            ];
            let (d, res) = store.reserve(&c).await.unwrap();
            assert!(!d.allowed && res.is_none());
            assert_eq!(d.decisions[0].remaining, 1_000, "hybrid: {hybrid}");
            clean(&r, &prefix).await;
        }
    }
}
