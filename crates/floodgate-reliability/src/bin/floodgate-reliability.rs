//! `floodgate-reliability [--long] [--json] [--only AREAS]`: run the suite, print one table.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use floodgate_core::Kind;
use floodgate_reliability::{
    Row, clock, exactness, faults, guarded, netfaults, netns, netrun, procs, render, rotation, soak,
};

/// floodgate's reliability suite. The fast part (default) takes seconds per area; --long
/// runs the full sizes (10 million rotating keys, longer audits, faults held 5 s, a
/// 5-minute soak).
#[derive(Parser)]
struct Args {
    /// Full sizes: 10M keys, more rounds, longer faults and soak.
    #[arg(long)]
    long: bool,
    /// Redis for the skewed-clock case.
    #[arg(long, default_value = "redis://127.0.0.1:6379/")]
    redis: String,
    /// Run each fuzz target for this many seconds (0 skips; default 30, --long 120).
    #[arg(long)]
    fuzz_secs: Option<u64>,
    /// Soak length in seconds (0 skips; default 10, --long 300).
    #[arg(long)]
    soak_secs: Option<u64>,
    /// The floodgate binary for the fault matrix and the soak (default: FLOODGATE_BIN,
    /// else `floodgate` next to this executable).
    #[arg(long)]
    floodgate_bin: Option<PathBuf>,
    /// Only these areas, comma-separated: rotation, clock, exactness, fuzz, faults, soak,
    /// net (network faults on a fleet in namespaces; needs root and `ip`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Network faults: only the cases whose "fault strategy policy" contains this text
    /// (e.g. "sticky", "failover", "partition node0-redis hybrid").
    #[arg(long)]
    net_filter: Option<String>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

fn failed(area: &'static str, case: &str, detail: String) -> Row {
    Row {
        area,
        case: case.into(),
        cases: 0,
        faults: 0,
        requests: 0,
        lost: 0,
        duplicated: 0,
        panics: 0,
        mem_start_kib: 0,
        mem_end_kib: 0,
        pass: false,
        detail,
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let want = |area: &str| args.only.is_empty() || args.only.iter().any(|a| a == area);
    let (keys, cap, rounds) = if args.long {
        (10_000_000, 100_000, 400)
    } else {
        (1_000_000, 10_000, 60)
    };
    let mut rows: Vec<Row> = Vec::new();
    if want("rotation") {
        rows.push(guarded("rotation", "attack", || {
            rotation::run(rotation::Attack {
                keys,
                cap,
                steady: 10,
                mem_bound_kib: 64 * 1024,
            })
        }));
    }
    if want("clock") {
        rows.push(guarded("clock", "monotonic", || {
            clock::monotonic_vs_wall(if args.long { 600 } else { 60 })
        }));
        rows.push(guarded(
            "clock",
            "backward",
            clock::backward_steps_grant_nothing,
        ));
        match clock::skewed_nodes_on_redis(
            &args.redis,
            Duration::from_millis(150),
            if args.long { 8 } else { 2 },
        )
        .await
        {
            Ok(r) => rows.push(r),
            Err(e) => eprintln!("skipped the Redis clock case: {e}"),
        }
    }
    if want("exactness") {
        for kind in [
            Kind::SlidingLog,
            Kind::FixedWindow,
            Kind::Gcra,
            Kind::TokenBucket,
            Kind::LeakyMeter,
            Kind::SlidingCounter,
        ] {
            rows.push(guarded("exactness", kind.name(), move || {
                exactness::audit(kind, 4, rounds, 5)
            }));
        }
    }
    let soak_secs = args.soak_secs.unwrap_or(if args.long { 300 } else { 10 });
    if want("faults") || (want("soak") && soak_secs > 0) {
        let bin = match args.floodgate_bin.clone() {
            Some(b) => Ok(b),
            None => procs::find_floodgate_bin(),
        };
        match bin {
            Ok(bin) => {
                if want("faults") {
                    let s = if args.long {
                        faults::Settings::long(bin.clone())
                    } else {
                        faults::Settings::fast(bin.clone())
                    };
                    for f in faults::Fault::ALL {
                        let row = faults::run(f, &s).await;
                        eprintln!(
                            "{}",
                            render(std::slice::from_ref(&row))
                                .lines()
                                .nth(1)
                                .unwrap_or("")
                        );
                        rows.push(row);
                    }
                }
                if want("soak") && soak_secs > 0 {
                    rows.push(soak::run(&soak::Settings::new(bin, soak_secs)).await);
                }
            }
            Err(e) => rows.push(failed("faults", "floodgate binary", e.to_string())),
        }
    }
    let mut net_rows = Vec::new();
    if want("net") {
        match (
            netns::available(),
            args.floodgate_bin
                .clone()
                .map_or_else(procs::find_floodgate_bin, Ok),
        ) {
            (Err(e), _) => eprintln!("skipped the network faults: {e}"),
            (Ok(()), Err(e)) => rows.push(failed("net", "floodgate binary", e.to_string())),
            (Ok(()), Ok(bin)) => {
                // Ctrl-C or SIGTERM mid-run: kill what runs in the namespaces, remove them
                tokio::spawn(async {
                    let mut term =
                        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                            .ok();
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
                    }
                    netns::cleanup_all();
                    eprintln!("interrupted: namespaces removed");
                    std::process::exit(130);
                });
                let (s, cases) = if args.long {
                    (netfaults::Settings::long(bin), netfaults::long_cases())
                } else {
                    (netfaults::Settings::fast(bin), netfaults::fast_cases())
                };
                let cases: Vec<_> = cases
                    .into_iter()
                    .filter(|c| {
                        args.net_filter.as_deref().is_none_or(|f| {
                            format!("{} {} {}", c.fault.name(), c.strategy, c.policy).contains(f)
                        })
                    })
                    .collect();
                net_rows = netrun::run_all(&cases, &s).await;
            }
        }
    }
    let fuzz_secs = args.fuzz_secs.unwrap_or(if args.long { 120 } else { 30 });
    if want("fuzz") && fuzz_secs > 0 {
        rows.extend(floodgate_reliability::fuzz::run_all(fuzz_secs));
    }
    if args.json {
        if !rows.is_empty() {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        if !net_rows.is_empty() {
            println!("{}", serde_json::to_string_pretty(&net_rows)?);
        }
    } else {
        if !rows.is_empty() {
            print!("{}", render(&rows));
        }
        if !net_rows.is_empty() {
            if !rows.is_empty() {
                println!();
            }
            print!("{}", netfaults::render(&net_rows));
        }
    }
    if rows.iter().any(|r| !r.pass) || net_rows.iter().any(|r| !r.pass) {
        std::process::exit(1);
    }
    Ok(())
}
