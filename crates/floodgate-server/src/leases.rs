//! In-flight leases with the limit passed per call, as `CL.THROTTLE` passes its rate:
//! the RESP door's `FG.ACQUIRE` / `FG.RENEW` / `FG.RELEASE` ([`crate::resp`]) and the
//! HTTP door's `POST /v1/acquire`, `/v1/renew`, `/v1/release` ([`crate::http`]) share
//! one [`CallerLimits`](floodgate_engine::CallerLimits), on the server's store (in process, or the Redis the rules use).
//! The semantics are the core's ([`floodgate_core::inflight`]): at most `N` live leases
//! per key, each expiring after its TTL, a release frees at most one place; releasing
//! twice, an expired lease or an unknown id answers `false` and changes nothing.
//!
//! The door's arguments are parsed here, once for both doors: `N` from 1 to
//! [`MAX_IN_FLIGHT`], a TTL from 1 ms to a day
//! in milliseconds, a lease id a decimal integer below 2^63.

use std::time::Duration;

use floodgate_core::inflight::{LeaseId, LeaseTtl, MAX_IN_FLIGHT, check_limit};
use floodgate_engine::{StoreError, StoreErrorKind};

/// Why a lease call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DoorError {
    /// A bad argument (the message names it).
    #[error("{0}")]
    Invalid(String),
    /// The store failed (Redis down, timed out).
    #[error("store unavailable: {0}")]
    Store(String),
}

/// Milliseconds, rounded up (never earlier than the truth), saturating.
pub fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// A parsed `N` (1 to [`MAX_IN_FLIGHT`]).
pub fn parse_limit(s: &str) -> Result<u64, DoorError> {
    let n: u64 = s.trim().parse().map_err(|_| {
        DoorError::Invalid(format!(
            "max_in_flight {s:?} is not an integer from 1 to {MAX_IN_FLIGHT}"
        ))
    })?;
    check_limit(n).map_err(|e| DoorError::Invalid(e.to_string()))
}

/// A parsed TTL in milliseconds (1 ms to a day).
pub fn parse_ttl_ms(s: &str) -> Result<LeaseTtl, DoorError> {
    let ms: u64 = s.trim().parse().map_err(|_| {
        DoorError::Invalid(format!(
            "ttl_ms {s:?} is not a whole number of milliseconds"
        ))
    })?;
    ttl_of_ms(ms)
}

/// A TTL of `ms` milliseconds (1 ms to a day).
pub fn ttl_of_ms(ms: u64) -> Result<LeaseTtl, DoorError> {
    LeaseTtl::new(Duration::from_millis(ms)).map_err(|e| DoorError::Invalid(format!("ttl_ms: {e}")))
}

/// A key of at most `max` bytes (the config's `limits.max_value_bytes`).
pub fn check_key(key: &[u8], max: usize) -> Result<(), DoorError> {
    if key.len() > max {
        return Err(DoorError::Invalid(format!(
            "the key is {} bytes, more than the maximum of {max} (limits.max_value_bytes)",
            key.len()
        )));
    }
    Ok(())
}

/// A parsed lease id (a decimal integer below 2^63, as the doors hand them out).
pub fn parse_lease_id(s: &str) -> Result<LeaseId, DoorError> {
    s.trim()
        .parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .map(|v| LeaseId(v as u64))
        .ok_or_else(|| {
            DoorError::Invalid(format!(
                "lease id {s:?} is not one this server hands out (a decimal integer below 2^63)"
            ))
        })
}

impl From<StoreError> for DoorError {
    /// A refusal names the bad argument; a fault (Redis down, timed out) is the store's.
    fn from(e: StoreError) -> DoorError {
        match e.kind {
            StoreErrorKind::Refused(why) => DoorError::Invalid(why),
            kind => DoorError::Store(kind.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_engine::CallerLimits;

    #[test]
    fn bad_arguments_name_what_is_wrong() {
        let e = parse_limit("0").unwrap_err().to_string();
        assert!(e.contains("max_in_flight"), "{e}");
        assert!(parse_limit("x").unwrap_err().to_string().contains("\"x\""));
        let e = parse_ttl_ms("0").unwrap_err().to_string();
        assert!(e.contains("ttl_ms") && e.contains("lease ttl"), "{e}");
        assert!(parse_ttl_ms("86400001").is_err());
        assert!(parse_ttl_ms("-5").is_err());
        let e = parse_lease_id("-1").unwrap_err().to_string();
        assert!(e.contains("lease id"), "{e}");
        assert!(parse_lease_id("99999999999999999999").is_err());
        assert_eq!(parse_lease_id("42").unwrap(), LeaseId(42));
    }

    #[tokio::test]
    async fn memory_leases_with_the_limit_per_call() {
        let door = CallerLimits::memory(100).unwrap();
        let ttl = ttl_of_ms(60_000).unwrap();
        let a = door.acquire(b"k", 1, ttl).await.unwrap().unwrap();
        assert!(door.acquire(b"k", 1, ttl).await.unwrap().is_err());
        assert!(door.acquire(b"k", 2, ttl).await.unwrap().is_ok());
        assert!(door.renew(b"k", a.id, ttl).await.unwrap());
        assert!(door.release(b"k", a.id).await.unwrap());
        assert!(!door.release(b"k", a.id).await.unwrap());
        assert!(!door.release(b"other", LeaseId(7)).await.unwrap());
    }
}
