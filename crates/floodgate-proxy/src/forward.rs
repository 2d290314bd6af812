//! [`Forward`]: the proxy's client to its upstream servers, over pooled connections (its
//! own HTTP/1.1 pool per server, or hyper-util's client for HTTP/2), cleartext or TLS
//! (`https://` servers, [`upstream_tls`]), with the request rewritten for the upstream:
//! `X-Forwarded-For` appended, hop-by-hop headers dropped both ways. Which server a
//! request goes to, and what its outcome does to the server's health, is [`Upstreams`]'s.
//!
//! A worker's connections (`Pools`) outlive configurations; a [`Forward`] is those
//! connections with one configuration's limiter and route groups ([`RouteGroups`]),
//! built per generation, so that a reload's routes send to their groups at once.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use floodgate_engine::deny::{ReplyFormat, is_grpc, short_response};
use floodgate_engine::metrics::Metrics;
use floodgate_http::SettleHandle;
use floodgate_http::key::PeerAddr;
use floodgate_http::limiter::RateLimiter;
use http::header::{CONTENT_LENGTH, HOST, HeaderName};
use http::uri::{PathAndQuery, Scheme};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use floodgate_engine::leases::LeaseBody;

use crate::body::{BodyState, BodyWatch, ClientBody, RequestBody};
use crate::error_text::with_sources;
use crate::h1::upstream::{Http1Pool, UpstreamBody, UpstreamError, direct};
use crate::h1::{encode_field, encode_request_line};
use crate::hop_by_hop::{is_hop_by_hop, strip_hop_by_hop};
use crate::settings::{ProxyError, ProxySettings};
use crate::tls_connect::TlsConnector;
use crate::upstreams::{Balancer, MAX_RETRIES, RouteGroups, Upstreams};
use floodgate_net::tls::ClientTls;

/// The body of a proxied response: the upstream's, or a short error body.
pub type ForwardBody = Either<UpstreamBody, Full<Bytes>>;

/// The proxy's response body: the layer's (the upstream's, holding the request's
/// in-flight leases, or the limiter's own), or the fleet's.
pub type FleetBody = Either<LeaseBody<ForwardBody>, Full<Bytes>>;

/// How requests reach the upstream servers.
#[derive(Clone)]
enum Upstream {
    /// HTTP/1.1 over this forwarder's own connection pools: per group, per server (in
    /// [`Upstreams`]' order), TLS for an `https://` server.
    Http1(Vec<Http1Group>),
    /// HTTP/2, multiplexed by hyper-util's clients (each pools by authority): h2c prior
    /// knowledge to `http://` servers, ALPN `h2` over TLS to `https://` ones (built when
    /// some server is one).
    Http2 {
        h2c: Box<Client<HttpConnector, ClientBody>>,
        tls: Option<Box<Client<TlsConnector, ClientBody>>>,
    },
}

/// One group's HTTP/1.1 pools, in its servers' order.
#[derive(Clone)]
struct Http1Group {
    pools: Arc<[Arc<Http1Pool>]>,
    /// Every server is cleartext: a request without a body goes the direct way (which
    /// may retry on another server of the group, cleartext too).
    plain: bool,
}

/// `req` through hyper-util's client, its error with its kind for the metric.
async fn send_h2<C>(
    client: &Client<C, ClientBody>,
    req: Request<ClientBody>,
) -> Result<Response<UpstreamBody>, (BoxError, &'static str)>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    client
        .request(req)
        .await
        .map(|r| r.map(UpstreamBody::unpooled))
        .map_err(|e| {
            let kind = if e.is_connect() {
                "connect"
            } else {
                "response"
            };
            (BoxError::from(e), kind)
        })
}

/// A worker's connections to every upstream server, kept across configurations (one per
/// worker: each has its own pools). Cloning shares it.
#[derive(Clone)]
pub(crate) struct Pools {
    inner: Arc<ForwardInner>,
}

/// Forwards requests to the upstream servers over a worker's connection pools, routing them as
/// one configuration says (its limiter matches a request's route, its [`RouteGroups`]
/// give the route's group). Cloning shares it.
#[derive(Clone)]
pub struct Forward {
    inner: Arc<ForwardInner>,
    routing: Arc<Routing>,
}

/// One configuration's routing.
struct Routing {
    /// Matches a request's route (its upstream) and gives its policy key (hash groups).
    limiter: RateLimiter,
    /// The group of each of the limiter's routes.
    routes: RouteGroups,
}

struct ForwardInner {
    upstream: Upstream,
    /// The groups, their servers and their health (shared by every worker), picked
    /// from in this worker's turn.
    balancer: Arc<Balancer>,
    timeout: Duration,
    /// [`ProxySettings::body_timeout`].
    body_timeout: Duration,
    metrics: Arc<Metrics>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("upstreams", self.inner.balancer.upstreams())
            .finish_non_exhaustive()
    }
}

/// Whether a response's `Content-Length` is over 2^63-1 (nginx's limit, and more than
/// any body could be), or unreadable as a number.
fn length_over_i64(h: &HeaderMap) -> bool {
    h.get_all(CONTENT_LENGTH).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|n| {
            std::str::from_utf8(n)
                .ok()
                .and_then(|n| n.trim().parse::<i64>().ok())
                .is_none()
        })
    })
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// How one request goes upstream.
enum Route {
    /// No body, HTTP/1.1, cleartext: the encoded head, sent the direct way (the pools are
    /// the group's, so that a failed connect may try another server).
    Direct(Arc<[Arc<Http1Pool>]>, Vec<u8>, http::Method),
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
    // room for the peer's address and a hop or two: one allocation, no regrowth
    let mut forwarded: Vec<u8> = Vec::with_capacity(64);
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
        floodgate_http::key::push_ip_text(&mut forwarded, ip);
    }
    if !forwarded.is_empty() {
        emit(&X_FORWARDED_FOR, &forwarded);
    }
}

/// The TLS connector to `https://` upstream servers, as `settings.upstream_tls` says,
/// offering ALPN `h2` to HTTP/2 upstreams and `http/1.1` otherwise. Logs a warning when
/// verification is off.
pub fn upstream_tls(settings: &ProxySettings) -> Result<ClientTls, ProxyError> {
    let alpn: &[&[u8]] = if settings.upstream_http2 {
        &[b"h2"]
    } else {
        &[b"http/1.1"]
    };
    ClientTls::new(&settings.upstream_tls, alpn).map_err(ProxyError::UpstreamTls)
}

/// How long an upstream connection may sit unused before it is closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

impl Pools {
    /// This worker's connection pools to the servers of `upstreams`; `tls`: the
    /// connector to `https://` servers (from [`upstream_tls`], built once and shared by
    /// the workers; built here when some server is `https://` and none is given).
    pub(crate) fn new(
        settings: &ProxySettings,
        upstreams: Arc<Upstreams>,
        metrics: Arc<Metrics>,
        tls: Option<ClientTls>,
    ) -> Result<Pools, ProxyError> {
        let tls = match tls {
            None if upstreams.any_tls() => Some(upstream_tls(settings)?),
            tls => tls,
        };
        let upstream = if settings.upstream_http2 {
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(Some(settings.connect_timeout));
            connector.set_nodelay(true);
            let mut builder = Client::builder(TokioExecutor::new());
            builder
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_max_idle_per_host(settings.upstream_max_idle)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .http2_only(true);
            let secure = tls.map(|tls| {
                let mut http = connector.clone();
                http.enforce_http(false);
                Box::new(builder.build(TlsConnector {
                    http,
                    tls,
                    timeout: settings.connect_timeout,
                }))
            });
            Upstream::Http2 {
                h2c: Box::new(builder.build(connector)),
                tls: secure,
            }
        } else {
            let groups = upstreams
                .groups()
                .iter()
                .map(|g| {
                    let pools: Arc<[Arc<Http1Pool>]> = g
                        .servers
                        .iter()
                        .map(|s| {
                            let pool = Http1Pool::new(
                                s.addr.clone(),
                                settings.connect_timeout,
                                POOL_IDLE_TIMEOUT,
                                settings.upstream_max_idle,
                            );
                            // the server's host is the name verified ([upstream_tls]
                            // server_name, when set, is the connector's)
                            Arc::new(match (&tls, s.tls) {
                                (Some(tls), true) => {
                                    pool.with_tls(tls.clone(), s.authority.host().to_string())
                                }
                                _ => pool,
                            })
                        })
                        .collect();
                    Http1Group {
                        plain: pools.iter().all(|p| p.is_plain()),
                        pools,
                    }
                })
                .collect();
            Upstream::Http1(groups)
        };
        Ok(Pools {
            inner: Arc::new(ForwardInner {
                upstream,
                balancer: Arc::new(Balancer::new(upstreams)),
                timeout: settings.upstream_timeout,
                body_timeout: settings.body_timeout,
                metrics,
            }),
        })
    }

    /// A forwarder over these pools routing as `limiter` and `routes` (one
    /// configuration's `route.upstream`, in the limiter's route order) say; an error
    /// names a route whose group is not one of the running proxy's.
    pub(crate) fn forward(
        &self,
        limiter: &RateLimiter,
        routes: &[Option<String>],
    ) -> Result<Forward, ProxyError> {
        let routes = self
            .inner
            .balancer
            .upstreams()
            .route_groups(routes)
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        Ok(Forward {
            inner: self.inner.clone(),
            routing: Arc::new(Routing {
                limiter: limiter.clone(),
                routes,
            }),
        })
    }
}

impl Forward {
    /// 408 for a request whose body stalled, counted; the connection ends with it.
    fn body_timed_out(&self, format: ReplyFormat) -> Response<ForwardBody> {
        self.inner.metrics.client_timeout("body");
        tracing::debug!(timeout = ?self.inner.body_timeout, "the client's request body stalled: 408");
        let mut r = self.error(
            StatusCode::REQUEST_TIMEOUT,
            "the request body stalled",
            format,
        );
        r.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        r
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
    type Future = floodgate_engine::store::BoxFuture<'static, Result<Self::Response, Infallible>>;

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
        let settle = req.extensions().get::<SettleHandle>().cloned();
        let trailer = settle.as_ref().is_some_and(|h| h.cost_trailer().is_some());
        let balancer = &self.inner.balancer;
        let ups = balancer.upstreams();
        let routing = &self.routing;
        let route = if routing.routes.name_groups() {
            routing.limiter.route_index(&req)
        } else {
            None
        };
        let Some(g) = routing.routes.group_for(route) else {
            let resp = self.error(
                StatusCode::BAD_GATEWAY,
                "no upstream for this request: its route names none and no upstream \"default\" is defined",
                format,
            );
            return Box::pin(std::future::ready(Ok(resp)));
        };
        let key = if ups.wants_key(g) {
            routing.limiter.routing_key(&req)
        } else {
            None
        };
        let first = match balancer.pick(g, key.as_deref(), &[]) {
            Ok(s) => s,
            Err(down) => {
                self.inner.metrics.upstream_error("connect");
                tracing::warn!(%down, "no upstream server taken: 502");
                let resp = self.error(StatusCode::BAD_GATEWAY, &down.to_string(), format);
                return Box::pin(std::future::ready(Ok(resp)));
            }
        };
        let may_retry = direct::idempotent(req.method());
        let Some((route, body_watch)) = self.route(req, trailer, g, first) else {
            let resp = self.error(StatusCode::BAD_REQUEST, "unusable request target", format);
            return Box::pin(std::future::ready(Ok(resp)));
        };
        let this = self.clone();
        let for_body = settle.clone();
        let exchange = async move {
            let balancer = &this.inner.balancer;
            let ups = balancer.upstreams();
            // the server the request went to last
            let mut s = first;
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
                Route::Direct(pools, head, method) => {
                    // a connect that failed sent nothing: an idempotent request tries
                    // another server, at most MAX_RETRIES times
                    let mut tried: Vec<usize> = Vec::new();
                    let r = loop {
                        let in_flight = balancer.start(g, s);
                        match pools[s].send_head(&head, &method, timeout).await {
                            Err(e)
                                if e.kind() == "connect"
                                    && may_retry
                                    && tried.len() < MAX_RETRIES =>
                            {
                                tried.push(s);
                                match balancer.pick(g, key.as_deref(), &tried) {
                                    Ok(next) => {
                                        ups.record(g, s, Err(true));
                                        this.inner.metrics.upstream_error("connect");
                                        tracing::warn!(error = %with_sources(&e), upstream = %ups.server(g, s).authority, "upstream failed: trying another server");
                                        s = next;
                                    }
                                    Err(_) => break Err(e),
                                }
                            }
                            // in flight until its body ends
                            r => break r.map(|resp| resp.map(|b| b.in_flight(in_flight))),
                        }
                    };
                    match r {
                        Err(UpstreamError::Direct(direct::ExchangeError::TimedOut)) => Err(()),
                        r => Ok(r.map_err(failed)),
                    }
                }
                Route::Hyper(req) => {
                    let in_flight = balancer.start(g, s);
                    let send = async {
                        match &this.inner.upstream {
                            Upstream::Http1(groups) => {
                                groups[g].pools[s].send(*req).await.map_err(failed)
                            }
                            Upstream::Http2 { tls: Some(c), .. } if ups.server(g, s).tls => {
                                send_h2(c, *req).await
                            }
                            Upstream::Http2 { h2c, .. } => send_h2(h2c, *req).await,
                        }
                    };
                    // boxed: the direct way's state, not this one's, sizes this future
                    Box::pin(tokio::time::timeout(timeout, send))
                        .await
                        .map(|r| r.map(|resp| resp.map(|b| b.in_flight(in_flight))))
                        .map_err(|_| ())
                }
            };
            let authority = &ups.server(g, s).authority;
            let body_state = body_watch.as_ref().map(|w| w.state());
            // what the server did: a status, its failure (Err(true)) or the client's
            let (outcome, resp) = match sent {
                Ok(Ok(resp)) if length_over_i64(resp.headers()) => {
                    this.inner.metrics.upstream_error("response");
                    tracing::warn!(upstream = %authority, "upstream Content-Length over 2^63-1");
                    (
                        Err(true),
                        this.error(
                            StatusCode::BAD_GATEWAY,
                            "upstream response is malformed",
                            format,
                        ),
                    )
                }
                Ok(Ok(resp)) => {
                    let status = resp.status().as_u16();
                    let (mut parts, body) = resp.into_parts();
                    strip_hop_by_hop(&mut parts.headers);
                    let body = match for_body.filter(|h| h.cost_trailer().is_some()) {
                        Some(h) => body.settle_on_trailers(h),
                        None => body,
                    };
                    (Ok(status), Response::from_parts(parts, Either::Left(body)))
                }
                // the client's body stalled (it timed out, or the upstream timed out
                // while the proxy waited for the client's next bytes): the client's
                // doing, 408; an upstream that stops reading the body is the upstream's
                // (504)
                Ok(Err(_)) if body_state == Some(BodyState::TimedOut) => {
                    (Err(false), this.body_timed_out(format))
                }
                Err(_)
                    if body_state
                        .is_some_and(|s| s == BodyState::Waiting || s == BodyState::TimedOut) =>
                {
                    (Err(false), this.body_timed_out(format))
                }
                Ok(Err((e, _))) if body_state == Some(BodyState::Failed) => {
                    tracing::debug!(error = %e, "the client's request body failed");
                    (
                        Err(false),
                        this.error(
                            StatusCode::BAD_REQUEST,
                            "the request body is malformed or ended early",
                            format,
                        ),
                    )
                }
                Ok(Err((e, kind))) => {
                    this.inner.metrics.upstream_error(kind);
                    tracing::warn!(error = %with_sources(&*e), upstream = %authority, "upstream failed");
                    (
                        Err(true),
                        this.error(StatusCode::BAD_GATEWAY, "upstream unavailable", format),
                    )
                }
                Err(_) => {
                    this.inner.metrics.upstream_error("timeout");
                    tracing::warn!(upstream = %authority, timeout = ?this.inner.timeout, "upstream timed out");
                    (
                        Err(true),
                        this.error(StatusCode::GATEWAY_TIMEOUT, "upstream timed out", format),
                    )
                }
            };
            ups.record(g, s, outcome);
            Ok(resp)
        };
        match settle {
            Some(handle) => self.carried(exchange, handle, format),
            None => Box::pin(exchange),
        }
    }
}

impl Forward {
    /// The exchange of a request whose route settles its cost, run in a task of its own,
    /// so that a client going away before the response head (the returned future
    /// dropped) does not end it: its response is then settled as one sent would be
    /// ([`floodgate_http::settle::settle_unclaimed`]: the cost header, else the body read
    /// on to its cost trailer, else the abort cost). The upstream timeout bounds the wait
    /// for the head, the route's drain bounds the body.
    fn carried(
        &self,
        exchange: impl Future<Output = Result<Response<ForwardBody>, Infallible>> + Send + 'static,
        handle: SettleHandle,
        format: ReplyFormat,
    ) -> <Self as Service<Request<RequestBody>>>::Future {
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let Ok(resp) = exchange.await;
            if let Err(unclaimed) = tx.send(resp) {
                tracing::debug!("the client left before the response head: settled all the same");
                floodgate_http::settle::settle_unclaimed(handle, unclaimed).await;
            }
        });
        let this = self.clone();
        Box::pin(async move {
            Ok(rx.await.unwrap_or_else(|_| {
                // the exchange's task ended without a response (it panicked)
                this.error(StatusCode::BAD_GATEWAY, "upstream exchange failed", format)
            }))
        })
    }
}

impl Forward {
    /// How `req` goes upstream, and the flag its body sets when it fails (hyper's way
    /// only: the direct way has no body to fail); `None` when its target cannot be sent
    /// to an HTTP/2 upstream. `trailer`: the request's route settles its cost from a
    /// trailer, so it takes hyper's way, which reads trailers (the direct way drops
    /// them), asking the upstream for them.
    /// `g`, `s`: the group and server it goes to first.
    fn route(
        &self,
        req: Request<RequestBody>,
        trailer: bool,
        g: usize,
        s: usize,
    ) -> Option<(Route, Option<Arc<BodyWatch>>)> {
        let server = self.inner.balancer.upstreams().server(g, s);
        let authority = &server.authority;
        let (parts, body) = req.into_parts();
        let peer = parts
            .extensions
            .get::<PeerAddr>()
            .map(|p| p.0.ip().to_canonical());
        let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        // the client's Host (or HTTP/2 :authority) is kept
        let host = Some(parts.uri.authority().unwrap_or(authority).as_str());
        // set when the client's request body fails (hyper's way only: the direct way
        // has no body to fail)
        let mut body_watch: Option<Arc<BodyWatch>> = None;
        let route = match &self.inner.upstream {
            // no body: the head is encoded straight from the client's
            Upstream::Http1(groups)
                if groups[g].plain && http_body::Body::is_end_stream(&body) && !trailer =>
            {
                let mut head = Vec::with_capacity(256);
                encode_request_line(&mut head, &parts.method, target);
                // the body is known to be empty: a Content-Length the client sent
                // goes out as 0, once, so the upstream can never wait for bytes that
                // would be the next request on this connection
                let mut length_sent = false;
                upstream_fields(&parts.headers, host, peer, |name, value| {
                    if name == CONTENT_LENGTH {
                        if !length_sent {
                            encode_field(&mut head, b"content-length", b"0");
                            length_sent = true;
                        }
                    } else {
                        encode_field(&mut head, name.as_str().as_bytes(), value)
                    }
                });
                head.extend_from_slice(b"\r\n");
                Route::Direct(groups[g].pools.clone(), head, parts.method)
            }
            upstream => {
                let h2 = matches!(upstream, Upstream::Http2 { .. });
                let mut headers = HeaderMap::with_capacity(parts.headers.len() + 2);
                upstream_fields(&parts.headers, host.filter(|_| !h2), peer, |name, value| {
                    if let Ok(v) = HeaderValue::from_bytes(value) {
                        headers.append(name.clone(), v);
                    }
                });
                if trailer {
                    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
                }
                let pq = PathAndQuery::try_from(target)
                    .unwrap_or_else(|_| PathAndQuery::from_static("/"));
                let (uri, version) = if h2 {
                    // absolute form: hyper sends it as :scheme and :authority
                    let mut uri = http::uri::Parts::default();
                    uri.scheme = Some(if server.tls {
                        Scheme::HTTPS
                    } else {
                        Scheme::HTTP
                    });
                    uri.authority = Some(authority.clone());
                    uri.path_and_query = Some(pq);
                    match Uri::from_parts(uri) {
                        Ok(u) => (u, Version::HTTP_2),
                        Err(_) => return None,
                    }
                } else {
                    (Uri::from(pq), Version::HTTP_11)
                };
                let (body, watch) = ClientBody::watch(body, Some(self.inner.body_timeout));
                body_watch = Some(watch);
                let mut req = Request::new(body);
                *req.method_mut() = parts.method;
                *req.uri_mut() = uri;
                *req.version_mut() = version;
                *req.headers_mut() = headers;
                Route::Hyper(Box::new(req))
            }
        };
        Some((route, body_watch))
    }
}
