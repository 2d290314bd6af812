//! Cost settled after the response, in the layer: a route with a [`SettleSpec`]
//! ([`Route::settle`](crate::Route::settle)) admits a request at its estimate, puts a
//! [`SettleHandle`] in the request's extensions, and settles the actual cost:
//!
//! 1. when the handler called [`SettleHandle::settle`] before its response came back,
//!    with that cost;
//! 2. else, when the route names a `cost_header` and the response carries it, with its
//!    value;
//! 3. else, when the route names a `cost_trailer`, a handler that streams its body wraps
//!    it in [`SettleOnTrailers`], which settles with the trailer's value once the body
//!    ends (the proxy does this for its upstream's body);
//! 4. else whenever the handler calls [`SettleHandle::settle`] later.
//!
//! **An exchange the client abandons is still charged what it cost.** A
//! [`SettleOnTrailers`] dropped before its body ended (the client closed the
//! connection, or a timeout dropped the response) goes on reading the body in a task
//! of its own, discarding it, for at most [`SettleSpec::abort_drain_timeout`] and
//! [`SettleSpec::abort_drain_bytes`], and settles with the trailer's cost when the
//! trailer comes (as nginx's `proxy_ignore_client_abort` lets the upstream finish).
//!
//! **A cost that never arrives is charged the abort cost**
//! ([`SettleSpec::abort_cost`], by default the estimate): when the drain passes a bound
//! or the body fails, when the header or trailer is missing or malformed, and when the
//! last clone of a [`SettleHandle`] is dropped with its reservation still open (the
//! handler dropped it, or the client went away before the response head and the
//! handler's future was dropped with it). With the default, the reservation keeps its
//! estimate and no store call is made.
//!
//! In cases 1 and 2 the response's RateLimit fields show the settled state (the enforced
//! policies', as a request of cost 0 sees them); in the others they were sent at
//! admission. The rules of debt and refunds are the core's ([`floodgate_core::settle`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Buf;
use floodgate_engine::StoreErrorKind;
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

impl Drop for Shared {
    /// The last clone of a handle gone with its reservation open: the cost never
    /// arrived, so the reservation is settled at the route's abort cost (in a task of
    /// its own; none when that cost is the estimate, which the reservation holds).
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let State::Reserved(reservation) = std::mem::replace(state, State::None) else {
            return;
        };
        let cost = self.spec.abort_cost_for(self.estimate);
        if cost == self.estimate {
            tracing::debug!(estimate = cost, "no cost reported: the estimate stays");
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                abort_cost = cost,
                "no cost reported and no runtime to settle the abort cost on: the estimate stays"
            );
            return;
        };
        let limiter = self.limiter.clone();
        rt.spawn(async move {
            match limiter.store().settle(reservation, cost).await {
                Ok(_) => tracing::debug!(abort_cost = cost, "no cost reported: abort cost charged"),
                Err(e) => {
                    limiter.metrics().store_error(&e);
                    tracing::warn!(error = %e, "settling the abort cost failed");
                }
            }
        });
    }
}

/// The settle handle of one admitted request, in its extensions. Clones share one
/// reservation, settled at most once; the last clone dropped with the reservation
/// still open settles it at the route's abort cost ([`SettleSpec::abort_cost`]).
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

    /// What the request is charged if its actual cost never arrives
    /// ([`SettleSpec::abort_cost`], else the estimate).
    pub fn abort_cost(&self) -> u64 {
        self.0.spec.abort_cost_for(self.0.estimate)
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
        // the settle runs to its end even when this future is dropped meanwhile (the
        // client left during a store round trip): the in-process store answers on the
        // first poll; any other finishes in a task of its own
        let shared = self.0.clone();
        let mut settling = Box::pin(async move {
            let settled = shared.limiter.store().settle(reservation, actual).await;
            match &settled {
                Ok(s) => {
                    *shared.state.lock().unwrap_or_else(|p| p.into_inner()) =
                        State::Settled(s.clone())
                }
                Err(e) => shared.limiter.metrics().store_error(e),
            }
            settled
        });
        let settled = match std::future::poll_fn(|cx| Poll::Ready(settling.as_mut().poll(cx))).await
        {
            Poll::Ready(settled) => settled,
            Poll::Pending => tokio::spawn(settling).await.unwrap_or_else(|e| {
                Err(StoreError {
                    store: "settle",
                    kind: StoreErrorKind::Unavailable(format!("the settle task ended: {e}")),
                })
            }),
        };
        settled.map_err(SettleError::Store)
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

    /// The response header the route settles from (its `cost_header`), if it names one.
    pub fn cost_header(&self) -> Option<&HeaderName> {
        self.0.spec.cost_header.as_ref()
    }
}

/// Settle `handle` from a response head's cost header (the route's `cost_header`) when
/// the head carries one and the reservation is open: the settlements, or `None` when
/// there is no header, it is malformed (logged), or the settle failed (logged).
pub async fn settle_from_head(handle: &SettleHandle, headers: &http::HeaderMap) -> Option<Settled> {
    if !handle.is_open() {
        return None;
    }
    match SettleSpec::cost_in(handle.cost_header()?, headers)? {
        Ok(actual) => match handle.settle(actual).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "settling the cost from the response header failed");
                None
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "cost header: not settled from it (a trailer, the handler or the abort cost settles)");
            None
        }
    }
}

/// A response whose client left before its head came (the proxy carries such an
/// exchange on for a route that settles): settled from its cost header as a response
/// sent would be, then dropped, so that a body settling from a trailer is read on to it
/// ([`SettleOnTrailers`]); with no cost to come, the last handle gone charges the abort
/// cost.
pub async fn settle_unclaimed<B>(handle: SettleHandle, resp: http::Response<B>) {
    let metrics = handle.0.limiter.metrics().clone();
    if settle_from_head(&handle, resp.headers()).await.is_some() {
        metrics.settle_abandoned("settled");
    } else if handle.is_open() && handle.cost_trailer().is_none() {
        metrics.settle_abandoned("abort_cost");
    }
    // a body settling from a trailer is read on, and counted, once dropped
    drop(resp);
}

/// A body that settles its request's cost from a trailer when it ends (see the module
/// docs): the trailer named by the route's `cost_trailer`. A missing or malformed
/// trailer, or a body that fails, is logged and charged the abort cost. Dropped before
/// its end (the client left), it reads the rest of the body in a task of its own, within
/// the route's drain bounds, and settles from the trailer all the same.
pub struct SettleOnTrailers<B> {
    /// `None` once dropped.
    inner: Option<B>,
    /// Taken when the trailer came, the body ended or failed (then dropped: the abort
    /// cost), or when the body is handed to the drain.
    handle: Option<SettleHandle>,
    /// Reads an abandoned body to its trailer, then settles ([`drain_abandoned`]).
    drain: fn(B, SettleHandle),
}

impl<B> SettleOnTrailers<B>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: std::fmt::Display,
{
    /// `inner`, settling `handle` from its trailers (no handle: `inner` as it is).
    pub fn new(inner: B, handle: Option<SettleHandle>) -> SettleOnTrailers<B> {
        let handle = handle.filter(|h| h.cost_trailer().is_some() && h.is_open());
        SettleOnTrailers {
            inner: Some(inner),
            handle,
            drain: drain_abandoned::<B>,
        }
    }
}

impl<B> SettleOnTrailers<B> {
    /// Settle `handle` from this body's trailers (replacing any handle given before;
    /// one without a `cost_trailer`, or settled already, is ignored).
    pub fn settle_with(&mut self, handle: SettleHandle) {
        if handle.cost_trailer().is_some() && handle.is_open() {
            self.handle = Some(handle);
        }
    }

    /// The body inside.
    pub fn get_ref(&self) -> &B {
        self.inner
            .as_ref()
            .expect("the body is there until dropped")
    }
}

/// The cost a trailer (or header) reports for `handle`'s route, or why none: absent or
/// malformed, logged.
fn reported(handle: &SettleHandle, trailers: &http::HeaderMap) -> Option<u64> {
    let name = handle.cost_trailer()?;
    match SettleSpec::cost_in(name, trailers) {
        Some(Ok(actual)) => Some(actual),
        Some(Err(e)) => {
            tracing::warn!(error = %e, abort_cost = handle.abort_cost(), "cost trailer: the abort cost is charged");
            None
        }
        None => {
            tracing::debug!(
                abort_cost = handle.abort_cost(),
                "no cost trailer: the abort cost is charged"
            );
            None
        }
    }
}

/// Settle `handle` with `actual` (awaited where a task already runs): whether it was.
async fn settle_reported(handle: SettleHandle, actual: u64) -> bool {
    match handle.settle(actual).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "settling the cost from a trailer failed");
            false
        }
    }
}

/// Settle `handle` from `trailers` (the route's `cost_trailer`), in a task of its own
/// (a body is polled, not awaited). Absent or malformed: logged, the handle is dropped
/// (the abort cost).
pub fn settle_from_trailers(handle: SettleHandle, trailers: &http::HeaderMap) {
    if !handle.is_open() {
        return; // settled already (by the handler, or from the response header)
    }
    if let Some(actual) = reported(&handle, trailers) {
        tokio::spawn(async move {
            settle_reported(handle, actual).await;
        });
    }
}

/// An abandoned body: read on in a task of its own, discarding its data, until its
/// trailer (settled with its cost), its end without one, a failure, or a bound of the
/// route ([`SettleSpec::abort_drain_timeout`], [`SettleSpec::abort_drain_bytes`]);
/// all but the first charge the abort cost, as `handle` is dropped. A bound passed drops
/// the body, and with it its upstream connection.
fn drain_abandoned<B>(body: B, handle: SettleHandle)
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: std::fmt::Display,
{
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            "a response was abandoned with no runtime to read it on: its cost is not read"
        );
        return;
    };
    let spec = handle.0.spec.clone();
    let metrics = handle.0.limiter.metrics().clone();
    rt.spawn(async move {
        let read = read_to_trailers(body, spec.abort_drain_bytes);
        let trailers = match tokio::time::timeout(spec.abort_drain_timeout, read).await {
            Ok(Ok(t)) => t,
            Ok(Err(why)) => {
                tracing::debug!(%why, abort_cost = handle.abort_cost(), "abandoned response: the abort cost is charged");
                metrics.settle_abandoned("abort_cost");
                return;
            }
            Err(_) => {
                tracing::debug!(timeout = ?spec.abort_drain_timeout, abort_cost = handle.abort_cost(), "abandoned response still going: the abort cost is charged");
                metrics.settle_abandoned("abort_cost");
                return;
            }
        };
        match reported(&handle, &trailers) {
            Some(actual) => {
                if settle_reported(handle, actual).await {
                    metrics.settle_abandoned("settled");
                }
            }
            None => metrics.settle_abandoned("abort_cost"),
        }
    });
}

/// `body`'s trailers (empty when it ended without any), stopping once more than `limit`
/// data octets have come; the failure or the bound passed, as text, otherwise.
async fn read_to_trailers<B>(mut body: B, limit: u64) -> Result<http::HeaderMap, String>
where
    B: Body + Unpin,
    B::Error: std::fmt::Display,
{
    let mut read: u64 = 0;
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Ok(http::HeaderMap::new()),
            Some(Err(e)) => return Err(format!("the body failed: {e}")),
            Some(Ok(f)) => match f.into_trailers() {
                Ok(t) => return Ok(t),
                Err(f) => {
                    let n = f.data_ref().map_or(0, |d| d.remaining() as u64);
                    read = read.saturating_add(n);
                    if read > limit {
                        return Err(format!("more than {limit} octets of body"));
                    }
                }
            },
        }
    }
}

impl<B: Body + Unpin> Body for SettleOnTrailers<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let inner = this
            .inner
            .as_mut()
            .expect("the body is there until dropped");
        let frame = Pin::new(inner).poll_frame(cx);
        if this.handle.is_some() {
            match &frame {
                Poll::Ready(Some(Ok(f))) => {
                    if let Some(trailers) = f.trailers_ref()
                        && let Some(handle) = this.handle.take()
                    {
                        settle_from_trailers(handle, trailers);
                    }
                }
                // ended without a trailer, or failed: the abort cost, as the handle goes
                Poll::Ready(_) => this.handle = None,
                Poll::Pending => {}
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map_or_else(http_body::SizeHint::default, Body::size_hint)
    }
}

impl<B> Drop for SettleOnTrailers<B> {
    fn drop(&mut self) {
        // abandoned before its end, with the cost still to come: read on
        if let (Some(handle), Some(inner)) = (self.handle.take(), self.inner.take())
            && handle.is_open()
        {
            (self.drain)(inner, handle);
        }
    }
}
