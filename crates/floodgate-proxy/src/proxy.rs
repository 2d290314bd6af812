//! The reverse proxy behind `floodgate proxy`: a server for HTTP/1.1 and HTTP/2 (h2c
//! prior knowledge) whose service is [`RateLimitService`] around [`Forward`], a pooled
//! client to one upstream. Bodies stream both ways; nothing is buffered.
//!
//! Client connections start on the proxy's own HTTP/1 path (`client_conn`), which
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
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderName};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower_service::Service;

use crate::client_conn;
use crate::deny::{ReplyFormat, is_grpc, short_response};
use crate::head_timeout::{self, HeadWait, Watched};
use crate::key::PeerAddr;
use crate::layer::RateLimitService;
use crate::limiter::RateLimiter;
use crate::metrics::Metrics;
use crate::sticky::{FleetService, Sticky};
use crate::upstream::{Http1Pool, UpstreamBody, UpstreamError, direct};

/// Proxy settings (the non-limiter part of the config).
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// The backend, `http://host:port`.
    pub upstream: Uri,
    /// Admin listener for `/metrics` and `/healthz`.
    pub admin: Option<SocketAddr>,
    /// Time allowed for the upstream's response head (504 after).
    pub upstream_timeout: Duration,
    /// Time allowed to connect to the upstream (502 after).
    pub connect_timeout: Duration,
    /// Longest drain at shutdown.
    pub shutdown_grace: Duration,
    /// h2c prior knowledge to the upstream.
    pub upstream_http2: bool,
    /// Worker threads, each with its own single-threaded runtime and its own upstream
    /// connection pool; accepted connections are dealt to them in turn, and each stays
    /// on its worker (no work stealing, no cross-thread wakeups per request). 0: serve
    /// on the runtime that calls [`Proxy::run`].
    pub workers: usize,
    /// How long a client connection may wait for a request head with no request in
    /// flight (idle between requests, or a head arriving too slowly) before it is
    /// closed.
    pub head_timeout: Duration,
}

impl ProxySettings {
    /// Defaults around an upstream: listen 127.0.0.1:8080, 30 s upstream timeout, 5 s
    /// connect timeout, 30 s grace, HTTP/1.1 upstream, no admin listener.
    pub fn new(upstream: Uri) -> Self {
        ProxySettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            upstream,
            admin: None,
            upstream_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            upstream_http2: false,
            workers: 0,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
        }
    }
}

/// The default [`ProxySettings::head_timeout`] (hyper's header-read timeout before).
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The upstream URI is unusable.
    #[error("upstream {0}")]
    Upstream(String),
    /// The fleet's nodes are unusable (a name that does not resolve, say).
    #[error("fleet: {0}")]
    Fleet(String),
    /// A worker thread or its runtime could not be started.
    #[error("cannot start worker thread: {0}")]
    Worker(std::io::Error),
}

/// The body of a proxied response: the upstream's, or a short error body.
pub type ForwardBody = Either<UpstreamBody, Full<Bytes>>;

/// A client's request body as the proxy's service receives it: none (a request read by
/// the proxy's own HTTP/1 path, which only takes requests without a body), or hyper's.
#[derive(Debug)]
pub enum RequestBody {
    /// No body.
    Empty,
    /// The body as hyper reads it (any request hyper's server read).
    Incoming(Incoming),
}

impl From<Incoming> for RequestBody {
    fn from(b: Incoming) -> Self {
        RequestBody::Incoming(b)
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Incoming(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Incoming(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            RequestBody::Empty => http_body::SizeHint::with_exact(0),
            RequestBody::Incoming(b) => b.size_hint(),
        }
    }
}

/// The client's request body on its way upstream, watched: when reading it fails
/// (malformed framing, the client hanging up), `failed` is set, so that the failed
/// upstream call is not blamed on the upstream.
#[derive(Debug)]
pub struct ClientBody {
    inner: RequestBody,
    failed: Arc<AtomicBool>,
}

impl ClientBody {
    /// Watch `inner`; the flag is set when reading it fails.
    pub(crate) fn watch(inner: RequestBody) -> (ClientBody, Arc<AtomicBool>) {
        let failed = Arc::new(AtomicBool::new(false));
        (
            ClientBody {
                inner,
                failed: failed.clone(),
            },
            failed,
        )
    }

    /// The body itself.
    pub(crate) fn into_inner(self) -> RequestBody {
        self.inner
    }
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &r {
            this.failed.store(true, Ordering::Relaxed);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// How requests reach the upstream.
#[derive(Clone)]
enum Upstream {
    /// HTTP/1.1 over this forwarder's own connection pool.
    Http1(Arc<Http1Pool>),
    /// HTTP/2 (h2c prior knowledge), multiplexed by hyper-util's client.
    Http2(Box<Client<HttpConnector, ClientBody>>),
}

/// Forwards requests to one upstream over pooled connections. Cloning shares it.
#[derive(Clone)]
pub struct Forward {
    inner: Arc<ForwardInner>,
}

struct ForwardInner {
    upstream: Upstream,
    scheme: Scheme,
    authority: Authority,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("authority", &self.inner.authority)
            .finish_non_exhaustive()
    }
}

static HOP_BY_HOP: [HeaderName; 8] = [
    HeaderName::from_static("connection"),
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("proxy-authenticate"),
    HeaderName::from_static("te"),
    HeaderName::from_static("trailer"),
    HeaderName::from_static("transfer-encoding"),
    HeaderName::from_static("upgrade"),
];

/// Whether `name` (lowercase, as `HeaderName` holds it) is one of [`HOP_BY_HOP`].
fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

pub(crate) fn strip_hop_by_hop(h: &mut HeaderMap) {
    // one pass over the names first: most messages carry none, and eight removals
    // (each hashing its name) cost more than the scan
    if !h.keys().any(|k| is_hop_by_hop(k.as_str())) {
        return;
    }
    // headers named in Connection are hop-by-hop too
    let named: Vec<HeaderName> = h
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
        .collect();
    for n in HOP_BY_HOP.iter().chain(&named) {
        h.remove(n);
    }
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// How one request goes upstream.
enum Route {
    /// No body, HTTP/1.1: the encoded head, sent the direct way.
    Direct(Arc<Http1Pool>, Vec<u8>, http::Method),
    /// Through hyper's client (a body to stream, or an HTTP/2 upstream).
    Hyper(Box<Request<ClientBody>>),
}

/// The request fields sent upstream, in order, to `emit`: the client's, less the
/// hop-by-hop ones (and those its `Connection` names) and `X-Forwarded-For`; then
/// `Host: host` when given and the client sent none; then `X-Forwarded-For` with the
/// client's values joined by ", " and `peer` appended. Every value emitted is a valid
/// field value (no CR, LF or NUL).
fn upstream_fields(
    headers: &HeaderMap,
    host: Option<&str>,
    peer: Option<std::net::IpAddr>,
    mut emit: impl FnMut(&HeaderName, &[u8]),
) {
    // headers named in Connection are hop-by-hop too (rare: only then is this built)
    let named: Vec<HeaderName> = match headers.get(http::header::CONNECTION) {
        None => Vec::new(),
        Some(_) => headers
            .get_all(http::header::CONNECTION)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
            .collect(),
    };
    let mut forwarded: Vec<u8> = Vec::new();
    let mut has_host = false;
    for (name, value) in headers {
        let n = name.as_str();
        has_host |= name == HOST;
        if is_hop_by_hop(n) || named.contains(name) {
            continue;
        }
        if name == X_FORWARDED_FOR {
            if !forwarded.is_empty() {
                forwarded.extend_from_slice(b", ");
            }
            forwarded.extend_from_slice(value.as_bytes());
            continue;
        }
        emit(name, value.as_bytes());
    }
    if let Some(h) = host.filter(|_| !has_host) {
        emit(&HOST, h.as_bytes());
    }
    if let Some(ip) = peer {
        if !forwarded.is_empty() {
            forwarded.extend_from_slice(b", ");
        }
        crate::key::push_ip_text(&mut forwarded, ip);
    }
    if !forwarded.is_empty() {
        emit(&X_FORWARDED_FOR, &forwarded);
    }
}

/// How long an upstream connection may sit unused before it is closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Most idle upstream connections kept (per worker).
const POOL_MAX_IDLE: usize = 1024;

impl Forward {
    /// A forwarder to `settings.upstream`.
    pub fn new(settings: &ProxySettings, metrics: Arc<Metrics>) -> Result<Forward, ProxyError> {
        let parts = settings.upstream.clone().into_parts();
        let scheme = parts.scheme.unwrap_or(Scheme::HTTP);
        let authority = parts
            .authority
            .ok_or_else(|| ProxyError::Upstream(format!("{} has no host", settings.upstream)))?;
        let upstream = if settings.upstream_http2 {
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(Some(settings.connect_timeout));
            connector.set_nodelay(true);
            Upstream::Http2(Box::new(
                Client::builder(TokioExecutor::new())
                    .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                    .pool_timer(TokioTimer::new())
                    .timer(TokioTimer::new())
                    .http2_only(true)
                    .build(connector),
            ))
        } else {
            if scheme != Scheme::HTTP {
                return Err(ProxyError::Upstream(format!(
                    "{}: only http:// upstreams are supported",
                    settings.upstream
                )));
            }
            let addr = format!(
                "{}:{}",
                authority.host(),
                authority.port_u16().unwrap_or(80)
            );
            Upstream::Http1(Arc::new(Http1Pool::new(
                addr,
                settings.connect_timeout,
                POOL_IDLE_TIMEOUT,
                POOL_MAX_IDLE,
            )))
        };
        Ok(Forward {
            inner: Arc::new(ForwardInner {
                upstream,
                scheme,
                authority,
                timeout: settings.upstream_timeout,
                metrics,
            }),
        })
    }

    fn error(
        &self,
        status: StatusCode,
        detail: &str,
        format: ReplyFormat,
    ) -> Response<ForwardBody> {
        short_response(status, detail, None, None, format).map(Either::Right)
    }
}

impl Service<Request<RequestBody>> for Forward {
    type Response = Response<ForwardBody>;
    type Error = Infallible;
    type Future = crate::store::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RequestBody>) -> Self::Future {
        // a gRPC call (it has a body) gets its failures as a gRPC status, anything else
        // as text
        let format = match req.body() {
            RequestBody::Incoming(_) if is_grpc(req.headers()) => ReplyFormat::Grpc,
            _ => ReplyFormat::Text,
        };
        // the head is prepared here, so that the future holds only what it waits with
        let Some((route, body_failed)) = self.route(req) else {
            let resp = self.error(StatusCode::BAD_REQUEST, "unusable request target", format);
            return Box::pin(std::future::ready(Ok(resp)));
        };
        let this = self.clone();
        Box::pin(async move {
            // Ok(response), Ok(error), or Err(()) when no response head came within the
            // upstream timeout (the direct way times itself, on its connection's timer)
            let timeout = this.inner.timeout;
            // an error comes with its kind for the metric: "connect" or "response"
            type Sent = Result<Response<UpstreamBody>, (BoxError, &'static str)>;
            let failed = |e: UpstreamError| {
                let kind = e.kind();
                (BoxError::from(e), kind)
            };
            let sent: Result<Sent, ()> = match route {
                Route::Direct(pool, head, method) => {
                    match pool.send_head(&head, &method, timeout).await {
                        Err(UpstreamError::Direct(direct::ExchangeError::TimedOut)) => Err(()),
                        r => Ok(r.map_err(failed)),
                    }
                }
                Route::Hyper(req) => {
                    let send = async {
                        match &this.inner.upstream {
                            Upstream::Http1(pool) => pool.send(*req).await.map_err(failed),
                            Upstream::Http2(client) => client
                                .request(*req)
                                .await
                                .map(|r| r.map(UpstreamBody::unpooled))
                                .map_err(|e| {
                                    let kind = if e.is_connect() {
                                        "connect"
                                    } else {
                                        "response"
                                    };
                                    (BoxError::from(e), kind)
                                }),
                        }
                    };
                    // boxed: the direct way's state, not this one's, sizes this future
                    Box::pin(tokio::time::timeout(timeout, send))
                        .await
                        .map_err(|_| ())
                }
            };
            match sent {
                Ok(Ok(resp)) => {
                    let (mut parts, body) = resp.into_parts();
                    strip_hop_by_hop(&mut parts.headers);
                    Ok(Response::from_parts(parts, Either::Left(body)))
                }
                Ok(Err((e, _)))
                    if body_failed
                        .as_ref()
                        .is_some_and(|f| f.load(Ordering::Relaxed)) =>
                {
                    tracing::debug!(error = %e, "the client's request body failed");
                    Ok(this.error(
                        StatusCode::BAD_REQUEST,
                        "the request body is malformed or ended early",
                        format,
                    ))
                }
                Ok(Err((e, kind))) => {
                    this.inner.metrics.upstream_error(kind);
                    tracing::warn!(error = %e, upstream = %this.inner.authority, "upstream failed");
                    Ok(this.error(StatusCode::BAD_GATEWAY, "upstream unavailable", format))
                }
                Err(_) => {
                    this.inner.metrics.upstream_error("timeout");
                    tracing::warn!(upstream = %this.inner.authority, timeout = ?this.inner.timeout, "upstream timed out");
                    Ok(this.error(StatusCode::GATEWAY_TIMEOUT, "upstream timed out", format))
                }
            }
        })
    }
}

impl Forward {
    /// How `req` goes upstream, and the flag its body sets when it fails (hyper's way
    /// only: the direct way has no body to fail); `None` when its target cannot be sent
    /// to an HTTP/2 upstream.
    fn route(&self, req: Request<RequestBody>) -> Option<(Route, Option<Arc<AtomicBool>>)> {
        let (parts, body) = req.into_parts();
        let peer = parts
            .extensions
            .get::<PeerAddr>()
            .map(|p| p.0.ip().to_canonical());
        let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        // the client's Host (or HTTP/2 :authority) is kept
        let host = Some(
            parts
                .uri
                .authority()
                .unwrap_or(&self.inner.authority)
                .as_str(),
        );
        // set when the client's request body fails (hyper's way only: the direct way
        // has no body to fail)
        let mut body_failed: Option<Arc<AtomicBool>> = None;
        let route = match &self.inner.upstream {
            // no body: the head is encoded straight from the client's
            Upstream::Http1(pool) if http_body::Body::is_end_stream(&body) => {
                let mut head = Vec::with_capacity(256);
                direct::encode_request_line(&mut head, &parts.method, target);
                // the body is known to be empty: a Content-Length the client sent
                // goes out as 0, once, so the upstream can never wait for bytes that
                // would be the next request on this connection
                let mut length_sent = false;
                upstream_fields(&parts.headers, host, peer, |name, value| {
                    if name == CONTENT_LENGTH {
                        if !length_sent {
                            direct::encode_field(&mut head, b"content-length", b"0");
                            length_sent = true;
                        }
                    } else {
                        direct::encode_field(&mut head, name.as_str().as_bytes(), value)
                    }
                });
                head.extend_from_slice(b"\r\n");
                Route::Direct(pool.clone(), head, parts.method)
            }
            upstream => {
                let h2 = matches!(upstream, Upstream::Http2(_));
                let mut headers = HeaderMap::with_capacity(parts.headers.len() + 2);
                upstream_fields(&parts.headers, host.filter(|_| !h2), peer, |name, value| {
                    if let Ok(v) = HeaderValue::from_bytes(value) {
                        headers.append(name.clone(), v);
                    }
                });
                let pq = PathAndQuery::try_from(target)
                    .unwrap_or_else(|_| PathAndQuery::from_static("/"));
                let (uri, version) = if h2 {
                    // absolute form: hyper sends it as :scheme and :authority
                    let mut uri = http::uri::Parts::default();
                    uri.scheme = Some(self.inner.scheme.clone());
                    uri.authority = Some(self.inner.authority.clone());
                    uri.path_and_query = Some(pq);
                    match Uri::from_parts(uri) {
                        Ok(u) => (u, Version::HTTP_2),
                        Err(_) => return None,
                    }
                } else {
                    (Uri::from(pq), Version::HTTP_11)
                };
                let (body, failed) = ClientBody::watch(body);
                body_failed = Some(failed);
                let mut req = Request::new(body);
                *req.method_mut() = parts.method;
                *req.uri_mut() = uri;
                *req.version_mut() = version;
                *req.headers_mut() = headers;
                Route::Hyper(Box::new(req))
            }
        };
        Some((route, body_failed))
    }
}

/// A bound proxy, ready to [`run`](Proxy::run).
pub struct Proxy {
    listener: TcpListener,
    admin: Option<TcpListener>,
    limiter: RateLimiter,
    serving: Serving,
    grace: Duration,
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
        let service = || -> Result<FleetService, ProxyError> {
            Ok(FleetService::new(
                RateLimitService::new(
                    Forward::new(settings, limiter.metrics().clone())?,
                    limiter.clone(),
                ),
                Sticky::new(
                    &limiter,
                    settings.connect_timeout,
                    settings.upstream_timeout,
                )?,
            ))
        };
        let listener = bind(settings.listen).await?;
        let admin = match settings.admin {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        let serving = if settings.workers == 0 {
            Serving::Here(Served::new(
                service()?,
                limiter.metrics().clone(),
                settings.head_timeout,
            ))
        } else {
            let mut workers = Vec::with_capacity(settings.workers);
            for i in 0..settings.workers {
                let w = Worker::spawn(
                    i,
                    service()?,
                    limiter.metrics().clone(),
                    settings.shutdown_grace,
                    settings.head_timeout,
                );
                workers.push(w.map_err(ProxyError::Worker)?);
            }
            Serving::Workers(workers)
        };
        Ok(Proxy {
            listener,
            admin,
            serving,
            limiter,
            grace: settings.shutdown_grace,
        })
    }

    /// The proxy's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
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
        let limiter = self.limiter.clone();
        let admin_svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let limiter = limiter.clone();
            async move { Ok::<_, Infallible>(admin(&limiter, req.uri().path())) }
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
                    let _ = stream.set_nodelay(true);
                    let workers = match &self.serving {
                        Serving::Here(served) => {
                            draining.serve(served, stream, peer);
                            continue;
                        }
                        Serving::Workers(w) => w,
                    };
                    // deal connections to the workers in turn
                    let w = &workers[next % workers.len()];
                    next = next.wrapping_add(1);
                    match stream.into_std() {
                        Ok(s) => {
                            if w.conns.send((s, peer)).is_err() {
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

/// The HTTP/1.1 + HTTP/2 (h2c) server settings of the proxy's listener. No header-read
/// timeout here: [`head_timeout`] closes connections that wait too long for a head.
fn server_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // with a timer, hyper would arm its 30 s default header-read timeout per request
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None::<Duration>);
    builder.http2().timer(TokioTimer::new());
    builder
}

/// The admin listener's: hyper's own header-read timeout (its cost per request does not
/// matter there).
fn admin_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = server_builder();
    builder.http1().header_read_timeout(DEFAULT_HEAD_TIMEOUT);
    builder
}

/// What a runtime's client connections share: the service, the metrics, the head
/// timeout, and hyper's server settings for the connections handed to hyper.
pub(crate) struct Served {
    pub(crate) svc: FleetService,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) head_timeout: Duration,
    builder: auto::Builder<TokioExecutor>,
}

impl Served {
    fn new(svc: FleetService, metrics: Arc<Metrics>, head_timeout: Duration) -> Arc<Served> {
        Arc::new(Served {
            svc,
            metrics,
            head_timeout,
            builder: server_builder(),
        })
    }
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

    /// Serve one client connection on the current runtime ([`client_conn`]).
    fn serve(&self, served: &Arc<Served>, stream: tokio::net::TcpStream, peer: SocketAddr) {
        tokio::spawn(client_conn::serve(
            stream,
            peer,
            served.clone(),
            self.tx.subscribe(),
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

/// Serve a client connection with hyper (HTTP/1.1 and h2c), until it ends, it has
/// waited `head_timeout` for a request head ([`head_timeout`]; an HTTP/2 client then
/// gets a GOAWAY), or shutdown has let its in-flight requests finish.
pub(crate) async fn serve_hyper<I>(
    served: &Served,
    io: I,
    peer: SocketAddr,
    shutdown: tokio::sync::watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let wait = HeadWait::new();
    let watch = wait.clone();
    let svc = served.svc.clone();
    let metrics = served.metrics.clone();
    let hsvc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let in_flight = watch.start();
        let mut req = req.map(RequestBody::Incoming);
        req.extensions_mut().insert(PeerAddr(peer));
        let mut svc = svc.clone();
        let metrics = metrics.clone();
        let start = Instant::now();
        async move {
            let r = svc.call(req).await;
            metrics.proxy_seconds.observe(start.elapsed());
            r.map(|resp| resp.map(|body| Watched::new(body, in_flight)))
        }
    });
    let conn = served.builder.serve_connection(TokioIo::new(io), hsvc);
    let mut conn = std::pin::pin!(conn);
    // Some(Some(end)): the connection ended; Some(None): shutdown; None: head timeout
    let first = head_timeout::run(
        async {
            tokio::select! {
                r = conn.as_mut() => Some(r),
                () = client_conn::stopped(shutdown) => None,
            }
        },
        wait,
        served.head_timeout,
    )
    .await;
    let ended = match first {
        Some(Some(r)) => r,
        // in-flight requests finish (the drain's grace bounds them); HTTP/2 gets a GOAWAY
        Some(None) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        None => {
            tracing::debug!(%peer, timeout = ?served.head_timeout, "no request head within the head timeout: connection closed");
            // idle: an HTTP/2 client is told with a GOAWAY, an HTTP/1 connection closes;
            // a head still trickling in (slowloris) is cut after a short grace
            conn.as_mut().graceful_shutdown();
            let grace = served.head_timeout.min(Duration::from_secs(1));
            match tokio::time::timeout(grace, conn).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}

/// Let the watched (admin) connections finish, for at most `grace`.
async fn drain(graceful: GracefulShutdown, grace: Duration) {
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => tracing::warn!(?grace, "grace period over; closing remaining connections"),
    }
}

/// A worker thread: a single-threaded runtime serving the connections it is handed, with
/// its own upstream pool (in its [`FleetService`]). It stops when `conns` is closed,
/// after draining its connections, and then completes `done`.
struct Worker {
    index: usize,
    conns: tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, SocketAddr)>,
    done: tokio::sync::oneshot::Receiver<()>,
}

impl Worker {
    fn spawn(
        index: usize,
        svc: FleetService,
        metrics: Arc<Metrics>,
        grace: Duration,
        head_timeout: Duration,
    ) -> std::io::Result<Worker> {
        let (conns, mut rx) =
            tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, SocketAddr)>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("floodgate-worker-{index}"))
            .spawn(move || {
                rt.block_on(async move {
                    let served = Served::new(svc, metrics, head_timeout);
                    let draining = Draining::new();
                    while let Some((stream, peer)) = rx.recv().await {
                        match tokio::net::TcpStream::from_std(stream) {
                            Ok(s) => draining.serve(&served, s, peer),
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

fn admin(limiter: &RateLimiter, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            limiter.render_metrics(),
        ),
        "/healthz" => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "ok\n".to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try /metrics or /healthz\n".to_string(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

/// Completes on Ctrl-C or SIGTERM.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_named_in_connection_are_stripped() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("x-secret, Keep-Alive"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
        // without any hop-by-hop header, nothing is touched (not even a header that a
        // Connection header would have named)
        let mut h = HeaderMap::new();
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 2);
        // the fast name test and the list agree
        for n in &HOP_BY_HOP {
            assert!(is_hop_by_hop(n.as_str()), "{n}");
        }
        for n in ["x-kept", "host", "content-length", "tes", "connections"] {
            assert!(!is_hop_by_hop(n), "{n}");
        }
    }
}
