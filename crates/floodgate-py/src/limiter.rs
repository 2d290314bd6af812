//! One limit, one state: `floodgate.Limiter` and its subclasses, one per algorithm.
//!
//! Every subclass only builds a core algorithm from keyword arguments in seconds; `allow`,
//! `check` and `peek` live on the base class and run the core [`Limiter`] (a mutex around
//! the algorithm's state) on a monotonic clock of the limiter's own, or at an explicit `now`.

use floodgate_core::algorithms::{
    DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
};
use floodgate_core::{AnyAlgorithm, Kind, Limiter, MonotonicClock, Rate, Spec};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::args::{Cost, config_err, instant, py_float, rate_per_second, seconds, uint};
use crate::decision::PyDecision;

/// Base class of every single-key limiter. Not constructed directly: use `FixedWindow`,
/// `SlidingLog`, `SlidingCounter`, `TokenBucket`, `LeakyBucket`, `LeakyQueue` or `GCRA`.
///
/// Times are seconds. `now` is an instant on the limiter's own time axis (any origin, e.g.
/// `time.monotonic()` or a simulated clock); when omitted, a monotonic clock started when the
/// limiter was created is read. Do not mix the two on one limiter. Safe to share between
/// threads: decisions on one limiter are serialised.
#[pyclass(name = "Limiter", module = "floodgate", subclass, frozen)]
pub struct PyLimiter {
    pub(crate) algorithm: AnyAlgorithm,
    /// The same limit in the common vocabulary (what a shared store's policy is told).
    pub(crate) spec: Spec,
    limiter: Limiter<AnyAlgorithm>,
    clock: MonotonicClock,
    repr: String,
}

impl PyLimiter {
    fn new(algorithm: AnyAlgorithm, spec: Spec, repr: String) -> PyLimiter {
        PyLimiter {
            limiter: Limiter::new(algorithm.clone()),
            algorithm,
            spec,
            clock: MonotonicClock::new(),
            repr,
        }
    }
}

#[pymethods]
impl PyLimiter {
    /// Decide on a request of `cost` units at `now` (seconds; omitted: the monotonic
    /// clock) and consume `cost` when admitted. Returns a bool.
    #[pyo3(signature = (now=None, cost=Cost(1)))]
    #[inline]
    fn allow(&self, now: Option<f64>, cost: Cost) -> PyResult<bool> {
        let now = instant(now, &self.clock)?;
        Ok(self.limiter.check(now, cost.0).allowed)
    }

    /// As `allow`, returning the full `Decision`.
    #[pyo3(signature = (now=None, cost=Cost(1)))]
    fn check(&self, now: Option<f64>, cost: Cost) -> PyResult<PyDecision> {
        let now = instant(now, &self.clock)?;
        Ok(self.limiter.check(now, cost.0).into())
    }

    /// The `Decision` that `check` would return, consuming nothing.
    #[pyo3(signature = (now=None, cost=Cost(1)))]
    fn peek(&self, now: Option<f64>, cost: Cost) -> PyResult<PyDecision> {
        let now = instant(now, &self.clock)?;
        Ok(self.limiter.peek(now, cost.0).into())
    }

    /// The most units admitted at once from rest.
    #[getter]
    fn limit(&self) -> u64 {
        use floodgate_core::Algorithm;
        self.algorithm.limit()
    }

    /// The algorithm's name as used in configs and on the command line
    /// (`"fixed-window"`, `"token-bucket"`, `"gcra"`, ...).
    #[getter]
    fn kind(&self) -> &'static str {
        self.algorithm.kind().name()
    }

    fn __repr__(&self) -> String {
        self.repr.clone()
    }
}

type Core<T> = Result<T, floodgate_core::ConfigError>;

/// The limiter of `algorithm`, whose limit is `spec` (the algorithm's error first: the
/// spec is invalid when it is).
fn base(algorithm: Core<AnyAlgorithm>, spec: Core<Spec>, repr: String) -> PyResult<PyLimiter> {
    let algorithm = algorithm.map_err(config_err)?;
    Ok(PyLimiter::new(algorithm, spec.map_err(config_err)?, repr))
}

/// `kind` at `rate` holding `capacity` (windowed algorithms: none).
fn spec(kind: Kind, rate: Core<Rate>, capacity: Option<u64>) -> Core<Spec> {
    Ok(Spec {
        capacity,
        ..Spec::new(kind, rate?)
    })
}

/// At most `limit` units per aligned window of `window_s` seconds; up to `2 x limit`
/// across a window boundary (all of one window's quota at its end, the next one's at its
/// start). Windows are aligned to multiples of `window_s` on the time axis of `now`.
#[pyclass(name = "FixedWindow", module = "floodgate", extends = PyLimiter, frozen)]
pub struct PyFixedWindow;

#[pymethods]
impl PyFixedWindow {
    #[new]
    fn new(limit: &Bound<'_, PyAny>, window_s: f64) -> PyResult<(Self, PyLimiter)> {
        let limit = uint(limit, "limit", 1)?;
        let window = seconds(window_s, "window_s")?;
        let repr = format!(
            "FixedWindow(limit={limit}, window_s={})",
            py_float(window_s)
        );
        Ok((
            PyFixedWindow,
            base(
                FixedWindow::new(limit, window).map(AnyAlgorithm::FixedWindow),
                spec(Kind::FixedWindow, Rate::new(limit, window), None),
                repr,
            )?,
        ))
    }
}

/// At most `limit` units in *any* rolling window of `window_s` seconds, exactly. Keeps one
/// entry per admitted instant (at most `limit`).
#[pyclass(name = "SlidingLog", module = "floodgate", extends = PyLimiter, frozen)]
pub struct PySlidingLog;

#[pymethods]
impl PySlidingLog {
    #[new]
    fn new(limit: &Bound<'_, PyAny>, window_s: f64) -> PyResult<(Self, PyLimiter)> {
        let limit = uint(limit, "limit", 1)?;
        let window = seconds(window_s, "window_s")?;
        let repr = format!("SlidingLog(limit={limit}, window_s={})", py_float(window_s));
        Ok((
            PySlidingLog,
            base(
                SlidingLog::new(limit, window).map(AnyAlgorithm::SlidingLog),
                spec(Kind::SlidingLog, Rate::new(limit, window), None),
                repr,
            )?,
        ))
    }
}

/// At most `limit` units per aligned window of `window_s` seconds, and the rolling
/// estimate `previous x (1 - elapsed / window) + current` never above `limit`.
#[pyclass(name = "SlidingCounter", module = "floodgate", extends = PyLimiter, frozen)]
pub struct PySlidingCounter;

#[pymethods]
impl PySlidingCounter {
    #[new]
    fn new(limit: &Bound<'_, PyAny>, window_s: f64) -> PyResult<(Self, PyLimiter)> {
        let limit = uint(limit, "limit", 1)?;
        let window = seconds(window_s, "window_s")?;
        let repr = format!(
            "SlidingCounter(limit={limit}, window_s={})",
            py_float(window_s)
        );
        Ok((
            PySlidingCounter,
            base(
                SlidingCounter::new(limit, window).map(AnyAlgorithm::SlidingCounter),
                spec(Kind::SlidingCounter, Rate::new(limit, window), None),
                repr,
            )?,
        ))
    }
}

/// A bucket of `capacity` tokens refilled continuously at `refill_per_s` tokens per second
/// (fractional allowed). Over any span of `t` seconds at most `capacity + refill_per_s x t`
/// units are admitted.
#[pyclass(name = "TokenBucket", module = "floodgate", extends = PyLimiter, frozen)]
pub struct PyTokenBucket;

#[pymethods]
impl PyTokenBucket {
    #[new]
    fn new(capacity: &Bound<'_, PyAny>, refill_per_s: f64) -> PyResult<(Self, PyLimiter)> {
        let capacity = uint(capacity, "capacity", 1)?;
        let rate = rate_per_second(refill_per_s, "refill_per_s")?;
        let repr = format!(
            "TokenBucket(capacity={capacity}, refill_per_s={})",
            py_float(refill_per_s)
        );
        Ok((
            PyTokenBucket,
            base(
                TokenBucket::new(capacity, rate).map(AnyAlgorithm::TokenBucket),
                spec(Kind::TokenBucket, Ok(rate), Some(capacity)),
                repr,
            )?,
        ))
    }
}

/// A leaky bucket as a meter (nginx `limit_req ... nodelay`): up to `capacity` units at
/// once, draining at `rate_per_s` units per second; never delays. Also exported as
/// `LeakyMeter`.
#[pyclass(name = "LeakyBucket", module = "floodgate", extends = PyLimiter, frozen)]
pub struct PyLeakyBucket;

#[pymethods]
impl PyLeakyBucket {
    #[new]
    fn new(capacity: &Bound<'_, PyAny>, rate_per_s: f64) -> PyResult<(Self, PyLimiter)> {
        let capacity = uint(capacity, "capacity", 1)?;
        let rate = rate_per_second(rate_per_s, "rate_per_s")?;
        let repr = format!(
            "LeakyBucket(capacity={capacity}, rate_per_s={})",
            py_float(rate_per_s)
        );
        Ok((
            PyLeakyBucket,
            base(
                LeakyBucket::meter(capacity, rate).map(AnyAlgorithm::Leaky),
                spec(Kind::LeakyMeter, Ok(rate), Some(capacity)),
                repr,
            )?,
        ))
    }
}

/// nginx `limit_req zone=... rate=R burst=B [nodelay | delay=N]`, exactly: a request is
/// admitted while the bucket (drained at `rate_per_s`) holds at most `burst` excess
/// requests; admitted requests beyond the first `delay` excess ones get a `Decision.delay`
/// (seconds to hold them so the backend sees them at `rate_per_s`). `nodelay=True` never
/// delays. `delay` must be at most `burst`, and cannot be combined with `nodelay=True`.
#[pyclass(name = "LeakyQueue", module = "floodgate", extends = PyLimiter, frozen)]
pub struct PyLeakyQueue;

#[pymethods]
impl PyLeakyQueue {
    #[new]
    #[pyo3(signature = (rate_per_s, burst, nodelay=false, delay=None))]
    fn new(
        rate_per_s: f64,
        burst: &Bound<'_, PyAny>,
        nodelay: bool,
        delay: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(Self, PyLimiter)> {
        let rate = rate_per_second(rate_per_s, "rate_per_s")?;
        let burst = uint(burst, "burst", 0)?;
        let delay = delay.map(|d| uint(d, "delay", 0)).transpose()?;
        let mode = match (nodelay, delay) {
            (true, Some(n)) if n > 0 => {
                return Err(PyValueError::new_err(format!(
                    "nodelay=True and delay={n} contradict each other: nodelay already admits every request at once"
                )));
            }
            (true, _) => DelayMode::NoDelay,
            (false, d) => DelayMode::After(d.unwrap_or(0)),
        };
        let repr = match mode {
            DelayMode::NoDelay => format!(
                "LeakyQueue(rate_per_s={}, burst={burst}, nodelay=True)",
                py_float(rate_per_s)
            ),
            DelayMode::After(n) => format!(
                "LeakyQueue(rate_per_s={}, burst={burst}, delay={n})",
                py_float(rate_per_s)
            ),
        };
        Ok((
            PyLeakyQueue,
            base(
                LeakyBucket::queue(rate, burst, mode).map(AnyAlgorithm::Leaky),
                spec(Kind::LeakyQueue, Ok(rate), Some(burst.saturating_add(1)))
                    .map(|s| Spec { delay: mode, ..s }),
                repr,
            )?,
        ))
    }
}

/// The generic cell rate algorithm (as in redis-cell): bursts of up to `capacity` units at
/// once from rest, then one unit per `1 / rate` seconds. Over any span of `t` seconds at
/// most `capacity + rate x t` units are admitted.
///
/// The rate is either `rate_per_s` (units per second, fractional allowed) or exactly
/// `limit` units per `period_s` seconds. The burst size is either `capacity` (units at
/// once) or `burst` (= `capacity - 1`, redis-cell's and nginx's `burst`); by default
/// `limit`, or `rate_per_s` rounded up (one second's worth).
/// `GCRA.from_cell(max_burst, count, period)` takes `CL.THROTTLE`'s arguments.
#[pyclass(name = "GCRA", module = "floodgate", extends = PyLimiter, frozen)]
pub struct PyGcra;

#[pymethods]
impl PyGcra {
    #[new]
    #[pyo3(signature = (rate_per_s=None, capacity=None, *, burst=None, limit=None, period_s=None))]
    fn new(
        rate_per_s: Option<f64>,
        capacity: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        period_s: Option<f64>,
    ) -> PyResult<(Self, PyLimiter)> {
        let (rate, default_cap, rate_repr) = match (rate_per_s, limit, period_s) {
            (Some(r), None, None) => {
                let rate = rate_per_second(r, "rate_per_s")?;
                let default_cap = r.ceil().max(1.0).min(u64::MAX as f64) as u64;
                (rate, default_cap, format!("rate_per_s={}", py_float(r)))
            }
            (None, Some(l), Some(p)) => {
                let l = uint(l, "limit", 1)?;
                let period = seconds(p, "period_s")?;
                let rate = Rate::new(l, period).map_err(config_err)?;
                (rate, l, format!("limit={l}, period_s={}", py_float(p)))
            }
            (None, None, None) => {
                return Err(PyTypeError::new_err(
                    "GCRA() needs a rate: rate_per_s=..., or limit=... with period_s=...",
                ));
            }
            _ => {
                return Err(PyTypeError::new_err(
                    "GCRA() takes either rate_per_s, or limit together with period_s, not a mix",
                ));
            }
        };
        let capacity = match (capacity, burst) {
            (Some(_), Some(_)) => {
                return Err(PyTypeError::new_err(
                    "GCRA() takes capacity or burst (= capacity - 1), not both",
                ));
            }
            (Some(c), None) => uint(c, "capacity", 1)?,
            (None, Some(b)) => uint(b, "burst", 0)?
                .checked_add(1)
                .ok_or_else(|| PyValueError::new_err("burst is too large: burst + 1 overflows"))?,
            (None, None) => default_cap,
        };
        let repr = format!("GCRA({rate_repr}, capacity={capacity})");
        Ok((
            PyGcra,
            base(
                Gcra::new(rate, capacity).map(AnyAlgorithm::Gcra),
                spec(Kind::Gcra, Ok(rate), Some(capacity)),
                repr,
            )?,
        ))
    }

    /// redis-cell's parameters, exactly as `CL.THROTTLE key max_burst count period`:
    /// `count` units per `period` whole seconds, bursts of `max_burst + 1`.
    #[staticmethod]
    fn from_cell(
        py: Python<'_>,
        max_burst: &Bound<'_, PyAny>,
        count: &Bound<'_, PyAny>,
        period: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyGcra>> {
        let max_burst = uint(max_burst, "max_burst", 0)?;
        let count = uint(count, "count", 1)?;
        let period = uint(period, "period", 1)?;
        let repr = format!("GCRA.from_cell(max_burst={max_burst}, count={count}, period={period})");
        let rate = Rate::new(count, std::time::Duration::from_secs(period));
        let base = base(
            Gcra::from_cell(max_burst, count, period).map(AnyAlgorithm::Gcra),
            spec(Kind::Gcra, rate, Some(max_burst.saturating_add(1))),
            repr,
        )?;
        Py::new(py, (PyGcra, base))
    }
}
