//! TLS on the doors (rustls with the ring provider): the server's certificate and key from
//! PEM files, and, with a CA bundle, client certificates required and verified (mutual
//! TLS, as Envoy's rate limit service offers on its gRPC).
//!
//! [`load`] reads and checks the files once (at startup and on `--check`), with
//! floodgate-net's TLS ([`floodgate_net::tls`], shared with `floodgate proxy`); every
//! error names the config field and the file. Each door gets its own acceptor (gRPC
//! offers ALPN `h2`, HTTP `http/1.1`, RESP none). An accepted TCP stream is wrapped by
//! [`handshake`], which gives up after [`HANDSHAKE_TIMEOUT`]; a failed handshake (no
//! client certificate under mTLS, an untrusted one, not TLS at all) closes the
//! connection and counts `floodgate_auth_failures_total{reason="tls_handshake"}`.

use std::path::PathBuf;

use floodgate_net::tls::{CertFiles, CertStore, ServerTls, TlsVersion};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::file::TlsFile;
use crate::metrics::Metrics;

pub use floodgate_net::tls::HANDSHAKE_TIMEOUT;

/// A TLS config that cannot be used. Each names the field of `tls:` and the file.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file cannot be read or used (floodgate-net's PEM loading names field and file).
    #[error(transparent)]
    Files(#[from] floodgate_net::tls::TlsError),
    /// `tls.doors` names something else than `grpc`, `http`, `resp`.
    #[error("doors: unknown door {0:?} (expected grpc, http or resp)")]
    UnknownDoor(String),
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

    fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            Door::Grpc => &[b"h2"],
            Door::Http => &[b"http/1.1"],
            Door::Resp => &[],
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
    inner: ServerTls,
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
    // one certificate store for every door: loaded (and checked) once
    let certs = CertStore::load(vec![CertFiles {
        cert_file: file.cert_file.clone(),
        key_file: file.key_file.clone(),
    }])?;
    let config = |door: Door| -> Result<Acceptor, TlsError> {
        let inner = ServerTls::new(
            certs.clone(),
            TlsVersion::V1_2,
            door.alpn(),
            file.client_ca_file.as_deref(),
        )?;
        Ok(Acceptor { inner, door })
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

/// Complete the TLS handshake on an accepted `stream` within [`HANDSHAKE_TIMEOUT`]
/// ([`floodgate_net::tls::handshake`]); `None` (counted, logged at debug) when it fails
/// or times out.
pub async fn handshake(
    acceptor: &Acceptor,
    stream: TcpStream,
    metrics: &Metrics,
) -> Option<TlsStream<TcpStream>> {
    let (peer, door) = (stream.peer_addr().ok(), acceptor.door);
    let error =
        match floodgate_net::tls::handshake(acceptor.inner.acceptor(), stream, HANDSHAKE_TIMEOUT)
            .await
        {
            Ok(tls) => return Some(tls),
            Err(e) => e.to_string(),
        };
    tracing::debug!(door = door.label(), ?peer, %error, "TLS handshake failed");
    metrics.auth_failure(door.label(), crate::metrics::AuthFailure::TlsHandshake);
    None
}
