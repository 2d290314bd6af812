//! `floodgate throttle`: redis-cell's `CL.THROTTLE` against any Redis, no module needed.

use anyhow::{Context, Result};
use clap::Args;
use floodgate_redis::{RedisStore, StoreConfig, ThrottleArgs};

use crate::exit::UsageContext;

const EXAMPLES: &str = "\
Prints the five integers of CL.THROTTLE: limited (0/1), limit, remaining,
retry_after (seconds, -1 when allowed), reset_after (seconds).

Examples:
  floodgate throttle user123 15 30 60        # 30 per 60 s, bursts of 16: prints 0 16 15 -1 2
  floodgate throttle user123 15 30 60 0      # quantity 0: peek, consumes nothing
  floodgate throttle user123 15 30 60 --redis redis://:secret@10.0.0.5:6379/0";

/// Arguments of `floodgate throttle`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ThrottleCmdArgs {
    /// The key to limit (any bytes; stored under the prefix with a hash tag).
    key: String,
    /// Requests admitted at once above one (limit = MAX_BURST + 1).
    #[arg(allow_hyphen_values = true)]
    max_burst: String,
    /// Requests per PERIOD.
    #[arg(allow_hyphen_values = true)]
    count: String,
    /// Period in seconds.
    #[arg(allow_hyphen_values = true)]
    period: String,
    /// Units this request costs (default 1; 0 peeks).
    #[arg(allow_hyphen_values = true)]
    quantity: Option<String>,
    /// Redis URL: redis://[user:password@]host:port[/db], or rediss:// for TLS.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Key prefix.
    #[arg(long, default_value = "floodgate:")]
    prefix: String,
    /// Per-call timeout in milliseconds.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
}

/// Run the command: parse like redis-cell, one script call, print the reply.
pub fn run(args: ThrottleCmdArgs) -> Result<()> {
    let parsed = ThrottleArgs::parse(
        &args.max_burst,
        &args.count,
        &args.period,
        args.quantity.as_deref(),
    )
    .usage_err()?;
    let config = StoreConfig {
        prefix: args.prefix.clone(),
        timeout: std::time::Duration::from_millis(args.timeout_ms),
        ..StoreConfig::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let reply = rt.block_on(async {
        let store = RedisStore::connect(&args.redis, config).await?;
        store.throttle(args.key.as_bytes(), &parsed).await
    })?;
    println!("{}", reply.map(|v| v.to_string()).join(" "));
    Ok(())
}
