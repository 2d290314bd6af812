//! The proxy's HTTP/1 wire, both ways:
//!
//! * [`request_head`]: a client's request head, parsed for the proxy's own path;
//! * [`client`]: a client connection on that path (requests without a body answered
//!   here, the rest handed to hyper's server by [`crate::connection`]), its responses
//!   framed by length, chunks or close;
//! * [`response_head`]: an upstream's response head and its body's framing (RFC 9112
//!   §6.3);
//! * [`chunked`]: a chunked response body decoded;
//! * [`upstream`]: the pooled upstream connections (the direct exchange, `upstream::direct`,
//!   and hyper's client connection), and the response body read from them;
//! * here: writing a request head, and a parsed field value taken as it is.

pub(crate) mod chunked;
pub(crate) mod client;
pub(crate) mod request_head;
pub(crate) mod response_head;
pub(crate) mod upstream;

use bytes::Bytes;
use http::{HeaderValue, Method};

/// `METHOD target HTTP/1.1` and its CRLF. A head is this line, [`encode_field`] per
/// field, and a blank line (`\r\n`).
pub(crate) fn encode_request_line(out: &mut Vec<u8>, method: &Method, target: &str) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// `name: value` and its CRLF. The caller passes bytes of a valid `HeaderName` and
/// `HeaderValue` (no CR, LF or NUL), so nothing can be injected.
pub(crate) fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A field value `httparse` has parsed, sharing its buffer, without checking its bytes
/// again: `httparse` accepts only HTAB, SP, visible ASCII and obs-text (0x80-0xFF) in a
/// value, which are exactly the bytes `HeaderValue` allows (hyper does the same).
pub(crate) fn parsed_value(bytes: Bytes) -> HeaderValue {
    debug_assert!(HeaderValue::from_bytes(&bytes).is_ok());
    // SAFETY: see above; `HeaderValue`'s invariant (no control byte but HTAB) holds
    unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn encoded_heads_are_what_hyper_parses() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("example.test"));
        h.append("x-many", HeaderValue::from_static("1"));
        h.append("x-many", HeaderValue::from_static("2"));
        let mut out = Vec::new();
        encode_request_line(&mut out, &Method::DELETE, "/a?b=c");
        for (n, v) in &h {
            encode_field(&mut out, n.as_str().as_bytes(), v.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        assert_eq!(
            out,
            b"DELETE /a?b=c HTTP/1.1\r\nhost: example.test\r\nx-many: 1\r\nx-many: 2\r\n\r\n"
        );
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut fields);
        assert_eq!(
            req.parse(&out).unwrap(),
            httparse::Status::Complete(out.len())
        );
    }

    proptest! {
        /// Every field value httparse accepts is a valid `HeaderValue` (what
        /// `parsed_value` relies on to skip the check).
        #[test]
        fn values_httparse_accepts_are_header_values(value in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut wire = b"GET / HTTP/1.1\r\nX: ".to_vec();
            wire.extend_from_slice(&value);
            wire.extend_from_slice(b"\r\n\r\n");
            let mut fields = [httparse::EMPTY_HEADER; 4];
            let mut r = httparse::Request::new(&mut fields);
            if let Ok(httparse::Status::Complete(_)) = r.parse(&wire) {
                for f in r.headers.iter() {
                    prop_assert!(http::HeaderValue::from_bytes(f.value).is_ok(), "{:?}", f.value);
                }
            }
        }
    }
}
