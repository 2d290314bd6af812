//! What a proxy is told ([`ProxySettings`]) and why it could not start ([`ProxyError`]).

use std::net::SocketAddr;
use std::time::Duration;

use floodgate_engine::admin::AllowedHosts;
use floodgate_net::tls::{ServerTls, UpstreamTlsOptions};
use http::Uri;

use crate::upstreams::GroupSpec;

/// Proxy settings (the non-limiter part of the config).
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// TLS on the listener (ALPN `h2` and `http/1.1`); `None`: cleartext (HTTP/1.1 and
    /// h2c).
    pub tls: Option<ListenerTls>,
    /// How an `https://` upstream is verified (ignored for `http://`).
    pub upstream_tls: UpstreamTlsOptions,
    /// The backend, `http://host:port` or `https://host:port`: the upstream group
    /// `default`, of this one server
    /// (none when it has no host: then `upstream_groups` must name one `default`, or
    /// every route an upstream).
    pub upstream: Uri,
    /// Named upstream groups (`[upstreams.NAME]`), besides `upstream`.
    pub upstream_groups: Vec<GroupSpec>,
    /// The upstream group each route sends to, in the limiter's route order (`None`:
    /// the group `default`).
    pub route_upstreams: Vec<Option<String>>,
    /// Admin listener for `/metrics`, `/healthz` and the admin API and page under
    /// `/admin`.
    pub admin: Option<SocketAddr>,
    /// `Host` names the admin API and page answer besides loopback ones (421 for any
    /// other); `/metrics` and `/healthz` answer any.
    pub admin_allowed_hosts: AllowedHosts,
    /// Time allowed for the upstream's response head (504 after).
    pub upstream_timeout: Duration,
    /// Time allowed to connect to the upstream (502 after).
    pub connect_timeout: Duration,
    /// Longest drain at shutdown.
    pub shutdown_grace: Duration,
    /// h2c prior knowledge to the upstream.
    pub upstream_http2: bool,
    /// Worker threads, each with its own single-threaded runtime and its own upstream
    /// connection pool; accepted connections are dealt to them in turn, and each stays
    /// on its worker (no work stealing, no cross-thread wakeups per request). 0: serve
    /// on the runtime that calls [`Proxy::run`](crate::proxy::Proxy::run).
    pub workers: usize,
    /// How long a client connection may wait for a request head with no request in
    /// flight (idle between requests, or a head arriving too slowly) before it is
    /// closed.
    pub head_timeout: Duration,
    /// How long a write towards a client may make no progress (the client not reading
    /// its response) before the connection is closed, and with it the upstream
    /// exchange it was reading from.
    pub send_timeout: Duration,
    /// How long a client's request body may send nothing before the request is answered
    /// 408 and the connection closed (the upstream exchange is given up).
    pub body_timeout: Duration,
    /// Most client connections open at once; beyond, new ones are closed at accept.
    pub max_connections: usize,
    /// Most client connections open at once from one client address.
    pub max_connections_per_client: usize,
    /// Most idle upstream connections kept, per worker.
    pub upstream_max_idle: usize,
    /// The access log (`[log] access_log`); `None`: none.
    pub access_log: Option<crate::access_log::AccessLogConfig>,
}

impl ProxySettings {
    /// Defaults around an upstream: listen 127.0.0.1:8080, 30 s upstream timeout, 5 s
    /// connect timeout, 30 s grace, HTTP/1.1 upstream, no admin listener; 30 s head,
    /// send and body timeouts; at most 16 384 client connections, 1 024 per client
    /// address, 1 024 idle upstream connections per worker.
    pub fn new(upstream: Uri) -> Self {
        ProxySettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            upstream,
            tls: None,
            upstream_tls: UpstreamTlsOptions::default(),
            upstream_groups: Vec::new(),
            route_upstreams: Vec::new(),
            admin: None,
            admin_allowed_hosts: AllowedHosts::loopback(),
            upstream_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            upstream_http2: false,
            workers: 0,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
            send_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            upstream_max_idle: DEFAULT_UPSTREAM_MAX_IDLE,
            access_log: None,
        }
    }
}

/// TLS on the proxy's listener: the certificates and versions ([`ServerTls`]), how
/// often the certificate files are read again, and how long a handshake may take.
#[derive(Debug, Clone)]
pub struct ListenerTls {
    /// The rustls side, certificates included.
    pub server: ServerTls,
    /// How often the certificate and key files are read again (a changed one is served
    /// to new connections; one that fails to load keeps the old). `None`: never.
    pub reload_interval: Option<Duration>,
    /// Longest a client may take to complete the handshake after connecting, else the
    /// connection is closed (counted in `floodgate_client_timeouts_total{kind="handshake"}`).
    pub handshake_timeout: Duration,
}

impl ListenerTls {
    /// TLS on `certs`, from `min` up to 1.3, offering ALPN `h2` then `http/1.1`.
    pub fn new(
        certs: std::sync::Arc<floodgate_net::tls::CertStore>,
        min: floodgate_net::tls::TlsVersion,
        reload_interval: Option<Duration>,
        handshake_timeout: Duration,
    ) -> Result<ListenerTls, floodgate_net::tls::TlsError> {
        Ok(ListenerTls {
            server: ServerTls::new(certs, min, &[b"h2", b"http/1.1"], None)?,
            reload_interval,
            handshake_timeout,
        })
    }
}

/// The default [`ListenerTls::reload_interval`]: a minute.
pub const DEFAULT_TLS_RELOAD: Duration = Duration::from_secs(60);

/// The default [`ProxySettings::head_timeout`] (hyper's header-read timeout before).
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The default [`ProxySettings::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// The default [`ProxySettings::max_connections_per_client`].
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1_024;
/// The default [`ProxySettings::upstream_max_idle`].
pub const DEFAULT_UPSTREAM_MAX_IDLE: usize = 1_024;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The upstream URI is unusable.
    #[error("upstream {0}")]
    Upstream(String),
    /// The fleet's nodes are unusable (a name that does not resolve, say).
    #[error("fleet: {0}")]
    Fleet(String),
    /// The upstream's TLS settings are unusable (a CA file that does not load, no
    /// system roots...).
    #[error("upstream_tls: {0}")]
    UpstreamTls(floodgate_net::tls::TlsError),
    /// A worker thread or its runtime could not be started.
    #[error("cannot start worker thread: {0}")]
    Worker(std::io::Error),
    /// The access log's file could not be opened (or its writer thread started).
    #[error("access_log {target}: {source}")]
    AccessLog {
        /// The file (or `stdout`).
        target: String,
        /// Why.
        source: std::io::Error,
    },
}
