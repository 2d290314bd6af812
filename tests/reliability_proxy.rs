//! The proxy-level part of the reliability suite (crates/floodgate-reliability), fast
//! sizes, on the real `floodgate` binary: the fault matrix (its own redis-server per
//! case, 50 ms store timeout, 500 ms upstream timeout) and a 10 s soak.

use floodgate_reliability::faults::{self, Fault};
use floodgate_reliability::{Row, render, soak};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

async fn matrix(filter: impl Fn(Fault) -> bool) -> Vec<Row> {
    let s = faults::Settings::fast(BIN.into());
    let mut rows = Vec::new();
    for f in Fault::ALL.into_iter().filter(|f| filter(*f)) {
        rows.push(faults::run(f, &s).await);
    }
    rows
}

fn assert_all_pass(rows: &[Row]) {
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|r| r.pass && r.panics == 0 && r.lost == 0 && r.duplicated == 0),
        "\n{}",
        render(rows)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_faults_apply_the_policy_without_hangs_and_resume() {
    assert_all_pass(&matrix(Fault::is_redis).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_and_client_faults_apply_the_policy_without_hangs_and_resume() {
    assert_all_pass(&matrix(|f| !f.is_redis()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_keeps_memory_and_descriptors_flat() {
    let row = soak::run(&soak::Settings::new(BIN.into(), 10)).await;
    assert_all_pass(&[row]);
}
