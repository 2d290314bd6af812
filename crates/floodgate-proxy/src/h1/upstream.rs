//! HTTP/1.1 connections to one upstream, kept for reuse: the proxy's forwarding path.
//!
//! One `Http1Pool` per proxy worker (see [`crate::proxy::ProxySettings::workers`]), so a
//! connection is only ever used on the thread that opened it. Two kinds of exchange:
//!
//! * **Requests without a body** (most GETs, HEADs, DELETEs) go the direct way
//!   (`direct`): the calling task writes the head and reads the response from the
//!   socket itself.
//! * **Requests with a body** go through hyper's HTTP/1.1 client connection, which
//!   streams the body upstream while the response may already be coming back.
//!
//! A connection goes back to the pool when its response body has been read to the end
//! (or had none); a response dropped half-read takes its connection with it. Checkout
//! is last-in first-out, so the warmest connections are reused; the oldest idle ones
//! are closed once unused for the idle timeout (checked as connections come back).
//!
//! A request is sent again on another connection only when it cannot have been acted
//! on: hyper handed it back unsent, or (direct way) writing it to a pooled connection
//! failed, or a pooled connection closed before any byte of the response and the
//! method is idempotent (RFC 9110 §9.2.2). A fresh connection is never retried.

pub(crate) mod direct;

use direct::DirectBody;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use floodgate_http::SettleOnTrailers;
use floodgate_net::tls::ClientTls;

use crate::body::ClientBody;
use crate::h1::response_head::HeadError;
use crate::upstreams::InFlight;

/// Why a request got no response from the upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// No connection within the connect timeout.
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout {
        /// `host:port`.
        addr: String,
        /// The limit.
        timeout: Duration,
    },
    /// The connection was refused, or the name did not resolve.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS handshake with an `https://` upstream failed or timed out (a certificate
    /// expired, for another name or from an unknown CA; no TLS there...).
    #[error("TLS with {addr} failed: {reason}")]
    Tls {
        /// `host:port`.
        addr: String,
        /// rustls' reason, or the timeout.
        reason: String,
    },
    /// The HTTP exchange failed (the connection closed mid-response, a malformed
    /// response, or the client's own request body failed).
    #[error("upstream exchange failed: {0}")]
    Http(#[from] hyper::Error),
    /// The direct exchange (a request without a body) failed.
    #[error(transparent)]
    Direct(#[from] direct::ExchangeError),
}

impl UpstreamError {
    /// The `kind` label of `floodgate_upstream_errors_total`: `"connect"` when no
    /// connection was made, `"response"` when the upstream took the connection but its
    /// response failed (closed, reset or malformed).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            UpstreamError::ConnectTimeout { .. }
            | UpstreamError::Connect { .. }
            | UpstreamError::Tls { .. } => "connect",
            UpstreamError::Http(_) | UpstreamError::Direct(_) => "response",
        }
    }
}

/// An idle connection and when it became idle.
struct Idle<C> {
    conn: C,
    since: tokio::time::Instant,
}

/// Idle connections, oldest first: returns push at the back, checkouts pop from the
/// back (warmest).
type IdleList<C> = Mutex<VecDeque<Idle<C>>>;

/// Idle HTTP/1.1 connections to one upstream (`host:port`).
pub(crate) struct Http1Pool {
    addr: String,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle: usize,
    /// Connections in hyper's hands (used for requests with a body).
    idle: IdleList<SendRequest<ClientBody>>,
    /// Connections for the direct way.
    direct: IdleList<direct::Conn>,
    /// Whether the reaper task (closing connections idle past the timeout when no
    /// traffic passes) has been started.
    reaping: AtomicBool,
    /// For an `https://` upstream: the TLS connector and the URL's host (the name sent
    /// and checked, unless one is configured). Every exchange then goes through
    /// hyper's client connection (the direct way is cleartext only).
    tls: Option<(ClientTls, String)>,
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("addr", &self.addr)
            .field("idle", &self.idle.lock().map_or(0, |v| v.len()))
            .field("direct", &self.direct.lock().map_or(0, |v| v.len()))
            .finish_non_exhaustive()
    }
}

impl Http1Pool {
    /// A pool for `addr` (`host:port`): at most `max_idle` idle connections, each kept
    /// at most `idle_timeout` unused.
    pub(crate) fn new(
        addr: String,
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_idle: usize,
    ) -> Http1Pool {
        Http1Pool {
            addr,
            connect_timeout,
            idle_timeout,
            max_idle,
            idle: Mutex::new(VecDeque::new()),
            direct: Mutex::new(VecDeque::new()),
            reaping: AtomicBool::new(false),
            tls: None,
        }
    }

    /// Speak TLS to the upstream, with `tls`, checking its certificate for `host`.
    pub(crate) fn with_tls(mut self, tls: ClientTls, host: String) -> Http1Pool {
        self.tls = Some((tls, host));
        self
    }

    /// Whether the upstream is cleartext (the direct way serves it).
    pub(crate) fn is_plain(&self) -> bool {
        self.tls.is_none()
    }

    /// Start, once, on the current runtime, the task that closes connections idle past
    /// the timeout (every half timeout) even when no traffic passes. It ends when the
    /// pool is dropped.
    fn start_reaper(self: &Arc<Self>) {
        if self.reaping.load(Ordering::Relaxed) || self.reaping.swap(true, Ordering::Relaxed) {
            return;
        }
        let pool = Arc::downgrade(self);
        let every = (self.idle_timeout / 2).max(Duration::from_millis(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = pool.upgrade() else { return };
                pool.reap(tokio::time::Instant::now());
            }
        });
    }

    /// Close the idle connections unused for longer than the idle timeout.
    fn reap(&self, now: tokio::time::Instant) {
        let fresh =
            |since: tokio::time::Instant| now.saturating_duration_since(since) <= self.idle_timeout;
        if let Ok(mut l) = self.idle.lock() {
            l.retain(|i| fresh(i.since));
        }
        if let Ok(mut l) = self.direct.lock() {
            l.retain(|i| fresh(i.since));
        }
    }

    /// Send `req` (origin-form URI, `Host` set), a request with a body, through
    /// hyper's client connection: an idle one, or a new one.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut req: Request<ClientBody>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        self.start_reaper();
        loop {
            let (mut sender, pooled) = match self.checkout().await {
                Some(s) => (s, true),
                None => (self.connect().await?, false),
            };
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    // no body to come (HEAD, 204, 304, length 0): reusable right away
                    let back = if resp.body().is_end_stream() {
                        self.give_back(sender);
                        None
                    } else {
                        Some((sender, self.clone()))
                    };
                    return Ok(resp.map(|inner| UpstreamBody::of(Kind::Hyper { inner, back })));
                }
                Err(mut e) => match e.take_message() {
                    // never written: the pooled connection had closed; try another
                    Some(r) if pooled => req = r,
                    _ => return Err(UpstreamError::Http(e.into_error())),
                },
            }
        }
    }

    /// Send `head`, the encoded head of a request without a body (see
    /// [`encode_request_line`](crate::h1::encode_request_line)), the direct way: on an idle connection, or a
    /// new one.
    ///
    /// `timeout` bounds each attempt from the request's first byte written to the
    /// response head read (connecting has its own timeout); it runs on the
    /// connection's own timer, moved forward per request, so a request arms no new one.
    pub(crate) async fn send_head(
        self: &Arc<Self>,
        head: &[u8],
        method: &Method,
        timeout: Duration,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        self.start_reaper();
        loop {
            // one clock reading for the pool's bookkeeping and the exchange's deadline
            let now = tokio::time::Instant::now();
            let (conn, pooled) = match self.checkout_direct(now) {
                Some(c) => (c, true),
                // boxed: connecting is rare, and its state would size every exchange
                None => (
                    Box::pin(direct::Conn::connect(&self.addr, self.connect_timeout)).await?,
                    false,
                ),
            };
            match direct::exchange(conn, head, method, now + timeout, self).await {
                Ok(resp) => return Ok(resp.map(UpstreamBody::direct)),
                // the pooled connection had closed: nothing was acted on
                Err(direct::ExchangeError::Write(_)) if pooled => continue,
                Err(direct::ExchangeError::Head(HeadError::ClosedEarly))
                    if pooled && direct::idempotent(method) =>
                {
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The most recently returned direct connection that is still open.
    fn checkout_direct(&self, now: tokio::time::Instant) -> Option<direct::Conn> {
        self.take(&self.direct, now, direct::Conn::still_open)
    }

    /// Back from a complete response (the caller checked it is reusable).
    pub(crate) fn give_back_direct(&self, conn: direct::Conn) {
        self.put_back(&self.direct, conn, |c| !c.still_open());
    }

    /// The most recently returned connection that is still open and ready.
    async fn checkout(&self) -> Option<SendRequest<ClientBody>> {
        loop {
            let now = tokio::time::Instant::now();
            let mut sender = self.take(&self.idle, now, |s| !s.is_closed())?;
            // ready at once unless the connection is still finishing its last response
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    /// A new connection in hyper's hands; for an `https://` upstream, after the TLS
    /// handshake (bounded by the connect timeout too).
    async fn connect(&self) -> Result<SendRequest<ClientBody>, UpstreamError> {
        let stream = direct::Conn::connect(&self.addr, self.connect_timeout)
            .await?
            .into_stream();
        let Some((tls, host)) = &self.tls else {
            return handshake(stream).await;
        };
        let tls_error = |reason: String| UpstreamError::Tls {
            addr: self.addr.clone(),
            reason,
        };
        match tokio::time::timeout(self.connect_timeout, tls.connect(host, stream)).await {
            Ok(Ok(stream)) => handshake(stream).await,
            Ok(Err(e)) => Err(tls_error(e.to_string())),
            Err(_) => Err(tls_error(format!(
                "no TLS handshake within {:?}",
                self.connect_timeout
            ))),
        }
    }

    fn give_back(&self, sender: SendRequest<ClientBody>) {
        if !sender.is_closed() {
            self.put_back(&self.idle, sender, |s| s.is_closed());
        }
    }

    /// The warmest connection of `list` that is within the idle timeout and `usable`;
    /// the others popped on the way are closed.
    fn take<C>(
        &self,
        list: &IdleList<C>,
        now: tokio::time::Instant,
        mut usable: impl FnMut(&mut C) -> bool,
    ) -> Option<C> {
        let mut idle = list.lock().ok()?;
        loop {
            let mut i = idle.pop_back()?;
            if now.saturating_duration_since(i.since) <= self.idle_timeout && usable(&mut i.conn) {
                return Some(i.conn);
            }
        }
    }

    /// Return `conn` to `list` (unless it holds `max_idle` already). Connections unused
    /// for the idle timeout, or `closed`, are dropped from the old end as traffic
    /// passes (the upstream usually closes them first).
    fn put_back<C>(&self, list: &IdleList<C>, conn: C, mut closed: impl FnMut(&mut C) -> bool) {
        if let Ok(mut idle) = list.lock() {
            let now = tokio::time::Instant::now();
            while idle.front_mut().is_some_and(|i| {
                now.saturating_duration_since(i.since) > self.idle_timeout || closed(&mut i.conn)
            }) {
                idle.pop_front();
            }
            if idle.len() < self.max_idle {
                idle.push_back(Idle { conn, since: now });
            }
        }
    }
}

/// hyper's HTTP/1.1 client connection on `io`, driven by a task of its own.
async fn handshake<I>(io: I) -> Result<SendRequest<ClientBody>, UpstreamError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended with an error");
        }
    });
    Ok(sender)
}

/// An upstream response body. Read to its end (or dropped after it), it returns its
/// connection to the pool it came from. On a route that settles its cost from a
/// trailer, the layer's [`SettleOnTrailers`] settles it, and reads an abandoned body on
/// to its trailer within the route's drain bounds. Its request is counted in flight at
/// its server until it ends or is dropped.
pub struct UpstreamBody {
    body: SettleOnTrailers<Kind>,
    in_flight: Option<InFlight>,
}

enum Kind {
    /// Read by hyper's client connection (requests with a body, HTTP/2, sticky
    /// forwarding).
    Hyper {
        inner: Incoming,
        back: Option<(SendRequest<ClientBody>, Arc<Http1Pool>)>,
    },
    /// Read straight from the socket ([`direct`]).
    Direct(DirectBody),
}

/// The error of an [`UpstreamBody`]: hyper's, or the direct way's body error.
pub type UpstreamBodyError = Box<dyn std::error::Error + Send + Sync>;

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.body.get_ref() {
            Kind::Hyper { back, .. } => f
                .debug_struct("UpstreamBody")
                .field("pooled", &back.is_some())
                .finish_non_exhaustive(),
            Kind::Direct(d) => f.debug_tuple("UpstreamBody").field(d).finish(),
        }
    }
}

impl UpstreamBody {
    /// A body whose connection is not pooled here (HTTP/2, sticky forwarding).
    pub(crate) fn unpooled(inner: Incoming) -> UpstreamBody {
        UpstreamBody::of(Kind::Hyper { inner, back: None })
    }

    fn direct(body: DirectBody) -> UpstreamBody {
        UpstreamBody::of(Kind::Direct(body))
    }

    fn of(kind: Kind) -> UpstreamBody {
        UpstreamBody {
            body: SettleOnTrailers::new(kind, None),
            in_flight: None,
        }
    }

    /// Hold the request's place in its server's in-flight count until the body ends.
    pub(crate) fn in_flight(mut self, guard: InFlight) -> UpstreamBody {
        if !self.body.is_end_stream() {
            self.in_flight = Some(guard);
        }
        self
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = UpstreamBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, UpstreamBodyError>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.body).poll_frame(cx);
        if this.in_flight.is_some() {
            match &r {
                Poll::Pending => {}
                Poll::Ready(Some(Ok(_))) if !this.body.is_end_stream() => {}
                // the last frame, the end, or a failure: no longer in flight
                Poll::Ready(_) => this.in_flight = None,
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl UpstreamBody {
    /// Settle `handle` from this body's trailers when they come (see
    /// [`SettleOnTrailers`]: an abandoned body is read on to its trailer).
    pub(crate) fn settle_on_trailers(mut self, handle: floodgate_http::SettleHandle) -> Self {
        self.body.settle_with(handle);
        self
    }
}

impl http_body::Body for Kind {
    type Data = Bytes;
    type Error = UpstreamBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, UpstreamBodyError>>> {
        match self.get_mut() {
            Kind::Direct(d) => Pin::new(d).poll_frame(cx).map_err(Into::into),
            Kind::Hyper { inner, back } => {
                let r = Pin::new(&mut *inner).poll_frame(cx);
                match &r {
                    // the last frame out (a body of known length), or the end seen: the
                    // connection can take the next request before the client has this one
                    Poll::Ready(Some(Ok(_))) if inner.is_end_stream() => release(back),
                    Poll::Ready(None) => release(back),
                    Poll::Ready(Some(Err(_))) => *back = None,
                    _ => {}
                }
                r.map_err(Into::into)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Kind::Hyper { inner, .. } => inner.is_end_stream(),
            Kind::Direct(d) => d.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Kind::Hyper { inner, .. } => inner.size_hint(),
            Kind::Direct(d) => d.size_hint(),
        }
    }
}

fn release(back: &mut Option<(SendRequest<ClientBody>, Arc<Http1Pool>)>) {
    if let Some((sender, pool)) = back.take() {
        pool.give_back(sender);
    }
}

impl Drop for Kind {
    fn drop(&mut self) {
        // a body with nothing left (none at all, or read to the end) leaves its
        // connection reusable; one dropped half-read does not (the direct way's
        // connection goes back as its last byte is read, or is closed with it)
        if let Kind::Hyper { inner, back } = self
            && inner.is_end_stream()
        {
            release(back);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// A loopback hyper backend answering "ok" to everything.
    async fn backend() -> std::net::SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(http_body_util::Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc),
                );
            }
        });
        addr
    }

    /// One GET through `pool`, the direct way.
    async fn get(pool: &Arc<Http1Pool>, addr: std::net::SocketAddr) {
        let head = format!("GET / HTTP/1.1\r\nhost: {addr}\r\n\r\n");
        let resp = pool
            .send_head(head.as_bytes(), &http::Method::GET, Duration::from_secs(5))
            .await
            .unwrap();
        let got = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(got, "ok");
    }

    #[tokio::test]
    async fn idle_connections_past_the_timeout_are_closed_as_traffic_passes() {
        let addr = backend().await;
        let timeout = Duration::from_millis(100);
        let pool = Arc::new(Http1Pool::new(addr.to_string(), timeout, timeout, 16));
        // three at once: three connections, all idle afterwards
        tokio::join!(get(&pool, addr), get(&pool, addr), get(&pool, addr));
        assert_eq!(pool.direct.lock().unwrap().len(), 3);
        // then steady traffic on one connection for longer than the idle timeout: the
        // two below it are closed, the one in use stays
        let start = std::time::Instant::now();
        while start.elapsed() < timeout * 3 {
            get(&pool, addr).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pool.direct.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn idle_connections_past_the_timeout_are_closed_without_traffic_too() {
        let addr = backend().await;
        let timeout = Duration::from_millis(100);
        let pool = Arc::new(Http1Pool::new(addr.to_string(), timeout, timeout, 16));
        tokio::join!(get(&pool, addr), get(&pool, addr), get(&pool, addr));
        assert_eq!(pool.direct.lock().unwrap().len(), 3);
        // no traffic: the reaper closes them within one and a half timeouts
        tokio::time::sleep(timeout * 2).await;
        assert_eq!(pool.direct.lock().unwrap().len(), 0);
        // and the pool still serves, on a new connection
        get(&pool, addr).await;
        assert_eq!(pool.direct.lock().unwrap().len(), 1);
        // the reaper holds no strong reference: dropping the pool ends it
        let weak = Arc::downgrade(&pool);
        drop(pool);
        assert!(weak.upgrade().is_none());
    }
}
