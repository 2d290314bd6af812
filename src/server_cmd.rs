//! `floodgate server`: the central rate limit service (Envoy RLS v3 over gRPC,
//! CL.THROTTLE over RESP, HTTP/JSON), configured by a YAML or TOML file.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use floodgate_server::{config, server};

use crate::exit::{UsageContext, usage};

const EXAMPLES: &str = "\
Listens on gRPC (Envoy's RateLimitService and grpc.health.v1), HTTP (POST /v1/check,
GET /metrics, GET /healthz) and RESP (CL.THROTTLE). Prints one line with the bound
addresses on stdout once serving. Reloads the config on SIGHUP and when the file changes;
a bad file is reported and the running config keeps serving. SIGTERM or Ctrl-C stops
gracefully.

Examples:
  floodgate server --config limits.yaml
  floodgate server --config limits.toml --grpc 10.0.0.5:8081 --resp off   # beyond loopback: set tls (docs/security.md)
  floodgate server --config limits.yaml --check      # validate the file and exit
  floodgate server --config limitador-limits.yaml    # Limitador's limits file as it is";

/// Arguments of `floodgate server`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ServerArgs {
    /// The config file (.yaml, .yml or .toml), or a directory in Envoy's layout (every
    /// *.yaml of its config/ subdirectory, one domain per file or YAML document), or
    /// Limitador's limits file (a YAML list of limits, read as it is).
    #[arg(long, short)]
    config: PathBuf,
    /// gRPC listen address (overrides listen.grpc), or `off`.
    #[arg(long)]
    grpc: Option<String>,
    /// HTTP listen address (overrides listen.http), or `off`.
    #[arg(long)]
    http: Option<String>,
    /// RESP listen address (overrides listen.resp), or `off`.
    #[arg(long)]
    resp: Option<String>,
    /// Check the config file and exit.
    #[arg(long)]
    check: bool,
    /// Do not watch the file for changes (SIGHUP still reloads).
    #[arg(long)]
    no_watch: bool,
    /// Longest wait for in-flight requests at shutdown, e.g. 10s.
    #[arg(long, default_value = "10s")]
    shutdown_grace: String,
    /// Worker threads (default: one per available core). With 1, everything runs on the
    /// main thread (a current-thread runtime: no work stealing, no cross-thread wake-ups).
    #[arg(long)]
    threads: Option<usize>,
    /// The log's format on standard error: text or json (filter: FLOODGATE_LOG, else
    /// RUST_LOG, else info).
    #[arg(long, value_enum, default_value_t)]
    log_format: crate::log_setup::LogFormat,
}

fn address(flag: &str, s: &str) -> Result<Option<SocketAddr>> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let a = s
        .to_socket_addrs()
        .with_context(|| format!("--{flag} {s:?} is not a HOST:PORT address"))?
        .next()
        .with_context(|| format!("--{flag} {s:?} resolves to no address"))?;
    Ok(Some(a))
}

fn fmt_addr(a: Option<SocketAddr>) -> String {
    a.map_or_else(|| "off".to_string(), |a| a.to_string())
}

/// Run the command.
pub fn run(args: ServerArgs) -> Result<()> {
    crate::log_setup::init(args.log_format)?;
    let grace =
        floodgate_core::rate::parse_duration(&args.shutdown_grace).usage("--shutdown-grace")?;
    let cfg = config::load(&args.config).usage_err()?;
    if args.check {
        let limits: usize = cfg.rules.policies.len()
            + cfg
                .rules
                .domains
                .values()
                .map(|d| count_limits(d))
                .sum::<usize>()
            + cfg.rules.selectors.values().map(Vec::len).sum::<usize>();
        println!(
            "{}: ok ({} domains, {} limits, {} policies)",
            args.config.display(),
            cfg.rules.domains.len(),
            limits,
            cfg.rules.policies.len()
        );
        for note in &cfg.notes {
            println!("note: {note}");
        }
        return Ok(());
    }
    // serving only: checking a file opens no connection (and logs nothing about it)
    crate::raise_descriptor_limit();
    let mut settings = cfg.settings.clone();
    if let Some(s) = &args.grpc {
        settings.grpc = address("grpc", s).usage_err()?;
    }
    if let Some(s) = &args.http {
        settings.http = address("http", s).usage_err()?;
    }
    if let Some(s) = &args.resp {
        settings.resp = address("resp", s).usage_err()?;
        if settings.resp.is_some_and(|a| a.port() == 6379) {
            return Err(usage(anyhow!(
                "--resp: port 6379 is Redis's own port; pick another (the default is 16379)"
            )));
        }
    }
    let mut rt = match args.threads {
        Some(0) => return Err(usage(anyhow!("--threads must be at least 1"))),
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut rt = tokio::runtime::Builder::new_multi_thread();
            rt.worker_threads(n);
            rt
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    rt.enable_all();
    let rt = rt.build().context("starting the async runtime")?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // Installed before announcing readiness, so an early signal is never fatal.
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        let running = server::start(
            cfg,
            settings,
            server::Options {
                path: args.config.clone(),
                watch: !args.no_watch,
                sighup: true,
                debounce: Duration::from_millis(200),
            },
        )
        .await?;
        println!(
            "floodgate server listening grpc={} http={} resp={} config={}",
            fmt_addr(running.grpc),
            fmt_addr(running.http),
            fmt_addr(running.resp),
            args.config.display()
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
        running.shutdown(grace).await;
        Ok::<(), anyhow::Error>(())
    })
}

fn count_limits(defs: &[config::DescriptorDef]) -> usize {
    defs.iter()
        .map(|d| d.limits.len() + count_limits(&d.children))
        .sum()
}
