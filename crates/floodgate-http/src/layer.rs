//! The tower [`Layer`] and [`Service`]: [`RateLimitLayer`] wraps any
//! `Service<http::Request<B>>` (an axum `Router`, a hyper service via `TowerToHyperService`,
//! a tonic server) in a [`RateLimitService`].
//!
//! Responses become `Response<Either<LeaseBody<B>, Full<Bytes>>>`: the inner service's
//! body (holding the request's in-flight leases, released when it ends or is dropped:
//! [`LeaseBody`]), or
//! floodgate's own short body for denials (for a gRPC call, a trailers-only gRPC status:
//! [`ReplyFormat::Grpc`](floodgate_engine::deny::ReplyFormat::Grpc)). Every clone of the layer and
//! the service shares one [`RateLimiter`].
//!
//! With the in-process store the decision is taken when the service is called (the
//! returned future only forwards, or holds a delayed request); with a store that waits
//! (Redis), when the future is first polled.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use floodgate_engine::adaptive::{AdaptivePermit, at_head};
use floodgate_engine::leases::LeaseBody;
use http::{Request, Response};
use http_body_util::{Either, Full};
use tower_layer::Layer;
use tower_service::Service;

use crate::limiter::{Outcome, Prepared, RateLimiter};
use crate::recorded::RecordedDecision;
use crate::settle::SettleHandle;

/// Applies a [`RateLimiter`] to a service.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limiter: RateLimiter,
}

impl RateLimitLayer {
    /// A layer for `limiter`.
    pub fn new(limiter: RateLimiter) -> Self {
        RateLimitLayer { limiter }
    }

    /// The shared limiter.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;
    fn layer(&self, inner: S) -> RateLimitService<S> {
        RateLimitService {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// A service that rate-limits requests before passing them to `S`.
#[derive(Clone, Debug)]
pub struct RateLimitService<S> {
    inner: S,
    limiter: RateLimiter,
}

impl<S> RateLimitService<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, limiter: RateLimiter) -> Self {
        RateLimitService { inner, limiter }
    }
}

/// The response future of [`RateLimitService`].
pub type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<Either<LeaseBody<ResBody>, Full<Bytes>>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // the clone is not ready; the readied service goes into the future (tower's rule)
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let plan = match self.limiter.prepare(&req) {
            Prepared::Bypass(decided) => {
                return Box::pin(async move {
                    let mut resp = inner.call(req).await?;
                    if let Some(d) = decided {
                        resp.extensions_mut().insert(d);
                    }
                    Ok(resp.map(|b| Either::Left(LeaseBody::plain(b))))
                });
            }
            Prepared::Respond(r) => return Box::pin(async move { Ok(r.map(Either::Right)) }),
            Prepared::Check(plan) if plan.settle.is_some() => {
                let limiter = self.limiter.clone();
                return Box::pin(settled_call(limiter, plan, inner, req));
            }
            Prepared::Check(plan) => plan,
        };
        // the in-process store decides here: no future of its own, and no clone of the
        // limiter (whose shared count every clone would bounce between the cores) unless
        // the request is to be held
        // (a plan taking in-flight leases may wait in a queue: it takes the other way)
        let outcome = match self.limiter.local_store().filter(|_| !plan.has_leases()) {
            Some(local) => match self.limiter.check_now(local, plan, req.headers()) {
                Outcome::Respond(r) => return Box::pin(async move { Ok(r.map(Either::Right)) }),
                Outcome::Pass {
                    headers,
                    delay,
                    decided,
                    ..
                } if delay.is_zero() => {
                    // called here: the future holds the inner one, not the request
                    let forwarded = inner.call(req);
                    return Box::pin(async move {
                        let mut resp = forwarded.await?;
                        headers.insert_into(resp.headers_mut());
                        insert_decided(&mut resp, decided);
                        Ok(resp.map(|b| Either::Left(LeaseBody::plain(b))))
                    });
                }
                held => Ok(held),
            },
            None => Err(plan),
        };
        let limiter = self.limiter.clone();
        Box::pin(async move {
            // another store's future is boxed, so that this future's size is not the sum
            // of both
            let outcome = match outcome {
                Ok(decided) => decided,
                Err(plan) => Box::pin(limiter.check(plan, req.headers())).await,
            };
            match outcome {
                Outcome::Respond(r) => Ok(r.map(Either::Right)),
                Outcome::Pass {
                    headers,
                    delay,
                    leases,
                    permits,
                    decided,
                } => {
                    let mut permits = permits;
                    if !delay.is_zero() {
                        if !limiter.hold(delay).await {
                            let mut r = limiter.queue_full_response(req.headers());
                            headers.insert_into(r.headers_mut());
                            insert_decided(&mut r, decided.map(RecordedDecision::limited));
                            return Ok(r.map(Either::Right));
                        }
                        // the hold is not the backend's latency
                        permits.iter_mut().for_each(AdaptivePermit::restart);
                    }
                    // the leases are held until the response body ends or is dropped
                    // (the client went away, a timeout): this future holds them until
                    // the inner service answers, the body after; the adaptive permits
                    // are released at the head or held by the body likewise
                    let (mut resp, permits) = match inner.call(req).await {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            (r, at_head(permits, Some(status)))
                        }
                        Err(e) => {
                            at_head(permits, None);
                            return Err(e);
                        }
                    };
                    headers.insert_into(resp.headers_mut());
                    insert_decided(&mut resp, decided);
                    Ok(resp.map(|b| Either::Left(LeaseBody::new(b, leases).with_permits(permits))))
                }
            }
        })
    }
}

/// A request on a route that settles its cost after the response: reserve at the
/// estimate, hand the service a [`SettleHandle`], settle from the handler or the response
/// header, and show the settled state in the RateLimit fields (see [`crate::settle`]).
async fn settled_call<S, ReqBody, ResBody>(
    limiter: RateLimiter,
    mut plan: crate::limiter::Plan,
    mut inner: S,
    mut req: Request<ReqBody>,
) -> Result<Response<Either<LeaseBody<ResBody>, Full<Bytes>>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    let (spec, estimate) = plan.settle.take().expect("a settling plan");
    let (outcome, reservation) = limiter.reserve(plan, req.headers()).await;
    let (headers, delay, leases, mut permits, decided) = match outcome {
        Outcome::Respond(r) => return Ok(r.map(Either::Right)),
        Outcome::Pass {
            headers,
            delay,
            leases,
            permits,
            decided,
        } => (headers, delay, leases, permits, decided),
    };
    if !delay.is_zero() && !limiter.hold(delay).await {
        // not forwarded: the reservation comes back whole
        if let Some(r) = reservation {
            let _ = limiter.store().settle(r, 0).await;
        }
        let mut r = limiter.queue_full_response(req.headers());
        headers.insert_into(r.headers_mut());
        insert_decided(&mut r, decided.map(RecordedDecision::limited));
        return Ok(r.map(Either::Right));
    }
    if !delay.is_zero() {
        // the hold is not the backend's latency
        permits.iter_mut().for_each(AdaptivePermit::restart);
    }
    let handle = SettleHandle::new(limiter, spec, estimate, reservation);
    req.extensions_mut().insert(handle.clone());
    let (mut resp, permits) = match inner.call(req).await {
        Ok(r) => {
            let status = r.status().as_u16();
            (r, at_head(permits, Some(status)))
        }
        Err(e) => {
            at_head(permits, None);
            return Err(e);
        }
    };
    let settled = match handle.settled() {
        Some(s) => Some(s),
        None => crate::settle::settle_from_head(&handle, resp.headers()).await,
    };
    match settled {
        Some(s) => handle.settled_headers(&s).insert_into(resp.headers_mut()),
        None => headers.insert_into(resp.headers_mut()),
    }
    insert_decided(&mut resp, decided);
    // the leases (and end-mode permits) are held until the response body ends or is
    // dropped
    Ok(resp.map(|b| Either::Left(LeaseBody::new(b, leases).with_permits(permits))))
}

/// Put the recorded decision, if any, in `resp`'s extensions.
fn insert_decided<B>(resp: &mut Response<B>, decided: Option<RecordedDecision>) {
    if let Some(d) = decided {
        resp.extensions_mut().insert(d);
    }
}

impl RateLimiter {
    /// The tower layer applying this limiter.
    pub fn layer(&self) -> RateLimitLayer {
        RateLimitLayer::new(self.clone())
    }
}
