//! Cost settled after the response, in the layer: a route with a [`SettleSpec`]
//! ([`Route::settle`](crate::Route::settle)) admits a request at its estimate, puts a
//! [`SettleHandle`] in the request's extensions, and settles the actual cost:
//!
//! 1. when the handler called [`SettleHandle::settle`] before its response came back,
//!    with that cost;
//! 2. else, when the route names a `cost_header` and the response carries it, with its
//!    value (a malformed value is logged and settles nothing: the estimate stays);
//! 3. else, when the route names a `cost_trailer`, a handler that streams its body wraps
//!    it in [`SettleOnTrailers`], which settles with the trailer's value once the body
//!    ends (the proxy does this for its upstream's body);
//! 4. else whenever the handler calls [`SettleHandle::settle`] later; a handle dropped
//!    unsettled keeps the estimate.
//!
//! In cases 1 and 2 the response's RateLimit fields show the settled state (the enforced
//! policies', as a request of cost 0 sees them); in the others they were sent at
//! admission. The rules of debt and refunds are the core's ([`floodgate_core::settle`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use floodgate_engine::headers::RateHeaders;
use floodgate_engine::settle::Reservation;
pub use floodgate_engine::settle::{SettleSpec, Settled};
use floodgate_engine::store::StoreError;
use http::HeaderName;
use http_body::{Body, Frame};

use crate::limiter::RateLimiter;

/// Why a settle did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    /// The reservation was settled already (by the handler, a header or a trailer).
    #[error("this request's cost was settled already")]
    AlreadySettled,
    /// The request was let through without a reservation (the store failed and the
    /// fault policy let it through): there is nothing to settle.
    #[error("the request was admitted without a reservation (the decision store failed)")]
    NotReserved,
    /// The store refused or failed the settle.
    #[error(transparent)]
    Store(#[from] StoreError),
}

enum State {
    Reserved(Reservation),
    Settling,
    Settled(Settled),
    None,
}

struct Shared {
    limiter: RateLimiter,
    /// The reserved policies' indices, in the order of the settlements.
    policies: Vec<usize>,
    spec: Arc<SettleSpec>,
    estimate: u64,
    state: Mutex<State>,
}

/// The settle handle of one admitted request, in its extensions. Clones share one
/// reservation, settled at most once.
#[derive(Clone)]
pub struct SettleHandle(Arc<Shared>);

impl std::fmt::Debug for SettleHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettleHandle")
            .field("estimate", &self.0.estimate)
            .finish_non_exhaustive()
    }
}

impl SettleHandle {
    pub(crate) fn new(
        limiter: RateLimiter,
        spec: Arc<SettleSpec>,
        estimate: u64,
        reservation: Option<Reservation>,
    ) -> SettleHandle {
        let policies = reservation
            .as_ref()
            .map_or_else(Vec::new, |r| r.parts().iter().map(|p| p.policy).collect());
        SettleHandle(Arc::new(Shared {
            limiter,
            policies,
            spec,
            estimate,
            state: Mutex::new(match reservation {
                Some(r) => State::Reserved(r),
                None => State::None,
            }),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The estimate the request was admitted at.
    pub fn estimate(&self) -> u64 {
        self.0.estimate
    }

    /// The route's trailer carrying the actual cost, if it names one.
    pub fn cost_trailer(&self) -> Option<&HeaderName> {
        self.0.spec.cost_trailer.as_ref()
    }

    /// Settle the request's reservation with its `actual` cost, under every policy it
    /// was reserved on. A second call answers [`SettleError::AlreadySettled`].
    pub async fn settle(&self, actual: u64) -> Result<Settled, SettleError> {
        let reservation = {
            let mut st = self.state();
            match std::mem::replace(&mut *st, State::Settling) {
                State::Reserved(r) => r,
                State::None => {
                    *st = State::None;
                    return Err(SettleError::NotReserved);
                }
                other => {
                    *st = other;
                    return Err(SettleError::AlreadySettled);
                }
            }
        };
        let metrics = self.0.limiter.metrics().clone();
        match self.0.limiter.store().settle(reservation, actual).await {
            Ok(settled) => {
                *self.state() = State::Settled(settled.clone());
                Ok(settled)
            }
            Err(e) => {
                metrics.store_error(&e);
                Err(SettleError::Store(e))
            }
        }
    }

    /// The settlements, once settled.
    pub fn settled(&self) -> Option<Settled> {
        match &*self.state() {
            State::Settled(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// Whether the reservation is still open (not settled, not being settled).
    pub fn is_open(&self) -> bool {
        matches!(&*self.state(), State::Reserved(_))
    }

    /// The RateLimit fields of the settled state.
    pub(crate) fn settled_headers(&self, settled: &Settled) -> RateHeaders {
        self.0.limiter.settled_headers(&self.0.policies, settled)
    }

    pub(crate) fn cost_header(&self) -> Option<&HeaderName> {
        self.0.spec.cost_header.as_ref()
    }
}

/// A body that settles its request's cost from a trailer when it ends (see the module
/// docs): the trailer named by the route's `cost_trailer`. A missing or malformed
/// trailer settles nothing (the estimate stays), and is logged.
pub struct SettleOnTrailers<B> {
    inner: B,
    handle: Option<SettleHandle>,
}

impl<B> SettleOnTrailers<B> {
    /// `inner`, settling `handle` from its trailers (no handle: `inner` as it is).
    pub fn new(inner: B, handle: Option<SettleHandle>) -> SettleOnTrailers<B> {
        let handle = handle.filter(|h| h.cost_trailer().is_some() && h.is_open());
        SettleOnTrailers { inner, handle }
    }
}

/// Settle `handle` from `trailers` (the route's `cost_trailer`), in a task of its own
/// (a body is polled, not awaited). Absent or malformed: logged, the estimate stays.
pub fn settle_from_trailers(handle: SettleHandle, trailers: &http::HeaderMap) {
    if !handle.is_open() {
        return; // settled already (by the handler, or from the response header)
    }
    let name = handle.cost_trailer().cloned();
    match name.and_then(|n| SettleSpec::cost_in(&n, trailers)) {
        Some(Ok(actual)) => {
            tokio::spawn(async move {
                if let Err(e) = handle.settle(actual).await {
                    tracing::warn!(error = %e, "settling the cost from a trailer failed");
                }
            });
        }
        Some(Err(e)) => tracing::warn!(error = %e, "cost trailer: the estimate stays"),
        None => tracing::debug!("no cost trailer: the estimate stays"),
    }
}

impl<B: Body + Unpin> Body for SettleOnTrailers<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &frame
            && let Some(trailers) = f.trailers_ref()
            && let Some(handle) = self.handle.take()
        {
            settle_from_trailers(handle, trailers);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
