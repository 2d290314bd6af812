//! One keep-alive HTTP/1.1 connection per worker, on hyper 1's client connection API over
//! tokio (hyper-util's `TokioIo`). The pool is the set of workers' connections: `-c N`
//! means N connections, each reused for every request of its worker and re-opened only
//! after an error or a timeout.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::target::Target;

/// How a request failed without an HTTP response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The TCP connection was refused (nothing listening).
    ConnectRefused,
    /// No complete response within the timeout (connecting included).
    Timeout,
    /// Anything else: reset, closed mid-response, malformed response, other connect errors.
    Other,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [ErrorKind; 3] = [
        ErrorKind::ConnectRefused,
        ErrorKind::Timeout,
        ErrorKind::Other,
    ];

    /// Index into per-kind arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::ConnectRefused => "connect refused",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Other => "other",
        }
    }
}

/// A failed request: its kind and the underlying message.
#[derive(Debug)]
pub struct RequestError {
    /// Classification.
    pub kind: ErrorKind,
    /// The error text.
    pub message: String,
}

/// What every request of a run looks like (built once, cloned per request).
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    method: Method,
    uri: http::Uri,
    headers: HeaderMap,
    body: Bytes,
    /// The class header and its value per class index, when the run has a class mix.
    classes: Option<(http::HeaderName, Vec<header::HeaderValue>)>,
}

impl RequestTemplate {
    /// The request for `target` with extra `headers` (which may override `Host` and
    /// `User-Agent`).
    pub fn new(target: &Target, method: Method, headers: &HeaderMap, body: Bytes) -> Self {
        let mut h = HeaderMap::new();
        h.insert(
            header::HOST,
            header::HeaderValue::from_str(target.authority.as_str())
                .expect("an authority is a valid header value"),
        );
        h.insert(
            header::USER_AGENT,
            header::HeaderValue::from_static(concat!("floodgate-load/", env!("CARGO_PKG_VERSION"))),
        );
        for (name, value) in headers {
            h.insert(name.clone(), value.clone());
        }
        if !body.is_empty() && !h.contains_key(header::CONTENT_TYPE) {
            h.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/octet-stream"),
            );
        }
        RequestTemplate {
            method,
            uri: http::Uri::from(target.path.clone()),
            headers: h,
            body,
            classes: None,
        }
    }

    /// Every request carries `mix`'s header with the value of its class.
    pub fn with_classes(mut self, mix: &crate::ClassMix) -> Self {
        let values = mix.classes.iter().map(|c| c.value.clone()).collect();
        self.classes = Some((mix.header.clone(), values));
        self
    }

    /// The method of every request.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The headers of every request (`Host` and `User-Agent` included).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The request of class `class` (ignored without a class mix).
    fn build(&self, class: u8) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        if let Some((name, values)) = &self.classes
            && let Some(v) = values.get(usize::from(class))
        {
            req.headers_mut().insert(name.clone(), v.clone());
        }
        req
    }
}

/// A worker's connection: opened lazily, kept alive, re-opened after a failure.
pub struct Connection {
    addr: SocketAddr,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Connection {
    /// Not connected yet; the first request connects.
    pub fn new(addr: SocketAddr) -> Self {
        Connection { addr, sender: None }
    }

    async fn connect(&mut self) -> Result<(), RequestError> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| RequestError {
                kind: if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    ErrorKind::ConnectRefused
                } else {
                    ErrorKind::Other
                },
                message: format!("connect {}: {e}", self.addr),
            })?;
        let _ = tcp.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| other(format!("handshake: {e}")))?;
        tokio::spawn(async move {
            // Ends when the sender is dropped or the peer closes; errors surface on the
            // sender side as a failed request.
            let _ = conn.await;
        });
        self.sender = Some(sender);
        Ok(())
    }

    /// Send one request (of traffic class `class`, see [`RequestTemplate::with_classes`])
    /// and read the whole response, all within `timeout`. On any failure the connection
    /// is dropped, so the next request reconnects.
    pub async fn send(
        &mut self,
        template: &RequestTemplate,
        class: u8,
        timeout: Duration,
    ) -> Result<Response<()>, RequestError> {
        match tokio::time::timeout(timeout, self.send_inner(template, class)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => {
                self.sender = None;
                Err(e)
            }
            Err(_) => {
                self.sender = None;
                Err(RequestError {
                    kind: ErrorKind::Timeout,
                    message: format!("no complete response within {timeout:?}"),
                })
            }
        }
    }

    async fn send_inner(
        &mut self,
        template: &RequestTemplate,
        class: u8,
    ) -> Result<Response<()>, RequestError> {
        // A keep-alive connection the server closed while idle is not a failed request:
        // nothing was sent on it yet. Reconnect once in that case.
        if self.sender.as_ref().is_some_and(|s| s.is_closed()) {
            self.sender = None;
        }
        if self.sender.is_none() {
            self.connect().await?;
        }
        let ready = match self.sender.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !ready {
            self.sender = None;
            self.connect().await?;
        }
        let sender = self
            .sender
            .as_mut()
            .ok_or_else(|| other("connection lost".into()))?;
        let resp: Response<Incoming> = sender
            .send_request(template.build(class))
            .await
            .map_err(|e| other(format!("request: {e}")))?;
        let (parts, mut body) = resp.into_parts();
        while let Some(frame) = body.frame().await {
            frame.map_err(|e| other(format!("reading the body: {e}")))?;
        }
        Ok(Response::from_parts(parts, ()))
    }
}

fn other(message: String) -> RequestError {
    RequestError {
        kind: ErrorKind::Other,
        message,
    }
}
