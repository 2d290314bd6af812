//! The HTTP door's listener and connections: HTTP/1.1 by hyper, serving the
//! [`router`](super::router), each connection under the door's caps ([`Gate`]) and
//! watched for three timeouts ([`HttpTimeouts`]):
//!
//! * `head`: a request head, from its first octet to its end (a client that opens a
//!   request and stalls);
//! * `idle`: nothing under way, since the connection opened, the last response was
//!   handed to hyper, or the last octet arrived;
//! * `request`: a request body, from the head to its end (a body that stalls).
//!
//! The connection is closed when one runs out, and counted in
//! `floodgate_connection_timeouts_total{front="http", phase}`. A handler's own wait (a
//! decision on Redis, a `max_in_flight` queue) is under none of them.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower_service::Service;

use crate::gate::Gate;
use crate::tls::{Acceptor, handshake};

/// How long an HTTP connection may wait on its client, per phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// A request head, from its first octet (`connections.head_timeout`).
    pub head: Duration,
    /// Nothing under way (`connections.idle_timeout`).
    pub idle: Duration,
    /// A request body, from the head to its end (`connections.request_timeout`).
    pub request: Duration,
}

/// Serve `app` on `listener` (connections under `gate`'s caps) until `shutdown` turns
/// true; then stop accepting, let each connection finish the request under way, and
/// return when all are closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    gate: Gate,
    timeouts: HttpTimeouts,
    tls: Option<Acceptor>,
    shutdown: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let mut stop = shutdown.clone();
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = gate.admit(peer) else {
                        drop(stream);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (app, gate, tls, stop) = (app.clone(), gate.clone(), tls.clone(), shutdown.clone());
                    conns.spawn(async move {
                        match tls {
                            None => serve_connection(stream, app, gate, timeouts, stop).await,
                            Some(acceptor) => {
                                let metrics = gate.metrics().clone();
                                if let Some(tls) = handshake(&acceptor, stream, &metrics).await {
                                    serve_connection(tls, app, gate, timeouts, stop).await;
                                }
                            }
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Resolves when `rx` turns true or its sender is gone.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Milliseconds since [`Watch::epoch`]; [`NONE`] for a phase not under way.
const NONE: u64 = u64::MAX;

/// What a connection is doing, as its socket, service and request body see it.
#[derive(Debug)]
struct Watch {
    epoch: Instant,
    /// A request head began (its first octet arrived) and was not yet taken.
    head_from: AtomicU64,
    /// A request body is under way since its head.
    body_from: AtomicU64,
    /// Last time something happened with nothing under way after it.
    quiet_from: AtomicU64,
    /// A request is with the service.
    in_request: AtomicBool,
    /// A deadline may have come nearer.
    changed: Notify,
}

impl Watch {
    fn new() -> Watch {
        Watch {
            epoch: Instant::now(),
            head_from: AtomicU64::new(NONE),
            body_from: AtomicU64::new(NONE),
            quiet_from: AtomicU64::new(0),
            in_request: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    /// Octets arrived: outside a request, the first of a head starts the head's clock.
    fn read(&self) {
        let now = self.now();
        self.quiet_from.store(now, Ordering::Relaxed);
        if !self.in_request.load(Ordering::Acquire)
            && self.head_from.load(Ordering::Acquire) == NONE
        {
            self.head_from.store(now, Ordering::Release);
            self.changed.notify_one();
        }
    }

    /// A head is taken: the body's clock starts unless it has none.
    fn request_began(&self, has_body: bool) {
        self.in_request.store(true, Ordering::Release);
        self.head_from.store(NONE, Ordering::Release);
        if has_body {
            self.body_from.store(self.now(), Ordering::Release);
        }
        self.changed.notify_one();
    }

    fn body_ended(&self) {
        self.body_from.store(NONE, Ordering::Release);
    }

    /// The response is handed to hyper: the idle clock starts.
    fn request_ended(&self) {
        self.body_from.store(NONE, Ordering::Release);
        self.quiet_from.store(self.now(), Ordering::Relaxed);
        self.in_request.store(false, Ordering::Release);
        self.changed.notify_one();
    }

    /// Resolves with the phase whose timeout ran out first.
    async fn expired(&self, t: &HttpTimeouts) -> &'static str {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(NONE / 2);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let head = self.head_from.load(Ordering::Acquire);
            let body = self.body_from.load(Ordering::Acquire);
            let idle = !self.in_request.load(Ordering::Acquire) && head == NONE;
            let mut next: Option<(u64, &'static str)> = None;
            let mut consider = |from: u64, limit: Duration, phase| {
                if from != NONE {
                    let at = from.saturating_add(ms(limit));
                    if next.is_none_or(|(n, _)| at < n) {
                        next = Some((at, phase));
                    }
                }
            };
            consider(head, t.head, "head");
            consider(body, t.request, "request");
            if idle {
                consider(self.quiet_from.load(Ordering::Relaxed), t.idle, "idle");
            }
            match next {
                Some((at, phase)) if at <= self.now() => return phase,
                Some((at, _)) => {
                    let deadline = self.epoch + Duration::from_millis(at);
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// Serve one connection until the client leaves, a timeout runs out, or `shutdown`
/// turns true (then the request under way is answered and the connection closes).
async fn serve_connection<S>(
    stream: S,
    app: Router,
    gate: Gate,
    timeouts: HttpTimeouts,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let watch = Arc::new(Watch::new());
    let io = TokioIo::new(WatchedIo {
        io: stream,
        watch: watch.clone(),
    });
    let w = watch.clone();
    let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        w.request_began(!req.body().is_end_stream());
        let req = req.map(|inner| WatchedBody {
            inner,
            watch: w.clone(),
        });
        let call = app.clone().call(req);
        let w = w.clone();
        async move {
            let r: Result<axum::response::Response, Infallible> = call.await;
            w.request_ended();
            r
        }
    });
    // the head's time is watched here, from its first octet (hyper's header_read_timeout
    // would run from the end of the previous response, the idle time included)
    let conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            phase = watch.expired(&timeouts) => {
                gate.metrics().connection_timeout("http", phase);
                tracing::debug!(phase, "HTTP connection timed out; closing it");
                return;
            }
            () = stopped(&mut shutdown), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The socket, telling the [`Watch`] when octets arrive.
struct WatchedIo<S> {
    io: S,
    watch: Arc<Watch>,
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.watch.read();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A request body, telling the [`Watch`] when it ends.
struct WatchedBody {
    inner: Incoming,
    watch: Arc<Watch>,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if !matches!(r, Some(Ok(_))) || this.inner.is_end_stream() {
            this.watch.body_ended();
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
