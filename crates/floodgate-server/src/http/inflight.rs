//! `max_in_flight` on descriptor rules, at the HTTP door's `POST /v1/check`: the rule
//! limits how many checks of one value are admitted and not yet released, at once.
//!
//! The order is the tower layer's, run by the same function
//! ([`floodgate_engine::leases::leases_then_rates`]): the leases of every
//! `max_in_flight` rule the descriptors reach are taken **first**, then the rates are
//! decided ([`Engine::decide_descriptors`]); a request the rates deny gives its leases back at once.
//! So a request denied for concurrency is charged no rate, and a request denied by a
//! rate holds no lease. The leases are kept on the server's lease store
//! ([`CallerLimits`], in process or on the rules' Redis), where `POST /v1/release` (with the
//! `key` and `lease` the check answered) gives them back; one not released expires at
//! the rule's `lease_ttl`. No queue: a full rule denies at once.
//!
//! A lease store fault releases what was taken and answers `503`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use floodgate_core::Decision;
use floodgate_core::inflight::LeaseId;
use floodgate_engine::PolicyInfo;
use floodgate_engine::leases::{LeaseStep, LeasesAndRates, Ordered, leases_then_rates};
use serde_json::{Value, json};

use crate::descriptors::{DescriptorIn, Engine, InFlightRule, Outcome, Status};
use crate::headers;
use crate::leases::{DoorError, ceil_ms};
use floodgate_engine::CallerLimits;

use super::to_http;

/// A lease held for an admitted check.
#[derive(Debug, Clone)]
pub struct Held {
    /// The lease key (`/v1/release` takes it with the id).
    pub key: String,
    /// The lease id.
    pub id: LeaseId,
    /// The rule's in-flight policy.
    pub policy: Arc<PolicyInfo>,
    /// The acquire's decision (`remaining`: places left after this lease).
    pub decision: Decision,
}

/// Give `held` back; a release that fails leaves the lease to expire at its TTL.
async fn release(door: &CallerLimits, held: &[Held]) {
    for h in held {
        if let Err(e) = door.release(h.key.as_bytes(), h.id).await {
            tracing::warn!(error = %e, key = %h.key, "lease release failed; it expires at its ttl");
        }
    }
}

/// A check with its leases.
#[derive(Debug)]
pub struct Checked {
    /// The decision (with the in-flight members in its headers).
    pub outcome: Outcome,
    /// The leases held when it is admitted (none when denied).
    pub held: Vec<Held>,
    /// The rule's key and denial when it was denied for concurrency.
    pub denied: Option<(String, Decision)>,
}

impl Checked {
    /// A check without leases.
    pub fn plain(outcome: Outcome) -> Checked {
        Checked {
            outcome,
            held: Vec::new(),
            denied: None,
        }
    }

    /// The `in_flight` member of the check's JSON: per lease held, its `key`, its id
    /// (`lease`, a string: JSON numbers lose precision above 2^53), its rule's `limit`
    /// and `remaining` places; for a request denied for concurrency, the full rule's
    /// `key`, `limit`, `remaining` (0) and `retry_after_ms` (until its earliest lease
    /// expires: an upper bound).
    pub fn in_flight_json(&self) -> Value {
        if let Some((key, d)) = &self.denied {
            return json!([{
                "key": key,
                "lease": Value::Null,
                "limit": d.limit,
                "remaining": d.remaining,
                "retry_after_ms": d.retry_after.map(ceil_ms),
            }]);
        }
        Value::Array(
            self.held
                .iter()
                .map(|h| {
                    json!({
                        "key": h.key,
                        "lease": h.id.to_string(),
                        "limit": h.decision.limit,
                        "remaining": h.decision.remaining,
                        "retry_after_ms": Value::Null,
                    })
                })
                .collect(),
        )
    }
}

/// Check `descriptors` in `domain` with their rules' leases, all-or-nothing (module
/// docs).
pub async fn check(
    engine: &Engine,
    door: &CallerLimits,
    domain: &str,
    descriptors: &[DescriptorIn<'_>],
) -> Result<Checked, (StatusCode, String)> {
    let (rules, matched) = engine.in_flight_rules(domain, descriptors);
    if rules.is_empty() {
        let o = engine
            .decide_descriptors(domain, descriptors)
            .await
            .map_err(to_http)?;
        return Ok(Checked::plain(o));
    }
    let settings = engine.current().rules.headers.clone();
    let ordered = leases_then_rates(Request {
        engine,
        door,
        domain,
        descriptors,
        rules: &rules,
        matched: Some(matched),
        settings: &settings,
    })
    .await?;
    Ok(match ordered {
        Ordered::LeaseDenied(checked) => checked,
        Ordered::Decided { rates: o, .. } if o.over_limit => Checked::plain(o),
        Ordered::Decided { rates: mut o, held } => {
            // the in-flight members first, then the rates', as the layer renders them
            let mut applied: Vec<(&PolicyInfo, Decision)> =
                held.iter().map(|h| (&*h.policy, h.decision)).collect();
            for s in o.statuses.iter().filter(|s| !s.shadow) {
                applied.extend(s.limits.iter().map(|(l, d)| (&l.policy, *d)));
            }
            o.headers = headers::render(&settings, &applied, false);
            Checked {
                outcome: o,
                held,
                denied: None,
            }
        }
    })
}

/// One check through [`leases_then_rates`]: the rules' leases on the door, then the
/// engine's rates.
struct Request<'a, 'd> {
    engine: &'a Engine,
    door: &'a CallerLimits,
    domain: &'a str,
    descriptors: &'a [DescriptorIn<'d>],
    rules: &'a [InFlightRule],
    matched: Option<Vec<crate::descriptors::Matched>>,
    settings: &'a crate::config::HeaderSettings,
}

impl LeasesAndRates for Request<'_, '_> {
    type Held = Held;
    type Denied = Checked;
    type Rates = Outcome;
    type Error = (StatusCode, String);

    fn leases(&self) -> usize {
        self.rules.len()
    }

    async fn take(
        &mut self,
        i: usize,
        held: &[Held],
    ) -> Result<LeaseStep<Held, Checked>, Self::Error> {
        let r = &self.rules[i];
        let Some(spec) = r.policy.in_flight.as_ref().map(|p| p.spec) else {
            return Ok(LeaseStep::Skipped);
        };
        match self
            .door
            .acquire(r.key.as_bytes(), spec.limit, spec.ttl)
            .await
            .map_err(DoorError::from)
        {
            Ok(Ok(lease)) => Ok(LeaseStep::Held(Held {
                key: r.key.clone(),
                id: lease.id,
                policy: r.policy.clone(),
                decision: lease.decision,
            })),
            Ok(Err(denial)) => Ok(LeaseStep::Denied(Checked {
                outcome: denied(
                    self.settings,
                    held,
                    r,
                    denial,
                    self.matched.take().unwrap_or_default(),
                ),
                held: Vec::new(),
                denied: Some((r.key.clone(), denial)),
            })),
            Err(DoorError::Store(m)) => Err((
                StatusCode::SERVICE_UNAVAILABLE,
                format!("lease store unavailable: {m}"),
            )),
            Err(DoorError::Invalid(m)) => Err((StatusCode::INTERNAL_SERVER_ERROR, m)),
        }
    }

    async fn decide(&mut self, _held: &[Held]) -> Result<Outcome, Self::Error> {
        self.engine
            .decide_descriptors(self.domain, self.descriptors)
            .await
            .map_err(to_http)
    }

    fn admitted(o: &Outcome) -> bool {
        !o.over_limit
    }

    async fn give_back(&mut self, held: Vec<Held>) {
        release(self.door, &held).await;
    }
}

/// The outcome of a request denied for concurrency by `rule`: no rate decided.
fn denied(
    settings: &crate::config::HeaderSettings,
    released: &[Held],
    rule: &InFlightRule,
    denial: Decision,
    matched: Vec<crate::descriptors::Matched>,
) -> Outcome {
    let mut applied: Vec<(&PolicyInfo, Decision)> =
        released.iter().map(|h| (&*h.policy, h.decision)).collect();
    applied.push((&rule.policy, denial));
    Outcome {
        over_limit: true,
        statuses: matched
            .into_iter()
            .enumerate()
            .map(|(i, matched)| Status {
                over_limit: i == rule.desc,
                matched,
                shadow: false,
                limits: Vec::new(),
            })
            .collect(),
        headers: headers::render(settings, &applied, true),
        delay: Duration::ZERO,
        fault: None,
    }
}
