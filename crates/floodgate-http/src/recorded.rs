//! What the limiter decided about a request, for an access log: [`RecordedDecision`], put in the
//! response's extensions by the layer when the limiter was built with
//! [`RateLimiterBuilder::record_decisions`](crate::RateLimiterBuilder::record_decisions),
//! so that the proxy logs the decision the layer took without taking a second one.

use std::sync::Arc;

/// The outcome an access log shows (`rl=` in nginx's combined format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordedOutcome {
    /// Every enforced policy let the request through (at once or after a delay).
    Allowed,
    /// A policy denied it (the response is floodgate's denial).
    Limited,
    /// Let through, but a dry-run policy would have denied it.
    Shadow,
    /// The client's address or key is on the allowlist: no policy was asked.
    Allowlisted,
}

impl RecordedOutcome {
    /// The outcome's word: `allowed`, `limited`, `shadow` or `allowlisted`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordedOutcome::Allowed => "allowed",
            RecordedOutcome::Limited => "limited",
            RecordedOutcome::Shadow => "shadow",
            RecordedOutcome::Allowlisted => "allowlisted",
        }
    }
}

/// The decision about one request: its outcome, the deciding policy and its key (as
/// the limiter's `[log] keys` setting shows keys: plain, truncated or a keyed hash).
///
/// The deciding policy is the one that denied a limited request, the dry-run one that
/// would have denied a shadow request, and otherwise the route's first enforced policy
/// (its first dry-run one when it has none). An allowlisted request has neither a
/// policy nor a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedDecision {
    /// What was decided.
    pub outcome: RecordedOutcome,
    /// The deciding policy's name.
    pub policy: Option<Arc<str>>,
    /// The deciding policy's key, shown as the log shows keys.
    pub key: Option<String>,
}

impl RecordedDecision {
    /// An allowlisted request.
    pub(crate) fn allowlisted() -> RecordedDecision {
        RecordedDecision {
            outcome: RecordedOutcome::Allowlisted,
            policy: None,
            key: None,
        }
    }

    /// The same policy and key, limited (a request held for a delay whose queue was
    /// full).
    pub(crate) fn limited(self) -> RecordedDecision {
        RecordedDecision {
            outcome: RecordedOutcome::Limited,
            ..self
        }
    }
}
