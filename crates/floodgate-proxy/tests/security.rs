//! The proxy against hostile request targets, paths, keys and heads, over raw sockets,
//! with a backend that records the exact bytes it receives.
//!
//! [`table`]: each row is the client's bytes, the statuses the client gets (in order),
//! the exact requests the backend receives (or none), and what the metrics count.
//! [`route_path_is_the_upstream_path`]: for arbitrary targets, the path that chose the
//! route is the path sent upstream, or the request is refused; with a `/` route nothing
//! forwarded is unlimited.

mod common;

use std::time::Duration;

use common::RunningProxy;
use common::recorder::{Recorder, exchange, sample};
use proptest::prelude::*;
use tokio::net::TcpStream;

const CFG: &str = r#"
[deny]
missing_key = "deny"

[[policy]]
name = "root"
rate = "100000/s"
burst = 100000
nodelay = true

[[policy]]
name = "admin"
rate = "100000/s"
burst = 100000
nodelay = true

[[policy]]
name = "search"
rate = "100000/s"
burst = 100000
nodelay = true
key = "header:x-api-key"

[[route]]
prefix = "/admin"
policies = ["admin"]

[[route]]
prefix = "/search"
methods = ["GET"]
policies = ["search"]

[[route]]
prefix = "/"
policies = ["root"]
"#;

/// What a row expects the metrics to count.
#[derive(Debug, Clone, Copy)]
enum Counted {
    /// `floodgate_requests_total{outcome="passed"}` by this many, each under `policy`.
    Passed(&'static str, u64),
    /// `invalid`, with this reason.
    Invalid(&'static str),
}

struct Row {
    name: &'static str,
    client: Vec<u8>,
    statuses: Vec<u16>,
    /// Exact requests the backend receives, in order.
    upstream: Vec<Vec<u8>>,
    counted: Counted,
}

fn row(
    name: &'static str,
    client: impl AsRef<[u8]>,
    statuses: &[u16],
    upstream: &[&str],
    counted: Counted,
) -> Row {
    Row {
        name,
        client: client.as_ref().to_vec(),
        statuses: statuses.to_vec(),
        upstream: upstream.iter().map(|u| u.as_bytes().to_vec()).collect(),
        counted,
    }
}

/// The backend's view of a bodyless `GET path` from the test client with `Host: a`.
fn fwd(method: &str, target: &str, fields: &str) -> String {
    format!("{method} {target} HTTP/1.1\r\n{fields}x-forwarded-for: 127.0.0.1\r\n\r\n")
}

use Counted::*;

fn rows() -> Vec<Row> {
    let a = "host: a\r\n";
    let get_admin = fwd("GET", "/admin", a);
    let mut rows = vec![
        row(
            "origin-form GET is forwarded as it is",
            "GET /admin?x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&fwd("GET", "/admin?x=1", a)],
            Passed("admin", 1),
        ),
        // finding 1: targets that are not paths
        row(
            "GET x",
            "GET x HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("target"),
        ),
        row(
            "GET host:80",
            "GET host:80 HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("target"),
        ),
        row(
            "GET user@host",
            "GET user@host HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("target"),
        ),
        row(
            "POST a:1 with a body (hyper's path)",
            "POST a:1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
            &[400],
            &[],
            Invalid("target"),
        ),
        row(
            "GET *",
            "GET * HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("target"),
        ),
        row(
            "OPTIONS * is forwarded and limited by the / route",
            "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&fwd("OPTIONS", "*", a)],
            Passed("root", 1),
        ),
        row(
            "CONNECT /",
            "CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n",
            &[405],
            &[],
            Invalid("method_not_allowed"),
        ),
        row(
            "CONNECT host:443",
            "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
            &[405],
            &[],
            Invalid("method_not_allowed"),
        ),
        row(
            "40 pipelined GET x: one 400, then the connection closes",
            "GET x HTTP/1.1\r\nHost: a\r\n\r\n".repeat(40),
            &[400],
            &[],
            Invalid("target"),
        ),
        row(
            "absolute ftp URI",
            "GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("target"),
        ),
        row(
            "absolute URI with userinfo",
            "GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("target"),
        ),
        // finding 2: path tricks are normalized and limited by /admin
        row(
            "//admin",
            "GET //admin HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&get_admin],
            Passed("admin", 1),
        ),
        row(
            "/%61dmin",
            "GET /%61dmin HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&get_admin],
            Passed("admin", 1),
        ),
        row(
            "/x/../admin",
            "GET /x/../admin HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&get_admin],
            Passed("admin", 1),
        ),
        row(
            "/./admin",
            "GET /./admin HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&get_admin],
            Passed("admin", 1),
        ),
        row(
            "/%2e/admin",
            "GET /%2e/admin HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&get_admin],
            Passed("admin", 1),
        ),
        row(
            "/%2e%2E/admin on hyper's path (a body)",
            "POST /%2e%2E/admin HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
            &[200],
            &[
                "POST /admin HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nx-forwarded-for: 127.0.0.1\r\n\r\nhi",
            ],
            Passed("admin", 1),
        ),
        row(
            "the query is kept byte for byte",
            "GET /x/..//admin?a=/../b&c=%2e HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&fwd("GET", "/admin?a=/../b&c=%2e", a)],
            Passed("admin", 1),
        ),
        row(
            "an encoded slash",
            "GET /x%2F..%2Fadmin HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("path"),
        ),
        row(
            "/..;/admin",
            "GET /x/..;/admin HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("path"),
        ),
        row(
            "a bad escape",
            "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("path"),
        ),
        row(
            "path parameters on a named segment are kept",
            "GET /admin;v=1 HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&fwd("GET", "/admin;v=1", a)],
            Passed("admin", 1),
        ),
        row(
            "case is kept and matched as it is",
            "GET /ADMIN HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&fwd("GET", "/ADMIN", a)],
            Passed("root", 1),
        ),
        // finding 3: keys
        row(
            "a repeated key header",
            "GET /search HTTP/1.1\r\nHost: a\r\nX-Api-Key: random\r\nX-Api-Key: real\r\n\r\n",
            &[400],
            &[],
            Invalid("key_header"),
        ),
        row(
            "Connection naming the key header does not remove it",
            "GET /search HTTP/1.1\r\nHost: a\r\nX-Api-Key: k\r\nConnection: x-api-key, x-drop\r\nX-Drop: 1\r\n\r\n",
            &[200],
            &[&fwd("GET", "/search", "host: a\r\nx-api-key: k\r\n")],
            Passed("search", 1),
        ),
        row(
            "hop-by-hop fields are removed before the limiter",
            "GET / HTTP/1.1\r\nHost: a\r\nKeep-Alive: 5\r\nTE: trailers\r\nProxy-Connection: x\r\n\r\n",
            &[200],
            &[&fwd("GET", "/", a)],
            Passed("root", 1),
        ),
        // finding 5: methods
        row(
            "HEAD is counted by a GET route",
            "HEAD /search HTTP/1.1\r\nHost: a\r\nX-Api-Key: k\r\n\r\n",
            &[200],
            &[&fwd("HEAD", "/search", "host: a\r\nx-api-key: k\r\n")],
            Passed("search", 1),
        ),
        row(
            "a lower-case method",
            "get / HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("method"),
        ),
        row(
            "TRACE",
            "TRACE / HTTP/1.1\r\nHost: a\r\n\r\n",
            &[405],
            &[],
            Invalid("method_not_allowed"),
        ),
        row(
            "an extension method",
            "PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&fwd("PROPFIND", "/", a)],
            Passed("root", 1),
        ),
        // finding 6: Host
        row(
            "no Host",
            "GET / HTTP/1.1\r\n\r\n",
            &[400],
            &[],
            Invalid("host"),
        ),
        row(
            "two Hosts",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            &[400],
            &[],
            Invalid("host"),
        ),
        row(
            "an empty Host",
            "GET / HTTP/1.1\r\nHost: \r\n\r\n",
            &[400],
            &[],
            Invalid("host"),
        ),
        row(
            "Connection: host keeps Host",
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: host\r\n\r\n",
            &[200],
            &[&fwd("GET", "/", a)],
            Passed("root", 1),
        ),
        row(
            "an absolute URI's host wins over Host, and its query is kept",
            "GET http://b?x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            &[&fwd("GET", "/?x=1", "host: b\r\n")],
            Passed("root", 1),
        ),
        row(
            "HTTP/1.0 without Host gets the upstream's",
            "GET / HTTP/1.0\r\n\r\n",
            &[200],
            &[],
            Passed("root", 1),
        ),
        // smuggling probes that already passed: hyper answers them, nothing is sent
        row(
            "CL.TE",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200],
            // chunked wins, the smuggled request is never read: the connection closes
            &[
                "POST / HTTP/1.1\r\nhost: a\r\nx-forwarded-for: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            ],
            Passed("root", 1),
        ),
        row(
            "TE.CL",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
            &[200],
            // chunked wins, the body is sent as chunks again
            &[
                "POST / HTTP/1.1\r\nhost: a\r\nx-forwarded-for: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
            ],
            Passed("root", 1),
        ),
        row(
            "an obfuscated Transfer-Encoding",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "a space before the colon",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "repeated Transfer-Encoding, chunked not last",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "conflicting Content-Length",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nhello",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "a signed Content-Length",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "a bare CR",
            "GET / HTTP/1.1\rHost: a\r\n\r\n",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "bare LF line ends are read as lines, sent with CRLF",
            "GET / HTTP/1.1\nHost: a\n\n",
            &[200],
            &[&fwd("GET", "/", a)],
            Passed("root", 1),
        ),
        row(
            "obs-fold",
            "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "NUL in a value",
            "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n",
            &[400],
            &[],
            Invalid("head"),
        ),
        row(
            "an oversized head",
            format!(
                "GET / HTTP/1.1\r\nHost: a\r\nX-A: {}\r\n\r\n",
                "b".repeat(600 * 1024)
            ),
            &[431],
            &[],
            Invalid("head"),
        ),
        row(
            "pipelining across the hand-over to hyper",
            "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /c HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200, 200, 200],
            &[
                &fwd("GET", "/a", a),
                "POST /b HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\nx-forwarded-for: 127.0.0.1\r\n\r\nhello",
                &fwd("GET", "/c", a),
            ],
            Passed("root", 3),
        ),
    ];
    // HTTP/1.0 without Host: the upstream's authority is sent, which the test knows
    // only at run time; the row is completed in `table`
    for r in &mut rows {
        if r.name.starts_with("HTTP/1.0") {
            r.upstream = vec![Vec::new()];
        }
    }
    rows
}

/// Whether the metrics went from `before` to `after` as `want` says.
fn counted(before: &str, after: &str, want: Counted) -> bool {
    let delta = |series: &str| sample(after, series).saturating_sub(sample(before, series));
    match want {
        Passed(policy, n) => {
            delta(r#"floodgate_requests_total{outcome="passed"}"#) == n
                && delta(&format!(
                    r#"floodgate_decisions_total{{policy="{policy}",outcome="passed"}}"#
                )) == n
                && delta(r#"floodgate_requests_total{outcome="unlimited"}"#) == 0
        }
        Invalid(reason) => {
            delta(r#"floodgate_requests_total{outcome="invalid"}"#) == 1
                && delta(&format!(
                    r#"floodgate_invalid_requests_total{{reason="{reason}"}}"#
                )) == 1
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table() {
    let backend = Recorder::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let mut failures = Vec::new();
    for mut r in rows() {
        if r.upstream == [Vec::<u8>::new()] {
            r.upstream = vec![fwd("GET", "/", &format!("host: {}\r\n", backend.addr)).into_bytes()];
        }
        let before = p.limiter.render_metrics();
        let got = exchange(p.addr, &r.client, r.statuses.len()).await;
        let statuses: Vec<u16> = got.iter().map(|a| a.status).collect();
        let received = backend.take();
        // a refusal by hyper's parser is counted when its connection ends, just after
        // the answer: the metrics are looked at again for a while
        let mut counted_ok = false;
        for _ in 0..40 {
            counted_ok = counted(&before, &p.limiter.render_metrics(), r.counted);
            if counted_ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        if statuses != r.statuses || received != r.upstream || !counted_ok {
            failures.push(format!(
                "{}: statuses {statuses:?} (want {:?}); upstream {:?} (want {:?}); counted as {:?}: {counted_ok}; heads {:?}",
                r.name,
                r.statuses,
                received
                    .iter()
                    .map(|b| String::from_utf8_lossy(b).to_string())
                    .collect::<Vec<_>>(),
                r.upstream
                    .iter()
                    .map(|b| String::from_utf8_lossy(b).to_string())
                    .collect::<Vec<_>>(),
                r.counted,
                got.iter().map(|a| a.head.lines().next().unwrap_or("")).collect::<Vec<_>>(),
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// With `/admin` exhausted, every spelling of it is refused too (finding 2), and HEAD
/// pays the GET route's cost (finding 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spellings_of_a_path_share_its_limit() {
    let backend = Recorder::start().await;
    // sliding logs: a fixed window aligned to the clock's minute could roll over between
    // the admitted requests and the spellings, and admit one of them
    let cfg = r#"
[[policy]]
name = "admin"
algorithm = "sliding-log"
rate = "3/min"

[[policy]]
name = "search"
algorithm = "sliding-log"
rate = "30/min"

[[route]]
prefix = "/admin"
policies = ["admin"]

[[route]]
prefix = "/search"
methods = ["GET"]
policies = ["search"]
cost = 10

[[route]]
prefix = "/"
policies = []
"#;
    let p = RunningProxy::start(cfg, backend.addr).await;
    for _ in 0..3 {
        let got = exchange(p.addr, b"GET /admin HTTP/1.1\r\nHost: a\r\n\r\n", 1).await;
        assert_eq!(got[0].status, 200);
    }
    for spelling in [
        "//admin",
        "/%61dmin",
        "/x/../admin",
        "/./admin",
        "/%2e/admin",
        "/admin/",
    ] {
        let req = format!("GET {spelling} HTTP/1.1\r\nHost: a\r\n\r\n");
        let got = exchange(p.addr, req.as_bytes(), 1).await;
        assert_eq!(got[0].status, 429, "{spelling}");
    }
    let heads: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            let got = exchange(p.addr, b"HEAD /search HTTP/1.1\r\nHost: a\r\n\r\n", 1).await;
            v.push(got[0].status);
        }
        v
    };
    assert_eq!(heads, [200, 200, 200, 429, 429]);
}

/// HTTP/2: `:authority` wins over a `Host` field, a CONNECT is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_authority_wins_over_host() {
    let backend = Recorder::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let s = TcpStream::connect(p.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(s),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("http://b/x/../admin?q=1")
        .header("host", "a")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let got = backend.take();
    assert_eq!(got.len(), 1);
    let text = String::from_utf8_lossy(&got[0]).to_string();
    assert!(
        text.starts_with("GET /admin?q=1 HTTP/1.1\r\nhost: b\r\n"),
        "{text}"
    );
}

/// A policy keyed on the route: with `/r/item` exhausted, its spellings with `;`
/// parameters or trailing slashes are the same key, refused too; they are forwarded as
/// the client wrote them when admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_keys_ignore_parameters_and_trailing_slashes() {
    let backend = Recorder::start().await;
    let cfg = r#"
[[policy]]
name = "per_path"
algorithm = "sliding-log"
rate = "2/min"
key = "route"

[[route]]
prefix = "/r"
policies = ["per_path"]
"#;
    let p = RunningProxy::start(cfg, backend.addr).await;
    let get = |target: &str| format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
    for target in ["/r/item", "/r/item;x=0"] {
        let got = exchange(p.addr, get(target).as_bytes(), 1).await;
        assert_eq!(got[0].status, 200, "{target}");
    }
    let sent = backend.take();
    assert!(
        String::from_utf8_lossy(&sent[1]).starts_with("GET /r/item;x=0 HTTP/1.1"),
        "{sent:?}"
    );
    for target in [
        "/r/item",
        "/r/item;x=1",
        "/r/item;x=2",
        "/r/item/",
        "/r/item//",
        "/r/item;x=3/",
        "/r;v=1/item",
    ] {
        let got = exchange(p.addr, get(target).as_bytes(), 1).await;
        assert_eq!(got[0].status, 429, "{target}");
    }
    assert!(backend.take().is_empty());
    let got = exchange(p.addr, get("/r/other").as_bytes(), 1).await;
    assert_eq!(got[0].status, 200);
}

/// Header fields of an HTTP/2 request, in order.
type Fields = Vec<(&'static str, &'static str)>;

/// HTTP/2 rows: with `x-api-key: real` exhausted, the same key padded with spaces or tabs
/// is refused (RFC 9113 §8.2.1), never a new bucket; so is any other padded field. The
/// same bytes over HTTP/1 are trimmed by the parser and limited as `real`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_table() {
    let backend = Recorder::start().await;
    let cfg = r#"
[[policy]]
name = "search"
algorithm = "sliding-log"
rate = "2/min"
key = "header:x-api-key"

[[route]]
prefix = "/"
policies = ["search"]
"#;
    let p = RunningProxy::start(cfg, backend.addr).await;
    let h2 = |fields: Fields| {
        let addr = p.addr;
        async move {
            let s = TcpStream::connect(addr).await.unwrap();
            let (mut send, conn) = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(s),
            )
            .await
            .unwrap();
            tokio::spawn(conn);
            let mut req = http::Request::get("http://a/search");
            for (k, v) in fields {
                req = req.header(k, http::HeaderValue::from_static(v));
            }
            let req = req
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            send.send_request(req).await.unwrap().status().as_u16()
        }
    };
    for _ in 0..2 {
        assert_eq!(h2(vec![("x-api-key", "real")]).await, 200);
    }
    assert_eq!(backend.take().len(), 2);
    // (name, fields, status): every row after the key is exhausted
    let rows: Vec<(&str, Fields, u16)> = vec![
        ("the key itself", vec![("x-api-key", "real")], 429),
        ("a leading space", vec![("x-api-key", " real")], 400),
        ("a trailing space", vec![("x-api-key", "real ")], 400),
        ("a trailing tab", vec![("x-api-key", "real\t")], 400),
        ("tabs and spaces", vec![("x-api-key", "\t real \t")], 400),
        ("a leading tab", vec![("x-api-key", "\treal")], 400),
        (
            "a padded Host",
            vec![("host", " a"), ("x-api-key", "other")],
            400,
        ),
        (
            "a padded field no policy reads",
            vec![("x-api-key", "other"), ("x-trace", "t ")],
            400,
        ),
        (
            "inner whitespace is part of the key",
            vec![("x-api-key", "re al")],
            200,
        ),
    ];
    let mut failures = Vec::new();
    for (name, fields, want) in rows {
        let before = p.limiter.render_metrics();
        let got = h2(fields).await;
        let received = backend.take();
        let after = p.limiter.render_metrics();
        let invalid = sample(&after, r#"floodgate_invalid_requests_total{reason="head"}"#)
            - sample(
                &before,
                r#"floodgate_invalid_requests_total{reason="head"}"#,
            );
        let sent = usize::from(want == 200);
        if got != want || received.len() != sent || invalid != u64::from(want == 400) {
            failures.push(format!(
                "{name}: status {got} (want {want}), {} sent upstream, {invalid} counted invalid",
                received.len()
            ));
        }
    }
    // HTTP/1 with the same bytes: the parser trims them, the key is `real`, limited
    for v in [" real", "real ", "real\t", "\t real \t"] {
        let req = format!("GET /search HTTP/1.1\r\nHost: a\r\nX-Api-Key: {v}\r\n\r\n");
        let got = exchange(p.addr, req.as_bytes(), 1).await;
        if got[0].status != 429 {
            failures.push(format!("HTTP/1 {v:?}: status {}", got[0].status));
        }
    }
    assert!(backend.take().is_empty());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---- the property: the route-selecting path is the path sent upstream ----

/// Routes of the property test and their policies (longest prefix first).
const PROP_ROUTES: [(&str, &str); 4] = [
    ("/admin/x", "adminx"),
    ("/admin", "admin"),
    ("/a", "a"),
    ("/", "root"),
];

fn prop_cfg() -> String {
    let mut cfg = String::new();
    for (prefix, policy) in PROP_ROUTES {
        cfg.push_str(&format!(
            "[[policy]]\nname = \"{policy}\"\nrate = \"1000000/s\"\nburst = 1000000\nnodelay = true\n\n[[route]]\nprefix = \"{prefix}\"\npolicies = [\"{policy}\"]\n\n"
        ));
    }
    cfg
}

/// Targets built from pieces that make paths ambiguous, sometimes absolute, sometimes
/// with a query, and sometimes arbitrary visible bytes.
fn targets() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "admin", "a", "x", "ADMIN", "..", ".", "", "%61dmin", "%2e", "%2E%2e", "%2f", "%5C", ";p",
        "..;", "admin;v", "%", "%zz", "%41", "~", "*", "?", "#", "@", ":",
    ]);
    let path = prop::collection::vec(piece, 0..6).prop_map(|v| v.join("/"));
    let structured = (
        prop::sample::select(vec![
            "/",
            "//",
            "",
            "http://h/",
            "http://h",
            "https://u@h/",
            "*",
        ]),
        path,
        prop::option::of(prop::sample::select(vec!["?q=/../admin", "?", "?a=%2e"])),
    )
        .prop_map(|(start, p, q)| format!("{start}{p}{}", q.unwrap_or("")));
    let arbitrary =
        prop::collection::vec(0x21u8..0x7f, 1..20).prop_map(|v| String::from_utf8(v).unwrap());
    prop_oneof![4 => structured, 1 => arbitrary]
}

/// The policy of the longest route prefix `path` starts with.
fn expected_policy(path: &str) -> &'static str {
    let path = if path == "*" { "/" } else { path };
    PROP_ROUTES
        .iter()
        .find(|(prefix, _)| path.starts_with(prefix))
        .map_or("none", |(_, p)| p)
}

#[test]
fn route_path_is_the_upstream_path() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (backend, p) = rt.block_on(async {
        let backend = Recorder::start().await;
        let p = RunningProxy::start(&prop_cfg(), backend.addr).await;
        (backend, p)
    });
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&targets(), |target| {
            let method = if target == "*" { "OPTIONS" } else { "GET" };
            let req = format!("{method} {target} HTTP/1.1\r\nHost: h\r\n\r\n");
            let before = p.limiter.render_metrics();
            let got = rt.block_on(exchange(p.addr, req.as_bytes(), 1));
            let received = backend.take();
            let after = p.limiter.render_metrics();
            let unlimited = r#"floodgate_requests_total{outcome="unlimited"}"#;
            prop_assert_eq!(sample(&after, unlimited), sample(&before, unlimited));
            prop_assert_eq!(got.len(), 1, "{:?}", target);
            let status = got[0].status;
            if status != 200 {
                prop_assert!(status == 400 || status == 405, "{target:?}: {status}");
                prop_assert!(received.is_empty(), "{target:?} refused yet sent");
                return Ok(());
            }
            prop_assert_eq!(received.len(), 1);
            let line = String::from_utf8_lossy(&received[0]).to_string();
            let sent = line.split(' ').nth(1).unwrap_or("").to_string();
            let (sent_path, sent_query) = match sent.split_once('?') {
                Some((p, q)) => (p.to_string(), Some(q.to_string())),
                None => (sent.clone(), None),
            };
            // the query is the client's, byte for byte
            let client_query = target
                .split('#')
                .next()
                .and_then(|t| t.split_once('?'))
                .map(|(_, q)| q.to_string());
            prop_assert_eq!(sent_query, client_query, "{:?} -> {:?}", target, sent);
            // the route the limiter chose (its policy, in RateLimit-Policy) is the one
            // the path sent upstream selects
            let want = expected_policy(&sent_path);
            let head = got[0].head.to_ascii_lowercase();
            prop_assert!(
                head.contains(&format!("ratelimit-policy: \"{want}\"")),
                "{target:?} sent as {sent:?}: want policy {want}, head {head}"
            );
            // and the path sent is normalized: no dot or empty segment, no escape of an
            // unreserved character
            prop_assert!(
                !sent_path.contains("//")
                    && !sent_path.contains("/./")
                    && !sent_path.contains("/../"),
                "{sent_path}"
            );
            prop_assert!(
                !sent_path.to_ascii_lowercase().contains("%61"),
                "{sent_path}"
            );
            Ok(())
        })
        .unwrap();
    drop(p);
    drop(backend);
}
