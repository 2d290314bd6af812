//! HTTP/1.1 connections to one upstream, kept for reuse: the proxy's forwarding path.
//!
//! One [`Http1Pool`] per proxy worker (see [`crate::proxy::ProxySettings::workers`]), so a
//! connection is only ever used on the thread that opened it. A connection goes back
//! to the pool when its response body has been read to the end (or had none); a
//! response dropped half-read takes its connection with it (hyper closes it). Checkout
//! is last-in first-out, so the warmest connections are reused; the oldest idle ones
//! are closed once unused for the idle timeout (checked as connections come back).
//!
//! A request is only retried on another connection when hyper hands it back unsent
//! (the pooled connection turned out closed), so a request is never sent twice.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::proxy::ClientBody;

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
    /// The HTTP exchange failed (the connection closed mid-response, a malformed
    /// response, or the client's own request body failed).
    #[error("upstream exchange failed: {0}")]
    Http(#[from] hyper::Error),
}

struct Idle {
    sender: SendRequest<ClientBody>,
    since: Instant,
}

/// Idle HTTP/1.1 connections to one upstream (`host:port`).
pub(crate) struct Http1Pool {
    addr: String,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle: usize,
    /// Oldest first: returns push at the back, checkouts pop from the back (warmest).
    idle: Mutex<VecDeque<Idle>>,
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("addr", &self.addr)
            .field("idle", &self.idle.lock().map_or(0, |v| v.len()))
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
        }
    }

    /// Send `req` (origin-form URI, `Host` set) on an idle connection, or a new one.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut req: Request<ClientBody>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
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
                    return Ok(resp.map(|inner| UpstreamBody { inner, back }));
                }
                Err(mut e) => match e.take_message() {
                    // never written: the pooled connection had closed; try another
                    Some(r) if pooled => req = r,
                    _ => return Err(UpstreamError::Http(e.into_error())),
                },
            }
        }
    }

    /// The most recently returned connection that is still open and ready.
    async fn checkout(&self) -> Option<SendRequest<ClientBody>> {
        loop {
            let idle = self.idle.lock().ok()?.pop_back()?;
            if self.stale(&idle) {
                continue;
            }
            let mut sender = idle.sender;
            // ready at once unless the connection is still finishing its last response
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<ClientBody>, UpstreamError> {
        let connect = tokio::net::TcpStream::connect(self.addr.as_str());
        let stream = match tokio::time::timeout(self.connect_timeout, connect).await {
            Err(_) => {
                return Err(UpstreamError::ConnectTimeout {
                    addr: self.addr.clone(),
                    timeout: self.connect_timeout,
                });
            }
            Ok(Err(source)) => {
                return Err(UpstreamError::Connect {
                    addr: self.addr.clone(),
                    source,
                });
            }
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Unused for longer than the idle timeout, or closed by the upstream.
    fn stale(&self, idle: &Idle) -> bool {
        idle.since.elapsed() > self.idle_timeout || idle.sender.is_closed()
    }

    fn give_back(&self, sender: SendRequest<ClientBody>) {
        if sender.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            // connections unused for the idle timeout are closed as traffic passes (the
            // upstream usually closes them first)
            while idle.front().is_some_and(|i| self.stale(i)) {
                idle.pop_front();
            }
            if idle.len() < self.max_idle {
                idle.push_back(Idle {
                    sender,
                    since: Instant::now(),
                });
            }
        }
    }
}

/// An upstream response body. Read to its end (or dropped after it), it returns its
/// connection to the pool it came from.
pub struct UpstreamBody {
    inner: Incoming,
    back: Option<(SendRequest<ClientBody>, Arc<Http1Pool>)>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("pooled", &self.back.is_some())
            .finish_non_exhaustive()
    }
}

impl UpstreamBody {
    /// A body whose connection is not pooled here (HTTP/2, sticky forwarding).
    pub(crate) fn unpooled(inner: Incoming) -> UpstreamBody {
        UpstreamBody { inner, back: None }
    }

    fn release(&mut self) {
        if let Some((sender, pool)) = self.back.take() {
            pool.give_back(sender);
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            // the last frame out (a body of known length), or the end seen: the
            // connection can take the next request before the client has this one
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.release(),
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Err(_))) => this.back = None,
            _ => {}
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

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // a body with nothing left (none at all, or read to the end) leaves its
        // connection reusable; one dropped half-read does not
        if self.inner.is_end_stream() {
            self.release();
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

    /// One GET through `pool`. The pool sends `ClientBody`, which wraps hyper's
    /// `Incoming` (no public constructor): a throwaway loopback server hands over the
    /// (empty) body of a request made to it.
    async fn get(pool: &Arc<Http1Pool>, addr: std::net::SocketAddr) {
        let (tx, rx) = tokio::sync::oneshot::channel::<Incoming>();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let here = l.local_addr().unwrap();
        let tx = std::sync::Mutex::new(Some(tx));
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send(req.into_body());
                }
                async { Ok::<_, Infallible>(Response::new(http_body_util::Empty::<Bytes>::new())) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(s), svc)
                .await;
        });
        let s = tokio::net::TcpStream::connect(here).await.unwrap();
        let (mut c, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
            .await
            .unwrap();
        tokio::spawn(conn);
        let pending = c.send_request(
            Request::get("/")
                .header("host", "x")
                .body(http_body_util::Empty::<Bytes>::new())
                .unwrap(),
        );
        let body = rx.await.unwrap();
        let (body, _) = ClientBody::watch(body);
        let req = Request::get("/")
            .header("host", addr.to_string())
            .body(body)
            .unwrap();
        let resp = pool.send(req).await.unwrap();
        let got = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(got, "ok");
        let _ = pending.await;
    }

    #[tokio::test]
    async fn idle_connections_past_the_timeout_are_closed_as_traffic_passes() {
        let addr = backend().await;
        let timeout = Duration::from_millis(100);
        let pool = Arc::new(Http1Pool::new(addr.to_string(), timeout, timeout, 16));
        // three at once: three connections, all idle afterwards
        tokio::join!(get(&pool, addr), get(&pool, addr), get(&pool, addr));
        assert_eq!(pool.idle.lock().unwrap().len(), 3);
        // then steady traffic on one connection for longer than the idle timeout: the
        // two below it are closed, the one in use stays
        let start = Instant::now();
        while start.elapsed() < timeout * 3 {
            get(&pool, addr).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pool.idle.lock().unwrap().len(), 1);
    }
}
