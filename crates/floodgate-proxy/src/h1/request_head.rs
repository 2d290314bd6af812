//! A client's request head, parsed with `httparse` for the proxy's own HTTP/1 path
//! ([`super::client`]): what that path takes (a request without a body) becomes a
//! request whose field values share the read buffer; the rest is hyper's.

use std::mem::MaybeUninit;
use std::net::SocketAddr;

use bytes::BytesMut;
use floodgate_http::key::PeerAddr;
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, HeaderName, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, Method, Request, Uri, Version};

use super::parsed_value;
use crate::body::RequestBody;

/// Most fields a head read here may have; more: hyper's (which allows 100).
const MAX_FIELDS: usize = 64;
/// Largest head read here; larger: hyper's (which answers 431 past its own limit).
pub(crate) const MAX_HEAD: usize = 16 * 1024;

pub(crate) enum Parsed {
    /// In the connection's [`Head`].
    Complete,
    Partial,
    /// Not for this path: hyper's.
    NotHere,
}

/// What the proxy's own HTTP/1 path does with a request head.
#[derive(Debug)]
pub enum RequestHead {
    /// Taken on the proxy's own path: the request's head, and the head's length in bytes
    /// (what follows it is the next request).
    Taken(Box<http::request::Parts>, usize),
    /// More bytes are needed.
    Partial,
    /// Left to hyper's server, with the connection (a body, an upgrade, HTTP/2, a head
    /// too large or malformed, a target `http::Uri` does not take...).
    Hyper,
}

/// What the proxy's own path does with the bytes at the front of `buf`, as
/// [`crate::wire::parse_request_head`] reports it.
pub(crate) fn own_path_head(buf: &[u8]) -> RequestHead {
    let mut head = Head::default();
    match parse(buf, &mut head) {
        Parsed::Partial if buf.len() <= MAX_HEAD => RequestHead::Partial,
        Parsed::Partial | Parsed::NotHere => RequestHead::Hyper,
        Parsed::Complete => {
            let len = head.len;
            let mut b = BytesMut::from(buf);
            let peer = SocketAddr::from(([0, 0, 0, 0], 0));
            match head.take_request(&mut b, peer) {
                Some((req, _)) => RequestHead::Taken(Box::new(req.map(|_| ()).into_parts().0), len),
                None => RequestHead::Hyper,
            }
        }
    }
}

/// A request head found in the read buffer, as positions in it (the buffer is borrowed
/// while parsing; the values are taken from it after). One per connection, reused.
#[derive(Default)]
pub(crate) struct Head {
    len: usize,
    method: Method,
    target: (usize, usize),
    version: Version,
    /// Name, and the value's start and length.
    fields: Vec<(HeaderName, usize, usize)>,
    keep_alive: bool,
}

/// What the response needs to know about its request.
pub(crate) struct Meta {
    pub(crate) head: bool,
    pub(crate) version: Version,
    pub(crate) keep_alive: bool,
}

/// Parse a request head at the start of `buf` into `head`.
pub(crate) fn parse(buf: &[u8], head: &mut Head) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    // uninitialized: zeroing room for 64 fields costs more than parsing a short head
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut r = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut r,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::NotHere,
    };
    let (Some(method), Some(path), Some(v)) = (r.method, r.path, r.version) else {
        return Parsed::NotHere;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::NotHere;
    };
    if method == Method::CONNECT {
        return Parsed::NotHere;
    }
    let version = if v == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let base = buf.as_ptr() as usize;
    let mut keep_alive = version == Version::HTTP_11;
    head.fields.clear();
    let mut lengths = 0;
    for f in r.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(f.name.as_bytes()) else {
            return Parsed::NotHere;
        };
        if name == CONTENT_LENGTH {
            lengths += 1;
            // a body, a length to check, or repeated lengths (hyper's server folds equal
            // ones into one; found by the request_head fuzz target): hyper's
            if f.value.trim_ascii() != b"0" || lengths > 1 {
                return Parsed::NotHere;
            }
        } else if name == TRANSFER_ENCODING || name == EXPECT || name == UPGRADE {
            return Parsed::NotHere;
        } else if name == CONNECTION {
            for token in f.value.split(|&b| b == b',') {
                let t = token.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if t.eq_ignore_ascii_case(b"keep-alive") && version == Version::HTTP_10 {
                    keep_alive = true;
                }
            }
        }
        head.fields
            .push((name, f.value.as_ptr() as usize - base, f.value.len()));
    }
    head.len = len;
    head.method = method;
    head.target = (path.as_ptr() as usize - base, path.len());
    head.version = version;
    head.keep_alive = keep_alive;
    Parsed::Complete
}

impl Head {
    /// The request, its head taken from `buf`; `None` (and `buf` as it was) when the
    /// target is not one `http` accepts.
    pub(crate) fn take_request(
        &mut self,
        buf: &mut BytesMut,
        peer: SocketAddr,
    ) -> Option<(Request<RequestBody>, Meta)> {
        let (t_at, t_len) = self.target;
        let head = buf.split_to(self.len).freeze();
        let uri = match Uri::from_maybe_shared(head.slice(t_at..t_at + t_len)) {
            Ok(u) => u,
            Err(_) => {
                // put the head back in front of what follows it
                let mut whole = BytesMut::with_capacity(head.len() + buf.len());
                whole.extend_from_slice(&head);
                whole.extend_from_slice(buf);
                *buf = whole;
                return None;
            }
        };
        // room for the RateLimit fields the limiter adds, so the map does not grow then
        let mut headers = HeaderMap::with_capacity(self.fields.len() + 6);
        for (name, at, len) in self.fields.drain(..) {
            headers.append(name, parsed_value(head.slice(at..at + len)));
        }
        let meta = Meta {
            head: self.method == Method::HEAD,
            version: self.version,
            keep_alive: self.keep_alive,
        };
        let mut req = Request::new(RequestBody::Empty);
        *req.method_mut() = std::mem::take(&mut self.method);
        *req.uri_mut() = uri;
        *req.version_mut() = self.version;
        *req.headers_mut() = headers;
        req.extensions_mut().insert(PeerAddr(peer));
        Some((req, meta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(wire: &[u8]) -> (Parsed, Head) {
        let mut head = Head::default();
        let p = parse(wire, &mut head);
        (p, head)
    }

    #[test]
    fn only_bodyless_plain_requests_are_taken() {
        for taken in [
            &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"DELETE /x?y=1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"HEAD / HTTP/1.0\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(parsed(taken).0, Parsed::Complete), "{taken:?}");
        }
        for hyper in [
            &b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            // HTTP/2's preface is known by its version, before it is complete
            b"PRI * HTTP/2",
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"NOT HTTP\r\n\r\n",
        ] {
            assert!(matches!(parsed(hyper).0, Parsed::NotHere), "{hyper:?}");
        }
        for partial in [&b""[..], b"GET / HT", b"GET / HTTP/1.1\r\nHost: a\r\n"] {
            assert!(matches!(parsed(partial).0, Parsed::Partial), "{partial:?}");
        }
        let many: String = (0..MAX_FIELDS + 1)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        let wire = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(matches!(parsed(wire.as_bytes()).0, Parsed::NotHere));
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection() {
        for (wire, keep) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], true),
            (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
            (b"GET / HTTP/1.1\r\nConnection: foo, Close\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
            (
                b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
                false,
            ),
        ] {
            let (p, head) = parsed(wire);
            assert!(matches!(p, Parsed::Complete));
            assert_eq!(head.keep_alive, keep, "{wire:?}");
        }
    }

    #[test]
    fn the_request_shares_the_head_and_leaves_what_follows() {
        let mut buf = BytesMut::from(
            &b"GET /p?q=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\n\r\nGET /next"[..],
        );
        let (p, mut head) = parsed(&buf);
        assert!(matches!(p, Parsed::Complete));
        let peer: SocketAddr = "192.0.2.1:5".parse().unwrap();
        let (req, meta) = head.take_request(&mut buf, peer).unwrap();
        assert_eq!(req.uri(), "/p?q=1");
        assert_eq!(req.headers().get_all("x-a").iter().count(), 2);
        assert_eq!(req.extensions().get::<PeerAddr>().unwrap().0, peer);
        assert!(meta.keep_alive && !meta.head);
        assert_eq!(&buf[..], b"GET /next");
    }

    #[test]
    fn a_refused_target_leaves_the_buffer_whole() {
        // httparse takes any visible bytes as a target; `Uri` does not take all
        let wire = &b"GET http://[::1 HTTP/1.1\r\n\r\nrest"[..];
        let mut buf = BytesMut::from(wire);
        let (p, mut head) = parsed(&buf);
        assert!(matches!(p, Parsed::Complete));
        let peer: SocketAddr = "192.0.2.1:5".parse().unwrap();
        assert!(head.take_request(&mut buf, peer).is_none());
        assert_eq!(&buf[..], wire);
    }
}
