//! Running the [network fault](crate::netfaults) cases on the [fleet](crate::fleet):
//! start it, load it from the client namespace, inject and heal the fault, check.

use std::time::{Duration, Instant};

use crate::fleet::{Clients, Fleet, NodeConfig};
use crate::load::{Shape, Worker};
use crate::netcheck::analyse;
use crate::netclock::STEP;
use crate::netfaults::{Case, NetFault, NetRow, Settings, Timeline, render};
use crate::relay::Toxics;

/// Run one case; a setup failure gives a failed row saying why.
pub async fn run(case: Case, s: &Settings, tag: char) -> NetRow {
    match run_case(case, s, tag).await {
        Ok(r) => r,
        Err(e) => NetRow {
            fault: case.fault.name(),
            strategy: case.strategy,
            policy: case.policy,
            admitted: 0,
            denied: 0,
            errors: 0,
            overshoot: 0,
            worst_count: 0,
            worst_bound: 0,
            bound_formula: String::new(),
            over_for_ms: 0,
            apply_ms: None,
            recover_ms: None,
            step_admitted: None,
            pass: false,
            detail: format!("setup failed: {e}"),
        },
    }
}

async fn run_case(case: Case, s: &Settings, tag: char) -> anyhow::Result<NetRow> {
    let cfg = NodeConfig {
        strategy: case.strategy,
        fault_policy: case.policy,
        store_timeout: s.store_timeout,
        lease: s.lease,
        rate: "20/s".into(),
        burst: 19,
        prefix: format!("fgnf-{}-{tag}:", std::process::id()),
        time: case.fault.time_source(),
        fake_clock: case.fault.is_clock(),
    };
    let mut fleet = Fleet::start(
        s.bin.clone(),
        s.nodes,
        cfg,
        tag,
        case.fault == NetFault::Failover,
    )
    .await?;
    let mut workers = Vec::new();
    for n in 0..s.nodes {
        let addr = fleet.node_addr(n);
        for (key, gap) in [
            ("hot-a", s.hot_gap),
            ("hot-b", s.hot_gap),
            ("calm", s.calm_gap),
        ] {
            workers.push(Worker {
                target: n,
                addr,
                shape: Shape::keyed("/", key),
                gap,
            });
        }
    }
    let clients = Clients::start(&fleet.net.client.name, workers, Duration::from_secs(10));
    tokio::time::sleep(s.healthy).await;
    let mut note = String::new();
    let unreplicated = if case.fault == NetFault::Failover {
        tokio::task::block_in_place(|| unreplicated(&fleet))
    } else {
        None
    };
    let t_fault = Instant::now();
    inject(&mut fleet, case.fault, true).await?;
    if case.fault == NetFault::Failover {
        // the fault lasts until Sentinel names the replica
        let promoted = promotion(&fleet, Duration::from_secs(15)).await;
        let Some(p) = promoted else {
            anyhow::bail!("Sentinel promoted no replica within 15 s");
        };
        for r in &fleet.relays {
            r.retarget(p);
        }
        note = format!(
            "; promoted {p} after {} ms, at most {} bytes unreplicated at the kill",
            t_fault.elapsed().as_millis(),
            unreplicated.map_or("?".to_string(), |b| b.to_string())
        );
    } else {
        tokio::time::sleep(s.fault_for.saturating_sub(t_fault.elapsed())).await;
    }
    let t_heal = Instant::now();
    inject(&mut fleet, case.fault, false).await?;
    tokio::time::sleep(s.after).await;
    let (samples, panics) = clients.stop().await?;
    let arrivals = fleet.backend.arrivals();
    let mut alive = true;
    let mut panicked = false;
    for p in fleet.nodes.iter_mut().flatten() {
        alive &= p.alive();
        panicked |= p.panicked();
    }
    let tl = Timeline {
        fault: t_fault,
        heal: t_heal,
    };
    let mut row = analyse(case, s, &tl, &samples, &arrivals);
    row.detail.push_str(&note);
    if panics > 0 || !alive || panicked {
        row.pass = false;
        row.detail.push_str(&format!(
            "; FAIL: client panics {panics}, nodes alive {alive}, node panicked {panicked}"
        ));
    }
    Ok(row)
}

async fn inject(fleet: &mut Fleet, fault: NetFault, on: bool) -> anyhow::Result<()> {
    match fault {
        NetFault::Partition => {
            let link = fleet.net.store_links[0].clone();
            tokio::task::block_in_place(|| link.set_up(!on))?;
        }
        NetFault::Latency50 | NetFault::Latency500 | NetFault::Loss5 => {
            let t = match (on, fault) {
                (false, _) => Toxics::NONE,
                (_, NetFault::Latency50) => {
                    Toxics::latency(Duration::from_millis(50), Duration::from_millis(10))
                }
                (_, NetFault::Latency500) => {
                    Toxics::latency(Duration::from_millis(500), Duration::from_millis(50))
                }
                _ => Toxics::loss(0.05, Duration::from_millis(200)),
            };
            for r in &fleet.relays {
                r.set(t);
            }
        }
        NetFault::Failover => {
            if on {
                tokio::task::block_in_place(|| fleet.redis.kill());
            }
        }
        NetFault::NodeKill => {
            if on {
                tokio::task::block_in_place(|| fleet.kill_node(0));
            } else {
                fleet.start_node(0).await?;
            }
        }
        NetFault::ClockStep | NetFault::ClockStepCaller => {
            let clock = fleet
                .clock
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("node 0 runs without libfaketime"))?;
            let to = if on { STEP.as_secs_f64() } else { 0.0 };
            clock.step_to(to)?;
        }
    }
    Ok(())
}

/// Bytes of the primary's replication stream the replica had not acknowledged, read
/// just before the kill (`INFO replication`: `master_repl_offset` less the replica's
/// `offset`). The replica acknowledges once a second, so this is an upper bound of what
/// a failover at that instant loses, not the loss itself (the auditor measures that).
fn unreplicated(fleet: &Fleet) -> Option<u64> {
    let info = fleet.redis.cli(&["INFO", "replication"]);
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(k))
            .map(str::to_owned)
    };
    let primary: u64 = field("master_repl_offset:")?.parse().ok()?;
    let replica: u64 = field("slave0:")?
        .split(',')
        .find_map(|kv| kv.strip_prefix("offset="))?
        .parse()
        .ok()?;
    Some(primary.saturating_sub(replica))
}

/// Wait until Sentinel names a primary other than the killed one.
async fn promotion(fleet: &Fleet, within: Duration) -> Option<std::net::SocketAddr> {
    let old = std::net::SocketAddr::new(fleet.redis.host, fleet.redis.port);
    let deadline = Instant::now() + within;
    let sentinel = fleet.sentinel.as_ref()?;
    while Instant::now() < deadline {
        let now = tokio::task::block_in_place(|| sentinel.primary());
        if let Some(p) = now.filter(|p| *p != old) {
            return Some(p);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Run `cases`, one fleet each (tags `a`, `b`, ... keep their names apart), printing
/// each row on stderr as it comes.
pub async fn run_all(cases: &[Case], s: &Settings) -> Vec<NetRow> {
    let swept = crate::netns::sweep_stale();
    if swept > 0 {
        eprintln!("removed {swept} namespaces and links left by killed runs");
    }
    let mut rows = Vec::new();
    let faketime = crate::netclock::libfaketime().is_some();
    for (i, c) in cases.iter().enumerate() {
        if c.fault.is_clock() && !faketime {
            eprintln!(
                "skipped {} {} {}: libfaketime not found (Debian package faketime; or set FLOODGATE_LIBFAKETIME)",
                c.fault.name(),
                c.strategy,
                c.policy
            );
            continue;
        }
        let tag = (b'a' + (i % 26) as u8) as char;
        let row = run(*c, s, tag).await;
        eprint!(
            "{}",
            render(std::slice::from_ref(&row))
                .lines()
                .nth(1)
                .unwrap_or("")
        );
        eprintln!();
        rows.push(row);
    }
    rows
}
