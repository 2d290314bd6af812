//! The proxy's own HTTP/1 path for client connections: a raw TCP client writes exact
//! bytes to the real proxy (hyper backend, or a raw one where the upstream's framing
//! matters) and reads exact bytes back. Pipelining, HTTP/1.0, HEAD, framing of bodies of
//! unknown length, the hand-over to hyper in the middle of a connection (a request with
//! a body, a malformed or oversized head), and shutdown of idle connections.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const UNLIMITED: &str =
    "[[policy]]\nname = \"p\"\nrate = \"100000/s\"\nburst = 100000\nnodelay = true\n";

/// One response as read off the wire.
#[derive(Debug)]
struct Wire {
    status: u16,
    /// Field names lowercased, in order.
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Wire {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads responses from a raw connection, keeping what follows one for the next.
struct Reader {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    async fn connect(addr: SocketAddr) -> Reader {
        Reader {
            s: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 16384];
        let n = tokio::time::timeout(Duration::from_secs(5), self.s.read(&mut chunk))
            .await
            .expect("no bytes within 5 s")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// The next response; `head` says it answers a HEAD request (no body).
    async fn response(&mut self, head: bool) -> Wire {
        let (len, status, fields) = loop {
            let mut f = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut f);
            if let httparse::Status::Complete(n) = r.parse(&self.buf).expect("a valid head") {
                let fields = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8(h.value.to_vec()).unwrap(),
                        )
                    })
                    .collect::<Vec<_>>();
                break (n, r.code.unwrap(), fields);
            }
            assert!(self.fill().await > 0, "closed before a response head");
        };
        self.buf.drain(..len);
        let mut w = Wire {
            status,
            fields,
            body: Vec::new(),
        };
        if head || status == 204 || status == 304 {
            return w;
        }
        if let Some(n) = w.field("content-length") {
            let n: usize = n.parse().unwrap();
            while self.buf.len() < n {
                assert!(self.fill().await > 0, "closed inside a body");
            }
            w.body = self.buf.drain(..n).collect();
        } else if w.field("transfer-encoding") == Some("chunked") {
            loop {
                let line_end = loop {
                    if let Some(i) = self.buf.windows(2).position(|x| x == b"\r\n") {
                        break i;
                    }
                    assert!(self.fill().await > 0, "closed inside a chunk size");
                };
                let size =
                    usize::from_str_radix(std::str::from_utf8(&self.buf[..line_end]).unwrap(), 16)
                        .unwrap();
                while self.buf.len() < line_end + 2 + size + 2 {
                    assert!(self.fill().await > 0, "closed inside a chunk");
                }
                let chunk: Vec<u8> = self.buf.drain(..line_end + 2 + size + 2).collect();
                if size == 0 {
                    break;
                }
                w.body
                    .extend_from_slice(&chunk[line_end + 2..line_end + 2 + size]);
            }
        } else {
            while self.fill().await > 0 {}
            w.body = std::mem::take(&mut self.buf);
        }
        w
    }

    /// Whether the proxy closes the connection (EOF) within `wait`.
    async fn closed_within(&mut self, wait: Duration) -> bool {
        let mut b = [0u8; 1024];
        matches!(
            tokio::time::timeout(wait, self.s.read(&mut b)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let backend = Backend::start().await;
    let proxy = RunningProxy::start(UNLIMITED, backend.addr).await;
    let mut c = Reader::connect(proxy.addr).await;
    c.s.write_all(
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n\
          HEAD /b HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /empty HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n\
          GET /c HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let a = c.response(false).await;
    let b = c.response(true).await;
    let e = c.response(false).await;
    let d = c.response(false).await;
    assert_eq!((a.status, a.body.as_slice()), (200, &b"ok"[..]));
    // a HEAD's length is the one a GET would have had
    assert_eq!(b.status, 200);
    assert_eq!(b.field("content-length"), Some("2"));
    assert_eq!(e.status, 204);
    assert_eq!(e.field("content-length"), None);
    assert_eq!((d.status, d.body.as_slice()), (200, &b"ok"[..]));
    for w in [&a, &b, &e, &d] {
        assert!(
            w.field("date").is_some_and(|d| d.ends_with(" GMT")),
            "{w:?}"
        );
        assert!(w.field("ratelimit").is_some(), "{w:?}");
        assert_eq!(w.field("connection"), None);
    }
    let paths: Vec<String> = backend.arrivals().into_iter().map(|a| a.path).collect();
    assert_eq!(paths, ["/a", "/b", "/empty", "/c"]);
    assert!(!c.closed_within(Duration::from_millis(200)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_and_connection_close_end_the_connection_after_the_response() {
    let backend = Backend::start().await;
    let proxy = RunningProxy::start(UNLIMITED, backend.addr).await;

    // HTTP/1.0 without keep-alive: closed after one response
    let mut c = Reader::connect(proxy.addr).await;
    c.s.write_all(b"GET /a HTTP/1.0\r\n\r\n").await.unwrap();
    let r = c.response(false).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
    assert_eq!(r.field("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(2)).await);

    // HTTP/1.0 with keep-alive: kept, and said so
    let mut c = Reader::connect(proxy.addr).await;
    for _ in 0..2 {
        c.s.write_all(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await
            .unwrap();
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.field("connection"), Some("keep-alive"));
    }
    assert!(!c.closed_within(Duration::from_millis(200)).await);

    // HTTP/1.1 with Connection: close: the pipelined request after it is not answered
    let mut c = Reader::connect(proxy.addr).await;
    c.s.write_all(
        b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.field("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(2)).await);
    assert!(!backend.arrivals().iter().any(|a| a.path == "/never"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_body_hands_the_connection_to_hyper_in_its_middle() {
    let backend = Backend::start().await;
    let proxy = RunningProxy::start(UNLIMITED, backend.addr).await;
    let mut c = Reader::connect(proxy.addr).await;
    // one write: a bodyless GET (the proxy's path), a POST with a body (hyper's, from
    // here on), and a GET after it
    c.s.write_all(
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
          GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let a = c.response(false).await;
    let echo = c.response(false).await;
    let b = c.response(false).await;
    assert_eq!((a.status, a.body.as_slice()), (200, &b"ok"[..]));
    assert_eq!((echo.status, echo.body.as_slice()), (200, &b"hello"[..]));
    assert_eq!((b.status, b.body.as_slice()), (200, &b"ok"[..]));
    // a chunked request body on the same connection, then a GET
    c.s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
          GET /c HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    assert_eq!(c.response(false).await.body, b"abc");
    assert_eq!(c.response(false).await.body, b"ok");
    let paths: Vec<String> = backend.arrivals().into_iter().map(|a| a.path).collect();
    assert_eq!(paths, ["/a", "/echo", "/b", "/echo", "/c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_oversized_heads_get_hypers_answers() {
    let backend = Backend::start().await;
    let proxy = RunningProxy::start(UNLIMITED, backend.addr).await;

    // garbage after a good request: the good one is answered, then hyper's 400
    let mut c = Reader::connect(proxy.addr).await;
    c.s.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP AT ALL\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(c.response(false).await.status, 200);
    assert_eq!(c.response(false).await.status, 400);

    // a length that is no number
    let mut c = Reader::connect(proxy.addr).await;
    c.s.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(c.response(false).await.status, 400);

    // a 20 KiB field and 80 fields: past this path's limits, within hyper's: served
    let mut c = Reader::connect(proxy.addr).await;
    let big = format!(
        "GET /big-field HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "v".repeat(20 * 1024)
    );
    c.s.write_all(big.as_bytes()).await.unwrap();
    assert_eq!(c.response(false).await.status, 200);
    let many: String = (0..80).map(|i| format!("X-F{i}: {i}\r\n")).collect();
    c.s.write_all(format!("GET /many HTTP/1.1\r\nHost: x\r\n{many}\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(c.response(false).await.status, 200);
    let arrivals = backend.arrivals();
    let got = arrivals.iter().find(|a| a.path == "/many").unwrap();
    assert_eq!(got.headers.get("x-f79").unwrap(), "79");

    // a head past hyper's own limit too: refused, the proxy goes on
    let mut c = Reader::connect(proxy.addr).await;
    let huge = format!(
        "GET /huge HTTP/1.1\r\nX-Huge: {}\r\n\r\n",
        "v".repeat(1 << 20)
    );
    let _ = c.s.write_all(huge.as_bytes()).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), c.s.read_to_end(&mut rest)).await;
    assert!(!backend.arrivals().iter().any(|a| a.path == "/huge"));
    let c = client();
    assert_eq!(get(&c, proxy.addr, "/after", &[]).await.status, 200);
}

/// A raw backend answering every request with a chunked body "hello world" (unknown
/// length to the proxy).
async fn chunked_backend() -> SocketAddr {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                   5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    raw_backend(move |_, _, _| (answer.to_vec(), false)).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_unknown_length_are_chunked_for_http11_and_delimited_by_close_for_http10() {
    let upstream = chunked_backend().await;
    let proxy = RunningProxy::start(UNLIMITED, upstream).await;

    let mut c = Reader::connect(proxy.addr).await;
    for _ in 0..2 {
        c.s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let r = c.response(false).await;
        assert_eq!(r.field("transfer-encoding"), Some("chunked"));
        assert_eq!(r.field("content-length"), None);
        assert_eq!(r.body, b"hello world");
    }

    let mut c = Reader::connect(proxy.addr).await;
    c.s.write_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.field("transfer-encoding"), None);
    assert_eq!(r.field("connection"), Some("close"));
    assert_eq!(r.body, b"hello world");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_connections_at_once() {
    let backend = Backend::start().await;
    let mut proxy = RunningProxy::start(UNLIMITED, backend.addr).await;
    let mut idle = Reader::connect(proxy.addr).await;
    idle.s
        .write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(idle.response(false).await.status, 200);
    let mut fresh = Reader::connect(proxy.addr).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    proxy.shutdown();
    assert!(idle.closed_within(Duration::from_secs(2)).await);
    assert!(fresh.closed_within(Duration::from_secs(2)).await);
    tokio::time::timeout(Duration::from_secs(3), &mut proxy.task)
        .await
        .expect("the proxy stops without waiting out its 5 s grace")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
}
