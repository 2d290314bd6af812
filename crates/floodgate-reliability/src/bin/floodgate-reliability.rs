//! `floodgate-reliability [--long] [--json]`: run the suite, print one table.

use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use floodgate_core::Kind;
use floodgate_reliability::{Row, clock, exactness, guarded, render, rotation};

/// floodgate's reliability suite. The fast part (default) takes seconds; --long runs the
/// full sizes (10 million rotating keys, longer audits).
#[derive(Parser)]
struct Args {
    /// Full sizes: 10M keys, more rounds.
    #[arg(long)]
    long: bool,
    /// Redis for the skewed-clock case.
    #[arg(long, default_value = "redis://127.0.0.1:6379/")]
    redis: String,
    /// Run each fuzz target for this many seconds (0 skips; default 30, --long 120).
    #[arg(long)]
    fuzz_secs: Option<u64>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let (keys, cap, rounds) = if args.long {
        (10_000_000, 100_000, 400)
    } else {
        (1_000_000, 10_000, 60)
    };
    let mut rows: Vec<Row> = Vec::new();
    rows.push(guarded("rotation", "attack", || {
        rotation::run(rotation::Attack {
            keys,
            cap,
            steady: 10,
            mem_bound_kib: 64 * 1024,
        })
    }));
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
    let fuzz_secs = args.fuzz_secs.unwrap_or(if args.long { 120 } else { 30 });
    if fuzz_secs > 0 {
        rows.extend(floodgate_reliability::fuzz::run_all(fuzz_secs));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", render(&rows));
    }
    if rows.iter().any(|r| !r.pass) {
        std::process::exit(1);
    }
    Ok(())
}
