//! How a decided request is answered: the fault policy's answer, the RateLimit fields
//! of a pass, the denial (status, `Retry-After`, body), the recorded decision, and the
//! hold of a delayed request.

use super::*;

impl RateLimiter {
    /// Count and log a store fault; the answer when the limiter fails closed, `None`
    /// when it lets the request through (counted as `store_error_allowed` by the caller
    /// that ends the request).
    pub(super) fn store_failed(&self, e: &StoreError, req_headers: &HeaderMap) -> Option<Outcome> {
        self.report(e);
        self.fault_answer(req_headers)
    }

    /// The answer when the limiter fails closed (counted), `None` when it lets the
    /// request through.
    pub(super) fn fault_answer(&self, req_headers: &HeaderMap) -> Option<Outcome> {
        let inner = &*self.inner;
        match inner.store_failure {
            StoreFailure::Allow => None,
            StoreFailure::Deny => {
                inner.metrics.request(RequestOutcome::StoreErrorDenied);
                Some(Outcome::Respond(short_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "rate limiter unavailable",
                    None,
                    None,
                    ReplyFormat::of(req_headers),
                )))
            }
        }
    }

    /// The outcome of `plan` from the procedure's decisions (in the order of
    /// [`rate_checks`](Self::rate_checks)); a store fault (already reported) is the fault
    /// policy's.
    pub(super) fn finish(
        &self,
        plan: Plan,
        decided: Result<Decided, StoreError>,
        leased: &[(usize, Decision)],
        req_headers: &HeaderMap,
    ) -> Outcome {
        let inner = &*self.inner;
        let m = &inner.metrics;
        m.decision_seconds.observe(plan.start.elapsed());
        let decided = match decided {
            Ok(d) if d.fault.is_none() => d,
            Ok(_) | Err(_) => {
                return self.fault_answer(req_headers).unwrap_or_else(|| {
                    m.request(RequestOutcome::StoreErrorAllowed);
                    Outcome::Pass {
                        headers: RateHeaders::default(),
                        delay: Duration::ZERO,
                        leases: Leases::new(),
                        permits: Permits::new(),
                        decided: None,
                    }
                });
            }
        };
        let (enforced, shadow) = decided.decisions.split_at(plan.enforced.len());
        // every advertised policy's decision, enforced first, for the headers
        let mut items: SmallVec<[(&PolicyInfo, Decision); 2]> = SmallVec::new();
        for ((idx, key, cost), d) in plan.enforced.iter().zip(enforced) {
            let outcome = if !d.allowed {
                inner
                    .rejections
                    .log(Rejection::Rejected, &inner.infos[*idx].name, key);
                DecisionOutcome::Rejected
            } else if !d.delay.is_zero() {
                DecisionOutcome::Delayed
            } else {
                DecisionOutcome::Passed
            };
            // a denied request's other decisions are cost-0 views: count only the binding ones
            if decided.admitted || !d.allowed {
                self.record(*idx, key, outcome, *cost);
            }
            items.push((&inner.infos[*idx], *d));
        }
        for (idx, d) in leased {
            if inner.policies[*idx].advertised() {
                items.push((&inner.infos[*idx], *d));
            }
        }
        for ((idx, key, cost), d) in plan.shadow.iter().zip(shadow) {
            let outcome = if !d.allowed {
                inner
                    .rejections
                    .log(Rejection::WouldReject, &inner.infos[*idx].name, key);
                DecisionOutcome::RejectedDryRun
            } else if !d.delay.is_zero() {
                DecisionOutcome::DelayedDryRun
            } else {
                DecisionOutcome::Passed
            };
            self.record(*idx, key, outcome, *cost);
            if inner.policies[*idx].advertised() {
                items.push((&inner.infos[*idx], *d));
            }
        }
        let mut headers = headers::render(&items, &inner.headers);
        if enforced.is_empty() {
            m.request(RequestOutcome::Passed);
            return Outcome::Pass {
                headers,
                delay: Duration::ZERO,
                leases: Leases::new(),
                permits: Permits::new(),
                decided: self.passed(&plan, shadow),
            };
        }
        if !decided.admitted {
            m.request(RequestOutcome::Rejected);
            // the longest retry binds; the first denied policy names the denial
            let binding = enforced
                .iter()
                .filter(|d| !d.allowed)
                .max_by_key(|d| binding_rank(d))
                .copied();
            let idx = plan
                .enforced
                .iter()
                .zip(enforced)
                .find(|(_, d)| !d.allowed)
                .map_or(plan.enforced[0].0, |((i, _, _), _)| *i);
            let name = &inner.infos[idx].name;
            let mut r = self.denial(binding, name, headers, ReplyFormat::of(req_headers));
            if inner.record_decisions
                && let Some((_, key, _)) = plan.enforced.iter().find(|(i, _, _)| *i == idx)
                && let Some(d) = self.decided(RecordedOutcome::Limited, idx, key)
            {
                r.extensions_mut().insert(d);
            }
            return Outcome::Respond(r);
        }
        let delay = enforced.iter().map(|d| d.delay).max().unwrap_or_default();
        if delay.is_zero() {
            m.request(RequestOutcome::Passed);
        } else if inner.headers.delay {
            headers.push(&X_RATELIMIT_DELAY_MS, ceil_millis(delay).into());
        }
        Outcome::Pass {
            headers,
            delay,
            leases: Leases::new(),
            permits: Permits::new(),
            decided: self.passed(&plan, shadow),
        }
    }

    /// The recorded decision of an allowlisted request (`None` when not recorded).
    pub(super) fn allowlisted(&self) -> Option<RecordedDecision> {
        self.inner
            .record_decisions
            .then(RecordedDecision::allowlisted)
    }

    /// The recorded decision `outcome` by policy `idx` about `key` (`None` when not
    /// recorded).
    pub(super) fn decided(
        &self,
        outcome: RecordedOutcome,
        idx: usize,
        key: &[u8],
    ) -> Option<RecordedDecision> {
        let inner = &*self.inner;
        inner.record_decisions.then(|| RecordedDecision {
            outcome,
            policy: Some(Arc::from(inner.infos[idx].name.as_str())),
            key: Some(inner.rejections.show_key(key)),
        })
    }

    /// The recorded decision of an admitted `plan`, `shadow` its dry runs' decisions: a
    /// shadow denial by the first dry-run policy that would have denied, else allowed by
    /// the first enforced policy (the first dry-run one without).
    pub(super) fn passed(&self, plan: &Plan, shadow: &[Decision]) -> Option<RecordedDecision> {
        if !self.inner.record_decisions {
            return None;
        }
        if let Some(((idx, key, _), _)) = plan.shadow.iter().zip(shadow).find(|(_, d)| !d.allowed) {
            return self.decided(RecordedOutcome::Shadow, *idx, key);
        }
        let (idx, key, _) = plan.enforced.first().or(plan.shadow.first())?;
        self.decided(RecordedOutcome::Allowed, *idx, key)
    }

    pub(super) fn denial(
        &self,
        binding: Option<Decision>,
        policy: &str,
        headers: RateHeaders,
        format: ReplyFormat,
    ) -> Response<Full<Bytes>> {
        let inner = &*self.inner;
        let (detail, retry) = match binding {
            Some(Decision {
                denial: Some(Denial::CostExceedsLimit { cost, limit }),
                ..
            }) => (
                format!(
                    "policy {policy:?}: request cost {cost} exceeds the limit of {limit}; it can never be admitted"
                ),
                None,
            ),
            Some(Decision {
                retry_after: Some(r),
                ..
            }) => {
                let mut rng = fastrand::Rng::new();
                let secs = retry_after_secs(r, inner.jitter, |span| rng.u64(0..=span));
                // the hottest denial: written without the formatting machinery
                let mut detail = String::with_capacity(48 + policy.len());
                detail.push_str("rate limited by policy ");
                push_quoted(&mut detail, policy);
                detail.push_str("; retry after ");
                detail.push_str(itoa::Buffer::new().format(secs));
                detail.push_str(" s");
                (detail, Some(secs))
            }
            _ => (format!("rate limited by policy {policy:?}"), None),
        };
        let mut resp = short_response(inner.deny_status, &detail, retry, Some(policy), format);
        headers.insert_into(resp.headers_mut());
        resp
    }

    /// Hold a request for `delay` (a leaky queue's smoothing) without blocking a thread.
    /// Returns `false`, counting `queue_full`, when `max_waiting` requests are already held.
    pub async fn hold(&self, delay: Duration) -> bool {
        let inner = &*self.inner;
        if inner.waiting.fetch_add(1, Ordering::AcqRel) >= inner.max_waiting {
            inner.waiting.fetch_sub(1, Ordering::AcqRel);
            inner.metrics.request(RequestOutcome::QueueFull);
            return false;
        }
        struct Release<'a>(&'a Inner);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.waiting.fetch_sub(1, Ordering::AcqRel);
                self.0.metrics.waiting.dec();
            }
        }
        inner.metrics.waiting.inc();
        let _release = Release(inner);
        tokio::time::sleep(delay).await;
        inner.metrics.request(RequestOutcome::Delayed);
        inner.metrics.delay_seconds.observe(delay);
        true
    }

    /// The response for a request that should have been held but found the queue full.
    pub fn queue_full_response(&self, headers: &HeaderMap) -> Response<Full<Bytes>> {
        short_response(
            self.inner.deny_status,
            "too many requests are waiting",
            Some(1),
            None,
            ReplyFormat::of(headers),
        )
    }
}

/// `s` in quotes as `{:?}` writes it: plain copy when nothing needs escaping (policy
/// names are printable ASCII), `Debug` otherwise.
pub(super) fn push_quoted(out: &mut String, s: &str) {
    if s.bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ')
    {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        use std::fmt::Write as _;
        let _ = write!(out, "{s:?}");
    }
}

#[cfg(test)]
mod push_quoted_tests {
    #[test]
    pub(super) fn writes_what_debug_writes() {
        for s in [
            "default",
            "per key",
            "a\"b",
            "back\\slash",
            "tab\there",
            "\u{e9}t\u{e9}",
            "",
            "it's",
        ] {
            let mut out = String::new();
            super::push_quoted(&mut out, s);
            assert_eq!(out, format!("{s:?}"));
        }
    }
}
