//! The certificate store on real PEM files made by rcgen: choice by SNI, reload, and the
//! errors naming field and file.

use std::path::{Path, PathBuf};

use rcgen::{CertificateParams, DnType, KeyPair};

use super::{CertFiles, CertStore, TlsError};

/// A self-signed certificate for `names` (the first is the CN), written to `stem.pem`
/// and `stem.key` in `dir`.
fn cert(dir: &Path, stem: &str, names: &[&str]) -> CertFiles {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, names[0]);
    let c = p.self_signed(&key).unwrap();
    let files = CertFiles {
        cert_file: dir.join(format!("{stem}.pem")),
        key_file: dir.join(format!("{stem}.key")),
    };
    std::fs::write(&files.cert_file, c.pem()).unwrap();
    std::fs::write(&files.key_file, key.serialize_pem()).unwrap();
    files
}

fn served(store: &CertStore, sni: Option<&str>) -> Vec<u8> {
    store.choose(sni).cert[0].to_vec()
}

fn der(files: &CertFiles) -> Vec<u8> {
    super::pem::certificates("cert_file", &files.cert_file).unwrap()[0].to_vec()
}

#[test]
fn sni_picks_the_certificate_whose_names_cover_it_else_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let a = cert(dir.path(), "a", &["a.test"]);
    let b = cert(dir.path(), "b", &["b.test", "*.b.test"]);
    let store = CertStore::load(vec![a.clone(), b.clone()]).unwrap();
    assert_eq!(
        store.names(),
        vec![
            vec!["a.test".to_string()],
            vec!["b.test".into(), "*.b.test".into()]
        ]
    );
    assert_eq!(served(&store, Some("a.test")), der(&a));
    assert_eq!(served(&store, Some("b.test")), der(&b));
    assert_eq!(served(&store, Some("www.b.test")), der(&b));
    // a wildcard covers one label only
    assert_eq!(served(&store, Some("x.www.b.test")), der(&a));
    assert_eq!(served(&store, Some("c.test")), der(&a));
    assert_eq!(served(&store, None), der(&a));
}

#[test]
fn reload_swaps_a_changed_certificate_and_keeps_the_old_when_a_file_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let a = cert(dir.path(), "a", &["a.test"]);
    let store = CertStore::load(vec![a.clone()]).unwrap();
    let first = served(&store, None);
    assert!(!store.reload().unwrap(), "nothing changed");
    // a broken certificate file: an error naming field and file, the old one served
    std::fs::write(&a.cert_file, "garbage").unwrap();
    let e = store.reload().unwrap_err().to_string();
    assert!(
        e.starts_with("cert_file: ") && e.contains("a.pem") && e.contains("no PEM certificate"),
        "{e}"
    );
    assert_eq!(served(&store, None), first);
    // a new pair written over the files: swapped
    let new = cert(dir.path(), "a", &["a.test"]);
    assert!(store.reload().unwrap());
    assert_eq!(served(&store, None), der(&new));
    assert_ne!(der(&new), first);
}

#[test]
fn errors_name_the_field_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = cert(dir.path(), "a", &["a.test"]);
    let b = cert(dir.path(), "b", &["b.test"]);
    let missing = CertFiles {
        cert_file: a.cert_file.clone(),
        key_file: PathBuf::from("/nonexistent/a.key"),
    };
    let e = CertStore::load(vec![missing]).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::Read {
                field: "key_file",
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("key_file: cannot read /nonexistent/a.key: "),
        "{e}"
    );
    let mismatched = CertFiles {
        cert_file: a.cert_file.clone(),
        key_file: b.key_file.clone(),
    };
    let e = CertStore::load(vec![mismatched]).unwrap_err().to_string();
    assert!(
        e.starts_with("key_file: ")
            && e.contains("b.key")
            && e.contains("does not go with the certificate in")
            && e.contains("a.pem"),
        "{e}"
    );
    assert!(CertStore::load(Vec::new()).is_err());
}
