//! One client connection of the proxy, whichever path serves it: the proxy's own
//! HTTP/1 path ([`serve`], on [`crate::h1::client`]) until a request it does not take
//! hands the connection, with the bytes already read, to hyper's server
//! ([`serve_hyper`], HTTP/1.1 and h2c); and what a runtime's client connections share
//! ([`Served`]), with hyper's server settings among it.
//!
//! With TLS on the listener, the handshake comes first ([`accept_tls`], bounded by the
//! handshake timeout); then ALPN `h2` goes straight to hyper's HTTP/2, anything else
//! (`http/1.1`, or no ALPN) to the HTTP/1 path, as a cleartext connection would. The
//! connection caps hold from accept (the handshake included), and the head and send
//! timeouts apply as they do in cleartext.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use floodgate_engine::metrics::Metrics;
use floodgate_http::key::PeerAddr;
use floodgate_http::layer::RateLimitService;
use floodgate_net::ConnSlot;
use http::header::CONNECTION;
use http::{HeaderValue, Request, Version};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower_service::Service;

use crate::access_log::{self, AccessLog};
use crate::body::RequestBody;
use crate::client_io::{ClientIo, ClientStream};
use crate::forward::Pools;
use crate::generation::{Generation, Generations};
use crate::h1::client::{Conn, READ_BUF, Rewind, Wait, Waiting};
use crate::h1::request_head::{Head, MAX_HEAD, Parsed, parse};
use crate::head_timeout::{self, HeadWait, LazyTimer, Watched};
use crate::settings::{ListenerTls, ProxyError, ProxySettings};
use crate::sticky::{FleetService, Sticky};
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

/// What a runtime's client connections share: the services of the current generation
/// ([`Served::current`]), the metrics, the head timeout, and hyper's server settings for
/// the connections handed to hyper.
pub(crate) struct Served {
    generations: Arc<Generations>,
    /// This runtime's upstream pools, kept across generations.
    pools: Pools,
    settings: ProxySettings,
    /// The services built for the generation this runtime last saw.
    cache: Mutex<Arc<PerGen>>,
    /// Every generation's metrics share these series ([`Metrics::successor`]).
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) head_timeout: Duration,
    /// [`ProxySettings::send_timeout`].
    pub(crate) send_timeout: Duration,
    pub(crate) builder: auto::Builder<TokioExecutor>,
    /// TLS on the listener, if any.
    pub(crate) tls: Option<ListenerTls>,
    /// The access log, if any.
    pub(crate) access_log: Option<AccessLog>,
}

/// A generation's services, as one runtime serves them.
pub(crate) struct PerGen {
    /// The generation's id.
    pub(crate) id: u64,
    pub(crate) svc: FleetService,
    pub(crate) admission: Arc<Admission>,
}

impl PerGen {
    fn new(
        generation: &Generation,
        pools: &Pools,
        s: &ProxySettings,
    ) -> Result<PerGen, ProxyError> {
        let limiter = &generation.limiter;
        // the generation's routes send to their groups
        let forward = pools.forward(limiter, &generation.route_upstreams)?;
        let svc = FleetService::new(
            RateLimitService::new(forward, limiter.clone()),
            Sticky::new(limiter, s.connect_timeout, s.upstream_timeout)?,
        );
        Ok(PerGen {
            id: generation.id,
            svc,
            admission: Arc::new(Admission::new(limiter)),
        })
    }
}

impl Served {
    pub(crate) fn new(
        pools: Pools,
        generations: Arc<Generations>,
        settings: &ProxySettings,
        access_log: Option<AccessLog>,
    ) -> Result<Arc<Served>, ProxyError> {
        let generation = generations.load();
        let first = PerGen::new(&generation, &pools, settings)?;
        Ok(Arc::new(Served {
            metrics: generation.limiter.metrics().clone(),
            generations,
            pools,
            settings: settings.clone(),
            cache: Mutex::new(Arc::new(first)),
            head_timeout: settings.head_timeout,
            send_timeout: settings.send_timeout,
            builder: server_builder(),
            tls: settings.tls.clone(),
            access_log,
        }))
    }

    /// Whether a newer generation than `id` is current (one atomic load).
    pub(crate) fn stale(&self, id: u64) -> bool {
        self.generations.id() != id
    }

    /// The current generation's services, built on this runtime the first time it is
    /// seen. Services that cannot be built (a fleet node that no longer resolves) leave
    /// the previous generation's serving here, logged once.
    pub(crate) fn current(&self) -> Arc<PerGen> {
        let id = self.generations.id();
        let mut cached = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cached.id != id {
            let generation = self.generations.load();
            *cached = match PerGen::new(&generation, &self.pools, &self.settings) {
                Ok(p) => Arc::new(p),
                Err(e) => {
                    tracing::error!(error = %e, generation = generation.id, "the reloaded configuration cannot be served here; the previous one keeps serving");
                    Arc::new(PerGen {
                        id: generation.id,
                        svc: cached.svc.clone(),
                        admission: cached.admission.clone(),
                    })
                }
            };
        }
        cached.clone()
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

/// The TLS handshake of a client connection within the handshake timeout, and whether
/// the client chose HTTP/2 (ALPN `h2`). `None` (logged at debug; a timeout counted in
/// `floodgate_client_timeouts_total{kind="handshake"}`) when it failed.
async fn accept_tls(
    tls: &ListenerTls,
    stream: TcpStream,
    peer: SocketAddr,
    metrics: &Metrics,
) -> Option<(ClientStream, bool)> {
    use floodgate_net::tls::{HandshakeError, handshake};
    match handshake(tls.server.acceptor(), stream, tls.handshake_timeout).await {
        Ok(s) => {
            let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
            Some((ClientStream::Tls(Box::new(s)), h2))
        }
        Err(e) => {
            if matches!(e, HandshakeError::TimedOut(_)) {
                metrics.client_timeout("handshake");
            }
            tracing::debug!(%peer, error = %e, "TLS handshake failed: connection closed");
            None
        }
    }
}

/// Serve `stream` until the client closes it, it times out waiting for a head, shutdown
/// finds it idle, or it is handed to hyper (then until hyper is done with it). On a TLS
/// listener, the handshake comes first.
pub(crate) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    served: Arc<Served>,
    shutdown: watch::Receiver<bool>,
    slot: ConnSlot,
) {
    // the connection's place under the caps, given back when it ends
    let _slot = slot;
    let stream = match &served.tls {
        None => ClientStream::Plain(stream),
        Some(tls) => match accept_tls(tls, stream, peer, &served.metrics).await {
            None => return,
            Some((io, true)) => {
                let io = ClientIo::new(io, served.send_timeout, served.metrics.clone());
                return serve_hyper(&served, io, peer, shutdown).await;
            }
            Some((io, false)) => io,
        },
    };
    let mut conn = Conn {
        stream: ClientIo::new(stream, served.send_timeout, served.metrics.clone()),
        buf: BytesMut::with_capacity(READ_BUF),
        out: Vec::with_capacity(READ_BUF),
        shutdown: shutdown.clone(),
    };
    let mut generation = served.current();
    let mut svc = generation.svc.clone();
    let timeout = served.head_timeout;
    // resolves when shutdown starts (or the proxy is gone); polled only to register
    let stop = pin!(stopped(shutdown));
    let sleep = pin!(tokio::time::sleep(timeout));
    let mut waiting = Waiting {
        timer: LazyTimer::new(sleep),
        stop,
        stop_armed: false,
        idle_since: tokio::time::Instant::now(),
        timeout,
    };
    let mut head = Head::default();
    loop {
        match parse(&conn.buf, &mut head) {
            Parsed::Complete => {}
            Parsed::Partial if conn.buf.len() <= MAX_HEAD => match waiting.read(&mut conn).await {
                Wait::Read => continue,
                Wait::Closed => return,
                Wait::TimedOut => {
                    tracing::debug!(%peer, ?timeout, "no request head within the head timeout: connection closed");
                    return;
                }
                Wait::Stop => return,
            },
            Parsed::Partial | Parsed::NotHere => {
                return hand_over(conn, peer, &served).await;
            }
        };
        let Some((mut req, mut meta)) = head.take_request(&mut conn.buf, peer) else {
            return hand_over(conn, peer, &served).await;
        };
        let start = std::time::Instant::now();
        let logged = access_log::begin(served.access_log.as_ref(), &req, peer.ip(), start);
        if served.stale(generation.id) {
            // a reload: this request and the next ones are served by the new generation
            generation = served.current();
            svc = generation.svc.clone();
        }
        let resp = match generation.admission.admit(&mut req) {
            Err(refused) => {
                // the connection ends with a refusal
                meta.keep_alive = false;
                refused.response()
            }
            Ok(()) => match svc.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            },
        };
        // one clock reading for the metric, the Date field and the idle clock
        let answered = std::time::Instant::now();
        served
            .metrics
            .proxy_seconds
            .observe(answered.saturating_duration_since(start));
        let resp = access_log::respond(logged, resp);
        match conn.respond(resp, &meta, answered).await {
            Ok(true) => waiting.idle_since = tokio::time::Instant::from_std(answered),
            Ok(false) => {
                let _ = conn.stream.shutdown().await;
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, %peer, "client connection failed");
                return;
            }
        }
    }
}

/// Hand the connection, with what has been read of it, to hyper.
async fn hand_over(conn: Conn, peer: SocketAddr, served: &Arc<Served>) {
    let io = Rewind {
        prefix: conn.buf.freeze(),
        io: conn.stream,
    };
    serve_hyper(served, io, peer, conn.shutdown).await;
}

/// Serve a client connection with hyper (HTTP/1.1 and h2c), until it ends, it has
/// waited `head_timeout` for a request head ([`head_timeout`]; an HTTP/2 client then
/// gets a GOAWAY), or shutdown has let its in-flight requests finish.
pub(crate) async fn serve_hyper<I>(
    served: &Arc<Served>,
    io: I,
    peer: SocketAddr,
    shutdown: tokio::sync::watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let wait = HeadWait::new();
    let watch = wait.clone();
    let idle = wait.clone();
    let metrics = served.metrics.clone();
    let shared = served.clone();
    let hsvc = hyper::service::service_fn(move |req: Request<Incoming>| {
        // each request on the generation current when it arrives
        let generation = shared.current();
        let admission = &generation.admission;
        let in_flight = watch.start();
        let start = Instant::now();
        let logged = access_log::begin(shared.access_log.as_ref(), &req, peer.ip(), start);
        // a body is read on after its answer (crate::drain)
        let version = req.version();
        let mut req = req.map(|b| RequestBody::from_hyper(b, version));
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
        let mut svc = generation.svc.clone();
        let metrics = metrics.clone();
        async move {
            let r = match refused {
                Some(resp) => Ok(resp),
                None => svc.call(req).await,
            };
            metrics.proxy_seconds.observe(start.elapsed());
            r.map(|resp| {
                access_log::respond(logged, resp).map(|body| Watched::new(body, in_flight))
            })
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
        // a head hyper's parser refused (it has answered 400, 414 or 431) is counted,
        // and logged as a request
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_parse()
        {
            served.metrics.invalid("head");
            if let (Some(log), Some(status)) = (&served.access_log, refused_status(h)) {
                log.refused(peer.ip(), status, idle.waiting_for());
            }
        }
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}

/// The status hyper's HTTP/1 server answered a request head its parser refused with
/// (its automatic response: 414 for a target too long, 431 for a head too large, 400
/// for a malformed method, target, version or field), from the error the connection
/// ended with; `None` when it answered nothing (an internal error).
fn refused_status(e: &hyper::Error) -> Option<u16> {
    // hyper tells these apart only by their text ("URI too long", "internal error ...")
    let text = e.to_string();
    if e.is_parse_too_large() {
        Some(if text.starts_with("URI too long") {
            414
        } else {
            431
        })
    } else if text.starts_with("internal error") || text.contains("HTTP2 preface") {
        None
    } else {
        Some(400)
    }
}
