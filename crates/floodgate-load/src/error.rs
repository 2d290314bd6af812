//! [`LoadError`]: everything that can stop a load run before or while it starts.
//!
//! Failures of individual requests (refused, timed out, reset) are not errors of the run:
//! they are counted in the [`crate::Report`] by kind.

use std::net::SocketAddr;
use std::time::Duration;

/// Why a load run could not be set up or started. Every variant names the offending input.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The URL could not be parsed, or lacks a host.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL's scheme is not `http`.
    #[error(
        "unsupported scheme {scheme:?} in {url:?}: floodgate load speaks plain HTTP/1.1 (http://)"
    )]
    UnsupportedScheme {
        /// The URL as given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// The host resolves to an address outside the loopback range and was not named with
    /// `allow_hosts`.
    #[error(
        "{host} ({addr}) is not a loopback address; floodgate load only sends to 127.0.0.0/8 \
         and ::1 unless you name the host explicitly (--allow-host {host})"
    )]
    TargetNotAllowed {
        /// The host from the URL.
        host: String,
        /// The address it resolved to.
        addr: std::net::IpAddr,
    },
    /// The host name did not resolve.
    #[error("cannot resolve {host:?}: {source}")]
    Resolve {
        /// The host from the URL.
        host: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// No address of the target accepted a TCP connection before the run.
    #[error("cannot connect to {addrs}: {source} (is the server running?)", addrs = fmt_addrs(.addrs))]
    Unreachable {
        /// Every address tried.
        addrs: Vec<SocketAddr>,
        /// The last connect error.
        #[source]
        source: std::io::Error,
    },
    /// A numeric setting is out of range (zero, negative, NaN, too large).
    #[error("invalid {what}: {reason}")]
    OutOfRange {
        /// The setting, as the CLI names it (e.g. `rate (-q)`).
        what: &'static str,
        /// What is wrong, with the value.
        reason: String,
    },
    /// Two settings contradict each other.
    #[error("conflicting settings: {0}")]
    Conflict(String),
    /// A header given with `-H` is not `Name: value`, or its name or value is invalid.
    #[error("invalid header {header:?}: {reason}")]
    InvalidHeader {
        /// The header as given.
        header: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A class mix (`--class-header`, `--class-mix`) that cannot be used.
    #[error("invalid class mix {mix:?}: {reason}")]
    InvalidClassMix {
        /// The mix as given.
        mix: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The method given with `-m` is not a valid HTTP method token.
    #[error("invalid method {0:?}")]
    InvalidMethod(String),
    /// The async runtime could not be created.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A setting of the polite client (`--polite`) that floodgate-client rejects.
    #[error("invalid polite client setting: {0}")]
    Polite(#[from] floodgate_client::ConfigError),
    /// Writing the SVG plot failed.
    #[error("cannot draw the plot: {0}")]
    Plot(String),
}

fn fmt_addrs(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The caps every run is held to, so that no run is unbounded by mistake.
pub mod caps {
    use super::Duration;
    /// Longest `-z`: one hour.
    pub const MAX_DURATION: Duration = Duration::from_secs(3600);
    /// Largest `-n`: ten million requests.
    pub const MAX_COUNT: u64 = 10_000_000;
    /// Most concurrent connections (`-c`).
    pub const MAX_CONCURRENCY: usize = 10_000;
    /// Highest `-q`, requests per second.
    pub const MAX_RATE: f64 = 10_000_000.0;
    /// Longest per-request timeout.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
    /// Shortest per-request timeout and timeline bucket.
    pub const MIN_TICK: Duration = Duration::from_millis(1);
}
