//! The network faults of the reliability suite (crates/floodgate-reliability), two fast
//! cases on the real `floodgate` binary: three nodes and Redis in their own network
//! namespaces, node 0 partitioned from Redis (shared counter, fail closed), and every
//! node's Redis link 500 ms slow (hybrid, fail open). About 16 s; needs root for the
//! namespaces (scripts/test.sh reports the tests as skipped, by the test runner, when
//! not root).

use floodgate_reliability::netfaults::{Case, NetFault, Settings, render};
use floodgate_reliability::{netns, netrun};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_and_a_slow_link_keep_the_bounds_and_the_policy() {
    if let Err(e) = netns::available() {
        panic!(
            "network namespaces are needed (run as root; scripts/test.sh leaves this test out, reported as skipped, when it cannot make them): {e}"
        );
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

/// Node 0's wall clock stepped 1 s forward, then back, the nodes deciding on their own
/// clock (`store.redis.time = "caller"`): within the bound (C + r(W + lag) plus what the
/// step refills), and the step took effect: node 0, reading the shared state as older,
/// admits most of what is admitted while it lasts. About 8 s; needs namespaces and
/// libfaketime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_step_on_a_node_deciding_on_its_own_clock_stays_within_its_bound() {
    if let Err(e) = netns::available() {
        panic!(
            "network namespaces are needed (run as root; scripts/test.sh leaves this test out, reported as skipped, when it cannot make them): {e}"
        );
    }
    assert!(
        floodgate_reliability::netclock::libfaketime().is_some(),
        "libfaketime not found (Debian package faketime; scripts/setup.sh installs it)"
    );
    let cases = [Case {
        fault: NetFault::ClockStepCaller,
        strategy: "shared",
        policy: "fail-closed",
    }];
    let rows = netrun::run_all(&cases, &Settings::fast(BIN.into())).await;
    assert!(rows.iter().all(|r| r.pass), "\n{}", render(&rows));
    let (node0, others) = rows[0].step_admitted.expect("a clock fault");
    // without the step the three nodes share alike: node 0 about half of the others
    assert!(
        node0 > 2 * others,
        "node0 {node0}, others {others}\n{}",
        render(&rows)
    );
}
