//! PEM files read into rustls' types. Every error is a [`TlsError`] naming the config
//! field (`cert_file`, `key_file`, `ca_file`...) and the file.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        field,
        path: path.to_path_buf(),
        source,
    })
}

fn pem_error(field: &'static str, path: &Path, message: String) -> TlsError {
    TlsError::Pem {
        field,
        path: path.to_path_buf(),
        message,
    }
}

/// The certificates of a PEM file (a chain, leaf first; or a CA bundle): at least one.
pub fn certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(field, path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error(
            field,
            path,
            "holds no PEM certificate (BEGIN CERTIFICATE)".into(),
        ));
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(field: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(field, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        pem_error(
            field,
            path,
            format!("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })
}

/// A certificate chain and its private key, checked to go together (the key's public
/// half is the leaf certificate's) and the leaf to be a parsable X.509 end-entity
/// certificate.
pub fn certified_key(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs = certificates("cert_file", cert_file)?;
    webpki::EndEntityCert::try_from(&certs[0]).map_err(|e| {
        pem_error(
            "cert_file",
            cert_file,
            format!("the first certificate is not a usable X.509 certificate: {e}"),
        )
    })?;
    let key = private_key("key_file", key_file)?;
    let certified = CertifiedKey::from_der(certs, key, provider).map_err(|e| {
        pem_error(
            "key_file",
            key_file,
            format!(
                "does not go with the certificate in {}: {e}",
                cert_file.display()
            ),
        )
    })?;
    Ok(Arc::new(certified))
}

/// A root store of every certificate in the CA bundle `path`.
pub fn root_store(field: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in certificates(field, path)? {
        roots
            .add(c)
            .map_err(|e| pem_error(field, path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}
