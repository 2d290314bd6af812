//! The hop-by-hop fields (RFC 9110 §7.6.1): `Connection`, `Keep-Alive`,
//! `Proxy-Connection`, `Proxy-Authenticate`, `TE`, `Trailer`, `Transfer-Encoding`,
//! `Upgrade`, and the fields a `Connection` header names. They are one connection's own:
//! never forwarded, either way ([`strip_hop_by_hop`]); admission removes them from a
//! request before the limiter sees it, keeping the fields it must not lose
//! ([`strip_hop_by_hop_except`]).

use http::HeaderMap;
use http::header::{CONNECTION, HOST, HeaderName};

/// The fields [`is_hop_by_hop`] names, as `HeaderName`s (its test holds them alike).
#[cfg(test)]
static HOP_BY_HOP: [HeaderName; 8] = [
    HeaderName::from_static("connection"),
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("proxy-authenticate"),
    HeaderName::from_static("te"),
    HeaderName::from_static("trailer"),
    HeaderName::from_static("transfer-encoding"),
    HeaderName::from_static("upgrade"),
];

/// Whether `name` (lowercase, as `HeaderName` holds it) is one of the hop-by-hop fields
/// this module's documentation lists.
pub(crate) fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Remove the hop-by-hop fields and those `Connection` names.
pub(crate) fn strip_hop_by_hop(h: &mut HeaderMap) {
    // one pass over the names first: most messages carry none, and those that do carry
    // one or two (an upstream's `Connection: keep-alive`), so only the names present
    // are removed (each removal hashes its name; all eight cost more than the scan)
    let present: Vec<HeaderName> = h
        .keys()
        .filter(|k| is_hop_by_hop(k.as_str()))
        .cloned()
        .collect();
    if present.is_empty() {
        return;
    }
    // headers named in Connection are hop-by-hop too
    let named: Vec<HeaderName> = h
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
        .collect();
    for n in present.iter().chain(&named) {
        h.remove(n);
    }
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// Remove the hop-by-hop fields and those `Connection` names, except `Host`, the
/// forwarding headers and `keep`.
pub(crate) fn strip_hop_by_hop_except(h: &mut HeaderMap, keep: &[HeaderName]) {
    // one pass over the names first: most requests carry none
    if !h.keys().any(|k| is_hop_by_hop(k.as_str())) {
        return;
    }
    let named: Vec<HeaderName> = h
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
        .filter(|n| *n != HOST && *n != X_FORWARDED_FOR && *n != FORWARDED && !keep.contains(n))
        .collect();
    for n in &named {
        h.remove(n);
    }
    let hop: Vec<HeaderName> = h
        .keys()
        .filter(|k| is_hop_by_hop(k.as_str()))
        .cloned()
        .collect();
    for n in &hop {
        h.remove(n);
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_named_in_connection_are_stripped() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("x-secret, Keep-Alive"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        h.insert("upgrade", HeaderValue::from_static("h2c"));
        h.append("connection", HeaderValue::from_static("upgrade"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
        // an upstream's usual one
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("keep-alive"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("content-length", HeaderValue::from_static("2"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.keys().collect::<Vec<_>>(), ["content-length"]);
        // without any hop-by-hop header, nothing is touched (not even a header that a
        // Connection header would have named)
        let mut h = HeaderMap::new();
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 2);
        // the fast name test and the list agree
        for n in &HOP_BY_HOP {
            assert!(is_hop_by_hop(n.as_str()), "{n}");
        }
        for n in ["x-kept", "host", "content-length", "tes", "connections"] {
            assert!(!is_hop_by_hop(n), "{n}");
        }
    }
}
