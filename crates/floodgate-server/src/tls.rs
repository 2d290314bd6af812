//! TLS on the doors (rustls with the ring provider): the server's certificate and key from
//! PEM files, and, with a CA bundle, client certificates required and verified (mutual
//! TLS, as Envoy's rate limit service offers on its gRPC).
//!
//! [`load`] reads and checks the files once (at startup and on `--check`); every error
//! names the config field and the file. Each door gets its own [`TlsAcceptor`] (gRPC
//! offers ALPN `h2`, HTTP `http/1.1`, RESP none). An accepted TCP stream is wrapped by
//! [`handshake`], which gives up after [`HANDSHAKE_TIMEOUT`]; a failed handshake (no
//! client certificate under mTLS, an untrusted one, not TLS at all) closes the
//! connection and counts `floodgate_auth_failures_total{reason="tls_handshake"}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::file::TlsFile;
use crate::metrics::Metrics;

/// Longest a client may take to complete the TLS handshake after connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS config that cannot be used. Each names the field of `tls:` and the file.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{field}: cannot read {path}: {source}", path = path.display())]
    Read {
        /// `cert_file`, `key_file` or `client_ca_file`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not the PEM it should be.
    #[error("{field}: {path}: {message}", path = path.display())]
    Pem {
        /// The field.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `tls.doors` names something else than `grpc`, `http`, `resp`.
    #[error("doors: unknown door {0:?} (expected grpc, http or resp)")]
    UnknownDoor(String),
    /// rustls refused the certificate, key or CA bundle.
    #[error("{0}")]
    Rustls(String),
}

/// The three doors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// Envoy's RLS over gRPC (ALPN `h2`).
    Grpc,
    /// HTTP/1.1.
    Http,
    /// The Redis protocol.
    Resp,
}

impl Door {
    fn index(self) -> usize {
        self as usize
    }

    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Door::Grpc => vec![b"h2".to_vec()],
            Door::Http => vec![b"http/1.1".to_vec()],
            Door::Resp => Vec::new(),
        }
    }

    /// `grpc`, `http` or `resp`, as metrics label the doors.
    pub fn label(self) -> &'static str {
        match self {
            Door::Grpc => "grpc",
            Door::Http => "http",
            Door::Resp => "resp",
        }
    }
}

/// One door's TLS server side.
#[derive(Clone)]
pub struct Acceptor {
    inner: TlsAcceptor,
    door: Door,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Acceptor({})", self.door.label())
    }
}

/// TLS as configured: the files (compared across reloads) and one acceptor per door that
/// speaks TLS.
#[derive(Clone)]
pub struct TlsSettings {
    /// The certificate chain file.
    pub cert_file: PathBuf,
    /// The private key file.
    pub key_file: PathBuf,
    /// The client CA bundle (mTLS), if any.
    pub client_ca_file: Option<PathBuf>,
    acceptors: [Option<Acceptor>; 3],
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("client_ca_file", &self.client_ca_file)
            .field(
                "doors",
                &[Door::Grpc, Door::Http, Door::Resp]
                    .into_iter()
                    .filter(|d| self.acceptor(*d).is_some())
                    .map(Door::label)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl PartialEq for TlsSettings {
    fn eq(&self, other: &Self) -> bool {
        let doors = |t: &TlsSettings| t.acceptors.each_ref().map(Option::is_some);
        self.cert_file == other.cert_file
            && self.key_file == other.key_file
            && self.client_ca_file == other.client_ca_file
            && doors(self) == doors(other)
    }
}

impl TlsSettings {
    /// The acceptor of `door`, `None` when that door speaks cleartext.
    pub fn acceptor(&self, door: Door) -> Option<Acceptor> {
        self.acceptors[door.index()].clone()
    }
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        field,
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |message: String| TlsError::Pem {
        field,
        path: path.to_path_buf(),
        message,
    };
    let bytes = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(pem("holds no PEM certificate (BEGIN CERTIFICATE)".into()));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read("key_file", path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        field: "key_file",
        path: path.to_path_buf(),
        message: format!("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
    })
}

/// Read and check the files of `file`; build an acceptor for each door it names.
pub fn load(file: &TlsFile) -> Result<TlsSettings, TlsError> {
    let mut on = [true; 3];
    if let Some(doors) = &file.doors {
        on = [false; 3];
        for d in doors {
            let door = match d.trim().to_ascii_lowercase().as_str() {
                "grpc" => Door::Grpc,
                "http" => Door::Http,
                "resp" => Door::Resp,
                _ => return Err(TlsError::UnknownDoor(d.clone())),
            };
            on[door.index()] = true;
        }
    }
    let certs = certificates("cert_file", &file.cert_file)?;
    let key = private_key(&file.key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match &file.client_ca_file {
        None => None,
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for c in certificates("client_ca_file", path)? {
                roots.add(c).map_err(|e| TlsError::Pem {
                    field: "client_ca_file",
                    path: path.clone(),
                    message: format!("not a usable CA certificate: {e}"),
                })?;
            }
            Some(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| TlsError::Pem {
                        field: "client_ca_file",
                        path: path.clone(),
                        message: e.to_string(),
                    })?,
            )
        }
    };
    let config = |door: Door| -> Result<Acceptor, TlsError> {
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let builder = match &verifier {
            Some(v) => builder.with_client_cert_verifier(v.clone()),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| TlsError::Pem {
                field: "key_file",
                path: file.key_file.clone(),
                message: format!(
                    "does not go with the certificate in {}: {e}",
                    file.cert_file.display()
                ),
            })?;
        config.alpn_protocols = door.alpn();
        Ok(Acceptor {
            inner: TlsAcceptor::from(Arc::new(config)),
            door,
        })
    };
    let mut acceptors: [Option<Acceptor>; 3] = [None, None, None];
    for door in [Door::Grpc, Door::Http, Door::Resp] {
        if on[door.index()] {
            acceptors[door.index()] = Some(config(door)?);
        }
    }
    Ok(TlsSettings {
        cert_file: file.cert_file.clone(),
        key_file: file.key_file.clone(),
        client_ca_file: file.client_ca_file.clone(),
        acceptors,
    })
}

/// Complete the TLS handshake on an accepted `stream` within [`HANDSHAKE_TIMEOUT`];
/// `None` (counted, logged at debug) when it fails or times out.
pub async fn handshake(
    acceptor: &Acceptor,
    stream: TcpStream,
    metrics: &Metrics,
) -> Option<TlsStream<TcpStream>> {
    let (peer, door) = (stream.peer_addr().ok(), acceptor.door);
    let accept = acceptor.inner.accept(stream);
    let error = match tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
        Ok(Ok(tls)) => return Some(tls),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no handshake within {HANDSHAKE_TIMEOUT:?}"),
    };
    tracing::debug!(door = door.label(), ?peer, %error, "TLS handshake failed");
    metrics.auth_failure(door.label(), crate::metrics::AuthFailure::TlsHandshake);
    None
}
