//! The connection's streams: a request's header block and body read, its
//! `ShouldRateLimit` call decided in the turn (or later, if the decision waits), and what
//! tonic answers handed over and sent back.

use std::collections::VecDeque;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tonic::Status;

use super::conn::{
    Answered, Answering, Conn, Continuation, MAX_HEADER_LIST, MAX_QUEUED, MAX_STREAMS, REPLY_HEAD,
    REPLY_TRAILERS, Recv, Stream, WINDOW,
};
use super::frame::{self, Head, Reason, flag};
use super::handoff::{ChannelBody, Event, response_block, tonic_call};
use super::hpack;
use super::request::{Kept, Refused, RequestHead};
use crate::grpc::serve::Direct;

impl Conn {
    pub(super) fn headers(&mut self, h: Head, payload: Bytes, cx: &mut Context<'_>) {
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

    pub(super) fn header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        cx: &mut Context<'_>,
    ) {
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
                    if !self.hand_to_tonic(id, &mut stream, &kept, None) {
                        self.fields = head.fields;
                        return;
                    }
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
    pub(super) fn hand_to_tonic(
        &mut self,
        id: u32,
        s: &mut Stream,
        kept: &Kept,
        first: Option<Bytes>,
    ) -> bool {
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
                true
            }
            None => {
                // a URI or field `http` refuses: malformed; the caller drops the stream
                frame::put_reset(&mut self.out, id, Reason::ProtocolError);
                false
            }
        }
    }

    pub(super) fn data(&mut self, h: Head, payload: Bytes, cx: &mut Context<'_>) {
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
            if !self.hand_to_tonic(h.stream, &mut s, &kept, Some(body)) {
                return;
            }
            self.streams.insert(h.stream, s);
        }
        if end {
            self.end_of_request(h.stream, cx);
        }
    }

    /// The client ended its side of stream `id`.
    pub(super) fn end_of_request(&mut self, id: u32, cx: &mut Context<'_>) {
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
    pub(super) fn answer(&mut self, id: u32, body: Bytes, kept: Kept, cx: &mut Context<'_>) {
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

    pub(super) fn answered(&mut self, a: Answered) {
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
                if !self.hand_to_tonic(id, &mut s, &a.kept, Some(a.body)) {
                    return;
                }
                if let Recv::Tonic(tx) = std::mem::replace(&mut s.recv, Recv::Closed) {
                    drop(tx);
                }
                self.streams.insert(id, s);
            }
        }
    }

    pub(super) fn event(&mut self, e: Event) {
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
}
