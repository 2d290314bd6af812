//! An upstream's response head, read with `httparse`, and its body's framing.
//!
//! Response framing follows RFC 9112 §6.3: no body after `HEAD`, 1xx, 204 and 304;
//! `Transfer-Encoding` ending in `chunked` is decoded ([`super::chunked`]); otherwise a
//! valid `Content-Length`; otherwise the body runs to the connection's close.

use std::io;

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, Method, Response, StatusCode, Version};

use super::chunked::ChunkedDecoder;
use super::parsed_value;

/// Longest response head accepted (status line and fields), in bytes.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Most response header fields accepted.
const MAX_FIELDS: usize = 128;

/// Why a response head could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    /// The connection closed (or was reset) before any byte of the response: on a
    /// pooled connection, the upstream had closed it while idle.
    #[error("upstream closed the connection before responding")]
    ClosedEarly,
    /// Reading failed after part of the response had arrived.
    #[error("reading the upstream response failed: {0}")]
    Io(io::Error),
    /// The response head is not valid HTTP/1.1, too large, or its framing is ambiguous.
    #[error("malformed upstream response: {0}")]
    Malformed(&'static str),
}

/// How the response body is delimited on the wire.
#[derive(Debug)]
pub(crate) enum Framing {
    /// No body, or the body is complete.
    Done,
    /// This many bytes still to come.
    Length(u64),
    /// Chunked transfer coding.
    Chunked(ChunkedDecoder),
    /// Everything until the upstream closes the connection.
    UntilClose,
}

pub(crate) enum Parsed {
    /// A 1xx response, consumed.
    Interim,
    /// The final response head.
    Final(FinalHead),
}

/// A final response head, its body's framing, and whether the connection may be
/// reused after the body.
#[derive(Debug)]
pub(crate) struct FinalHead {
    pub(crate) response: Response<()>,
    pub(crate) framing: Framing,
    pub(crate) keep_alive: bool,
}

/// Parse a complete response head at the front of `buf` (consuming it), or `None`
/// when more bytes are needed.
pub(crate) fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Parsed>, HeadError> {
    // uninitialized: zeroing room for 128 fields costs more than parsing a short head
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut r = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut r,
        buf,
        &mut fields,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HeadError::Malformed("more than 128 response header fields"));
        }
        Err(_) => return Err(HeadError::Malformed("invalid status line or header field")),
    };
    let code = r.code.unwrap_or(0);
    let status =
        StatusCode::from_u16(code).map_err(|_| HeadError::Malformed("invalid status code"))?;
    let version = if r.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(HeadError::Malformed(
            "101 Switching Protocols to a request that asked for no upgrade",
        ));
    }
    if status.is_informational() {
        let _ = buf.split_to(len);
        return Ok(Some(Parsed::Interim));
    }
    // where each field's name and value sit in the head, so that the values can share
    // the head's bytes instead of being copied
    let base = buf.as_ptr() as usize;
    let spans: Vec<(usize, usize, usize, usize)> = r
        .headers
        .iter()
        .map(|f| {
            (
                f.name.as_ptr() as usize - base,
                f.name.len(),
                f.value.as_ptr() as usize - base,
                f.value.len(),
            )
        })
        .collect();
    let head = buf.split_to(len).freeze();
    // room for the RateLimit fields the limiter adds, so the map does not grow then
    let mut headers = HeaderMap::with_capacity(spans.len() + 6);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut has_te = false;
    let mut close = version == Version::HTTP_10;
    for &(n_at, n_len, v_at, v_len) in &spans {
        let name = HeaderName::from_bytes(&head[n_at..n_at + n_len])
            .map_err(|_| HeadError::Malformed("invalid header field name"))?;
        let raw = head.slice(v_at..v_at + v_len);
        let value = parsed_value(raw.clone());
        if name == CONTENT_LENGTH {
            let n = parse_length(&raw)?;
            if length.is_some_and(|l| l != n) {
                return Err(HeadError::Malformed("conflicting Content-Length values"));
            }
            length = Some(n);
        } else if name == TRANSFER_ENCODING {
            has_te = true;
            // only the final coding decides (RFC 9112 §6.3)
            chunked = raw
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == CONNECTION {
            for token in raw.split(|&b| b == b',') {
                let t = token.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if t.eq_ignore_ascii_case(b"keep-alive") && version == Version::HTTP_10 {
                    close = false;
                }
            }
        }
        headers.append(name, value);
    }
    let no_body = method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        Framing::Done
    } else if has_te {
        if length.is_some() {
            // both: Transfer-Encoding wins and the connection must not be reused
            close = true;
        }
        if chunked {
            Framing::Chunked(ChunkedDecoder::new())
        } else {
            Framing::UntilClose
        }
    } else {
        match length {
            Some(0) => Framing::Done,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    if matches!(framing, Framing::UntilClose) {
        close = true;
    }
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    *resp.version_mut() = version;
    *resp.headers_mut() = headers;
    Ok(Some(Parsed::Final(FinalHead {
        response: resp,
        framing,
        keep_alive: !close,
    })))
}

/// How an upstream response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (HEAD, 204, 304, a length of 0).
    None,
    /// This many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the upstream closes the connection.
    UntilClose,
}

/// A final upstream response head as the parser read it.
#[derive(Debug)]
pub struct ResponseHead {
    /// Status, version and fields.
    pub response: Response<()>,
    /// How its body is delimited.
    pub framing: BodyFraming,
    /// Whether the connection may be reused after the body.
    pub keep_alive: bool,
    /// The head's length in bytes.
    pub len: usize,
}

/// What the upstream response parser makes of a response head.
#[derive(Debug)]
pub enum ResponseParse {
    /// More bytes are needed.
    Partial,
    /// A 1xx response of this many bytes, skipped.
    Interim(usize),
    /// The final response head.
    Final(Box<ResponseHead>),
}

/// What the upstream response parser makes of the bytes at the front of `buf`, as
/// [`crate::wire::parse_response_head`] reports it.
pub(crate) fn response_head(buf: &[u8], method: &Method) -> Result<ResponseParse, String> {
    let mut b = BytesMut::from(buf);
    let parsed = parse_head(&mut b, method).map_err(|e| e.to_string())?;
    let len = buf.len() - b.len();
    Ok(match parsed {
        None => ResponseParse::Partial,
        Some(Parsed::Interim) => ResponseParse::Interim(len),
        Some(Parsed::Final(f)) => ResponseParse::Final(Box::new(ResponseHead {
            response: f.response,
            framing: match f.framing {
                Framing::Done => BodyFraming::None,
                Framing::Length(n) => BodyFraming::Length(n),
                Framing::Chunked(_) => BodyFraming::Chunked,
                Framing::UntilClose => BodyFraming::UntilClose,
            },
            keep_alive: f.keep_alive,
            len,
        })),
    })
}

/// A Content-Length value: decimal digits only (no sign, no spaces inside), at most 64
/// bits. A list of equal values (`5, 5`) is accepted, as RFC 9110 §8.6 allows.
fn parse_length(v: &[u8]) -> Result<u64, HeadError> {
    let mut value = None;
    for part in v.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(HeadError::Malformed("invalid Content-Length"));
        }
        let n = std::str::from_utf8(part)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(HeadError::Malformed("Content-Length overflows 64 bits"))?;
        if value.is_some_and(|v| v != n) {
            return Err(HeadError::Malformed("conflicting Content-Length values"));
        }
        value = Some(n);
    }
    value.ok_or(HeadError::Malformed("invalid Content-Length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head, its framing, keep-alive, and how many bytes are left after the head.
    type Got = (Response<()>, Framing, bool, usize);

    fn parse(wire: &[u8], method: Method) -> Result<Option<Got>, HeadError> {
        let mut buf = BytesMut::from(wire);
        Ok(parse_head(&mut buf, &method)?.map(|p| match p {
            Parsed::Final(h) => (h.response, h.framing, h.keep_alive, buf.len()),
            Parsed::Interim => panic!("interim"),
        }))
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let (r, f, keep, rest) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nokNEXT",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-a"], "b");
        assert!(matches!(f, Framing::Length(2)) && keep && rest == 6);
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
            Method::HEAD,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::Done) && keep);
        let (_, f, keep, _) = parse(b"HTTP/1.1 204 No Content\r\n\r\n", Method::GET)
            .unwrap()
            .unwrap();
        assert!(matches!(f, Framing::Done) && keep);
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::Chunked(_)) && keep);
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(
            matches!(f, Framing::Chunked(_)) && !keep,
            "TE and CL: chunked, then close"
        );
        let (_, f, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::UntilClose) && !keep);
        let (_, f, keep, _) = parse(b"HTTP/1.1 200 OK\r\n\r\n", Method::GET)
            .unwrap()
            .unwrap();
        assert!(matches!(f, Framing::UntilClose) && !keep);
        let (_, _, keep, _) = parse(
            b"HTTP/1.1 200 OK\r\nConnection: foo, close\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(!keep);
        let (r, _, keep, _) = parse(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", Method::GET)
            .unwrap()
            .unwrap();
        assert!(!keep && r.version() == Version::HTTP_10);
        let (_, _, keep, _) = parse(
            b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(keep);
        let (_, f, _, _) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(f, Framing::Length(7)));
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Le", Method::GET)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn interim_responses_are_consumed() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n"[..],
        );
        assert!(matches!(
            parse_head(&mut buf, &Method::GET),
            Ok(Some(Parsed::Interim))
        ));
        assert_eq!(&buf[..], b"HTTP/1.1 200 OK\r\n");
    }

    #[test]
    fn malformed_heads_are_errors_that_say_why() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
                "conflicting",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n",
                "conflicting",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                "invalid Content-Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n",
                "invalid Content-Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                "overflows",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
                "invalid Content-Length",
            ),
            (b"HTTP/1.1 2000 OK\r\n\r\n", "status"),
            (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101"),
            (b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "invalid"),
            (b"SMTP ready\r\n\r\n", "invalid status line"),
        ];
        for (wire, want) in cases {
            let err = parse(wire, Method::GET)
                .err()
                .unwrap_or_else(|| panic!("accepted {:?}", String::from_utf8_lossy(wire)));
            assert!(
                err.to_string().contains(want),
                "{:?}: {err}",
                String::from_utf8_lossy(wire)
            );
        }
        let many: Vec<u8> = [
            b"HTTP/1.1 200 OK\r\n".to_vec(),
            b"X: y\r\n".repeat(MAX_FIELDS + 1),
            b"\r\n".to_vec(),
        ]
        .concat();
        assert!(
            parse(&many, Method::GET)
                .err()
                .unwrap()
                .to_string()
                .contains("128")
        );
    }
}
