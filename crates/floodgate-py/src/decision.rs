//! `floodgate.Decision`: the core [`Decision`] with every duration in seconds.

use std::time::Duration;

use floodgate_core::{Decision, Denial};
use pyo3::prelude::*;

/// The outcome of one request: the same five values as redis-cell's `CL.THROTTLE`, plus
/// the leaky queue's delay. Durations are seconds (floats), exact to the nanosecond.
///
/// `bool(decision)` is `decision.allowed`.
#[pyclass(
    name = "Decision",
    module = "floodgate",
    frozen,
    eq,
    hash,
    skip_from_py_object
)]
#[derive(Clone, PartialEq)]
pub struct PyDecision {
    inner: Decision,
}

impl std::hash::Hash for PyDecision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state)
    }
}

impl PyDecision {
    /// The core decision.
    pub fn inner(&self) -> &Decision {
        &self.inner
    }
}

impl From<Decision> for PyDecision {
    #[inline]
    fn from(inner: Decision) -> Self {
        PyDecision { inner }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[pymethods]
impl PyDecision {
    /// Whether the request is admitted (after `delay` seconds, for a delaying leaky queue).
    #[getter]
    fn allowed(&self) -> bool {
        self.inner.allowed
    }

    /// The most units the limiter admits at once from rest.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// Units that could still be admitted right now, after this request.
    #[getter]
    fn remaining(&self) -> u64 {
        self.inner.remaining
    }

    /// When denied: seconds until a request of the same cost would be admitted. `None`
    /// when allowed, and `None` when it can never be (cost above the limit).
    #[getter]
    fn retry_after(&self) -> Option<f64> {
        self.inner.retry_after.map(secs)
    }

    /// Seconds until the limiter is back at full capacity if nothing else arrives.
    #[getter]
    fn reset_after(&self) -> f64 {
        secs(self.inner.reset_after)
    }

    /// Seconds to hold an admitted request before forwarding it (`LeakyQueue` only; 0.0
    /// otherwise).
    #[getter]
    fn delay(&self) -> f64 {
        secs(self.inner.delay)
    }

    /// Why the request was denied: `"rate limited"`, or a message saying the cost exceeds
    /// the limit (it can never be admitted). `None` when allowed.
    #[getter]
    fn reason(&self) -> Option<String> {
        self.inner.denial.map(|d| d.to_string())
    }

    /// True when the request was denied because its cost is above the limit: retrying
    /// will never help.
    #[getter]
    fn never(&self) -> bool {
        matches!(self.inner.denial, Some(Denial::CostExceedsLimit { .. }))
    }

    /// The five integers of redis-cell's `CL.THROTTLE` reply:
    /// `(limited, limit, remaining, retry_after_s, reset_after_s)`, durations truncated to
    /// whole seconds as the module truncates them (3.9 s is 3), `-1` for no retry-after.
    fn throttle_reply(&self) -> (i64, i64, i64, i64, i64) {
        let [a, b, c, d, e] = self.inner.throttle_reply();
        (a, b, c, d, e)
    }

    fn __bool__(&self) -> bool {
        self.inner.allowed
    }

    fn __repr__(&self) -> String {
        let d = &self.inner;
        let retry = match d.retry_after {
            Some(r) => format!("{:?}", secs(r)),
            None => "None".into(),
        };
        format!(
            "Decision(allowed={}, limit={}, remaining={}, retry_after={}, reset_after={:?}, delay={:?})",
            if d.allowed { "True" } else { "False" },
            d.limit,
            d.remaining,
            retry,
            secs(d.reset_after),
            secs(d.delay),
        )
    }
}
