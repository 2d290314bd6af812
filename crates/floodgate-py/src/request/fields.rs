//! Request parts from Python: header fields and the bytes of `str` or `bytes` values, as
//! ASGI and WSGI give them (for `decide` and for the response head a verdict settles from).

use http::{HeaderMap, HeaderName, HeaderValue};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// Bytes of a `str` (UTF-8) or `bytes` object named `what`.
pub(super) fn text_bytes(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!("{what} must be str or bytes")))
}

/// Bytes of a `str` (UTF-8) or `bytes` object named `what`, borrowed where Python holds
/// them as such.
pub(super) fn borrowed_bytes<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    Err(PyTypeError::new_err(format!("{what} must be str or bytes")))
}

/// Header fields from Python: a mapping or an iterable of `(name, value)` pairs, each a
/// `str` (UTF-8) or `bytes`, as ASGI and WSGI give them; repeated names kept in order.
pub(super) fn header_map(h: &Bound<'_, PyAny>) -> PyResult<HeaderMap> {
    let mut map = HeaderMap::new();
    let items = match h.cast::<PyDict>() {
        Ok(d) => d.items().into_any(),
        // ASGI's list of pairs: no `items` to look up (a failed lookup raises inside)
        Err(_) if h.is_instance_of::<PyList>() || h.is_instance_of::<PyTuple>() => h.clone(),
        Err(_) if h.hasattr("items")? => h.call_method0("items")?,
        Err(_) => h.clone(),
    };
    for item in items.try_iter()? {
        let item = item?;
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract().map_err(|_| {
            PyTypeError::new_err("headers must be a mapping or an iterable of (name, value) pairs")
        })?;
        let k = borrowed_bytes(&k, "a header name")?;
        let name = HeaderName::from_bytes(k).map_err(|_| {
            PyValueError::new_err(format!(
                "header name {:?} is not valid",
                String::from_utf8_lossy(k)
            ))
        })?;
        let v = borrowed_bytes(&v, "a header value")?;
        let value = HeaderValue::from_bytes(v)
            .map_err(|_| PyValueError::new_err(format!("header {name}: the value is not valid")))?;
        map.append(name, value);
    }
    Ok(map)
}

/// The name of a field as bytes, the RateLimit fields' names made once per process.
fn name_bytes<'py>(py: Python<'py>, name: &HeaderName) -> Bound<'py, PyBytes> {
    static POLICY: PyOnceLock<Py<PyBytes>> = PyOnceLock::new();
    static RATELIMIT: PyOnceLock<Py<PyBytes>> = PyOnceLock::new();
    let cached = match name.as_str() {
        "ratelimit-policy" => &POLICY,
        "ratelimit" => &RATELIMIT,
        other => return PyBytes::new(py, other.as_bytes()),
    };
    cached
        .get_or_init(py, || PyBytes::new(py, name.as_str().as_bytes()).unbind())
        .bind(py)
        .clone()
}

/// Header fields as the bytes an ASGI server sends: a list of `(name, value)` tuples,
/// names lower case, as rendered (no decoding or encoding in between).
pub(super) fn header_list<'py, 'h>(
    py: Python<'py>,
    h: impl IntoIterator<Item = (&'h HeaderName, &'h HeaderValue)>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for (k, v) in h {
        let pair = PyTuple::new(py, [name_bytes(py, k), PyBytes::new(py, v.as_bytes())])?;
        list.append(pair)?;
    }
    Ok(list)
}
