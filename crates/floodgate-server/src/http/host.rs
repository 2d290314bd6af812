//! The `Host` guard of `/v1` and `/admin` (against DNS rebinding: a loopback name or
//! address, or one of `http.allowed_hosts`; `421` otherwise) and the admin answers with
//! their security headers.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use floodgate_engine::admin::{AdminReply, misdirected, security_headers};
use floodgate_engine::metrics::RequestOutcome;

use super::HttpState;

/// The request's host: `Host`, else the URI's authority (HTTP/2's `:authority`).
pub(super) fn host_of(req: &axum::extract::Request) -> Option<&[u8]> {
    req.headers()
        .get(header::HOST)
        .map(HeaderValue::as_bytes)
        .or_else(|| req.uri().authority().map(|a| a.as_str().as_bytes()))
}

/// `/v1` answers only the hosts [`HttpState::allowed_hosts`] allows: `421` otherwise.
pub(super) async fn host_guard(
    State(s): State<Arc<HttpState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = host_of(&req);
    if s.allowed_hosts.allows(host) {
        return next.run(req).await;
    }
    s.engine
        .metrics()
        .request("http", RequestOutcome::Invalid, Duration::ZERO);
    admin_reply(misdirected(host, "http.allowed_hosts"))
}

/// An admin reply as a response, with the admin's security headers.
pub(super) fn admin_reply(reply: AdminReply) -> Response {
    let mut r = (
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK),
        [(header::CONTENT_TYPE, reply.content_type)],
        reply.body,
    )
        .into_response();
    for (name, value) in security_headers() {
        r.headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    r
}
