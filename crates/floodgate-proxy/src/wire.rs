//! The proxy's own HTTP/1 parsers, as the fuzz targets (`fuzz/`) call them: the client
//! side's request-head parser ([`parse_request_head`]), whose heads must be the heads
//! hyper's server reads ([`hyper_request_head`]), the upstream side's response-head
//! parser ([`parse_response_head`]), and the upstream side's whole response, head and
//! framed body ([`read_upstream_response`]), which must be the response hyper's client
//! reads ([`hyper_upstream_response`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::TRANSFER_ENCODING;
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::h1::upstream::Http1Pool;
use crate::h1::{encode_field, encode_request_line};

pub use crate::h1::request_head::RequestHead;
pub use crate::h1::response_head::{BodyFraming, ResponseHead, ResponseParse};

/// What the proxy's own path does with the bytes at the front of `buf`.
pub fn parse_request_head(buf: &[u8]) -> RequestHead {
    crate::h1::request_head::own_path_head(buf)
}

/// Parse the upstream response head at the front of `buf`, answering a request with
/// `method`; `Err` says why the response is refused (a 502).
pub fn parse_response_head(buf: &[u8], method: &Method) -> Result<ResponseParse, String> {
    crate::h1::response_head::response_head(buf, method)
}

/// The request head hyper's HTTP/1 server (as the proxy configures its HTTP/1 side:
/// hyper's defaults) reads from `wire` followed by the end of the stream, or `None`
/// when it refuses it (or takes more than 5 s).
pub async fn hyper_request_head(wire: &[u8]) -> Option<http::request::Parts> {
    let got: Arc<Mutex<Option<http::request::Parts>>> = Arc::default();
    let seen = got.clone();
    let (mut client, server) = tokio::io::duplex(wire.len() + 64 * 1024);
    client.write_all(wire).await.ok()?;
    client.shutdown().await.ok()?;
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let seen = seen.clone();
        async move {
            *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(req.into_parts().0);
            Ok::<_, std::convert::Infallible>(Response::new(
                http_body_util::Empty::<bytes::Bytes>::new(),
            ))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .half_close(true)
        .serve_connection(hyper_util::rt::TokioIo::new(server), svc);
    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
    got.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// A response as an HTTP/1 client read it.
#[derive(Debug, Default)]
pub struct ReadResponse {
    /// The final head (`None`: refused before it, or in it).
    pub head: Option<Response<()>>,
    /// The body octets read, up to the end of the body or to the failure.
    pub body: Vec<u8>,
    /// Why the response was refused (`None`: it was read whole).
    pub error: Option<String>,
}

impl ReadResponse {
    /// Whether the response was read whole.
    pub fn is_whole(&self) -> bool {
        self.error.is_none()
    }

    fn failed(mut self, e: impl std::fmt::Display) -> ReadResponse {
        self.error = Some(e.to_string());
        self
    }

    /// `resp`, its body read to its end or to its failure.
    async fn read<B>(resp: Response<B>) -> ReadResponse
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = resp.into_parts();
        let mut read = ReadResponse {
            head: Some(Response::from_parts(parts, ())),
            ..ReadResponse::default()
        };
        let mut body = std::pin::pin!(body);
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => {
                    if let Some(data) = f.data_ref() {
                        read.body.extend_from_slice(data);
                    }
                }
                // the error and what caused it
                Err(e) => return read.failed(error_chain(&*e.into())),
            }
        }
        read
    }
}

/// An error's text followed by its sources'.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// How long either side may take over one response before it counts as refused.
const RESPONSE_WITHIN: Duration = Duration::from_secs(5);

/// Play an upstream on `io`: read a request head, answer `wire`, close the sending
/// side, then read until the client closes (closing with unread bytes would reset the
/// connection under the answer).
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, wire: &[u8]) {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"\r\n\r\n") {
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    if io.write_all(wire).await.is_err() || io.shutdown().await.is_err() {
        return;
    }
    while matches!(io.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// A loopback address of its own for each exchange, in turn over 127.0.0.0/8 (16.7
/// million), so that the connections left in TIME_WAIT, one per exchange for 60 s, are
/// spread over as many addresses and never use up one address's ports (at hundreds of
/// exchanges a second they would within a minute: `connect` then fails).
fn loopback() -> std::net::Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % 0x00ff_fffe;
    std::net::Ipv4Addr::from(0x7f00_0001 + n)
}

/// `read` within [`RESPONSE_WITHIN`], or a response refused for taking longer.
async fn within(read: impl Future<Output = ReadResponse>) -> ReadResponse {
    tokio::time::timeout(RESPONSE_WITHIN, read)
        .await
        .unwrap_or_else(|_| ReadResponse::default().failed("timed out"))
}

/// The response the proxy's upstream side reads when an upstream answers a request
/// without a body, with `method`, by `wire` and then closes the connection: the
/// direct exchange of a pooled connection (head, framing by length, chunks or close,
/// body), over loopback TCP. A response refused before its head is a 502; one whose
/// body fails mid-way is cut off.
pub async fn read_upstream_response(wire: &[u8], method: &Method) -> ReadResponse {
    let listener = match tokio::net::TcpListener::bind((loopback(), 0)).await {
        Ok(l) => l,
        // where not all of 127.0.0.0/8 loops back
        Err(_) => match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => return ReadResponse::default().failed(e),
        },
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return ReadResponse::default().failed(e),
    };
    let upstream = async {
        if let Ok((io, _)) = listener.accept().await {
            answer(io, wire).await;
        }
    };
    let proxy = async {
        // a 1 ms idle timeout: the pool's reaper ends soon after the pool
        let pool = Arc::new(Http1Pool::new(
            addr.to_string(),
            RESPONSE_WITHIN,
            Duration::from_millis(1),
            1,
        ));
        let mut head = Vec::new();
        encode_request_line(&mut head, method, "/");
        encode_field(&mut head, b"host", b"upstream.test");
        head.extend_from_slice(b"\r\n");
        let read = within(async {
            match pool.send_head(&head, method, RESPONSE_WITHIN).await {
                Ok(resp) => ReadResponse::read(resp).await,
                Err(e) => ReadResponse::default().failed(error_chain(&e)),
            }
        })
        .await;
        // a connection back in the pool closes with it, which ends the upstream
        drop(pool);
        read
    };
    tokio::join!(upstream, proxy).1
}

/// The response hyper's HTTP/1 client connection (allowing the proxy's 128 response
/// fields; hyper's defaults otherwise) reads when an upstream answers a request without
/// a body, with `method`, by `wire` and then closes the connection.
pub async fn hyper_upstream_response(wire: &[u8], method: &Method) -> ReadResponse {
    let (client, server) = tokio::io::duplex(wire.len() + 64 * 1024);
    let upstream = answer(server, wire);
    let read = within(async {
        let handshake = hyper::client::conn::http1::Builder::new()
            .max_headers(128)
            .handshake::<_, http_body_util::Empty<Bytes>>(hyper_util::rt::TokioIo::new(client))
            .await;
        let (mut sender, conn) = match handshake {
            Ok(h) => h,
            Err(e) => return ReadResponse::default().failed(error_chain(&e)),
        };
        let call = async move {
            let req = Request::builder()
                .method(method.clone())
                .uri("/")
                .header("host", "upstream.test")
                .body(http_body_util::Empty::new());
            let req = match req {
                Ok(r) => r,
                Err(e) => return ReadResponse::default().failed(e),
            };
            match sender.send_request(req).await {
                Ok(resp) => ReadResponse::read(resp).await,
                Err(e) => ReadResponse::default().failed(error_chain(&e)),
            }
        };
        // the connection's own end (an error after the response) is not the response's
        tokio::join!(call, conn).0
    });
    tokio::join!(upstream, read).1
}

/// Where the proxy's upstream side and hyper's client read one answer apart by design,
/// or apart in a way known and left as it is ([`responses_agree`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// A 101 to a request that asked for no upgrade: the proxy refuses it (a 502);
    /// hyper's client takes it as the start of an upgrade.
    SwitchingProtocols,
    /// A `Content-Length` the proxy cannot read (malformed, or values that conflict)
    /// where hyper's client reads none (a response to a HEAD, a 204 or a 304, which
    /// have no body, or one with `Transfer-Encoding`, which frames the body instead):
    /// the proxy refuses it.
    UnreadLength,
    /// An HTTP/1.0 response with `Transfer-Encoding`: hyper's client refuses it (its
    /// framing is faulty, RFC 9112 §6.1); the proxy reads it by its codings.
    Http10TransferEncoding,
    /// A chunked body whose end hyper's client refuses after the same body octets (a
    /// trailer section of lines that are not fields, say): the proxy reads the trailer
    /// section only to find its end, and drops it.
    Trailers,
    /// A `Transfer-Encoding` value with octets outside ASCII: hyper's client reads no
    /// coding from it (the body then runs to the close); the proxy reads its last coding
    /// (and may refuse the body that coding frames).
    NonAsciiTransferEncoding,
}

/// Whether two reads of one answer to a request with `method`, the proxy's upstream
/// side's (`ours`) and hyper's client's (`theirs`), agree: both take it, with the same
/// status and the same body octets, or both refuse it; `Ok(Some(_))` when they read it
/// apart in a [`Known`] way. `Err` says how they disagree otherwise.
pub fn responses_agree(
    method: &Method,
    ours: &ReadResponse,
    theirs: &ReadResponse,
) -> Result<Option<Known>, String> {
    let status = |r: &ReadResponse| r.head.as_ref().map(Response::status);
    let codings = |r: &ReadResponse| -> Vec<Vec<u8>> {
        r.head
            .iter()
            .flat_map(|h| h.headers().get_all(TRANSFER_ENCODING))
            .map(|v| v.as_bytes().to_vec())
            .collect()
    };
    let apart = || {
        format!(
            "the proxy's upstream side and hyper's client read it apart ({method}):\n  proxy: {:?} {:?} {:?}\n  hyper: {:?} {:?} {:?}",
            status(ours),
            String::from_utf8_lossy(&ours.body),
            ours.error,
            status(theirs),
            String::from_utf8_lossy(&theirs.body),
            theirs.error,
        )
    };
    match (ours.is_whole(), theirs.is_whole()) {
        (false, false) => Ok(None),
        (true, true) if status(ours) == status(theirs) && ours.body == theirs.body => Ok(None),
        // whichever of the two takes it
        _ if codings(ours)
            .iter()
            .chain(&codings(theirs))
            .any(|c| !c.is_ascii()) =>
        {
            Ok(Some(Known::NonAsciiTransferEncoding))
        }
        (false, true)
            if ours.head.is_none() && status(theirs) == Some(StatusCode::SWITCHING_PROTOCOLS) =>
        {
            Ok(Some(Known::SwitchingProtocols))
        }
        (false, true)
            if ours.head.is_none()
                && ours
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains("Content-Length"))
                && (*method == Method::HEAD
                    || !codings(theirs).is_empty()
                    || status(theirs).is_some_and(|s| {
                        s == StatusCode::NO_CONTENT || s == StatusCode::NOT_MODIFIED
                    })) =>
        {
            Ok(Some(Known::UnreadLength))
        }
        (true, false)
            if theirs.head.is_none()
                && ours.head.as_ref().is_some_and(|h| {
                    h.version() == Version::HTTP_10 && h.headers().contains_key(TRANSFER_ENCODING)
                }) =>
        {
            Ok(Some(Known::Http10TransferEncoding))
        }
        (true, false)
            if status(theirs) == status(ours)
                && theirs.body == ours.body
                && !codings(ours).is_empty() =>
        {
            Ok(Some(Known::Trailers))
        }
        _ => Err(apart()),
    }
}
