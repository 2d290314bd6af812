//! In-flight leases with the limit passed per call, as `CL.THROTTLE` passes its rate:
//! the RESP door's `FG.ACQUIRE` / `FG.RENEW` / `FG.RELEASE` ([`crate::resp`]) and the
//! HTTP door's `POST /v1/acquire`, `/v1/renew`, `/v1/release` ([`crate::http`]) share
//! one [`LeaseDoor`], on the server's store (in process, or the Redis the rules use).
//! The semantics are the core's ([`floodgate_core::inflight`]): at most `N` live leases
//! per key, each expiring after its TTL, a release frees at most one place; releasing
//! twice, an expired lease or an unknown id answers `false` and changes nothing.
//!
//! Arguments are checked here, once for both doors: `N` from 1 to
//! [`MAX_IN_FLIGHT`], a TTL from 1 ms to a day
//! in milliseconds, a lease id a decimal integer below 2^63.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::inflight::{
    KeyedInFlight, Lease, LeaseId, LeaseTtl, MAX_IN_FLIGHT, check_limit,
};
use floodgate_core::{Clock, Decision, WallClock};
use floodgate_redis::{RedisInFlight, RedisStore};

/// Where the leases are kept.
#[derive(Debug)]
pub enum LeaseDoor {
    /// In process, at most this table's key cap.
    Memory(KeyedInFlight<Vec<u8>>),
    /// In Redis (`PREFIX{TAG}inflight:KEY`), shared with every server on that Redis.
    Redis(Arc<RedisStore>),
}

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

impl LeaseDoor {
    /// Leases in process, at most `max_keys` keys (at least 1).
    pub fn memory(max_keys: usize) -> LeaseDoor {
        LeaseDoor::Memory(
            KeyedInFlight::new(MAX_IN_FLIGHT, max_keys.max(1))
                .unwrap_or_else(|_| unreachable!("MAX_IN_FLIGHT and a cap of 1 or more are valid")),
        )
    }

    fn fault(e: floodgate_redis::Error) -> DoorError {
        if e.is_fault() {
            DoorError::Store(e.to_string())
        } else {
            DoorError::Invalid(e.to_string())
        }
    }

    /// Take a lease on `key` if fewer than `limit` are live.
    pub async fn acquire(
        &self,
        key: &[u8],
        limit: u64,
        ttl: LeaseTtl,
    ) -> Result<Result<Lease, Decision>, DoorError> {
        let limit = check_limit(limit).map_err(|e| DoorError::Invalid(e.to_string()))?;
        match self {
            LeaseDoor::Memory(t) => Ok(t.acquire_with_limit(key, WallClock.now(), ttl, limit)),
            LeaseDoor::Redis(s) => RedisInFlight::new(s.clone(), limit)
                .map_err(Self::fault)?
                .acquire(key, ttl)
                .await
                .map_err(Self::fault),
        }
    }

    /// Extend a live lease to `now + ttl`; `false` when unknown, released or expired.
    pub async fn renew(&self, key: &[u8], id: LeaseId, ttl: LeaseTtl) -> Result<bool, DoorError> {
        match self {
            LeaseDoor::Memory(t) => Ok(t.renew(key, id, WallClock.now(), ttl)),
            LeaseDoor::Redis(s) => Self::redis(s)?
                .renew(key, id, ttl)
                .await
                .map_err(Self::fault),
        }
    }

    /// Give a lease back; `false` (nothing freed) when released before, expired or unknown.
    pub async fn release(&self, key: &[u8], id: LeaseId) -> Result<bool, DoorError> {
        match self {
            LeaseDoor::Memory(t) => Ok(t.release(key, id, WallClock.now())),
            LeaseDoor::Redis(s) => Self::redis(s)?.release(key, id).await.map_err(Self::fault),
        }
    }

    /// A handle for renew and release, whose limit is not used.
    fn redis(s: &Arc<RedisStore>) -> Result<RedisInFlight, DoorError> {
        RedisInFlight::new(s.clone(), 1).map_err(Self::fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let door = LeaseDoor::memory(100);
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
