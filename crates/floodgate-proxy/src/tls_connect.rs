//! The connector of hyper-util's client (HTTP/2 upstreams) to an `https://` upstream:
//! TCP by hyper-util's `HttpConnector`, then TLS by [`ClientTls`] (ALPN `h2`), bounded by
//! the connect timeout. The HTTP/1.1 pool makes its TLS connections itself
//! (`h1::upstream`), with the same [`ClientTls`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use floodgate_net::tls::ClientTls;
use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TCP, then TLS, to the URI's host and port.
#[derive(Clone)]
pub(crate) struct TlsConnector {
    pub(crate) http: HttpConnector,
    pub(crate) tls: ClientTls,
    /// Bounds the TLS handshake (TCP has its own, in `http`).
    pub(crate) timeout: Duration,
}

/// A TLS connection to the upstream, as hyper's client drives it.
pub(crate) struct TlsIo(TokioIo<TlsStream<TcpStream>>);

impl Service<Uri> for TlsConnector {
    type Response = TlsIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let tls = self.tls.clone();
        let timeout = self.timeout;
        let host = uri.host().unwrap_or_default().to_string();
        Box::pin(async move {
            let tcp = http.call(uri).await?.into_inner();
            match tokio::time::timeout(timeout, tls.connect(&host, tcp)).await {
                Ok(Ok(s)) => Ok(TlsIo(TokioIo::new(s))),
                Ok(Err(e)) => Err(format!("TLS with {host} failed: {e}").into()),
                Err(_) => Err(format!("TLS with {host}: no handshake within {timeout:?}").into()),
            }
        })
    }
}

impl Connection for TlsIo {
    fn connected(&self) -> Connected {
        let (tcp, session) = self.0.inner().get_ref();
        let connected = tcp.connected();
        if session.alpn_protocol() == Some(b"h2") {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

impl hyper::rt::Read for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }
}
