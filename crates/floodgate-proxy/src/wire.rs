//! The proxy's own HTTP/1 parsers, as the fuzz targets (`fuzz/`) call them: the client
//! side's request-head parser ([`parse_request_head`]), whose heads must be the heads
//! hyper's server reads ([`hyper_request_head`]), and the upstream side's response-head
//! parser ([`parse_response_head`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Response};
use tokio::io::AsyncWriteExt;

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

/// What the proxy's own path does with the bytes at the front of `buf`.
pub fn parse_request_head(buf: &[u8]) -> RequestHead {
    crate::client_conn::own_path_head(buf)
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

/// Parse the upstream response head at the front of `buf`, answering a request with
/// `method`; `Err` says why the response is refused (a 502).
pub fn parse_response_head(buf: &[u8], method: &Method) -> Result<ResponseParse, String> {
    crate::upstream::direct::response_head(buf, method)
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
