//! A request's leases (`max_in_flight` policies) and adaptive permits, taken before its
//! rates: a request denied for concurrency is charged nothing, one its rates deny gives
//! its leases and permits back at once ([`floodgate_engine::leases::leases_then_rates`]).

use super::*;

impl RateLimiter {
    /// Take the lease `wanted` (a plan's policy index, key and dry run), `held` being the
    /// leases (and dry-run denials) taken before it: kept with its decision, skipped (a
    /// store fault let through), or the answer to send (denied, or the store failed under
    /// [`StoreFailure::Deny`]).
    pub(super) async fn take_lease(
        &self,
        wanted: &(usize, Vec<u8>, bool),
        held: &[Taken],
        req_headers: &HeaderMap,
    ) -> LeaseStep<Taken, Outcome> {
        let inner = &*self.inner;
        let m = &inner.metrics;
        let (idx, key, dry_run) = wanted;
        let Some(policy) = inner.infos[*idx].in_flight.as_ref() else {
            return LeaseStep::Skipped;
        };
        match leases::acquire(&inner.store, policy, key).await {
            Ok(Admission::Leased {
                guard,
                decision,
                waited,
            }) => {
                if waited.is_zero() {
                    m.decision(*idx, DecisionOutcome::Passed);
                } else {
                    m.decision(*idx, DecisionOutcome::Delayed);
                    m.delay_seconds.observe(waited);
                }
                LeaseStep::Held((*idx, decision, Some(guard)))
            }
            Ok(Admission::Denied {
                decision,
                queue_full,
            }) => {
                if *dry_run {
                    inner
                        .rejections
                        .log(Rejection::WouldRejectInFlight, &policy.name, key);
                    m.decision(*idx, DecisionOutcome::RejectedDryRun);
                    return LeaseStep::Held((*idx, decision, None));
                }
                inner.rejections.log(Rejection::InFlight, &policy.name, key);
                m.decision(*idx, DecisionOutcome::Rejected);
                m.request(if queue_full {
                    RequestOutcome::QueueFull
                } else {
                    RequestOutcome::Rejected
                });
                let rendered: SmallVec<[(&PolicyInfo, Decision); 2]> = held
                    .iter()
                    .filter(|(i, _, _)| inner.policies[*i].advertised())
                    .map(|(i, d, _)| (&inner.infos[*i], *d))
                    .chain(std::iter::once((&inner.infos[*idx], decision)))
                    .collect();
                let headers = headers::render(&rendered, &inner.headers);
                let mut r = self.denial(
                    Some(decision),
                    &policy.name,
                    headers,
                    ReplyFormat::of(req_headers),
                );
                if let Some(d) = self.decided(RecordedOutcome::Limited, *idx, key) {
                    r.extensions_mut().insert(d);
                }
                LeaseStep::Denied(Outcome::Respond(r))
            }
            Err(e) => match self.store_failed(&e, req_headers) {
                Some(denied) => LeaseStep::Denied(denied),
                // allowed without this lease
                None => LeaseStep::Skipped,
            },
        }
    }

    /// A permit of adaptive policy `idx` for a request of `class`: `Ok(None)` for a
    /// policy that is not adaptive; a dry run always gets one (counted as
    /// `rejected_dry_run` when the rule would have refused); a refusal (after the queue,
    /// if any) is the 503 to send.
    pub(super) async fn take_permit(
        &self,
        idx: usize,
        class: usize,
        dry_run: bool,
        req_headers: &HeaderMap,
    ) -> Result<Option<AdaptivePermit>, Outcome> {
        let inner = &*self.inner;
        let m = &inner.metrics;
        let Some(limiter) = inner.infos[idx].adaptive.as_ref() else {
            return Ok(None);
        };
        let class_name = limiter
            .spec()
            .classes
            .get(class)
            .map_or("", |c| c.name.as_str());
        if dry_run {
            let (permit, would_refuse) = limiter.admit_shadow(class);
            if would_refuse {
                inner.rejections.log(
                    Rejection::WouldRejectInFlight,
                    limiter.name(),
                    class_name.as_bytes(),
                );
                m.decision(idx, DecisionOutcome::RejectedDryRun);
            } else {
                m.decision(idx, DecisionOutcome::Passed);
            }
            return Ok(Some(permit));
        }
        match limiter.acquire(class).await {
            Ok(Admitted { permit, waited }) => {
                if waited.is_zero() {
                    m.decision(idx, DecisionOutcome::Passed);
                } else {
                    m.decision(idx, DecisionOutcome::Delayed);
                    m.delay_seconds.observe(waited);
                }
                Ok(Some(permit))
            }
            Err(refused) => {
                inner
                    .rejections
                    .log(Rejection::InFlight, limiter.name(), class_name.as_bytes());
                m.decision(idx, DecisionOutcome::Rejected);
                m.request(if refused.queue_full {
                    RequestOutcome::QueueFull
                } else {
                    RequestOutcome::Rejected
                });
                let detail = format!(
                    "overloaded: policy {:?} sheds class {class_name:?} at a limit of {} in flight; retry after {SHED_RETRY_AFTER_SECS} s",
                    limiter.name(),
                    refused.limit
                );
                let mut r = short_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &detail,
                    Some(SHED_RETRY_AFTER_SECS),
                    Some(limiter.name()),
                    ReplyFormat::of(req_headers),
                );
                if let Some(d) = self.decided(RecordedOutcome::Limited, idx, class_name.as_bytes())
                {
                    r.extensions_mut().insert(d);
                }
                Err(Outcome::Respond(r))
            }
        }
    }

    /// Take `plan`'s leases, then decide its rates (reserving them at the estimate when
    /// `reserve`) with the leases' decisions (for the headers), in the order of
    /// [`leases::leases_then_rates`]: the outcome (and the reservation), holding the
    /// leases when it admits; a request the rates deny gives them back at once, and a
    /// request denied for concurrency is charged no rate. A plan without leases takes
    /// none (nothing is allocated).
    pub(super) async fn with_leases(
        &self,
        mut plan: Plan,
        req_headers: &HeaderMap,
        reserve: bool,
    ) -> (Outcome, Option<Reservation>) {
        let adaptive = std::mem::take(&mut plan.adaptive);
        let mut permits = Permits::new();
        for (idx, class, dry_run) in &adaptive {
            match self.take_permit(*idx, *class, *dry_run, req_headers).await {
                Ok(Some(p)) => permits.push(p),
                Ok(None) => {}
                // the permits taken go back unsampled (dropped)
                Err(refused) => return (refused, None),
            }
        }
        let wanted = std::mem::take(&mut plan.leases);
        let ordered = leases::leases_then_rates(Request1 {
            limiter: self,
            wanted: &wanted,
            plan: Some(plan),
            req_headers,
            reserve,
        })
        .await;
        match ordered {
            Ok(Ordered::LeaseDenied(o)) => (o, None),
            Ok(Ordered::Decided {
                rates: (o, reservation),
                held,
            }) => {
                let leases: Leases = held.into_iter().filter_map(|(_, _, g)| g).collect();
                (holding(o, leases, permits), reservation)
            }
            Err(never) => match never {},
        }
    }
}

/// One request through [`leases::leases_then_rates`]: its leases, then its plan's rates.
struct Request1<'a> {
    limiter: &'a RateLimiter,
    wanted: &'a [(usize, Vec<u8>, bool)],
    plan: Option<Plan>,
    req_headers: &'a HeaderMap,
    reserve: bool,
}

impl LeasesAndRates for Request1<'_> {
    type Held = Taken;
    type Denied = Outcome;
    type Rates = (Outcome, Option<Reservation>);
    type Error = std::convert::Infallible;

    fn leases(&self) -> usize {
        self.wanted.len()
    }

    async fn take(
        &mut self,
        i: usize,
        held: &[Taken],
    ) -> Result<LeaseStep<Taken, Outcome>, Self::Error> {
        Ok(self
            .limiter
            .take_lease(&self.wanted[i], held, self.req_headers)
            .await)
    }

    async fn decide(&mut self, held: &[Taken]) -> Result<Self::Rates, Self::Error> {
        let leased: SmallVec<[(usize, Decision); 1]> =
            held.iter().map(|(i, d, _)| (*i, *d)).collect();
        let plan = self.plan.take().expect("decided once");
        Ok(self
            .limiter
            .decide_rates(plan, &leased, self.req_headers, self.reserve)
            .await)
    }

    fn admitted((outcome, _): &Self::Rates) -> bool {
        matches!(outcome, Outcome::Pass { .. })
    }

    async fn give_back(&mut self, held: Vec<Taken>) {
        drop(held);
    }
}

/// `outcome` holding `leases` when it passes; when it is denied by a rate or the store
/// failed, `leases` drop here: released at once.
pub(super) fn holding(outcome: Outcome, leases: Leases, permits: Permits) -> Outcome {
    match outcome {
        Outcome::Pass {
            headers,
            delay,
            decided,
            ..
        } => Outcome::Pass {
            headers,
            delay,
            leases,
            permits,
            decided,
        },
        denied => denied,
    }
}
