//! `FG.ACQUIRE` on a hot key holding many live leases: the leases are a sorted set
//! scored by expiry, so an acquire finds the expired ones, the count and the earliest
//! and latest lease in O(log n) (plus the expired ones it removes), whatever the number
//! of live leases. Measured on the server's own clock (`INFO commandstats`), so the
//! round trips of the test's client do not count.

mod support;

use std::time::Duration;

use redis::Connection;
use support::{module_path, start_redis};

fn connect(port: u16) -> Connection {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let conn = c.get_connection().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    conn
}

/// `FG.ACQUIRE key id limit ttl_us 0 redis` for each id, pipelined: the replies.
fn acquire_all(
    c: &mut Connection,
    key: &str,
    ids: std::ops::Range<u64>,
    limit: u64,
    ttl_us: u64,
) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    let ids: Vec<u64> = ids.collect();
    for chunk in ids.chunks(5_000) {
        let mut p = redis::pipe();
        for id in chunk {
            p.cmd("FG.ACQUIRE")
                .arg(key)
                .arg(*id)
                .arg(limit)
                .arg(ttl_us)
                .arg(0)
                .arg("redis");
        }
        let replies: Vec<Vec<i64>> = p.query(c).unwrap();
        out.extend(replies);
    }
    out
}

/// Microseconds per `FG.ACQUIRE` the server spent since its stats were reset.
fn usec_per_acquire(c: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_fg.acquire:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no fg.acquire in {info}"))
}

/// The server's cost of `n` acquires on `key` (half admitted, half at a limit of 1 so
/// denied), in us per call, at the median of three rounds.
fn cost(c: &mut Connection, key: &str, first_id: u64, n: u64) -> f64 {
    let mut rounds = Vec::new();
    for r in 0..3 {
        let base = first_id + r * 2 * n;
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
        let admitted = acquire_all(c, key, base..base + n, u64::MAX >> 1, 3_600_000_000);
        assert!(admitted.iter().all(|r| r[0] == 1));
        let denied = acquire_all(c, key, base + n..base + 2 * n, 1, 3_600_000_000);
        assert!(denied.iter().all(|r| r[0] == 0));
        rounds.push(usec_per_acquire(c));
    }
    rounds.sort_by(f64::total_cmp);
    rounds[1]
}

#[test]
fn acquire_costs_the_same_at_a_hundred_thousand_live_leases() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    // 1,000 live leases, then 100,000: the cost per call must not grow with them (it
    // would be about 100 times higher if an acquire walked the live leases)
    let limit = u64::MAX >> 1;
    acquire_all(&mut c, "hot", 0..1_000, limit, 3_600_000_000);
    let small = cost(&mut c, "hot", 1_000_000, 1_000);
    let live: u64 = redis::cmd("ZCARD").arg("hot").query(&mut c).unwrap();
    acquire_all(&mut c, "hot", 1_000..100_000, limit, 3_600_000_000);
    let large = cost(&mut c, "hot", 2_000_000, 1_000);
    let live_large: u64 = redis::cmd("ZCARD").arg("hot").query(&mut c).unwrap();
    assert!(live < 5_000 && live_large > 100_000, "{live} {live_large}");
    assert!(
        large <= small * 4.0 + 2.0,
        "{small:.2} us per acquire at {live} leases, {large:.2} at {live_large}"
    );
    eprintln!("{small:.2} us per acquire at {live} live leases, {large:.2} at {live_large}");

    // the expired leases of a hot key go as they expire, each once: 20,000 leases of
    // 1 ms, then an acquire removes them all and counts only the live ones
    acquire_all(&mut c, "churn", 0..20_000, limit, 1_000);
    std::thread::sleep(Duration::from_millis(20));
    let r = &acquire_all(&mut c, "churn", 20_000..20_001, limit, 3_600_000_000)[0];
    assert_eq!(r[..2], [1, 1], "{r:?}");
    let left: u64 = redis::cmd("ZCARD").arg("churn").query(&mut c).unwrap();
    assert_eq!(left, 1);
}
