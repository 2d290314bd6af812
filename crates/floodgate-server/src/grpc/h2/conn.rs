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
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::HeaderMap;
use http_body::{Body, Frame};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tonic::Status;

use super::frame::{self, Head, Reason, flag, kind, setting};
use super::hpack::{self, Decoder};
use super::request::{Kept, Refused, RequestHead};
use crate::grpc::serve::{Direct, GrpcDoor};

/// Streams a client may have open at once.
const MAX_STREAMS: usize = 200;
/// `SETTINGS_MAX_HEADER_LIST_SIZE`, in octets (RFC 7541 sizes).
const MAX_HEADER_LIST: usize = 16 * 1024;
/// The window of each stream and of the connection, in octets.
const WINDOW: i64 = 1 << 20;
/// A header block's most encoded octets.
const MAX_BLOCK: usize = 64 * 1024;
/// Unsent reply octets a stream may hold.
const MAX_QUEUED: usize = 1 << 20;
/// Unwritten octets past which the connection stops reading.
const MAX_UNWRITTEN: usize = 1 << 20;
/// Octets asked of the socket per read.
const READ_CHUNK: usize = 32 * 1024;

/// The reply's header block to a call answered: `:status: 200` (static index 8) and
/// `content-type: application/grpc` (literal, name index 31).
const REPLY_HEAD: &[u8] = b"\x88\x0f\x10\x10application/grpc";
/// The trailer block after it: `grpc-status: 0`.
const REPLY_TRAILERS: &[u8] = b"\x00\x0bgrpc-status\x010";

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

type Answering = Pin<Box<dyn Future<Output = Answered> + Send>>;

/// A `ShouldRateLimit` call's answer, with what a fallback to tonic needs.
struct Answered {
    stream: u32,
    answer: Direct,
    body: Bytes,
    kept: Kept,
}

/// What a stream's tonic task (or its request body) tells the connection.
enum Event {
    Head(u32, http::response::Parts, bool),
    Data(u32, Bytes),
    Trailers(u32, HeaderMap),
    End(u32),
    Failed(u32),
    /// Request octets the body handed to tonic: their window goes back to the client.
    Consumed(u32, usize),
}

enum Recv {
    /// A `ShouldRateLimit` call whose message is gathered here.
    Direct { body: BytesMut, kept: Kept },
    /// A request whose body goes to its tonic task.
    Tonic(mpsc::UnboundedSender<(Bytes, bool)>),
    /// The client ended its side.
    Closed,
}

struct Stream {
    recv: Recv,
    /// Octets the client may still send on it.
    recv_window: i64,
    recv_credit: u32,
    received: u64,
    content_length: Option<u64>,
    send_window: i64,
    queued: VecDeque<Bytes>,
    queued_len: usize,
    trailers: Option<Vec<u8>>,
    /// The reply ends after the queued data (without trailers).
    end_after_data: bool,
    task: Option<AbortHandle>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

struct Continuation {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
}

struct Conn {
    io: TcpStream,
    door: Arc<GrpcDoor>,
    rbuf: BytesMut,
    out: Vec<u8>,
    written: usize,
    hpack: Decoder,
    preface_read: bool,
    /// The client's `SETTINGS_INITIAL_WINDOW_SIZE`.
    peer_window: i64,
    peer_max_frame: usize,
    /// Octets the server may still send on the connection.
    send_window: i64,
    recv_window: i64,
    recv_credit: u32,
    streams: HashMap<u32, Stream, foldhash::fast::RandomState>,
    /// The highest stream the client opened.
    last_stream: u32,
    continuation: Option<Continuation>,
    pending: FuturesUnordered<Answering>,
    events: mpsc::UnboundedSender<Event>,
    events_rx: mpsc::UnboundedReceiver<Event>,
    /// A buffer for the fields of the header block being read.
    fields: Vec<u8>,
    goaway: bool,
    peer_goaway: bool,
    eof: bool,
    /// A connection error was sent (or the socket failed): write what is left and close.
    failed: bool,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
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
    fn fail(&mut self, reason: Reason) {
        if !self.failed {
            frame::put_goaway(&mut self.out, self.last_stream, reason);
            self.failed = true;
            self.rbuf.clear();
        }
    }

    fn send_goaway(&mut self, reason: Reason) {
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

    fn settings(&mut self, h: Head, payload: &[u8]) {
        if h.stream != 0 {
            return self.fail(Reason::ProtocolError);
        }
        if h.flags & flag::ACK != 0 {
            if h.len != 0 {
                self.fail(Reason::FrameSizeError);
            }
            return;
        }
        if !h.len.is_multiple_of(6) {
            return self.fail(Reason::FrameSizeError);
        }
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => return self.fail(Reason::ProtocolError),
                setting::INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > frame::MAX_WINDOW {
                        return self.fail(Reason::FlowControlError);
                    }
                    let delta = value - self.peer_window;
                    self.peer_window = value;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > frame::MAX_WINDOW {
                            return self.fail(Reason::FlowControlError);
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value) {
                        return self.fail(Reason::ProtocolError);
                    }
                    self.peer_max_frame = value as usize;
                }
                // the server's encoder keeps no table; the rest concern pushes or are
                // advisory
                setting::HEADER_TABLE_SIZE
                | setting::ENABLE_PUSH
                | setting::MAX_CONCURRENT_STREAMS
                | setting::MAX_HEADER_LIST_SIZE => {}
                _ => {}
            }
        }
        frame::put_frame(&mut self.out, kind::SETTINGS, flag::ACK, 0, &[]);
        self.flush_all();
    }

    fn window_update(&mut self, h: Head, payload: &[u8]) {
        if h.len != 4 {
            return self.fail(Reason::FrameSizeError);
        }
        let inc = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff,
        );
        if h.stream == 0 {
            if inc == 0 {
                return self.fail(Reason::ProtocolError);
            }
            self.send_window += inc;
            if self.send_window > frame::MAX_WINDOW {
                return self.fail(Reason::FlowControlError);
            }
            return self.flush_all();
        }
        if h.stream > self.last_stream {
            return self.fail(Reason::ProtocolError);
        }
        let Some(s) = self.streams.get_mut(&h.stream) else {
            return;
        };
        if inc == 0 {
            return self.reset(h.stream, Reason::ProtocolError);
        }
        s.send_window += inc;
        if s.send_window > frame::MAX_WINDOW {
            return self.reset(h.stream, Reason::FlowControlError);
        }
        self.flush(h.stream);
    }

    fn headers(&mut self, h: Head, payload: Bytes, cx: &mut Context<'_>) {
        if h.stream == 0 {
            return self.fail(Reason::ProtocolError);
        }
        let mut p = &payload[..];
        let mut pad = 0;
        if h.flags & flag::PADDED != 0 {
            let Some((&n, rest)) = p.split_first() else {
                return self.fail(Reason::FrameSizeError);
            };
            pad = usize::from(n);
            p = rest;
        }
        if h.flags & flag::PRIORITY != 0 {
            let Some(rest) = p.get(5..) else {
                return self.fail(Reason::FrameSizeError);
            };
            p = rest;
        }
        if pad > p.len() {
            return self.fail(Reason::ProtocolError);
        }
        let block = &p[..p.len() - pad];
        let end_stream = h.flags & flag::END_STREAM != 0;
        if h.flags & flag::END_HEADERS != 0 {
            self.header_block(h.stream, end_stream, block, cx);
        } else {
            self.continuation = Some(Continuation {
                stream: h.stream,
                end_stream,
                block: block.to_vec(),
            });
        }
    }

    fn header_block(&mut self, id: u32, end_stream: bool, block: &[u8], cx: &mut Context<'_>) {
        let mut head = RequestHead::with_buffer(std::mem::take(&mut self.fields));
        let decoded = self
            .hpack
            .decode(block, |n, v| head.field(n, v, MAX_HEADER_LIST));
        if decoded.is_err() {
            return self.fail(Reason::CompressionError);
        }
        if id.is_multiple_of(2) {
            return self.fail(Reason::ProtocolError);
        }
        if id <= self.last_stream {
            self.fields = head.fields;
            match self.streams.get(&id) {
                Some(s) if !matches!(s.recv, Recv::Closed) => {
                    // trailers: they end the request
                    if end_stream {
                        self.end_of_request(id, cx);
                    } else {
                        self.reset(id, Reason::ProtocolError);
                    }
                }
                // a closed stream, or one skipped (RFC 9113 5.1.1)
                _ => self.fail(Reason::ProtocolError),
            }
            return;
        }
        self.last_stream = id;
        if self.goaway {
            self.fields = head.fields;
            return;
        }
        if self.streams.len() >= MAX_STREAMS {
            self.fields = head.fields;
            frame::put_reset(&mut self.out, id, Reason::RefusedStream);
            return;
        }
        head.finish();
        match head.refused {
            Some(Refused::Malformed(why)) => {
                tracing::debug!(stream = id, why, "malformed gRPC request");
                frame::put_reset(&mut self.out, id, Reason::ProtocolError);
            }
            Some(Refused::TooLarge) => {
                let mut block = Vec::with_capacity(8);
                hpack::put_field(&mut block, 8, b"", b"431");
                frame::put_headers(&mut self.out, id, &block, true, self.peer_max_frame);
                if !end_stream {
                    frame::put_reset(&mut self.out, id, Reason::NoError);
                }
            }
            None => {
                let kept = Kept::of(&head);
                let mut stream = Stream {
                    recv: Recv::Closed,
                    recv_window: WINDOW,
                    recv_credit: 0,
                    received: 0,
                    content_length: head.content_length,
                    send_window: self.peer_window,
                    queued: VecDeque::new(),
                    queued_len: 0,
                    trailers: None,
                    end_after_data: false,
                    task: None,
                };
                if head.should_rate_limit && !head.grpc_encoding {
                    stream.recv = Recv::Direct {
                        body: BytesMut::new(),
                        kept,
                    };
                } else {
                    self.hand_to_tonic(id, &mut stream, &kept, None);
                }
                self.streams.insert(id, stream);
                if end_stream {
                    self.end_of_request(id, cx);
                }
            }
        }
        self.fields = head.fields;
    }

    /// Hand a request to its own tonic task: `first` is body already read (its window
    /// already returned); the rest follows as it arrives.
    fn hand_to_tonic(&mut self, id: u32, s: &mut Stream, kept: &Kept, first: Option<Bytes>) {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(b) = first {
            let _ = tx.send((b, false));
        }
        let body = ChannelBody {
            stream: id,
            rx,
            events: self.events.clone(),
        };
        match kept.request(body) {
            Some(req) => {
                let door = self.door.clone();
                let events = self.events.clone();
                let task = tokio::spawn(tonic_call(door, id, req, events));
                s.task = Some(task.abort_handle());
                s.recv = Recv::Tonic(tx);
            }
            None => {
                frame::put_reset(&mut self.out, id, Reason::ProtocolError);
                s.recv = Recv::Closed;
                s.end_after_data = true;
            }
        }
    }

    fn data(&mut self, h: Head, payload: Bytes, cx: &mut Context<'_>) {
        if h.stream == 0 || h.stream > self.last_stream {
            return self.fail(Reason::ProtocolError);
        }
        let flow_len = payload.len();
        self.recv_window -= flow_len as i64;
        if self.recv_window < 0 {
            return self.fail(Reason::FlowControlError);
        }
        let mut data = payload;
        if h.flags & flag::PADDED != 0 {
            let Some(&pad) = data.first() else {
                return self.fail(Reason::FrameSizeError);
            };
            let pad = usize::from(pad);
            if pad >= data.len() {
                return self.fail(Reason::ProtocolError);
            }
            data = data.slice(1..data.len() - pad);
        }
        let end = h.flags & flag::END_STREAM != 0;
        let Some(s) = self.streams.get_mut(&h.stream) else {
            // a closed stream (RFC 9113 5.1): STREAM_CLOSED; the octets still count
            // against the connection's window
            self.credit(flow_len);
            return frame::put_reset(&mut self.out, h.stream, Reason::StreamClosed);
        };
        if matches!(s.recv, Recv::Closed) {
            self.credit(flow_len);
            return self.reset(h.stream, Reason::StreamClosed);
        }
        s.recv_window -= flow_len as i64;
        if s.recv_window < 0 {
            self.credit(flow_len);
            return self.reset(h.stream, Reason::FlowControlError);
        }
        s.received += data.len() as u64;
        let limit = self.door.max_bytes().saturating_add(5);
        let mut credit_now = flow_len - data.len();
        let mut promote = None;
        match &mut s.recv {
            Recv::Direct { body, kept } => {
                credit_now = flow_len;
                if body.len() + data.len() > limit {
                    let mut all = std::mem::take(body);
                    all.extend_from_slice(&data);
                    promote = Some((all.freeze(), kept.clone()));
                } else {
                    body.extend_from_slice(&data);
                }
                if !end {
                    s.recv_credit += flow_len as u32;
                }
            }
            Recv::Tonic(tx) => {
                let n = data.len();
                if tx.send((data, true)).is_err() {
                    credit_now += n;
                }
            }
            Recv::Closed => {}
        }
        let stream_credit = s.recv_credit;
        if stream_credit as i64 >= WINDOW / 2 {
            s.recv_credit = 0;
            s.recv_window += i64::from(stream_credit);
            frame::put_window_update(&mut self.out, h.stream, stream_credit);
        }
        self.credit(credit_now);
        if let Some((body, kept)) = promote {
            let mut s = self.streams.remove(&h.stream).expect("present above");
            self.hand_to_tonic(h.stream, &mut s, &kept, Some(body));
            self.streams.insert(h.stream, s);
        }
        if end {
            self.end_of_request(h.stream, cx);
        }
    }

    /// Give `n` octets of the connection's window back, in updates of at least half of it.
    fn credit(&mut self, n: usize) {
        self.recv_credit += n as u32;
        if i64::from(self.recv_credit) >= WINDOW / 2 {
            frame::put_window_update(&mut self.out, 0, self.recv_credit);
            self.recv_window += i64::from(self.recv_credit);
            self.recv_credit = 0;
        }
    }

    /// The client ended its side of stream `id`.
    fn end_of_request(&mut self, id: u32, cx: &mut Context<'_>) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.content_length.is_some_and(|n| n != s.received) {
            return self.reset(id, Reason::ProtocolError);
        }
        match std::mem::replace(&mut s.recv, Recv::Closed) {
            Recv::Direct { body, kept } => self.answer(id, body.freeze(), kept, cx),
            Recv::Tonic(tx) => drop(tx),
            Recv::Closed => {}
        }
    }

    /// Decide a `ShouldRateLimit` call now if the decision does not wait; otherwise
    /// later, in a turn after it is ready.
    fn answer(&mut self, id: u32, body: Bytes, kept: Kept, cx: &mut Context<'_>) {
        let door = self.door.clone();
        let mut fut: Answering = Box::pin(async move {
            let answer = match kept.timeout {
                None => door.answer(&body).await,
                Some(t) => tokio::time::timeout(t, door.answer(&body))
                    .await
                    .unwrap_or_else(|_| Direct::Status(Status::cancelled("Timeout expired"))),
            };
            Answered {
                stream: id,
                answer,
                body,
                kept,
            }
        });
        match fut.as_mut().poll(cx) {
            Poll::Ready(a) => self.answered(a),
            Poll::Pending => self.pending.push(fut),
        }
    }

    fn answered(&mut self, a: Answered) {
        let id = a.stream;
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        match a.answer {
            Direct::Reply(message) => {
                frame::put_headers(&mut self.out, id, REPLY_HEAD, false, self.peer_max_frame);
                s.queued_len += message.len();
                s.queued.push_back(message);
                s.trailers = Some(REPLY_TRAILERS.to_vec());
                self.flush(id);
            }
            Direct::Status(status) => {
                let (parts, ()) = status.into_http::<()>().into_parts();
                let block = response_block(&parts);
                frame::put_headers(&mut self.out, id, &block, true, self.peer_max_frame);
                self.streams.remove(&id);
            }
            Direct::Declined => {
                let mut s = self.streams.remove(&id).expect("present above");
                self.hand_to_tonic(id, &mut s, &a.kept, Some(a.body));
                if let Recv::Tonic(tx) = std::mem::replace(&mut s.recv, Recv::Closed) {
                    drop(tx);
                }
                self.streams.insert(id, s);
            }
        }
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Head(id, parts, end) => {
                if !self.streams.contains_key(&id) {
                    return;
                }
                let block = response_block(&parts);
                frame::put_headers(&mut self.out, id, &block, end, self.peer_max_frame);
                if end {
                    self.close_local(id);
                }
            }
            Event::Data(id, data) => {
                let Some(s) = self.streams.get_mut(&id) else {
                    return;
                };
                s.queued_len += data.len();
                s.queued.push_back(data);
                if s.queued_len > MAX_QUEUED {
                    return self.reset(id, Reason::InternalError);
                }
                self.flush(id);
            }
            Event::Trailers(id, trailers) => {
                let Some(s) = self.streams.get_mut(&id) else {
                    return;
                };
                let mut block = Vec::new();
                for (n, v) in &trailers {
                    hpack::put_field(&mut block, 0, n.as_str().as_bytes(), v.as_bytes());
                }
                s.trailers = Some(block);
                self.flush(id);
            }
            Event::End(id) => {
                let Some(s) = self.streams.get_mut(&id) else {
                    return;
                };
                s.end_after_data = true;
                self.flush(id);
            }
            Event::Failed(id) => {
                if self.streams.contains_key(&id) {
                    self.reset(id, Reason::InternalError);
                }
            }
            Event::Consumed(id, n) => {
                self.credit(n);
                if let Some(s) = self.streams.get_mut(&id)
                    && !matches!(s.recv, Recv::Closed)
                {
                    s.recv_credit += n as u32;
                    if i64::from(s.recv_credit) >= WINDOW / 2 {
                        let c = s.recv_credit;
                        s.recv_credit = 0;
                        s.recv_window += i64::from(c);
                        frame::put_window_update(&mut self.out, id, c);
                    }
                }
            }
        }
    }

    /// Send what the windows allow of stream `id`'s reply; its trailers (or the end)
    /// once all data is sent.
    fn flush(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        while let Some(front) = s.queued.front_mut() {
            if front.is_empty() {
                s.queued.pop_front();
                continue;
            }
            let n = (front.len() as i64)
                .min(self.peer_max_frame as i64)
                .min(self.send_window)
                .min(s.send_window);
            if n <= 0 {
                return;
            }
            let chunk = front.split_to(n as usize);
            if front.is_empty() {
                s.queued.pop_front();
            }
            s.queued_len -= chunk.len();
            let last = s.queued.is_empty() && s.trailers.is_none() && s.end_after_data;
            frame::put_frame(
                &mut self.out,
                kind::DATA,
                if last { flag::END_STREAM } else { 0 },
                id,
                &chunk,
            );
            self.send_window -= n;
            s.send_window -= n;
            if last {
                return self.close_local(id);
            }
        }
        if let Some(block) = s.trailers.take() {
            frame::put_headers(&mut self.out, id, &block, true, self.peer_max_frame);
            self.close_local(id);
        } else if s.end_after_data {
            frame::put_frame(&mut self.out, kind::DATA, flag::END_STREAM, id, &[]);
            self.close_local(id);
        }
    }

    fn flush_all(&mut self) {
        let waiting: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.queued.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for id in waiting {
            self.flush(id);
        }
    }

    /// The server sent the end of stream `id`'s reply.
    fn close_local(&mut self, id: u32) {
        if let Some(s) = self.streams.remove(&id)
            && !matches!(s.recv, Recv::Closed)
        {
            // the client is still sending: tell it to stop (RFC 9113 8.1)
            frame::put_reset(&mut self.out, id, Reason::NoError);
        }
    }

    /// A stream error: RST_STREAM and forget the stream.
    fn reset(&mut self, id: u32, reason: Reason) {
        frame::put_reset(&mut self.out, id, reason);
        self.streams.remove(&id);
    }
}

/// A reply's header block: `:status` and the fields, each a literal without indexing.
fn response_block(parts: &http::response::Parts) -> Vec<u8> {
    let mut block = Vec::with_capacity(64);
    if parts.status == http::StatusCode::OK {
        block.push(0x88);
    } else {
        hpack::put_field(&mut block, 8, b"", parts.status.as_str().as_bytes());
    }
    for (n, v) in &parts.headers {
        hpack::put_field(&mut block, 0, n.as_str().as_bytes(), v.as_bytes());
    }
    block
}

/// A request answered by tonic, in its own task: the reply's head, data and trailers
/// are sent to the connection as they come.
async fn tonic_call(
    door: Arc<GrpcDoor>,
    id: u32,
    req: http::Request<ChannelBody>,
    events: mpsc::UnboundedSender<Event>,
) {
    let (parts, mut body) = door.handle(req).await.into_parts();
    let end = body.is_end_stream();
    if events.send(Event::Head(id, parts, end)).is_err() || end {
        return;
    }
    loop {
        let event = match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => Event::End(id),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Event::Data(id, data),
                Err(frame) => match frame.into_trailers() {
                    Ok(trailers) => Event::Trailers(id, trailers),
                    Err(_) => continue,
                },
            },
            Some(Err(_)) => Event::Failed(id),
        };
        let last = !matches!(event, Event::Data(..));
        if events.send(event).is_err() || last {
            return;
        }
    }
}

/// A request body fed by the connection; each chunk read gives its window back.
struct ChannelBody {
    stream: u32,
    rx: mpsc::UnboundedReceiver<(Bytes, bool)>,
    events: mpsc::UnboundedSender<Event>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some((data, counted))) => {
                if counted {
                    let _ = this.events.send(Event::Consumed(this.stream, data.len()));
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
