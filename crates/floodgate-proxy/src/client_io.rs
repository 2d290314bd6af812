//! A client connection's socket, plain or TLS ([`ClientStream`]), with a send timeout
//! ([`ClientIo`]). The caps on client
//! connections in total and per client address are `floodgate_net`'s
//! ([`floodgate_net::ConnCaps`]), shared with `floodgate server`.
//!
//! Send timeout: a write towards the client that makes no progress for the timeout (the
//! client does not read its response) fails with `TimedOut`, which ends the connection
//! on either path and drops the response body, and with it the upstream exchange (a
//! direct upstream connection closes; hyper's is not reused), so a client that never
//! reads holds no backend worker for longer than the timeout. The timer is armed only
//! when a write would block, so a client that reads costs nothing.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;
use tokio_rustls::server::TlsStream;

use floodgate_engine::metrics::Metrics;

/// A client connection: TCP, or TLS over TCP (the handshake done).
pub(crate) enum ClientStream {
    /// Cleartext.
    Plain(TcpStream),
    /// TLS terminated here.
    Tls(Box<TlsStream<TcpStream>>),
}

/// `$body` on the stream inside `$self` (a `Pin<&mut ClientStream>`), whichever it is.
macro_rules! on_stream {
    ($self:expr, $io:ident => $body:expr) => {
        match $self {
            ClientStream::Plain($io) => $body,
            ClientStream::Tls($io) => $body,
        }
    };
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        on_stream!(self.get_mut(), io => Pin::new(io).poll_read(cx, buf))
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        on_stream!(self.get_mut(), io => Pin::new(io).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        on_stream!(self.get_mut(), io => Pin::new(io).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        on_stream!(self, io => io.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self.get_mut(), io => Pin::new(io).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self.get_mut(), io => Pin::new(io).poll_shutdown(cx))
    }
}

/// A client's socket whose writes time out when they make no progress.
pub(crate) struct ClientIo {
    io: ClientStream,
    timeout: Duration,
    /// Armed when a write would block; dropped on progress.
    stall: Option<Pin<Box<Sleep>>>,
    metrics: Arc<Metrics>,
}

impl ClientIo {
    pub(crate) fn new(io: ClientStream, timeout: Duration, metrics: Arc<Metrics>) -> ClientIo {
        ClientIo {
            io,
            timeout,
            stall: None,
            metrics,
        }
    }

    /// `r` from the socket; when pending, whether the send timeout has run out.
    fn timed<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stall = None;
            return r;
        }
        let timeout = self.timeout;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.stall = None;
                self.metrics.client_timeout("send");
                tracing::debug!(
                    ?timeout,
                    "the client does not read its response: connection closed"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "send timeout: the client does not read",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.timed(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.timed(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.timed(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        this.timed(r, cx)
    }
}
