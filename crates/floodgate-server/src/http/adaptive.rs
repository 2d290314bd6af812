//! `POST /v1/adaptive/acquire` and `POST /v1/adaptive/release`: the config's adaptive
//! policies ([`crate::adaptive`]) for a caller that reports each request's end.
//!
//! * acquire `{"policy": "backend", "class": "critical"}` (`class` optional: the policy's
//!   last, lowest class): `200 {"allowed": true, "lease": "8121...", "policy": "backend",
//!   "class": "critical", "limit": 20, "in_flight": 5, "waited_ms": 0}`, or, shed,
//!   `503` with `Retry-After` and `{"allowed": false, "lease": null, ..., "queue_full":
//!   false, "retry_after_ms": 1000}`. A policy with a queue answers after waiting in it.
//! * release `{"lease": "8121...", "status": 200}` (the request's HTTP status, judged by
//!   the policy's `drop_on`) or `{"lease": ..., "outcome": "success"}` (`success`,
//!   `dropped`, `timeout` (a drop when `drop_on` has `timeout`) or `ignore`: released
//!   without a sample); neither: `success`. `200 {"released": true}`, or `false` for a
//!   lease released before, expired or never granted (nothing is released twice).
//!
//! A bad body gets `400` naming the field, an unknown policy `404`, both
//! `{"error": "..."}`.

use axum::http::StatusCode;
use floodgate_engine::adaptive::{AdaptiveSpec, Outcome, SHED_RETRY_AFTER_SECS};
use serde_json::{Value, json};

use crate::adaptive::AdaptiveLeases;
use crate::descriptors::Generation;
use crate::http_leases::{object, string};
use crate::leases::{DoorError, ceil_ms, parse_lease_id};

/// The largest body accepted by the adaptive endpoints.
pub const MAX_BODY: usize = 4096;

/// Why an adaptive call is answered with an error.
#[derive(Debug)]
pub enum AdaptiveError {
    /// A bad body (`400`).
    Invalid(String),
    /// No adaptive policy of that name (`404`).
    UnknownPolicy(String),
}

impl From<DoorError> for AdaptiveError {
    fn from(e: DoorError) -> Self {
        AdaptiveError::Invalid(e.to_string())
    }
}

/// Run an acquire on `body` against the policies of `generation`: the status and JSON.
pub async fn acquire(
    leases: &AdaptiveLeases,
    generation: &Generation,
    body: &[u8],
) -> Result<(StatusCode, Value), AdaptiveError> {
    let o = object(body, &["policy", "class"])?;
    let name = string(&o, "policy")?;
    let (limiter, def) = generation.adaptive(name).ok_or_else(|| {
        let known: Vec<&str> = generation
            .rules
            .adaptive
            .keys()
            .map(String::as_str)
            .collect();
        AdaptiveError::UnknownPolicy(format!(
            "no adaptive policy {:?} (known: {})",
            name.chars().take(128).collect::<String>(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    })?;
    let classes = &def.spec.classes;
    let class = match o.get("class") {
        None | Some(Value::Null) => classes.len() - 1,
        Some(Value::String(c)) => classes.iter().position(|k| k.name == *c).ok_or_else(|| {
            AdaptiveError::Invalid(format!(
                "class {:?} is not one of policy {name:?}'s: {}",
                c.chars().take(128).collect::<String>(),
                classes
                    .iter()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?,
        Some(_) => return Err(AdaptiveError::Invalid("class must be a string".into())),
    };
    let class_name = classes[class].name.as_str();
    Ok(match leases.acquire(limiter, class, def.lease_ttl).await {
        Ok(g) => (
            StatusCode::OK,
            json!({
                "allowed": true,
                "lease": g.lease.to_string(),
                "policy": name,
                "class": class_name,
                "limit": g.limit,
                "in_flight": g.in_flight,
                "waited_ms": ceil_ms(g.waited),
            }),
        ),
        Err(refused) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({
                "allowed": false,
                "lease": null,
                "policy": name,
                "class": class_name,
                "limit": refused.limit,
                "in_flight": limiter.in_flight(),
                "queue_full": refused.queue_full,
                "retry_after_ms": SHED_RETRY_AFTER_SECS * 1000,
            }),
        ),
    })
}

/// The outcome a release body states, for a policy's spec.
enum Stated {
    Status(u16),
    Outcome(Outcome),
    Timeout,
}

impl Stated {
    fn outcome(self, spec: &AdaptiveSpec) -> Outcome {
        match self {
            Stated::Status(s) => spec.drop_on.outcome(Some(s)),
            Stated::Timeout => spec.drop_on.outcome(None),
            Stated::Outcome(o) => o,
        }
    }
}

/// Run a release on `body`: `200 {"released": bool}`.
pub fn release(leases: &AdaptiveLeases, body: &[u8]) -> Result<(StatusCode, Value), AdaptiveError> {
    let o = object(body, &["lease", "status", "outcome"])?;
    let lease = parse_lease_id(string(&o, "lease")?)?.0;
    let stated = match (o.get("status"), o.get("outcome")) {
        (Some(_), Some(_)) => {
            return Err(AdaptiveError::Invalid(
                "give status or outcome, not both".into(),
            ));
        }
        (Some(s), None) => {
            let s = s
                .as_u64()
                .filter(|s| (100..=599).contains(s))
                .ok_or_else(|| {
                    AdaptiveError::Invalid(format!(
                        "status must be an HTTP status from 100 to 599, got {s}"
                    ))
                })?;
            Stated::Status(s as u16)
        }
        (None, Some(w)) => match w.as_str() {
            Some("success") => Stated::Outcome(Outcome::Success),
            Some("dropped") => Stated::Outcome(Outcome::Dropped),
            Some("ignore") => Stated::Outcome(Outcome::Ignore),
            Some("timeout") => Stated::Timeout,
            _ => {
                return Err(AdaptiveError::Invalid(format!(
                    "outcome must be \"success\", \"dropped\", \"timeout\" or \"ignore\", got {w}"
                )));
            }
        },
        (None, None) => Stated::Outcome(Outcome::Success),
    };
    let released = leases.release(lease, |spec| stated.outcome(spec));
    Ok((StatusCode::OK, json!({ "released": released })))
}
