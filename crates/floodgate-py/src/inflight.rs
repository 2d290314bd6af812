//! `floodgate.InFlight`: at most `n` calls of one key running at once, held as leases that
//! expire after `ttl` seconds (the core's [`floodgate_core::inflight`]); `floodgate.Lease`,
//! a held lease and its context manager; `floodgate.InFlightFull`, raised by `hold` when
//! every place is taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floodgate_core::inflight::{KeyedInFlight, LeaseId, LeaseTtl};
use floodgate_core::{MonotonicClock, Nanos};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::args::{config_err, config_err_named, instant, key_bytes, seconds, uint};
use crate::decision::PyDecision;

pyo3::create_exception!(
    floodgate,
    InFlightFull,
    PyRuntimeError,
    "Every place of the key is taken: `args[1]` is the Decision (its retry_after: until the earliest lease expires)."
);

struct Shared {
    table: KeyedInFlight<Vec<u8>>,
    ttl: LeaseTtl,
    clock: MonotonicClock,
}

/// At most `n` calls of one key in flight at once. Each `acquire` takes a lease that
/// lives `ttl` seconds unless released (or renewed) first, so a holder that dies cannot
/// leak a place. Keys are str or bytes (`"a"` and `b"a"` are one key); at most
/// `max_keys` keys are held (default 100000). Times are seconds on the object's monotonic
/// clock, or `now` on your own axis. Thread-safe.
#[pyclass(name = "InFlight", module = "floodgate", frozen)]
pub struct PyInFlight {
    shared: Arc<Shared>,
}

/// A lease held on a key: `release()` gives it back (once; later calls return False),
/// `renew()` extends it by the TTL. As a context manager it is released on exit.
#[pyclass(name = "Lease", module = "floodgate", frozen)]
pub struct PyLease {
    shared: Arc<Shared>,
    key: Vec<u8>,
    id: LeaseId,
    expires: Nanos,
    decision: PyDecision,
    released: AtomicBool,
}

/// A key's bytes (`str` or `bytes`); no key at all is the empty key (one limit for all).
fn key_of<'a>(key: Option<&'a Bound<'_, PyAny>>) -> PyResult<&'a [u8]> {
    key.map_or(Ok(&[][..]), key_bytes)
}

fn ttl_of(ttl: f64) -> PyResult<LeaseTtl> {
    LeaseTtl::new(seconds(ttl, "ttl")?).map_err(|e| config_err_named("ttl", e))
}

#[pymethods]
impl PyInFlight {
    #[new]
    #[pyo3(signature = (n, ttl, max_keys=None))]
    fn new(n: &Bound<'_, PyAny>, ttl: f64, max_keys: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let n = uint(n, "n", 1)?;
        let max_keys = match max_keys {
            Some(m) => uint(m, "max_keys", 1)?,
            None => 100_000,
        };
        let table = KeyedInFlight::new(n, usize::try_from(max_keys).unwrap_or(usize::MAX))
            .map_err(config_err)?;
        Ok(PyInFlight {
            shared: Arc::new(Shared {
                table,
                ttl: ttl_of(ttl)?,
                clock: MonotonicClock::new(),
            }),
        })
    }

    /// Take a lease on `key` at `now`: a `Lease`, or None when `n` are in flight (`check`
    /// says until when).
    #[pyo3(signature = (key=None, now=None))]
    fn acquire(
        &self,
        key: Option<&Bound<'_, PyAny>>,
        now: Option<f64>,
    ) -> PyResult<Option<PyLease>> {
        Ok(self.take(key, now)?.ok())
    }

    /// A lease as a context manager: `with gpu.hold("model"):` runs the block holding a
    /// place, released on exit; raises `InFlightFull` (with the Decision) when none is
    /// free.
    #[pyo3(signature = (key=None, now=None))]
    fn hold(&self, key: Option<&Bound<'_, PyAny>>, now: Option<f64>) -> PyResult<PyLease> {
        match self.take(key, now)? {
            Ok(lease) => Ok(lease),
            Err(d) => Err(InFlightFull::new_err((
                format!(
                    "all {} places of the key are taken; retry after {:.3} s",
                    d.limit,
                    d.retry_after.unwrap_or(Duration::ZERO).as_secs_f64()
                ),
                PyDecision::from(d),
            ))),
        }
    }

    /// The Decision `acquire` would make at `now`, taking nothing.
    #[pyo3(signature = (key=None, now=None))]
    fn check(&self, key: Option<&Bound<'_, PyAny>>, now: Option<f64>) -> PyResult<PyDecision> {
        let now = instant(now, &self.shared.clock)?;
        Ok(self.shared.table.peek(key_of(key)?, now).into())
    }

    /// Give back the lease `lease_id` of `key`: True when it held a place; False (nothing
    /// freed) when released before, expired or never issued.
    #[pyo3(signature = (key, lease_id, now=None))]
    fn release(&self, key: &Bound<'_, PyAny>, lease_id: u64, now: Option<f64>) -> PyResult<bool> {
        let now = instant(now, &self.shared.clock)?;
        Ok(self
            .shared
            .table
            .release(key_bytes(key)?, LeaseId(lease_id), now))
    }

    /// Extend the live lease `lease_id` of `key` to `now + ttl`; False when unknown,
    /// released or expired.
    #[pyo3(signature = (key, lease_id, now=None))]
    fn renew(&self, key: &Bound<'_, PyAny>, lease_id: u64, now: Option<f64>) -> PyResult<bool> {
        let now = instant(now, &self.shared.clock)?;
        let s = &self.shared;
        Ok(s.table
            .renew(key_bytes(key)?, LeaseId(lease_id), now, s.ttl))
    }

    /// Leases of `key` live at `now`.
    #[pyo3(signature = (key=None, now=None))]
    fn in_flight(&self, key: Option<&Bound<'_, PyAny>>, now: Option<f64>) -> PyResult<u64> {
        let now = instant(now, &self.shared.clock)?;
        Ok(self.shared.table.in_flight(key_of(key)?, now))
    }

    /// `n`.
    #[getter]
    fn n(&self) -> u64 {
        self.shared.table.limit()
    }

    /// The lease TTL in seconds (rounded up to whole microseconds).
    #[getter]
    fn ttl(&self) -> f64 {
        self.shared.ttl.get().as_secs_f64()
    }

    fn __repr__(&self) -> String {
        format!("InFlight(n={}, ttl={})", self.n(), self.ttl())
    }
}

impl PyInFlight {
    fn take(
        &self,
        key: Option<&Bound<'_, PyAny>>,
        now: Option<f64>,
    ) -> PyResult<Result<PyLease, floodgate_core::Decision>> {
        let s = &self.shared;
        let now = instant(now, &s.clock)?;
        let key = key_of(key)?;
        Ok(s.table.acquire(key, now, s.ttl).map(|l| PyLease {
            shared: s.clone(),
            key: key.to_vec(),
            id: l.id,
            expires: l.expires,
            decision: l.decision.into(),
            released: AtomicBool::new(false),
        }))
    }
}

#[pymethods]
impl PyLease {
    /// The lease's id (for `InFlight.release(key, id)`).
    #[getter]
    fn id(&self) -> u64 {
        self.id.0
    }

    /// The key, as bytes.
    #[getter]
    fn key(&self) -> &[u8] {
        &self.key
    }

    /// The admitting Decision (remaining = places still free).
    #[getter]
    fn decision(&self) -> PyDecision {
        self.decision.clone()
    }

    /// When the lease expires unless renewed, in seconds on the InFlight's time axis.
    #[getter]
    fn expires(&self) -> f64 {
        self.expires.as_secs_f64()
    }

    /// Give the place back: True the first time (if the lease was still live), False
    /// after (nothing is freed twice).
    #[pyo3(signature = (now=None))]
    fn release(&self, now: Option<f64>) -> PyResult<bool> {
        let now = instant(now, &self.shared.clock)?;
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(false);
        }
        Ok(self.shared.table.release(&self.key, self.id, now))
    }

    /// Extend the lease to `now + ttl`; False when it was released or had expired.
    #[pyo3(signature = (now=None))]
    fn renew(&self, now: Option<f64>) -> PyResult<bool> {
        let now = instant(now, &self.shared.clock)?;
        let s = &self.shared;
        Ok(!self.released.load(Ordering::Acquire) && s.table.renew(&self.key, self.id, now, s.ttl))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.release(None)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(id={}, key={:?}, remaining={})",
            self.id.0,
            String::from_utf8_lossy(&self.key),
            self.decision.inner().remaining
        )
    }
}
