//! The exceptions of the Redis-backed and waiting paths: `RateLimitExceeded` (carrying
//! the `Decision`) and `StoreUnavailable` (the decision store could not answer).

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use crate::decision::PyDecision;
use crate::throttle::RedisError;

pyo3::create_exception!(
    floodgate,
    RateLimitExceeded,
    PyException,
    "A request was not admitted: `acquire` timed out, or its cost can never be admitted. \
     `.decision` is the last `Decision` (its `retry_after`, `never`...)."
);

pyo3::create_exception!(
    floodgate,
    StoreUnavailable,
    RedisError,
    "The decision store (Redis) could not answer in time, and the limiter was told to \
     raise (`on_failure=\"raise\"`) rather than decide under its fault policy (a \
     subclass of RedisError)."
);

/// `RateLimitExceeded(message)` with `.decision` set.
pub fn exceeded(py: Python<'_>, message: String, decision: PyDecision) -> PyErr {
    let err = RateLimitExceeded::new_err(message);
    let value = err.value(py);
    match Py::new(py, decision).and_then(|d| value.setattr("decision", d)) {
        Ok(()) => err,
        Err(e) => e,
    }
}
