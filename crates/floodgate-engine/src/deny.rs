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

/// The RFC 9457 problem object, members in name order (as `serde_json` writes a map):
/// `detail`, `policy` (if any), `retry_after` (if any), `status`, `title`, `type`.
fn problem_json(
    status: StatusCode,
    title: &str,
    detail: &str,
    retry_after: Option<u64>,
    policy: Option<&str>,
) -> String {
    let mut out = String::with_capacity(80 + detail.len());
    out.push_str("{\"detail\":");
    push_json_str(&mut out, detail);
    if let Some(p) = policy {
        out.push_str(",\"policy\":");
        push_json_str(&mut out, p);
    }
    if let Some(r) = retry_after {
        out.push_str(",\"retry_after\":");
        out.push_str(itoa::Buffer::new().format(r));
    }
    out.push_str(",\"status\":");
    out.push_str(status.as_str());
    out.push_str(",\"title\":");
    push_json_str(&mut out, title);
    out.push_str(",\"type\":\"about:blank\"}");
    out
}

/// Append `s` as a JSON string: quoted, `"` and backslash escaped, control characters as
/// short escapes (newline, tab...) or `u00XX` escapes, everything else as is (what
/// `serde_json` writes).
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                out.push_str("\\u00");
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push(char::from(HEX[(u32::from(c) >> 4) as usize]));
                out.push(char::from(HEX[(u32::from(c) & 0xf) as usize]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
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
        ReplyFormat::ProblemJson => (
            "application/problem+json",
            problem_json(status, title, detail, retry_after, policy),
        ),
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
    fn problem_json_is_what_serde_json_writes() {
        let mut rng = fastrand::Rng::with_seed(11);
        let alphabet: Vec<char> = (0u32..0x80)
            .filter_map(char::from_u32)
            .chain(['\u{e9}', '\u{2028}', '\u{1f600}', '\u{7f}'])
            .collect();
        for n in 0..500 {
            let text = |rng: &mut fastrand::Rng| -> String {
                let len = rng.usize(0..12);
                (0..len)
                    .map(|_| alphabet[rng.usize(..alphabet.len())])
                    .collect()
            };
            let detail = text(&mut rng);
            let policy = (n % 2 == 0).then(|| text(&mut rng));
            let retry_after = (n % 3 == 0).then(|| rng.u64(..));
            let status = [429u16, 400, 503][n % 3];
            let status = StatusCode::from_u16(status).unwrap();
            let title = status.canonical_reason().unwrap();
            let mut v = serde_json::json!({
                "type": "about:blank",
                "title": title,
                "status": status.as_u16(),
                "detail": detail,
            });
            if let Some(p) = &policy {
                v["policy"] = p.as_str().into();
            }
            if let Some(r) = retry_after {
                v["retry_after"] = r.into();
            }
            assert_eq!(
                problem_json(status, title, &detail, retry_after, policy.as_deref()),
                v.to_string(),
                "{detail:?} {policy:?}"
            );
        }
    }

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
