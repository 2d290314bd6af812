//! Server-side load shedding: an [`AdaptiveLimiter`] in front of a handler.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use super::{AdaptiveLimiter, Outcome, Permit};

/// Wraps a service so that at most `limiter.limit()` requests run at once; the rest get an
/// immediate `503 Service Unavailable` with an empty (`Default`) body. Responses with a 5xx
/// status, and inner errors, are reported as drops; other responses as successes.
#[derive(Debug, Clone)]
pub struct LoadShedLayer {
    limiter: AdaptiveLimiter,
}

impl LoadShedLayer {
    /// Shed with `limiter` (share it to observe `limit()` and `inflight()`).
    pub fn new(limiter: AdaptiveLimiter) -> Self {
        LoadShedLayer { limiter }
    }
}

impl<S> Layer<S> for LoadShedLayer {
    type Service = LoadShed<S>;
    fn layer(&self, inner: S) -> LoadShed<S> {
        LoadShed {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// The service made by [`LoadShedLayer`].
#[derive(Debug, Clone)]
pub struct LoadShed<S> {
    inner: S,
    limiter: AdaptiveLimiter,
}

impl<S, B, RB> Service<Request<B>> for LoadShed<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Default + Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(permit) = self.limiter.try_acquire() else {
            let mut resp = Response::new(RB::default());
            *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            return Box::pin(std::future::ready(Ok(resp)));
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            settle(permit, res.as_ref().map(|r| r.status()).ok());
            res
        })
    }
}

fn settle(permit: Permit, status: Option<StatusCode>) {
    let outcome = match status {
        Some(s) if s.is_server_error() => Outcome::Dropped,
        Some(_) => Outcome::Success,
        None => Outcome::Dropped,
    };
    permit.release(outcome);
}
