//! What the gRPC door answers, apart from how HTTP/2 carries it: `ShouldRateLimit` read
//! in place and decided directly ([`GrpcDoor::answer`]), everything else by tonic's routes
//! ([`GrpcDoor::handle`]).
//!
//! The direct path reads the one length-prefixed message of a unary call, reads the
//! request in place ([`wire`]; prost when that reader declines), asks
//! [`RlsService::decide_with`] (the same code the tonic service runs) and writes the reply
//! as tonic does (the message as prost encodes it, written by [`wire::write_reply`]):
//! `content-type: application/grpc`, one data frame, a `grpc-status: 0` trailer; an error
//! is a trailers-only reply ([`tonic::Status::into_http`]). It skips tonic's per-call
//! router, codec buffers, boxed futures and layers. A call it cannot take as it is (a
//! compressed or malformed message, more than one message, a message above the size cap)
//! is handed to the tonic service unchanged, so every error is tonic's own. A
//! `grpc-timeout` header bounds the whole call, as tonic's server does.
//!
//! Tested against tonic: `tests/grpc_direct.rs` sends the same calls through this path
//! and through tonic's service and compares status, headers, trailers and message.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use http::header::{HeaderMap, HeaderName};
use http::{Request, Response};
use http_body::Body;
use prost::Message;
use tonic::Status;
use tonic::service::Routes;
use tower_service::Service;

use super::{RlsService, wire};

/// The path of Envoy's `ShouldRateLimit`.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

// A header name made once: a name given as `&str` is parsed and validated on every use.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// What the gRPC listener serves.
#[derive(Clone)]
pub struct GrpcDoor {
    service: RlsService,
    routes: Routes,
    max_bytes: usize,
    /// TLS around every connection, and where its failures are counted.
    tls: Option<(crate::tls::Acceptor, Arc<crate::metrics::Metrics>)>,
}

impl std::fmt::Debug for GrpcDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcDoor")
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl GrpcDoor {
    /// `service` answers `ShouldRateLimit` directly (messages up to `max_bytes`);
    /// `routes` (which must hold the same service) answers every other call.
    pub fn new(service: RlsService, routes: Routes, max_bytes: usize) -> GrpcDoor {
        GrpcDoor {
            service,
            routes: routes.prepare(),
            max_bytes,
            tls: None,
        }
    }

    /// Wrap every connection in TLS with `acceptor` (failures counted in `metrics`).
    pub fn with_tls(
        mut self,
        acceptor: Option<crate::tls::Acceptor>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> GrpcDoor {
        self.tls = acceptor.map(|a| (a, metrics));
        self
    }

    /// The TLS acceptor and the metrics its failures go to (`None`: cleartext).
    pub fn tls(&self) -> Option<(crate::tls::Acceptor, Arc<crate::metrics::Metrics>)> {
        self.tls.clone()
    }

    /// Answer a request through tonic's routes: every request the connection does not
    /// answer itself (another method, `grpc-encoding`, a `ShouldRateLimit` message
    /// [`GrpcDoor::answer`] declines or one above the size cap), bounded by its
    /// `grpc-timeout` as tonic's server bounds it.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<tonic::body::Body>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + Sync,
    {
        let timeout = grpc_timeout(req.headers());
        let mut routes = self.routes.clone();
        let call = routes.call(req.map(tonic::body::Body::new));
        let response = match timeout {
            None => call.await,
            Some(t) => match tokio::time::timeout(t, call).await {
                Ok(r) => r,
                Err(_) => Ok(Status::cancelled("Timeout expired").into_http()),
            },
        };
        match response {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// The most octets a request message may have.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Answer a `ShouldRateLimit` call whose body is `body` (the length-prefixed
    /// message), or decline it: a body that is not one uncompressed message of at most
    /// the size cap, or a message prost cannot decode, is tonic's to answer.
    pub async fn answer(&self, body: &Bytes) -> Direct {
        let message = match body.get(..5) {
            Some(&[0, a, b, c, d])
                if u32::from_be_bytes([a, b, c, d]) as usize == body.len() - 5
                    && body.len() - 5 <= self.max_bytes =>
            {
                body.slice(5..)
            }
            _ => return Direct::Declined,
        };
        if let Some(request) = wire::read_request(&message) {
            return match self.service.decide_with(request, wire::write_reply).await {
                Ok(reply) => Direct::Reply(reply),
                Err(status) => Direct::Status(status),
            };
        }
        match RateLimitRequest::decode(message) {
            // boxed: a rare path, kept out of the size of every call's future
            Ok(request) => {
                Box::pin(async move {
                    match self.service.decide(&request).await {
                        Ok(response) => Direct::Reply(encode(&response)),
                        Err(status) => Direct::Status(status),
                    }
                })
                .await
            }
            Err(_) => Direct::Declined,
        }
    }
}

/// What [`GrpcDoor::answer`] gives a `ShouldRateLimit` call.
pub enum Direct {
    /// The reply: one length-prefixed `RateLimitResponse`, then `grpc-status: 0`.
    Reply(Bytes),
    /// A trailers-only reply with this status.
    Status(Status),
    /// Not one the direct path takes: tonic's service answers it.
    Declined,
}

/// `message` as one length-prefixed gRPC message.
fn encode(message: &RateLimitResponse) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    message.encode_raw(&mut buf);
    buf.freeze()
}

/// The `grpc-timeout` header as tonic's server reads it (at most 8 digits and a unit:
/// `H`, `M`, `S`, `m`, `u`, `n`); a malformed header is no timeout.
pub(crate) fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    parse_grpc_timeout(headers.get(GRPC_TIMEOUT)?.to_str().ok()?)
}

/// A `grpc-timeout` value as tonic's server reads it; a malformed one is none.
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.is_empty() || !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 60 * 60),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderValue;

    #[test]
    fn grpc_timeout_reads_tonic_units() {
        let t = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("grpc-timeout", HeaderValue::from_str(v).unwrap());
            grpc_timeout(&h)
        };
        assert_eq!(t("20m"), Some(Duration::from_millis(20)));
        assert_eq!(t("3S"), Some(Duration::from_secs(3)));
        assert_eq!(t("2M"), Some(Duration::from_secs(120)));
        assert_eq!(t("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t("7u"), Some(Duration::from_micros(7)));
        assert_eq!(t("9n"), Some(Duration::from_nanos(9)));
        assert_eq!(t("123456789m"), None);
        assert_eq!(t("m"), None);
        assert_eq!(t("5x"), None);
        assert_eq!(t("-5m"), None);
        // the HTTP/2 door reads values as UTF-8: a unit that is not ASCII is no timeout
        assert_eq!(parse_grpc_timeout("2\u{592}"), None);
        assert_eq!(parse_grpc_timeout("\u{592}"), None);
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }
}
