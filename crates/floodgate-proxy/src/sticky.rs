//! Sticky routing in `floodgate proxy`: a request whose routing key
//! ([`RateLimiter::routing_key`]) is owned by another node of the fleet is forwarded,
//! unchanged, to that node's proxy, which decides with its in-process store and proxies to
//! the backend as usual.
//!
//! * The forwarded request carries `Floodgate-Forwarded-By: <this node>`; a node never
//!   forwards a request that carries it, so a request makes at most one hop. The header is
//!   honoured only from a peer at a node's IP address (a client cannot use it to skip
//!   routing; from anyone else it is removed), and it reaches the backend.
//! * `X-Forwarded-For` gets the client's address appended, and the config trusts the
//!   nodes' addresses, so the owner computes the same client IP (and the same key).
//! * Nodes talk HTTP/2 (h2c, prior knowledge) over one connection per peer.
//! * Owner unreachable (connect refused or timed out, connection lost before the request
//!   was sent): the request is decided here, locally (counted as `fallback`), and the
//!   owner is skipped for [`DOWN_FOR`] before the next attempt. That is the moment a
//!   sticky fleet over-admits: the key gets a fresh burst on this node.
//! * A request body that fails on the client's side is a 400, as in [`crate::proxy`].
//! * Counted in `floodgate_fleet_requests_total{event="forwarded|received|fallback|failed"}`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use floodgate_engine::deny::{ReplyFormat, short_response};
use floodgate_engine::leases::LeaseBody;
use floodgate_http::key::PeerAddr;
use floodgate_http::layer::RateLimitService;
use floodgate_http::limiter::RateLimiter;
use http::header::HeaderName;
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::Either;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tower_service::Service;

use crate::body::{BodyState, ClientBody, RequestBody};
use crate::forward::{FleetBody, Forward};
use crate::h1::upstream::UpstreamBody;
use crate::hop_by_hop::strip_hop_by_hop;
use crate::settings::ProxyError;

/// The header marking a request forwarded by a fleet node.
pub static FORWARDED_BY: HeaderName = HeaderName::from_static("floodgate-forwarded-by");

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// How long an unreachable owner is skipped (its keys decided locally) before retrying.
pub const DOWN_FOR: Duration = Duration::from_secs(1);

struct Peer {
    addr: String,
    conn: tokio::sync::Mutex<Option<SendRequest<ClientBody>>>,
    down_until: Mutex<Option<Instant>>,
}

impl Peer {
    fn mark_down(&self) {
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + DOWN_FOR);
    }

    async fn sender(&self, connect_timeout: Duration) -> Result<SendRequest<ClientBody>, String> {
        if let Some(until) = *self.down_until.lock().unwrap_or_else(|p| p.into_inner())
            && Instant::now() < until
        {
            return Err("marked down after a failure".into());
        }
        let mut slot = self.conn.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(s.clone());
        }
        *slot = None;
        let connect = async {
            let stream = tokio::net::TcpStream::connect(&self.addr)
                .await
                .map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            let addr = self.addr.clone();
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, node = %addr, "fleet connection ended");
                }
            });
            Ok::<_, String>(sender)
        };
        match tokio::time::timeout(connect_timeout, connect).await {
            Ok(Ok(sender)) => {
                *slot = Some(sender.clone());
                Ok(sender)
            }
            Ok(Err(e)) => {
                self.mark_down();
                Err(e)
            }
            Err(_) => {
                self.mark_down();
                Err(format!("no connection within {connect_timeout:?}"))
            }
        }
    }
}

/// Forwards requests to the node that owns their key.
pub struct Sticky {
    limiter: RateLimiter,
    self_node: String,
    self_value: HeaderValue,
    peers: HashMap<String, Peer>,
    node_ips: Vec<IpAddr>,
    connect_timeout: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for Sticky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sticky")
            .field("self", &self.self_node)
            .field("peers", &self.peers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The IP addresses of `nodes` (`host:port`), resolved now.
pub fn node_ips(nodes: &[String]) -> Result<Vec<IpAddr>, String> {
    let mut ips = Vec::new();
    for n in nodes {
        let addrs = n
            .to_socket_addrs()
            .map_err(|e| format!("fleet node {n:?}: {e}"))?;
        ips.extend(addrs.map(|a| a.ip().to_canonical()));
    }
    ips.sort();
    ips.dedup();
    Ok(ips)
}

enum Sent {
    Response(Response<FleetBody>),
    /// Not sent: decide locally.
    Unsent(Request<RequestBody>, String),
}

impl Sticky {
    /// Forwarding for `limiter`'s sticky fleet; `None` when the limiter is not in one.
    /// `timeout` bounds the owner's response head (the proxy's upstream timeout).
    pub fn new(
        limiter: &RateLimiter,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Option<Sticky>, ProxyError> {
        let Some(fleet) = limiter
            .fleet()
            .filter(|f| f.strategy() == floodgate_engine::fleet::Strategy::Sticky)
        else {
            return Ok(None);
        };
        let self_value = HeaderValue::from_str(fleet.self_node()).map_err(|_| {
            ProxyError::Fleet(format!(
                "self {:?} is not a header value",
                fleet.self_node()
            ))
        })?;
        let node_ips = node_ips(fleet.nodes()).map_err(ProxyError::Fleet)?;
        let peers = fleet
            .nodes()
            .iter()
            .filter(|n| *n != fleet.self_node())
            .map(|n| {
                (
                    n.clone(),
                    Peer {
                        addr: n.clone(),
                        conn: tokio::sync::Mutex::new(None),
                        down_until: Mutex::new(None),
                    },
                )
            })
            .collect();
        Ok(Some(Sticky {
            limiter: limiter.clone(),
            self_node: fleet.self_node().to_string(),
            self_value,
            peers,
            node_ips,
            connect_timeout,
            timeout,
        }))
    }

    fn metrics(&self) -> &floodgate_engine::metrics::Metrics {
        self.limiter.metrics()
    }

    async fn forward(&self, owner: &str, req: Request<RequestBody>) -> Sent {
        let Some(peer) = self.peers.get(owner) else {
            return Sent::Unsent(req, format!("{owner} is not a peer"));
        };
        let mut sender = match peer.sender(self.connect_timeout).await {
            Ok(s) => s,
            Err(e) => return Sent::Unsent(req, e),
        };
        let (mut parts, body) = req.into_parts();
        let original = (parts.uri.clone(), parts.version, parts.headers.clone());
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        parts.uri = match format!("http://{owner}{pq}").parse::<Uri>() {
            Ok(u) => u,
            Err(e) => {
                let req = Request::from_parts(parts, body);
                return Sent::Unsent(req, format!("target: {e}"));
            }
        };
        parts.version = Version::HTTP_2;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(http::header::HOST);
        if let Some(PeerAddr(addr)) = parts.extensions.get::<PeerAddr>() {
            let ip = addr.ip().to_canonical().to_string();
            let value = match parts.headers.get(&X_FORWARDED_FOR) {
                Some(prev) => {
                    let mut v = prev.as_bytes().to_vec();
                    v.extend_from_slice(b", ");
                    v.extend_from_slice(ip.as_bytes());
                    HeaderValue::from_bytes(&v).ok()
                }
                None => HeaderValue::from_str(&ip).ok(),
            };
            if let Some(v) = value {
                parts.headers.insert(X_FORWARDED_FOR.clone(), v);
            }
        }
        parts
            .headers
            .insert(FORWARDED_BY.clone(), self.self_value.clone());
        let (body, body_failed) = ClientBody::watch(body, None);
        let req = Request::from_parts(parts, body);
        match tokio::time::timeout(self.timeout, sender.try_send_request(req)).await {
            Ok(Ok(resp)) => {
                self.metrics().fleet("forwarded");
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Sent::Response(Response::from_parts(
                    parts,
                    Either::Left(LeaseBody::plain(Either::Left(UpstreamBody::unpooled(body)))),
                ))
            }
            Ok(Err(mut e)) => match e.take_message() {
                Some(req) => {
                    *peer.conn.lock().await = None;
                    let (mut parts, body) = req.into_parts();
                    (parts.uri, parts.version, parts.headers) = original;
                    Sent::Unsent(
                        Request::from_parts(parts, body.into_inner()),
                        e.into_error().to_string(),
                    )
                }
                None if body_failed.state() == BodyState::Failed => {
                    tracing::debug!(error = %e.into_error(), "the client's request body failed");
                    Sent::Response(error(
                        StatusCode::BAD_REQUEST,
                        "the request body is malformed or ended early",
                    ))
                }
                None => {
                    self.metrics().fleet("failed");
                    tracing::warn!(error = %e.into_error(), node = %owner, "owner node failed");
                    Sent::Response(error(StatusCode::BAD_GATEWAY, "owner node failed"))
                }
            },
            Err(_) => {
                self.metrics().fleet("failed");
                tracing::warn!(node = %owner, timeout = ?self.timeout, "owner node timed out");
                Sent::Response(error(StatusCode::GATEWAY_TIMEOUT, "owner node timed out"))
            }
        }
    }
}

fn error(status: StatusCode, detail: &str) -> Response<FleetBody> {
    short_response(status, detail, None, None, ReplyFormat::Text).map(Either::Right)
}

/// The proxy's service: sticky routing (when configured) in front of the rate limiter
/// and the upstream forwarder.
#[derive(Clone, Debug)]
pub struct FleetService {
    local: RateLimitService<Forward>,
    sticky: Option<Arc<Sticky>>,
}

impl FleetService {
    /// `local` decides and forwards upstream; `sticky` routes keys to their owner first.
    pub fn new(local: RateLimitService<Forward>, sticky: Option<Sticky>) -> Self {
        FleetService {
            local,
            sticky: sticky.map(Arc::new),
        }
    }
}

impl Service<Request<RequestBody>> for FleetService {
    type Response = Response<FleetBody>;
    type Error = Infallible;
    type Future = floodgate_engine::store::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<RequestBody>) -> Self::Future {
        // no fleet: the rate-limited service's own (already boxed) future, not a clone of
        // the service and a second box around it
        let Some(sticky) = self.sticky.clone() else {
            return self.local.call(req);
        };
        let mut local = self.local.clone();
        Box::pin(async move {
            if req.headers().contains_key(&FORWARDED_BY) {
                let from_node = req
                    .extensions()
                    .get::<PeerAddr>()
                    .is_some_and(|p| sticky.node_ips.contains(&p.0.ip().to_canonical()));
                if from_node {
                    sticky.metrics().fleet("received");
                    return local.call(req).await;
                }
                req.headers_mut().remove(&FORWARDED_BY);
            }
            let owner = match sticky.limiter.owner_of(&req) {
                Some(o) if o != sticky.self_node => o.to_string(),
                _ => return local.call(req).await,
            };
            match sticky.forward(&owner, req).await {
                Sent::Response(r) => Ok(r),
                Sent::Unsent(req, why) => {
                    sticky.metrics().fleet("fallback");
                    tracing::warn!(node = %owner, error = %why, "owner node unreachable: deciding locally");
                    local.call(req).await
                }
            }
        })
    }
}
