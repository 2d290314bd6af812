//! The short responses floodgate writes itself: rate-limit denials (429 by default) and
//! the missing-key and store-failure outcomes. `text/plain` by default,
//! `application/problem+json` (RFC 9457) when the request's `Accept` names
//! `application/problem+json` or `application/json`.

use bytes::Bytes;
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;

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

/// A short error response: `status`, a one-line `detail`, optional `Retry-After` seconds
/// and the name of the binding policy.
pub fn short_response(
    status: StatusCode,
    detail: &str,
    retry_after: Option<u64>,
    policy: Option<&str>,
    problem_json: bool,
) -> Response<Full<Bytes>> {
    let title = status.canonical_reason().unwrap_or("Error");
    let (ctype, body) = if problem_json {
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
    } else {
        let mut body = String::with_capacity(8 + title.len() + detail.len());
        body.push_str(status.as_str());
        body.push(' ');
        body.push_str(title);
        body.push_str(": ");
        body.push_str(detail);
        body.push('\n');
        ("text/plain; charset=utf-8", body)
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(r) = retry_after {
        h.insert(RETRY_AFTER, HeaderValue::from(r));
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
            true,
        );
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(r.headers()[RETRY_AFTER], "3");
        let r = short_response(StatusCode::SERVICE_UNAVAILABLE, "x", None, None, false);
        assert_eq!(r.status(), 503);
        assert!(r.headers().get(RETRY_AFTER).is_none());
    }
}
