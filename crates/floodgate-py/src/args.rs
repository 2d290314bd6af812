//! Conversion of Python arguments to core types, with the errors Python users expect:
//! `TypeError` for a value of the wrong type, `ValueError` for a value of the right type
//! that cannot work (negative, NaN, infinite, zero where at least 1 is needed).
//!
//! Units: every time and duration crossing the Python boundary is in **seconds** (`float`);
//! inside it is core [`Nanos`] (integer nanoseconds).

use std::time::Duration;

use floodgate_core::{Clock, ConfigError as CoreConfigError, MonotonicClock, Nanos, Rate};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};

pyo3::create_exception!(
    floodgate,
    ConfigError,
    PyValueError,
    "A limiter parameter that cannot work (a subclass of ValueError)."
);

/// A core configuration error as a Python `floodgate.ConfigError` (a `ValueError`).
pub fn config_err(e: CoreConfigError) -> PyErr {
    ConfigError::new_err(e.to_string())
}

/// The same, with the Python parameter name in front when the core message lacks it.
pub fn config_err_named(what: &str, e: CoreConfigError) -> PyErr {
    let msg = e.to_string();
    if msg.contains(what) {
        ConfigError::new_err(msg)
    } else {
        ConfigError::new_err(format!("{what}: {msg}"))
    }
}

/// `now` in seconds on the limiter's time axis, or the limiter's monotonic clock when
/// `None`. NaN, infinities and negative values are a `ValueError` (the core would clamp
/// them to zero, silently).
#[inline]
pub fn instant(now: Option<f64>, clock: &MonotonicClock) -> PyResult<Nanos> {
    match now {
        None => Ok(clock.now()),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Nanos::from_secs_f64(s)),
        Some(s) => Err(PyValueError::new_err(format!(
            "now must be a finite number of seconds >= 0, got {}",
            py_float(s)
        ))),
    }
}

/// Python's spelling of a float (`nan`, `inf`, `-1.5`), for error messages.
pub fn py_float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{v:?}")
    }
}

/// Unit-count arguments that may be passed positionally with a default: a non-negative
/// `int`. Negative is a `ValueError` (not the `OverflowError` a plain unsigned conversion
/// would raise), a float or str a `TypeError` (which PyO3 prefixes with
/// "argument 'NAME': ").
macro_rules! unit_arg {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name(pub u64);

        impl<'a, 'py> FromPyObject<'a, 'py> for $name {
            type Error = PyErr;

            #[inline]
            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<$name> {
                match obj.extract::<u64>() {
                    Ok(v) => Ok($name(v)),
                    Err(_) => Err(uint_error(&obj, $what, 0, false)),
                }
            }
        }
    };
}

unit_arg!(
    /// A request's cost in units (`cost=`).
    Cost,
    "cost"
);
unit_arg!(
    /// `CL.THROTTLE`'s quantity (`quantity=`).
    Quantity,
    "quantity"
);

/// A whole-number parameter named `what` (`limit`, `capacity`, `burst`...) whose smallest
/// sensible value is `min` (used in the message for negative input; a zero where 1 is
/// needed is left to the core, whose `ConfigError` names the parameter).
pub fn uint(obj: &Bound<'_, PyAny>, what: &str, min: u64) -> PyResult<u64> {
    obj.extract::<u64>()
        .map_err(|_| uint_error(obj, what, min, true))
}

/// The error for an object that is not a `u64`: the reason, in Python terms.
fn uint_error(obj: &Bound<'_, PyAny>, what: &str, min: u64, name_in_type_error: bool) -> PyErr {
    if obj.is_instance_of::<PyInt>() {
        let negative = obj.lt(0i64).unwrap_or(false);
        if negative {
            PyValueError::new_err(format!(
                "{what} must be a whole number >= {min}, got {}",
                repr_of(obj)
            ))
        } else {
            PyValueError::new_err(format!(
                "{what} is too large: {} is above the maximum of {}",
                repr_of(obj),
                u64::MAX
            ))
        }
    } else {
        let name = if name_in_type_error { what } else { "" };
        let sep = if name_in_type_error { " " } else { "" };
        PyTypeError::new_err(format!("{name}{sep}must be an int, not {}", type_name(obj)))
    }
}

/// A strictly positive, finite number of seconds named `what`, as a [`Duration`].
pub fn seconds(v: f64, what: &str) -> PyResult<Duration> {
    let v = positive_finite(v, what)?;
    Duration::try_from_secs_f64(v)
        .map_err(|_| PyValueError::new_err(format!("{what} is too large: {} seconds", py_float(v))))
}

/// A number of seconds named `what`, finite and above 0 (or at least 0 with
/// `zero_ok`), as a [`Duration`]; anything else is a `ConfigError` naming `what`.
pub fn config_duration(v: f64, what: &str, zero_ok: bool) -> PyResult<Duration> {
    let ok = v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0));
    if !ok {
        let least = if zero_ok { ">= 0" } else { "> 0" };
        return Err(ConfigError::new_err(format!(
            "{what} must be a finite number of seconds {least}, got {}",
            py_float(v)
        )));
    }
    Duration::try_from_secs_f64(v)
        .map_err(|_| ConfigError::new_err(format!("{what} is too large: {} seconds", py_float(v))))
}

/// [`config_duration`] above 0.
pub fn config_seconds(v: f64, what: &str) -> PyResult<Duration> {
    config_duration(v, what, false)
}

/// A strictly positive, finite float named `what`.
pub fn positive_finite(v: f64, what: &str) -> PyResult<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(PyValueError::new_err(format!(
            "{what} must be a positive, finite number, got {}",
            py_float(v)
        )))
    }
}

/// A rate of `per_second` units per second (fractional allowed), named `what`.
pub fn rate_per_second(per_second: f64, what: &str) -> PyResult<Rate> {
    let v = positive_finite(per_second, what)?;
    Rate::per_second_f64(v).map_err(|e| config_err_named(what, e))
}

/// A key's bytes: a `str` (its UTF-8 encoding) or `bytes`. So `"alice"` and `b"alice"` are
/// the same key, and any byte string is a key of its own.
#[inline]
pub fn key_bytes<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    Err(PyTypeError::new_err(format!(
        "key must be str or bytes, not {}",
        type_name(obj)
    )))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn repr_of(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into())
}
