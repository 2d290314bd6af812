//! [`CheckError`]: a request the engine cannot check, and why.

use floodgate_engine::StoreError;
use floodgate_engine::metrics::RequestOutcome;
use thiserror::Error;

/// A request that cannot be checked. Each variant says what was wrong.
#[derive(Debug, Error)]
pub enum CheckError {
    /// No rule names this domain (and `unknown_domain: error`).
    #[error("unknown domain {domain:?}; configured domains: {known}")]
    UnknownDomain {
        /// The domain asked.
        domain: String,
        /// The configured ones, comma-separated.
        known: String,
    },
    /// The domain is empty.
    #[error("the domain must not be empty")]
    EmptyDomain,
    /// No descriptors.
    #[error("the descriptor list must not be empty")]
    NoDescriptors,
    /// Too many descriptors.
    #[error("{count} descriptors is more than the maximum of {max} (limits.max_descriptors)")]
    TooManyDescriptors {
        /// Descriptors sent.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A descriptor without entries.
    #[error("descriptor {index} has no entries")]
    EmptyDescriptor {
        /// Its position.
        index: usize,
    },
    /// Too many entries in a descriptor.
    #[error(
        "descriptor {index} has {count} entries, more than the maximum of {max} (limits.max_entries)"
    )]
    TooManyEntries {
        /// Its position.
        index: usize,
        /// Entries sent.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// An entry with an empty key.
    #[error("descriptor {index} entry {entry}: the key must not be empty")]
    EmptyKey {
        /// Descriptor position.
        index: usize,
        /// Entry position.
        entry: usize,
    },
    /// A key or value above the size cap.
    #[error(
        "descriptor {index} entry {entry}: the {what} is {len} bytes, more than the maximum of {max} (limits.max_value_bytes)"
    )]
    TooLong {
        /// Descriptor position.
        index: usize,
        /// Entry position.
        entry: usize,
        /// `key` or `value`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The HTTP `policy` form names no configured policy.
    #[error("unknown policy {policy:?}; configured policies: {known}")]
    UnknownPolicy {
        /// The name asked.
        policy: String,
        /// The configured ones.
        known: String,
    },
    /// The store refused the check (a key too long, parameters it cannot compute): not
    /// a fault the fault policy covers.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl CheckError {
    /// Whether this is a lookup miss (unknown domain or policy) rather than bad input.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            CheckError::UnknownDomain { .. } | CheckError::UnknownPolicy { .. }
        )
    }

    /// Whether the fault is the server's, not the caller's.
    pub fn is_internal(&self) -> bool {
        matches!(self, CheckError::Store(_))
    }

    /// What `floodgate_requests_total` counts a request failing so as.
    pub fn request_outcome(&self) -> RequestOutcome {
        if self.is_not_found() {
            RequestOutcome::UnknownDomain
        } else if self.is_internal() {
            RequestOutcome::Error
        } else {
            RequestOutcome::Invalid
        }
    }
}

/// Check a request's shape against the caps: a domain, at least one descriptor, each
/// with entries, keys not empty, sizes within `caps`.
pub(super) fn validate(
    domain: &str,
    descriptors: &[super::DescriptorIn<'_>],
    caps: &crate::config::Caps,
) -> Result<(), CheckError> {
    if domain.is_empty() {
        return Err(CheckError::EmptyDomain);
    }
    if descriptors.is_empty() {
        return Err(CheckError::NoDescriptors);
    }
    if descriptors.len() > caps.max_descriptors {
        return Err(CheckError::TooManyDescriptors {
            count: descriptors.len(),
            max: caps.max_descriptors,
        });
    }
    for (index, d) in descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(CheckError::EmptyDescriptor { index });
        }
        if d.entries.len() > caps.max_entries {
            return Err(CheckError::TooManyEntries {
                index,
                count: d.entries.len(),
                max: caps.max_entries,
            });
        }
        for (entry, e) in d.entries.iter().enumerate() {
            if e.key.is_empty() {
                return Err(CheckError::EmptyKey { index, entry });
            }
            for (what, s) in [("key", e.key), ("value", e.value)] {
                if s.len() > caps.max_value_bytes {
                    return Err(CheckError::TooLong {
                        index,
                        entry,
                        what,
                        len: s.len(),
                        max: caps.max_value_bytes,
                    });
                }
            }
        }
    }
    Ok(())
}
