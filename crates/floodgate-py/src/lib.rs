#![doc = include_str!("../README.md")]
mod args;
mod decision;
mod errors;
mod inbox;
mod inflight;
mod keyed;
mod limiter;
mod request;
mod runtime;
mod store;
mod throttle;

use pyo3::prelude::*;

/// Rate limiting that names its guarantee at the window boundary (native part).
#[pymodule]
fn _floodgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    runtime::watch_forks(m)?;
    // "release" or "debug": benchmarks refuse to report figures of a debug build.
    m.add(
        "BUILD_PROFILE",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    )?;
    m.add("ConfigError", m.py().get_type::<args::ConfigError>())?;
    m.add_class::<decision::PyDecision>()?;
    m.add_class::<limiter::PyLimiter>()?;
    m.add_class::<limiter::PyFixedWindow>()?;
    m.add_class::<limiter::PySlidingLog>()?;
    m.add_class::<limiter::PySlidingCounter>()?;
    m.add_class::<limiter::PyTokenBucket>()?;
    m.add_class::<limiter::PyLeakyBucket>()?;
    // The leaky bucket as a meter, under the core's `Kind` name too: the same class.
    m.add("LeakyMeter", m.getattr("LeakyBucket")?)?;
    m.add_class::<limiter::PyLeakyQueue>()?;
    m.add_class::<limiter::PyGcra>()?;
    m.add_class::<keyed::PyKeyedLimiter>()?;
    m.add_class::<keyed::PyReservation>()?;
    m.add_class::<inflight::PyInFlight>()?;
    m.add_class::<inflight::PyLease>()?;
    m.add("InFlightFull", m.py().get_type::<inflight::InFlightFull>())?;
    m.add("RedisError", m.py().get_type::<throttle::RedisError>())?;
    m.add(
        "RedisTimeoutError",
        m.py().get_type::<throttle::RedisTimeoutError>(),
    )?;
    m.add(
        "StoreUnavailable",
        m.py().get_type::<errors::StoreUnavailable>(),
    )?;
    m.add(
        "RateLimitExceeded",
        m.py().get_type::<errors::RateLimitExceeded>(),
    )?;
    m.add_class::<store::PyRedisStore>()?;
    m.add_class::<request::PyPolicy>()?;
    m.add_class::<request::PyRoute>()?;
    m.add_class::<request::PyRequestLimiter>()?;
    m.add_class::<request::PyVerdict>()?;
    m.add_function(wrap_pyfunction!(throttle::throttle, m)?)?;
    m.add_function(wrap_pyfunction!(args::parse_rate, m)?)?;
    m.add_function(wrap_pyfunction!(args::parse_rates, m)?)?;
    Ok(())
}
