//! A client connection's socket with a send timeout ([`ClientIo`]), and the caps on
//! client connections in total and per client address ([`ConnCaps`]).
//!
//! Send timeout: a write towards the client that makes no progress for the timeout (the
//! client does not read its response) fails with `TimedOut`, which ends the connection
//! on either path and drops the response body, and with it the upstream exchange (a
//! direct upstream connection closes; hyper's is not reused), so a client that never
//! reads holds no backend worker for longer than the timeout. The timer is armed only
//! when a write would block, so a client that reads costs nothing.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use floodgate_engine::metrics::Metrics;

/// A client's socket whose writes time out when they make no progress.
pub(crate) struct ClientIo {
    io: TcpStream,
    timeout: Duration,
    /// Armed when a write would block; dropped on progress.
    stall: Option<Pin<Box<Sleep>>>,
    metrics: Arc<Metrics>,
}

impl ClientIo {
    pub(crate) fn new(io: TcpStream, timeout: Duration, metrics: Arc<Metrics>) -> ClientIo {
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

/// Client connections open now, in total and per address, against their caps.
#[derive(Debug)]
pub(crate) struct ConnCaps {
    total: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    max_total: usize,
    max_per_client: usize,
    metrics: Arc<Metrics>,
}

/// One client connection's place under the caps, given back when dropped.
#[derive(Debug)]
pub(crate) struct ConnSlot {
    caps: Arc<ConnCaps>,
    ip: IpAddr,
}

impl ConnCaps {
    pub(crate) fn new(max_total: usize, max_per_client: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(ConnCaps {
            total: AtomicUsize::new(0),
            per_client: Mutex::new(HashMap::new()),
            max_total,
            max_per_client,
            metrics,
        })
    }

    /// A place for a connection from `ip`, or `None` (counted) when a cap is reached.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ConnSlot> {
        let ip = ip.to_canonical();
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.max_total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            self.metrics.client_connection("refused_total");
            return None;
        }
        let mut per = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
        let n = per.entry(ip).or_insert(0);
        if *n >= self.max_per_client {
            drop(per);
            self.total.fetch_sub(1, Ordering::AcqRel);
            self.metrics.client_connection("refused_per_client");
            return None;
        }
        *n += 1;
        drop(per);
        self.metrics.client_connection("accepted");
        Some(ConnSlot {
            caps: self.clone(),
            ip,
        })
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut per = self
            .caps
            .per_client
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = per.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.ip);
            }
        }
        drop(per);
        self.caps.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_refuse_the_excess_and_free_on_drop() {
        let m = Arc::new(Metrics::new(&[]));
        let caps = ConnCaps::new(3, 2, m.clone());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = caps.admit(a).unwrap();
        let _a2 = caps.admit(a).unwrap();
        assert!(caps.admit(a).is_none());
        let _b1 = caps.admit(b).unwrap();
        assert!(caps.admit(b).is_none());
        drop(a1);
        let _b2 = caps.admit(b).unwrap();
        assert_eq!(m.client_connection_count("refused_per_client"), 1);
        assert_eq!(m.client_connection_count("refused_total"), 1);
        assert_eq!(m.client_connection_count("accepted"), 4);
        // an IPv4-mapped IPv6 address is the same client
        let mapped: IpAddr = "::ffff:192.0.2.9".parse().unwrap();
        drop(_b2);
        let _m = caps.admit(mapped).unwrap();
        assert_eq!(caps.per_client.lock().unwrap().len(), 3);
    }
}
