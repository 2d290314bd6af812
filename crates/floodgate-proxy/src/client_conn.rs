//! One client connection of the proxy.
//!
//! HTTP/1.x requests without a body (most GETs, HEADs and DELETEs) are read and answered
//! here: the head parsed with `httparse` into a request whose field values share the
//! read buffer, the response head and the body bytes already at hand written with one
//! `write`. Pipelined requests are answered in order.
//!
//! The first request this path does not take hands the whole connection, with the bytes
//! already read, to hyper's server for the rest of its life: a request with a body (or
//! `Transfer-Encoding`), `Expect`, `Upgrade`, `CONNECT`, HTTP/2's preface, a head over
//! 16 KiB or 64 fields, anything malformed. So those keep hyper's behaviour (its 400s,
//! 431s, `100 Continue`, h2c) exactly. A hand-over happens between requests only, never
//! with a response in flight.
//!
//! The response: `Content-Length` from the body's exact size, else chunked (HTTP/1.1
//! clients) or delimited by close (HTTP/1.0); no body after HEAD, 1xx, 204, 304; a
//! `Date` when the response has none; `Connection: close` when the connection ends with
//! it. A body that fails or ends short of its length ends the connection.
//!
//! Head timeout: a connection that has waited `head_timeout` for a complete head since
//! its last response (or since it was accepted) is closed; one timer per connection,
//! looked at only when it fires. Shutdown: an idle connection (or one mid-head) closes at
//! once, a request in flight is answered first, with `Connection: close`.

use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use floodgate_http::key::PeerAddr;
use http::header::{
    CONNECTION, CONTENT_LENGTH, DATE, EXPECT, HeaderName, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower_service::Service;

use crate::body::RequestBody;
use crate::client_io::{ClientIo, ConnSlot};
use crate::head_timeout::LazyTimer;
use crate::hyper_conn::{Served, serve_hyper, stopped};
use crate::upstream::direct::{encode_field, parsed_value};

/// Most fields a head read here may have; more: hyper's (which allows 100).
const MAX_FIELDS: usize = 64;
/// Largest head read here; larger: hyper's (which answers 431 past its own limit).
const MAX_HEAD: usize = 16 * 1024;
/// Read buffer, and the room kept free in it before each read.
const READ_BUF: usize = 8 * 1024;
const READ_ROOM: usize = 1024;
/// Body bytes gathered before a write; frames at least this long are written as they are.
const WRITE_AT: usize = 16 * 1024;

/// Serve `stream` until the client closes it, it times out waiting for a head, shutdown
/// finds it idle, or it is handed to hyper (then until hyper is done with it).
pub(crate) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    served: Arc<Served>,
    shutdown: watch::Receiver<bool>,
    slot: ConnSlot,
) {
    // the connection's place under the caps, given back when it ends
    let _slot = slot;
    let mut conn = Conn {
        stream: ClientIo::new(stream, served.send_timeout, served.metrics.clone()),
        buf: BytesMut::with_capacity(READ_BUF),
        out: Vec::with_capacity(READ_BUF),
        shutdown: shutdown.clone(),
    };
    let mut svc = served.svc.clone();
    let timeout = served.head_timeout;
    // resolves when shutdown starts (or the proxy is gone); polled only to register
    let stop = pin!(stopped(shutdown));
    let sleep = pin!(tokio::time::sleep(timeout));
    let mut waiting = Waiting {
        timer: LazyTimer::new(sleep),
        stop,
        stop_armed: false,
        idle_since: Instant::now(),
        timeout,
    };
    let mut head = Head::default();
    loop {
        match parse(&conn.buf, &mut head) {
            Parsed::Complete => {}
            Parsed::Partial if conn.buf.len() <= MAX_HEAD => match waiting.read(&mut conn).await {
                Wait::Read => continue,
                Wait::Closed => return,
                Wait::TimedOut => {
                    tracing::debug!(%peer, ?timeout, "no request head within the head timeout: connection closed");
                    return;
                }
                Wait::Stop => return,
            },
            Parsed::Partial | Parsed::NotHere => {
                return hand_over(conn, peer, &served).await;
            }
        };
        let Some((mut req, mut meta)) = head.take_request(&mut conn.buf, peer) else {
            return hand_over(conn, peer, &served).await;
        };
        let start = std::time::Instant::now();
        let resp = match served.admission.admit(&mut req) {
            Err(refused) => {
                // the connection ends with a refusal
                meta.keep_alive = false;
                refused.response()
            }
            Ok(()) => match svc.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            },
        };
        // one clock reading for the metric, the Date field and the idle clock
        let answered = std::time::Instant::now();
        served
            .metrics
            .proxy_seconds
            .observe(answered.saturating_duration_since(start));
        match conn.respond(resp, &meta, answered).await {
            Ok(true) => waiting.idle_since = Instant::from_std(answered),
            Ok(false) => {
                let _ = conn.stream.shutdown().await;
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, %peer, "client connection failed");
                return;
            }
        }
    }
}

/// Hand the connection, with what has been read of it, to hyper.
async fn hand_over(conn: Conn, peer: SocketAddr, served: &Served) {
    let io = Rewind {
        prefix: conn.buf.freeze(),
        io: conn.stream,
    };
    serve_hyper(served, io, peer, conn.shutdown).await;
}

struct Conn {
    stream: ClientIo,
    /// Bytes read and not yet taken by a request.
    buf: BytesMut,
    /// The response being written.
    out: Vec<u8>,
    shutdown: watch::Receiver<bool>,
}

/// What the connection waits for between requests: more bytes, its head timeout, or
/// shutdown.
struct Waiting<'a, S> {
    timer: LazyTimer<'a>,
    stop: Pin<&'a mut S>,
    stop_armed: bool,
    /// When the last response was written (or the connection accepted).
    idle_since: Instant,
    timeout: Duration,
}

enum Wait {
    Read,
    Closed,
    TimedOut,
    Stop,
}

impl<S: Future<Output = ()>> Waiting<'_, S> {
    async fn read(&mut self, conn: &mut Conn) -> Wait {
        if conn.buf.capacity() - conn.buf.len() < READ_ROOM {
            conn.buf.reserve(READ_BUF);
        }
        std::future::poll_fn(|cx| {
            // the cheap check first: a wake-up by shutdown finds it here
            if conn.shutdown.has_changed().unwrap_or(true) {
                return Poll::Ready(Wait::Stop);
            }
            match tokio_util::io::poll_read_buf(Pin::new(&mut conn.stream), cx, &mut conn.buf) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Wait::Closed),
                Poll::Ready(Ok(_)) => return Poll::Ready(Wait::Read),
                Poll::Pending => {}
            }
            if !self.stop_armed {
                if self.stop.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Wait::Stop);
                }
                self.stop_armed = true;
            }
            let deadline = self.idle_since + self.timeout;
            self.timer
                .poll_due(cx, || Some(deadline), self.timeout)
                .map(|()| Wait::TimedOut)
        })
        .await
    }
}

enum Parsed {
    /// In the connection's [`Head`].
    Complete,
    Partial,
    /// Not for this path: hyper's.
    NotHere,
}

/// What the proxy's own HTTP/1 path does with a request head.
#[derive(Debug)]
pub enum RequestHead {
    /// Taken on the proxy's own path: the request's head, and the head's length in bytes
    /// (what follows it is the next request).
    Taken(Box<http::request::Parts>, usize),
    /// More bytes are needed.
    Partial,
    /// Left to hyper's server, with the connection (a body, an upgrade, HTTP/2, a head
    /// too large or malformed, a target `http::Uri` does not take...).
    Hyper,
}

/// What the proxy's own path does with the bytes at the front of `buf`, as
/// [`crate::wire::parse_request_head`] reports it.
pub(crate) fn own_path_head(buf: &[u8]) -> RequestHead {
    let mut head = Head::default();
    match parse(buf, &mut head) {
        Parsed::Partial if buf.len() <= MAX_HEAD => RequestHead::Partial,
        Parsed::Partial | Parsed::NotHere => RequestHead::Hyper,
        Parsed::Complete => {
            let len = head.len;
            let mut b = BytesMut::from(buf);
            let peer = SocketAddr::from(([0, 0, 0, 0], 0));
            match head.take_request(&mut b, peer) {
                Some((req, _)) => RequestHead::Taken(Box::new(req.map(|_| ()).into_parts().0), len),
                None => RequestHead::Hyper,
            }
        }
    }
}

/// A request head found in the read buffer, as positions in it (the buffer is borrowed
/// while parsing; the values are taken from it after). One per connection, reused.
#[derive(Default)]
struct Head {
    len: usize,
    method: Method,
    target: (usize, usize),
    version: Version,
    /// Name, and the value's start and length.
    fields: Vec<(HeaderName, usize, usize)>,
    keep_alive: bool,
}

/// What the response needs to know about its request.
struct Meta {
    head: bool,
    version: Version,
    keep_alive: bool,
}

/// Parse a request head at the start of `buf` into `head`.
fn parse(buf: &[u8], head: &mut Head) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    // uninitialized: zeroing room for 64 fields costs more than parsing a short head
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut r = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut r,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::NotHere,
    };
    let (Some(method), Some(path), Some(v)) = (r.method, r.path, r.version) else {
        return Parsed::NotHere;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::NotHere;
    };
    if method == Method::CONNECT {
        return Parsed::NotHere;
    }
    let version = if v == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let base = buf.as_ptr() as usize;
    let mut keep_alive = version == Version::HTTP_11;
    head.fields.clear();
    let mut lengths = 0;
    for f in r.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(f.name.as_bytes()) else {
            return Parsed::NotHere;
        };
        if name == CONTENT_LENGTH {
            lengths += 1;
            // a body, a length to check, or repeated lengths (hyper's server folds equal
            // ones into one; found by the request_head fuzz target): hyper's
            if f.value.trim_ascii() != b"0" || lengths > 1 {
                return Parsed::NotHere;
            }
        } else if name == TRANSFER_ENCODING || name == EXPECT || name == UPGRADE {
            return Parsed::NotHere;
        } else if name == CONNECTION {
            for token in f.value.split(|&b| b == b',') {
                let t = token.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if t.eq_ignore_ascii_case(b"keep-alive") && version == Version::HTTP_10 {
                    keep_alive = true;
                }
            }
        }
        head.fields
            .push((name, f.value.as_ptr() as usize - base, f.value.len()));
    }
    head.len = len;
    head.method = method;
    head.target = (path.as_ptr() as usize - base, path.len());
    head.version = version;
    head.keep_alive = keep_alive;
    Parsed::Complete
}

impl Head {
    /// The request, its head taken from `buf`; `None` (and `buf` as it was) when the
    /// target is not one `http` accepts.
    fn take_request(
        &mut self,
        buf: &mut BytesMut,
        peer: SocketAddr,
    ) -> Option<(Request<RequestBody>, Meta)> {
        let (t_at, t_len) = self.target;
        let head = buf.split_to(self.len).freeze();
        let uri = match Uri::from_maybe_shared(head.slice(t_at..t_at + t_len)) {
            Ok(u) => u,
            Err(_) => {
                // put the head back in front of what follows it
                let mut whole = BytesMut::with_capacity(head.len() + buf.len());
                whole.extend_from_slice(&head);
                whole.extend_from_slice(buf);
                *buf = whole;
                return None;
            }
        };
        // room for the RateLimit fields the limiter adds, so the map does not grow then
        let mut headers = HeaderMap::with_capacity(self.fields.len() + 6);
        for (name, at, len) in self.fields.drain(..) {
            headers.append(name, parsed_value(head.slice(at..at + len)));
        }
        let meta = Meta {
            head: self.method == Method::HEAD,
            version: self.version,
            keep_alive: self.keep_alive,
        };
        let mut req = Request::new(RequestBody::Empty);
        *req.method_mut() = std::mem::take(&mut self.method);
        *req.uri_mut() = uri;
        *req.version_mut() = self.version;
        *req.headers_mut() = headers;
        req.extensions_mut().insert(PeerAddr(peer));
        Some((req, meta))
    }
}

/// How a response's body is delimited on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    Close,
}

impl Conn {
    /// Write `resp`; `Ok(true)` when the connection goes on.
    async fn respond<B>(
        &mut self,
        resp: Response<B>,
        meta: &Meta,
        now: std::time::Instant,
    ) -> io::Result<bool>
    where
        B: Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = resp.into_parts();
        let status = parts.status;
        let exact = body.size_hint().exact();
        let bodyless = meta.head
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let framing = if bodyless {
            Framing::None
        } else if let Some(n) = exact {
            Framing::Length(n)
        } else if meta.version == Version::HTTP_11 {
            Framing::Chunked
        } else {
            Framing::Close
        };
        let keep_alive = meta.keep_alive
            && framing != Framing::Close
            && !self.shutdown.has_changed().unwrap_or(true);

        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        let (mut has_length, mut has_date) = (false, false);
        for (name, value) in &parts.headers {
            // framing and connection fields are this connection's own
            if name == CONTENT_LENGTH {
                has_length = true;
                if !bodyless {
                    continue;
                }
            } else if name == CONNECTION || name == TRANSFER_ENCODING {
                continue;
            } else if name == DATE {
                has_date = true;
            }
            encode_field(out, name.as_str().as_bytes(), value.as_bytes());
        }
        let mut digits = itoa::Buffer::new();
        match framing {
            Framing::Length(n) => encode_field(out, b"content-length", digits.format(n).as_bytes()),
            Framing::Chunked => encode_field(out, b"transfer-encoding", b"chunked"),
            // a HEAD's length is the one a GET would have had
            Framing::None if meta.head && !has_length => {
                if let Some(n) = exact {
                    encode_field(out, b"content-length", digits.format(n).as_bytes());
                }
            }
            Framing::None | Framing::Close => {}
        }
        if !keep_alive {
            encode_field(out, b"connection", b"close");
        } else if meta.version == Version::HTTP_10 {
            encode_field(out, b"connection", b"keep-alive");
        }
        if !has_date {
            put_date(out, now);
        }
        out.extend_from_slice(b"\r\n");
        drop(parts);

        if framing == Framing::None {
            drop(body);
            self.stream.write_all(&self.out).await?;
            return Ok(keep_alive);
        }
        let complete = self.write_body(body, framing).await?;
        Ok(keep_alive && complete)
    }

    /// Write the head in `out`, then `body` framed by `framing`; `Ok(false)` when the body
    /// failed or ended short of its length (the connection must end).
    async fn write_body<B>(&mut self, body: B, framing: Framing) -> io::Result<bool>
    where
        B: Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        let mut body = pin!(body);
        let mut left = match framing {
            Framing::Length(n) => n,
            _ => u64::MAX,
        };
        loop {
            // what is ready now is gathered; before waiting for more, what is gathered
            // is written
            let step = std::future::poll_fn(|cx| match body.as_mut().poll_frame(cx) {
                Poll::Pending if !self.out.is_empty() => Poll::Ready(Step::Flush),
                Poll::Pending => Poll::Pending,
                Poll::Ready(f) => Poll::Ready(Step::Frame(f)),
            })
            .await;
            match step {
                Step::Flush => {
                    self.stream.write_all(&self.out).await?;
                    self.out.clear();
                }
                Step::Frame(Some(Ok(frame))) => {
                    let Ok(mut data) = frame.into_data() else {
                        continue; // trailers are not sent
                    };
                    if data.is_empty() {
                        continue;
                    }
                    // more than the length said: what fits is sent, then the connection
                    // ends (it cannot go on with bytes the client would take for a response)
                    let mut overflow = false;
                    if let Framing::Length(_) = framing {
                        if data.len() as u64 > left {
                            data.truncate(left as usize);
                            overflow = true;
                        }
                        left -= data.len() as u64;
                    }
                    if framing == Framing::Chunked {
                        let mut hex = [0u8; 16];
                        self.out.extend_from_slice(hex_len(data.len(), &mut hex));
                        self.out.extend_from_slice(b"\r\n");
                    }
                    if data.len() >= WRITE_AT {
                        self.stream.write_all(&self.out).await?;
                        self.out.clear();
                        self.stream.write_all(&data).await?;
                    } else {
                        self.out.extend_from_slice(&data);
                    }
                    if framing == Framing::Chunked {
                        self.out.extend_from_slice(b"\r\n");
                    }
                    if overflow {
                        self.stream.write_all(&self.out).await?;
                        return Ok(false);
                    }
                    if self.out.len() >= WRITE_AT {
                        self.stream.write_all(&self.out).await?;
                        self.out.clear();
                    }
                }
                Step::Frame(None) => {
                    if framing == Framing::Chunked {
                        self.out.extend_from_slice(b"0\r\n\r\n");
                    }
                    self.stream.write_all(&self.out).await?;
                    self.out.clear();
                    return Ok(match framing {
                        Framing::Length(_) => left == 0,
                        Framing::Chunked => true,
                        _ => false,
                    });
                }
                Step::Frame(Some(Err(e))) => {
                    tracing::debug!(error = %e, "response body failed: connection closed");
                    // the client sees a cut body, never a complete-looking one
                    self.stream.write_all(&self.out).await?;
                    return Ok(false);
                }
            }
        }
    }
}

enum Step<F> {
    Flush,
    Frame(Option<F>),
}

/// `n` in hexadecimal, in `buf`.
fn hex_len(mut n: usize, buf: &mut [u8; 16]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// `date: <IMF-fixdate>` at `now`, formatted once per second per thread: the wall clock
/// is read only when the second the text was made for is over.
fn put_date(out: &mut Vec<u8>, now: std::time::Instant) {
    struct Cached {
        /// When the text stops being the current second.
        until: Option<std::time::Instant>,
        text: String,
    }
    thread_local! {
        static DATE: std::cell::RefCell<Cached> = const {
            std::cell::RefCell::new(Cached { until: None, text: String::new() })
        };
    }
    DATE.with(|c| {
        let mut c = c.borrow_mut();
        if c.until.is_none_or(|u| now >= u) {
            let wall = SystemTime::now();
            let into_second = wall
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(Duration::ZERO, |d| {
                    Duration::from_nanos(d.subsec_nanos().into())
                });
            c.text = httpdate::fmt_http_date(wall);
            c.until = Some(now + (Duration::from_secs(1) - into_second));
        }
        encode_field(out, b"date", c.text.as_bytes());
    });
}

/// A connection with bytes already read from it put back in front.
struct Rewind {
    prefix: Bytes,
    io: ClientIo,
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parsed(wire: &[u8]) -> (Parsed, Head) {
        let mut head = Head::default();
        let p = parse(wire, &mut head);
        (p, head)
    }

    #[test]
    fn only_bodyless_plain_requests_are_taken() {
        for taken in [
            &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"DELETE /x?y=1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"HEAD / HTTP/1.0\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(parsed(taken).0, Parsed::Complete), "{taken:?}");
        }
        for hyper in [
            &b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            // HTTP/2's preface is known by its version, before it is complete
            b"PRI * HTTP/2",
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"NOT HTTP\r\n\r\n",
        ] {
            assert!(matches!(parsed(hyper).0, Parsed::NotHere), "{hyper:?}");
        }
        for partial in [&b""[..], b"GET / HT", b"GET / HTTP/1.1\r\nHost: a\r\n"] {
            assert!(matches!(parsed(partial).0, Parsed::Partial), "{partial:?}");
        }
        let many: String = (0..MAX_FIELDS + 1)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        let wire = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(matches!(parsed(wire.as_bytes()).0, Parsed::NotHere));
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection() {
        for (wire, keep) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], true),
            (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
            (b"GET / HTTP/1.1\r\nConnection: foo, Close\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
            (
                b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
                false,
            ),
        ] {
            let (p, head) = parsed(wire);
            assert!(matches!(p, Parsed::Complete));
            assert_eq!(head.keep_alive, keep, "{wire:?}");
        }
    }

    #[test]
    fn the_request_shares_the_head_and_leaves_what_follows() {
        let mut buf = BytesMut::from(
            &b"GET /p?q=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\n\r\nGET /next"[..],
        );
        let (p, mut head) = parsed(&buf);
        assert!(matches!(p, Parsed::Complete));
        let peer: SocketAddr = "192.0.2.1:5".parse().unwrap();
        let (req, meta) = head.take_request(&mut buf, peer).unwrap();
        assert_eq!(req.uri(), "/p?q=1");
        assert_eq!(req.headers().get_all("x-a").iter().count(), 2);
        assert_eq!(req.extensions().get::<PeerAddr>().unwrap().0, peer);
        assert!(meta.keep_alive && !meta.head);
        assert_eq!(&buf[..], b"GET /next");
    }

    #[test]
    fn a_refused_target_leaves_the_buffer_whole() {
        // httparse takes any visible bytes as a target; `Uri` does not take all
        let wire = &b"GET http://[::1 HTTP/1.1\r\n\r\nrest"[..];
        let mut buf = BytesMut::from(wire);
        let (p, mut head) = parsed(&buf);
        assert!(matches!(p, Parsed::Complete));
        let peer: SocketAddr = "192.0.2.1:5".parse().unwrap();
        assert!(head.take_request(&mut buf, peer).is_none());
        assert_eq!(&buf[..], wire);
    }

    #[test]
    fn hex_lengths() {
        let mut b = [0u8; 16];
        for n in [0usize, 1, 15, 16, 255, 4096, usize::MAX] {
            assert_eq!(hex_len(n, &mut b), format!("{n:x}").as_bytes());
        }
    }

    proptest! {
        /// Every field value httparse accepts is a valid `HeaderValue` (what
        /// `parsed_value` relies on to skip the check).
        #[test]
        fn values_httparse_accepts_are_header_values(value in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut wire = b"GET / HTTP/1.1\r\nX: ".to_vec();
            wire.extend_from_slice(&value);
            wire.extend_from_slice(b"\r\n\r\n");
            let mut fields = [httparse::EMPTY_HEADER; 4];
            let mut r = httparse::Request::new(&mut fields);
            if let Ok(httparse::Status::Complete(_)) = r.parse(&wire) {
                for f in r.headers.iter() {
                    prop_assert!(http::HeaderValue::from_bytes(f.value).is_ok(), "{:?}", f.value);
                }
            }
        }
    }
}
