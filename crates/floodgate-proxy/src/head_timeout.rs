//! The client side's head timeout: a connection that has waited longer than the timeout
//! for a request head, with no request in flight (idle between requests, or a head
//! arriving too slowly: slowloris), is closed. A request that waits on a slow upstream
//! is in flight and never cut by it.
//!
//! One timer per connection, which wakes at most once per timeout to look at the
//! connection's state, instead of hyper's `header_read_timeout`, which registers and
//! removes a timer per request (1.5k of about 29k instructions per proxied request,
//! measured with callgrind). Per request this costs two atomic updates and a clock read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

/// What one connection is doing, shared by its requests and its timer.
#[derive(Debug)]
pub(crate) struct HeadWait {
    /// When the connection was accepted.
    base: Instant,
    /// Requests whose response has not been completely written (or dropped).
    in_flight: AtomicUsize,
    /// When the connection last became idle, in milliseconds since `base`.
    idle_since_ms: AtomicU64,
}

impl HeadWait {
    /// A connection accepted now: idle, waiting for its first head.
    pub(crate) fn new() -> Arc<HeadWait> {
        Arc::new(HeadWait {
            base: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
        })
    }

    /// A request head has arrived: the connection is busy until the guard (moved into
    /// the response body) is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// How long the connection has been waiting for a head: since its previous
    /// response ended, or since it was accepted (handed to hyper).
    pub(crate) fn waiting_for(&self) -> Duration {
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(since)
    }

    /// When the connection must have received a head by, if it is idle now.
    fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        Some(self.base + since + timeout)
    }
}

/// A request in flight on its connection; dropped when its response is complete (or
/// abandoned), which makes the connection idle again if it was the last.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<HeadWait>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let w = &self.0;
        // the idle clock starts before the count says idle, so a timer that sees the
        // connection idle never sees an older start
        let ms = u64::try_from(w.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        w.idle_since_ms.store(ms, Ordering::Relaxed);
        w.in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// A timer that is polled only when it fires: then it asks for the deadline that holds
/// now, and either reports it passed or moves itself to it. One timer per connection,
/// never re-registered per request.
pub(crate) struct LazyTimer<'a> {
    sleep: Pin<&'a mut tokio::time::Sleep>,
    /// The timer holds the task's waker: until it fires, polling it again is not needed.
    armed: bool,
}

impl<'a> LazyTimer<'a> {
    pub(crate) fn new(sleep: Pin<&'a mut tokio::time::Sleep>) -> Self {
        LazyTimer {
            sleep,
            armed: false,
        }
    }

    /// Ready once `deadline()` has passed. `deadline` is asked only when the timer fires;
    /// `None` (nothing to time now) looks again after `recheck`.
    pub(crate) fn poll_due(
        &mut self,
        cx: &mut Context<'_>,
        mut deadline: impl FnMut() -> Option<Instant>,
        recheck: Duration,
    ) -> Poll<()> {
        loop {
            if self.armed && !self.sleep.is_elapsed() {
                return Poll::Pending;
            }
            match self.sleep.as_mut().poll(cx) {
                Poll::Pending => {
                    self.armed = true;
                    return Poll::Pending;
                }
                Poll::Ready(()) => {
                    self.armed = false;
                    let now = Instant::now();
                    match deadline() {
                        Some(d) if d <= now => return Poll::Ready(()),
                        Some(d) => self.sleep.as_mut().reset(d),
                        None => self.sleep.as_mut().reset(now + recheck),
                    }
                }
            }
        }
    }
}

/// Drive `conn` (a served connection) until it ends, or until it has waited `timeout`
/// for a request head; then it is dropped, which closes it.
pub(crate) async fn run<F: Future>(
    conn: F,
    wait: Arc<HeadWait>,
    timeout: Duration,
) -> Option<F::Output> {
    let mut conn = std::pin::pin!(conn);
    let sleep = std::pin::pin!(tokio::time::sleep(timeout));
    let mut timer = LazyTimer::new(sleep);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = conn.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        timer
            .poll_due(cx, || wait.idle_deadline(timeout), timeout)
            .map(|()| None)
    })
    .await
}

/// A response body that holds its request's [`InFlight`] until it is dropped (hyper
/// drops it once written, or when the connection fails).
#[derive(Debug)]
pub(crate) struct Watched<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B> Watched<B> {
    pub(crate) fn new(inner: B, in_flight: InFlight) -> Self {
        Watched {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl<B: http_body::Body<Data = Bytes> + Unpin> http_body::Body for Watched<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
