//! TLS for floodgate's listeners and its upstream connections, with rustls and the ring
//! provider:
//!
//! * [`pem`]: certificate chains, private keys and CA bundles read from PEM files, every
//!   error naming the config field and the file;
//! * [`certs`]: the certificates a listener serves ([`CertStore`]), chosen by the name
//!   the client asks for (SNI, matched against each certificate's subject alternative
//!   names), re-read from their files by [`CertStore::reload`] and swapped at once; a
//!   file that fails to load keeps the old certificate;
//! * [`server`]: a listener's `rustls::ServerConfig` ([`ServerTls`]: versions, ALPN,
//!   optional client certificates) and the handshake bounded by a timeout
//!   ([`handshake`]);
//! * [`client`]: connections to an upstream ([`ClientTls`]): the system's roots or a CA
//!   bundle, the server name sent and checked, or verification turned off on request.

pub mod certs;
pub mod client;
pub mod pem;
pub mod server;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use thiserror::Error;

pub use certs::{CertFiles, CertStore};
pub use client::{ClientTls, UpstreamTlsOptions};
pub use server::{HANDSHAKE_TIMEOUT, HandshakeError, ServerTls, TlsVersion, handshake};

/// The TLS material cannot be used. Each error names the config field and the file.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{field}: cannot read {path}: {source}", path = path.display())]
    Read {
        /// `cert_file`, `key_file`, `ca_file`...
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not the PEM it should be, or rustls refused what it holds.
    #[error("{field}: {path}: {message}", path = path.display())]
    Pem {
        /// The field.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused a setting (a protocol version, say).
    #[error("{0}")]
    Rustls(String),
}

/// The process-wide crypto provider floodgate uses: ring.
pub fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}
