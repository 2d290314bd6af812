//! The admin API and page: who is being limited, by which policy, since when. Every
//! surface (the proxy's admin listener, the server's HTTP listener) routes `/admin...`
//! requests to [`respond`] and writes back the [`AdminReply`]; the JSON and the page are
//! rendered here only.
//!
//! | endpoint | answer |
//! |---|---|
//! | `GET /admin` | the page ([`PAGE`]: one HTML file, inline CSS and JS, no external assets) |
//! | `GET /admin/api/overview?seconds=S&n=N` | every policy: decisions by outcome in each of the last `S` seconds (default 60, at most 180), window boundaries, top `N` keys (default 10), the config (redacted) and its reloads |
//! | `GET /admin/api/top?policy=P&n=N` | top keys only, of one policy or all |
//! | `GET /admin/api/key?policy=P&key=K` | one key's state as the store's [`DecisionStore::peek`] reports it (any store), consuming nothing and creating no key |
//! | `GET /admin/api/config` | the config (redacted) and its reload history |
//! | `GET /admin/api/adaptive` | every adaptive policy now ([`AdaptiveView`]): limit, permits held, queue, per class permits held and requests shed, latency samples (also in the overview, as `adaptive`) |
//!
//! Bad input (an unknown parameter or policy, a missing or repeated one, a number out of
//! range, a malformed escape, a query above [`MAX_QUERY_BYTES`] or a key above
//! [`MAX_KEY_BYTES`]) is a `400` with `{"error": "..."}`; a key lookup the store could not
//! answer for a fault of its own (Redis refusing connections, timing out, its circuit
//! breaker open: [`StoreError::is_transient`]) a `503` with the same body naming the
//! fault; another method than `GET` or `HEAD` a `405`, an unknown path under `/admin` a
//! `404`, both with the same body.
//!
//! Surfaces answer only the `Host` names [`AllowedHosts`] allows (loopback ones and
//! configured ones; [`misdirected`]: `421` otherwise) and send [`security_headers`] with
//! every reply: `X-Content-Type-Options: nosniff` and a Content-Security-Policy that lets
//! the page run its own inline script and style (by their SHA-256) and fetch from its
//! own origin, nothing else.

mod host;
mod json;
mod query;
pub mod text;

use floodgate_core::Decision;

use crate::adaptive::AdaptiveView;
use crate::fault::StoreError;
use crate::insight::Insight;
use crate::store::{BoxFuture, DecisionStore};

pub use crate::insight::redact::{REDACTED, redact, redact_url};
pub use host::{AllowedHosts, HostListError, MISDIRECTED, misdirected};

/// The page, shipped in the binary.
pub const PAGE: &str = include_str!("page.html");

/// The headers every admin reply carries: `X-Content-Type-Options: nosniff` and
/// [`content_security_policy`].
pub fn security_headers() -> [(&'static str, &'static str); 2] {
    [
        ("x-content-type-options", "nosniff"),
        ("content-security-policy", content_security_policy()),
    ]
}

/// The Content-Security-Policy of the page (and of the JSON answers, where it allows
/// nothing to run): no source by default; the page's one inline `<script>` and one
/// `<style>` by their SHA-256; `fetch` to its own origin; no framing, no `<base>`, no
/// form submission. Computed once from [`PAGE`].
pub fn content_security_policy() -> &'static str {
    static CSP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CSP.get_or_init(|| {
        let hash = |open: &str, close: &str| {
            let body = PAGE
                .split_once(open)
                .and_then(|(_, rest)| rest.split_once(close))
                .map_or("", |(inner, _)| inner);
            let digest = crate::insight::sha256::sha256(body.as_bytes());
            format!("'sha256-{}'", crate::insight::sha256::base64(&digest))
        };
        format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            hash("<script>", "</script>"),
            hash("<style>", "</style>"),
        )
    })
}

/// The longest query string taken (bytes).
pub const MAX_QUERY_BYTES: usize = 4096;
/// The longest key a lookup takes (bytes).
pub const MAX_KEY_BYTES: usize = 1024;

/// The parts of a request the admin API reads.
#[derive(Debug, Clone, Copy)]
pub struct AdminRequest<'a> {
    /// The method (`GET`).
    pub method: &'a str,
    /// The path (`/admin/api/top`).
    pub path: &'a str,
    /// The query string without `?`, if any.
    pub query: Option<&'a str>,
}

/// The answer, for the surface to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminReply {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

const JSON: &str = "application/json";

impl AdminReply {
    fn json(status: u16, body: &serde_json::Value) -> AdminReply {
        AdminReply {
            status,
            content_type: JSON,
            body: body.to_string(),
        }
    }

    fn error(status: u16, message: impl Into<String>) -> AdminReply {
        AdminReply::json(status, &serde_json::json!({ "error": message.into() }))
    }
}

/// Why a key's state could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeekError {
    /// No policy of that name.
    #[error("unknown policy {policy:?}; policies: {known}")]
    UnknownPolicy {
        /// The name asked for.
        policy: String,
        /// The names there are.
        known: String,
    },
    /// The store could not be read: a fault of the store's own (Redis down or slow, its
    /// breaker open: [`StoreError::is_transient`], answered `503`) or a refusal (a store
    /// that cannot be read without consuming, a key it does not take: answered `400`).
    #[error("{0}")]
    Store(StoreError),
}

impl PeekError {
    /// Whether the lookup failed for a fault of the store's own, not of the request: the
    /// same lookup may succeed later.
    pub fn is_store_fault(&self) -> bool {
        matches!(self, PeekError::Store(e) if e.is_transient())
    }
}

impl From<StoreError> for PeekError {
    fn from(e: StoreError) -> PeekError {
        PeekError::Store(e)
    }
}

/// Why an endpoint gave no answer: the status and the message of the `{"error": ...}` body.
#[derive(Debug)]
struct Failure {
    status: u16,
    message: String,
}

impl From<String> for Failure {
    /// Bad input: `400`.
    fn from(message: String) -> Failure {
        Failure {
            status: 400,
            message,
        }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}

impl From<PeekError> for Failure {
    /// `503` for a fault of the store's own, `400` otherwise.
    fn from(e: PeekError) -> Failure {
        Failure {
            status: if e.is_store_fault() { 503 } else { 400 },
            message: e.to_string(),
        }
    }
}

/// Reads one key's state without consuming: the surface's store.
pub trait Peek: Sync {
    /// The state of `key` under `policy` now, as a check costing 0 sees it
    /// ([`DecisionStore::peek`]): consuming nothing, creating no key.
    fn peek<'a>(
        &'a self,
        policy: &'a str,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Decision, PeekError>>;

    /// The adaptive policies now, in policy order (none by default).
    fn adaptive(&self) -> Vec<AdaptiveView> {
        Vec::new()
    }
}

/// [`Peek`] over a limiter's policies and its store, whichever store it is (in process,
/// Redis, hybrid): through [`DecisionStore::peek`].
#[derive(Clone, Copy)]
pub struct StorePeek<'a> {
    /// The policies, by index.
    pub policies: &'a [crate::PolicyInfo],
    /// The store.
    pub store: &'a dyn DecisionStore,
}

impl std::fmt::Debug for StorePeek<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorePeek")
            .field("policies", &self.policies.len())
            .finish_non_exhaustive()
    }
}

impl Peek for StorePeek<'_> {
    fn peek<'a>(
        &'a self,
        policy: &'a str,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Decision, PeekError>> {
        let Some(info) = self.policies.iter().find(|p| p.name == policy) else {
            return Box::pin(std::future::ready(Err(PeekError::UnknownPolicy {
                policy: policy.chars().take(128).collect(),
                known: self
                    .policies
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })));
        };
        Box::pin(async move { Ok(self.store.peek(info, key).await?) })
    }

    fn adaptive(&self) -> Vec<AdaptiveView> {
        self.policies
            .iter()
            .filter_map(|p| p.adaptive.as_ref())
            .map(|l| l.view())
            .collect()
    }
}

/// Answer a request whose path starts with `/admin`; `None` for any other path (the
/// surface's own routes).
pub async fn respond(
    insight: &Insight,
    peek: &dyn Peek,
    req: &AdminRequest<'_>,
) -> Option<AdminReply> {
    let rest = req.path.strip_prefix("/admin")?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    if req.method != "GET" && req.method != "HEAD" {
        return Some(AdminReply::error(
            405,
            format!(
                "method {} not allowed: the admin API is read-only (GET)",
                req.method
            ),
        ));
    }
    let q = match query::Query::parse(req.query.unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return Some(AdminReply::error(400, e)),
    };
    let answer = match rest {
        "" | "/" => {
            return Some(AdminReply {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: PAGE.to_string(),
            });
        }
        "/api/overview" => json::overview(insight, peek, &q).map_err(Failure::from),
        "/api/adaptive" => json::adaptive(insight, peek, &q).map_err(Failure::from),
        "/api/top" => json::top(insight, &q).map_err(Failure::from),
        "/api/key" => json::key(insight, peek, &q).await,
        "/api/config" => json::config(insight, &q).map_err(Failure::from),
        _ => {
            return Some(AdminReply::error(
                404,
                "no such admin endpoint; try /admin, /admin/api/overview, /admin/api/top, /admin/api/key, /admin/api/config, /admin/api/adaptive",
            ));
        }
    };
    Some(match answer {
        Ok(v) => AdminReply::json(200, &v),
        Err(f) => AdminReply::error(f.status, f.message),
    })
}

#[cfg(test)]
mod tests;
