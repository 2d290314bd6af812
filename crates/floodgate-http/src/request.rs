//! A request decided whole, for a surface that serves the request itself (the Python
//! module's `RequestLimiter`): [`RateLimiter::decide_request`] runs what the tower layer
//! runs before it calls its service (keys, policies, leases, the verdict with its headers
//! or denial, the reservation of a route that settles its cost after the response, the
//! decision an access log records) and leaves the holding of a delayed request and the
//! call to the caller.

use std::time::Duration;

use floodgate_engine::settle::Settled;
use http::{HeaderMap, Request};

use crate::limiter::{Leases, Outcome, Permits, Prepared, RateLimiter, Verdict};
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
        let mut plan = match self.prepare(req) {
            Prepared::Bypass(recorded) => {
                return RequestDecision {
                    verdict: pass_untouched(),
                    settle: None,
                    recorded,
                };
            }
            Prepared::Respond(r) => {
                let recorded = r.extensions().get::<RecordedDecision>().cloned();
                return RequestDecision {
                    verdict: Verdict::Respond(r),
                    settle: None,
                    recorded,
                };
            }
            Prepared::Check(plan) => plan,
        };
        let (outcome, settle) = match plan.settle.take() {
            Some((spec, estimate)) => {
                let (outcome, reservation) = self.reserve(plan, req.headers()).await;
                let handle = matches!(outcome, Outcome::Pass { .. })
                    .then(|| SettleHandle::new(self.clone(), spec, estimate, reservation));
                (outcome, handle)
            }
            // the in-process store without leases decides at once, as the layer does: no
            // future of the lease procedure to build and drive
            None => match self.local_store().filter(|_| !plan.has_leases()) {
                Some(local) => (self.check_now(local, plan, req.headers()), None),
                None => (self.check(plan, req.headers()).await, None),
            },
        };
        match outcome {
            Outcome::Respond(r) => RequestDecision {
                recorded: r.extensions().get::<RecordedDecision>().cloned(),
                verdict: Verdict::Respond(r),
                settle,
            },
            Outcome::Pass {
                headers,
                delay,
                leases,
                permits,
                decided,
            } => RequestDecision {
                verdict: Verdict::Pass {
                    headers: headers.into_map(),
                    delay,
                    leases,
                    permits,
                },
                settle,
                recorded: decided,
            },
        }
    }
}

/// The verdict of a request no policy applies to.
fn pass_untouched() -> Verdict {
    Verdict::Pass {
        headers: HeaderMap::new(),
        delay: Duration::ZERO,
        leases: Leases::new(),
        permits: Permits::new(),
    }
}

impl SettleHandle {
    /// The RateLimit fields of the settled state (the enforced policies', as a request of
    /// cost 0 sees them), to send in place of those of the admission: what the layer
    /// writes when the handler settled before its response.
    pub fn settled_header_map(&self, settled: &Settled) -> HeaderMap {
        self.settled_headers(settled).into_map()
    }
}
