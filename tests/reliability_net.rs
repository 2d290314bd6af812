//! The network faults of the reliability suite (crates/floodgate-reliability), two fast
//! cases on the real `floodgate` binary: three nodes and Redis in their own network
//! namespaces, node 0 partitioned from Redis (shared counter, fail closed), and every
//! node's Redis link 500 ms slow (hybrid, fail open). About 16 s; skipped with a message
//! where network namespaces cannot be made (not root, no `ip`).

use floodgate_reliability::netfaults::{Case, NetFault, Settings, render};
use floodgate_reliability::{netns, netrun};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_and_a_slow_link_keep_the_bounds_and_the_policy() {
    if let Err(e) = netns::available() {
        eprintln!("skipped: {e}");
        return;
    }
    let cases = [
        Case {
            fault: NetFault::Partition,
            strategy: "shared",
            policy: "fail-closed",
        },
        Case {
            fault: NetFault::Latency500,
            strategy: "hybrid",
            policy: "fail-open",
        },
    ];
    let rows = netrun::run_all(&cases, &Settings::fast(BIN.into())).await;
    assert!(rows.iter().all(|r| r.pass), "\n{}", render(&rows));
    // the shared counter: never over its exact bound
    assert!(rows[0].overshoot <= 0, "\n{}", render(&rows));
}
