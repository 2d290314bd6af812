//! The gRPC door's HTTP/2 as RFC 9113 (HTTP/2), RFC 7541 (HPACK) and gRPC require of a
//! server, over real loopback TCP: a well-behaved peer is the `h2` crate's client; a
//! misbehaving one writes frames by hand (a 9-byte frame header, HPACK blocks of literal
//! fields without indexing and without Huffman coding). Where the RFC lets the server
//! choose between a stream error and a connection error, or between GOAWAY-then-close and
//! a bare close, both are accepted; a GOAWAY's error code is checked when one arrives.
//! Every frame the server sends is checked against the default SETTINGS_MAX_FRAME_SIZE,
//! which the hand-written peer never raises. A GOAWAY must carry the code the RFC names,
//! or, in three cases, the code the `h2` crate that serves the door sends instead
//! (PROTOCOL_ERROR for an undecodable header block, a 5-byte SETTINGS and an initial
//! window above 2^31-1; `ConnError::h2_sends`): the connection ends either way.

mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";
const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// `k`: 37 a day (counted exactly); `many`: plenty, for replies with many statuses.
const RULES: &str = r#"
limits: {max_descriptors: 2000}
domains:
  - domain: h2
    descriptors:
      - key: k
        rate_limit: {rate: 37/day}
      - key: many
        rate_limit: {rate: 1000000/day}
"#;
const LIMIT: usize = 37;

// Frame types, flags and error codes of RFC 9113.
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;
const COMPRESSION_ERROR: u32 = 0x9;
const SETTINGS_ENABLE_PUSH: u16 = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
/// SETTINGS_MAX_FRAME_SIZE's initial value, which the hand-written peer never raises.
const DEFAULT_MAX_FRAME: usize = 16_384;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Runs a case, failing it when it takes longer than `secs`.
async fn bounded<F: Future>(secs: u64, case: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), case)
        .await
        .unwrap_or_else(|_| panic!("the case did not finish within {secs} s"))
}

/// Runs `case` against a server with [`RULES`], failing it when it takes longer than
/// `secs`, and stops the server.
async fn served<F, Fut>(secs: u64, case: F)
where
    F: FnOnce(SocketAddr) -> Fut,
    Fut: Future<Output = ()>,
{
    let srv = start(RULES).await;
    bounded(secs, case(srv.running.grpc.unwrap())).await;
    srv.stop().await;
}

/// The one message of a gRPC body, checked to be one whole uncompressed message.
fn unframed(body: &[u8]) -> &[u8] {
    assert!(
        body.len() >= 5,
        "a gRPC message has a 5-byte prefix: {body:?}"
    );
    assert_eq!(body[0], 0, "the reply is not compressed");
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(body.len(), 5 + len, "one whole message in the body");
    &body[5..]
}

fn rls(r: &RateLimitRequest) -> Bytes {
    framed(&r.encode_to_vec())
}

/// One call on key `k` with value `v`.
fn one(v: &str) -> Bytes {
    rls(&req("h2", vec![desc(&[("k", v)])], 1))
}

/// A call of `n` descriptors on `many`: the reply, `n` statuses, is about 29 bytes a
/// status (29,119 bytes for n = 1000).
fn many(n: usize) -> Bytes {
    let ds = (0..n)
        .map(|i| desc(&[("many", &format!("v{i}"))]))
        .collect();
    rls(&req("h2", ds, 1))
}

// ---------------------------------------------------------------------------------------
// The well-behaved peer: h2's client.

type H2 = h2::client::SendRequest<Bytes>;

async fn h2_connect(addr: SocketAddr, builder: &h2::client::Builder) -> H2 {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (send, conn) = builder.handshake::<_, Bytes>(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

fn grpc_request(path: &str) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://floodgate{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// What a caller sees of one call.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
    trailers: Option<http::HeaderMap>,
}

impl Answer {
    /// `grpc-status`, from the trailers or a trailers-only reply's headers.
    fn grpc_status(&self) -> Option<&str> {
        self.trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| self.headers.get("grpc-status"))
            .map(|v| v.to_str().unwrap())
    }

    /// The reply of a call answered with grpc-status 0.
    fn rls(&self) -> RateLimitResponse {
        assert_eq!(self.status, 200);
        assert_eq!(self.grpc_status(), Some("0"), "{self:?}");
        RateLimitResponse::decode(unframed(&self.body)).expect("the reply decodes")
    }
}

async fn read_answer(resp: h2::client::ResponseFuture) -> Answer {
    let resp = resp.await.expect("the server answers");
    let (parts, mut body) = resp.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("the reply body reads");
        body.flow_control().release_capacity(chunk.len()).unwrap();
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.expect("the trailers read");
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: data,
        trailers,
    }
}

/// One unary call: `body` sent in one piece.
async fn h2_unary(send: &H2, path: &str, body: Bytes) -> Answer {
    let mut send = send.clone().ready().await.expect("the connection is open");
    let (resp, mut stream) = send.send_request(grpc_request(path), false).unwrap();
    stream.send_data(body, true).unwrap();
    read_answer(resp).await
}

/// A call on a fresh connection, to show the server still serves.
async fn serves_a_new_connection(addr: SocketAddr, why: &str) {
    let send = h2_connect(addr, &h2::client::Builder::new()).await;
    let r = h2_unary(
        &send,
        PATH,
        rls(&req("h2", vec![desc(&[("many", "x")])], 1)),
    )
    .await;
    assert_eq!(r.rls().overall_code, OK, "after {why}");
}

// ---------------------------------------------------------------------------------------
// The misbehaving peer: frames written and read by hand.

#[derive(Debug)]
struct Frame {
    ty: u8,
    flags: u8,
    id: u32,
    payload: Bytes,
}

fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut b = Vec::with_capacity(9 + len);
    b.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    b.push(ty);
    b.push(flags);
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(payload);
    b
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1), `high` in the prefix byte.
fn hpack_int(out: &mut Vec<u8>, n: u32, high: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(high | v as u8);
        return;
    }
    out.push(high | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header block of literal fields without indexing, new names, no Huffman coding
/// (RFC 7541 §6.2.2): valid HPACK whatever the names and values.
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0x00);
        hpack_int(&mut out, 7, 0, name.len());
        out.extend_from_slice(name.as_bytes());
        hpack_int(&mut out, 7, 0, value.len());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// The fields of a gRPC call to `path`.
fn call_fields(path: &str) -> Vec<(&str, &str)> {
    vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "floodgate"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
}

/// HEADERS then DATA of one `ShouldRateLimit` call on stream `id` (DATA frames of at
/// most 16,384 bytes, the server's SETTINGS_MAX_FRAME_SIZE unless it raised it).
fn call_frames(id: u32, body: &[u8]) -> Vec<u8> {
    let mut b = frame(HEADERS, END_HEADERS, id, &hpack(&call_fields(PATH)));
    let chunks = body.chunks(DEFAULT_MAX_FRAME).count();
    for (i, chunk) in body.chunks(DEFAULT_MAX_FRAME).enumerate() {
        let flags = if i + 1 == chunks { END_STREAM } else { 0 };
        b.extend(frame(DATA, flags, id, chunk));
    }
    b
}

/// How a connection ended.
#[derive(Debug)]
struct Ended {
    /// The error code of the last GOAWAY received before the close, if any.
    goaway: Option<u32>,
}

/// How a stream ended.
#[derive(Debug)]
enum StreamEnd {
    /// Closed by the server (END_STREAM), with the DATA received.
    Closed { headers: usize, data: Vec<u8> },
    /// Reset by the server, with the code.
    Reset(u32),
    /// The whole connection ended.
    Connection(Ended),
}

struct Raw {
    s: TcpStream,
    buf: BytesMut,
    /// The server's SETTINGS (the first frame it sent).
    settings: Vec<(u16, u32)>,
    /// The error code of the last GOAWAY received.
    goaway: Option<u32>,
}

impl Raw {
    /// A TCP connection, nothing sent yet.
    async fn tcp(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        Raw {
            s,
            buf: BytesMut::new(),
            settings: Vec::new(),
            goaway: None,
        }
    }

    /// The preface and an empty SETTINGS sent, the server's SETTINGS read and
    /// acknowledged, and the acknowledgement of ours read.
    async fn open(addr: SocketAddr) -> Raw {
        Raw::open_with(addr, &[]).await
    }

    /// As [`Raw::open`], with `settings` in the client's SETTINGS.
    async fn open_with(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        let mut raw = Raw::tcp(addr).await;
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &settings_payload(settings)));
        raw.send(&hello).await;
        let (mut theirs, mut acked) = (false, false);
        while !(theirs && acked) {
            let f = raw
                .next(Duration::from_secs(2))
                .await
                .expect("the server answers the preface")
                .expect("the connection stays open");
            match (f.ty, f.flags & ACK) {
                (SETTINGS, 0) => {
                    assert!(!theirs, "one SETTINGS before the acknowledgement");
                    assert_eq!(f.payload.len() % 6, 0);
                    raw.settings = f
                        .payload
                        .chunks(6)
                        .map(|c| {
                            (
                                u16::from_be_bytes([c[0], c[1]]),
                                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                            )
                        })
                        .collect();
                    raw.send(&frame(SETTINGS, ACK, 0, &[])).await;
                    theirs = true;
                }
                (SETTINGS, _) => acked = true,
                _ => {}
            }
        }
        raw
    }

    fn setting(&self, id: u16) -> Option<u32> {
        self.settings.iter().rev().find(|s| s.0 == id).map(|s| s.1)
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("the write succeeds");
    }

    /// Bytes that may meet a closed connection: a failed write is not an error.
    async fn send_lenient(&mut self, bytes: &[u8]) -> bool {
        self.s.write_all(bytes).await.is_ok()
    }

    /// The next frame; `Ok(None)` when the connection ended (closed or reset); `Err` when
    /// nothing came within `wait`.
    async fn next(&mut self, wait: Duration) -> Result<Option<Frame>, ()> {
        let deadline = Instant::now() + wait;
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                assert!(
                    len <= DEFAULT_MAX_FRAME,
                    "a frame of {len} bytes, above the SETTINGS_MAX_FRAME_SIZE of the peer"
                );
                if self.buf.len() >= 9 + len {
                    let head = self.buf.split_to(9);
                    let payload = self.buf.split_to(len).freeze();
                    let f = Frame {
                        ty: head[3],
                        flags: head[4],
                        id: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
                        payload,
                    };
                    if f.ty == PING && f.flags & ACK == 0 {
                        // a PING from the server is answered, as the RFC requires
                        let _ = self.send_lenient(&frame(PING, ACK, 0, &f.payload)).await;
                    }
                    if f.ty == GOAWAY {
                        assert!(f.payload.len() >= 8, "GOAWAY has 8 bytes or more");
                        assert_eq!(f.id, 0, "GOAWAY is on stream 0");
                        self.goaway = Some(u32::from_be_bytes([
                            f.payload[4],
                            f.payload[5],
                            f.payload[6],
                            f.payload[7],
                        ]));
                    }
                    return Ok(Some(f));
                }
            }
            match tokio::time::timeout_at(deadline, self.s.read_buf(&mut self.buf)).await {
                Err(_) => return Err(()),
                Ok(Ok(0)) | Ok(Err(_)) => return Ok(None),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Read until the connection ends, which must happen within `wait`.
    async fn ended(&mut self, wait: Duration, what: &str) -> Ended {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Err(()) => panic!("{what}: the connection is still open after {wait:?}"),
                Ok(None) => {
                    return Ended {
                        goaway: self.goaway,
                    };
                }
                Ok(Some(_)) => {}
            }
        }
    }

    /// Read until stream `id` ends (frames of other streams are passed over), giving
    /// back the connection and stream windows the server's DATA used.
    async fn stream_end(&mut self, id: u32, wait: Duration) -> StreamEnd {
        let deadline = Instant::now() + wait;
        let (mut headers, mut data) = (0, Vec::new());
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let f = match self.next(left).await {
                Err(()) => panic!("stream {id} did not end within {wait:?}"),
                Ok(None) => {
                    return StreamEnd::Connection(Ended {
                        goaway: self.goaway,
                    });
                }
                Ok(Some(f)) => f,
            };
            if f.ty == DATA && !f.payload.is_empty() {
                let inc = (f.payload.len() as u32).to_be_bytes();
                let mut wu = frame(WINDOW_UPDATE, 0, 0, &inc);
                if f.flags & END_STREAM == 0 {
                    wu.extend(frame(WINDOW_UPDATE, 0, f.id, &inc));
                }
                let _ = self.send_lenient(&wu).await;
            }
            if f.id != id {
                continue;
            }
            match f.ty {
                HEADERS => headers += 1,
                DATA => data.extend_from_slice(&f.payload),
                RST_STREAM => {
                    return StreamEnd::Reset(rst_code(&f));
                }
                _ => {}
            }
            if matches!(f.ty, HEADERS | DATA) && f.flags & END_STREAM != 0 {
                return StreamEnd::Closed { headers, data };
            }
        }
    }

    /// A call on key `k` with value `v` on stream `id`: its `limit_remaining`.
    async fn remaining_after(&mut self, id: u32, v: &str) -> u32 {
        self.send(&call_frames(id, &one(v))).await;
        let r = self.rls_reply(id).await;
        assert_eq!(r.statuses.len(), 1, "stream {id}");
        r.statuses[0].limit_remaining
    }

    /// The reply on stream `id` to a `ShouldRateLimit` call: response HEADERS, the
    /// message, trailers.
    async fn rls_reply(&mut self, id: u32) -> RateLimitResponse {
        match self.stream_end(id, Duration::from_secs(3)).await {
            StreamEnd::Closed { headers, data } => {
                assert_eq!(headers, 2, "stream {id}: response headers and trailers");
                RateLimitResponse::decode(unframed(&data)).expect("the reply decodes")
            }
            other => panic!("stream {id}: {other:?}"),
        }
    }
}

fn settings_payload(settings: &[(u16, u32)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (id, value) in settings {
        b.extend(id.to_be_bytes());
        b.extend(value.to_be_bytes());
    }
    b
}

fn rst_code(f: &Frame) -> u32 {
    u32::from_be_bytes(f.payload[..4].try_into().unwrap())
}

// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn two_hundred_calls_in_flight_on_one_connection_are_each_decided_once() {
    served(10, |addr| async move {
        let send = h2_connect(addr, &h2::client::Builder::new()).await;
        let calls = (0..200).map(|_| h2_unary(&send, PATH, one("shared")));
        let answers = futures_util::future::join_all(calls).await;
        let codes: Vec<i32> = answers.iter().map(|a| a.rls().overall_code).collect();
        let ok = codes.iter().filter(|&&c| c == OK).count();
        let over = codes.iter().filter(|&&c| c == OVER).count();
        assert_eq!((ok, over), (LIMIT, 200 - LIMIT));
    })
    .await;
}

#[tokio::test]
async fn replies_wait_for_window_updates_and_bodies_in_one_byte_frames_are_read_whole() {
    served(15, |addr| async move {
        // A stream window of one byte: every byte of every reply waits for a
        // WINDOW_UPDATE (h2's client refuses DATA beyond its window). The connection
        // window is the protocol's initial 65,535, the least a client can set (it can
        // only be raised, by WINDOW_UPDATE).
        let mut tiny = h2::client::Builder::new();
        tiny.initial_window_size(1)
            .initial_connection_window_size(65_535);
        let send = h2_connect(addr, &tiny).await;
        let calls = (0..10).map(|i| h2_unary(&send, PATH, one(&format!("tiny{i}"))));
        for (i, a) in futures_util::future::join_all(calls)
            .await
            .iter()
            .enumerate()
        {
            let r = a.rls();
            assert_eq!(r.overall_code, OK, "call {i}");
            assert_eq!(r.statuses[0].limit_remaining, LIMIT as u32 - 1, "call {i}");
        }

        // Replies that together exceed the connection window of 65,535 bytes: the
        // server waits for the connection's WINDOW_UPDATE too.
        let mut conn = h2::client::Builder::new();
        conn.initial_window_size(65_535)
            .initial_connection_window_size(65_535);
        let send = h2_connect(addr, &conn).await;
        let calls = (0..4).map(|_| h2_unary(&send, PATH, many(1000)));
        let answers = futures_util::future::join_all(calls).await;
        let total: usize = answers.iter().map(|a| a.body.len()).sum();
        assert!(total > 65_535, "the replies total {total} bytes");
        for a in &answers {
            let r = a.rls();
            assert_eq!((r.overall_code, r.statuses.len()), (OK, 1000));
        }

        // A request body sent one byte per DATA frame.
        let send = h2_connect(addr, &h2::client::Builder::new()).await;
        for remaining in [LIMIT as u32 - 1, LIMIT as u32 - 2] {
            let mut s = send.clone().ready().await.unwrap();
            let (resp, mut stream) = s.send_request(grpc_request(PATH), false).unwrap();
            let body = one("bytewise");
            for (i, b) in body.iter().enumerate() {
                stream.reserve_capacity(1);
                let got = std::future::poll_fn(|cx| stream.poll_capacity(cx))
                    .await
                    .expect("the stream is open")
                    .unwrap();
                assert!(got >= 1);
                stream
                    .send_data(Bytes::copy_from_slice(&[*b]), i + 1 == body.len())
                    .unwrap();
            }
            let r = read_answer(resp).await.rls();
            assert_eq!(
                (r.overall_code, r.statuses[0].limit_remaining),
                (OK, remaining)
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_reply_above_the_max_frame_size_is_split_and_arrives_whole() {
    served(10, |addr| async move {
        let send = h2_connect(addr, &h2::client::Builder::new()).await;
        let a = h2_unary(&send, PATH, many(2000)).await;
        assert!(
            a.body.len() > 3 * DEFAULT_MAX_FRAME,
            "{} bytes",
            a.body.len()
        );
        let r = a.rls();
        assert_eq!((r.overall_code, r.statuses.len()), (OK, 2000));
        assert!(r.statuses.iter().all(|s| s.code == OK));

        // The same by hand: every frame read is checked against 16,384 bytes.
        let mut raw = Raw::open(addr).await;
        raw.send(&call_frames(1, &many(2000))).await;
        let r = raw.rls_reply(1).await;
        assert_eq!((r.overall_code, r.statuses.len()), (OK, 2000));
        assert!(
            r.statuses
                .iter()
                .all(|s| s.code == OK && s.current_limit.is_some())
        );
    })
    .await;
}

#[tokio::test]
async fn ping_settings_and_unknown_frames() {
    served(10, |addr| async move {
        let mut raw = Raw::open(addr).await;
        let payload = *b"floodgt!";
        raw.send(&frame(PING, 0, 0, &payload)).await;
        loop {
            let f = raw.next(Duration::from_secs(2)).await.unwrap().unwrap();
            // (a PING of the server's own is answered by `next` and passed over)
            if f.ty == PING && f.flags & ACK != 0 {
                assert_eq!(f.id, 0);
                assert_eq!(&f.payload[..], &payload);
                break;
            }
        }
        let settings = settings_payload(&[
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_MAX_CONCURRENT_STREAMS, 100),
        ]);
        raw.send(&frame(SETTINGS, 0, 0, &settings)).await;
        loop {
            let f = raw.next(Duration::from_secs(2)).await.unwrap().unwrap();
            if f.ty == SETTINGS {
                assert_eq!(f.flags & ACK, ACK, "the server acknowledges our SETTINGS");
                assert!(f.payload.is_empty(), "an acknowledgement is empty");
                break;
            }
        }
        // Frames of an unknown type, on the connection and on an idle stream, are
        // ignored (RFC 9113 §5.5).
        raw.send(&frame(0xfa, 0xff, 0, b"ignore me")).await;
        raw.send(&frame(0xfa, 0, 3, b"and me")).await;
        raw.send(&call_frames(1, &one("after-unknown"))).await;
        assert_eq!(raw.rls_reply(1).await.overall_code, OK);
        assert_eq!(
            raw.remaining_after(3, "after-unknown").await,
            LIMIT as u32 - 2
        );
    })
    .await;
}

/// A connection error: bytes the server must end the connection on, and the error code
/// RFC 9113 names for its GOAWAY.
struct ConnError {
    what: &'static str,
    /// Whether the preface and SETTINGS exchange comes first.
    open: bool,
    bytes: Vec<u8>,
    /// The code the RFC names.
    code: u32,
    /// The code the `h2` crate (0.4.20) sends instead, where it differs: PROTOCOL_ERROR
    /// for an undecodable header block, a SETTINGS frame whose length is not a multiple
    /// of 6 and an initial window above 2^31-1. The connection ends either way.
    h2_sends: Option<u32>,
}

impl ConnError {
    fn accepts(&self, code: u32) -> bool {
        code == self.code || Some(code) == self.h2_sends
    }

    /// Sends the bytes on a new connection; the connection must end within 2 s.
    async fn provoke(&self, addr: SocketAddr) -> Ended {
        let mut raw = if self.open {
            Raw::open(addr).await
        } else {
            Raw::tcp(addr).await
        };
        raw.send_lenient(&self.bytes).await;
        raw.ended(Duration::from_secs(2), self.what).await
    }
}

fn connection_errors() -> Vec<ConnError> {
    let call = hpack(&call_fields(PATH));
    let open_stream = |id| frame(HEADERS, END_HEADERS, id, &call);
    let mut lower = open_stream(5);
    lower.extend(open_stream(3));
    let mut oversize = vec![
        0x00,
        0x40,
        0x01,
        HEADERS,
        END_HEADERS | END_STREAM,
        0,
        0,
        0,
        1,
    ];
    oversize.extend(std::iter::repeat_n(0u8, DEFAULT_MAX_FRAME + 1));
    let mut push = 2u32.to_be_bytes().to_vec();
    push.extend(&call);
    let mut push_promise = open_stream(1);
    push_promise.extend(frame(PUSH_PROMISE, END_HEADERS, 1, &push));
    let big_window = settings_payload(&[(SETTINGS_INITIAL_WINDOW_SIZE, 0x8000_0000)]);
    vec![
        ConnError {
            what: "a bad client preface",
            open: false,
            bytes: b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n\0\0\0\x04\0\0\0\0\0".to_vec(),
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "an HTTP/1.1 request",
            open: false,
            bytes: b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".to_vec(),
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "a HEADERS frame of 16,385 bytes (FRAME_SIZE_ERROR)",
            open: true,
            bytes: oversize,
            code: FRAME_SIZE_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "HEADERS on an even stream id",
            open: true,
            bytes: open_stream(2),
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "HEADERS on a stream id lower than one already opened",
            open: true,
            bytes: lower,
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "CONTINUATION without HEADERS",
            open: true,
            bytes: frame(CONTINUATION, END_HEADERS, 1, &call),
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "CONTINUATION after a HEADERS with END_HEADERS",
            open: true,
            bytes: {
                let mut b = open_stream(1);
                b.extend(frame(CONTINUATION, END_HEADERS, 1, &hpack(&[("x", "y")])));
                b
            },
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        // RFC 9113 §4.3
        ConnError {
            what: "a header block with HPACK index 0",
            open: true,
            bytes: frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x80]),
            code: COMPRESSION_ERROR,
            h2_sends: Some(PROTOCOL_ERROR),
        },
        ConnError {
            what: "a header block with an index beyond the static and dynamic tables",
            open: true,
            bytes: frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x83, 0xbe]),
            code: COMPRESSION_ERROR,
            h2_sends: Some(PROTOCOL_ERROR),
        },
        ConnError {
            what: "PUSH_PROMISE from the client",
            open: true,
            bytes: push_promise,
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "SETTINGS of 5 bytes",
            open: true,
            bytes: frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 1]),
            code: FRAME_SIZE_ERROR,
            h2_sends: Some(PROTOCOL_ERROR),
        },
        ConnError {
            what: "SETTINGS_INITIAL_WINDOW_SIZE of 2^31",
            open: true,
            bytes: frame(SETTINGS, 0, 0, &big_window),
            code: FLOW_CONTROL_ERROR,
            h2_sends: Some(PROTOCOL_ERROR),
        },
        ConnError {
            what: "WINDOW_UPDATE of 0 on the connection",
            open: true,
            bytes: frame(WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes()),
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "WINDOW_UPDATE taking the connection's send window above 2^31-1",
            open: true,
            bytes: frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            code: FLOW_CONTROL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "DATA whose padding is as long as its payload",
            open: true,
            bytes: {
                let mut b = open_stream(1);
                b.extend(frame(DATA, PADDED | END_STREAM, 1, &[5, 0, 0, 0, 0]));
                b
            },
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "HEADERS whose padding is longer than its payload",
            open: true,
            bytes: {
                let mut p = vec![255];
                p.extend(&call);
                frame(HEADERS, PADDED | END_HEADERS, 1, &p)
            },
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
        ConnError {
            what: "DATA on an idle stream",
            open: true,
            bytes: frame(DATA, END_STREAM, 1, &one("idle")),
            code: PROTOCOL_ERROR,
            h2_sends: None,
        },
    ]
}

#[tokio::test]
async fn connection_errors_end_the_connection_and_the_server_serves_the_next() {
    served(15, |addr| async move {
        for case in connection_errors() {
            let ended = case.provoke(addr).await;
            if let Some(code) = ended.goaway {
                assert!(
                    case.accepts(code),
                    "{}: GOAWAY with code {code:#x}, expected {:#x}",
                    case.what,
                    case.code
                );
            }
            serves_a_new_connection(addr, case.what).await;
        }
    })
    .await;
}

#[tokio::test]
async fn an_endless_header_block_ends_the_connection() {
    served(8, |addr| async move {
        let start = Instant::now();
        let mut raw = Raw::open(addr).await;
        let fields: Vec<(&str, &str)> = call_fields(PATH);
        raw.send(&frame(HEADERS, 0, 1, &hpack(&fields))).await;
        // each CONTINUATION a run of whole fields, 16,380 bytes
        let chunk = hpack(&[("x-a", "aaaa")]).repeat(1638);
        let cont = frame(CONTINUATION, 0, 1, &chunk);
        let mut sent = 0usize;
        while sent < 2 << 20 {
            let write = tokio::time::timeout(Duration::from_secs(5), raw.s.write_all(&cont));
            match write.await {
                Ok(Ok(())) => sent += cont.len(),
                Ok(Err(_)) => break,
                Err(_) => panic!("the server stopped reading and kept the connection open"),
            }
        }
        let left = Duration::from_secs(5).saturating_sub(start.elapsed());
        let ended = raw.ended(left, "an endless header block").await;
        // any code will do (h2 says ENHANCE_YOUR_CALM): the RFC names none for this
        println!("{sent} bytes of CONTINUATION written before the connection ended ({ended:?})");
        serves_a_new_connection(addr, "an endless header block").await;
    })
    .await;
}

#[tokio::test]
async fn streams_beyond_max_concurrent_streams_are_refused_and_the_connection_serves_on() {
    served(10, |addr| async move {
        let mut raw = Raw::open(addr).await;
        let max = raw
            .setting(SETTINGS_MAX_CONCURRENT_STREAMS)
            .expect("the server sets SETTINGS_MAX_CONCURRENT_STREAMS");
        let max = max as usize;
        assert!(max < 10_000, "max concurrent streams {max}");
        const EXTRA: usize = 5;
        let block = hpack(&call_fields(PATH));
        let ids: Vec<u32> = (0..max + EXTRA).map(|i| 1 + 2 * i as u32).collect();
        let mut opens = Vec::new();
        for &id in &ids {
            opens.extend(frame(HEADERS, END_HEADERS, id, &block));
        }
        raw.send(&opens).await;
        let extras = &ids[max..];
        let mut refused = std::collections::BTreeSet::new();
        while !extras.iter().all(|id| refused.contains(id)) {
            let f = raw
                .next(Duration::from_secs(3))
                .await
                .unwrap_or_else(|()| panic!("refused only {refused:?} of {extras:?}"))
                .expect("the connection stays open");
            if f.ty == RST_STREAM {
                let code = rst_code(&f);
                assert!(
                    code == REFUSED_STREAM || code == PROTOCOL_ERROR,
                    "stream {} reset with {code:#x}",
                    f.id
                );
                refused.insert(f.id);
            }
            assert!(
                !(f.ty == HEADERS && extras.contains(&f.id)),
                "stream {} beyond the limit was answered",
                f.id
            );
        }
        // The open streams are served when their bodies come; a new one too.
        raw.send(&frame(DATA, END_STREAM, 1, &one("c1"))).await;
        assert_eq!(raw.rls_reply(1).await.overall_code, OK);
        let next = ids.last().unwrap() + 2;
        raw.send(&call_frames(next, &one("c2"))).await;
        assert_eq!(raw.rls_reply(next).await.overall_code, OK);
    })
    .await;
}

#[tokio::test]
async fn malformed_requests_are_stream_errors_and_the_server_serves_on() {
    served(10, |addr| async move {
        let mut fields = call_fields(PATH);
        let mut upper = fields.clone();
        upper.push(("X-Upper", "1"));
        let mut keep_alive = fields.clone();
        keep_alive.push(("connection", "keep-alive"));
        let mut te = fields.clone();
        te.retain(|f| f.0 != "te");
        te.push(("te", "gzip"));
        fields.retain(|f| f.0 != ":path");
        let no_path = fields;
        let cases = [
            ("an uppercase field name", upper),
            ("a connection: keep-alive field", keep_alive),
            ("te other than trailers", te),
            ("no :path", no_path),
        ];
        for (what, fields) in cases {
            let mut raw = Raw::open(addr).await;
            let mut bytes = frame(HEADERS, END_HEADERS, 1, &hpack(&fields));
            bytes.extend(frame(DATA, END_STREAM, 1, &one("malformed")));
            raw.send_lenient(&bytes).await;
            let end = raw.stream_end(1, Duration::from_secs(2)).await;
            println!("{what}: {end:?}");
            match end {
                StreamEnd::Reset(code) => {
                    assert_eq!(code, PROTOCOL_ERROR, "{what}");
                    raw.send(&call_frames(3, &one("well-formed"))).await;
                    assert_eq!(raw.rls_reply(3).await.overall_code, OK, "after {what}");
                }
                StreamEnd::Connection(ended) => {
                    assert!(
                        matches!(ended.goaway, None | Some(PROTOCOL_ERROR)),
                        "{what}: {ended:?}"
                    );
                }
                StreamEnd::Closed { headers, data } => {
                    panic!("{what}: answered ({headers} HEADERS, {} bytes)", data.len())
                }
            }
            serves_a_new_connection(addr, what).await;
        }
        // the counter saw only the well-formed calls
        let send = h2_connect(addr, &h2::client::Builder::new()).await;
        let r = h2_unary(&send, PATH, one("malformed")).await.rls();
        assert_eq!(r.statuses[0].limit_remaining, LIMIT as u32 - 1);
    })
    .await;
}

/// A request for tonic's routes whose `:authority` `http` refuses ("a b") is reset with
/// PROTOCOL_ERROR and holds no stream: more of them than the server's 200 concurrent
/// streams leave room for a call after them.
#[tokio::test]
async fn a_request_http_cannot_hold_is_reset_and_keeps_no_stream() {
    served(15, |addr| async move {
        let mut raw = Raw::open(addr).await;
        let mut fields = call_fields("/grpc.health.v1.Health/Check");
        fields.retain(|f| f.0 != ":authority");
        fields.insert(0, (":authority", "a b"));
        let block = hpack(&fields);
        for i in 0..250u32 {
            let id = 1 + 2 * i;
            raw.send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &block))
                .await;
            match raw.stream_end(id, Duration::from_secs(2)).await {
                StreamEnd::Reset(code) => assert_eq!(code, PROTOCOL_ERROR, "stream {id}"),
                other => panic!("stream {id}: {other:?}"),
            }
        }
        raw.send(&call_frames(501, &one("after"))).await;
        assert_eq!(raw.rls_reply(501).await.overall_code, OK);
    })
    .await;
}

#[tokio::test]
async fn a_stream_reset_by_the_client_gets_no_more_frames_and_others_are_served() {
    served(10, |addr| async move {
        let mut raw = Raw::open(addr).await;
        let block = hpack(&call_fields(PATH));
        let body = one("reset");
        let cancel = CANCEL.to_be_bytes();
        // stream 1: HEADERS, then reset; stream 3: HEADERS and half the body, then reset
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &block);
        bytes.extend(frame(RST_STREAM, 0, 1, &cancel));
        bytes.extend(frame(HEADERS, END_HEADERS, 3, &block));
        bytes.extend(frame(DATA, 0, 3, &body[..body.len() / 2]));
        bytes.extend(frame(RST_STREAM, 0, 3, &cancel));
        bytes.extend(call_frames(5, &one("other")));
        raw.send(&bytes).await;
        // read to the end of stream 5, then to a PING's answer: nothing came for 1 and 3
        let mut seen = Vec::new();
        let mut done5 = false;
        loop {
            let f = raw
                .next(Duration::from_secs(3))
                .await
                .expect("the server answers")
                .expect("the connection stays open");
            if f.id == 1 || f.id == 3 {
                seen.push((f.id, f.ty));
            }
            if f.id == 5 && f.ty == DATA {
                let r = RateLimitResponse::decode(unframed(&f.payload)).unwrap();
                assert_eq!(r.overall_code, OK);
            }
            if f.id == 5 && f.flags & END_STREAM != 0 && matches!(f.ty, HEADERS | DATA) {
                done5 = true;
                raw.send(&frame(PING, 0, 0, b"12345678")).await;
            }
            if f.ty == RST_STREAM && f.id == 5 {
                panic!("stream 5 reset with {:#x}", rst_code(&f));
            }
            if done5 && f.ty == PING && f.flags & ACK != 0 {
                break;
            }
        }
        assert!(
            !seen.iter().any(|&(_, ty)| ty == DATA || ty == HEADERS),
            "frames on reset streams: {seen:?}"
        );
        // the reset calls were never decided
        assert_eq!(raw.remaining_after(7, "reset").await, LIMIT as u32 - 1);
    })
    .await;
}

#[tokio::test]
async fn health_check_and_a_cancelled_watch_leave_the_connection_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
    served(10, |addr| async move {
        let send = h2_connect(addr, &h2::client::Builder::new()).await;
        let check = framed(
            &HealthCheckRequest {
                service: String::new(),
            }
            .encode_to_vec(),
        );
        let a = h2_unary(&send, HEALTH_CHECK, check.clone()).await;
        assert_eq!((a.status, a.grpc_status()), (200, Some("0")), "{a:?}");
        let r = HealthCheckResponse::decode(unframed(&a.body)).unwrap();
        assert_eq!(r.status, ServingStatus::Serving as i32);

        let mut s = send.clone().ready().await.unwrap();
        let (resp, mut stream) = s.send_request(grpc_request(HEALTH_WATCH), false).unwrap();
        stream.send_data(check, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut first = Vec::new();
        while first.len() < 5
            || first.len() < 5 + u32::from_be_bytes(first[1..5].try_into().unwrap()) as usize
        {
            let chunk = body.data().await.expect("a first message").unwrap();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            first.extend_from_slice(&chunk);
        }
        let r = HealthCheckResponse::decode(unframed(&first)).unwrap();
        assert_eq!(r.status, ServingStatus::Serving as i32);
        stream.send_reset(h2::Reason::CANCEL);
        drop(body);

        for i in 0..5 {
            let r = h2_unary(&send, PATH, one("after-watch")).await.rls();
            assert_eq!(r.statuses[0].limit_remaining, LIMIT as u32 - 1 - i);
        }
    })
    .await;
}

#[tokio::test]
async fn a_message_above_the_size_cap_gets_tonics_out_of_range() {
    served(10, |addr| async move {
        // as in tests/grpc.rs: above the 1 MiB cap, refused with OUT_OF_RANGE
        let huge = (0..3000)
            .map(|_| desc(&[("many", &"x".repeat(500))]))
            .collect();
        let body = rls(&req("h2", huge, 0));
        assert!(body.len() > 1 << 20);
        let send = h2_connect(addr, &h2::client::Builder::new()).await;
        let mut s = send.clone().ready().await.unwrap();
        let (resp, mut stream) = s.send_request(grpc_request(PATH), false).unwrap();
        stream.send_data(body, true).unwrap();
        let a = read_answer(resp).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.grpc_status(), Some("11"), "{a:?}");
        let r = h2_unary(&send, PATH, one("after-huge")).await.rls();
        assert_eq!(r.overall_code, OK);
    })
    .await;
}

#[tokio::test]
async fn curl_over_nghttp2_gets_a_reply() {
    let version = std::process::Command::new("curl").arg("-V").output();
    let version = version.expect("curl (Debian package curl; scripts/setup.sh installs it)");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version
            .lines()
            .any(|l| l.starts_with("Features:") && l.contains("HTTP2")),
        "curl without HTTP/2: {version}"
    );
    served(10, |addr| async move {
        let dir = tempfile::tempdir().unwrap();
        let request = dir.path().join("request");
        let out = dir.path().join("out");
        std::fs::write(&request, one("curl")).unwrap();
        let output = tokio::process::Command::new("curl")
            .arg("--http2-prior-knowledge")
            .args(["-s", "-S", "-m", "5", "-D", "-"])
            .arg("--data-binary")
            .arg(format!("@{}", request.display()))
            .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
            .arg(format!("http://{addr}{PATH}"))
            .arg("-o")
            .arg(&out)
            .output()
            .await
            .unwrap();
        let head = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "curl failed: {head} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(head.starts_with("HTTP/2 200"), "{head}");
        match head.lines().find_map(|l| l.strip_prefix("grpc-status:")) {
            Some(s) => assert_eq!(s.trim(), "0", "{head}"),
            // curl 7.88 prints no trailers, even with -v
            None => println!("curl printed no trailers; checked the body only: {head}"),
        }
        let body = std::fs::read(&out).unwrap();
        let r = RateLimitResponse::decode(unframed(&body)).expect("the reply decodes");
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OK, LIMIT as u32 - 1)
        );
    })
    .await;
}

/// Grants flow-control window as the server uses it up, checking it never sends more
/// than granted. A grant comes when the window is used up, or, for a server that sends
/// less than the window allows, after half a second with nothing received.
struct Granter {
    granted: u64,
    received: u64,
    step: u32,
    idle_grants: u32,
}

impl Granter {
    fn new(initial: u64, step: u32) -> Granter {
        Granter {
            granted: initial,
            received: 0,
            step,
            idle_grants: 0,
        }
    }

    fn used_up(&self) -> bool {
        self.received == self.granted
    }

    fn grant(&mut self) -> [u8; 4] {
        self.granted += u64::from(self.step);
        self.step.to_be_bytes()
    }

    fn receive(&mut self, len: usize, what: &str) {
        self.received += len as u64;
        assert!(
            self.received <= self.granted,
            "{what}: {} bytes of DATA with {} granted",
            self.received,
            self.granted
        );
    }
}

#[tokio::test]
async fn stream_windows_of_zero_hold_the_reply_until_granted_or_raised_by_settings() {
    served(10, |addr| async move {
        let mut raw = Raw::open_with(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)]).await;
        raw.send(&call_frames(1, &one("zero"))).await;
        // 7 bytes at a time by WINDOW_UPDATE, three times; then every stream's window
        // raised by SETTINGS_INITIAL_WINDOW_SIZE (RFC 9113 §6.9.2)
        let mut window = Granter::new(0, 7);
        let (mut updates, mut raised, mut headers) = (0, false, 0);
        let mut data = Vec::new();
        loop {
            if window.used_up() && !raised {
                if updates < 3 {
                    let inc = window.grant();
                    raw.send(&frame(WINDOW_UPDATE, 0, 1, &inc)).await;
                    updates += 1;
                } else {
                    window.step = 65_535;
                    window.grant();
                    let s = settings_payload(&[(SETTINGS_INITIAL_WINDOW_SIZE, 65_535)]);
                    raw.send(&frame(SETTINGS, 0, 0, &s)).await;
                    raised = true;
                }
            }
            let f = match raw.next(Duration::from_millis(500)).await {
                Err(()) if !raised => {
                    window.idle_grants += 1;
                    assert!(window.idle_grants < 10, "the reply does not come");
                    let inc = window.grant();
                    raw.send(&frame(WINDOW_UPDATE, 0, 1, &inc)).await;
                    continue;
                }
                Err(()) => panic!("the reply stalled with the window raised"),
                Ok(f) => f.expect("the connection stays open"),
            };
            if f.id != 1 {
                continue;
            }
            match f.ty {
                DATA => {
                    window.receive(f.payload.len(), "stream 1");
                    data.extend_from_slice(&f.payload);
                }
                HEADERS => headers += 1,
                RST_STREAM => panic!("stream 1 reset with {:#x}", rst_code(&f)),
                _ => {}
            }
            if matches!(f.ty, HEADERS | DATA) && f.flags & END_STREAM != 0 {
                break;
            }
        }
        assert_eq!(headers, 2);
        assert!(updates == 3 && raised, "the reply waited for the window");
        let r = RateLimitResponse::decode(unframed(&data)).expect("the reply decodes");
        assert_eq!(r.overall_code, OK);
        // a second call on the raised window is answered at once
        assert_eq!(raw.remaining_after(3, "zero").await, LIMIT as u32 - 2);
    })
    .await;
}

#[tokio::test]
async fn replies_wait_for_the_connection_window() {
    served(10, |addr| async move {
        // stream windows of 1 MiB: the connection window of 65,535 is what binds
        let mut raw = Raw::open_with(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)]).await;
        let body = many(1000);
        let ids = [1u32, 3, 5];
        for id in ids {
            raw.send(&call_frames(id, &body)).await;
        }
        let mut window = Granter::new(65_535, 10_000);
        let mut data = std::collections::BTreeMap::<u32, Vec<u8>>::new();
        let mut ended = std::collections::BTreeSet::new();
        while ended.len() < ids.len() {
            if window.used_up() {
                let inc = window.grant();
                raw.send(&frame(WINDOW_UPDATE, 0, 0, &inc)).await;
            }
            let f = match raw.next(Duration::from_millis(500)).await {
                Err(()) => {
                    window.idle_grants += 1;
                    assert!(window.idle_grants < 20, "the replies do not come");
                    let inc = window.grant();
                    raw.send(&frame(WINDOW_UPDATE, 0, 0, &inc)).await;
                    continue;
                }
                Ok(f) => f.expect("the connection stays open"),
            };
            match f.ty {
                DATA => {
                    window.receive(f.payload.len(), "the connection");
                    data.entry(f.id).or_default().extend_from_slice(&f.payload);
                }
                RST_STREAM => panic!("stream {} reset with {:#x}", f.id, rst_code(&f)),
                _ => {}
            }
            if matches!(f.ty, HEADERS | DATA) && f.flags & END_STREAM != 0 {
                ended.insert(f.id);
            }
        }
        assert!(
            window.granted > 65_535,
            "the replies needed more than one window"
        );
        for id in ids {
            let r = RateLimitResponse::decode(unframed(&data[&id])).expect("the reply decodes");
            assert_eq!(
                (r.overall_code, r.statuses.len()),
                (OK, 1000),
                "stream {id}"
            );
        }
        println!("{} idle grants", window.idle_grants);
    })
    .await;
}

#[tokio::test]
async fn padding_priority_and_a_header_block_split_across_continuation_are_read() {
    served(10, |addr| async move {
        let mut raw = Raw::open(addr).await;
        let block = hpack(&call_fields(PATH));
        let body = one("padded");
        let half = block.len() / 2;
        // PRIORITY for an idle stream (allowed, RFC 9113 §5.1), then HEADERS padded and
        // with priority fields, its block split mid-field into a CONTINUATION, then two
        // padded DATA frames (one with zero padding)
        let mut bytes = frame(PRIORITY, 0, 1, &[0, 0, 0, 0, 15]);
        let mut h = vec![3, 0, 0, 0, 0, 200];
        h.extend(&block[..half]);
        h.extend([0, 0, 0]);
        bytes.extend(frame(HEADERS, PADDED | PRIORITY_FLAG, 1, &h));
        bytes.extend(frame(CONTINUATION, END_HEADERS, 1, &block[half..]));
        let mut d = vec![200];
        d.extend(&body[..6]);
        d.extend([0u8; 200]);
        bytes.extend(frame(DATA, PADDED, 1, &d));
        let mut d = vec![0];
        d.extend(&body[6..]);
        bytes.extend(frame(DATA, PADDED | END_STREAM, 1, &d));
        // a PRIORITY frame on an open stream
        bytes.extend(frame(PRIORITY, 0, 1, &[0, 0, 0, 0, 99]));
        raw.send(&bytes).await;
        let r = raw.rls_reply(1).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OK, LIMIT as u32 - 1)
        );
        // the HPACK decoder's state after the split block is right: the next call decodes
        raw.send(&call_frames(3, &body)).await;
        assert_eq!(
            raw.rls_reply(3).await.statuses[0].limit_remaining,
            LIMIT as u32 - 2
        );
    })
    .await;
}

#[tokio::test]
async fn data_after_end_stream_is_a_stream_closed_error() {
    served(10, |addr| async move {
        let mut raw = Raw::open(addr).await;
        let mut bytes = call_frames(1, &one("after-end"));
        bytes.extend(frame(DATA, END_STREAM, 1, &one("after-end")));
        raw.send(&bytes).await;
        // the call may be answered first; then stream 1 is reset with STREAM_CLOSED
        // (half-closed or closed, RFC 9113 §5.1) or the connection ends
        let mut answered = false;
        let outcome = loop {
            let f = match raw.next(Duration::from_secs(2)).await {
                Err(()) => panic!("neither RST_STREAM nor a connection error"),
                Ok(None) => break Err(raw.goaway),
                Ok(Some(f)) => f,
            };
            if f.id == 1 && f.ty == RST_STREAM {
                break Ok(rst_code(&f));
            }
            if f.id == 1 && f.ty == HEADERS && f.flags & END_STREAM != 0 {
                answered = true;
            }
        };
        println!("answered: {answered}, outcome: {outcome:?}");
        match outcome {
            Ok(code) => {
                assert_eq!(code, STREAM_CLOSED);
                raw.send(&call_frames(3, &one("after-end"))).await;
                let r = raw.rls_reply(3).await;
                assert_eq!(r.overall_code, OK);
            }
            Err(goaway) => assert!(
                matches!(goaway, None | Some(STREAM_CLOSED) | Some(PROTOCOL_ERROR)),
                "{goaway:?}"
            ),
        }
        serves_a_new_connection(addr, "DATA after END_STREAM").await;
    })
    .await;
}

#[tokio::test]
async fn no_dynamic_table_at_the_client_and_unknown_methods() {
    served(10, |addr| async move {
        // SETTINGS_HEADER_TABLE_SIZE 0: the server's encoder must not index into a
        // dynamic table the client does not keep (RFC 7541 §4.2)
        let mut b = h2::client::Builder::new();
        b.header_table_size(0);
        let send = h2_connect(addr, &b).await;
        for i in 0..5 {
            let r = h2_unary(&send, PATH, one("no-table")).await.rls();
            assert_eq!(r.statuses[0].limit_remaining, LIMIT as u32 - 1 - i);
        }
        // a method the server does not have: UNIMPLEMENTED (12), as gRPC says
        let a = h2_unary(
            &send,
            "/envoy.service.ratelimit.v3.RateLimitService/Nope",
            one("x"),
        )
        .await;
        assert_eq!((a.status, a.grpc_status()), (200, Some("12")), "{a:?}");
        let a = h2_unary(&send, "/no.such.Service/Call", one("x")).await;
        assert_eq!((a.status, a.grpc_status()), (200, Some("12")), "{a:?}");
        let r = h2_unary(&send, PATH, one("no-table")).await.rls();
        assert_eq!(r.statuses[0].limit_remaining, LIMIT as u32 - 6);
    })
    .await;
}

#[tokio::test]
async fn a_graceful_stop_sends_goaway_and_finishes_the_call_in_flight() {
    let srv = start(RULES).await;
    let addr = srv.running.grpc.unwrap();
    let mut raw = Raw::open(addr).await;
    // stream 1 answered; stream 3 open, its body not sent yet; the PING's answer
    // shows the server has read both
    raw.send(&call_frames(1, &one("stop"))).await;
    bounded(5, raw.rls_reply(1)).await;
    let block = hpack(&call_fields(PATH));
    raw.send(&frame(HEADERS, END_HEADERS, 3, &block)).await;
    raw.send(&frame(PING, 0, 0, b"stop-now")).await;
    bounded(5, async {
        loop {
            let f = raw.next(Duration::from_secs(2)).await.unwrap().unwrap();
            if f.ty == PING && f.flags & ACK != 0 {
                break;
            }
        }
    })
    .await;
    let started = Instant::now();
    let stop = tokio::spawn(srv.stop());
    bounded(8, async {
        // GOAWAY with NO_ERROR, and a last stream id that keeps stream 3
        let last = loop {
            let f = raw
                .next(Duration::from_secs(3))
                .await
                .expect("a GOAWAY within 3 s")
                .expect("the connection stays open while stream 3 is unfinished");
            if f.ty == GOAWAY {
                assert_eq!(raw.goaway, Some(0), "a graceful GOAWAY has NO_ERROR");
                break u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff;
            }
        };
        assert!(last >= 3, "GOAWAY's last stream id {last} drops stream 3");
        raw.send(&frame(DATA, END_STREAM, 3, &one("stop"))).await;
        let r = raw.rls_reply(3).await;
        assert_eq!(r.statuses[0].limit_remaining, LIMIT as u32 - 2);
        let ended = raw.ended(Duration::from_secs(3), "a stopped server").await;
        assert!(matches!(ended.goaway, Some(0)), "{ended:?}");
        stop.await.unwrap();
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the stop waited {:?}, not for the call in flight only",
        started.elapsed()
    );
}

/// Random frames on 200 connections (seeded): any type from 0 to 10, random flags and
/// stream ids 0 to 11, payloads that are a call's header block, a call's body or up to 40
/// random bytes. The server never panics (a panic hook counts panics in any of its
/// tasks), every frame it sends is within the default frame size and every GOAWAY well
/// formed (`Raw::next` checks both), and it serves a call on a new connection after.
#[tokio::test]
async fn random_frames_never_panic_the_server() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let panics = Arc::new(AtomicUsize::new(0));
    let counted = panics.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counted.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    served(60, |addr| async move {
        let mut rng = fastrand::Rng::with_seed(0x5eed_f100d);
        let block = hpack(&call_fields(PATH));
        let body = one("random");
        for _ in 0..200 {
            let mut raw = Raw::open(addr).await;
            let mut bytes = Vec::new();
            for _ in 0..rng.usize(1..12) {
                let ty = rng.u8(0..11);
                let flags = rng.u8(..)
                    & [END_STREAM, END_HEADERS, PADDED, PRIORITY_FLAG, 0xff][rng.usize(0..5)];
                let id = rng.u32(0..12);
                let payload: Vec<u8> = match rng.u8(0..4) {
                    0 => block.clone(),
                    1 => body.to_vec(),
                    _ => (0..rng.usize(0..40)).map(|_| rng.u8(..)).collect(),
                };
                bytes.extend(frame(ty, flags, id, &payload));
            }
            raw.send_lenient(&bytes).await;
            // read what the server answers until it is quiet for 20 ms or closes
            while let Ok(Some(_)) = raw.next(Duration::from_millis(20)).await {}
        }
        serves_a_new_connection(addr, "random frames").await;
    })
    .await;
    assert_eq!(panics.load(Ordering::SeqCst), 0, "the server panicked");
}

const ENHANCE_YOUR_CALM: u32 = 0xb;
const NO_ERROR: u32 = 0x0;

/// A call on a fresh connection, timed from the connect to the reply.
async fn timed_call(addr: SocketAddr) -> Duration {
    let t = Instant::now();
    serves_a_new_connection(addr, "a rapid reset on another connection").await;
    t.elapsed()
}

#[tokio::test]
async fn a_rapid_reset_flood_ends_its_connection_and_others_are_served() {
    served(30, |addr| async move {
        // CVE-2023-44487: streams opened and reset at once, thousands of them, in
        // batches that reach the server as one read each
        let block = hpack(&call_fields(PATH));
        let cancel = CANCEL.to_be_bytes();
        let mut raw = Raw::open(addr).await;
        let mut sent = 0u32;
        'flood: for batch in 0..50u32 {
            let mut bytes = Vec::new();
            for i in 0..100u32 {
                let id = 1 + 2 * (batch * 100 + i);
                bytes.extend(frame(HEADERS, END_HEADERS, id, &block));
                bytes.extend(frame(RST_STREAM, 0, id, &cancel));
            }
            if !raw.send_lenient(&bytes).await {
                break 'flood;
            }
            sent += 100;
        }
        let ended = raw.ended(Duration::from_secs(5), "a rapid reset flood").await;
        assert!(
            matches!(ended.goaway, Some(ENHANCE_YOUR_CALM)),
            "the flooding connection ends with GOAWAY(ENHANCE_YOUR_CALM) after {sent} streams: {ended:?}"
        );
        // a second client is served at once (best of three, from connect to reply)
        let mut best = Duration::MAX;
        for _ in 0..3 {
            best = best.min(timed_call(addr).await);
        }
        assert!(best < Duration::from_millis(100), "a call after the flood took {best:?}");
    })
    .await;
}

#[tokio::test]
async fn a_flood_of_calls_reset_after_they_were_taken_ends_its_connection() {
    served(30, |addr| async move {
        // each stream's HEADERS is taken before its reset arrives: the server's own
        // count of client resets ends the connection
        let block = hpack(&call_fields(PATH));
        let cancel = CANCEL.to_be_bytes();
        let mut raw = Raw::open(addr).await;
        let mut ended = None;
        for i in 0..3000u32 {
            let id = 1 + 2 * i;
            if !raw
                .send_lenient(&frame(HEADERS, END_HEADERS, id, &block))
                .await
            {
                break;
            }
            // wait until the server has taken the stream (a PING's answer follows it)
            let _ = raw.send_lenient(&frame(PING, 0, 0, &[0; 8])).await;
            loop {
                match raw.next(Duration::from_secs(2)).await {
                    Ok(Some(f)) if f.ty == PING && f.flags & ACK != 0 => break,
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        ended = Some(raw.goaway);
                        break;
                    }
                    Err(()) => panic!("no answer to a PING after stream {id}"),
                }
            }
            if ended.is_some() || !raw.send_lenient(&frame(RST_STREAM, 0, id, &cancel)).await {
                break;
            }
        }
        let goaway = match ended {
            Some(g) => g,
            None => {
                raw.ended(Duration::from_secs(5), "resets of taken streams")
                    .await
                    .goaway
            }
        };
        assert_eq!(goaway, Some(ENHANCE_YOUR_CALM));
        serves_a_new_connection(addr, "resets of taken streams").await;
    })
    .await;
}

/// [`RULES`] with short connection timeouts.
fn rules_with_short_timeouts() -> String {
    format!(
        "{RULES}\nconnections: {{preface_timeout: 300ms, idle_timeout: 300ms, request_timeout: 300ms}}\n"
    )
}

#[tokio::test]
async fn idle_silent_and_half_sent_connections_are_closed_and_counted_out() {
    let srv = start(&rules_with_short_timeouts()).await;
    let addr = srv.running.grpc.unwrap();
    bounded(20, async {
        // no preface: closed
        let mut silent = Raw::tcp(addr).await;
        let t = Instant::now();
        let ended = silent
            .ended(Duration::from_secs(3), "a connection that sends nothing")
            .await;
        assert!(ended.goaway.is_none(), "{ended:?}");
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "closed after the preface timeout"
        );
        // half a preface: closed
        let mut half = Raw::tcp(addr).await;
        half.send(&PREFACE[..10]).await;
        half.ended(Duration::from_secs(3), "half a preface").await;
        // open and idle: GOAWAY(NO_ERROR), then closed
        let mut idle = Raw::open(addr).await;
        let t = Instant::now();
        let ended = idle
            .ended(Duration::from_secs(3), "an idle connection")
            .await;
        assert_eq!(ended.goaway, Some(NO_ERROR));
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "idle for the idle timeout first"
        );
        // a call whose request never ends: its stream is reset with CANCEL, then the
        // connection is idle and closed
        let mut half_call = Raw::open(addr).await;
        half_call
            .send(&frame(HEADERS, END_HEADERS, 1, &hpack(&call_fields(PATH))))
            .await;
        match half_call.stream_end(1, Duration::from_secs(3)).await {
            StreamEnd::Reset(code) => assert_eq!(code, CANCEL),
            other => panic!("a call never sent whole: {other:?}"),
        }
        let ended = half_call
            .ended(Duration::from_secs(3), "after the reset call")
            .await;
        assert_eq!(ended.goaway, Some(NO_ERROR));
        // a connection in use is not idle: calls 200 ms apart for a second are served
        let send = h2_connect(addr, &h2::client::Builder::new()).await;
        for _ in 0..5 {
            let r = h2_unary(
                &send,
                PATH,
                rls(&req("h2", vec![desc(&[("many", "x")])], 1)),
            )
            .await;
            assert_eq!(r.rls().overall_code, OK);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    srv.stop().await;
}
