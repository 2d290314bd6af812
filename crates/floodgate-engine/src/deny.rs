//! The short responses floodgate writes itself: rate-limit denials (429 by default) and
//! the missing-key and store-failure outcomes, in the form the request asks for
//! ([`ReplyFormat`]): `text/plain` by default, `application/problem+json` (RFC 9457) when
//! its `Accept` names `application/problem+json` or `application/json`, and a gRPC status
//! when it is a gRPC call (`Content-Type: application/grpc...`).

use bytes::Bytes;
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;

/// The form of a response floodgate writes itself, chosen by the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyFormat {
    /// `text/plain`: the status line's words and a one-line detail.
    Text,
    /// `application/problem+json` (RFC 9457).
    ProblemJson,
    /// A gRPC call: HTTP 200 with no body and the status in `grpc-status` and
    /// `grpc-message` (a trailers-only response), as gRPC clients expect. The HTTP status
    /// maps to a gRPC code: 429 is `RESOURCE_EXHAUSTED` (8), 503, 502 and 504 are
    /// `UNAVAILABLE` (14), 400 `INVALID_ARGUMENT` (3), 401 `UNAUTHENTICATED` (16), 403
    /// `PERMISSION_DENIED` (7), any other `UNKNOWN` (2).
    Grpc,
}

impl ReplyFormat {
    /// The format `headers` (a request's) ask for.
    pub fn of(headers: &HeaderMap) -> ReplyFormat {
        if is_grpc(headers) {
            ReplyFormat::Grpc
        } else if wants_problem_json(headers) {
            ReplyFormat::ProblemJson
        } else {
            ReplyFormat::Text
        }
    }
}

/// Whether `headers` (a request's) are a gRPC call's: `Content-Type: application/grpc`,
/// with or without a `+format` suffix.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16 && v[..16].eq_ignore_ascii_case(b"application/grpc")
    })
}

/// Whether the client asked for JSON problem details.
pub fn wants_problem_json(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|m| {
            let m = m.split(|&b| b == b';').next().unwrap_or(b"").trim_ascii();
            m.eq_ignore_ascii_case(b"application/problem+json")
                || m.eq_ignore_ascii_case(b"application/json")
        })
    })
}

/// The gRPC status code for an HTTP status floodgate answers with.
fn grpc_code(status: StatusCode) -> u8 {
    match status.as_u16() {
        429 => 8,
        502..=504 => 14,
        400 => 3,
        401 => 16,
        403 => 7,
        _ => 2,
    }
}

/// `grpc-message`: percent-encoded as the gRPC spec asks (bytes outside printable ASCII,
/// and `%`).
fn grpc_message(detail: &str) -> HeaderValue {
    let mut out = String::with_capacity(detail.len());
    for &b in detail.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push('%');
            out.push_str(&format!("{b:02X}"));
        }
    }
    HeaderValue::try_from(out).unwrap_or_else(|_| HeaderValue::from_static("rate limited"))
}

/// A short error response: `status`, a one-line `detail`, optional `Retry-After` seconds
/// and the name of the binding policy, in `format`.
pub fn short_response(
    status: StatusCode,
    detail: &str,
    retry_after: Option<u64>,
    policy: Option<&str>,
    format: ReplyFormat,
) -> Response<Full<Bytes>> {
    let title = status.canonical_reason().unwrap_or("Error");
    let (ctype, body) = match format {
        ReplyFormat::Grpc => ("application/grpc", String::new()),
        ReplyFormat::ProblemJson => {
            let mut v = serde_json::json!({
                "type": "about:blank",
                "title": title,
                "status": status.as_u16(),
                "detail": detail,
            });
            if let Some(p) = policy {
                v["policy"] = p.into();
            }
            if let Some(r) = retry_after {
                v["retry_after"] = r.into();
            }
            ("application/problem+json", v.to_string())
        }
        ReplyFormat::Text => {
            let mut body = String::with_capacity(8 + title.len() + detail.len());
            body.push_str(status.as_str());
            body.push(' ');
            body.push_str(title);
            body.push_str(": ");
            body.push_str(detail);
            body.push('\n');
            ("text/plain; charset=utf-8", body)
        }
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(r) = retry_after {
        h.insert(RETRY_AFTER, HeaderValue::from(r));
    }
    if format == ReplyFormat::Grpc {
        h.insert(
            "grpc-status",
            HeaderValue::from(u16::from(grpc_code(status))),
        );
        h.insert("grpc-message", grpc_message(detail));
        if let Some(r) = retry_after.filter(|_| status == StatusCode::TOO_MANY_REQUESTS) {
            // gRPC's retry throttling reads the server's pushback here (gRFC A6)
            h.insert(
                "grpc-retry-pushback-ms",
                HeaderValue::from(r.saturating_mul(1000)),
            );
        }
    } else {
        *resp.status_mut() = status;
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        let mut h = HeaderMap::new();
        assert!(!wants_problem_json(&h));
        h.insert(
            ACCEPT,
            "text/html, application/problem+json;q=0.9".parse().unwrap(),
        );
        assert!(wants_problem_json(&h));
        h.insert(ACCEPT, "text/*".parse().unwrap());
        assert!(!wants_problem_json(&h));
    }

    #[test]
    fn bodies() {
        let r = short_response(
            StatusCode::TOO_MANY_REQUESTS,
            "rate limited",
            Some(3),
            Some("p"),
            ReplyFormat::ProblemJson,
        );
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(r.headers()[RETRY_AFTER], "3");
        let r = short_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "x",
            None,
            None,
            ReplyFormat::Text,
        );
        assert_eq!(r.status(), 503);
        assert!(r.headers().get(RETRY_AFTER).is_none());
    }

    #[test]
    fn grpc_calls_get_a_grpc_status() {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, "application/grpc+proto".parse().unwrap());
        h.insert(ACCEPT, "application/json".parse().unwrap());
        assert_eq!(ReplyFormat::of(&h), ReplyFormat::Grpc);
        h.insert(CONTENT_TYPE, "application/json".parse().unwrap());
        assert_eq!(ReplyFormat::of(&h), ReplyFormat::ProblemJson);
        let r = short_response(
            StatusCode::TOO_MANY_REQUESTS,
            "rate limited by policy \"p\"; 100% used, é",
            Some(3),
            Some("p"),
            ReplyFormat::Grpc,
        );
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "8");
        assert_eq!(
            r.headers()["grpc-message"],
            "rate limited by policy \"p\"; 100%25 used, %C3%A9"
        );
        assert_eq!(r.headers()["grpc-retry-pushback-ms"], "3000");
        assert_eq!(r.headers()[RETRY_AFTER], "3");
        assert!(http_body::Body::is_end_stream(r.body()));
        let r = short_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "x",
            None,
            None,
            ReplyFormat::Grpc,
        );
        assert_eq!(r.headers()["grpc-status"], "14");
        assert!(r.headers().get("grpc-retry-pushback-ms").is_none());
    }
}
