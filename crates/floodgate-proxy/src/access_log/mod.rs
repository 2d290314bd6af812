//! The proxy's access log: one line per request, whichever connection path served it
//! (the proxy's own HTTP/1 path, or hyper's for HTTP/2, TLS and bodies), 429s and the
//! upstream's 5xx included, in nginx's `combined` format followed by floodgate's
//! fields, or as JSON lines ([`AccessFormat`]); with the limiter's decision (outcome,
//! policy, key as `[log] keys` shows keys) from the [`RecordedDecision`] the layer put in
//! the response, not from a second decision.
//!
//! A request is noted when it arrives (`AccessLog::begin`: the request's fields are
//! reference-counted copies, nothing is formatted); its line is formatted when the
//! response's body ends or is dropped (its bytes counted: nginx's `$body_bytes_sent`),
//! into a buffer each thread reuses, and handed to the writer thread through a bounded
//! queue (the `writer` module): a full queue drops the line and counts it
//! (`floodgate_access_log_dropped_total`), it never holds the request.

mod format;
mod writer;

use std::cell::RefCell;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use floodgate_engine::metrics::Metrics;
use floodgate_http::RecordedDecision;
use http::header::{REFERER, USER_AGENT};
use http::{HeaderValue, Method, Request, Response, Uri, Version};

pub use format::AccessFormat;
pub use writer::AccessTarget;

use format::Entry;
use writer::Writer;

/// What `[log] access_log` and `access_format` ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogConfig {
    /// Where lines go.
    pub target: AccessTarget,
    /// Their format.
    pub format: AccessFormat,
}

/// A running access log (cheap to clone: every clone feeds the same writer).
#[derive(Debug, Clone)]
pub struct AccessLog {
    writer: Writer,
    format: AccessFormat,
}

impl AccessLog {
    /// Open the log's file (or standard output) and start its writer thread; dropped
    /// lines are counted in `metrics`.
    pub fn start(config: &AccessLogConfig, metrics: Arc<Metrics>) -> std::io::Result<AccessLog> {
        Ok(AccessLog {
            writer: Writer::start(config.target.clone(), metrics)?,
            format: config.format,
        })
    }

    /// Open the file again before the next line is written (`SIGUSR1`, a reload: after
    /// logrotate renamed it, lines go to a new file at the configured path).
    pub fn reopen(&self) {
        self.writer.reopen();
    }

    /// Write the line of a request head hyper's parser refused from `peer`, answered
    /// with `status` and no body, `waited` after the connection began waiting for it:
    /// `"-"` for the request (no request line to show), no decision.
    pub(crate) fn refused(&self, peer: IpAddr, status: u16, waited: std::time::Duration) {
        let entry = Entry {
            time: SystemTime::now(),
            remote_addr: peer,
            method: None,
            target: b"",
            version: Version::HTTP_11,
            status,
            bytes: 0,
            referer: None,
            user_agent: None,
            request_time: waited.as_secs_f64(),
            decided: None,
        };
        let line = BUF.with_borrow_mut(|buf| {
            buf.clear();
            entry.write(self.format, buf);
            buf.as_slice().to_vec()
        });
        self.writer.send(line);
    }

    /// Note `req` from `peer`, arrived at `start`, for its line.
    pub(crate) fn begin<B>(&self, req: &Request<B>, peer: IpAddr, start: Instant) -> Pending {
        let h = req.headers();
        Pending(Box::new(Noted {
            log: self.clone(),
            start,
            peer,
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            referer: h.get(REFERER).cloned(),
            user_agent: h.get(USER_AGENT).cloned(),
        }))
    }
}

/// A request noted by [`AccessLog::begin`], waiting for its response.
pub(crate) struct Pending(Box<Noted>);

struct Noted {
    log: AccessLog,
    start: Instant,
    peer: IpAddr,
    method: Method,
    uri: Uri,
    version: Version,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
}

impl Pending {
    /// `resp` with a body that writes the request's line when it ends or is dropped.
    pub(crate) fn respond<B>(self, resp: Response<B>) -> Response<Logged<B>> {
        let status = resp.status().as_u16();
        let decided = resp.extensions().get::<RecordedDecision>().cloned();
        resp.map(|inner| Logged {
            inner,
            line: Some(Line {
                noted: self.0,
                status,
                decided,
                bytes: 0,
            }),
        })
    }
}

/// Optional access logging for one request: `Some` when the log is on.
pub(crate) fn begin<B>(
    log: Option<&AccessLog>,
    req: &Request<B>,
    peer: IpAddr,
    start: Instant,
) -> Option<Pending> {
    log.map(|l| l.begin(req, peer, start))
}

/// `resp`, logged when `pending` is `Some`.
pub(crate) fn respond<B>(pending: Option<Pending>, resp: Response<B>) -> Response<Logged<B>> {
    match pending {
        Some(p) => p.respond(resp),
        None => resp.map(|inner| Logged { inner, line: None }),
    }
}

/// The line of a response being sent.
struct Line {
    noted: Box<Noted>,
    status: u16,
    decided: Option<RecordedDecision>,
    bytes: u64,
}

thread_local! {
    /// Each thread's line buffer, reused from line to line.
    static BUF: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
}

impl Line {
    fn write(self) {
        let n = &*self.noted;
        let target = n
            .uri
            .path_and_query()
            .map_or(n.uri.path().as_bytes(), |p| p.as_str().as_bytes());
        let entry = Entry {
            time: SystemTime::now(),
            remote_addr: n.peer,
            method: Some(&n.method),
            target,
            version: n.version,
            status: self.status,
            bytes: self.bytes,
            referer: n.referer.as_ref(),
            user_agent: n.user_agent.as_ref(),
            request_time: n.start.elapsed().as_secs_f64(),
            decided: self.decided.as_ref(),
        };
        let line = BUF.with_borrow_mut(|buf| {
            buf.clear();
            entry.write(n.log.format, buf);
            buf.as_slice().to_vec()
        });
        n.log.writer.send(line);
    }
}

/// A response body that counts the bytes sent and writes the request's access line when
/// it ends or is dropped (the client went away, a failed body).
pub(crate) struct Logged<B> {
    inner: B,
    line: Option<Line>,
}

impl<B> Drop for Logged<B> {
    fn drop(&mut self) {
        if let Some(line) = self.line.take() {
            line.write();
        }
    }
}

impl<B: http_body::Body<Data = Bytes> + Unpin> http_body::Body for Logged<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(line), Some(data)) = (this.line.as_mut(), frame.data_ref()) {
                    line.bytes += data.len() as u64;
                }
            }
            // the end, or a failed body: the line is written now
            Poll::Ready(_) => {
                if let Some(line) = this.line.take() {
                    line.write();
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
