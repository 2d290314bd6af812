//! One HTTP/1.1 exchange for a request without a body, on an upstream connection owned
//! by the calling task: the request head is written from the `HeaderMap` as it is, the
//! response head parsed with `httparse`, and the body read straight from the socket as
//! the client's side polls for it. No connection task, no channel, no wakeup between
//! tasks per request (hyper's client needs all three).
//!
//! Response framing follows RFC 9112 §6.3: no body after `HEAD`, 1xx, 204 and 304;
//! `Transfer-Encoding` ending in `chunked` is decoded ([`super::chunked`]); otherwise a
//! valid `Content-Length`; otherwise the body runs to the connection's close. A
//! connection is reused only when its response is complete, framed by length or chunks,
//! keep-alive (HTTP/1.1 without `Connection: close`, or HTTP/1.0 with `keep-alive`),
//! and nothing follows it on the wire.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use tokio::net::TcpStream;

use super::chunked::{ChunkedDecoder, ChunkedError, Step};
use super::{Http1Pool, UpstreamError};

/// Longest response head accepted (status line and fields), in bytes.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Most response header fields accepted.
const MAX_FIELDS: usize = 128;
/// Read buffer reserved per read, in bytes.
const READ_CHUNK: usize = 8 * 1024;

/// An upstream connection with its read buffer. Invariant: while idle in the pool the
/// buffer is empty (a connection with unread bytes is never pooled).
#[derive(Debug)]
pub(crate) struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    /// The exchange timeout's timer, kept for the connection's life: moving a
    /// registered deadline later is one atomic update, where a new timer per request
    /// would be registered in and removed from tokio's timer wheel each time.
    /// (`None` before the first exchange, and while an exchange holds it.)
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// Why a response head could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    /// The connection closed (or was reset) before any byte of the response: on a
    /// pooled connection, the upstream had closed it while idle.
    #[error("upstream closed the connection before responding")]
    ClosedEarly,
    /// Reading failed after part of the response had arrived.
    #[error("reading the upstream response failed: {0}")]
    Io(io::Error),
    /// The response head is not valid HTTP/1.1, too large, or its framing is ambiguous.
    #[error("malformed upstream response: {0}")]
    Malformed(&'static str),
}

/// How the response body is delimited on the wire.
#[derive(Debug)]
enum Framing {
    /// No body, or the body is complete.
    Done,
    /// This many bytes still to come.
    Length(u64),
    /// Chunked transfer coding.
    Chunked(ChunkedDecoder),
    /// Everything until the upstream closes the connection.
    UntilClose,
}

impl Conn {
    /// Connect to `addr` (`host:port`) within `timeout`.
    pub(crate) async fn connect(addr: &str, timeout: Duration) -> Result<Conn, UpstreamError> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Err(_) => {
                return Err(UpstreamError::ConnectTimeout {
                    addr: addr.to_string(),
                    timeout,
                });
            }
            Ok(Err(source)) => {
                return Err(UpstreamError::Connect {
                    addr: addr.to_string(),
                    source,
                });
            }
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            buf: BytesMut::new(),
            timer: None,
        })
    }

    /// The socket, for a connection hyper will drive (its buffer is empty: new).
    pub(crate) fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Whether an idle connection is still open. No system call unless the reactor
    /// has seen the socket become readable (an idle upstream connection is readable
    /// only when it is closing, or sent bytes nobody asked for: both unusable).
    pub(crate) fn still_open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        match self.stream.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Write all of `bytes`.
    pub(crate) async fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.stream.try_write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.stream.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Read more bytes into the buffer; `Ok(0)` at the end of the stream. A read that
    /// leaves room in the buffer clears the socket's readiness (tokio's `poll_read`
    /// does), so [`still_open`](Self::still_open) makes no system call afterwards.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.buf.reserve(READ_CHUNK);
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buf)
    }

    async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// Read the response to a request with method `method`, skipping interim (1xx)
    /// responses. The body's framing is decided here; the body is read later.
    async fn read_head(&mut self, method: &Method) -> Result<FinalHead, HeadError> {
        let mut got_any = false;
        loop {
            if let Some(parsed) = parse_head(&mut self.buf, method)? {
                match parsed {
                    Parsed::Interim => {
                        got_any = true;
                        continue;
                    }
                    Parsed::Final(head) => return Ok(head),
                }
            }
            if self.buf.len() >= MAX_HEAD {
                return Err(HeadError::Malformed("response head larger than 64 KiB"));
            }
            match self.fill().await {
                Ok(0) if !got_any && self.buf.is_empty() => return Err(HeadError::ClosedEarly),
                Ok(0) => {
                    return Err(HeadError::Malformed(
                        "connection closed inside the response head",
                    ));
                }
                Ok(_) => {}
                Err(e)
                    if !got_any
                        && self.buf.is_empty()
                        && matches!(
                            e.kind(),
                            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                        ) =>
                {
                    return Err(HeadError::ClosedEarly);
                }
                Err(e) => return Err(HeadError::Io(e)),
            }
        }
    }
}

enum Parsed {
    /// A 1xx response, consumed.
    Interim,
    /// The final response head.
    Final(FinalHead),
}

/// A final response head, its body's framing, and whether the connection may be
/// reused after the body.
#[derive(Debug)]
struct FinalHead {
    response: Response<()>,
    framing: Framing,
    keep_alive: bool,
}

/// Parse a complete response head at the front of `buf` (consuming it), or `None`
/// when more bytes are needed.
fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Parsed>, HeadError> {
    // uninitialized: zeroing room for 128 fields costs more than parsing a short head
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut r = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut r,
        buf,
        &mut fields,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HeadError::Malformed("more than 128 response header fields"));
        }
        Err(_) => return Err(HeadError::Malformed("invalid status line or header field")),
    };
    let code = r.code.unwrap_or(0);
    let status =
        StatusCode::from_u16(code).map_err(|_| HeadError::Malformed("invalid status code"))?;
    let version = if r.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(HeadError::Malformed(
            "101 Switching Protocols to a request that asked for no upgrade",
        ));
    }
    if status.is_informational() {
        let _ = buf.split_to(len);
        return Ok(Some(Parsed::Interim));
    }
    // where each field's name and value sit in the head, so that the values can share
    // the head's bytes instead of being copied
    let base = buf.as_ptr() as usize;
    let spans: Vec<(usize, usize, usize, usize)> = r
        .headers
        .iter()
        .map(|f| {
            (
                f.name.as_ptr() as usize - base,
                f.name.len(),
                f.value.as_ptr() as usize - base,
                f.value.len(),
            )
        })
        .collect();
    let head = buf.split_to(len).freeze();
    // room for the RateLimit fields the limiter adds, so the map does not grow then
    let mut headers = HeaderMap::with_capacity(spans.len() + 6);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut has_te = false;
    let mut close = version == Version::HTTP_10;
    for &(n_at, n_len, v_at, v_len) in &spans {
        let name = HeaderName::from_bytes(&head[n_at..n_at + n_len])
            .map_err(|_| HeadError::Malformed("invalid header field name"))?;
        let raw = head.slice(v_at..v_at + v_len);
        let value = parsed_value(raw.clone());
        if name == CONTENT_LENGTH {
            let n = parse_length(&raw)?;
            if length.is_some_and(|l| l != n) {
                return Err(HeadError::Malformed("conflicting Content-Length values"));
            }
            length = Some(n);
        } else if name == TRANSFER_ENCODING {
            has_te = true;
            // only the final coding decides (RFC 9112 §6.3)
            chunked = raw
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == CONNECTION {
            for token in raw.split(|&b| b == b',') {
                let t = token.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if t.eq_ignore_ascii_case(b"keep-alive") && version == Version::HTTP_10 {
                    close = false;
                }
            }
        }
        headers.append(name, value);
    }
    let no_body = method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        Framing::Done
    } else if has_te {
        if length.is_some() {
            // both: Transfer-Encoding wins and the connection must not be reused
            close = true;
        }
        if chunked {
            Framing::Chunked(ChunkedDecoder::new())
        } else {
            Framing::UntilClose
        }
    } else {
        match length {
            Some(0) => Framing::Done,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    if matches!(framing, Framing::UntilClose) {
        close = true;
    }
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    *resp.version_mut() = version;
    *resp.headers_mut() = headers;
    Ok(Some(Parsed::Final(FinalHead {
        response: resp,
        framing,
        keep_alive: !close,
    })))
}

/// How an upstream response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (HEAD, 204, 304, a length of 0).
    None,
    /// This many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the upstream closes the connection.
    UntilClose,
}

/// A final upstream response head as the parser read it.
#[derive(Debug)]
pub struct ResponseHead {
    /// Status, version and fields.
    pub response: Response<()>,
    /// How its body is delimited.
    pub framing: BodyFraming,
    /// Whether the connection may be reused after the body.
    pub keep_alive: bool,
    /// The head's length in bytes.
    pub len: usize,
}

/// What the upstream response parser makes of a response head.
#[derive(Debug)]
pub enum ResponseParse {
    /// More bytes are needed.
    Partial,
    /// A 1xx response of this many bytes, skipped.
    Interim(usize),
    /// The final response head.
    Final(Box<ResponseHead>),
}

/// What the upstream response parser makes of the bytes at the front of `buf`, as
/// [`crate::wire::parse_response_head`] reports it.
pub(crate) fn response_head(buf: &[u8], method: &Method) -> Result<ResponseParse, String> {
    let mut b = BytesMut::from(buf);
    let parsed = parse_head(&mut b, method).map_err(|e| e.to_string())?;
    let len = buf.len() - b.len();
    Ok(match parsed {
        None => ResponseParse::Partial,
        Some(Parsed::Interim) => ResponseParse::Interim(len),
        Some(Parsed::Final(f)) => ResponseParse::Final(Box::new(ResponseHead {
            response: f.response,
            framing: match f.framing {
                Framing::Done => BodyFraming::None,
                Framing::Length(n) => BodyFraming::Length(n),
                Framing::Chunked(_) => BodyFraming::Chunked,
                Framing::UntilClose => BodyFraming::UntilClose,
            },
            keep_alive: f.keep_alive,
            len,
        })),
    })
}

/// A Content-Length value: decimal digits only (no sign, no spaces inside), at most 64
/// bits. A list of equal values (`5, 5`) is accepted, as RFC 9110 §8.6 allows.
fn parse_length(v: &[u8]) -> Result<u64, HeadError> {
    let mut value = None;
    for part in v.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(HeadError::Malformed("invalid Content-Length"));
        }
        let n = std::str::from_utf8(part)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(HeadError::Malformed("Content-Length overflows 64 bits"))?;
        if value.is_some_and(|v| v != n) {
            return Err(HeadError::Malformed("conflicting Content-Length values"));
        }
        value = Some(n);
    }
    value.ok_or(HeadError::Malformed("invalid Content-Length"))
}

/// `METHOD target HTTP/1.1` and its CRLF. A head is this line, [`encode_field`] per
/// field, and a blank line (`\r\n`).
pub(crate) fn encode_request_line(out: &mut Vec<u8>, method: &Method, target: &str) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// `name: value` and its CRLF. The caller passes bytes of a valid `HeaderName` and
/// `HeaderValue` (no CR, LF or NUL), so nothing can be injected.
pub(crate) fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A field value `httparse` has parsed, sharing its buffer, without checking its bytes
/// again: `httparse` accepts only HTAB, SP, visible ASCII and obs-text (0x80-0xFF) in a
/// value, which are exactly the bytes `HeaderValue` allows (hyper does the same).
pub(crate) fn parsed_value(bytes: Bytes) -> HeaderValue {
    debug_assert!(HeaderValue::from_bytes(&bytes).is_ok());
    // SAFETY: see above; `HeaderValue`'s invariant (no control byte but HTAB) holds
    unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) }
}

/// Whether a request with `method` may be sent again after a connection failed
/// without any response (RFC 9110 §9.2.2).
pub(crate) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Send the encoded request `head` on `conn` and read the response head, by `deadline`.
/// The body is returned as a [`DirectBody`] that gives `conn` back to `pool` when
/// complete.
pub(crate) async fn exchange(
    mut conn: Conn,
    head: &[u8],
    method: &Method,
    deadline: tokio::time::Instant,
    pool: &Arc<Http1Pool>,
) -> Result<Response<DirectBody>, ExchangeError> {
    let mut timer = match conn.timer.take() {
        Some(mut t) => {
            t.as_mut().reset(deadline);
            t
        }
        None => Box::pin(tokio::time::sleep_until(deadline)),
    };
    let work = async {
        conn.write_all(head).await.map_err(ExchangeError::Write)?;
        conn.read_head(method).await.map_err(ExchangeError::Head)
    };
    let got = tokio::select! {
        biased;
        r = work => r,
        () = timer.as_mut() => Err(ExchangeError::TimedOut),
    };
    let FinalHead {
        response,
        framing,
        keep_alive,
    } = got?;
    conn.timer = Some(timer);
    let mut body = DirectBody {
        conn: Some(conn),
        framing,
        keep_alive,
        pool: pool.clone(),
    };
    if matches!(body.framing, Framing::Done) {
        body.finish();
    }
    Ok(response.map(|()| body))
}

/// Why [`exchange`] failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// The request could not be written: on a pooled connection, it was closed.
    #[error("writing the request upstream failed: {0}")]
    Write(io::Error),
    /// No valid response head.
    #[error(transparent)]
    Head(HeadError),
    /// No response head within the upstream timeout.
    #[error("no response head within the upstream timeout")]
    TimedOut,
}

/// Why a response body failed mid-way.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// The upstream closed the connection before the body was complete.
    #[error("upstream closed the connection {0} bytes before the end of the body")]
    Truncated(u64),
    /// The upstream closed the connection inside a chunked body.
    #[error("upstream closed the connection inside a chunked body")]
    TruncatedChunked,
    /// Reading failed.
    #[error("reading the upstream body failed: {0}")]
    Io(#[from] io::Error),
    /// The chunked framing is malformed.
    #[error("malformed chunked upstream body: {0}")]
    Chunked(#[from] ChunkedError),
}

/// A response body read straight from its upstream connection.
pub(crate) struct DirectBody {
    conn: Option<Conn>,
    framing: Framing,
    keep_alive: bool,
    pool: Arc<Http1Pool>,
}

impl std::fmt::Debug for DirectBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectBody")
            .field("framing", &self.framing)
            .field("keep_alive", &self.keep_alive)
            .finish_non_exhaustive()
    }
}

impl DirectBody {
    /// The body is complete: the connection goes back to the pool if reusable.
    fn finish(&mut self) {
        self.framing = Framing::Done;
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && conn.buf.is_empty()
        {
            self.pool.give_back_direct(conn);
        }
    }

    /// Fail: the connection is closed.
    fn fail(&mut self, e: BodyError) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        self.conn = None;
        self.framing = Framing::Done;
        Poll::Ready(Some(Err(e)))
    }
}

impl http_body::Body for DirectBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match &mut this.framing {
                Framing::Done => return Poll::Ready(None),
                Framing::Length(rem) => {
                    if conn.buf.is_empty() {
                        match ready!(conn.poll_fill(cx)) {
                            Ok(0) => {
                                let rem = *rem;
                                return this.fail(BodyError::Truncated(rem));
                            }
                            Ok(_) => {}
                            Err(e) => return this.fail(e.into()),
                        }
                    }
                    let n = (*rem).min(conn.buf.len() as u64);
                    let data = conn.buf.split_to(n as usize).freeze();
                    *rem -= n;
                    if *rem == 0 {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
                }
                Framing::Chunked(d) => match d.decode(&mut conn.buf) {
                    Ok(Step::Data(data)) => {
                        return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
                    }
                    Ok(Step::Done) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Step::NeedMore) => match ready!(conn.poll_fill(cx)) {
                        Ok(0) => return this.fail(BodyError::TruncatedChunked),
                        Ok(_) => continue,
                        Err(e) => return this.fail(e.into()),
                    },
                    Err(e) => return this.fail(e.into()),
                },
                Framing::UntilClose => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
                    }
                    match ready!(conn.poll_fill(cx)) {
                        Ok(0) => {
                            this.conn = None;
                            this.framing = Framing::Done;
                            return Poll::Ready(None);
                        }
                        Ok(_) => continue,
                        Err(e) => return this.fail(e.into()),
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.framing {
            Framing::Done => true,
            Framing::Length(n) => *n == 0,
            Framing::Chunked(d) => d.is_done(),
            Framing::UntilClose => false,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.framing {
            Framing::Done => http_body::SizeHint::with_exact(0),
            Framing::Length(n) => http_body::SizeHint::with_exact(*n),
            _ => http_body::SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head, its framing, keep-alive, and how many bytes are left after the head.
    type Got = (Response<()>, Framing, bool, usize);

    fn parse(wire: &[u8], method: Method) -> Result<Option<Got>, HeadError> {
        let mut buf = BytesMut::from(wire);
        Ok(parse_head(&mut buf, &method)?.map(|p| match p {
            Parsed::Final(h) => (h.response, h.framing, h.keep_alive, buf.len()),
            Parsed::Interim => panic!("interim"),
        }))
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let (r, f, keep, rest) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nokNEXT",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-a"], "b");
        assert!(matches!(f, Framing::Length(2)) && keep && rest == 6);
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
            Method::HEAD,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::Done) && keep);
        let (_, f, keep, _) = parse(b"HTTP/1.1 204 No Content\r\n\r\n", Method::GET)
            .unwrap()
            .unwrap();
        assert!(matches!(f, Framing::Done) && keep);
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::Chunked(_)) && keep);
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(
            matches!(f, Framing::Chunked(_)) && !keep,
            "TE and CL: chunked, then close"
        );
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::UntilClose) && !keep);
        let (_, f, keep, _) = parse(b"HTTP/1.1 200 OK\r\n\r\n", Method::GET)
            .unwrap()
            .unwrap();
        assert!(matches!(f, Framing::UntilClose) && !keep);
        let (_, _, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nConnection: foo, close\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(!keep);
        let (r, _, keep, _) = parse(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", Method::GET)
            .unwrap()
            .unwrap();
        assert!(!keep && r.version() == Version::HTTP_10);
        let (_, _, keep, _) = parse(
            b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(keep);
        let (_, f, _, _) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::Length(7)));
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Le", Method::GET)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn interim_responses_are_consumed() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n"[..],
        );
        assert!(matches!(
            parse_head(&mut buf, &Method::GET),
            Ok(Some(Parsed::Interim))
        ));
        assert_eq!(&buf[..], b"HTTP/1.1 200 OK\r\n");
    }

    #[test]
    fn malformed_heads_are_errors_that_say_why() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
                "conflicting",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n",
                "conflicting",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                "invalid Content-Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n",
                "invalid Content-Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                "overflows",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
                "invalid Content-Length",
            ),
            (b"HTTP/1.1 2000 OK\r\n\r\n", "status"),
            (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101"),
            (b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "invalid"),
            (b"SMTP ready\r\n\r\n", "invalid status line"),
        ];
        for (wire, want) in cases {
            let err = parse(wire, Method::GET)
                .err()
                .unwrap_or_else(|| panic!("accepted {:?}", String::from_utf8_lossy(wire)));
            assert!(
                err.to_string().contains(want),
                "{:?}: {err}",
                String::from_utf8_lossy(wire)
            );
        }
        let many: Vec<u8> = [
            b"HTTP/1.1 200 OK\r\n".to_vec(),
            b"X: y\r\n".repeat(MAX_FIELDS + 1),
            b"\r\n".to_vec(),
        ]
        .concat();
        assert!(
            parse(&many, Method::GET)
                .err()
                .unwrap()
                .to_string()
                .contains("128")
        );
    }

    #[test]
    fn encoded_heads_are_what_hyper_parses() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("example.test"));
        h.append("x-many", HeaderValue::from_static("1"));
        h.append("x-many", HeaderValue::from_static("2"));
        let mut out = Vec::new();
        encode_request_line(&mut out, &Method::DELETE, "/a?b=c");
        for (n, v) in &h {
            encode_field(&mut out, n.as_str().as_bytes(), v.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        assert_eq!(
            out,
            b"DELETE /a?b=c HTTP/1.1\r\nhost: example.test\r\nx-many: 1\r\nx-many: 2\r\n\r\n"
        );
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut fields);
        assert_eq!(
            req.parse(&out).unwrap(),
            httparse::Status::Complete(out.len())
        );
    }
}
