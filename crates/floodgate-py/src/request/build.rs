//! A Python call's parts (method, path, header fields, client address, caller keys) as
//! the `http::Request` floodgate-http decides on: shared by `RequestLimiter.decide` and
//! `decide_scope`.

use std::net::{IpAddr, SocketAddr};

use floodgate_http::key::{PeerAddr, ProvidedKeys};
use http::{Method, Request};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::fields::{borrowed_bytes, header_map, text_bytes};

/// `path` as a request target: bytes outside visible ASCII percent-encoded (an ASGI
/// server gives the path decoded).
fn target(path: &[u8]) -> PyResult<http::Uri> {
    if !path.starts_with(b"/") && path != b"*" {
        return Err(PyValueError::new_err(format!(
            "path {:?} must start with /",
            String::from_utf8_lossy(path)
        )));
    }
    let invalid = |e: http::uri::InvalidUri| {
        PyValueError::new_err(format!(
            "path {:?} is not a request target: {e}",
            String::from_utf8_lossy(path)
        ))
    };
    let visible = |b: &u8| (0x21..0x7f).contains(b);
    if path.iter().all(visible) {
        // as a rule: nothing to encode
        return http::Uri::try_from(path).map_err(invalid);
    }
    let mut out = String::with_capacity(path.len() + 8);
    for b in path {
        if visible(b) {
            out.push(*b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.parse().map_err(invalid)
}

/// The IP address `host` names (`"203.0.113.7"`, `"[2001:db8::1]"`).
pub(super) fn ip_of(host: &str) -> PyResult<IpAddr> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse()
        .map_err(|_| PyValueError::new_err(format!("client {host:?} is not an IP address")))
}

/// The client address: `"203.0.113.7"`, `"[2001:db8::1]"`, or ASGI's `(host, port)`.
fn peer(client: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    if let Ok(s) = client.cast::<PyString>() {
        return Ok(SocketAddr::new(ip_of(s.to_str()?)?, 0));
    }
    let Ok(t) = client.cast::<PyTuple>() else {
        return Err(PyTypeError::new_err(
            "client must be an address str or a (host, port) tuple",
        ));
    };
    let (host, port): (String, u16) = t.extract().map_err(|_| {
        PyTypeError::new_err("client must be an address str or a (host, port) tuple")
    })?;
    Ok(SocketAddr::new(ip_of(&host)?, port))
}

/// The request to decide on, built from Python's parts.
pub(super) fn request(
    method: &str,
    path: &Bound<'_, PyAny>,
    headers: Option<&Bound<'_, PyAny>>,
    client: Option<&Bound<'_, PyAny>>,
    keys: Option<&Bound<'_, PyAny>>,
) -> PyResult<Request<()>> {
    let peer = client.filter(|c| !c.is_none()).map(peer).transpose()?;
    build_request(method, borrowed_bytes(path, "path")?, headers, peer, keys)
}

/// The request to decide on: `method`, `path` (its query, if any, is not read), header
/// fields as Python gives them, the peer's address and the caller's keys.
pub(super) fn build_request(
    method: &str,
    path: &[u8],
    headers: Option<&Bound<'_, PyAny>>,
    peer: Option<SocketAddr>,
    keys: Option<&Bound<'_, PyAny>>,
) -> PyResult<Request<()>> {
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| PyValueError::new_err(format!("method {method:?} is not an HTTP method")))?;
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = target(path)?;
    if let Some(h) = headers {
        *req.headers_mut() = header_map(h)?;
    }
    if let Some(p) = peer {
        req.extensions_mut().insert(PeerAddr(p));
    }
    if let Some(k) = keys.filter(|k| !k.is_none()) {
        let mut provided = ProvidedKeys::default();
        if let Ok(d) = k.cast::<PyDict>() {
            for (name, key) in d.iter() {
                let name: String = name
                    .extract()
                    .map_err(|_| PyTypeError::new_err("keys: policy names must be str"))?;
                let key = text_bytes(&key, "a key")?;
                provided.by_policy.push((name, key));
            }
        } else {
            provided.any = Some(text_bytes(k, "keys")?);
        }
        req.extensions_mut().insert(provided);
    }
    Ok(req)
}
