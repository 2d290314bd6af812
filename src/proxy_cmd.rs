//! `floodgate proxy`: the rate-limiting reverse proxy, from a config file or from flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use floodgate_core::{Algorithm, Kind, Rate};
use floodgate_engine::config::watch;
use floodgate_http::{KeyDisplay, Policy, RateLimiter, RateLimiterBuilder};
use floodgate_net::tls::{CertFiles, CertStore, HANDSHAKE_TIMEOUT};
use floodgate_proxy::config::{Config, RateShape, parse_admin, parse_upstream, rate_spec};
use floodgate_proxy::proxy::{
    DEFAULT_TLS_RELOAD, ListenerTls, Proxy, ProxySettings, shutdown_signal,
};
use floodgate_proxy::reload::Reloader;

/// How long the file watch waits for a burst of writes to settle before reading.
const WATCH_DEBOUNCE: Duration = Duration::from_millis(200);

use crate::exit::{UsageContext, usage};

const EXAMPLES: &str = "\
SIGTERM or Ctrl-C stops gracefully. FLOODGATE_LOG sets the log filter (default info).

Examples:
  floodgate proxy --config /etc/floodgate/proxy.toml
  floodgate proxy --config proxy.toml --check-config        # validate the file and exit
  floodgate proxy --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 --rate 10/s --burst 20 --nodelay
      one policy per client IP, as nginx limit_req zone=... rate=10r/s burst=20 nodelay
  floodgate proxy --upstream http://127.0.0.1:9000 --rate 100/min --algorithm gcra --admin 9090
      the admin page, /metrics and /healthz on 127.0.0.1:9090";

/// Flags of `floodgate proxy`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
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
    /// Upstream, http://host:port or https://host:port (overrides the config's
    /// `upstream`).
    #[arg(long)]
    upstream: Option<String>,
    /// TLS on the listener: the certificate chain (PEM; with --tls-key; overrides the
    /// config's `[tls]` certificates).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS on the listener: the certificate's private key (PEM; with --tls-cert).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
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
    /// Without --config: nginx burst (excess requests admitted; capacity = burst + 1;
    /// default 0, as nginx and a [[policy]] without burst or capacity).
    #[arg(long, conflicts_with = "config")]
    burst: Option<u64>,
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
    /// With --config: do not watch the file for changes (SIGHUP still reloads).
    #[arg(long)]
    no_watch: bool,
    /// The log's format on standard error: text or json (filter: FLOODGATE_LOG, else
    /// RUST_LOG, else info).
    #[arg(long, value_enum, default_value_t)]
    log_format: crate::log_setup::LogFormat,
}

fn flags_builder(args: &ProxyArgs) -> Result<RateLimiterBuilder> {
    let Some(rate) = &args.rate else {
        bail!("give --config FILE, or --rate RATE (e.g. --rate 10/s --burst 20) with --upstream");
    };
    let rate: Rate = rate.parse().context("--rate")?;
    let kind: Kind = args.algorithm.parse().context("--algorithm")?;
    let shape = RateShape {
        burst: args.burst,
        capacity: None,
        nodelay: args.nodelay,
        delay: args.delay,
    };
    let spec = rate_spec(kind, rate, shape)
        .map_err(|e| anyhow!("invalid --rate/--burst/--nodelay/--delay/--algorithm: {e}"))?;
    let mut b = RateLimiter::builder()
        .admin_keys("proxy", args.admin_keys.unwrap_or_default())
        .rejection_log(floodgate_proxy::config::LogSection::default().rejection_log())
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
            let mut cfg = Config::load(path).usage_err()?;
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
            flags_builder(&args).usage_err()?,
            ProxySettings::new(http::Uri::default()),
            None,
        ),
    };
    settings.workers = match args.threads {
        Some(0) => return Err(usage(anyhow!("--threads 0: give at least 1 worker thread"))),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if let Some(u) = &args.upstream {
        settings.upstream = parse_upstream(u)
            .map_err(anyhow::Error::msg)
            .usage("--upstream")?;
    }
    if settings.upstream.authority().is_none() && settings.upstream_groups.is_empty() {
        return Err(usage(anyhow!(
            "no upstream: set `upstream = \"http://host:port\"` or [upstreams.NAME] groups in the config, or pass --upstream"
        )));
    }
    // [upstream_tls] applies to every https:// server: the top-level upstream's and the
    // groups'
    let any_https = settings.upstream.scheme_str() == Some("https")
        || settings
            .upstream_groups
            .iter()
            .flat_map(|g| &g.servers)
            .any(|s| s.url.scheme_str() == Some("https"));
    if !any_https && cfg.as_ref().is_some_and(|c| c.upstream_tls.is_some()) {
        if settings.upstream_groups.is_empty() {
            return Err(usage(anyhow!(
                "[upstream_tls] is set but the upstream {} is not https://",
                settings.upstream
            )));
        }
        return Err(usage(anyhow!(
            "[upstream_tls] is set but no upstream server is https:// (neither the top-level upstream nor a server of [upstreams.{}])",
            settings
                .upstream_groups
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join("], [upstreams.")
        )));
    }
    if let (Some(cert_file), Some(key_file)) = (&args.tls_cert, &args.tls_key) {
        let certs = CertStore::load(vec![CertFiles {
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
        }])
        .usage("--tls-cert/--tls-key")?;
        let min = cfg
            .as_ref()
            .and_then(|c| c.tls.as_ref())
            .and_then(|t| t.min_version)
            .unwrap_or_default();
        let (reload, handshake) = settings
            .tls
            .as_ref()
            .map_or((Some(DEFAULT_TLS_RELOAD), HANDSHAKE_TIMEOUT), |t| {
                (t.reload_interval, t.handshake_timeout)
            });
        settings.tls =
            Some(ListenerTls::new(certs, min, reload, handshake).usage("--tls-cert/--tls-key")?);
    }
    if let Some(l) = args.listen {
        settings.listen = l;
    }
    if args.admin.is_some() {
        settings.admin = args.admin;
    }
    if args.check_config {
        // validates everything but the Redis connection
        let limiter = builder.build().usage("invalid configuration")?;
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
        if let Some(t) = &settings.tls {
            println!(
                "tls: {} certificate(s) for {:?}",
                t.server.certs().files().len(),
                t.server.certs().names()
            );
        }
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
        if let Some(c) = &cfg {
            for line in skip_notes(&c.allowlist) {
                println!("{line}");
            }
        }
        return Ok(());
    }
    crate::log_setup::init(args.log_format)?;
    crate::raise_descriptor_limit();
    // this runtime accepts connections, serves the admin listener, and runs the store's
    // background tasks (Redis connections); requests are served on the workers
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async move {
        // opened once: reloads decide on the same store
        let (limiter, store) = match &cfg {
            Some(cfg) if cfg.store.kind != floodgate_proxy::config::StoreKind::Memory => {
                let store = cfg.open_store().await.context("invalid configuration")?;
                let limiter = cfg
                    .build_on(&store, None)
                    .context("invalid configuration")?;
                (limiter, Some(store))
            }
            Some(cfg) => (
                builder.build().usage("invalid configuration")?,
                Some(cfg.open_store().await.context("invalid configuration")?),
            ),
            None => (builder.build().usage("invalid configuration")?, None),
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
        // SIGHUP and the file watch reload a config file; installed before the proxy says
        // it is ready, so that an early SIGHUP never ends it
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        if let Some(log) = proxy.access_log() {
            reopen_on_sigusr1(log.clone(), stop_rx.clone())?;
        }
        let mut _watcher = None;
        match (&args.config, cfg, store) {
            (Some(path), Some(cfg), Some(store)) => {
                let access_log = proxy.access_log().cloned();
                let reloader = Arc::new(
                    Reloader::new(
                        path.clone(),
                        cfg,
                        store,
                        proxy.generations().clone(),
                        tokio::runtime::Handle::current(),
                    )
                    // after every reload attempt, as nginx's reopens its logs on one
                    .after(move |_| {
                        if let Some(log) = &access_log {
                            log.reopen();
                        }
                    }),
                );
                let hup = watch::sighup().context("listening for SIGHUP")?;
                let r = reloader.clone();
                let certs = settings.tls.as_ref().map(|t| t.server.certs().clone());
                tokio::spawn(watch::on_sighup(
                    Arc::new(move || {
                        let _ = r.reload();
                        // the listener's certificates are read again too (as on their timer)
                        if let Some(certs) = &certs {
                            reload_certificates(certs);
                        }
                    }),
                    hup,
                    stop_rx.clone(),
                ));
                if !args.no_watch {
                    let r = reloader.clone();
                    let changed = Arc::new(move || {
                        let _ = r.reload_if_changed();
                    });
                    let (w, _task) =
                        watch::watch_file(path, WATCH_DEBOUNCE, changed, stop_rx.clone())
                            .with_context(|| format!("watching {}", path.display()))?;
                    _watcher = Some(w);
                }
            }
            _ => {
                // from flags: nothing to reload; SIGHUP is logged, not fatal
                let mut hup = watch::sighup().context("listening for SIGHUP")?;
                let mut stop = stop_rx.clone();
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            _ = hup.recv() => tracing::warn!("SIGHUP: nothing to reload (the proxy was started from flags, not --config)"),
                            _ = stop.changed() => return,
                        }
                    }
                });
            }
        }
        tracing::info!(
            listen = %proxy.local_addr(),
            admin = ?proxy.admin_addr(),
            upstream = %settings.upstream,
            tls = settings.tls.is_some(),
            "floodgate proxy ready"
        );
        proxy.run(shutdown_signal()).await;
        let _ = stop_tx.send(true);
        Ok::<(), anyhow::Error>(())
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Reopen the access log's file on every `SIGUSR1` (logrotate's `postrotate`) until
/// `stop` changes.
fn reopen_on_sigusr1(
    log: floodgate_proxy::proxy::AccessLog,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut usr1 = signal(SignalKind::user_defined1()).context("listening for SIGUSR1")?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = usr1.recv() => {
                    tracing::info!("SIGUSR1: reopening the access log");
                    log.reopen();
                }
                _ = stop.changed() => return,
            }
        }
    });
    Ok(())
}

/// Read the listener's certificate files again (on SIGHUP); a file that fails keeps the
/// certificate in use, and says why.
fn reload_certificates(certs: &CertStore) {
    match certs.reload() {
        Ok(true) => tracing::info!("SIGHUP: the listener's certificates were read again"),
        Ok(false) => {}
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: the listener's certificates were not reloaded; the ones in use keep serving")
        }
    }
}

/// What `--check-config` says of the clients that skip every policy: the allowlisted
/// addresses (loopback named, since a local test from it is never limited and gets no
/// RateLimit fields) and how many allowlisted keys there are.
fn skip_notes(a: &floodgate_proxy::config::AllowlistSection) -> Vec<String> {
    let mut out = Vec::new();
    if !a.ips.is_empty() {
        let ips: Vec<String> = a.ips.iter().map(|n| n.to_string()).collect();
        out.push(format!(
            "skip every policy: clients from {} (allowlist.ips)",
            ips.join(", ")
        ));
        if a.ips.iter().any(|n| {
            n.contains(&std::net::IpAddr::from([127, 0, 0, 1]))
                || n.contains(&std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST))
        }) {
            out.push("skip every policy: loopback is allowlisted, so requests sent from this host are never limited and carry no RateLimit fields".into());
        }
    }
    if !a.keys.is_empty() {
        out.push(format!(
            "skip every policy: requests whose key is one of {} allowlisted keys (allowlist.keys)",
            a.keys.len()
        ));
    }
    out
}
