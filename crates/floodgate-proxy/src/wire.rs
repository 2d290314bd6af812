//! The proxy's own HTTP/1 parsers, as the fuzz targets (`fuzz/`) call them: the client
//! side's request-head parser ([`parse_request_head`]), whose heads must be the heads
//! hyper's server reads ([`hyper_request_head`]), and the upstream side's response-head
//! parser ([`parse_response_head`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Response};

pub use crate::h1::request_head::RequestHead;
pub use crate::h1::response_head::{BodyFraming, ResponseHead, ResponseParse};
use tokio::io::AsyncWriteExt;

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
