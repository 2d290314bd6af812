//! The client's request body as the proxy's services see it ([`RequestBody`]), and the
//! same on its way upstream, watched for the client's failure ([`ClientBody`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;

use crate::drain::LingeringBody;

/// A client's request body as the proxy's service receives it: none (a request read by
/// the proxy's own HTTP/1 path, which only takes requests without a body), or hyper's.
#[derive(Debug)]
pub enum RequestBody {
    /// No body.
    Empty,
    /// The body as hyper reads it (any request hyper's server read), read on after its
    /// answer when the client is still sending it ([`LingeringBody`]).
    Incoming(LingeringBody),
}

impl RequestBody {
    /// The body of a request of `version` hyper's server read.
    pub fn from_hyper(body: Incoming, version: http::Version) -> RequestBody {
        RequestBody::Incoming(LingeringBody::new(body, version))
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

/// How a client's request body on its way upstream has gone, as [`ClientBody`] tells
/// the forwarder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyState {
    /// Still being read (or not yet), the last read having given bytes.
    Open,
    /// Still being read, the last read having found nothing: the client owes bytes.
    Waiting,
    /// Read to its end.
    Ended,
    /// Reading it failed on the client's side (malformed framing, the client hung up).
    Failed,
    /// The client sent nothing for the body timeout.
    TimedOut,
}

/// Where a [`ClientBody`] records its [`BodyState`].
#[derive(Debug, Default)]
pub(crate) struct BodyWatch(AtomicU8);

impl BodyWatch {
    pub(crate) fn state(&self) -> BodyState {
        match self.0.load(Ordering::Relaxed) {
            0 => BodyState::Open,
            1 => BodyState::Ended,
            2 => BodyState::Failed,
            3 => BodyState::Waiting,
            _ => BodyState::TimedOut,
        }
    }

    fn set(&self, s: BodyState) {
        let v = match s {
            BodyState::Open => 0,
            BodyState::Ended => 1,
            BodyState::Failed => 2,
            BodyState::Waiting => 3,
            BodyState::TimedOut => 4,
        };
        self.0.store(v, Ordering::Relaxed);
    }
}

/// Why a [`ClientBody`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// Reading it failed (hyper's error).
    #[error("request body: {0}")]
    Read(#[from] hyper::Error),
    /// The client sent nothing for the body timeout.
    #[error("request body: nothing received for {0:?}")]
    TimedOut(Duration),
}

/// The client's request body on its way upstream, watched: when reading it fails
/// (malformed framing, the client hanging up) or the client sends nothing of it for the
/// body timeout, its watch says so, so that the failed upstream call is not
/// blamed on the upstream.
#[derive(Debug)]
pub struct ClientBody {
    inner: RequestBody,
    watch: Arc<BodyWatch>,
    /// The body timeout: how long a poll may find nothing before the body fails.
    idle: Option<Duration>,
    /// Armed when the body has nothing to give; dropped on progress.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ClientBody {
    /// Watch `inner`, which fails when nothing of it comes for `idle` (`None`: never).
    pub(crate) fn watch(
        inner: RequestBody,
        idle: Option<Duration>,
    ) -> (ClientBody, Arc<BodyWatch>) {
        let watch = Arc::new(BodyWatch::default());
        (
            ClientBody {
                inner,
                watch: watch.clone(),
                idle,
                stall: None,
            },
            watch,
        )
    }

    /// The body itself.
    pub(crate) fn into_inner(self) -> RequestBody {
        self.inner
    }
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, ClientBodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                this.watch.set(BodyState::Failed);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.stall = None;
                this.watch.set(BodyState::Ended);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(f))) => {
                this.stall = None;
                this.watch.set(if this.inner.is_end_stream() {
                    BodyState::Ended
                } else {
                    BodyState::Open
                });
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Pending => {
                this.watch.set(BodyState::Waiting);
                let Some(idle) = this.idle else {
                    return Poll::Pending;
                };
                let stall = this
                    .stall
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match stall.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.watch.set(BodyState::TimedOut);
                        Poll::Ready(Some(Err(ClientBodyError::TimedOut(idle))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
