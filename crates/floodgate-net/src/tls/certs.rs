//! The certificates a TLS listener serves ([`CertStore`]): one or more chains with their
//! keys, each read from a certificate file and a key file ([`CertFiles`]).
//!
//! Choice by SNI: a client that names a host gets the first certificate valid for that
//! name (its subject alternative names, wildcards included, as a client checks them); a
//! client that names none, or a name no certificate covers, gets the first certificate.
//!
//! Reload: [`CertStore::reload`] reads every file again and, when all load, swaps the
//! whole set at once (a handshake sees the old set or the new one, never a mix); when
//! one fails, the old set stays and the error is returned (and logged by
//! [`CertStore::reload_every`]). Connections already open keep the certificate they
//! were given; new ones get the new one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::ServerName;

use super::{TlsError, pem};

/// One certificate chain file (PEM, leaf first) and its private key file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate chain.
    pub cert_file: PathBuf,
    /// The private key.
    pub key_file: PathBuf,
}

/// One loaded certificate and the DNS names it is valid for.
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    names: Vec<String>,
}

/// A listener's certificates, chosen by SNI and reloadable (see the module's doc).
/// Invariant: the loaded set is never empty, and holds one certificate per
/// [`CertFiles`], in their order.
#[derive(Debug)]
pub struct CertStore {
    files: Vec<CertFiles>,
    loaded: ArcSwap<Vec<Loaded>>,
}

fn load_all(files: &[CertFiles]) -> Result<Vec<Loaded>, TlsError> {
    let provider = super::provider();
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let key = pem::certified_key(&f.cert_file, &f.key_file, &provider)?;
        let names = match key.end_entity_cert() {
            Ok(der) => webpki::EndEntityCert::try_from(der)
                .map(|c| c.valid_dns_names().map(str::to_ascii_lowercase).collect())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        out.push(Loaded { key, names });
    }
    Ok(out)
}

impl CertStore {
    /// Read and check every certificate and key of `files` (at least one).
    pub fn load(files: Vec<CertFiles>) -> Result<Arc<CertStore>, TlsError> {
        if files.is_empty() {
            return Err(TlsError::Rustls(
                "no certificate: give cert_file and key_file".into(),
            ));
        }
        let loaded = load_all(&files)?;
        Ok(Arc::new(CertStore {
            files,
            loaded: ArcSwap::from_pointee(loaded),
        }))
    }

    /// The files, in order.
    pub fn files(&self) -> &[CertFiles] {
        &self.files
    }

    /// The DNS names of each certificate (from its subject alternative names), in the
    /// order of the files.
    pub fn names(&self) -> Vec<Vec<String>> {
        self.loaded.load().iter().map(|l| l.names.clone()).collect()
    }

    /// Read every file again; `Ok(true)` when a certificate or key changed and the new
    /// set is served from now on, `Ok(false)` when nothing changed, `Err` (the old set
    /// kept) when a file fails to load.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let new = load_all(&self.files)?;
        let old = self.loaded.load();
        let same = old.len() == new.len()
            && old.iter().zip(&new).all(|(a, b)| {
                a.key.cert == b.key.cert && a.key.key.public_key() == b.key.key.public_key()
            });
        if same {
            return Ok(false);
        }
        self.loaded.store(Arc::new(new));
        Ok(true)
    }

    /// Reload every `interval` (at least 1 s) on the current runtime, logging a change
    /// at info and a failure at error (the old certificates kept). The task ends when
    /// the store is dropped.
    pub fn reload_every(self: &Arc<Self>, interval: Duration) {
        let store = Arc::downgrade(self);
        let interval = interval.max(Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(store) = store.upgrade() else { return };
                match store.reload() {
                    Ok(true) => {
                        tracing::info!(names = ?store.names(), "TLS certificates reloaded: new connections get the new ones")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "TLS certificates not reloaded: the previous ones are still served")
                    }
                }
            }
        });
    }

    /// The certificate for a client asking for `sni` (see the module's doc).
    pub fn choose(&self, sni: Option<&str>) -> Arc<CertifiedKey> {
        let loaded = self.loaded.load();
        let wanted = sni.and_then(|n| ServerName::try_from(n).ok());
        if let Some(name) = wanted
            && loaded.len() > 1
        {
            for l in loaded.iter() {
                let valid = l.key.end_entity_cert().ok().is_some_and(|der| {
                    webpki::EndEntityCert::try_from(der)
                        .is_ok_and(|c| c.verify_is_valid_for_subject_name(&name).is_ok())
                });
                if valid {
                    return l.key.clone();
                }
            }
        }
        // invariant: never empty
        loaded[0].key.clone()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.choose(hello.server_name()))
    }
}
