//! The distributed strategies' claims, as numbers from the simulator.

use floodgate_core::algorithms::DelayMode;
use floodgate_core::{Kind, Nanos, Spec};
use floodgate_dist::{Config, Event, Report, Skew, Strategy};

fn config(nodes: usize, skew: Skew) -> Config {
    Config {
        nodes,
        spec: Spec {
            kind: Kind::Gcra,
            rate: "100/min".parse().unwrap(),
            capacity: None,
            delay: DelayMode::NoDelay,
        },
        keys: 100,
        rps: 200,
        duration_ns: 60_000_000_000,
        skew,
        rtt_ns: 1_000_000,
        events: vec![],
        lease: 10,
        lease_ttl_ns: 1_000_000_000,
        seed: 7,
    }
}

fn run(c: &Config) -> Vec<Report> {
    floodgate_dist::sim::run(c, &Strategy::ALL).unwrap()
}

fn get(reports: &[Report], s: Strategy) -> &Report {
    reports.iter().find(|r| r.strategy == s).unwrap()
}

#[test]
fn local_share_denies_legitimate_traffic_on_the_hot_node_while_others_idle() {
    let r = run(&config(3, Skew::Pinned));
    let local = get(&r, Strategy::LocalShare);
    assert!(
        local.legit_denied * 10 > local.ideal * 3,
        "local share wastes over 30%: {local:?}"
    );
    for s in [Strategy::Sticky, Strategy::Shared, Strategy::Hybrid] {
        assert_eq!(get(&r, s).legit_denied, 0, "{s:?} wastes nothing here");
    }
}

#[test]
fn a_client_spreading_over_nodes_gets_n_times_the_limit_only_from_naive_local_buckets() {
    for nodes in [2usize, 3, 5] {
        let r = run(&config(nodes, Skew::Spread));
        let naive = get(&r, Strategy::Naive);
        let ideal = naive.ideal;
        // N copies of a full local limiter admit about N x the limit
        assert!(
            naive.admitted >= ideal * nodes as u64 - nodes as u64 * 2,
            "{nodes} nodes: {naive:?}"
        );
        for s in [Strategy::Sticky, Strategy::Shared] {
            assert_eq!(
                get(&r, s).admitted,
                ideal,
                "{nodes} nodes, {s:?}: 1x the limit"
            );
        }
        // limit / N per node: 1x, up to rounding of the per-node capacity
        let local = get(&r, Strategy::LocalShare);
        assert!(
            local.admitted <= ideal + nodes as u64,
            "{nodes} nodes: {local:?}"
        );
    }
}

#[test]
fn sticky_gives_fresh_bursts_after_a_node_failure() {
    let calm = get(&run(&config(3, Skew::Zipf)), Strategy::Sticky).clone();
    assert_eq!(calm.over_admitted, 0);
    let mut c = config(3, Skew::Zipf);
    c.events = vec![Event::Fail {
        node: 1,
        at: Nanos::from_secs(20),
    }];
    let failed = get(&run(&c), Strategy::Sticky).clone();
    assert!(failed.moved_keys > 0);
    assert!(
        failed.over_admitted > 0,
        "moved keys restart with a full burst: {failed:?}"
    );
    // a join moves keys too, and the newcomer knows nothing of them
    let mut c = config(3, Skew::Zipf);
    c.events = vec![Event::Join {
        at: Nanos::from_secs(20),
    }];
    let joined = get(&run(&c), Strategy::Sticky).clone();
    assert!(
        joined.moved_keys > 0 && joined.over_admitted > 0,
        "{joined:?}"
    );
}

#[test]
fn shared_is_exact_and_its_denial_cache_saves_round_trips() {
    let r = run(&config(3, Skew::HotKey));
    let shared = get(&r, Strategy::Shared);
    assert_eq!((shared.over_admitted, shared.legit_denied), (0, 0));
    assert!(
        shared.round_trips < shared.requests / 2,
        "denied floods answered locally: {shared:?}"
    );
}

#[test]
fn hybrid_stays_within_its_stated_bound() {
    for skew in [
        Skew::Uniform,
        Skew::Zipf,
        Skew::HotKey,
        Skew::Spread,
        Skew::Pinned,
    ] {
        for seed in 1..4 {
            for nodes in [2usize, 4] {
                let mut c = config(nodes, skew);
                c.seed = seed;
                let h = get(
                    &floodgate_dist::sim::run(&c, &[Strategy::Hybrid]).unwrap(),
                    Strategy::Hybrid,
                )
                .clone();
                assert_eq!(
                    h.over_admitted, 0,
                    "{skew:?}: every unit is charged before it is spent"
                );
                assert!(h.worst_excess <= nodes as u64 * c.lease, "{skew:?}: {h:?}");
                assert!(h.round_trips <= h.requests * 2);
            }
        }
    }
}

#[test]
fn bad_configs_are_errors() {
    let mut c = config(0, Skew::Uniform);
    assert!(
        floodgate_dist::sim::run(&c, &[Strategy::Shared])
            .unwrap_err()
            .to_string()
            .contains("nodes")
    );
    c.nodes = 3;
    c.rps = 0;
    assert!(floodgate_dist::sim::run(&c, &[Strategy::Shared]).is_err());
    c.rps = 1_000_000_000;
    assert!(
        floodgate_dist::sim::run(&c, &[Strategy::Shared])
            .unwrap_err()
            .to_string()
            .contains("above")
    );
    assert!("wat".parse::<Strategy>().is_err());
    assert!("wat".parse::<Skew>().is_err());
}
