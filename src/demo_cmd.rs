//! `floodgate demo`: flags and output around `floodgate_demo`.

use std::path::PathBuf;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use floodgate_core::Rate;
use floodgate_core::rate::parse_duration;
use floodgate_demo::queue_backend::{QueueBackend, QueueConfig};
use floodgate_demo::{DemoConfig, DemoStore};
use floodgate_load::dist::Dist;

use crate::exit::UsageContext;

pub(crate) const ABOUT: &str = "\
One recording backend on loopback, one floodgate proxy in front of it per algorithm
(fixed window, sliding log, sliding counter, token bucket, GCRA, leaky queue), all with
the same limit, and the same traffic through each: a steady phase at 1.5 x the rate, then
a burst of L requests just before a window boundary (aligned to the Unix epoch, where
fixed windows start) and another just after. The table shows, per algorithm, requests
admitted, 429s, the most requests the backend received in any window-length span and
in any 1 s span (from the backend's own timestamps), p99 latency, and each algorithm's
guarantee checked on those timestamps. The fixed window lets about 2 L through across
the boundary; the others hold their bound. Takes about 3 windows (6 s with the default
20/2s).";

const EXAMPLES: &str = "\
Examples:
  floodgate demo
  floodgate demo --svg plots/               one SVG per algorithm
  floodgate demo --redis redis://127.0.0.1:6379 --json
  floodgate demo --rate 50/1s --capacity 10
  floodgate demo backend --workers 8 --service exp:20ms
      a backend whose latency follows a queue (400 req/s capacity), for overload tests";

pub(crate) const BACKEND_ABOUT: &str = "\
A backend whose latency follows a queue, to put behind floodgate proxy when testing
overload: --workers requests are served at once, each for a service time drawn from
--service (exp:MEAN, exponential, or const:DURATION; seeded by --seed), and the rest wait
in one FIFO queue. Its capacity is workers / mean service time (8 / 20 ms = 400 req/s):
below it latency is about the service time; beyond it the queue grows and latency climbs
with it. Replies 200 ok after service; 503 (Retry-After: 1) 'queue full' when workers +
--queue requests are already in; 503 'waited over the time limit' when a request waited
longer than --time-limit for a worker (it is then not served). Serves until Ctrl-C, then
prints what it did.";

const BACKEND_EXAMPLES: &str = "\
Examples:
  floodgate demo backend                                     # 127.0.0.1:9000, 8 workers, exp:20ms
  floodgate demo backend --listen 127.0.0.1:9100 --workers 4 --service const:50ms --queue 100";

/// Flags of `floodgate demo`.
#[derive(Args, Debug)]
#[command(long_about = ABOUT, after_help = EXAMPLES, args_conflicts_with_subcommands = true)]
pub struct DemoArgs {
    #[command(subcommand)]
    command: Option<DemoCommand>,
    /// The limit of every algorithm, COUNT/PERIOD (4 to 200 per 500ms to 10s).
    #[arg(long, default_value = "20/2s")]
    rate: String,
    /// Units admitted at once from rest by token bucket, GCRA and leaky queue (default:
    /// a quarter of the limit).
    #[arg(long)]
    capacity: Option<u64>,
    /// Run on this Redis (redis://host:port[/db]) instead of the in-process store; keys
    /// go under a prefix unique to the run.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Write one SVG plot per algorithm into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// Print the report as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// What `floodgate demo` runs besides the algorithm table.
#[derive(Subcommand, Debug)]
enum DemoCommand {
    /// A backend whose latency follows a queue (N workers, a service time distribution,
    /// a bounded FIFO queue): put it behind floodgate proxy to test overload.
    #[command(long_about = BACKEND_ABOUT, after_help = BACKEND_EXAMPLES)]
    Backend(BackendArgs),
}

/// Flags of `floodgate demo backend`.
#[derive(Args, Debug)]
struct BackendArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Requests served at once.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Service time of one request: exp:MEAN (exponential) or const:DURATION.
    #[arg(long, default_value = "exp:20ms", value_parser = parse_dist)]
    service: Dist,
    /// Requests that may wait for a worker at once; beyond, 503 queue full.
    #[arg(long, default_value_t = 10_000)]
    queue: usize,
    /// Longest wait for a worker; a request that waited longer gets 503 unserved.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    time_limit: Duration,
    /// Most connections open at once; more are closed at accept.
    #[arg(long, default_value_t = 20_000)]
    max_connections: usize,
    /// Seed of the service times.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse_dist(s: &str) -> Result<Dist, String> {
    s.parse::<Dist>().map_err(|e| e.to_string())
}

fn run_backend(args: BackendArgs) -> Result<()> {
    let cfg = QueueConfig {
        listen: args.listen,
        workers: args.workers,
        service: args.service,
        queue: args.queue,
        time_limit: args.time_limit,
        max_connections: args.max_connections,
        seed: args.seed,
    };
    cfg.validate().usage_err()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let backend = QueueBackend::start(cfg.clone()).await?;
        eprintln!(
            "floodgate demo backend: listening on http://{}/ with {} workers, service {} \
             (capacity {:.0} req/s), queue {}, time limit {:?}; Ctrl-C stops",
            backend.addr(),
            cfg.workers,
            cfg.service,
            cfg.capacity_per_s(),
            cfg.queue,
            cfg.time_limit
        );
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        let c = backend.counts();
        eprintln!(
            "floodgate demo backend: served {}, queue full {}, over the time limit {}",
            c.served, c.queue_full, c.over_time_limit
        );
        Ok(())
    })
}

pub fn run(args: DemoArgs) -> Result<()> {
    if let Some(DemoCommand::Backend(b)) = args.command {
        return run_backend(b);
    }
    let rate: Rate = args
        .rate
        .parse()
        .with_context(|| format!("invalid --rate {:?}", args.rate))
        .usage_err()?;
    let cfg = DemoConfig {
        rate,
        capacity: args.capacity,
        store: match args.redis {
            Some(url) => DemoStore::Redis(url),
            None => DemoStore::Memory,
        },
    };
    cfg.validate().usage_err()?;
    if let Some(dir) = &args.svg {
        check_writable(dir)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    if !args.json {
        eprintln!(
            "floodgate demo: 6 proxies, {} per {:?}; this takes about {:.0} s",
            rate.count(),
            rate.period(),
            rate.period().as_secs_f64() * 3.0 + 0.5
        );
    }
    let report = runtime.block_on(floodgate_demo::run(&cfg))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    if let Some(dir) = &args.svg {
        for p in floodgate_demo::write_svgs(&report, dir)? {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// Fail before the run, not after it, when the plot directory cannot be written.
fn check_writable(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--svg {}: cannot create the directory", dir.display()))?;
    let probe = dir.join(format!(".floodgate-demo-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .with_context(|| format!("--svg {}: the directory is not writable", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
