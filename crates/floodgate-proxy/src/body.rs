//! The client's request body as the proxy's services see it ([`RequestBody`]), and the
//! same on its way upstream, watched for the client's failure ([`ClientBody`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Incoming;

/// A client's request body as the proxy's service receives it: none (a request read by
/// the proxy's own HTTP/1 path, which only takes requests without a body), or hyper's.
#[derive(Debug)]
pub enum RequestBody {
    /// No body.
    Empty,
    /// The body as hyper reads it (any request hyper's server read).
    Incoming(Incoming),
}

impl From<Incoming> for RequestBody {
    fn from(b: Incoming) -> Self {
        RequestBody::Incoming(b)
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Incoming(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Incoming(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            RequestBody::Empty => http_body::SizeHint::with_exact(0),
            RequestBody::Incoming(b) => b.size_hint(),
        }
    }
}

/// The client's request body on its way upstream, watched: when reading it fails
/// (malformed framing, the client hanging up), `failed` is set, so that the failed
/// upstream call is not blamed on the upstream.
#[derive(Debug)]
pub struct ClientBody {
    inner: RequestBody,
    failed: Arc<AtomicBool>,
}

impl ClientBody {
    /// Watch `inner`; the flag is set when reading it fails.
    pub(crate) fn watch(inner: RequestBody) -> (ClientBody, Arc<AtomicBool>) {
        let failed = Arc::new(AtomicBool::new(false));
        (
            ClientBody {
                inner,
                failed: failed.clone(),
            },
            failed,
        )
    }

    /// The body itself.
    pub(crate) fn into_inner(self) -> RequestBody {
        self.inner
    }
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &r {
            this.failed.store(true, Ordering::Relaxed);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
