//! Clock faults: the wall clock steps backwards and forwards.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::algorithms::{FixedWindow, Gcra};
use floodgate_core::{Algorithm, AnyAlgorithm, Clock, Kind, Nanos, Rate, Spec, WallClock};
use floodgate_redis::{RedisLimiter, RedisStore, StoreConfig};

use crate::{Row, mem};

/// A client at 2x its rate for `secs` seconds of monotonic time while the wall clock steps
/// back an hour at one third and forward two hours at two thirds. A limiter driven by
/// the monotonic clock admits exactly `capacity + rate x duration`; one driven by the
/// wall clock is shown for contrast (the step forward refills it for free).
pub fn monotonic_vs_wall(secs: u64) -> Row {
    let start = mem::rss_kib();
    let rate = Rate::per_second(50).expect("valid");
    let gcra = Gcra::new(rate, 5).expect("valid");
    let (mut mono_state, mut wall_state) = (Default::default(), Default::default());
    let (mut mono, mut wall, mut requests) = (0u64, 0u64, 0u64);
    let base_wall: i128 = 1_700_000_000_000_000_000;
    let step = 10_000_000u64; // one request per 10 ms: 100/s against 50/s
    let n = secs * 100;
    for i in 0..n {
        let mono_now = Nanos(1_000_000_000 + i * step);
        let offset: i128 = if i < n / 3 {
            0
        } else if i < 2 * n / 3 {
            -3_600_000_000_000
        } else {
            3_600_000_000_000
        };
        let wall_now = Nanos((base_wall + (i * step) as i128 + offset) as u64);
        mono += u64::from(gcra.check(&mut mono_state, mono_now, 1).allowed);
        wall += u64::from(gcra.check(&mut wall_state, wall_now, 1).allowed);
        requests += 2;
    }
    // GCRA with capacity 5 at 50/s over the span of the requests
    let span_ns = (n - 1) * step;
    let expected = 5 + span_ns / gcra.emission_interval_nanos();
    let pass = mono == expected && wall != mono;
    Row {
        area: "clock",
        case: format!("wall steps -1h then +2h over {secs}s (GCRA 50/s)"),
        cases: 2,
        faults: 2,
        requests,
        lost: expected.saturating_sub(mono),
        duplicated: mono.saturating_sub(expected),
        panics: 0,
        mem_start_kib: start,
        mem_end_kib: mem::rss_kib(),
        pass,
        detail: format!(
            "monotonic-driven admitted {mono} = capacity + rate x t = {expected}; wall-driven admitted {wall} (the steps moved it by {})",
            wall as i64 - mono as i64
        ),
    }
}

/// Every algorithm fed a wall clock that steps back: a step back never grants quota
/// (time that goes backwards counts as no time passing), so admissions stay within what
/// the same traffic gets with no step at all.
pub fn backward_steps_grant_nothing() -> Row {
    let start = mem::rss_kib();
    let (mut requests, mut over, mut worst) = (0u64, 0u64, 0i64);
    for kind in Kind::ALL {
        let spec = Spec::new(kind, Rate::per_second(20).expect("valid"));
        let alg: AnyAlgorithm = spec.build().expect("valid");
        let (mut steady, mut stepped) = (Default::default(), Default::default());
        let (mut a, mut b) = (0u64, 0u64);
        for i in 0..2_000u64 {
            let t = 10_000_000_000 + i * 5_000_000; // 200/s
            // every 100 requests the stepped clock jumps back 3 s, and stays behind
            let back = (i / 100) * 3_000_000_000;
            a += u64::from(alg.check(&mut steady, Nanos(t), 1).allowed);
            b += u64::from(
                alg.check(&mut stepped, Nanos(t.saturating_sub(back)), 1)
                    .allowed,
            );
            requests += 2;
        }
        if b > a {
            over += b - a;
        }
        worst = worst.max(b as i64 - a as i64);
    }
    Row {
        area: "clock",
        case: "wall steps back 3s every 0.5s, all 7 algorithms".into(),
        cases: Kind::ALL.len() as u64,
        faults: 7 * 19,
        requests,
        lost: 0,
        duplicated: over,
        panics: 0,
        mem_start_kib: start,
        mem_end_kib: mem::rss_kib(),
        pass: over == 0,
        detail: format!(
            "admitted with steps minus without: at most {worst} (0 or less: no quota granted by a step back)"
        ),
    }
}

/// Two nodes whose clocks are skewed by +-`skew` share a fixed window (20 per 500 ms) on
/// Redis. Each decision tells where its window ends (`reset_after` after the moment it was
/// made); seen from the true clock, that boundary is where the nodes think windows start.
/// With Redis `TIME` as the source both nodes put every boundary at the same true instant
/// (the median offset is about one round trip) and no window admits more than the limit; with the
/// callers' skewed clocks each node moves the boundaries by its own skew.
pub async fn skewed_nodes_on_redis(
    url: &str,
    skew: Duration,
    windows: u32,
) -> Result<Row, floodgate_redis::Error> {
    let start = mem::rss_kib();
    let limit = 20u64;
    let window = Duration::from_millis(500);
    let w = floodgate_core::time::duration_to_nanos(window);
    let alg = AnyAlgorithm::FixedWindow(FixedWindow::new(limit, window).expect("valid"));
    let prefix = format!(
        "fg-reliability-{}-{}:",
        std::process::id(),
        WallClock.now().0
    );
    let store = Arc::new(
        RedisStore::connect(
            url,
            StoreConfig {
                prefix,
                ..StoreConfig::default()
            },
        )
        .await?,
    );
    let limiter = Arc::new(RedisLimiter::new(store, alg)?);
    let skew_ns = floodgate_core::time::duration_to_nanos(skew) as i128;
    let mut worst_count = [0u64; 2];
    let mut median_offset_ms = [0f64; 2];
    let mut requests = 0u64;
    for (mode, key) in [(0usize, "server-time"), (1, "caller-time")] {
        let now = WallClock.now().0;
        let next = (now / w + 1) * w;
        tokio::time::sleep(Duration::from_nanos(next - now + 5_000_000)).await;
        let mut per_window: std::collections::HashMap<i128, u64> = Default::default();
        let mut offsets: Vec<f64> = Vec::new();
        let deadline = next + w * windows as u64;
        while WallClock.now().0 < deadline {
            for node in 0..2i128 {
                let node_now = Nanos(
                    (WallClock.now().0 as i128 + if node == 0 { skew_ns } else { -skew_ns }) as u64,
                );
                let d = if mode == 0 {
                    limiter.check(key.as_bytes(), 1).await?
                } else {
                    limiter.check_at(key.as_bytes(), node_now, 1).await?
                };
                let received = WallClock.now().0 as i128;
                requests += 1;
                if d.decision.reset_after.is_zero() {
                    continue;
                }
                // the boundary this decision's window ends at, on the true clock
                let end = received + d.decision.reset_after.as_nanos() as i128;
                let nearest = (end + w as i128 / 2) / w as i128;
                let offset_ms = (end - nearest * w as i128) as f64 / 1e6;
                offsets.push(offset_ms.abs());
                if d.decision.allowed {
                    *per_window.entry(nearest).or_default() += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        worst_count[mode] = per_window.values().copied().max().unwrap_or(0);
        offsets.sort_by(f64::total_cmp);
        median_offset_ms[mode] = offsets.get(offsets.len() / 2).copied().unwrap_or(0.0);
    }
    let skew_ms = skew.as_secs_f64() * 1e3;
    Ok(Row {
        area: "clock",
        case: format!(
            "2 nodes skewed +-{}ms, fixed window on Redis",
            skew.as_millis()
        ),
        cases: 2,
        faults: 2,
        requests,
        lost: 0,
        duplicated: worst_count[0].saturating_sub(limit),
        panics: 0,
        mem_start_kib: start,
        mem_end_kib: mem::rss_kib(),
        pass: worst_count[0] <= limit
            && median_offset_ms[0] < skew_ms / 3.0
            && median_offset_ms[1] > skew_ms / 2.0,
        detail: format!(
            "Redis TIME: boundaries {:.1}ms from true (median), at most {} per window (limit {limit}); callers' clocks: boundaries {:.1}ms off (median)",
            median_offset_ms[0], worst_count[0], median_offset_ms[1]
        ),
    })
}
