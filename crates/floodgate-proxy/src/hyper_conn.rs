//! A client connection served by hyper's server (HTTP/1.1 and h2c), and what a runtime's
//! client connections share ([`Served`]), whichever path serves them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_engine::metrics::Metrics;
use floodgate_http::key::PeerAddr;
use floodgate_http::limiter::RateLimiter;
use http::header::CONNECTION;
use http::{HeaderValue, Request, Version};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::watch;
use tower_service::Service;

use crate::body::RequestBody;
use crate::head_timeout::{self, HeadWait, Watched};
use crate::settings::ProxySettings;
use crate::sticky::FleetService;
use crate::target::Admission;

/// The HTTP/1.1 + HTTP/2 (h2c) server settings of the proxy's listener. No header-read
/// timeout here: [`head_timeout`] closes connections that wait too long for a head.
pub(crate) fn server_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // with a timer, hyper would arm its 30 s default header-read timeout per request
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None::<Duration>);
    builder.http2().timer(TokioTimer::new());
    builder
}

/// What a runtime's client connections share: the service, the admission check, the
/// metrics, the head timeout, and hyper's server settings for the connections handed to
/// hyper.
pub(crate) struct Served {
    pub(crate) svc: FleetService,
    pub(crate) admission: Arc<Admission>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) head_timeout: Duration,
    /// [`ProxySettings::send_timeout`].
    pub(crate) send_timeout: Duration,
    builder: auto::Builder<TokioExecutor>,
}

impl Served {
    pub(crate) fn new(
        svc: FleetService,
        limiter: &RateLimiter,
        settings: &ProxySettings,
    ) -> Arc<Served> {
        Arc::new(Served {
            svc,
            admission: Arc::new(Admission::new(limiter)),
            metrics: limiter.metrics().clone(),
            head_timeout: settings.head_timeout,
            send_timeout: settings.send_timeout,
            builder: server_builder(),
        })
    }
}

/// Resolves once shutdown has started, or the proxy's sender is gone.
pub(crate) async fn stopped(mut shutdown: watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Serve a client connection with hyper (HTTP/1.1 and h2c), until it ends, it has
/// waited `head_timeout` for a request head ([`head_timeout`]; an HTTP/2 client then
/// gets a GOAWAY), or shutdown has let its in-flight requests finish.
pub(crate) async fn serve_hyper<I>(
    served: &Served,
    io: I,
    peer: SocketAddr,
    shutdown: tokio::sync::watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let wait = HeadWait::new();
    let watch = wait.clone();
    let svc = served.svc.clone();
    let metrics = served.metrics.clone();
    let admission = served.admission.clone();
    let hsvc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let in_flight = watch.start();
        let mut req = req.map(RequestBody::Incoming);
        req.extensions_mut().insert(PeerAddr(peer));
        let refused = admission.admit(&mut req).err().map(|r| {
            let mut resp = r.response();
            // an HTTP/1 connection ends with a refusal (its body is not read)
            if req.version() < Version::HTTP_2 {
                resp.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            resp
        });
        let mut svc = svc.clone();
        let metrics = metrics.clone();
        let start = Instant::now();
        async move {
            let r = match refused {
                Some(resp) => Ok(resp),
                None => svc.call(req).await,
            };
            metrics.proxy_seconds.observe(start.elapsed());
            r.map(|resp| resp.map(|body| Watched::new(body, in_flight)))
        }
    });
    let conn = served.builder.serve_connection(TokioIo::new(io), hsvc);
    let mut conn = std::pin::pin!(conn);
    // Some(Some(end)): the connection ended; Some(None): shutdown; None: head timeout
    let first = head_timeout::run(
        async {
            tokio::select! {
                r = conn.as_mut() => Some(r),
                () = stopped(shutdown) => None,
            }
        },
        wait,
        served.head_timeout,
    )
    .await;
    let ended = match first {
        Some(Some(r)) => r,
        // in-flight requests finish (the drain's grace bounds them); HTTP/2 gets a GOAWAY
        Some(None) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        None => {
            tracing::debug!(%peer, timeout = ?served.head_timeout, "no request head within the head timeout: connection closed");
            // idle: an HTTP/2 client is told with a GOAWAY, an HTTP/1 connection closes;
            // a head still trickling in (slowloris) is cut after a short grace
            conn.as_mut().graceful_shutdown();
            let grace = served.head_timeout.min(Duration::from_secs(1));
            match tokio::time::timeout(grace, conn).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = ended {
        // a head hyper's parser refused (it has answered 400 or 431) is counted
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_parse() || h.is_parse_too_large())
        {
            served.metrics.invalid("head");
        }
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}
