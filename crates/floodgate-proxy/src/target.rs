//! What the proxy admits, checked before the limiter looks at a request, on both of its
//! HTTP/1 paths and on HTTP/2 ([`admit`]). A request the limiter sees is the
//! request the upstream receives: the route is chosen by exactly the path sent upstream.
//!
//! * Method: an upper-case token (`get` is refused: 400); `CONNECT` and `TRACE`: 405.
//! * Target (RFC 9112 §3.2): origin-form (`/path?query`), absolute-form with an `http`
//!   or `https` scheme and no userinfo, or `OPTIONS *`; anything else (authority-form,
//!   `x`, `host:80`, `user@host`, `*` with another method): 400. An absolute-form
//!   target's authority replaces `Host` (RFC 9112 §3.2.2; HTTP/2's `:authority` the
//!   same) and the request goes on in origin-form: `GET http://a?x=1` is sent as
//!   `GET /?x=1` with `Host: a`.
//! * Path ([`normalize_path`]): percent-escapes of unreserved characters decoded, other
//!   escapes kept (hex digits upper-cased), dot segments removed, repeated slashes
//!   merged. The normalized path is the one routes match and the one sent upstream; the
//!   query is kept byte for byte. Refused (400): a bad escape, an encoded `/`, `\` or
//!   NUL, a raw `\`, and a segment that is empty, `.` or `..` before `;` parameters
//!   (`/..;/admin`, which some servers resolve as `/admin`). Matching is case-sensitive
//!   (`/ADMIN` is not `/admin`), as paths are in RFC 3986 and in nginx.
//! * `Host`: repeated, empty or not a `host[:port]`: 400; missing: 400 for HTTP/1.1 and
//!   HTTP/2 (an HTTP/1.0 request without one is sent with the upstream's).
//! * HTTP/2 (and later): any field value with a leading or trailing space or tab: 400,
//!   counted as `head` (RFC 9113 §8.2.1 makes such a request malformed). HTTP/1 parsers
//!   strip that whitespace, so `x-api-key: " real"` would be a new key to the limiter
//!   and `real` to an HTTP/1 upstream. Every field is checked, not only `Host` and the
//!   headers policies key on: a custom key extractor may read any of them.
//! * A header some policy keys on, repeated: 400 (the limiter would count the first
//!   value, a backend may read the last).
//! * Hop-by-hop fields (`Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
//!   `Transfer-Encoding`, `Upgrade`) and those `Connection` names are removed here,
//!   before the limiter, except that `Connection` never removes `Host`,
//!   `X-Forwarded-For`, `Forwarded` or a header a policy keys on.
//!
//! Every refusal is counted: `floodgate_requests_total{outcome="invalid"}` and
//! `floodgate_invalid_requests_total{reason}`; the connection closes after it.

use std::borrow::Cow;
use std::sync::Arc;

use floodgate_engine::deny::{ReplyFormat, short_response};
use floodgate_engine::metrics::Metrics;
use floodgate_http::limiter::RateLimiter;
use http::header::{ALLOW, HOST, HeaderName};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::Either;

use crate::forward::FleetBody;
use crate::hop_by_hop::strip_hop_by_hop_except;

/// Why a request was refused: its status, the `reason` label it is counted under (one
/// of [`floodgate_engine::metrics::INVALID_REASONS`]) and the text the client is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// 400, or 405 for a method the proxy does not forward.
    pub status: StatusCode,
    /// The metric's `reason`.
    pub reason: &'static str,
    /// What the response body says.
    pub detail: &'static str,
}

const fn bad(reason: &'static str, detail: &'static str) -> Refusal {
    Refusal {
        status: StatusCode::BAD_REQUEST,
        reason,
        detail,
    }
}

const NOT_ALLOWED: Refusal = Refusal {
    status: StatusCode::METHOD_NOT_ALLOWED,
    reason: "method_not_allowed",
    detail: "CONNECT and TRACE are not forwarded",
};

impl Refusal {
    /// The response: a short text body, `Allow` on a 405.
    pub(crate) fn response(&self) -> Response<FleetBody> {
        let mut r = short_response(self.status, self.detail, None, None, ReplyFormat::Text);
        if self.status == StatusCode::METHOD_NOT_ALLOWED {
            r.headers_mut().insert(
                ALLOW,
                HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"),
            );
        }
        r.map(Either::Right)
    }
}

/// The proxy's admission check, shared by a runtime's connections.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Headers some policy keys on.
    key_headers: Vec<HeaderName>,
    metrics: Arc<Metrics>,
}

impl Admission {
    pub(crate) fn new(limiter: &RateLimiter) -> Admission {
        Admission {
            key_headers: limiter.key_headers(),
            metrics: limiter.metrics().clone(),
        }
    }

    /// [`admit`] `req`, counting a refusal.
    pub(crate) fn admit<B>(&self, req: &mut Request<B>) -> Result<(), Refusal> {
        admit(req, &self.key_headers).inspect_err(|r| {
            self.metrics.invalid(r.reason);
            tracing::debug!(reason = r.reason, detail = r.detail, "request refused");
        })
    }
}

/// Check `req` and bring it to the form the limiter and the upstream see (see the
/// module's documentation); `key_headers` are the headers some policy keys on.
pub fn admit<B>(req: &mut Request<B>, key_headers: &[HeaderName]) -> Result<(), Refusal> {
    check_method(req.method())?;
    check_h2_field_values(req)?;
    let authority = origin_form(req)?;
    check_host(req, authority)?;
    let headers = req.headers_mut();
    for h in key_headers {
        if headers.get_all(h).iter().nth(1).is_some() {
            return Err(bad(
                "key_header",
                "a header the rate limit is keyed on is repeated",
            ));
        }
    }
    strip_hop_by_hop_except(headers, key_headers);
    Ok(())
}

const PADDED_FIELD: Refusal = bad(
    "head",
    "an HTTP/2 field value starts or ends with a space or a tab",
);

/// On HTTP/2 and later, refuse a field value with leading or trailing SP or HTAB
/// (RFC 9113 §8.2.1): an HTTP/1 hop reads `" real"` as `real`, so the limiter and the
/// upstream would see two different keys. HTTP/1 heads are trimmed by their parsers.
fn check_h2_field_values<B>(req: &Request<B>) -> Result<(), Refusal> {
    if req.version() < Version::HTTP_2 {
        return Ok(());
    }
    let padded = |b: &u8| matches!(*b, b' ' | b'\t');
    for v in req.headers().values() {
        let b = v.as_bytes();
        if b.first().is_some_and(padded) || b.last().is_some_and(padded) {
            return Err(PADDED_FIELD);
        }
    }
    Ok(())
}

fn check_method(m: &Method) -> Result<(), Refusal> {
    match *m {
        Method::GET
        | Method::HEAD
        | Method::POST
        | Method::PUT
        | Method::DELETE
        | Method::OPTIONS
        | Method::PATCH => Ok(()),
        Method::CONNECT | Method::TRACE => Err(NOT_ALLOWED),
        // `Method` holds a token already; the case is what is left to check
        _ if m.as_str().bytes().any(|b| b.is_ascii_lowercase()) => {
            Err(bad("method", "methods are upper-case"))
        }
        _ => Ok(()),
    }
}

const BAD_TARGET: Refusal = bad(
    "target",
    "the request target must be a path, an absolute http(s) URI, or * for OPTIONS",
);

/// Bring the target to origin-form with a normalized path (`OPTIONS *` stays as it is);
/// the authority of an absolute-form target is returned, for `Host`.
fn origin_form<B>(req: &mut Request<B>) -> Result<Option<Authority>, Refusal> {
    let uri = req.uri();
    let authority = match (uri.scheme(), uri.authority()) {
        (None, None) => {
            if uri.path() == "*" {
                return if req.method() == Method::OPTIONS {
                    Ok(None)
                } else {
                    Err(BAD_TARGET)
                };
            }
            if !uri.path().starts_with('/') {
                return Err(BAD_TARGET);
            }
            None
        }
        (Some(s), Some(a)) if (*s == Scheme::HTTP || *s == Scheme::HTTPS) => {
            if a.as_str().contains('@') || a.host().is_empty() {
                return Err(BAD_TARGET);
            }
            Some(a.clone())
        }
        _ => return Err(BAD_TARGET),
    };
    let path = normalize_path(uri.path())?;
    if authority.is_none() && matches!(path, Cow::Borrowed(_)) {
        return Ok(None); // origin-form already normalized: the common case, untouched
    }
    let mut pq = path.into_owned();
    if let Some(q) = uri.query() {
        pq.push('?');
        pq.push_str(q);
    }
    let pq = PathAndQuery::try_from(pq).map_err(|_| BAD_TARGET)?;
    *req.uri_mut() = Uri::from(pq);
    Ok(authority)
}

fn check_host<B>(req: &mut Request<B>, authority: Option<Authority>) -> Result<(), Refusal> {
    let mut hosts = req.headers().get_all(HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(bad("host", "Host is repeated"));
    }
    if let Some(a) = authority {
        // the absolute-form target's authority wins (RFC 9112 §3.2.2)
        let v = HeaderValue::from_str(a.as_str()).map_err(|_| BAD_TARGET)?;
        req.headers_mut().insert(HOST, v);
        return Ok(());
    }
    match first {
        None if req.version() == Version::HTTP_10 || req.version() == Version::HTTP_09 => Ok(()),
        None => Err(bad("host", "Host is missing")),
        Some(v) => {
            if plain_host(v.as_bytes()) || host_is_authority(v.as_bytes()) {
                Ok(())
            } else {
                Err(bad("host", "Host is empty or not a host[:port]"))
            }
        }
    }
}

/// Whether a `Host` value is a `host[:port]`: non-empty, no userinfo, an [`Authority`]
/// with a non-empty host. Parsing it as an `Authority` copies the value into a new
/// buffer and scans it three times: most of what admitting a request cost.
fn host_is_authority(v: &[u8]) -> bool {
    !v.is_empty()
        && !v.contains(&b'@')
        && Authority::try_from(v).is_ok_and(|a| !a.host().is_empty())
}

/// The common `Host` in one pass: letters, digits, `-`, `.`, `_`, `~`, then at most one
/// `:` and digits. Every such value with a non-empty host passes [`host_is_authority`]
/// (none of these bytes ends an authority, opens a bracket, or starts userinfo or an
/// escape; one colon is a port's): `true` here only where it answers `true` (a property
/// test holds it); `false` sends anything else to it.
fn plain_host(v: &[u8]) -> bool {
    let (host, port) = match v.iter().position(|&b| b == b':') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &[][..]),
    };
    !host.is_empty()
        && host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
        && port.iter().all(u8::is_ascii_digit)
}

const BAD_PATH: Refusal = bad(
    "path",
    "the path has a bad escape, an encoded / or \\ or NUL, or a dot or empty segment with ; parameters",
);

/// The path as routes match it and the upstream receives it: unreserved characters'
/// escapes decoded (RFC 3986 §6.2.2.2), other escapes' hex digits upper-cased, dot
/// segments removed (§5.2.4; `..` above the root stays at the root), repeated slashes
/// merged. `Borrowed` when `path` is already so. Refused: a bad escape, `%2F`, `%5C`,
/// `%00`, a raw `\`, and a segment that is empty, `.` or `..` before a `;`.
pub fn normalize_path(path: &str) -> Result<Cow<'_, str>, Refusal> {
    if !path.starts_with('/') {
        return Err(BAD_TARGET);
    }
    let b = path.as_bytes();
    // the common case: nothing to decode, no empty or dot segment, no parameters
    let plain = !b.iter().any(|&c| matches!(c, b'%' | b'\\' | b';'))
        && !b.windows(2).any(|w| w == b"//" || w == b"/.");
    if plain {
        return Ok(Cow::Borrowed(path));
    }
    // decode what may be decoded
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => return Err(BAD_PATH),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                let (Some(hi), Some(lo)) = (
                    b.get(i + 1).and_then(|&c| hex(c)),
                    b.get(i + 2).and_then(|&c| hex(c)),
                ) else {
                    return Err(BAD_PATH);
                };
                let c = (hi * 16 + lo) as u8;
                if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
                    decoded.push(c as char);
                } else if matches!(c, b'/' | b'\\' | 0) {
                    return Err(BAD_PATH);
                } else {
                    decoded.push('%');
                    decoded.push_str(&format!("{c:02X}"));
                }
                i += 3;
            }
            _ => {
                // a `Uri`'s path is ASCII; a multi-byte character is copied whole
                let ch = path[i..].chars().next().unwrap_or('\u{fffd}');
                decoded.push(ch);
                i += ch.len_utf8().max(1);
            }
        }
    }
    // remove dot segments, merge empty ones
    let mut segments: Vec<&str> = Vec::new();
    let parts: Vec<&str> = decoded[1..].split('/').collect();
    let mut trailing = false;
    for (n, seg) in parts.iter().enumerate() {
        let last = n + 1 == parts.len();
        if let Some((base, _)) = seg.split_once(';')
            && matches!(base, "" | "." | "..")
        {
            return Err(BAD_PATH);
        }
        match *seg {
            "" => trailing = last,
            "." => trailing = last,
            ".." => {
                segments.pop();
                trailing = last;
            }
            s => {
                segments.push(s);
                trailing = false;
            }
        }
    }
    let mut out = String::with_capacity(decoded.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Ok(if out == path {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(out)
    })
}

/// The status of a check's result (0: admitted).
#[cfg(test)]
fn status_of(r: Result<(), Refusal>) -> u16 {
    r.map_or_else(|e| e.status.as_u16(), |()| 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri(target);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn paths_normalize_as_documented() {
        for (from, to) in [
            ("/", "/"),
            ("/admin", "/admin"),
            ("//admin", "/admin"),
            ("/%61dmin", "/admin"),
            ("/x/../admin", "/admin"),
            ("/./admin", "/admin"),
            ("/%2e/admin", "/admin"),
            ("/%2E%2E/admin", "/admin"),
            ("/../../admin", "/admin"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/a//", "/a/"),
            ("/a%20b", "/a%20b"),
            ("/a%2ab", "/a%2Ab"),
            ("/a;x=1/b", "/a;x=1/b"),
            ("/.well-known/x", "/.well-known/x"),
            ("/a/..b", "/a/..b"),
        ] {
            assert_eq!(normalize_path(from).unwrap(), to, "{from}");
        }
        for refused in [
            "/a%2fb",
            "/a%2Fb",
            "/a%5cb",
            "/a%00",
            "/a\\b",
            "/%",
            "/%4",
            "/%zz",
            "/..;/admin",
            "/.;/admin",
            "/;x/admin",
            "x",
            "",
        ] {
            assert!(normalize_path(refused).is_err(), "{refused}");
        }
        assert!(matches!(normalize_path("/a/b?c"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn targets_methods_and_hosts() {
        let h = [("host", "a")];
        for (m, t, hs, status) in [
            ("GET", "/", &h[..], 0),
            ("OPTIONS", "*", &h, 0),
            ("GET", "*", &h, 400),
            ("GET", "x", &h, 400),
            ("GET", "host:80", &h, 400),
            ("GET", "user@host", &h, 400),
            ("GET", "http://user@a/", &h, 400),
            ("GET", "ftp://a/", &h, 400),
            ("CONNECT", "a:443", &h, 405),
            ("TRACE", "/", &h, 405),
            ("get", "/", &h, 400),
            ("PROPFIND", "/", &h, 0),
            ("GET", "/", &[], 400),
            ("GET", "/", &[("host", "")], 400),
            ("GET", "/", &[("host", "a"), ("host", "b")], 400),
            ("GET", "/", &[("host", "a b")], 400),
            ("GET", "/", &[("host", "u@a")], 400),
            ("GET", "http://a/", &[], 0),
            (
                "GET",
                "/",
                &[("host", "a"), ("x-key", "1"), ("x-key", "2")],
                400,
            ),
        ] {
            let mut r = req(m, t, hs);
            let key = [HeaderName::from_static("x-key")];
            assert_eq!(status_of(admit(&mut r, &key)), status, "{m} {t} {hs:?}");
        }
        let mut r = req("GET", "/", &[]);
        *r.version_mut() = Version::HTTP_10;
        assert!(admit(&mut r, &[]).is_ok());
    }

    #[test]
    fn padded_http2_field_values_are_refused() {
        for v in [" k", "k ", "k\t", "\t k \t", " "] {
            for name in ["host", "x-key", "x-other"] {
                let mut hs = vec![("host", "a"), ("x-key", "k")];
                hs.retain(|(n, _)| *n != name);
                hs.push((name, v));
                let mut r = req("GET", "/", &hs);
                *r.version_mut() = Version::HTTP_2;
                let got = admit(&mut r, &[HeaderName::from_static("x-key")]);
                assert_eq!(got.map_err(|r| r.reason), Err("head"), "{name}: {v:?}");
                // HTTP/1 parsers trim the value before it gets here: not refused
                let mut r = req("GET", "/", &hs);
                assert_ne!(admit(&mut r, &[]).map_err(|r| r.reason), Err("head"));
            }
        }
        let mut r = req("GET", "/", &[("host", "a"), ("x-key", "a b\tc")]);
        *r.version_mut() = Version::HTTP_2;
        assert!(admit(&mut r, &[]).is_ok());
    }

    #[test]
    fn plain_hosts_are_authorities() {
        for v in [
            "a",
            "a:80",
            "127.0.0.1:28180",
            "x.example-1_~",
            "a:",
            "a:99999",
        ] {
            assert!(plain_host(v.as_bytes()), "{v}");
            assert!(host_is_authority(v.as_bytes()), "{v}");
        }
        for v in [
            "", ":80", "a:1:2", "[::1]:80", "u@a", "a b", "a/b", "a%41", "a:8x",
        ] {
            assert!(!plain_host(v.as_bytes()), "{v}");
        }
        // not plain, but a host[:port] all the same: the full check takes them
        for v in ["[::1]:80", "a!b", "a:8x"] {
            assert!(host_is_authority(v.as_bytes()), "{v}");
        }
    }

    proptest::proptest! {
        /// The one-pass check answers `true` only for values the full one accepts.
        #[test]
        fn plain_host_never_admits_what_the_authority_check_refuses(
            v in proptest::collection::vec(proptest::sample::select(
                b"aZ09-._~:@[]%/?#! \t\x00\x7f\xc3".to_vec()), 0..12)
        ) {
            if plain_host(&v) {
                proptest::prop_assert!(host_is_authority(&v), "{:?}", String::from_utf8_lossy(&v));
            }
        }
    }

    #[test]
    fn an_absolute_target_wins_over_host_and_keeps_its_query() {
        let mut r = req("GET", "http://a?x=1", &[("host", "b")]);
        admit(&mut r, &[]).unwrap();
        assert_eq!(r.uri(), "/?x=1");
        assert_eq!(r.headers()["host"], "a");
        let mut r = req("GET", "https://a:8443//x/../y?q=%2e", &[]);
        admit(&mut r, &[]).unwrap();
        assert_eq!(r.uri(), "/y?q=%2e");
        assert_eq!(r.headers()["host"], "a:8443");
    }

    #[test]
    fn connection_never_strips_host_or_key_headers() {
        let key = [HeaderName::from_static("x-api-key")];
        let mut r = req(
            "GET",
            "/",
            &[
                ("host", "a"),
                ("x-api-key", "k"),
                ("x-forwarded-for", "192.0.2.1"),
                ("x-other", "1"),
                ("keep-alive", "5"),
                (
                    "connection",
                    "host, x-api-key, x-forwarded-for, x-other, forwarded",
                ),
            ],
        );
        admit(&mut r, &key).unwrap();
        let names: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["host", "x-api-key", "x-forwarded-for"]);
    }
}
