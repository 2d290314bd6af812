//! The fast part of the reliability suite, in the default test run.

use std::time::Duration;

use floodgate_core::Kind;
use floodgate_reliability::{clock, exactness, guarded, render, rotation};

#[test]
fn key_rotation_attack_keeps_the_cap_memory_and_steady_limits() {
    let row = rotation::run(rotation::Attack {
        keys: 300_000,
        cap: 5_000,
        steady: 10,
        mem_bound_kib: 32 * 1024,
    });
    assert!(row.pass, "{}", render(&[row]));
}

#[test]
fn clock_steps_do_not_bend_monotonic_rates_or_grant_quota() {
    for row in [
        clock::monotonic_vs_wall(30),
        clock::backward_steps_grant_nothing(),
    ] {
        assert!(row.pass, "{}", render(&[row]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_nodes_agree_on_windows_with_redis_time() {
    let row =
        clock::skewed_nodes_on_redis("redis://127.0.0.1:6379/", Duration::from_millis(150), 2)
            .await
            .expect("the shared Redis on 127.0.0.1:6379");
    assert!(row.pass, "{}", render(&[row]));
}

#[test]
fn every_exact_algorithm_passes_the_audit_under_threads() {
    let rows: Vec<_> = Kind::ALL
        .into_iter()
        .filter(|k| *k != Kind::LeakyQueue)
        .map(|k| guarded("exactness", k.name(), move || exactness::audit(k, 4, 40, 5)))
        .collect();
    assert!(
        rows.iter().all(|r| r.pass && r.panics == 0 && r.lost == 0),
        "{}",
        render(&rows)
    );
}
