//! A tower [`Layer`] for hyper-based clients (e.g. `hyper_util`'s legacy `Client`): pacing,
//! retries with backoff under the budget, and optional adaptive concurrency limiting.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Empty, Full};
use tower_layer::Layer;
use tower_service::Service;

use crate::polite::{Attempt, Polite, Verdict, host_key};

/// A request body that can (or cannot) be sent again. Only requests whose body replays are
/// retried: empty and buffered bodies ([`Full`], [`Empty`], `String`, `Vec<u8>`, [`Bytes`]);
/// wrap a streaming body in [`Streaming`] to send it once, never retried.
pub trait ReplayBody: Sized {
    /// A copy to send again, or `None` when the body cannot be replayed.
    fn try_replay(&self) -> Option<Self>;
}

impl<D: Clone> ReplayBody for Full<D> {
    fn try_replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<D> ReplayBody for Empty<D> {
    fn try_replay(&self) -> Option<Self> {
        Some(Empty::new())
    }
}

impl ReplayBody for String {
    fn try_replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl ReplayBody for Vec<u8> {
    fn try_replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl ReplayBody for Bytes {
    fn try_replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

pin_project_lite::pin_project! {
    /// A body that is sent once and never retried (a stream).
    #[derive(Debug)]
    pub struct Streaming<B> {
        #[pin]
        inner: B,
    }
}

impl<B> Streaming<B> {
    /// Wrap a body.
    pub fn new(inner: B) -> Self {
        Streaming { inner }
    }
}

impl<B: http_body::Body> http_body::Body for Streaming<B> {
    type Data = B::Data;
    type Error = B::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B> ReplayBody for Streaming<B> {
    fn try_replay(&self) -> Option<Self> {
        None
    }
}

/// The layer: wrap a client service with [`PoliteLayer::new`].
///
/// ```no_run
/// use bytes::Bytes;
/// use floodgate_client::{Polite, PoliteConfig, PoliteLayer};
/// use http_body_util::Empty;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let hyper_client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
/// let engine = Polite::new(PoliteConfig::default())?;
/// let mut client = ServiceBuilder::new().layer(PoliteLayer::new(engine.clone())).service(hyper_client);
/// let req = http::Request::get("http://127.0.0.1:8080/").body(Empty::new())?;
/// let resp = client.ready().await?.call(req).await?;
/// println!("{} after {} attempts", resp.status(), engine.stats().attempts);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PoliteLayer {
    engine: Polite,
}

impl PoliteLayer {
    /// A layer sharing `engine` (clone the engine to read its stats).
    pub fn new(engine: Polite) -> Self {
        PoliteLayer { engine }
    }
}

impl<S> Layer<S> for PoliteLayer {
    type Service = PoliteService<S>;
    fn layer(&self, inner: S) -> PoliteService<S> {
        PoliteService {
            inner,
            engine: self.engine.clone(),
        }
    }
}

/// The service made by [`PoliteLayer`]. Its error type is the inner service's: it adds
/// waits and retries, never errors of its own.
#[derive(Debug, Clone)]
pub struct PoliteService<S> {
    inner: S,
    engine: Polite,
}

impl<S, B, RB> Service<Request<B>> for PoliteService<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: ReplayBody + Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Readiness of the inner service is awaited per attempt inside the future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut svc = std::mem::replace(&mut self.inner, clone);
        let engine = self.engine.clone();
        Box::pin(async move {
            let host = host_key(req.uri());
            let (parts, body) = req.into_parts();
            // A replayable body keeps a template to copy for each retry.
            let template = body.try_replay();
            let mut attempt =
                Attempt::first(&engine, &parts.method, &parts.headers, template.is_some());
            let mut next_body = body;
            engine.begin();
            loop {
                let sending = engine.before_send(&host).await;
                let req = Request::from_parts(parts.clone(), next_body);
                poll_fn(|cx| svc.poll_ready(cx)).await?;
                let res = svc.call(req).await;
                let reply = res.as_ref().ok().map(|r| (r.status(), r.headers()));
                let verdict = engine.after_send(&host, sending, reply, &mut attempt);
                let Verdict::RetryAfter(w) = verdict else {
                    return res;
                };
                let Some(copy) = template.as_ref().and_then(ReplayBody::try_replay) else {
                    return res;
                };
                next_body = copy;
                drop(res);
                tokio::time::sleep(w).await;
            }
        })
    }
}
