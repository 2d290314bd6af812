//! The HTTP door's in-flight leases ([`crate::leases`]), JSON in and out:
//!
//! * `POST /v1/acquire` `{"key": "gpu", "max_in_flight": 4, "ttl_ms": 30000}`: `200`
//!   `{"allowed": true, "lease": "8121...", "limit": 4, "remaining": 3,
//!   "retry_after_ms": null, "reset_after_ms": 30000}`, or `429` with `"allowed": false`,
//!   `"lease": null`, the time until the earliest lease expires in `retry_after_ms` and
//!   `Retry-After` (seconds, rounded up).
//! * `POST /v1/renew` `{"key": "gpu", "lease": "8121...", "ttl_ms": 30000}`: `200
//!   {"renewed": true}` (false: unknown, released or expired; nothing changes).
//! * `POST /v1/release` `{"key": "gpu", "lease": "8121..."}`: `200 {"released": true}`
//!   (false: released before, expired or never issued; nothing is freed twice).
//!
//! Lease ids are strings (JSON numbers lose precision above 2^53). A bad body gets `400`
//! naming the field, a store fault `503`; both `{"error": "..."}`.

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use crate::leases::{DoorError, ceil_ms, check_key, parse_lease_id, parse_limit, ttl_of_ms};
use floodgate_engine::CallerLimits;

/// The largest body accepted by the lease endpoints.
pub const MAX_BODY: usize = 4096;

/// The JSON object of `body`, with only the fields in `allowed`.
pub(crate) fn object(body: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, DoorError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| DoorError::Invalid(format!("invalid JSON: {e}")))?;
    let Value::Object(o) = v else {
        return Err(DoorError::Invalid("the body must be a JSON object".into()));
    };
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(DoorError::Invalid(format!(
            "unknown field {k:?} (expected {})",
            allowed.join(", ")
        )));
    }
    Ok(o)
}

pub(crate) fn string<'a>(o: &'a Map<String, Value>, field: &str) -> Result<&'a str, DoorError> {
    o.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| DoorError::Invalid(format!("{field} must be a string")))
}

fn integer(o: &Map<String, Value>, field: &str) -> Result<u64, DoorError> {
    o.get(field)
        .and_then(Value::as_u64)
        .ok_or_else(|| DoorError::Invalid(format!("{field} must be a non-negative integer")))
}

/// The `key` of `o`: a string of at most `max` bytes.
fn key(o: &Map<String, Value>, max: usize) -> Result<&str, DoorError> {
    let key = string(o, "key")?;
    check_key(key.as_bytes(), max)?;
    Ok(key)
}

/// Run one lease call (`op`: `acquire`, `renew` or `release`) on the body, its key at
/// most `max_key` bytes: the status and JSON to answer (an acquire's `retry_after_ms`
/// gives the `Retry-After`).
pub async fn run(
    door: &CallerLimits,
    op: &str,
    body: &[u8],
    max_key: usize,
) -> Result<(StatusCode, Value), DoorError> {
    match op {
        "acquire" => {
            let o = object(body, &["key", "max_in_flight", "ttl_ms"])?;
            let key = key(&o, max_key)?;
            let limit = parse_limit(&integer(&o, "max_in_flight")?.to_string())?;
            let ttl = ttl_of_ms(integer(&o, "ttl_ms")?)?;
            let (d, lease) = match door.acquire(key.as_bytes(), limit, ttl).await? {
                Ok(l) => (l.decision, Value::String(l.id.to_string())),
                Err(d) => (d, Value::Null),
            };
            let status = if d.allowed {
                StatusCode::OK
            } else {
                StatusCode::TOO_MANY_REQUESTS
            };
            Ok((
                status,
                json!({
                    "allowed": d.allowed,
                    "lease": lease,
                    "limit": d.limit,
                    "remaining": d.remaining,
                    "retry_after_ms": d.retry_after.map(ceil_ms),
                    "reset_after_ms": ceil_ms(d.reset_after),
                }),
            ))
        }
        "renew" => {
            let o = object(body, &["key", "lease", "ttl_ms"])?;
            let id = parse_lease_id(string(&o, "lease")?)?;
            let ttl = ttl_of_ms(integer(&o, "ttl_ms")?)?;
            let ok = door.renew(key(&o, max_key)?.as_bytes(), id, ttl).await?;
            Ok((StatusCode::OK, json!({ "renewed": ok })))
        }
        _ => {
            let o = object(body, &["key", "lease"])?;
            let id = parse_lease_id(string(&o, "lease")?)?;
            let ok = door.release(key(&o, max_key)?.as_bytes(), id).await?;
            Ok((StatusCode::OK, json!({ "released": ok })))
        }
    }
}
