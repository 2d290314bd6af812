//! One HTTP/2 connection of the gRPC door: the `h2` crate's server, driven by one task.
//!
//! The task polls the connection for new streams and, in the same turn, every
//! `ShouldRateLimit` call on it: a call whose request has arrived whole is read from
//! h2's buffer, decided ([`GrpcDoor::answer`]) and answered before the task polls the
//! connection again, so the replies of one turn leave in one write. A call whose
//! decision waits (on Redis) stays in the task's set of calls until it is ready. No call
//! gets a task of its own. Every other stream (the health service, unknown methods, a
//! call with `grpc-encoding`, a message the door declines or one above the size cap)
//! runs in a task of its own through tonic's routes ([`super::tonic_stream`]).
//!
//! Every HTTP/2 limit is set explicitly from [`Http2Limits`]; a request's octets are
//! given back to the client's flow-control windows only when its call is answered, so a
//! connection holds at most its connection window of unanswered requests
//! (`connections.grpc_connection_window`). A connection closed for a timeout (preface,
//! idle) and a call reset for its request's is counted in
//! `floodgate_connection_timeouts_total{front="grpc"}`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tonic::Status;

use crate::config::ConnectionSettings;
use crate::metrics::Metrics;

use super::door::{Direct, GrpcDoor, SHOULD_RATE_LIMIT, grpc_timeout};
use super::tonic_stream;

/// The HTTP/2 limits of the gRPC door. Sizes are octets; every limit is also announced to
/// the client where HTTP/2 has a setting for it.
#[derive(Debug, Clone)]
pub struct Http2Limits {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`: streams a client may have open at once.
    pub max_concurrent_streams: u32,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE` (RFC 7541 sizes: name + value + 32 per field).
    pub max_header_list_size: u32,
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: request octets a stream may send unanswered. Above
    /// the largest message plus its 5-octet prefix, or such a message never arrives and
    /// a larger one is never seen to be larger.
    pub stream_window: u32,
    /// Request octets the whole connection may send unanswered: the bound on what one
    /// connection holds of requests.
    pub connection_window: u32,
    /// `SETTINGS_MAX_FRAME_SIZE`: the largest frame payload a client may send.
    pub max_frame_size: u32,
    /// Reply octets a stream may have queued and unsent (for want of the client's window).
    pub max_send_buffer: usize,
    /// Streams the client reset before the server took them, held at once; past it the
    /// connection ends with `ENHANCE_YOUR_CALM` (the rapid-reset pattern, CVE-2023-44487).
    pub max_pending_accept_reset_streams: usize,
    /// Streams the server had to reset for the client's protocol errors, over the
    /// connection's life; past it the connection ends with `ENHANCE_YOUR_CALM`.
    pub max_local_error_reset_streams: usize,
    /// Streams reset by the client while their call was open, over a second; past it the
    /// connection ends with `ENHANCE_YOUR_CALM` (rapid reset of streams already taken).
    pub max_client_resets_per_second: u32,
    /// How long a new connection may take to send the HTTP/2 preface.
    pub preface_timeout: Duration,
    /// How long a connection may stay open with no stream open; then GOAWAY and close.
    pub idle_timeout: Duration,
    /// How long a `ShouldRateLimit` request may take to arrive whole once its stream is
    /// open; then the stream is reset with `CANCEL`.
    pub request_timeout: Duration,
}

impl Http2Limits {
    /// The limits for messages of at most `max_message` octets, with the configured
    /// timeouts and connection window.
    pub fn with(max_message: usize, c: &ConnectionSettings) -> Http2Limits {
        let d = Http2Limits::for_messages(max_message);
        Http2Limits {
            preface_timeout: c.preface_timeout,
            idle_timeout: c.idle_timeout,
            request_timeout: c.request_timeout,
            connection_window: c.grpc_connection_window.unwrap_or(d.connection_window),
            ..d
        }
    }

    /// The defaults for messages of at most `max_message` octets: 200 streams, a 16 KiB
    /// header list, 16 KiB frames, a stream window of the largest message and one frame
    /// (at least 1 MiB) and a connection window of twice that, 1 MiB of queued reply per stream,
    /// 20 pending-accept resets, 1,024 local error resets, 400 client resets a second, a
    /// 10 s preface, a 5 minute idle connection and a 10 s request.
    pub fn for_messages(max_message: usize) -> Http2Limits {
        const MAX_WINDOW: u32 = (1 << 31) - 1;
        let stream_window = u32::try_from(max_message.saturating_add(5 + 16 * 1024))
            .unwrap_or(MAX_WINDOW)
            .clamp(1 << 20, MAX_WINDOW);
        Http2Limits {
            max_concurrent_streams: 200,
            max_header_list_size: 16 * 1024,
            stream_window,
            connection_window: stream_window.saturating_mul(2).min(MAX_WINDOW),
            max_frame_size: 16 * 1024,
            max_send_buffer: 1 << 20,
            max_pending_accept_reset_streams: 20,
            max_local_error_reset_streams: 1024,
            max_client_resets_per_second: 400,
            preface_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(10),
        }
    }

    fn builder(&self) -> h2::server::Builder {
        let mut b = h2::server::Builder::new();
        b.max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(self.max_header_list_size)
            .initial_window_size(self.stream_window)
            .initial_connection_window_size(self.connection_window)
            .max_frame_size(self.max_frame_size)
            .max_send_buffer_size(self.max_send_buffer)
            .max_pending_accept_reset_streams(self.max_pending_accept_reset_streams)
            .max_local_error_reset_streams(Some(self.max_local_error_reset_streams));
        b
    }
}

impl Default for Http2Limits {
    fn default() -> Http2Limits {
        Http2Limits::for_messages(1 << 20)
    }
}

const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

type Connection<T> = h2::server::Connection<T, Bytes>;
type Call = Pin<Box<dyn Future<Output = CallEnd> + Send>>;

/// How a `ShouldRateLimit` call ended, as the connection counts it.
enum CallEnd {
    /// Answered, handed to tonic, or ended by the server.
    Done,
    /// Reset by the client before it was answered.
    ResetByClient,
    /// Reset by the server: its request did not arrive whole within the request timeout.
    TimedOut,
}

/// Serve one connection until the client leaves, an error ends it, it stays idle past
/// the limit, or `stop` turns true (then no new stream is taken and the calls under way
/// finish).
pub async fn serve_connection<T>(
    io: T,
    door: Arc<GrpcDoor>,
    limits: Arc<Http2Limits>,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handshake = limits.builder().handshake::<T, Bytes>(io);
    let conn = match tokio::time::timeout(limits.preface_timeout, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => return tracing::debug!(error = %e, "gRPC handshake failed"),
        Err(_) => {
            metrics.connection_timeout("grpc", "preface");
            return tracing::debug!("gRPC client sent no preface in time");
        }
    };
    let mut c = Conn {
        accepted: Vec::new(),
        idle: Box::pin(tokio::time::sleep(limits.idle_timeout)),
        conn,
        door,
        limits,
        metrics,
        calls: FuturesUnordered::new(),
        stop: Box::pin(async move {
            let _ = stop.wait_for(|s| *s).await;
        }),
        stopping: false,
        closing_deadline: None,
        resets: 0,
        resets_since: Instant::now(),
        last_active: Instant::now(),
    };
    std::future::poll_fn(|cx| c.poll_run(cx)).await;
}

struct Conn<T> {
    conn: Connection<T>,
    /// Streams taken in this turn, not yet started (kept for its allocation).
    accepted: Vec<(http::Request<RecvStream>, SendResponse<Bytes>)>,
    door: Arc<GrpcDoor>,
    limits: Arc<Http2Limits>,
    metrics: Arc<Metrics>,
    calls: FuturesUnordered<Call>,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
    /// Fires at the idle timeout after `last_active` (checked, and moved, when it fires).
    idle: Pin<Box<Sleep>>,
    /// When a stream was last open or taken.
    last_active: Instant,
    /// After a GOAWAY of the server's own: when the connection is dropped if the client
    /// has not closed it.
    closing_deadline: Option<Instant>,
    /// Client resets counted since `resets_since` (a window of one second).
    resets: u32,
    resets_since: Instant,
}

impl<T> Conn<T>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut active = false;
        loop {
            let mut progress = false;
            if !self.stopping && self.stop.as_mut().poll(cx).is_ready() {
                self.stopping = true;
                self.conn.graceful_shutdown();
            }
            // new streams (this also reads frames and writes what the calls queued): all
            // of them taken before any is answered, so that their replies leave together
            // at the next poll (each poll of the connection flushes what is queued)
            let mut accepted = std::mem::take(&mut self.accepted);
            loop {
                match self.conn.poll_accept(cx) {
                    Poll::Ready(Some(Ok(stream))) => accepted.push(stream),
                    Poll::Ready(Some(Err(e))) => {
                        tracing::debug!(error = %e, "gRPC connection ended with an error");
                        return Poll::Ready(());
                    }
                    Poll::Ready(None) => return Poll::Ready(()),
                    Poll::Pending => break,
                }
            }
            progress |= !accepted.is_empty();
            for (req, respond) in accepted.drain(..) {
                self.start(req, respond, cx);
            }
            self.accepted = accepted;
            while let Poll::Ready(Some(end)) = self.calls.poll_next_unpin(cx) {
                progress = true;
                self.ended(end);
            }
            if !progress {
                break;
            }
            active = true;
        }
        self.poll_timers(active, cx)
    }

    /// Take a new stream: a `ShouldRateLimit` call is read and answered in this task
    /// (polled once right away: its request may be here whole); anything else goes to
    /// tonic in a task of its own.
    fn start(
        &mut self,
        req: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
        cx: &mut Context<'_>,
    ) {
        let direct =
            req.uri().path() == SHOULD_RATE_LIMIT && !req.headers().contains_key(GRPC_ENCODING);
        if !direct {
            tokio::spawn(tonic_stream::serve(self.door.clone(), req, None, respond));
            return;
        }
        let mut call: Call = Box::pin(call(
            self.door.clone(),
            req,
            respond,
            self.limits.request_timeout,
        ));
        match call.as_mut().poll(cx) {
            Poll::Ready(end) => self.ended(end),
            Poll::Pending => self.calls.push(call),
        }
    }

    fn ended(&mut self, end: CallEnd) {
        if let CallEnd::TimedOut = end {
            self.metrics.connection_timeout("grpc", "request");
        }
        if let CallEnd::ResetByClient = end {
            let now = Instant::now();
            if now.duration_since(self.resets_since) >= Duration::from_secs(1) {
                self.resets_since = now;
                self.resets = 0;
            }
            self.resets += 1;
            if self.resets > self.limits.max_client_resets_per_second {
                tracing::debug!(
                    resets = self.resets,
                    "gRPC client reset too many calls; ending the connection"
                );
                self.conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            }
        }
    }

    /// The idle timer (running while no stream is open, from the last stream taken or
    /// call answered) and, after the server's GOAWAY, the deadline past which the
    /// connection is dropped.
    fn poll_timers(&mut self, active: bool, cx: &mut Context<'_>) -> Poll<()> {
        if self.closing_deadline.is_some_and(|d| Instant::now() >= d) {
            return Poll::Ready(());
        }
        let busy = self.conn.has_streams() || !self.calls.is_empty();
        if busy || active {
            // the timer itself is moved only when it fires (no timer work per turn)
            self.last_active = Instant::now();
        }
        if busy {
            return Poll::Pending;
        }
        while self.idle.as_mut().poll(cx).is_ready() {
            if self.closing_deadline.is_some() {
                return Poll::Ready(());
            }
            let idle_until = self.last_active + self.limits.idle_timeout;
            if idle_until > Instant::now() {
                self.idle.as_mut().reset(idle_until);
                continue;
            }
            tracing::debug!("gRPC connection idle; closing it");
            self.metrics.connection_timeout("grpc", "idle");
            self.conn.graceful_shutdown();
            // a client that does not answer the GOAWAY's PING is dropped a second later
            let deadline = Instant::now() + Duration::from_secs(1);
            self.closing_deadline = Some(deadline);
            self.idle.as_mut().reset(deadline);
            let _ = self.idle.as_mut().poll(cx);
            cx.waker().wake_by_ref();
            break;
        }
        Poll::Pending
    }
}

/// One `ShouldRateLimit` call: its message read whole (at most the door's size cap plus
/// the 5-octet prefix; a larger one goes to tonic), decided, answered. The request's
/// octets go back to the client's windows once it is answered.
async fn call(
    door: Arc<GrpcDoor>,
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    request_timeout: Duration,
) -> CallEnd {
    let (parts, mut recv) = req.into_parts();
    let limit = door.max_bytes().saturating_add(5);
    let read = read_message(&mut recv, limit);
    let body = match tokio::time::timeout(request_timeout, read).await {
        Ok(Ok(Message::Whole(body))) => body,
        Ok(Ok(Message::TooLarge(first))) => {
            // tonic answers it (OUT_OF_RANGE), reading the rest as it comes
            let req = http::Request::from_parts(parts, recv);
            tokio::spawn(tonic_stream::serve(door, req, Some(first), respond));
            return CallEnd::Done;
        }
        Ok(Err(e)) => {
            return if e.is_reset() && e.is_remote() {
                CallEnd::ResetByClient
            } else {
                CallEnd::Done
            };
        }
        Err(_) => {
            respond.send_reset(Reason::CANCEL);
            return CallEnd::TimedOut;
        }
    };
    let answer = match grpc_timeout(&parts.headers) {
        None => door.answer(&body).await,
        Some(t) => tokio::time::timeout(t, door.answer(&body))
            .await
            .unwrap_or_else(|_| Direct::Status(Status::cancelled("Timeout expired"))),
    };
    match answer {
        Direct::Reply(message) => send_reply(&mut respond, message),
        Direct::Status(status) => {
            let (head, ()) = status.into_http::<()>().into_parts();
            let _ = respond.send_response(http::Response::from_parts(head, ()), true);
        }
        Direct::Declined => {
            // tonic reads the message again from `body`: its window goes back now
            let used = recv.flow_control().used_capacity();
            let _ = recv.flow_control().release_capacity(used);
            let req = http::Request::from_parts(parts, recv);
            tokio::spawn(tonic_stream::serve(door, req, Some(body), respond));
            return CallEnd::Done;
        }
    }
    let used = recv.flow_control().used_capacity();
    let _ = recv.flow_control().release_capacity(used);
    CallEnd::Done
}

/// What [`read_message`] read.
enum Message {
    /// The whole request body, within the limit.
    Whole(Bytes),
    /// The body so far passed the limit: these octets, the rest still to come.
    TooLarge(Bytes),
}

/// Read a request body whole, up to `limit` octets. The octets stay counted against the
/// client's windows (released by the caller when the call is answered).
async fn read_message(recv: &mut RecvStream, limit: usize) -> Result<Message, h2::Error> {
    let mut first: Option<Bytes> = None;
    let mut more = BytesMut::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk?;
        let so_far = first.as_ref().map_or(more.len(), Bytes::len);
        if so_far + chunk.len() > limit {
            let mut all = BytesMut::with_capacity(so_far + chunk.len());
            all.extend_from_slice(first.as_deref().unwrap_or(&more));
            all.extend_from_slice(&chunk);
            // tonic's reader gives the window back as it reads; these octets are its now
            let used = recv.flow_control().used_capacity();
            let _ = recv.flow_control().release_capacity(used);
            return Ok(Message::TooLarge(all.freeze()));
        }
        if first.is_none() && more.is_empty() {
            first = Some(chunk);
        } else {
            if let Some(f) = first.take() {
                more.extend_from_slice(&f);
            }
            more.extend_from_slice(&chunk);
        }
    }
    Ok(Message::Whole(first.unwrap_or_else(|| more.freeze())))
}

/// The reply to an answered call, as tonic writes it: `:status: 200`,
/// `content-type: application/grpc`, the message, `grpc-status: 0`.
fn send_reply(respond: &mut SendResponse<Bytes>, message: Bytes) {
    let mut head = http::Response::new(());
    head.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    // the reply is small (the statuses of one request) and within max_send_buffer: h2
    // queues it and sends it as the client's window allows
    if send.send_data(message, false).is_err() {
        return;
    }
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert(GRPC_STATUS, HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
}
