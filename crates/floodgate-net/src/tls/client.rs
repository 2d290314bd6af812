//! TLS to an upstream ([`ClientTls`]): the server's certificate verified against the
//! system's roots (read with `rustls-native-certs`: the operating system's store, which
//! its package updates and administrators' own CAs keep current, where a bundled list
//! would age with the binary) or against a CA bundle; the host name sent as SNI and
//! checked against the certificate, or a configured name instead; verification turned
//! off only on an explicit request, which logs a warning every time it is built.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{TlsError, pem};

/// How connections to an upstream are verified (the `[upstream_tls]` table).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTlsOptions {
    /// The CA bundle (PEM) the upstream's certificate must chain to; `None`: the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// The name sent as SNI and checked against the certificate; `None`: the upstream
    /// URL's host.
    pub server_name: Option<String>,
    /// Accept any certificate (the handshake is still encrypted, but anyone on the path
    /// can pose as the upstream).
    pub insecure_skip_verify: bool,
}

/// Connects TLS to an upstream. Cloning shares it.
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
    insecure: bool,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// A connector as `options` say, offering the ALPN protocols `alpn` (none: no
    /// ALPN). With `insecure_skip_verify`, logs a warning.
    pub fn new(options: &UpstreamTlsOptions, alpn: &[&[u8]]) -> Result<ClientTls, TlsError> {
        let provider = super::provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let mut config = if options.insecure_skip_verify {
            tracing::warn!(
                "upstream_tls.insecure_skip_verify = true: the upstream's certificate is NOT verified; anyone on the network path can pose as the upstream"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
                .with_no_client_auth()
        } else {
            let roots = match &options.ca_file {
                Some(path) => pem::root_store("ca_file", path)?,
                None => system_roots()?,
            };
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let server_name = match &options.server_name {
            None => None,
            Some(n) => Some(ServerName::try_from(n.clone()).map_err(|e| {
                TlsError::Rustls(format!("server_name {n:?} is not a DNS name or IP: {e}"))
            })?),
        };
        Ok(ClientTls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            insecure: options.insecure_skip_verify,
        })
    }

    /// Whether verification is off.
    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// The handshake over `tcp`, to the upstream whose URL names `host` (the SNI and
    /// the name checked, unless a server name is configured). A refused certificate
    /// (expired, for another name, from an unknown CA) fails with rustls' reason.
    pub async fn connect(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => {
                // an IPv6 literal comes bracketed from the URL
                let host = host.trim_start_matches('[').trim_end_matches(']');
                ServerName::try_from(host.to_string()).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{host:?} is not a valid TLS server name: {e}"),
                    )
                })?
            }
        };
        self.connector.connect(name, tcp).await
    }
}

/// The operating system's trusted roots; an error when it has none usable.
fn system_roots() -> Result<rustls::RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(String::new, |e| format!(": {e}"));
        return Err(TlsError::Rustls(format!(
            "upstream_tls: no system CA certificates found{why} (install the ca-certificates package, or set upstream_tls.ca_file)"
        )));
    }
    Ok(roots)
}

/// Accepts any server certificate; the handshake's signatures are still checked (so
/// the session is with whoever holds the presented key).
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
