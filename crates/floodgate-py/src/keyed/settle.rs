//! `floodgate.Reservation`: a request admitted at an estimate by
//! `KeyedLimiter.reserve`, settled once with its actual cost (the core's rules: a larger
//! cost goes into debt, a smaller one is refunded within what still counts; see
//! docs/settle.md). Also a context manager: the cost set on it (`r.cost = 300`) is
//! settled when the block ends; without one the estimate stays.

use std::sync::Mutex;

use floodgate_core::{Decision, Reservation};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::PyKeyedLimiter;
use crate::args::{instant, uint};
use crate::decision::PyDecision;

/// What an admitted, unsettled request holds.
pub(crate) enum Open {
    /// Charged in process.
    Local(Reservation<Vec<u8>>),
    /// Charged in Redis (the engine's reservation).
    Shared(floodgate_engine::Reservation),
}

struct State {
    open: Option<Open>,
    settled: Option<(u64, u64)>,
    cost: Option<u64>,
}

/// A request admitted (or not) at an estimate, to settle once with its actual cost.
#[pyclass(name = "Reservation", module = "floodgate", frozen)]
pub struct PyReservation {
    limiter: Py<PyKeyedLimiter>,
    decision: Decision,
    estimate: u64,
    state: Mutex<State>,
}

impl PyReservation {
    pub(crate) fn new(
        limiter: Py<PyKeyedLimiter>,
        decision: Decision,
        estimate: u64,
        reservation: Option<Open>,
    ) -> PyReservation {
        PyReservation {
            limiter,
            decision,
            estimate,
            state: Mutex::new(State {
                open: reservation,
                settled: None,
                cost: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl PyReservation {
    /// Whether the request was admitted (and so has a reservation to settle).
    #[getter]
    fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// The decision at the estimate.
    #[getter]
    fn decision(&self) -> PyDecision {
        self.decision.into()
    }

    /// The estimate the request was admitted at.
    #[getter]
    fn estimate(&self) -> u64 {
        self.estimate
    }

    /// Units charged beyond the estimate by the settle (None before it).
    #[getter]
    fn charged(&self) -> Option<u64> {
        self.state().settled.map(|s| s.0)
    }

    /// Units refunded by the settle (None before it).
    #[getter]
    fn refunded(&self) -> Option<u64> {
        self.state().settled.map(|s| s.1)
    }

    /// The actual cost to settle when the `with` block ends (None: keep the estimate).
    #[getter]
    fn get_cost(&self) -> Option<u64> {
        self.state().cost
    }

    #[setter]
    fn set_cost(&self, cost: &Bound<'_, PyAny>) -> PyResult<()> {
        self.state().cost = Some(uint(cost, "cost", 0)?);
        Ok(())
    }

    /// Settle with the `actual` cost at `now` (seconds; omitted: the limiter's clock).
    /// Returns the key's `Decision` after it, as a request of cost 0 sees it. A denied
    /// reservation, or one settled already, raises `ValueError`; so does an actual cost
    /// that is not a whole number >= 0, or whose debt does not fit.
    ///
    /// On a RedisStore: one round trip, at Redis `TIME` (`now` is refused); a Redis that
    /// does not answer raises `StoreUnavailable` and the reservation stays open (its
    /// estimate charged) to settle again. A request admitted by the fault policy
    /// (`on_failure="allow"` while Redis did not answer) charged nothing: its settle
    /// changes nothing and returns its decision (`charged` and `refunded` stay None).
    #[pyo3(signature = (actual, now=None))]
    fn settle(
        &self,
        py: Python<'_>,
        actual: &Bound<'_, PyAny>,
        now: Option<f64>,
    ) -> PyResult<PyDecision> {
        let actual = uint(actual, "actual", 0)?;
        let limiter = self.limiter.get();
        let shared = limiter.shared();
        if shared.is_some() && now.is_some() {
            return Err(PyValueError::new_err(
                "now is not taken by a KeyedLimiter on a RedisStore: its time is Redis TIME",
            ));
        }
        let now = instant(now, limiter.clock())?;
        let reservation = {
            let mut st = self.state();
            match st.open.take() {
                Some(r) => r,
                None if st.settled.is_some() => {
                    return Err(PyValueError::new_err(
                        "this reservation was settled already",
                    ));
                }
                // admitted by the fault policy while Redis did not answer: nothing
                // was charged, so there is nothing to settle
                None if self.decision.allowed => return Ok(self.decision.into()),
                None => {
                    return Err(PyValueError::new_err(
                        "this request was not admitted: there is nothing to settle",
                    ));
                }
            }
        };
        let reservation = match (reservation, shared) {
            (Open::Local(r), _) => r,
            (Open::Shared(r), Some(shared)) => {
                return match shared.settle_now(py, r, actual)? {
                    Ok(s) => {
                        self.state().settled = Some((s.charged, s.refunded));
                        Ok(s.decision.into())
                    }
                    Err((r, e)) => {
                        self.state().open = Some(Open::Shared(r));
                        Err(e)
                    }
                };
            }
            (Open::Shared(_), None) => {
                return Err(PyValueError::new_err(
                    "a reservation made in Redis cannot be settled in process",
                ));
            }
        };
        let (key, charge) = reservation.into_parts();
        match limiter.core().settle_charge(&key, charge, now, actual) {
            Ok(s) => {
                self.state().settled = Some((s.charged, s.refunded));
                Ok(s.decision.into())
            }
            Err(e) => {
                // nothing changed: the reservation can still be settled
                self.state().open = Some(Open::Local(Reservation::from_parts(key, charge)));
                Err(PyValueError::new_err(e.to_string()))
            }
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Settle at `cost` if it was set and nothing was settled yet; never suppresses an
    /// exception.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let (open, cost) = {
            let st = self.state();
            (st.open.is_some(), st.cost)
        };
        if let (true, Some(cost)) = (open, cost) {
            self.settle(py, &cost.into_pyobject(py)?.into_any(), None)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let st = self.state();
        let state = match (&st.open, st.settled) {
            (_, Some((c, r))) => format!("settled, charged={c}, refunded={r}"),
            (Some(_), None) => "open".into(),
            (None, None) => "denied".into(),
        };
        format!("Reservation(estimate={}, {state})", self.estimate)
    }
}
