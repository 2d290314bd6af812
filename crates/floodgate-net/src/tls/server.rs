//! A TLS listener's rustls configuration ([`ServerTls`]) and the handshake of an accepted
//! connection, bounded by a timeout ([`handshake`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::{CertStore, TlsError, pem};

/// The default longest time a client may take to complete the TLS handshake after
/// connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The oldest TLS version a listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3 (the default).
    #[default]
    V1_2,
    /// TLS 1.3 only.
    V1_3,
}

impl std::str::FromStr for TlsVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "1.2" => Ok(TlsVersion::V1_2),
            "1.3" => Ok(TlsVersion::V1_3),
            other => Err(format!(
                "unknown TLS version {other:?} (expected \"1.2\" or \"1.3\")"
            )),
        }
    }
}

impl TlsVersion {
    fn versions(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static BOTH: [&rustls::SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static ONLY_13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            TlsVersion::V1_2 => &BOTH,
            TlsVersion::V1_3 => &ONLY_13,
        }
    }
}

/// A listener's TLS: its certificates ([`CertStore`], shared with whoever reloads
/// them) and the acceptor built on them. Cloning shares both.
#[derive(Clone)]
pub struct ServerTls {
    certs: Arc<CertStore>,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("certs", &self.certs.files())
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// TLS on `certs`, from `min` up to 1.3, offering the ALPN protocols `alpn` (most
    /// preferred first; none: no ALPN); with `client_ca_file`, a client certificate
    /// signed by one of its CAs is required (mutual TLS).
    pub fn new(
        certs: Arc<CertStore>,
        min: TlsVersion,
        alpn: &[&[u8]],
        client_ca_file: Option<&Path>,
    ) -> Result<ServerTls, TlsError> {
        let provider = super::provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(min.versions())
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let builder = match client_ca_file {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let roots = pem::root_store("client_ca_file", path)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| TlsError::Pem {
                            field: "client_ca_file",
                            path: path.to_path_buf(),
                            message: e.to_string(),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(certs.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(ServerTls {
            certs,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The certificates served (to reload them).
    pub fn certs(&self) -> &Arc<CertStore> {
        &self.certs
    }

    /// The acceptor.
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

/// Why a TLS handshake did not complete.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// Not done within the timeout.
    #[error("no TLS handshake within {0:?}")]
    TimedOut(Duration),
    /// The client is not speaking TLS, offers nothing in common, refused the
    /// certificate, closed...
    #[error("TLS handshake failed: {0}")]
    Failed(std::io::Error),
}

/// Complete the TLS handshake on an accepted `stream` within `timeout`.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, HandshakeError> {
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(HandshakeError::Failed(e)),
        Err(_) => Err(HandshakeError::TimedOut(timeout)),
    }
}
