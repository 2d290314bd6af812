//! The HTTP API's reserve and settle calls (see [`crate::descriptors::settle`]):
//!
//! * `POST /v1/reserve`: `{"policy": "tokens", "key": "user:42", "estimate": 1}`
//!   (`policy` may be left out when one is configured; `estimate` defaults to 1). Answers
//!   as `/v1/check` does (`200` or `429`, the decision and its headers), plus
//!   `"reservation"`: the id to settle, a string of digits (`null` when nothing was
//!   reserved: denied, or admitted by the fault policy while the store failed).
//! * `POST /v1/settle`: `{"reservation": "8211...", "actual": 300}`. Answers `200` with
//!   `charged` and `refunded` (units), and the key's state after it (`limit`,
//!   `remaining`, `reset_after_ms`); `404` for a reservation unknown, settled already or
//!   expired; `400` for an `actual` that is not a whole number of units (negative, a
//!   fraction, beyond 2^64 - 1; a string of digits is accepted too).

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use floodgate_engine::metrics::RequestOutcome;
use floodgate_engine::settle::parse_cost;
use serde_json::{Map, Value, json};
use std::sync::Arc;

use super::{HttpState, error, ms, outcome_json, outcome_response, policy_or_default, to_http};
use crate::descriptors::settle::SettleCallError;

/// A refusal: the status and the message of its `{"error": ...}` body.
type Refusal = (StatusCode, String);

fn bad(msg: impl Into<String>) -> Refusal {
    (StatusCode::BAD_REQUEST, msg.into())
}

async fn body_object(s: &HttpState, body: Body) -> Result<Map<String, Value>, Refusal> {
    let max = s.engine.current().rules.caps.max_request_bytes;
    let bytes = axum::body::to_bytes(body, max).await.map_err(|_| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {max} bytes (limits.max_request_bytes)"),
        )
    })?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    match v {
        Value::Object(o) => Ok(o),
        _ => Err(bad("the body must be a JSON object")),
    }
}

fn only(o: &Map<String, Value>, fields: &[&str]) -> Result<(), Refusal> {
    match o.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(k) => Err(bad(format!(
            "unknown field {k:?}; expected {}",
            fields.join(", ")
        ))),
        None => Ok(()),
    }
}

/// A whole number of units: a JSON integer, or a string of digits.
fn units(o: &Map<String, Value>, name: &str) -> Result<Option<u64>, Refusal> {
    let bad = |why: String| bad(format!("{name}: {why}"));
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
            bad(format!(
                "{n} is not a whole number of units from 0 to 2^64 - 1"
            ))
        }),
        Some(Value::String(s)) => parse_cost(s.as_bytes())
            .map(Some)
            .map_err(|e| bad(e.to_string())),
        Some(other) => Err(bad(format!("{other} is not a number of units"))),
    }
}

fn string<'a>(o: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, Refusal> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(bad(format!("{name} must be a string, got {other}"))),
    }
}

/// `POST /v1/reserve`.
pub async fn reserve(State(s): State<Arc<HttpState>>, body: Body) -> Response {
    let start = Instant::now();
    let engine = &s.engine;
    let result = async {
        let o = body_object(&s, body).await?;
        only(&o, &["policy", "key", "estimate"])?;
        let key = string(&o, "key")?.ok_or_else(|| bad("key is required"))?;
        let estimate = units(&o, "estimate")?.unwrap_or(1);
        let policy = policy_or_default(&engine.current(), string(&o, "policy")?)?;
        engine
            .reserve_policy(&policy, key, estimate)
            .await
            .map_err(to_http)
    }
    .await;
    match result {
        Ok((outcome, id)) => {
            let mut v = outcome_json(&outcome);
            v["reservation"] = id.map_or(Value::Null, |id| Value::String(id.to_string()));
            let resp = outcome_response(&outcome, v);
            engine
                .metrics()
                .request("http", outcome.request_outcome(), start.elapsed());
            resp
        }
        Err((status, msg)) => {
            engine
                .metrics()
                .request("http", RequestOutcome::Invalid, start.elapsed());
            error(status, msg)
        }
    }
}

/// `POST /v1/settle`.
pub async fn settle(State(s): State<Arc<HttpState>>, body: Body) -> Response {
    let engine = &s.engine;
    let parsed = async {
        let o = body_object(&s, body).await?;
        only(&o, &["reservation", "actual"])?;
        let id = units(&o, "reservation")?.ok_or_else(|| bad("reservation is required"))?;
        let actual = units(&o, "actual")?.ok_or_else(|| bad("actual is required"))?;
        Ok::<_, Refusal>((id, actual))
    }
    .await;
    let (id, actual) = match parsed {
        Ok(p) => p,
        Err((status, msg)) => return error(status, msg),
    };
    match engine.settle_reservation(id, actual).await {
        Ok(settled) => {
            let Some(first) = settled.first() else {
                return error(StatusCode::INTERNAL_SERVER_ERROR, "nothing was settled");
            };
            let d = first.decision;
            axum::Json(json!({
                "charged": first.charged,
                "refunded": first.refunded,
                "limit": d.limit,
                "remaining": d.remaining,
                "reset_after_ms": ms(d.reset_after),
            }))
            .into_response()
        }
        Err(e @ SettleCallError::Unknown { .. }) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(SettleCallError::Store(e)) if !e.is_transient() => {
            error(StatusCode::BAD_REQUEST, e.to_string())
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}
