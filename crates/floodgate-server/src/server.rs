//! Starting and stopping the whole service: the store, the engine, the three front doors,
//! the reload watchers, and a graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use floodgate_engine::config::{DEFAULT_RESP_MAX_KEYS, OpenedStore};
use floodgate_engine::fleet::Strategy;
use floodgate_engine::{CallerLimits, HybridLeases, TokioWallClock};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::{Config, Settings, StoreSettings};
use crate::descriptors::{Engine, StoreHandle};
use crate::gate::Gate;
use crate::grpc::RlsService;
use crate::grpc::conn::Http2Limits;
use crate::grpc::door::GrpcDoor;
use crate::grpc::quota::QuotaService;
use crate::http::conn::HttpTimeouts;
use crate::http::{HttpState, router};
use crate::metrics::Metrics;
use crate::quota::DemandBook;
use crate::reload::{self, Reloader};
use crate::resp::{RespLimits, RespService, RespTimeouts};
use crate::tls::Door;

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// A listen address is taken or not ours.
    #[error("cannot listen for {front} on {addr}: {source}")]
    Bind {
        /// `grpc`, `http` or `resp`.
        front: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Redis is configured but cannot be reached.
    #[error("cannot start the Redis store: {0}")]
    Redis(#[from] floodgate_redis::Error),
    /// The rules cannot be instantiated on this store.
    #[error("{path}: {message}")]
    Rules {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The SIGHUP handler cannot be installed.
    #[error("cannot listen for SIGHUP: {source}")]
    Signal {
        /// Why.
        source: std::io::Error,
    },
    /// The file watcher cannot start.
    #[error("cannot watch {path} for changes: {source}")]
    Watch {
        /// The file.
        path: PathBuf,
        /// Why.
        source: notify::Error,
    },
}

/// How to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// The config file (for reloads and messages).
    pub path: PathBuf,
    /// Watch the file and reload when it changes.
    pub watch: bool,
    /// Reload on SIGHUP (a process-wide signal handler).
    pub sighup: bool,
    /// Debounce of file change events.
    pub debounce: Duration,
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// The bound gRPC address.
    pub grpc: Option<SocketAddr>,
    /// The bound HTTP address.
    pub http: Option<SocketAddr>,
    /// The bound RESP address.
    pub resp: Option<SocketAddr>,
    /// The shared limiter.
    pub engine: Arc<Engine>,
    /// The reloader.
    pub reloader: Arc<Reloader>,
    shutdown: watch::Sender<bool>,
    http_state: Arc<HttpState>,
    health: tonic_health::server::HealthReporter,
    tasks: JoinSet<()>,
    watcher: Option<notify::RecommendedWatcher>,
}

async fn bind(
    front: &'static str,
    addr: Option<SocketAddr>,
) -> Result<Option<TcpListener>, StartError> {
    match addr {
        None => Ok(None),
        Some(addr) => TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|source| StartError::Bind {
                front,
                addr,
                source,
            }),
    }
}

/// Start everything `config` asks for. `settings` are the effective settings (the
/// file's, with command-line overrides); `config.settings` are the file's, against which
/// reloads are compared.
pub async fn start(
    config: Config,
    settings: Settings,
    options: Options,
) -> Result<Running, StartError> {
    let fleet = &settings.fleet;
    // the cap on leases is the store's (`store.max_keys`), set by `open`
    let hybrid = (fleet.strategy == Some(Strategy::Hybrid)).then_some(HybridLeases {
        nodes: fleet.nodes,
        lease: fleet.lease,
        lease_ttl: fleet.lease_ttl,
        max_leases: settings.store.max_keys(),
    });
    let opened = settings.store.open(hybrid, "server").await?;
    let fault = opened.fault_policy();
    let (store, throttle, redis) = match opened {
        OpenedStore::Memory { max_keys } => {
            let resp_max_keys = match &settings.store {
                StoreSettings::Memory { resp_max_keys, .. } => *resp_max_keys,
                StoreSettings::Redis { .. } => DEFAULT_RESP_MAX_KEYS,
            };
            (
                StoreHandle::Memory {
                    max_keys,
                    share: match fleet.strategy {
                        Some(Strategy::Local) => fleet.nodes,
                        _ => 1,
                    },
                    clock: TokioWallClock::new(),
                },
                CallerLimits::memory(resp_max_keys).map_err(|e| StartError::Rules {
                    path: options.path.clone(),
                    message: format!("store.resp_max_keys: {e}"),
                })?,
                None,
            )
        }
        OpenedStore::Shared { store: shared, .. } => {
            let s = shared.redis().clone();
            (
                StoreHandle::Shared(shared),
                CallerLimits::redis(s.clone()),
                Some(s),
            )
        }
    };
    let metrics = Arc::new(Metrics::with_keys(redis.clone(), settings.admin_keys));
    let max_bytes = config.rules.caps.max_request_bytes;
    let in_flight_rules = config.rules.in_flight_rules();
    if in_flight_rules > 0 && settings.grpc.is_some() {
        tracing::info!(
            rules = in_flight_rules,
            "max_in_flight rules are enforced on HTTP /v1/check only; the gRPC door (ShouldRateLimit, no release call) applies their rate limits and ignores max_in_flight"
        );
    }
    let engine = Engine::new(config.rules, store, fault, metrics.clone()).map_err(|message| {
        StartError::Rules {
            path: options.path.clone(),
            message,
        }
    })?;
    let engine = Arc::new(engine);
    let grpc_l = bind("grpc", settings.grpc).await?;
    let http_l = bind("http", settings.http).await?;
    let resp_l = bind("resp", settings.resp).await?;
    let addr = |l: &Option<TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
    let (grpc, http, resp) = (addr(&grpc_l), addr(&http_l), addr(&resp_l));

    for warning in crate::config::exposure_warnings(&settings) {
        tracing::warn!("{warning}");
    }
    let tls_for = |door| settings.tls.as_ref().and_then(|t| t.acceptor(door));
    let gate = door_caps(&settings, &metrics);

    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<RlsService>>()
        .await;

    if let Some(listener) = grpc_l {
        let rls = RlsService::new(engine.clone());
        let book = match &redis {
            Some(r) => DemandBook::Redis(r.clone()),
            None => DemandBook::memory(Arc::new(TokioWallClock::new())),
        };
        let quota = QuotaService::new(
            engine.clone(),
            book,
            metrics.quota.clone(),
            settings.connections.idle_timeout,
            shutdown_rx.clone(),
        );
        let routes = tonic::service::Routes::new(health_service)
            .add_service(rls.clone().into_server(max_bytes))
            .add_service(quota.into_server(max_bytes));
        let door = Arc::new(
            GrpcDoor::new(rls, routes, max_bytes).with_tls(tls_for(Door::Grpc), metrics.clone()),
        );
        tasks.spawn(crate::grpc::serve::serve(
            listener,
            door,
            Http2Limits::with(max_bytes, &settings.connections),
            gate("grpc"),
            shutdown_rx.clone(),
        ));
    }
    let c = &settings.connections;
    let resp_limits = RespLimits {
        max_command: c.max_command_bytes,
        ..RespLimits::default()
    };
    let resp_svc = Arc::new(
        RespService::new(Arc::new(throttle), metrics.clone(), resp_limits)
            .with_engine(engine.clone())
            .with_settings(&settings.resp_door)
            .with_tls(tls_for(Door::Resp))
            .with_timeouts(RespTimeouts {
                idle: c.idle_timeout,
                request: c.request_timeout,
            }),
    );
    let http_state = Arc::new(HttpState {
        engine: engine.clone(),
        shutting_down: false.into(),
        leases: resp_svc.leases().clone(),
        token: settings.http_door.token.clone(),
        allowed_hosts: settings.http_allowed_hosts.clone(),
        adaptive: Arc::default(),
    });
    crate::adaptive::spawn_sweeper(&http_state.adaptive);
    if let Some(listener) = http_l {
        let timeouts = HttpTimeouts {
            head: c.head_timeout,
            idle: c.idle_timeout,
            request: c.request_timeout,
        };
        tasks.spawn(crate::http::conn::serve(
            listener,
            router(http_state.clone()),
            gate("http"),
            timeouts,
            tls_for(Door::Http),
            shutdown_rx.clone(),
        ));
    }
    if let Some(listener) = resp_l {
        tasks.spawn(crate::resp::serve(
            listener,
            resp_svc,
            gate("resp"),
            shutdown_rx.clone(),
        ));
    }

    let reloader = Arc::new(Reloader::new(
        options.path.clone(),
        engine.clone(),
        config.settings,
    ));
    let mut watcher = None;
    if options.sighup {
        let hup = reload::sighup().map_err(|source| StartError::Signal { source })?;
        tasks.spawn(reload::on_sighup(
            reloader.clone(),
            hup,
            shutdown_rx.clone(),
        ));
    }
    if options.watch {
        let (w, task) = reload::watch_file(reloader.clone(), options.debounce, shutdown_rx.clone())
            .map_err(|source| StartError::Watch {
                path: options.path.clone(),
                source,
            })?;
        watcher = Some(w);
        tasks.spawn(async move {
            let _ = task.await;
        });
    }
    Ok(Running {
        grpc,
        http,
        resp,
        engine,
        reloader,
        shutdown,
        http_state,
        health,
        tasks,
        watcher,
    })
}

/// The connection caps of each door (`connections.max_connections` and
/// `max_connections_per_client`, or derived from the open-descriptor limit), logged.
fn door_caps(settings: &Settings, metrics: &Arc<Metrics>) -> impl Fn(&'static str) -> Gate {
    let doors = [settings.grpc, settings.http, settings.resp]
        .iter()
        .filter(|a| a.is_some())
        .count();
    let nofile = floodgate_net::descriptor_limit().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "taking the open-descriptor limit as 1024");
        1024
    });
    let c = &settings.connections;
    let (total, per_client) = c.caps(nofile, doors);
    let needed = (total as u64)
        .saturating_mul(doors as u64)
        .saturating_add(crate::config::RESERVED_DESCRIPTORS);
    if needed > nofile {
        tracing::warn!(
            max_connections = total,
            doors,
            descriptor_limit = nofile,
            "the doors' connection caps exceed the open-descriptor limit: past it, accepts fail (EMFILE) and new clients wait in the backlog"
        );
    }
    tracing::info!(
        max_connections = total,
        max_connections_per_client = per_client,
        descriptor_limit = nofile,
        derived = c.max_connections.is_none(),
        "connection caps of each door"
    );
    let metrics = metrics.clone();
    move |front| Gate::new(front, total, per_client, metrics.clone())
}

impl Running {
    /// Stop gracefully: health checks turn to NOT_SERVING, listeners stop accepting,
    /// requests in flight are answered, then connections close. Waits at most `grace`.
    pub async fn shutdown(mut self, grace: Duration) {
        self.http_state.shutting_down.store(true, Ordering::Relaxed);
        self.health
            .set_not_serving::<RateLimitServiceServer<RlsService>>()
            .await;
        let _ = self.shutdown.send(true);
        drop(self.watcher.take());
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!(
                ?grace,
                "shutdown grace period over; closing the remaining connections"
            );
            self.tasks.abort_all();
        }
    }
}
