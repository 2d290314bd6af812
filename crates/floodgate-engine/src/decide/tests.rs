use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate_core::{Kind, Rate, Spec};

use super::*;
use crate::fault::StoreErrorKind;
use crate::store::BoxFuture;

fn infos(limits: &[u64]) -> Vec<PolicyInfo> {
    limits
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let spec = Spec::new(Kind::FixedWindow, Rate::per_minute(n).unwrap());
            let alg = spec.build().unwrap();
            PolicyInfo::new(i, format!("p{i}"), spec, alg)
        })
        .collect()
}

fn check<'a>(p: &'a PolicyInfo, key: &'a Vec<u8>, cost: u64, role: Role) -> Check<'a> {
    Check {
        policy: p,
        key,
        cost,
        role,
    }
}

fn never_fails(e: &StoreError) {
    panic!("no fault expected: {e}");
}

#[test]
fn enforced_checks_are_all_or_nothing() {
    let k = b"k".to_vec();
    let infos = infos(&[5, 2]);
    let store = LocalStore::new(&infos, 100).unwrap();
    let policy = FaultPolicy::default();
    let checks = [
        check(&infos[0], &k, 1, Role::Enforced),
        check(&infos[1], &k, 1, Role::Enforced),
    ];
    for _ in 0..2 {
        let d = decide_now(&store, &policy, &checks, &mut never_fails).unwrap();
        assert!(d.admitted);
        assert_eq!(d.fault, None);
    }
    let d = decide_now(&store, &policy, &checks, &mut never_fails).unwrap();
    assert!(!d.admitted);
    assert_eq!(d.binding(&checks), Some(1));
    // the admitting policy was not charged by the denied request
    assert_eq!(d.decisions[0].remaining, 3);
    assert_eq!(d.delay(&checks), Duration::ZERO);
}

#[test]
fn a_shadow_check_is_charged_on_its_own_and_never_denies() {
    let k = b"k".to_vec();
    let infos = infos(&[5, 1]);
    let store = LocalStore::new(&infos, 100).unwrap();
    let policy = FaultPolicy::default();
    let checks = [
        check(&infos[0], &k, 1, Role::Enforced),
        check(&infos[1], &k, 1, Role::Shadow),
    ];
    let first = decide_now(&store, &policy, &checks, &mut never_fails).unwrap();
    assert!(first.admitted && first.decisions[1].allowed);
    let second = decide_now(&store, &policy, &checks, &mut never_fails).unwrap();
    assert!(second.admitted, "a shadow denial never denies");
    assert!(!second.decisions[1].allowed, "but it is reported");
    assert_eq!(second.binding(&checks), None);
    assert_eq!(
        second.decisions[0].remaining, 3,
        "the enforced check was charged twice"
    );
}

#[test]
fn a_blocking_check_denies_and_the_enforced_ones_are_only_looked_at() {
    let (k, kb) = (b"k".to_vec(), b"b".to_vec());
    let infos = infos(&[5]);
    let store = LocalStore::new(&infos, 100).unwrap();
    let policy = FaultPolicy::default();
    let blocking = &infos[0]; // its store policy is never asked
    let checks = [
        check(&infos[0], &k, 1, Role::Enforced),
        check(blocking, &kb, 1, Role::Blocking),
    ];
    let d = decide_now(&store, &policy, &checks, &mut never_fails).unwrap();
    assert!(!d.admitted);
    assert_eq!(d.binding(&checks), Some(1));
    assert_eq!(d.decisions[0].remaining, 5, "looked at with cost 0");
    // a blocking check of cost 0 denies nothing
    let peek = [check(blocking, &kb, 0, Role::Blocking)];
    assert!(
        decide_now(&store, &policy, &peek, &mut never_fails)
            .unwrap()
            .admitted
    );
}

/// A store whose every call fails with `kind`.
struct Failing(StoreErrorKind, AtomicUsize);

impl DecisionStore for Failing {
    fn check<'a>(
        &'a self,
        _: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>> {
        self.1.fetch_add(1, Ordering::Relaxed);
        let e = StoreError {
            store: "failing",
            kind: self.0.clone(),
        };
        Box::pin(std::future::ready(Err(e)))
    }
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_transient_fault_is_decided_by_the_fault_policy_and_reported() {
    let k = b"k".to_vec();
    let infos = infos(&[5, 5]);
    let store = Failing(StoreErrorKind::Timeout, AtomicUsize::new(0));
    let stores = Stores {
        store: &store,
        local: None,
    };
    let checks = [
        check(&infos[0], &k, 1, Role::Enforced),
        check(&infos[1], &k, 1, Role::Shadow),
    ];
    for (failure, admitted) in [(StoreFailure::Allow, true), (StoreFailure::Deny, false)] {
        let policy = FaultPolicy {
            failure,
            retry: Duration::from_millis(250),
        };
        let mut faults = 0;
        let d = run(decide(stores, &policy, &checks, &mut |e| {
            assert_eq!(e.label(), "timeout");
            faults += 1;
        }))
        .unwrap();
        assert_eq!(
            faults, 2,
            "the shadow's fault and the enforced checks' fault"
        );
        assert_eq!(d.admitted, admitted);
        assert_eq!(d.fault, Some(failure));
        assert!(d.decisions[1].allowed, "a shadow check's fault admits it");
        assert_eq!(d.decisions[0].allowed, admitted);
        if !admitted {
            assert_eq!(d.decisions[0].retry_after, Some(Duration::from_millis(250)));
        }
    }
}

#[test]
fn a_refusal_is_an_error() {
    let k = b"k".to_vec();
    let infos = infos(&[5]);
    let store = Failing(
        StoreErrorKind::Refused("no such policy".into()),
        AtomicUsize::new(0),
    );
    let stores = Stores {
        store: &store,
        local: None,
    };
    let checks = [check(&infos[0], &k, 1, Role::Enforced)];
    let mut faults = 0;
    let e = run(decide(
        stores,
        &FaultPolicy::default(),
        &checks,
        &mut |_| faults += 1,
    ))
    .unwrap_err();
    assert_eq!(e.label(), "refused");
    assert_eq!(faults, 1);
}

#[test]
fn the_async_and_the_immediate_procedures_agree() {
    let k = b"k".to_vec();
    let infos = infos(&[3, 2]);
    let a = LocalStore::new(&infos, 100).unwrap();
    let b = LocalStore::new(&infos, 100).unwrap();
    let policy = FaultPolicy::default();
    let checks = [
        check(&infos[0], &k, 1, Role::Enforced),
        check(&infos[1], &k, 1, Role::Shadow),
    ];
    for _ in 0..5 {
        let now = decide_now(&a, &policy, &checks, &mut never_fails).unwrap();
        let stores = Stores {
            store: &b,
            local: None,
        };
        let later = run(decide(stores, &policy, &checks, &mut never_fails)).unwrap();
        assert_eq!(now.admitted, later.admitted);
        for (x, y) in now.decisions.iter().zip(&later.decisions) {
            assert_eq!((x.allowed, x.remaining), (y.allowed, y.remaining));
        }
    }
}
