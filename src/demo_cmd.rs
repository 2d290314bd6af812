//! `floodgate demo`: flags and output around `floodgate_demo`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use floodgate_core::Rate;
use floodgate_demo::{DemoConfig, DemoStore};

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
  floodgate demo --rate 50/1s --capacity 10";

/// Flags of `floodgate demo`.
#[derive(Args, Debug)]
#[command(long_about = ABOUT, after_help = EXAMPLES)]
pub struct DemoArgs {
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

pub fn run(args: DemoArgs) -> Result<()> {
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
