//! The reverse proxy behind `floodgate proxy`: a server for HTTP/1.1 and HTTP/2 (h2c
//! prior knowledge) whose service is [`RateLimitService`](floodgate_http::RateLimitService) around [`Forward`], a pooled
//! client to the upstream servers ([`crate::upstreams`]: groups, balancing, health).
//! Bodies stream both ways; nothing is buffered.
//!
//! Client connections start on the proxy's own HTTP/1 path (`connection`, `h1::client`), which
//! answers requests without a body; the first request it does not take (a body,
//! HTTP/2's preface, a malformed head...) hands the connection to hyper's server.
//!
//! * `X-Forwarded-For`: the peer address is appended to any received value.
//! * Hop-by-hop headers (`Connection`, `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`,
//!   `Transfer-Encoding`, `Upgrade`) are not forwarded either way.
//! * Upstream unreachable (`kind="connect"`) or its response failing: closed, reset or
//!   malformed (`kind="response"`): 502. No response head within the upstream timeout
//!   (`kind="timeout"`): 504. All counted in `floodgate_upstream_errors_total`.
//! * A request body that fails on the client's side (malformed chunked framing, the
//!   client hanging up mid-body) is the client's fault: 400 (if the client still
//!   listens), logged at debug, not counted as an upstream error.
//! * In a sticky fleet ([`crate::sticky`]), requests whose key another node owns are
//!   forwarded to that node first.
//! * Shutdown (the future given to [`Proxy::run`], e.g. [`shutdown_signal`]): stop
//!   accepting, let in-flight requests (held ones included) finish, for at most the grace
//!   period.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_engine::admin::{AdminRequest, AllowedHosts, misdirected, security_headers};
use floodgate_engine::metrics::{Exposition, Metrics};
use floodgate_http::limiter::RateLimiter;
use floodgate_net::{ConnCaps, ConnSlot};
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

pub use crate::access_log::{AccessFormat, AccessLog, AccessLogConfig, AccessTarget};
pub use crate::body::{ClientBody, RequestBody};
use crate::connection::{self, Served, server_builder};
use crate::forward::Pools;
pub use crate::forward::{Forward, ForwardBody};
use crate::generation::Generations;
pub use crate::h1::upstream::{UpstreamBody, UpstreamBodyError};
pub use crate::settings::{
    DEFAULT_HEAD_TIMEOUT, DEFAULT_TLS_RELOAD, ListenerTls, ProxyError, ProxySettings,
};
use crate::upstreams::probe::{self, Probes};
use crate::upstreams::{Upstreams, UpstreamsConfig};

/// A bound proxy, ready to [`run`](Proxy::run).
pub struct Proxy {
    listener: TcpListener,
    /// Client connections open, against their caps (all workers share them).
    caps: Arc<ConnCaps>,
    admin: Option<TcpListener>,
    /// `Host` names the admin API and page answer besides loopback ones.
    admin_hosts: Arc<AllowedHosts>,
    /// The current configuration's limiter, swapped by a reload.
    generations: Arc<Generations>,
    /// The metrics every generation shares.
    metrics: Arc<Metrics>,
    /// The access log, if any.
    access_log: Option<AccessLog>,
    serving: Serving,
    grace: Duration,
    /// The upstream groups and their servers' health, shared by the workers.
    upstreams: Arc<Upstreams>,
    /// The active health checks (stopped when the proxy is dropped).
    _probes: Probes,
}

/// Where accepted connections are served.
enum Serving {
    /// On the runtime that calls [`Proxy::run`].
    Here(Arc<Served>),
    /// Dealt in turn to worker threads, each with its own service and upstream pool.
    Workers(Vec<Worker>),
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("listen", &self.local_addr())
            .field("admin", &self.admin_addr())
            .finish_non_exhaustive()
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Bind { addr, source })
}

impl Proxy {
    /// Bind the listeners (port 0 picks a free port) and start the worker threads, if
    /// `settings.workers` asks for any.
    pub async fn bind(limiter: RateLimiter, settings: &ProxySettings) -> Result<Proxy, ProxyError> {
        let config = UpstreamsConfig {
            upstream: &settings.upstream,
            groups: &settings.upstream_groups,
            routes: &settings.route_upstreams,
        };
        let upstreams = Upstreams::new(config, limiter.metrics(), None)
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        let upstreams = Arc::new(upstreams);
        if upstreams.is_empty() {
            return Err(ProxyError::Upstream(
                "no upstream: set `upstream = \"http://host:port\"` or define [upstreams.NAME] groups".into(),
            ));
        }
        // one TLS connector for every worker and probe (built, and an opt-out warned
        // about, once), when some server is https://
        let upstream_tls = if upstreams.any_tls() {
            Some(crate::forward::upstream_tls(settings)?)
        } else {
            None
        };
        let sticky = limiter
            .fleet()
            .is_some_and(|f| f.strategy() == floodgate_engine::fleet::Strategy::Sticky);
        if sticky && settings.tls.is_some() {
            return Err(ProxyError::Fleet(crate::config::STICKY_TLS.into()));
        }
        let metrics = limiter.metrics().clone();
        let generations = Generations::new(limiter, settings.route_upstreams.clone());
        let pools = || {
            Pools::new(
                settings,
                upstreams.clone(),
                metrics.clone(),
                upstream_tls.clone(),
            )
        };
        let listener = bind(settings.listen).await?;
        let access_log = match &settings.access_log {
            Some(c) => Some(AccessLog::start(c, metrics.clone()).map_err(|source| {
                ProxyError::AccessLog {
                    target: c.target.to_string(),
                    source,
                }
            })?),
            None => None,
        };
        if let Some(tls) = &settings.tls {
            if let Some(every) = tls.reload_interval {
                tls.server.certs().reload_every(every);
            }
            tracing::info!(names = ?tls.server.certs().names(), "TLS on the listener (ALPN h2, http/1.1)");
        }
        let admin = match settings.admin {
            Some(a) => {
                if !a.ip().is_loopback() {
                    tracing::warn!(admin = %a, "the admin listener is not on loopback: it shows keys and the config to whoever reaches it (see the book's admin page on protecting it)");
                }
                Some(bind(a).await?)
            }
            None => None,
        };
        let serving = if settings.workers == 0 {
            Serving::Here(Served::new(
                pools()?,
                generations.clone(),
                settings,
                access_log.clone(),
            )?)
        } else {
            let mut workers = Vec::with_capacity(settings.workers);
            for i in 0..settings.workers {
                let served =
                    Served::new(pools()?, generations.clone(), settings, access_log.clone())?;
                let w = Worker::spawn(i, served, settings.shutdown_grace);
                workers.push(w.map_err(ProxyError::Worker)?);
            }
            Serving::Workers(workers)
        };
        Ok(Proxy {
            listener,
            caps: ConnCaps::new(
                settings.max_connections,
                settings.max_connections_per_client,
            ),
            admin,
            admin_hosts: Arc::new(settings.admin_allowed_hosts.clone()),
            serving,
            generations,
            metrics,
            access_log,
            grace: settings.shutdown_grace,
            _probes: probe::start(&upstreams, settings.upstream_http2, upstream_tls.as_ref()),
            upstreams,
        })
    }

    /// The access log, if `settings.access_log` asked for one (to reopen its file on
    /// `SIGUSR1` and after a reload).
    pub fn access_log(&self) -> Option<&AccessLog> {
        self.access_log.as_ref()
    }

    /// The proxy's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The current configuration, for a reloader to swap ([`Generations::swap`]).
    pub fn generations(&self) -> &Arc<Generations> {
        &self.generations
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serve until `shutdown` completes, then drain in-flight requests (at most the grace
    /// period).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let admin_builder = admin_builder();
        // the admin listener's connections
        let graceful = GracefulShutdown::new();
        // client connections served on this runtime
        let draining = Draining::new();
        let generations = self.generations.clone();
        let hosts = self.admin_hosts.clone();
        let upstreams = self.upstreams.clone();
        let admin_svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let limiter = generations.load().limiter.clone();
            let hosts = hosts.clone();
            let upstreams = upstreams.clone();
            async move { Ok::<_, Infallible>(admin(&limiter, &upstreams, &hosts, &req).await) }
        });
        let mut next = 0usize;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                r = self.listener.accept() => {
                    let (stream, peer) = match r {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    // over a cap: closed at once (counted)
                    let slot = match self.caps.admit(peer.ip()) {
                        Ok(slot) => slot,
                        Err(refused) => {
                            self.metrics.client_connection(refused.label());
                            drop(stream);
                            continue;
                        }
                    };
                    self.metrics.client_connection("accepted");
                    let _ = stream.set_nodelay(true);
                    let workers = match &self.serving {
                        Serving::Here(served) => {
                            draining.serve(served, stream, peer, slot);
                            continue;
                        }
                        Serving::Workers(w) => w,
                    };
                    // deal connections to the workers in turn
                    let w = &workers[next % workers.len()];
                    next = next.wrapping_add(1);
                    match stream.into_std() {
                        Ok(s) => {
                            if w.conns.send((s, peer, slot)).is_err() {
                                tracing::error!(worker = w.index, "worker thread is gone; connection dropped");
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, %peer, "cannot hand the connection to a worker"),
                    }
                }
                r = accept_opt(self.admin.as_ref()) => {
                    if let Ok((stream, _)) = r {
                        let conn = admin_builder.serve_connection(TokioIo::new(stream), admin_svc.clone()).into_owned();
                        let conn = graceful.watch(conn);
                        tokio::spawn(async move { let _ = conn.await; });
                    }
                }
            }
        }
        drop(self.listener);
        drop(self.admin);
        let mut done = Vec::new();
        if let Serving::Workers(workers) = self.serving {
            for w in workers {
                // closing the channel tells the worker to stop and drain
                drop(w.conns);
                done.push(w.done);
            }
        }
        tracing::info!(
            connections = draining.count() + graceful.count(),
            workers = done.len(),
            "shutting down: draining in-flight requests"
        );
        let workers = async {
            for d in done {
                let _ = d.await;
            }
        };
        tokio::join!(
            drain(graceful, self.grace),
            draining.drain(self.grace),
            workers
        );
    }
}

/// The admin listener's: hyper's own header-read timeout (its cost per request does not
/// matter there).
fn admin_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = server_builder();
    builder.http1().header_read_timeout(DEFAULT_HEAD_TIMEOUT);
    builder
}

/// Connections being served on one runtime, and the signal that tells them to finish:
/// each holds a receiver, so the sender sees when the last has ended.
struct Draining {
    tx: tokio::sync::watch::Sender<bool>,
}

impl Draining {
    fn new() -> Draining {
        Draining {
            tx: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Serve one client connection on the current runtime ([`connection::serve`]).
    fn serve(
        &self,
        served: &Arc<Served>,
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
        slot: ConnSlot,
    ) {
        tokio::spawn(connection::serve(
            stream,
            peer,
            served.clone(),
            self.tx.subscribe(),
            slot,
        ));
    }

    /// Connections not yet ended.
    fn count(&self) -> usize {
        self.tx.receiver_count()
    }

    /// Tell every connection to finish (idle ones close, in-flight requests are answered)
    /// and wait until they have, for at most `grace`.
    async fn drain(self, grace: Duration) {
        self.tx.send_replace(true);
        tokio::select! {
            () = self.tx.closed() => {}
            () = tokio::time::sleep(grace) => tracing::warn!(?grace, open = self.tx.receiver_count(), "grace period over; closing remaining connections"),
        }
    }
}

/// Let the watched (admin) connections finish, for at most `grace`.
async fn drain(graceful: GracefulShutdown, grace: Duration) {
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => tracing::warn!(?grace, "grace period over; closing remaining connections"),
    }
}

/// An accepted connection on its way to a worker, with its place under the caps.
type Accepted = (std::net::TcpStream, SocketAddr, ConnSlot);

/// A worker thread: a single-threaded runtime serving the connections it is handed, with
/// its own upstream pool (in its [`FleetService`]). It stops when `conns` is closed,
/// after draining its connections, and then completes `done`.
struct Worker {
    index: usize,
    conns: tokio::sync::mpsc::UnboundedSender<Accepted>,
    done: tokio::sync::oneshot::Receiver<()>,
}

impl Worker {
    fn spawn(index: usize, served: Arc<Served>, grace: Duration) -> std::io::Result<Worker> {
        let (conns, mut rx) = tokio::sync::mpsc::unbounded_channel::<Accepted>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("floodgate-worker-{index}"))
            .spawn(move || {
                rt.block_on(async move {
                    let draining = Draining::new();
                    while let Some((stream, peer, slot)) = rx.recv().await {
                        match tokio::net::TcpStream::from_std(stream) {
                            Ok(s) => draining.serve(&served, s, peer, slot),
                            Err(e) => tracing::warn!(error = %e, %peer, "worker cannot take the connection"),
                        }
                    }
                    draining.drain(grace).await;
                });
                let _ = done_tx.send(());
            })?;
        Ok(Worker { index, conns, done })
    }
}

async fn accept_opt(
    l: Option<&TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The admin listener: `/metrics`, `/healthz`, and the admin API and page under `/admin`
/// ([`floodgate_engine::admin`]; `/admin/upstreams`: the upstream servers' states as
/// JSON), which answer only the `Host` names `hosts` allows (421 otherwise) and carry
/// `nosniff` and a Content-Security-Policy.
async fn admin<B>(
    limiter: &RateLimiter,
    upstreams: &Upstreams,
    hosts: &AllowedHosts,
    req: &Request<B>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let asked = AdminRequest {
        method: req.method().as_str(),
        path,
        query: req.uri().query(),
    };
    let reply = if !is_admin_path(path) {
        None
    } else {
        // HTTP/2 carries the host in `:authority`, HTTP/1 in `Host`
        let host = req
            .headers()
            .get(HOST)
            .map(HeaderValue::as_bytes)
            .or_else(|| req.uri().authority().map(|a| a.as_str().as_bytes()));
        if hosts.allows(host) && path == "/admin/upstreams" {
            Some(floodgate_engine::admin::AdminReply {
                status: 200,
                content_type: "application/json",
                body: upstreams.status().to_string(),
            })
        } else if hosts.allows(host) {
            limiter.admin(&asked).await
        } else {
            Some(misdirected(host, "admin_allowed_hosts"))
        }
    };
    if let Some(reply) = reply {
        let mut r = Response::new(Full::new(Bytes::from(reply.body)));
        *r.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
        for (name, value) in security_headers() {
            r.headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        return r;
    }
    let (status, ctype, body) = match path {
        "/metrics" => {
            upstreams.refresh_gauges();
            let format = Exposition::negotiate(req.headers());
            (
                StatusCode::OK,
                format.content_type(),
                limiter.render_metrics_as(format),
            )
        }
        // serving either way: while the store does not answer, the fault policy decides
        "/healthz" if limiter.store_reachable() => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "ok\n".to_string(),
        ),
        "/healthz" => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "degraded: the decision store does not answer; decisions follow the fault policy\n"
                .to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try /metrics, /healthz or /admin\n".to_string(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

/// Whether `path` is the admin page's or API's: `/admin` or under `/admin/`.
fn is_admin_path(path: &str) -> bool {
    path.strip_prefix("/admin")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Completes on Ctrl-C or SIGTERM (`SIGHUP` reloads: see [`crate::reload`]).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}
