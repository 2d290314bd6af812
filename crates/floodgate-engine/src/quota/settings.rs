//! A quota client's settings ([`QuotaClientConfig`], [`QuotaFallback`]) and how it names
//! its buckets ([`bucket_entries`]): what the `[fleet]` section reads and
//! `QuotaStore` (feature `quota-client`) runs on.

use std::collections::HashMap;
use std::time::Duration;

use super::assignment::{QuotaStrategy, StrategyKind, Unit, strategy_for};
use crate::store::PolicyInfo;

/// The default report interval.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// The default most buckets a client holds.
pub const DEFAULT_MAX_BUCKETS: usize = 10_000;
/// What a bucket does with no live assignment (none yet, expired, or abandoned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaFallback {
    /// Admit every request.
    AllowAll,
    /// Deny every request.
    DenyAll,
    /// Enforce the policy's limit divided by `nodes` (the `local` strategy's share:
    /// [`crate::fleet::local_share`]) as a token bucket.
    LocalShare {
        /// How many clients share the limit, at least 1.
        nodes: usize,
    },
}

impl QuotaFallback {
    /// The config name: `allow_all`, `deny_all` or `local_share`.
    pub fn name(self) -> &'static str {
        match self {
            QuotaFallback::AllowAll => "allow_all",
            QuotaFallback::DenyAll => "deny_all",
            QuotaFallback::LocalShare { .. } => "local_share",
        }
    }

    /// The strategy a bucket of `policy` follows under this fallback.
    pub fn strategy(self, policy: &PolicyInfo) -> QuotaStrategy {
        match self {
            QuotaFallback::AllowAll => QuotaStrategy::AllowAll,
            QuotaFallback::DenyAll => QuotaStrategy::DenyAll,
            QuotaFallback::LocalShare { nodes } => {
                let limit = policy.spec.rate.per_second_value();
                let capacity = policy.spec.capacity.unwrap_or(policy.spec.rate.count());
                let share = limit / nodes.max(1) as f64;
                strategy_for(
                    StrategyKind::TokenBucket,
                    share,
                    limit,
                    capacity,
                    Unit::Second,
                )
            }
        }
    }
}

/// A quota client's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaClientConfig {
    /// The quota server's gRPC address, `http://host:port`.
    pub server: String,
    /// The domain the stream reports in (the server's `quota:` rules are per domain).
    pub domain: String,
    /// Time between usage reports, above 0.
    pub report_interval: Duration,
    /// What a bucket with no live assignment does.
    pub fallback: QuotaFallback,
    /// The most buckets held (past it, a new (policy, key) is decided by the fallback and
    /// not reported), at least 1.
    pub max_buckets: usize,
}

impl QuotaClientConfig {
    /// Settings for `server` and `domain`, reporting every second, allowing all without
    /// an assignment, holding at most 10 000 buckets.
    pub fn new(server: impl Into<String>, domain: impl Into<String>) -> QuotaClientConfig {
        QuotaClientConfig {
            server: server.into(),
            domain: domain.into(),
            report_interval: DEFAULT_REPORT_INTERVAL,
            fallback: QuotaFallback::AllowAll,
            max_buckets: DEFAULT_MAX_BUCKETS,
        }
    }

    /// The settings checked: what is wrong, named.
    pub fn check(&self) -> Result<(), QuotaClientError> {
        let bad = |why: &str| QuotaClientError::Server(self.server.clone(), why.to_string());
        let uri: http::Uri = self
            .server
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        if uri.scheme_str() == Some("https") {
            return Err(bad(
                "https is not supported: the client speaks cleartext HTTP/2 (http://host:port)",
            ));
        }
        if uri.scheme_str() != Some("http") || uri.host().is_none_or(str::is_empty) {
            return Err(bad("expected http://host:port"));
        }
        if self.domain.is_empty() {
            return Err(QuotaClientError::Invalid("quota_domain must not be empty"));
        }
        if self.report_interval.is_zero() {
            return Err(QuotaClientError::Invalid("report_interval must be above 0"));
        }
        if self.max_buckets == 0 {
            return Err(QuotaClientError::Invalid(
                "quota_max_buckets must be at least 1",
            ));
        }
        if matches!(self.fallback, QuotaFallback::LocalShare { nodes: 0 }) {
            return Err(QuotaClientError::Invalid(
                "the local_share fallback needs nodes of at least 1",
            ));
        }
        Ok(())
    }
}

/// Why a quota client cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaClientError {
    /// The server address is not a URI.
    #[error("quota_server {0:?} is not a server address: {1}")]
    Server(String, String),
    /// A setting out of range.
    #[error("{0}")]
    Invalid(&'static str),
}

/// A bucket's `BucketId` entries: `policy` = the policy's name, `key` = the request's key
/// under it: as it is when it is UTF-8 and does not start with `hex:`, else `hex:` and its
/// bytes in lowercase hex.
pub fn bucket_entries(policy: &str, key: &[u8]) -> HashMap<String, String> {
    let key = match std::str::from_utf8(key) {
        Ok(s) if !s.starts_with("hex:") => s.to_string(),
        _ => {
            let mut s = String::with_capacity(4 + key.len() * 2);
            s.push_str("hex:");
            for b in key {
                s.push_str(&format!("{b:02x}"));
            }
            s
        }
    };
    HashMap::from([
        ("policy".to_string(), policy.to_string()),
        ("key".to_string(), key),
    ])
}

/// The key bytes of a `key` entry ([`bucket_entries`]'s inverse); `None` when an entry
/// starting with `hex:` is not whole bytes of hex.
pub fn key_bytes(entry: &str) -> Option<Vec<u8>> {
    let Some(hex) = entry.strip_prefix("hex:") else {
        return Some(entry.as_bytes().to_vec());
    };
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_entries_name_policy_and_key_injectively() {
        let e = bucket_entries("per-ip", b"10.0.0.1");
        assert_eq!(e["policy"], "per-ip");
        assert_eq!(e["key"], "10.0.0.1");
        for key in [&b"10.0.0.1"[..], b"", b"\xff\x00", b"hex:41", b"hex:"] {
            let e = bucket_entries("p", key);
            assert_eq!(key_bytes(&e["key"]).as_deref(), Some(key), "{key:?}");
        }
        assert_eq!(bucket_entries("p", b"\xff")["key"], "hex:ff");
        assert_eq!(key_bytes("hex:f"), None);
        assert_eq!(key_bytes("hex:zz"), None);
    }

    #[test]
    fn bad_settings_are_named() {
        let ok = QuotaClientConfig::new("http://127.0.0.1:8081", "edge");
        assert!(ok.check().is_ok());
        let e = QuotaClientConfig::new("127.0.0.1:8081", "edge")
            .check()
            .unwrap_err();
        assert!(e.to_string().contains("expected http://host:port"), "{e}");
        let e = QuotaClientConfig::new("http://", "edge")
            .check()
            .unwrap_err();
        assert!(e.to_string().starts_with("quota_server \"http://\""), "{e}");
        let e = QuotaClientConfig::new("http://a:1", "")
            .check()
            .unwrap_err();
        assert!(e.to_string().contains("quota_domain"), "{e}");
        let mut c = ok.clone();
        c.report_interval = Duration::ZERO;
        assert!(
            c.check()
                .unwrap_err()
                .to_string()
                .contains("report_interval")
        );
        let mut c = ok;
        c.fallback = QuotaFallback::LocalShare { nodes: 0 };
        assert!(c.check().is_err());
        let e = QuotaClientConfig::new("https://a:1", "edge")
            .check()
            .unwrap_err();
        assert!(e.to_string().contains("https is not supported"), "{e}");
    }
}
