//! A request decided whole, for a surface that serves the request itself (the Python
//! module's `RequestLimiter`): [`RateLimiter::decide_request`] runs what the tower layer
//! runs before it calls its service (keys, policies, leases, the verdict with its headers
//! or denial, the reservation of a route that settles its cost after the response, the
//! decision an access log records) and leaves the holding of a delayed request and the
//! call to the caller. [`RateLimiter::decide_request_now`] decides the same without a
//! future where nothing waits (the in-process store, no lease, no reservation), and
//! hands back the prepared request otherwise ([`RateLimiter::decide_pending`]).

use std::time::Duration;

use floodgate_engine::headers::RateHeaders;
use floodgate_engine::settle::Settled;
use http::{HeaderMap, Request};

use crate::limiter::{Leases, Outcome, Permits, Plan, Prepared, RateLimiter, Verdict};
use crate::recorded::RecordedDecision;
use crate::settle::SettleHandle;

/// What [`RateLimiter::decide_request`] decided about a request.
pub struct RequestDecision {
    /// Pass (headers to add, delay to hold first, leases and permits to hold while the
    /// request runs) or the response to send instead.
    pub verdict: Verdict,
    /// A route that settles its cost after the response, the request admitted: the
    /// handle to settle its actual cost with ([`SettleHandle::settle`]); dropped open,
    /// the route's abort cost is charged.
    pub settle: Option<SettleHandle>,
    /// The decision as an access log shows it, when the limiter records decisions
    /// ([`RateLimiterBuilder::record_decisions`](crate::RateLimiterBuilder::record_decisions)).
    pub recorded: Option<RecordedDecision>,
}

impl RateLimiter {
    /// Decide on `req` as the layer does before calling its service, the request only
    /// read. A route with a settle spec reserves at the estimate and returns the
    /// [`SettleHandle`] of the reservation.
    pub async fn decide_request<B>(&self, req: &Request<B>) -> RequestDecision {
        match self.decide_request_now(req) {
            Ok(now) => now.into_decision(),
            Err(pending) => self.decide_pending(pending, req).await.into_decision(),
        }
    }

    /// Decide on `req` as [`decide_request`](Self::decide_request) does where that needs
    /// no wait: a request no policy applies to, one answered from its keys (a missing
    /// key, say), and every plan on the in-process store that holds no lease and reserves
    /// nothing. Otherwise the prepared request, to finish with
    /// [`decide_pending`](Self::decide_pending) (the request is prepared once, counted
    /// once). The same decision as `decide_request`, without a future to build and drive.
    pub fn decide_request_now<B>(
        &self,
        req: &Request<B>,
    ) -> Result<DecidedRequest, PendingRequest> {
        let plan = match self.prepare(req) {
            Prepared::Bypass(recorded) => {
                return Ok(DecidedRequest::Plain {
                    headers: RateHeaders::default(),
                    recorded,
                });
            }
            Prepared::Respond(r) => {
                let recorded = r.extensions().get::<RecordedDecision>().cloned();
                return Ok(DecidedRequest::Decided(RequestDecision {
                    verdict: Verdict::Respond(r),
                    settle: None,
                    recorded,
                }));
            }
            Prepared::Check(plan) => plan,
        };
        // the in-process store without leases decides at once, as the layer does
        match self.local_store() {
            Some(local) if plan.settle.is_none() && !plan.has_leases() => Ok(DecidedRequest::of(
                self.check_now(local, plan, req.headers()),
            )),
            // boxed: the plan is large, and a wait costs far more than its allocation
            _ => Err(PendingRequest {
                plan: Box::new(plan),
            }),
        }
    }

    /// Finish deciding a request [`decide_request_now`](Self::decide_request_now) left
    /// pending: its leases, the store's round trip, the reservation of a route that
    /// settles its cost after the response. `req` is the request that was prepared. A
    /// pass holding nothing (no reservation among them) is plain, as at once.
    pub async fn decide_pending<B>(
        &self,
        pending: PendingRequest,
        req: &Request<B>,
    ) -> DecidedRequest {
        let mut plan = *pending.plan;
        let (outcome, settle) = match plan.settle.take() {
            Some((spec, estimate)) => {
                let (outcome, reservation) = self.reserve(plan, req.headers()).await;
                let handle = matches!(outcome, Outcome::Pass { .. })
                    .then(|| SettleHandle::new(self.clone(), spec, estimate, reservation));
                (outcome, handle)
            }
            None => (self.check(plan, req.headers()).await, None),
        };
        match settle {
            None => DecidedRequest::of(outcome),
            Some(handle) => {
                let mut decision = DecidedRequest::of(outcome).into_decision();
                decision.settle = Some(handle);
                DecidedRequest::Decided(decision)
            }
        }
    }
}

/// A request decided, at once ([`RateLimiter::decide_request_now`]) or after its wait
/// ([`RateLimiter::decide_pending`]).
pub enum DecidedRequest {
    /// Passed holding nothing (no delay, lease, permit or reservation): the fields to
    /// add to the response, not yet in a map.
    Plain {
        /// The RateLimit (and legacy) fields to add.
        headers: RateHeaders,
        /// The decision as an access log shows it, when recorded.
        recorded: Option<RecordedDecision>,
    },
    /// Anything else: a denial, a delay, or a pass holding leases or permits.
    Decided(RequestDecision),
}

impl DecidedRequest {
    fn of(outcome: Outcome) -> DecidedRequest {
        match outcome {
            Outcome::Respond(r) => DecidedRequest::Decided(RequestDecision {
                recorded: r.extensions().get::<RecordedDecision>().cloned(),
                verdict: Verdict::Respond(r),
                settle: None,
            }),
            Outcome::Pass {
                headers,
                delay,
                leases,
                permits,
                decided,
            } => {
                if delay.is_zero() && leases.is_empty() && permits.is_empty() {
                    return DecidedRequest::Plain {
                        headers,
                        recorded: decided,
                    };
                }
                DecidedRequest::Decided(RequestDecision {
                    verdict: Verdict::Pass {
                        headers: headers.into_map(),
                        delay,
                        leases,
                        permits,
                    },
                    settle: None,
                    recorded: decided,
                })
            }
        }
    }

    /// As [`RateLimiter::decide_request`] gives it.
    pub fn into_decision(self) -> RequestDecision {
        match self {
            DecidedRequest::Plain { headers, recorded } => RequestDecision {
                verdict: Verdict::Pass {
                    headers: headers.into_map(),
                    delay: Duration::ZERO,
                    leases: Leases::new(),
                    permits: Permits::new(),
                },
                settle: None,
                recorded,
            },
            DecidedRequest::Decided(d) => d,
        }
    }
}

/// A request prepared by [`RateLimiter::decide_request_now`] that waits on its leases, the
/// store or a reservation: finish it with [`RateLimiter::decide_pending`].
pub struct PendingRequest {
    plan: Box<Plan>,
}

impl SettleHandle {
    /// The RateLimit fields of the settled state (the enforced policies', as a request of
    /// cost 0 sees them), to send in place of those of the admission: what the layer
    /// writes when the handler settled before its response.
    pub fn settled_header_map(&self, settled: &Settled) -> HeaderMap {
        self.settled_headers(settled).into_map()
    }
}
