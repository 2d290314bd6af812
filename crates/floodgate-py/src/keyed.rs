//! `floodgate.KeyedLimiter`: one limit per key (client IP, user id, API token), any
//! algorithm, a hard cap on the number of keys, safe to call from many Python threads.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use floodgate_core::{AnyAlgorithm, Decision, KeyedLimiter, MonotonicClock, Nanos};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{Cost, config_duration, config_err, instant, key_bytes, uint};
use crate::decision::PyDecision;
use crate::errors::exceeded;
use crate::limiter::PyLimiter;
use crate::runtime;
use crate::store::PyRedisStore;
mod settle;
mod shared;

use settle::Open;
pub use settle::PyReservation;

/// Keys are byte strings: a `str` key is its UTF-8 encoding, so `"alice"` and `b"alice"`
/// are the same key.
type Core = KeyedLimiter<Vec<u8>, AnyAlgorithm>;

/// Per-key limits: every key gets its own state of `algorithm` (any limiter instance, used
/// as a template: its own state is not shared), and at most `max_keys` keys are held.
///
/// When a new key arrives and the store is full, keys back at full capacity are dropped
/// first (that loses nothing), then the live keys nearest to full capacity. Keys are `str`
/// or `bytes`. Times are seconds: `now` on the limiter's own time axis, or a monotonic clock
/// started when the limiter was created. Thread-safe: decisions on one key are serialised,
/// so N threads on one key admit exactly what one thread would.
#[pyclass(name = "KeyedLimiter", module = "floodgate", frozen)]
pub struct PyKeyedLimiter {
    inner: Core,
    clock: MonotonicClock,
    template: Mutex<Py<PyLimiter>>,
    /// Set when the keys are kept in Redis (`store=`): every decision goes there.
    shared: Option<shared::Shared>,
}

/// The longest a blocking `acquire` sleeps before it looks at Python's signals
/// (Ctrl-C) again.
const SLEEP_SLICE: Duration = Duration::from_millis(100);

/// Sleep `d` with the GIL released, in slices, raising what a signal handler raises.
fn sleep(py: Python<'_>, d: Duration) -> PyResult<()> {
    let end = Instant::now() + d;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        py.detach(|| std::thread::sleep(left.min(SLEEP_SLICE)));
        py.check_signals()?;
    }
}

impl PyKeyedLimiter {
    /// The core store.
    pub(crate) fn core(&self) -> &Core {
        &self.inner
    }

    /// The limiter's own clock.
    pub(crate) fn clock(&self) -> &MonotonicClock {
        &self.clock
    }

    /// The policy in Redis, when the keys are kept there.
    pub(crate) fn shared(&self) -> Option<&shared::Shared> {
        self.shared.as_ref()
    }

    /// One decision, the key's bytes borrowed from the `str`/`bytes` object (no copy).
    ///
    /// The GIL is *held*: a decision is a hash probe and a few arithmetic operations under
    /// one shard lock, far shorter than a GIL hand-off. Measured (docs/python.md):
    /// releasing it around the core call cost ~510 more instructions per call (callgrind:
    /// 1,789 vs 1,278 per `allow(key, now)`) and halved the throughput of 4 threads on
    /// one key. The core store is thread-safe on its own; whole-store walks (`sweep`,
    /// `len`, `stats`) do release the GIL.
    #[inline]
    fn decide(
        &self,
        key: &Bound<'_, PyAny>,
        now: Option<f64>,
        cost: Cost,
        consume: bool,
    ) -> PyResult<Decision> {
        if let Some(shared) = &self.shared {
            if now.is_some() {
                return Err(PyValueError::new_err(
                    "now is not taken by a KeyedLimiter on a RedisStore: its time is Redis TIME",
                ));
            }
            let py = key.py();
            let key = key_bytes(key)?.to_vec();
            return shared.decide_now(py, key, cost.0, !consume);
        }
        let key = key_bytes(key)?;
        let now: Nanos = instant(now, &self.clock)?;
        Ok(if consume {
            self.inner.check(key, now, cost.0)
        } else {
            self.inner.peek(key, now, cost.0)
        })
    }
}

impl PyKeyedLimiter {
    /// A decision as an `asyncio` future: the Redis round trip on the module's I/O
    /// threads; in process, decided here and the future completed at once.
    fn decide_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        cost: Cost,
        peek: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        match &self.shared {
            Some(shared) => {
                let fut = shared.future(py, key_bytes(key)?.to_vec(), cost.0, peek)?;
                runtime::awaitable(py, async move { Ok(PyDecision::from(fut.await?)) })
            }
            None => {
                let d: PyDecision = self.decide(key, None, cost, !peek)?.into();
                runtime::ready(py, d)
            }
        }
    }

    /// `TypeError` naming `what` when the keys are in Redis: `what` works on a key table
    /// of this process, which a limiter on a RedisStore does not keep.
    fn in_process(&self, what: &str) -> PyResult<()> {
        match self.shared {
            None => Ok(()),
            Some(_) => Err(PyTypeError::new_err(format!(
                "{what}: a RedisStore keeps no per-process key table (the keys are in Redis, \
                 shared by every process, and expire by TTL)"
            ))),
        }
    }

    /// `TypeError` naming `what` when the keys are in Redis: a quota changed in one
    /// process would not be seen by the others sharing the keys.
    fn quota_in_process(&self, what: &str) -> PyResult<()> {
        match self.shared {
            None => Ok(()),
            Some(_) => Err(PyTypeError::new_err(format!(
                "{what}: the quota of a KeyedLimiter on a RedisStore is its policy's, shared \
                 with every process deciding under the same name; make a KeyedLimiter with \
                 another name (and algorithm) instead"
            ))),
        }
    }
}

#[pymethods]
impl PyKeyedLimiter {
    #[new]
    #[pyo3(signature = (algorithm, max_keys=None, *, store=None, name="default", on_failure="allow"))]
    fn new(
        algorithm: Py<PyLimiter>,
        max_keys: Option<&Bound<'_, PyAny>>,
        store: Option<Py<PyRedisStore>>,
        name: &str,
        on_failure: &str,
    ) -> PyResult<Self> {
        let max_keys = match max_keys {
            Some(m) => uint(m, "max_keys", 1)?,
            None => 100_000,
        };
        let max_keys = usize::try_from(max_keys).unwrap_or(usize::MAX);
        let alg = algorithm.get().algorithm.clone();
        let on_failure = shared::OnFailure::parse(on_failure)?;
        let shared = store
            .map(|s| shared::Shared::new(s, name, algorithm.get(), on_failure))
            .transpose()?;
        Ok(PyKeyedLimiter {
            inner: KeyedLimiter::new(alg, max_keys).map_err(config_err)?,
            clock: MonotonicClock::new(),
            template: Mutex::new(algorithm),
            shared,
        })
    }

    /// Wait until a request of `cost` units for `key` is admitted, sleeping (the GIL
    /// released) for each denial's `retry_after`, and for an admitted request's `delay`
    /// (a delaying LeakyQueue); returns its `Decision`. Raises `RateLimitExceeded` when
    /// the cost can never be admitted, or at once when the next admission would come
    /// after `timeout_s` (None: wait as long as it takes).
    #[pyo3(signature = (key, cost=Cost(1), timeout_s=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        cost: Cost,
        timeout_s: Option<f64>,
    ) -> PyResult<PyDecision> {
        let timeout = timeout_s
            .map(|t| config_duration(t, "timeout_s", true))
            .transpose()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let d = self.decide(key, None, cost, true)?;
            if d.allowed {
                sleep(py, d.delay)?;
                return Ok(d.into());
            }
            let Some(wait) = d.retry_after else {
                let why = d.denial.map(|r| r.to_string()).unwrap_or_default();
                return Err(exceeded(py, format!("never admitted: {why}"), d.into()));
            };
            if deadline.is_some_and(|end| Instant::now() + wait > end) {
                return Err(exceeded(
                    py,
                    format!(
                        "not admitted within timeout_s={}: the next admission is {:.3} s away",
                        timeout_s.unwrap_or_default(),
                        wait.as_secs_f64()
                    ),
                    d.into(),
                ));
            }
            sleep(py, wait.max(Duration::from_millis(1)))?;
        }
    }

    /// As `check`, awaitable: on a RedisStore the round trip waits on the module's I/O
    /// threads, never on the event loop; in process the decision is taken at once.
    #[pyo3(signature = (key, cost=Cost(1)))]
    fn check_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        cost: Cost,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.decide_async(py, key, cost, false)
    }

    /// As `peek`, awaitable.
    #[pyo3(signature = (key, cost=Cost(1)))]
    fn peek_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        cost: Cost,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.decide_async(py, key, cost, true)
    }

    /// The RedisStore the keys are kept in, or None (in process).
    #[getter]
    fn store(&self, py: Python<'_>) -> Option<Py<PyRedisStore>> {
        self.shared.as_ref().map(|s| s.store(py))
    }

    /// The policy name the keys are kept under in Redis (None in process).
    #[getter]
    fn name(&self) -> Option<&str> {
        self.shared.as_ref().map(|s| s.name())
    }

    /// Decide on a request of `cost` units for `key` at `now` (seconds; omitted: the
    /// monotonic clock) and consume when admitted. Returns a bool.
    #[pyo3(signature = (key, now=None, cost=Cost(1)))]
    fn allow(&self, key: &Bound<'_, PyAny>, now: Option<f64>, cost: Cost) -> PyResult<bool> {
        Ok(self.decide(key, now, cost, true)?.allowed)
    }

    /// As `allow`, returning the full `Decision`.
    #[pyo3(signature = (key, now=None, cost=Cost(1)))]
    fn check(&self, key: &Bound<'_, PyAny>, now: Option<f64>, cost: Cost) -> PyResult<PyDecision> {
        Ok(self.decide(key, now, cost, true)?.into())
    }

    /// The `Decision` that `check` would return, consuming nothing and storing no key.
    ///
    /// On a RedisStore: one read of the key at cost 0 (its script writes nothing at cost
    /// 0), whatever `cost` is: `remaining` and `reset_after` are the key's, `allowed`
    /// answers for a request of cost 0. Compare `remaining` with a cost to know whether
    /// it would be admitted now.
    #[pyo3(signature = (key, now=None, cost=Cost(1)))]
    fn peek(&self, key: &Bound<'_, PyAny>, now: Option<f64>, cost: Cost) -> PyResult<PyDecision> {
        Ok(self.decide(key, now, cost, false)?.into())
    }

    /// Admit a request for `key` at an `estimate` (default 1; 0 charges nothing now and is
    /// admitted only while a unit is left) at `now`, returning a `Reservation` to settle
    /// with the actual cost (`r.settle(300)`, or `with ... as r: r.cost = 300`).
    #[pyo3(signature = (key, estimate=Cost(1), now=None))]
    fn reserve(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        estimate: Cost,
        now: Option<f64>,
    ) -> PyResult<PyReservation> {
        let this = slf.get();
        if let Some(shared) = &this.shared {
            if now.is_some() {
                return Err(PyValueError::new_err(
                    "now is not taken by a KeyedLimiter on a RedisStore: its time is Redis TIME",
                ));
            }
            let key = key_bytes(key)?.to_vec();
            let (decision, reservation) = shared.reserve_now(slf.py(), key, estimate.0)?;
            return Ok(PyReservation::new(
                slf.clone().unbind(),
                decision,
                estimate.0,
                reservation.map(Open::Shared),
            ));
        }
        let key = key_bytes(key)?.to_vec();
        let now = instant(now, &this.clock)?;
        let (decision, reservation) = this.inner.reserve(key, now, estimate.0);
        Ok(PyReservation::new(
            slf.clone().unbind(),
            decision,
            estimate.0,
            reservation.map(Open::Local),
        ))
    }

    /// Give `key` its own quota (a limiter instance used as a template), at run time.
    fn set_key_algorithm(&self, key: &Bound<'_, PyAny>, algorithm: Py<PyLimiter>) -> PyResult<()> {
        self.quota_in_process("set_key_algorithm")?;
        let key = key_bytes(key)?.to_vec();
        self.inner
            .set_key_algorithm(key, algorithm.get().algorithm.clone());
        Ok(())
    }

    /// Return `key` to the default quota.
    fn clear_key_algorithm(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.quota_in_process("clear_key_algorithm")?;
        self.inner.clear_key_algorithm(key_bytes(key)?);
        Ok(())
    }

    /// Replace the default quota for every key without its own, at run time; the keys'
    /// state is kept and read with the new parameters.
    fn set_algorithm(&self, algorithm: Py<PyLimiter>) -> PyResult<()> {
        self.quota_in_process("set_algorithm")?;
        let mut template = self.template.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.set_algorithm(algorithm.get().algorithm.clone());
        *template = algorithm;
        Ok(())
    }

    /// Drop every key back at full capacity at `now` (loses nothing); returns how many.
    ///
    /// On a RedisStore: nothing to do, returns 0 (`now` is refused): Redis expires each
    /// key by its TTL, set to when the key is back at full capacity.
    #[pyo3(signature = (now=None))]
    fn sweep(&self, py: Python<'_>, now: Option<f64>) -> PyResult<usize> {
        if self.shared.is_some() {
            if now.is_some() {
                return Err(PyValueError::new_err(
                    "now is not taken by a KeyedLimiter on a RedisStore: its time is Redis TIME",
                ));
            }
            return Ok(0);
        }
        let now = instant(now, &self.clock)?;
        let inner = &self.inner;
        Ok(py.detach(|| inner.sweep(now)))
    }

    /// Counters: `{"keys": held now, "idle_dropped": dropped at full capacity,
    /// "evicted": live keys evicted to respect max_keys, "max_keys": the cap}`. On a
    /// RedisStore: `TypeError` (no per-process key table).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.in_process("stats")?;
        let inner = &self.inner;
        let s = py.detach(|| inner.stats());
        let d = PyDict::new(py);
        d.set_item("keys", s.keys)?;
        d.set_item("idle_dropped", s.idle_dropped)?;
        d.set_item("evicted", s.evicted)?;
        d.set_item("max_keys", self.inner.max_keys())?;
        Ok(d)
    }

    /// The most keys this limiter holds.
    #[getter]
    fn max_keys(&self) -> usize {
        self.inner.max_keys()
    }

    /// The limiter given as the default quota (a template; its own state is unused).
    #[getter]
    fn algorithm(&self, py: Python<'_>) -> Py<PyLimiter> {
        self.template
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone_ref(py)
    }

    /// Keys held now. On a RedisStore: `TypeError` (no per-process key table).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.in_process("len()")?;
        let inner = &self.inner;
        Ok(py.detach(|| inner.len()))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let alg = self.algorithm(py).into_bound(py).repr()?;
        let tail = self
            .shared
            .as_ref()
            .map(|s| s.repr_tail())
            .unwrap_or_default();
        Ok(format!(
            "KeyedLimiter({alg}, max_keys={}{tail})",
            self.inner.max_keys()
        ))
    }
}
