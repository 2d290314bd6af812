//! `floodgate.Verdict`: what a `RequestLimiter` decided about one request, and what the
//! request holds while it runs (in-flight leases, the reservation of a cost settled
//! after the response).

use std::sync::Mutex;

use floodgate_engine::adaptive::{AdaptivePermit, Outcome};
use floodgate_engine::leases::LeaseGuard;
use floodgate_http::Verdict;
use floodgate_http::request::RequestDecision;
use floodgate_http::settle::{SettleError, SettleHandle, settle_from_head};
use http::HeaderMap;
use http_body_util::BodyExt;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::fields::{header_list, header_map};
use crate::errors::StoreUnavailable;
use crate::runtime;

/// Header pairs as Python sees them: `(name, value)` strings, names lower case.
pub type Pairs = Vec<(String, String)>;

fn pairs(h: &HeaderMap) -> Pairs {
    h.iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// What a request holds while it runs, released by `finish()` (or when the verdict is
/// garbage-collected).
#[derive(Default)]
struct Held {
    leases: Vec<LeaseGuard>,
    permits: Vec<AdaptivePermit>,
    settle: Option<SettleHandle>,
}

/// The decision about one request. `allowed`: forward it to the application (after
/// `delay_s` seconds: a delaying leaky queue smooths it to its rate), adding `headers`
/// to the response; else answer with `response`, `(status, headers, body)`: the same
/// denial `floodgate proxy` sends (429 with a jittered `Retry-After`, or 400 for a
/// request without its key, 503 when the store failed and the limiter fails closed).
///
/// `policy` names the deciding policy (the one that denied; else the route's first);
/// `outcome` is `"allowed"`, `"limited"`, `"shadow"` (a dry run would have denied) or
/// `"allowlisted"`, or `None` for a request no route covers.
///
/// An admitted request holds its in-flight leases (and, on a route with an estimate, a
/// reservation) until `finish()`: call it when the response has been sent, or use the
/// verdict as a context manager. `settle(actual_cost)` settles a reservation with the
/// actual cost and returns the RateLimit headers of the settled state.
#[pyclass(name = "Verdict", module = "floodgate", frozen)]
pub struct PyVerdict {
    allowed: bool,
    delay_s: f64,
    /// The fields to add to an admitted request's response (empty when denied).
    headers: HeaderMap,
    response: Option<(u16, Pairs, Vec<u8>)>,
    policy: Option<String>,
    outcome: Option<&'static str>,
    held: Mutex<Held>,
}

impl PyVerdict {
    /// The verdict of `d` (its denial's body read).
    pub async fn of(d: RequestDecision) -> PyVerdict {
        let policy = d
            .recorded
            .as_ref()
            .and_then(|r| r.policy.as_deref().map(str::to_string));
        let outcome = d.recorded.as_ref().map(|r| r.outcome.as_str());
        let mut held = Held {
            settle: d.settle,
            ..Held::default()
        };
        let (allowed, delay_s, headers, response) = match d.verdict {
            Verdict::Pass {
                headers,
                delay,
                leases,
                permits,
            } => {
                held.leases = leases;
                held.permits = permits;
                (true, delay.as_secs_f64(), headers, None)
            }
            Verdict::Respond(r) => {
                let (parts, body) = r.into_parts();
                let body = match body.collect().await {
                    Ok(b) => b.to_bytes().to_vec(),
                    Err(never) => match never {},
                };
                let response = (parts.status.as_u16(), pairs(&parts.headers), body);
                (false, 0.0, HeaderMap::new(), Some(response))
            }
        };
        PyVerdict {
            allowed,
            delay_s,
            headers,
            response,
            policy,
            outcome,
            held: Mutex::new(held),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The settle handle, or the error saying why there is none.
    fn handle(&self) -> PyResult<SettleHandle> {
        self.held().settle.clone().ok_or_else(|| {
            PyValueError::new_err(
                "nothing to settle: the request's route has no estimate (Route(estimate=...)), or the request was not admitted",
            )
        })
    }
}

/// Settle `handle` with `actual`: the RateLimit headers of the settled state (none when
/// the request was admitted without a reservation, the store having failed).
async fn settle(handle: SettleHandle, actual: u64) -> PyResult<Pairs> {
    match handle.settle(actual).await {
        Ok(s) => Ok(pairs(&handle.settled_header_map(&s))),
        Err(SettleError::NotReserved) => Ok(Vec::new()),
        Err(SettleError::AlreadySettled) => Err(PyRuntimeError::new_err(
            "this request's cost was settled already",
        )),
        Err(SettleError::Store(e)) => Err(StoreUnavailable::new_err(e.to_string())),
    }
}

/// Settle `handle` (when there is one) from the response head `head`, as the proxy does
/// with its upstream's head: the RateLimit headers of the settled state, or `admitted`
/// when nothing was settled (no cost header, a malformed one, or a failed settle: each
/// logged by floodgate-http; `finish()` then charges the abort cost).
async fn settle_from(handle: Option<SettleHandle>, head: HeaderMap, admitted: Pairs) -> Pairs {
    let Some(handle) = handle else {
        return admitted;
    };
    match settle_from_head(&handle, &head).await {
        Some(s) => pairs(&handle.settled_header_map(&s)),
        None => admitted,
    }
}

impl PyVerdict {
    /// Release what the request holds, each adaptive permit with `outcome` of its spec.
    fn end(&self, outcome: impl Fn(&floodgate_engine::adaptive::AdaptiveSpec) -> Outcome) {
        let mut held = std::mem::take(&mut *self.held());
        for p in std::mem::take(&mut held.permits) {
            let o = p.spec().map_or(Outcome::Success, &outcome);
            p.release(o);
        }
        release(held);
    }
}

/// Drop what a request holds inside the runtime (a lease on Redis is released by a task).
fn release(held: Held) {
    if held.leases.is_empty() && held.permits.is_empty() && held.settle.is_none() {
        return; // nothing to release (the rule for a rate-limited request)
    }
    match runtime::handle() {
        Ok(h) => {
            let _in = h.enter();
            drop(held);
        }
        Err(_) => drop(held),
    }
}

impl Drop for PyVerdict {
    fn drop(&mut self) {
        let held = std::mem::take(self.held.get_mut().unwrap_or_else(|e| e.into_inner()));
        release(held);
    }
}

#[pymethods]
impl PyVerdict {
    /// Whether to forward the request (after `delay_s`).
    #[getter]
    fn allowed(&self) -> bool {
        self.allowed
    }

    /// Seconds to hold an admitted request before forwarding it (0.0 as a rule).
    #[getter]
    fn delay_s(&self) -> f64 {
        self.delay_s
    }

    /// Headers to add to the application's response: `[(name, value), ...]`.
    #[getter]
    fn headers(&self) -> Pairs {
        pairs(&self.headers)
    }

    /// `headers` as the bytes an ASGI server sends, `[(name, value), ...]` (names lower
    /// case): the fields as rendered, with no decoding or encoding in between.
    #[getter]
    fn header_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        header_list(py, &self.headers)
    }

    /// The whole answer to send instead of calling the application,
    /// `(status, [(name, value), ...], body)`, or `None` when allowed.
    #[getter]
    fn response<'py>(&self, py: Python<'py>) -> Option<(u16, Pairs, Bound<'py, PyBytes>)> {
        self.response
            .as_ref()
            .map(|(s, h, b)| (*s, h.clone(), PyBytes::new(py, b)))
    }

    /// The deciding policy's name, if any.
    #[getter]
    fn policy(&self) -> Option<String> {
        self.policy.clone()
    }

    /// `"allowed"`, `"limited"`, `"shadow"`, `"allowlisted"`, or `None` (no route).
    #[getter]
    fn outcome(&self) -> Option<&'static str> {
        self.outcome
    }

    /// Settle the request's reservation with its actual cost (units, at least 0), under
    /// every policy of its route; returns the RateLimit headers of the settled state, to
    /// send in place of `headers` when the response has not started. Raises
    /// `ValueError` when there is nothing to settle, `RuntimeError` when settled already.
    fn settle(&self, py: Python<'_>, actual_cost: &Bound<'_, PyAny>) -> PyResult<Pairs> {
        let actual = crate::args::uint(actual_cost, "actual_cost", 0)?;
        let handle = self.handle()?;
        runtime::block_on(py, settle(handle, actual))?
    }

    /// As `settle`, awaitable: never blocks the event loop.
    fn settle_async<'py>(
        &self,
        py: Python<'py>,
        actual_cost: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let actual = crate::args::uint(actual_cost, "actual_cost", 0)?;
        let handle = self.handle()?;
        runtime::awaitable(py, settle(handle, actual))
    }

    /// The response header this request's route settles its cost from
    /// (`Route(cost_header=...)`) while its reservation is open, else `None`: a
    /// middleware reads the application's response head for it (`settle_from_response`).
    #[getter]
    fn cost_header(&self) -> Option<String> {
        let held = self.held();
        let handle = held.settle.as_ref().filter(|h| h.is_open())?;
        handle.cost_header().map(|n| n.as_str().to_string())
    }

    /// Settle from the application's response header fields (a mapping or
    /// `(name, value)` pairs, `str` or `bytes`), as the proxy settles from its upstream's
    /// head: when they carry the route's `cost_header` with a whole number, the
    /// reservation is settled at it and the RateLimit headers of the settled state are
    /// returned, to send in place of `headers`; else (no such field, a malformed or
    /// repeated one: logged) nothing is settled, `finish()` charges the abort cost, and
    /// `headers` is returned. Raises `ValueError` for a field HTTP cannot carry.
    fn settle_from_response(&self, py: Python<'_>, headers: &Bound<'_, PyAny>) -> PyResult<Pairs> {
        let head = header_map(headers)?;
        let handle = self.held().settle.clone();
        let admitted = pairs(&self.headers);
        runtime::block_on(py, settle_from(handle, head, admitted))
    }

    /// As `settle_from_response`, awaitable: never blocks the event loop.
    fn settle_from_response_async<'py>(
        &self,
        py: Python<'py>,
        headers: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let head = header_map(headers)?;
        let handle = self.held().settle.clone();
        let admitted = pairs(&self.headers);
        runtime::awaitable(
            py,
            async move { Ok(settle_from(handle, head, admitted).await) },
        )
    }

    /// Release what the request holds: its in-flight leases, its adaptive permits (the
    /// time since `decide` is the latency sample; with `status`, the response's status,
    /// a 5xx counts as a drop under the policy's `drop_on`), and a reservation still
    /// open (charged the route's abort cost, by default its estimate). Idempotent.
    #[pyo3(signature = (status=None))]
    fn finish(&self, status: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let status = status
            .map(|s| crate::args::uint(s, "status", 100))
            .transpose()?
            .map(|s| {
                u16::try_from(s).ok().filter(|s| *s <= 999).ok_or_else(|| {
                    PyValueError::new_err(format!("status: {s} is not an HTTP status (100 to 999)"))
                })
            })
            .transpose()?;
        self.end(|spec| match status {
            Some(s) => spec.drop_on.outcome(Some(s)),
            None => Outcome::Success,
        });
        Ok(())
    }

    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        let failed = _ty.is_some_and(|t| !t.is_none());
        // an exception: the service failed with no response (a drop under drop_on's
        // `timeout`)
        self.end(|spec| match failed {
            true => spec.drop_on.outcome(None),
            false => Outcome::Success,
        });
        false
    }

    fn __repr__(&self) -> String {
        let policy = match &self.policy {
            Some(p) => format!("{p:?}"),
            None => "None".into(),
        };
        match &self.response {
            None => format!(
                "Verdict(allowed=True, delay_s={:?}, policy={policy})",
                self.delay_s
            ),
            Some((status, _, _)) => {
                format!("Verdict(allowed=False, status={status}, policy={policy})")
            }
        }
    }
}
