//! `floodgate proxy`: the rate-limiting reverse proxy, from a config file or from flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use floodgate_core::algorithms::DelayMode;
use floodgate_core::{Algorithm, Kind, Rate, Spec};
use floodgate_http::{KeyDisplay, Policy, RateLimiter, RateLimiterBuilder};
use floodgate_proxy::config::{Config, parse_admin, parse_upstream};
use floodgate_proxy::proxy::{Proxy, ProxySettings, shutdown_signal};

/// Flags of `floodgate proxy`.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// TOML config file (every field: docs/proxy.md, "Configuration").
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Validate the config (or flags) and exit without starting.
    #[arg(long)]
    check_config: bool,
    /// Listen address (overrides the config's `listen`).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Upstream, http://host:port (overrides the config's `upstream`).
    #[arg(long)]
    upstream: Option<String>,
    /// Admin listener for /metrics, /healthz and the admin page and API under /admin
    /// (overrides the config's `admin`): ip:port, or a port alone, which binds
    /// 127.0.0.1 (the page shows keys and config).
    #[arg(long, value_parser = parse_admin)]
    admin: Option<SocketAddr>,
    /// How /admin shows keys: plain, truncated or hashed (overrides the config's
    /// `admin_keys`).
    #[arg(long)]
    admin_keys: Option<KeyDisplay>,
    /// Without --config: one policy "default" per client IP at this rate (e.g. 10/s).
    #[arg(long, conflicts_with = "config")]
    rate: Option<String>,
    /// Without --config: nginx burst (excess requests admitted; capacity = burst + 1).
    #[arg(long, conflicts_with = "config", default_value_t = 0)]
    burst: u64,
    /// Without --config: admitted excess requests pass at once (nginx nodelay).
    #[arg(long, conflicts_with_all = ["config", "delay"])]
    nodelay: bool,
    /// Without --config: the first N excess requests pass at once, the rest are held
    /// (nginx delay=N).
    #[arg(long, conflicts_with = "config")]
    delay: Option<u64>,
    /// Without --config: the algorithm (default leaky-queue, as nginx limit_req).
    #[arg(long, conflicts_with = "config", default_value = "leaky-queue")]
    algorithm: String,
    /// Denial status (without --config; default 429, nginx uses 503).
    #[arg(long, conflicts_with = "config")]
    status: Option<u16>,
    /// Worker threads, each a single-threaded runtime with its own upstream pool;
    /// connections are dealt to them in turn (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

fn flags_builder(args: &ProxyArgs) -> Result<RateLimiterBuilder> {
    let Some(rate) = &args.rate else {
        bail!("give --config FILE, or --rate RATE (e.g. --rate 10/s --burst 20) with --upstream");
    };
    let rate: Rate = rate.parse().context("--rate")?;
    let kind: Kind = args.algorithm.parse().context("--algorithm")?;
    if kind != Kind::LeakyQueue && (args.nodelay || args.delay.is_some()) {
        bail!("--nodelay and --delay apply only to --algorithm leaky-queue");
    }
    let mut spec = Spec::new(kind, rate);
    spec.capacity = Some(args.burst.checked_add(1).context("--burst is too large")?);
    spec.delay = match (args.nodelay, args.delay) {
        (true, _) => DelayMode::NoDelay,
        (false, Some(n)) => DelayMode::After(n),
        (false, None) => DelayMode::After(0),
    };
    spec.build().context("invalid --rate/--burst/--delay")?;
    let mut b = RateLimiter::builder()
        .admin_keys("proxy", args.admin_keys.unwrap_or_default())
        .policy(Policy::new("default", spec));
    if let Some(s) = args.status {
        let s = http::StatusCode::from_u16(s)
            .ok()
            .filter(|s| s.is_client_error() || s.is_server_error())
            .with_context(|| format!("--status {s} is not a 4xx or 5xx code"))?;
        b = b.deny_status(s);
    }
    Ok(b)
}

/// Run `floodgate proxy`.
pub fn run(args: ProxyArgs) -> Result<()> {
    let (builder, mut settings, cfg) = match &args.config {
        Some(path) => {
            let mut cfg = Config::load(path)?;
            // the log is not set up yet: the renamed keys go to stderr here
            for r in &cfg.renamed {
                eprintln!("floodgate: warning: {}: {r}", path.display());
            }
            if let Some(k) = args.admin_keys {
                cfg.admin_keys = k;
            }
            let upstream = cfg.upstream.clone();
            let mut settings = ProxySettings::new(upstream.unwrap_or_default());
            if let Some(l) = cfg.listen {
                settings.listen = l;
            }
            settings.admin = cfg.admin;
            cfg.apply_to(&mut settings);
            (cfg.limiter_builder(), settings, Some(cfg))
        }
        None => (
            flags_builder(&args)?,
            ProxySettings::new(http::Uri::default()),
            None,
        ),
    };
    settings.workers = match args.threads {
        Some(0) => bail!("--threads 0: give at least 1 worker thread"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if let Some(u) = &args.upstream {
        settings.upstream = parse_upstream(u)
            .map_err(anyhow::Error::msg)
            .context("--upstream")?;
    }
    if settings.upstream.authority().is_none() && settings.upstream_groups.is_empty() {
        bail!(
            "no upstream: set `upstream = \"http://host:port\"` or [upstreams.NAME] groups in the config, or pass --upstream"
        );
    }
    if let Some(l) = args.listen {
        settings.listen = l;
    }
    if args.admin.is_some() {
        settings.admin = args.admin;
    }
    if args.check_config {
        // validates everything but the Redis connection
        let limiter = builder.build().context("invalid configuration")?;
        println!(
            "configuration OK: {} policies ({}), upstream {}, listen {}",
            limiter.policies().len(),
            limiter
                .policies()
                .iter()
                .map(|p| format!(
                    "{}: {} {} capacity {}",
                    p.name,
                    p.spec.kind,
                    p.spec.rate,
                    p.algorithm.limit()
                ))
                .collect::<Vec<_>>()
                .join(", "),
            if settings.upstream.authority().is_some() {
                settings.upstream.to_string()
            } else {
                "none (the groups below)".to_string()
            },
            settings.listen
        );
        if !settings.upstream_groups.is_empty() {
            println!(
                "upstreams: {}",
                settings
                    .upstream_groups
                    .iter()
                    .map(|g| format!(
                        "{} ({}, servers: {})",
                        g.name,
                        g.balance.name(),
                        g.servers.len()
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Some(f) = cfg.as_ref().and_then(|c| c.fleet()) {
            println!(
                "fleet: {} over {} nodes ({}), self {}",
                f.strategy(),
                f.nodes().len(),
                f.nodes().join(", "),
                f.self_node()
            );
        }
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOODGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    crate::raise_descriptor_limit();
    // this runtime accepts connections, serves the admin listener, and runs the store's
    // background tasks (Redis connections); requests are served on the workers
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async move {
        let limiter = match &cfg {
            Some(cfg) if cfg.store.kind != floodgate_proxy::config::StoreKind::Memory => {
                cfg.build().await.context("invalid configuration")?
            }
            _ => builder.build().context("invalid configuration")?,
        };
        let insight = limiter.insight();
        match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                insight.set_config(Config::shown(&text));
                insight.reloaded(
                    1,
                    true,
                    format!("loaded at startup from {}", path.display()),
                );
            }
            None => insight.reloaded(1, true, "built at startup from flags"),
        }
        let proxy = Proxy::bind(limiter, &settings).await?;
        tracing::info!(
            listen = %proxy.local_addr(),
            admin = ?proxy.admin_addr(),
            upstream = %settings.upstream,
            "floodgate proxy ready"
        );
        proxy.run(shutdown_signal()).await;
        Ok::<(), anyhow::Error>(())
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
