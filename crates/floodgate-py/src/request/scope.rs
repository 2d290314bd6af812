//! `RequestLimiter.decide_scope`: a request read straight from an ASGI scope, and what the
//! ASGI middleware needs back in one object: the header fields to add when the request
//! passes at once holding nothing, else the whole `Verdict`.
//!
//! One call per request instead of reading the scope in Python, deciding, then reading
//! the verdict's fields one by one and releasing it: the decision itself is
//! floodgate-http's, as for `decide` (`decide_request_now`, then `decide_pending` where
//! the request waits on the store or its leases: together, `decide_request`).

use std::net::SocketAddr;
use std::pin::Pin;

use floodgate_http::{DecidedRequest, RateHeaders, RateLimiter};
use http::Request;
use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use super::build::{build_request, ip_of};
use super::fields::{borrowed_bytes, header_list};
use super::verdict::PyVerdict;

/// What `decide_scope` gives back: the fields to add (a list of `(name, value)` bytes
/// pairs) for a request that passes at once and holds nothing (no lease, no adaptive
/// permit, no reservation), else the `Verdict` to act on and finish.
pub enum ScopeVerdict {
    /// Passed at once, nothing held: the fields to add.
    Pass(RateHeaders),
    /// Anything else: denied, delayed, holding leases, permits or a reservation.
    Verdict(PyVerdict),
}

/// A decision that waits, as [`ScopeVerdict::decide`] leaves it.
pub type Pending = Pin<Box<dyn Future<Output = ScopeVerdict> + Send + 'static>>;

impl ScopeVerdict {
    /// The answer for `d`.
    pub async fn of(d: DecidedRequest) -> ScopeVerdict {
        match d {
            DecidedRequest::Plain { headers, .. } => ScopeVerdict::Pass(headers),
            DecidedRequest::Decided(d) => ScopeVerdict::Verdict(PyVerdict::of(d).await),
        }
    }

    /// Decide on `req` with `limiter`: at once where no wait is needed (no future, no
    /// runtime: the in-process store), else the returned future decides (boxed: it is
    /// large, and only a request that waits on the store or its leases makes one).
    pub fn decide(limiter: RateLimiter, req: Request<()>) -> Result<DecidedRequest, Pending> {
        match limiter.decide_request_now(&req) {
            Ok(now) => Ok(now),
            Err(pending) => Err(Box::pin(async move {
                ScopeVerdict::of(limiter.decide_pending(pending, &req).await).await
            })),
        }
    }
}

impl<'py> IntoPyObject<'py> for ScopeVerdict {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            ScopeVerdict::Pass(headers) => Ok(header_list(py, headers.iter())?.into_any()),
            ScopeVerdict::Verdict(v) => Ok(Bound::new(py, v)?.into_any()),
        }
    }
}

/// `scope[name]` when present and true (as Python's `scope.get(name)` tested for truth).
fn given<'py>(
    scope: &Bound<'py, PyDict>,
    name: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match scope.get_item(name)? {
        Some(v) if v.is_truthy()? => Ok(Some(v)),
        _ => Ok(None),
    }
}

/// The request an ASGI HTTP scope describes: `method`; the path as sent, without its
/// query (`raw_path` when given and not empty, else `path`, else `/`); `headers`; the
/// peer's host (`client[0]` when a non-empty str; none otherwise) with port 0, as the
/// middleware passes it to `decide`. `TypeError` for a scope of another shape (the
/// middleware then reads it in Python), `ValueError` for content HTTP cannot carry.
pub(super) fn scope_request(
    scope: &Bound<'_, PyAny>,
    keys: Option<&Bound<'_, PyAny>>,
) -> PyResult<Request<()>> {
    let py = scope.py();
    let scope = scope
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("scope must be a dict"))?;
    let method = scope
        .get_item(intern!(py, "method"))?
        .ok_or_else(|| PyTypeError::new_err("the scope has no method"))?;
    let method = method
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("the scope's method must be a str"))?
        .to_str()?;
    let raw = given(scope, intern!(py, "raw_path"))?;
    let path = match &raw {
        Some(raw) => {
            let raw = raw
                .cast::<PyBytes>()
                .map_err(|_| PyTypeError::new_err("the scope's raw_path must be bytes"))?
                .as_bytes();
            raw.split(|&b| b == b'?').next().unwrap_or(raw)
        }
        None => b"/",
    };
    let decoded = match raw {
        Some(_) => None,
        None => given(scope, intern!(py, "path"))?,
    };
    let path = match &decoded {
        Some(p) => borrowed_bytes(p, "path")?,
        None => path,
    };
    let headers = given(scope, intern!(py, "headers"))?;
    let peer = match given(scope, intern!(py, "client"))? {
        None => None,
        Some(client) => {
            let host = client.get_item(0)?;
            match host.cast::<PyString>() {
                Ok(h) if !h.to_str()?.is_empty() => Some(SocketAddr::new(ip_of(h.to_str()?)?, 0)),
                _ => None,
            }
        }
    };
    build_request(method, path, headers.as_ref(), peer, keys)
}
