//! Store faults: what failed ([`StoreError`], a [`StoreErrorKind`]) and what a surface does
//! with a request its store could not decide ([`StoreFailure`], the fault policy).

use std::fmt;

/// What to do when the decision store fails (Redis down, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFailure {
    /// Fail open: let the request through (default).
    Allow,
    /// Fail closed: 503.
    Deny,
}

/// The config form, `fault_policy`: `fail-open` (admit) or `fail-closed` (deny); `_` for
/// `-` and any case are read too.
#[cfg(feature = "config")]
impl<'de> serde::Deserialize<'de> for StoreFailure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StoreFailure, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "fail-open" => Ok(StoreFailure::Allow),
            "fail-closed" => Ok(StoreFailure::Deny),
            _ => Err(serde::de::Error::custom(format!(
                "{s:?}: expected fail-open or fail-closed"
            ))),
        }
    }
}

/// How a decision store failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The backend did not answer within its per-call timeout.
    Timeout,
    /// The backend's circuit breaker is open: it was not called.
    CircuitOpen,
    /// The backend failed (connection lost, server error, bad reply); the text says how.
    Unavailable(String),
    /// The store refused the check itself (a policy it was not built with, parameters it
    /// cannot compute, a key too long); the text says why. Retrying does not help.
    Refused(String),
}

impl StoreErrorKind {
    /// Whether the failure is the backend's (slow, down, tripped): a retry later may
    /// succeed. [`Refused`](Self::Refused) is not.
    pub fn is_transient(&self) -> bool {
        !matches!(self, StoreErrorKind::Refused(_))
    }

    /// A short stable label (`timeout`, `circuit_open`, `unavailable`, `refused`), for
    /// logs and metric labels.
    pub fn label(&self) -> &'static str {
        match self {
            StoreErrorKind::Timeout => "timeout",
            StoreErrorKind::CircuitOpen => "circuit_open",
            StoreErrorKind::Unavailable(_) => "unavailable",
            StoreErrorKind::Refused(_) => "refused",
        }
    }
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreErrorKind::Timeout => f.write_str("timed out"),
            StoreErrorKind::CircuitOpen => f.write_str("circuit open (not called)"),
            StoreErrorKind::Unavailable(m) | StoreErrorKind::Refused(m) => f.write_str(m),
        }
    }
}

/// A backend failure. The layer maps it to its configured outcome ([`StoreFailure`], fail
/// open by default) and counts it in `floodgate_store_errors_total`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("decision store {store}: {kind}")]
pub struct StoreError {
    /// Which store failed (`"redis"`, `"memory"`, ...).
    pub store: &'static str,
    /// How it failed.
    pub kind: StoreErrorKind,
}

impl StoreError {
    /// A failure of `store` of kind `kind`.
    pub fn new(store: &'static str, kind: StoreErrorKind) -> StoreError {
        StoreError { store, kind }
    }

    /// A refusal of `store` saying `why`.
    pub fn refused(store: &'static str, why: impl Into<String>) -> StoreError {
        StoreError::new(store, StoreErrorKind::Refused(why.into()))
    }

    /// Whether a retry later may succeed ([`StoreErrorKind::is_transient`]).
    pub fn is_transient(&self) -> bool {
        self.kind.is_transient()
    }

    /// The kind's short label ([`StoreErrorKind::label`]).
    pub fn label(&self) -> &'static str {
        self.kind.label()
    }
}

#[cfg(feature = "redis")]
impl From<floodgate_redis::Fault> for StoreErrorKind {
    fn from(f: floodgate_redis::Fault) -> StoreErrorKind {
        match f {
            floodgate_redis::Fault::Timeout => StoreErrorKind::Timeout,
            floodgate_redis::Fault::CircuitOpen => StoreErrorKind::CircuitOpen,
            floodgate_redis::Fault::Error(m) => StoreErrorKind::Unavailable(m),
        }
    }
}

#[cfg(feature = "redis")]
impl From<floodgate_redis::Error> for StoreErrorKind {
    fn from(e: floodgate_redis::Error) -> StoreErrorKind {
        match e {
            floodgate_redis::Error::Timeout { .. } => StoreErrorKind::Timeout,
            e if e.is_fault() => StoreErrorKind::Unavailable(e.to_string()),
            e => StoreErrorKind::Refused(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_say_whether_a_retry_can_help() {
        let e = StoreError::new("redis", StoreErrorKind::Timeout);
        assert!(e.is_transient());
        assert_eq!(e.label(), "timeout");
        assert_eq!(e.to_string(), "decision store redis: timed out");
        let e = StoreError::refused("memory", "policy \"p\" is not in this store");
        assert!(!e.is_transient());
        assert_eq!(e.label(), "refused");
        assert_eq!(
            e.to_string(),
            "decision store memory: policy \"p\" is not in this store"
        );
        assert!(StoreErrorKind::CircuitOpen.is_transient());
        assert!(StoreErrorKind::Unavailable("reset".into()).is_transient());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_faults_keep_their_kind() {
        use floodgate_redis::Fault;
        assert_eq!(
            StoreErrorKind::from(Fault::Timeout),
            StoreErrorKind::Timeout
        );
        assert_eq!(
            StoreErrorKind::from(Fault::CircuitOpen),
            StoreErrorKind::CircuitOpen
        );
        assert_eq!(
            StoreErrorKind::from(Fault::Error("connection reset".into())),
            StoreErrorKind::Unavailable("connection reset".into())
        );
    }
}
