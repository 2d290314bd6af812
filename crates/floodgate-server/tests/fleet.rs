//! Fleet strategies: `local` (each server enforces 1/N) and `hybrid` (leases from the
//! shared Redis counter, spent locally) with two real servers on the shared Redis.

mod common;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

#[tokio::test]
async fn local_share_enforces_one_nth_per_server() {
    let cfg = "fleet: {strategy: local, nodes: 3}\ndomain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 30}\n";
    let srv = start(cfg).await;
    let mut c = srv.client().await;
    let mut admitted = 0;
    let mut last = None;
    for _ in 0..20 {
        let r = call(&mut c, req("edge", vec![desc(&[("user", "u")])], 0))
            .await
            .unwrap();
        admitted += u32::from(r.overall_code == Code::Ok as i32);
        last = Some(r);
    }
    assert_eq!(admitted, 10, "30/min over 3 servers: a burst of 10 here");
    let r = last.unwrap();
    // the fields advertise what this server enforces: its share
    assert_eq!(
        header(&r, "RateLimit-Policy"),
        Some("\"user\";q=10;w=60;floodgate-capacity=10")
    );
    // the status still names the configured (fleet-wide) limit
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        30
    );
    srv.stop().await;
}

fn prefix() -> String {
    format!(
        "fgtest:server:fleet:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test]
async fn hybrid_fleet_admits_no_unit_not_charged_to_redis_and_saves_round_trips() {
    let p = prefix();
    let cfg = format!(
        "store: {{type: redis, redis: {{url: \"redis://127.0.0.1:6379\", prefix: \"{p}\"}}}}\nfleet: {{strategy: hybrid, nodes: 2, lease: 5, lease_ttl: 10s}}\ndomain: edge\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: 40}}\n"
    );
    let a = start(&cfg).await;
    let b = start(&cfg).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let mut admitted = 0;
    for i in 0..80 {
        let c = if i % 2 == 0 { &mut ca } else { &mut cb };
        let r = call(c, req("edge", vec![desc(&[("user", "hot")])], 0))
            .await
            .unwrap();
        admitted += u32::from(r.overall_code == Code::Ok as i32);
    }
    // Every admitted unit was charged to the shared GCRA first (capacity 40, refill 1 per
    // 90 s): never more than 40; at most nodes x lease = 10 sit unused in leases.
    assert!((30..=40).contains(&admitted), "admitted {admitted}");
    let events = |s: &Srv| {
        let m = s.running.engine.metrics().render();
        let get = |e: &str| -> u64 {
            let needle = format!("floodgate_store_events_total{{event=\"{e}\"}} ");
            m.lines()
                .find_map(|l| l.strip_prefix(&needle))
                .map_or(0, |v| v.trim().parse().unwrap())
        };
        (get("lease_admit"), get("round_trip"))
    };
    let (la, ra) = events(&a);
    let (lb, rb) = events(&b);
    eprintln!(
        "hybrid: admitted {admitted} of 80, lease admits {}, round trips {}",
        la + lb,
        ra + rb
    );
    assert!(la + lb > 0, "some decisions came from leases");
    assert!(ra + rb < 80, "fewer round trips than requests: {}", ra + rb);
    a.stop().await;
    b.stop().await;
    let mut c = redis::Client::open("redis://127.0.0.1:6379/")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{p}*"))
        .query_async(&mut c)
        .await
        .unwrap();
    for k in keys {
        let _: i64 = redis::cmd("DEL").arg(k).query_async(&mut c).await.unwrap();
    }
}
