//! A request's header block as the connection reads it: the pseudo-headers, the few
//! fields the door acts on, and every field kept in one buffer (no allocation per
//! field), checked as RFC 9113 section 8.2-8.3 asks of a server.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri, Version};

use super::super::serve::{SHOULD_RATE_LIMIT, parse_grpc_timeout};

/// Why a request's header block is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Malformed (RFC 9113 8.1.1): the stream is reset with `PROTOCOL_ERROR`.
    Malformed(&'static str),
    /// Larger than `SETTINGS_MAX_HEADER_LIST_SIZE`: answered `431`.
    TooLarge,
}

/// The fields of one request's header block.
#[derive(Debug, Default)]
pub struct RequestHead {
    /// `:method`.
    pub method: Option<Method>,
    /// `:scheme`.
    pub scheme: Option<Bytes>,
    /// `:authority`.
    pub authority: Option<Bytes>,
    /// `:path`, unless it is `ShouldRateLimit`'s.
    pub path: Option<Bytes>,
    /// `:path` is `ShouldRateLimit`'s.
    pub should_rate_limit: bool,
    /// A `grpc-encoding` field is present.
    pub grpc_encoding: bool,
    /// `grpc-timeout`, as tonic's server reads it (a malformed one is none).
    pub timeout: Option<Duration>,
    /// `content-length`, when given.
    pub content_length: Option<u64>,
    /// Every regular field: name length and value length (2 octets each, big-endian),
    /// then the name and the value.
    pub fields: Vec<u8>,
    list_size: usize,
    regular_seen: bool,
    /// Set by the first field that makes the request one the server refuses.
    pub refused: Option<Refused>,
}

fn is_token_lower(b: u8) -> bool {
    matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\''
        | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

fn is_value_octet(b: u8) -> bool {
    (b >= 0x20 && b != 0x7f) || b == b'\t'
}

impl RequestHead {
    /// Empty, with `fields` ready for reuse.
    pub fn with_buffer(mut fields: Vec<u8>) -> RequestHead {
        fields.clear();
        RequestHead {
            fields,
            ..RequestHead::default()
        }
    }

    /// Take one decoded field; `max_list` is the header list size the server announced.
    pub fn field(&mut self, name: &[u8], value: &[u8], max_list: usize) {
        if self.refused.is_some() {
            return;
        }
        self.list_size += name.len() + value.len() + 32;
        if self.list_size > max_list {
            self.refused = Some(Refused::TooLarge);
            return;
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular_seen {
                return self.malformed("a pseudo-header after a regular field");
            }
            let slot = match pseudo {
                b"method" => {
                    if self.method.is_some() {
                        return self.malformed("two :method fields");
                    }
                    self.method = Some(match value {
                        b"POST" => Method::POST,
                        _ => match Method::from_bytes(value) {
                            Ok(m) => m,
                            Err(_) => return self.malformed("a bad :method"),
                        },
                    });
                    return;
                }
                b"scheme" => &mut self.scheme,
                b"authority" => &mut self.authority,
                b"path" => {
                    if self.path.is_some() || self.should_rate_limit {
                        return self.malformed("two :path fields");
                    }
                    if value == SHOULD_RATE_LIMIT.as_bytes() {
                        self.should_rate_limit = true;
                        return;
                    }
                    &mut self.path
                }
                _ => return self.malformed("an unknown or response pseudo-header"),
            };
            if slot.is_some() {
                return self.malformed("a repeated pseudo-header");
            }
            *slot = Some(Bytes::copy_from_slice(value));
            return;
        }
        self.regular_seen = true;
        if name.is_empty() || !name.iter().all(|&b| is_token_lower(b)) {
            return self.malformed("a field name that is empty, upper case or not a token");
        }
        if !value.iter().all(|&b| is_value_octet(b)) {
            return self.malformed("a field value with a control character");
        }
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => return self.malformed("a connection-specific field"),
            b"te" if value != b"trailers" => return self.malformed("te other than trailers"),
            b"grpc-encoding" => self.grpc_encoding = true,
            b"grpc-timeout" => {
                self.timeout = std::str::from_utf8(value).ok().and_then(parse_grpc_timeout)
            }
            b"content-length" => match std::str::from_utf8(value).ok().and_then(|v| v.parse().ok())
            {
                Some(n) if self.content_length.is_none_or(|c| c == n) => {
                    self.content_length = Some(n)
                }
                _ => return self.malformed("a bad content-length"),
            },
            _ => {}
        }
        // within the list size, so each fits in two octets
        self.fields
            .extend_from_slice(&(name.len() as u16).to_be_bytes());
        self.fields
            .extend_from_slice(&(value.len() as u16).to_be_bytes());
        self.fields.extend_from_slice(name);
        self.fields.extend_from_slice(value);
    }

    fn malformed(&mut self, why: &'static str) {
        self.refused = Some(Refused::Malformed(why));
    }

    /// After the last field: a request needs `:method`, `:scheme` and `:path`.
    pub fn finish(&mut self) {
        if self.refused.is_none()
            && (self.method.is_none()
                || self.scheme.as_ref().is_none_or(Bytes::is_empty)
                || !(self.should_rate_limit || self.path.as_ref().is_some_and(|p| !p.is_empty())))
        {
            self.malformed("a request without :method, :scheme or :path");
        }
    }

    /// The regular fields, in order.
    pub fn iter_fields(fields: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut at = 0;
        std::iter::from_fn(move || {
            let h = fields.get(at..at + 4)?;
            let n = usize::from(u16::from_be_bytes([h[0], h[1]]));
            let v = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let name = fields.get(at + 4..at + 4 + n)?;
            let value = fields.get(at + 4 + n..at + 4 + n + v)?;
            at += 4 + n + v;
            Some((name, value))
        })
    }
}

/// What of a request the door keeps to hand it to tonic later (a call it declines).
#[derive(Debug, Clone)]
pub struct Kept {
    /// `:method` (`POST` if none was read).
    pub method: Method,
    /// `:scheme`.
    pub scheme: Option<Bytes>,
    /// `:authority`.
    pub authority: Option<Bytes>,
    /// `:path`; `None` for `ShouldRateLimit`'s.
    pub path: Option<Bytes>,
    /// `grpc-timeout`.
    pub timeout: Option<Duration>,
    /// The regular fields, as [`RequestHead::fields`] holds them.
    pub fields: Bytes,
}

impl Kept {
    /// Keep `head`'s parts (the fields copied once, into one buffer).
    pub fn of(head: &RequestHead) -> Kept {
        Kept {
            method: head.method.clone().unwrap_or(Method::POST),
            scheme: head.scheme.clone(),
            authority: head.authority.clone(),
            path: head.path.clone(),
            timeout: head.timeout,
            fields: Bytes::copy_from_slice(&head.fields),
        }
    }

    /// The request as http types, `body` its body; `None` if the URI or a field is not
    /// one `http` accepts.
    pub fn request<B>(&self, body: B) -> Option<Request<B>> {
        let path: &[u8] = match &self.path {
            Some(p) => p,
            None => SHOULD_RATE_LIMIT.as_bytes(),
        };
        let uri = match (&self.scheme, &self.authority) {
            (Some(s), Some(a)) if !a.is_empty() => Uri::builder()
                .scheme(std::str::from_utf8(s).ok()?)
                .authority(a.as_ref())
                .path_and_query(path)
                .build()
                .ok()?,
            _ => Uri::try_from(path).ok()?,
        };
        let mut headers = HeaderMap::new();
        for (n, v) in RequestHead::iter_fields(&self.fields) {
            headers.append(
                HeaderName::from_bytes(n).ok()?,
                HeaderValue::from_bytes(v).ok()?,
            );
        }
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = uri;
        *req.version_mut() = Version::HTTP_2;
        *req.headers_mut() = headers;
        Some(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> RequestHead {
        let mut h = RequestHead::default();
        for (n, v) in fields {
            h.field(n.as_bytes(), v.as_bytes(), 16 * 1024);
        }
        h.finish();
        h
    }

    const BASE: [(&str, &str); 3] = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", SHOULD_RATE_LIMIT),
    ];

    #[test]
    fn a_grpc_call_is_read_and_kept_whole() {
        let mut f = BASE.to_vec();
        f.extend([
            (":authority", "rls:8081"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", "20m"),
        ]);
        // pseudo-headers first
        f.swap(3, 2);
        let h = head(&f);
        assert_eq!(h.refused, None);
        assert!(h.should_rate_limit);
        assert_eq!(h.timeout, Some(Duration::from_millis(20)));
        let req = Kept::of(&h).request(()).unwrap();
        assert_eq!(req.uri().path(), SHOULD_RATE_LIMIT);
        assert_eq!(req.uri().authority().unwrap().as_str(), "rls:8081");
        assert_eq!(req.headers()["content-type"], "application/grpc");
        assert_eq!(req.headers().len(), 3);
    }

    #[test]
    fn malformed_requests_are_refused_with_a_reason() {
        let refused = |extra: &[(&str, &str)]| {
            let mut f = BASE.to_vec();
            f.extend_from_slice(extra);
            head(&f).refused
        };
        for bad in [
            vec![("Content-Type", "x")],
            vec![("connection", "keep-alive")],
            vec![("te", "gzip")],
            vec![("x", "a\nb")],
            vec![("x", "1"), (":authority", "late")],
            vec![(":status", "200")],
            vec![(":path", "/again")],
            vec![("content-length", "x")],
        ] {
            assert!(
                matches!(refused(&bad), Some(Refused::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            head(&BASE[..2]).refused,
            Some(Refused::Malformed(_))
        ));
        assert_eq!(
            refused(&[("x", &"v".repeat(17_000))]),
            Some(Refused::TooLarge)
        );
        assert_eq!(
            refused(&[("te", "trailers"), ("content-length", "5")]),
            None
        );
    }
}
