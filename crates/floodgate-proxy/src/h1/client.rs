//! The client side of the proxy's own HTTP/1 path: one client connection's reads and
//! responses (the loop that serves it is [`crate::connection::serve`]).
//!
//! HTTP/1.x requests without a body (most GETs, HEADs and DELETEs) are read and answered
//! here: the head parsed with `httparse` ([`super::request_head`]) into a request whose field values share the
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
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{Response, StatusCode, Version};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::watch;
use tokio::time::Instant;

use super::encode_field;
use super::request_head::Meta;
use crate::client_io::ClientIo;
use crate::head_timeout::LazyTimer;

/// Read buffer, and the room kept free in it before each read.
pub(crate) const READ_BUF: usize = 8 * 1024;
const READ_ROOM: usize = 1024;
/// Body bytes gathered before a write; frames at least this long are written as they are.
const WRITE_AT: usize = 16 * 1024;

pub(crate) struct Conn {
    pub(crate) stream: ClientIo,
    /// Bytes read and not yet taken by a request.
    pub(crate) buf: BytesMut,
    /// The response being written.
    pub(crate) out: Vec<u8>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// What the connection waits for between requests: more bytes, its head timeout, or
/// shutdown.
pub(crate) struct Waiting<'a, S> {
    pub(crate) timer: LazyTimer<'a>,
    pub(crate) stop: Pin<&'a mut S>,
    pub(crate) stop_armed: bool,
    /// When the last response was written (or the connection accepted).
    pub(crate) idle_since: Instant,
    pub(crate) timeout: Duration,
}

pub(crate) enum Wait {
    Read,
    Closed,
    TimedOut,
    Stop,
}

impl<S: Future<Output = ()>> Waiting<'_, S> {
    pub(crate) async fn read(&mut self, conn: &mut Conn) -> Wait {
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
    pub(crate) async fn respond<B>(
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
pub(crate) struct Rewind {
    pub(crate) prefix: Bytes,
    pub(crate) io: ClientIo,
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

    #[test]
    fn hex_lengths() {
        let mut b = [0u8; 16];
        for n in [0usize, 1, 15, 16, 255, 4096, usize::MAX] {
            assert_eq!(hex_len(n, &mut b), format!("{n:x}").as_bytes());
        }
    }
}
