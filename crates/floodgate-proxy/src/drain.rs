//! A request body read on after the proxy is done with it ([`LingeringBody`]).
//!
//! An answer may end before the client has sent all of its request body: an upstream
//! that answers without reading the body, an error. HTTP/2 then resets the stream as
//! soon as nothing holds its receiving side (RST_STREAM NO_ERROR once the answer is
//! complete, RFC 9113 section 8.1; CANCEL before), and hyper's HTTP/1 server closes the
//! connection; a client still sending (curl 7.88 among them) takes the reset, or the
//! broken pipe, for a failure of the whole exchange, answer included. So a request body
//! dropped before its end is read on and thrown away, as nginx does, until the client
//! ends it, for at most [`DRAIN_BYTES`] and [`DRAIN_TIME`]; past either bound the stream
//! is reset, or the connection closed, as before. An HTTP/1 body nothing has started
//! reading (a refusal) is not drained: reading it would invite it (`100 Continue`), and
//! the connection ends with the refusal instead.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// The most of an unfinished request body read and thrown away after the proxy is
/// done with it, in bytes (4 MiB).
pub const DRAIN_BYTES: u64 = 4 << 20;

/// The longest an unfinished request body is read on after the proxy is done with it
/// (5 s).
pub const DRAIN_TIME: Duration = Duration::from_secs(5);

/// hyper's body of a request which, dropped before its end, is read on and thrown away
/// in a task of its own (within [`DRAIN_BYTES`] and [`DRAIN_TIME`]), so that the
/// exchange ends with the client's own end of it rather than with a reset (HTTP/2) or a
/// closed connection (HTTP/1). An HTTP/1 body is drained only once something has
/// started reading it.
#[derive(Debug)]
pub struct LingeringBody {
    /// Always `Some` until dropped.
    inner: Option<Incoming>,
    /// Whether it is drained when dropped unfinished: always for HTTP/2, once read from
    /// for HTTP/1.
    drain: bool,
    /// HTTP/1: a read starts the drain.
    http1: bool,
}

impl LingeringBody {
    /// Wrap hyper's body of a request of `version`.
    pub fn new(inner: Incoming, version: http::Version) -> LingeringBody {
        let http1 = version < http::Version::HTTP_2;
        LingeringBody {
            inner: Some(inner),
            drain: !http1,
            http1,
        }
    }
}

impl Body for LingeringBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if this.http1 {
            this.drain = true;
        }
        match this.inner.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.inner {
            Some(b) => b.size_hint(),
            None => http_body::SizeHint::with_exact(0),
        }
    }
}

impl Drop for LingeringBody {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if !self.drain || body.is_end_stream() {
            return;
        }
        // outside a runtime (none in the proxy) the body is dropped as it is
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(drain(body, DRAIN_BYTES, DRAIN_TIME));
        }
    }
}

/// Read `body` to its end and throw it away, for at most `max` bytes (give or take a
/// frame) and `time`; the number of bytes read, and whether the body ended (cleanly)
/// within the bounds.
pub(crate) async fn drain(mut body: Incoming, max: u64, time: Duration) -> (u64, bool) {
    let mut read = 0u64;
    let ended = tokio::time::timeout(time, async {
        while read <= max {
            match body.frame().await {
                None => return true,
                Some(Err(_)) => return false,
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        read += d.len() as u64;
                    }
                }
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    tracing::debug!(
        bytes = read,
        ended,
        "a request body read on after its answer"
    );
    (read, ended)
}
