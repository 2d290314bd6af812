//! One HTTP/1.1 exchange for a request without a body, on an upstream connection owned
//! by the calling task: the request head is written from the `HeaderMap` as it is, the
//! response head parsed with `httparse`, and the body read straight from the socket as
//! the client's side polls for it. No connection task, no channel, no wakeup between
//! tasks per request (hyper's client needs all three).
//!
//! The response head and its body's framing are read as [`crate::h1::response_head`]
//! says (RFC 9112 §6.3; a chunked body decoded by [`crate::h1::chunked`]). A
//! connection is reused only when its response is complete, framed by length or chunks,
//! keep-alive (HTTP/1.1 without `Connection: close`, or HTTP/1.0 with `keep-alive`),
//! and nothing follows it on the wire.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Response};
use tokio::net::TcpStream;

use super::{Http1Pool, UpstreamError};
use crate::h1::chunked::{ChunkedError, Step};
use crate::h1::response_head::{FinalHead, Framing, HeadError, MAX_HEAD, Parsed, parse_head};

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
