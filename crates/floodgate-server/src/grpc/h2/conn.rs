//! One HTTP/2 connection of the gRPC door, driven by one task.
//!
//! Each turn reads what the socket holds, handles every whole frame in it, answers the
//! `ShouldRateLimit` calls whose request ended (the decision is polled right there;
//! only one that waits, on Redis, is kept for a later turn), and writes every reply of
//! the turn in one write. Every other request (the health service, unknown methods, a
//! call with `grpc-encoding`, a message the door declines) runs in a task of its own
//! through [`GrpcDoor::handle`], tonic's routes, its body fed from the connection and
//! its reply sent back to it.
//!
//! Limits (hyper's server defaults, which the door used before): 200 concurrent
//! streams, a 16 KiB header list, 1 MiB windows for each stream and the connection,
//! 16 KiB frames; a header block (HEADERS and CONTINUATIONs) above 64 KiB ends the
//! connection. A tonic reply not yet sent for want of flow-control window is kept up to
//! 1 MiB a stream; past that the stream is reset.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use super::frame::{self, Head, Reason, flag, kind, setting};
use super::handoff::Event;
use super::hpack::Decoder;
use super::request::Kept;
use crate::grpc::serve::{Direct, GrpcDoor};

/// Streams a client may have open at once.
pub(super) const MAX_STREAMS: usize = 200;
/// `SETTINGS_MAX_HEADER_LIST_SIZE`, in octets (RFC 7541 sizes).
pub(super) const MAX_HEADER_LIST: usize = 16 * 1024;
/// The window of each stream and of the connection, in octets.
pub(super) const WINDOW: i64 = 1 << 20;
/// A header block's most encoded octets.
pub(super) const MAX_BLOCK: usize = 64 * 1024;
/// Unsent reply octets a stream may hold.
pub(super) const MAX_QUEUED: usize = 1 << 20;
/// Unwritten octets past which the connection stops reading.
const MAX_UNWRITTEN: usize = 1 << 20;
/// Octets asked of the socket per read.
const READ_CHUNK: usize = 32 * 1024;

/// The reply's header block to a call answered: `:status: 200` (static index 8) and
/// `content-type: application/grpc` (literal, name index 31).
pub(super) const REPLY_HEAD: &[u8] = b"\x88\x0f\x10\x10application/grpc";
/// The trailer block after it: `grpc-status: 0`.
pub(super) const REPLY_TRAILERS: &[u8] = b"\x00\x0bgrpc-status\x010";

/// Serve one connection until the client leaves, an error ends it, or `stop` turns true
/// (then no new stream is taken and the calls under way finish).
pub async fn serve_connection(io: TcpStream, door: Arc<GrpcDoor>, mut stop: watch::Receiver<bool>) {
    let (events, events_rx) = mpsc::unbounded_channel();
    let mut conn = Conn {
        io,
        door,
        rbuf: BytesMut::with_capacity(READ_CHUNK),
        out: Vec::with_capacity(4096),
        written: 0,
        hpack: Decoder::new(4096),
        preface_read: false,
        peer_window: frame::DEFAULT_WINDOW,
        peer_max_frame: frame::MIN_MAX_FRAME_SIZE as usize,
        send_window: frame::DEFAULT_WINDOW,
        recv_window: WINDOW,
        recv_credit: 0,
        streams: HashMap::default(),
        last_stream: 0,
        continuation: None,
        pending: FuturesUnordered::new(),
        events,
        events_rx,
        fields: Vec::new(),
        goaway: false,
        peer_goaway: false,
        eof: false,
        failed: false,
        stop: Box::pin(async move {
            let _ = stop.wait_for(|s| *s).await;
        }),
        stopping: false,
    };
    conn.start();
    std::future::poll_fn(|cx| conn.poll_run(cx)).await;
}

pub(super) type Answering = Pin<Box<dyn Future<Output = Answered> + Send>>;

/// A `ShouldRateLimit` call's answer, with what a fallback to tonic needs.
pub(super) struct Answered {
    pub(super) stream: u32,
    pub(super) answer: Direct,
    pub(super) body: Bytes,
    pub(super) kept: Kept,
}

pub(super) enum Recv {
    /// A `ShouldRateLimit` call whose message is gathered here.
    Direct { body: BytesMut, kept: Kept },
    /// A request whose body goes to its tonic task.
    Tonic(mpsc::UnboundedSender<(Bytes, bool)>),
    /// The client ended its side.
    Closed,
}

pub(super) struct Stream {
    pub(super) recv: Recv,
    /// Octets the client may still send on it.
    pub(super) recv_window: i64,
    pub(super) recv_credit: u32,
    pub(super) received: u64,
    pub(super) content_length: Option<u64>,
    pub(super) send_window: i64,
    pub(super) queued: VecDeque<Bytes>,
    pub(super) queued_len: usize,
    pub(super) trailers: Option<Vec<u8>>,
    /// The reply ends after the queued data (without trailers).
    pub(super) end_after_data: bool,
    pub(super) task: Option<AbortHandle>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

pub(super) struct Continuation {
    pub(super) stream: u32,
    pub(super) end_stream: bool,
    pub(super) block: Vec<u8>,
}

pub(super) struct Conn {
    pub(super) io: TcpStream,
    pub(super) door: Arc<GrpcDoor>,
    pub(super) rbuf: BytesMut,
    pub(super) out: Vec<u8>,
    pub(super) written: usize,
    pub(super) hpack: Decoder,
    pub(super) preface_read: bool,
    /// The client's `SETTINGS_INITIAL_WINDOW_SIZE`.
    pub(super) peer_window: i64,
    pub(super) peer_max_frame: usize,
    /// Octets the server may still send on the connection.
    pub(super) send_window: i64,
    pub(super) recv_window: i64,
    pub(super) recv_credit: u32,
    pub(super) streams: HashMap<u32, Stream, foldhash::fast::RandomState>,
    /// The highest stream the client opened.
    pub(super) last_stream: u32,
    pub(super) continuation: Option<Continuation>,
    pub(super) pending: FuturesUnordered<Answering>,
    pub(super) events: mpsc::UnboundedSender<Event>,
    pub(super) events_rx: mpsc::UnboundedReceiver<Event>,
    /// A buffer for the fields of the header block being read.
    pub(super) fields: Vec<u8>,
    pub(super) goaway: bool,
    pub(super) peer_goaway: bool,
    pub(super) eof: bool,
    /// A connection error was sent (or the socket failed): write what is left and close.
    pub(super) failed: bool,
    pub(super) stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    pub(super) stopping: bool,
}

impl Conn {
    fn start(&mut self) {
        let mut settings = Vec::with_capacity(18);
        for (id, value) in [
            (setting::MAX_CONCURRENT_STREAMS, MAX_STREAMS as u32),
            (setting::INITIAL_WINDOW_SIZE, WINDOW as u32),
            (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST as u32),
        ] {
            settings.extend_from_slice(&id.to_be_bytes());
            settings.extend_from_slice(&value.to_be_bytes());
        }
        frame::put_frame(&mut self.out, kind::SETTINGS, 0, 0, &settings);
        frame::put_window_update(&mut self.out, 0, (WINDOW - frame::DEFAULT_WINDOW) as u32);
    }

    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let mut progress = false;
            if !self.stopping && self.stop.as_mut().poll(cx).is_ready() {
                self.stopping = true;
                self.send_goaway(Reason::NoError);
                progress = true;
            }
            if !self.failed && !self.eof && self.out.len() - self.written < MAX_UNWRITTEN {
                // until a read gives octets, or readiness is gone (the waker is then
                // registered by the `Pending` of poll_read_ready)
                loop {
                    match self.io.poll_read_ready(cx) {
                        Poll::Pending => break,
                        Poll::Ready(Err(_)) => return Poll::Ready(()),
                        Poll::Ready(Ok(())) => {}
                    }
                    self.rbuf.reserve(READ_CHUNK);
                    match self.io.try_read_buf(&mut self.rbuf) {
                        Ok(0) => {
                            self.eof = true;
                            progress = true;
                        }
                        Ok(_) => {
                            progress = true;
                            self.read_frames(cx);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(_) => return Poll::Ready(()),
                    }
                    break;
                }
            }
            while let Poll::Ready(Some(answered)) = self.pending.poll_next_unpin(cx) {
                self.answered(answered);
                progress = true;
            }
            while let Poll::Ready(Some(event)) = self.events_rx.poll_recv(cx) {
                self.event(event);
                progress = true;
            }
            match self.poll_write(cx) {
                Poll::Ready(Err(())) => return Poll::Ready(()),
                Poll::Ready(Ok(())) => {
                    if self.finished() {
                        return Poll::Ready(());
                    }
                }
                Poll::Pending => {}
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Nothing is left to do (called when every octet is written).
    fn finished(&self) -> bool {
        self.failed
            || (self.eof && self.pending.is_empty())
            || ((self.goaway || self.peer_goaway)
                && self.streams.is_empty()
                && self.pending.is_empty())
    }

    /// Write what is buffered; `Ready(Ok)` when all is written.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
        while self.written < self.out.len() {
            match self.io.poll_write_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Pending => return Poll::Pending,
            }
            match self.io.try_write(&self.out[self.written..]) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Poll::Ready(Err(())),
            }
        }
        self.out.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// End the connection with `reason` (RFC 9113 5.4.1): GOAWAY, then close.
    pub(super) fn fail(&mut self, reason: Reason) {
        if !self.failed {
            frame::put_goaway(&mut self.out, self.last_stream, reason);
            self.failed = true;
            self.rbuf.clear();
        }
    }

    pub(super) fn send_goaway(&mut self, reason: Reason) {
        if !self.goaway {
            frame::put_goaway(&mut self.out, self.last_stream, reason);
            self.goaway = true;
        }
    }

    fn read_frames(&mut self, cx: &mut Context<'_>) {
        if !self.preface_read {
            let n = self.rbuf.len().min(frame::PREFACE.len());
            if self.rbuf[..n] != frame::PREFACE[..n] {
                return self.fail(Reason::ProtocolError);
            }
            if n < frame::PREFACE.len() {
                return;
            }
            self.rbuf.advance(n);
            self.preface_read = true;
        }
        while !self.failed {
            let Some(head) = Head::read(&self.rbuf) else {
                return;
            };
            if head.len > frame::MIN_MAX_FRAME_SIZE as usize {
                return self.fail(Reason::FrameSizeError);
            }
            if self.rbuf.len() < 9 + head.len {
                return;
            }
            self.rbuf.advance(9);
            let payload = self.rbuf.split_to(head.len).freeze();
            self.frame(head, payload, cx);
        }
    }

    fn frame(&mut self, h: Head, payload: Bytes, cx: &mut Context<'_>) {
        if let Some(c) = &self.continuation
            && (h.kind != kind::CONTINUATION || h.stream != c.stream)
        {
            return self.fail(Reason::ProtocolError);
        }
        match h.kind {
            kind::DATA => self.data(h, payload, cx),
            kind::HEADERS => self.headers(h, payload, cx),
            kind::CONTINUATION => {
                let Some(c) = self.continuation.as_mut() else {
                    return self.fail(Reason::ProtocolError);
                };
                if c.block.len() + payload.len() > MAX_BLOCK {
                    return self.fail(Reason::EnhanceYourCalm);
                }
                c.block.extend_from_slice(&payload);
                if h.flags & flag::END_HEADERS != 0 {
                    let c = self.continuation.take().expect("checked above");
                    self.header_block(c.stream, c.end_stream, &c.block, cx);
                }
            }
            kind::PRIORITY => {
                if h.stream == 0 {
                    self.fail(Reason::ProtocolError);
                } else if h.len != 5 {
                    self.reset(h.stream, Reason::FrameSizeError);
                }
            }
            kind::RST_STREAM => {
                if h.stream == 0 || h.stream > self.last_stream {
                    self.fail(Reason::ProtocolError);
                } else if h.len != 4 {
                    self.fail(Reason::FrameSizeError);
                } else {
                    self.streams.remove(&h.stream);
                }
            }
            kind::SETTINGS => self.settings(h, &payload),
            kind::PUSH_PROMISE => self.fail(Reason::ProtocolError),
            kind::PING => {
                if h.stream != 0 {
                    self.fail(Reason::ProtocolError);
                } else if h.len != 8 {
                    self.fail(Reason::FrameSizeError);
                } else if h.flags & flag::ACK == 0 {
                    frame::put_frame(&mut self.out, kind::PING, flag::ACK, 0, &payload);
                }
            }
            kind::GOAWAY => {
                if h.stream != 0 {
                    self.fail(Reason::ProtocolError);
                } else {
                    self.peer_goaway = true;
                }
            }
            kind::WINDOW_UPDATE => self.window_update(h, &payload),
            _ => {}
        }
    }
}
