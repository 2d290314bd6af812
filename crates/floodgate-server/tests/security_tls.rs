//! TLS and mutual TLS on the three doors, with real clients: tokio-rustls for RESP and
//! gRPC (h2 over rustls, ALPN `h2`), `redis-cli --tls` and `curl`. Certificates are made
//! here with rcgen: a CA, the server's certificate (localhost, 127.0.0.1) and client
//! certificates from that CA and from another one.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use floodgate_server::metrics::{AuthLabels, Metrics};
use prost::Message;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The files of one test's certificates.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// A client certificate from a CA the server does not trust.
    stranger_cert: PathBuf,
    stranger_key: PathBuf,
}

fn ca(name: &str) -> (CertificateParams, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (p, key)
}

fn leaf(
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'_, KeyPair>,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, names[0]);
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let (params, key) = ca("floodgate test CA");
    let ca_pem = params.self_signed(&key).unwrap().pem();
    let issuer = Issuer::new(params, key);
    let (sc, sk) = leaf(
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &issuer,
    );
    let (cc, ck) = leaf(&["client"], ExtendedKeyUsagePurpose::ClientAuth, &issuer);
    let (other, other_key) = ca("another CA");
    let other = Issuer::new(other, other_key);
    let (xc, xk) = leaf(&["stranger"], ExtendedKeyUsagePurpose::ClientAuth, &other);
    Pki {
        ca: write("ca.pem", &ca_pem),
        server_cert: write("server.pem", &sc),
        server_key: write("server.key", &sk),
        client_cert: write("client.pem", &cc),
        client_key: write("client.key", &ck),
        stranger_cert: write("stranger.pem", &xc),
        stranger_key: write("stranger.key", &xk),
        _dir: dir,
    }
}

impl Pki {
    /// The `tls:` section: the server's certificate, and the CA of client certificates
    /// when `mutual`.
    fn tls_yaml(&self, mutual: bool, doors: &str) -> String {
        let mut s = format!(
            "tls:\n  cert_file: {:?}\n  key_file: {:?}\n",
            self.server_cert.display(),
            self.server_key.display()
        );
        if mutual {
            s += &format!("  client_ca_file: {:?}\n", self.ca.display());
        }
        s += doors;
        s
    }

    /// A client trusting the test CA, presenting `cert` (a certificate and key file).
    fn client(&self, cert: Option<(&Path, &Path)>, alpn: &[&[u8]]) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(pem_certs(&self.ca).remove(0)).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        let mut config = match cert {
            Some((c, k)) => {
                use rustls::pki_types::pem::PemObject;
                let key = PrivateKeyDer::from_pem_file(k).unwrap();
                builder.with_client_auth_cert(pem_certs(c), key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
    }

    fn mine(&self) -> Option<(&Path, &Path)> {
        Some((&self.client_cert, &self.client_key))
    }

    fn strangers(&self) -> Option<(&Path, &Path)> {
        Some((&self.stranger_cert, &self.stranger_key))
    }
}

fn pem_certs(path: &Path) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

async fn tls_connect(addr: SocketAddr, c: &TlsConnector) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    c.connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// Send `send` over `io` and read what comes back until `want` bytes, the end, an error
/// or 2 s.
async fn talk<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut io: S,
    send: &[u8],
    want: usize,
) -> Vec<u8> {
    let mut got = Vec::new();
    if io.write_all(send).await.is_err() {
        return got;
    }
    let _ = io.flush().await;
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while got.len() < want {
        match tokio::time::timeout_at(deadline, io.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    got
}

/// RESP over TLS: what `send` gets back, empty when the server refused the client.
async fn resp_over_tls(addr: SocketAddr, c: &TlsConnector, send: &[u8], want: usize) -> Vec<u8> {
    match tls_connect(addr, c).await {
        Ok(tls) => talk(tls, send, want).await,
        Err(_) => Vec::new(),
    }
}

fn tls_failures(m: &Metrics, front: &'static str) -> u64 {
    m.auth_failures
        .get_or_create(&AuthLabels {
            front,
            reason: "tls_handshake",
        })
        .get()
}

#[tokio::test]
async fn resp_over_mutual_tls_takes_only_clients_with_a_certificate_of_the_ca() {
    let pki = pki();
    let yaml = format!(
        "resp: {{password: s3cret}}\n{}",
        pki.tls_yaml(true, "  doors: [resp]\n")
    );
    let srv = start(&yaml).await;
    let addr = srv.running.resp.unwrap();
    let metrics = srv.running.engine.metrics().clone();
    let conv = b"PING\r\nAUTH s3cret\r\nPING\r\n";
    let answer = b"-NOAUTH Authentication required.\r\n+OK\r\n+PONG\r\n";
    let got = resp_over_tls(addr, &pki.client(pki.mine(), &[]), conv, answer.len()).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(answer)
    );
    assert_eq!(tls_failures(&metrics, "resp"), 0);
    // no certificate, a certificate of another CA, no TLS at all: nothing is answered
    let got = resp_over_tls(addr, &pki.client(None, &[]), b"AUTH s3cret\r\n", 5).await;
    assert_eq!(got, b"", "a client without a certificate");
    let got = resp_over_tls(
        addr,
        &pki.client(pki.strangers(), &[]),
        b"AUTH s3cret\r\n",
        5,
    )
    .await;
    assert_eq!(got, b"", "a client with another CA's certificate");
    let plain = TcpStream::connect(addr).await.unwrap();
    let got = talk(plain, b"AUTH s3cret\r\nPING\r\n", 5).await;
    assert!(!got.windows(5).any(|w| w == b"+PONG"), "cleartext: {got:?}");
    assert!(
        eventually(5, || tls_failures(&metrics, "resp") == 3).await,
        "counted {}",
        tls_failures(&metrics, "resp")
    );
    // the other doors speak cleartext
    let r = http(srv.running.http.unwrap(), "GET", "/healthz", b"").await;
    assert_eq!(r.status, 200);
    srv.stop().await;
}

fn redis_cli_has_tls() -> bool {
    std::process::Command::new("redis-cli")
        .arg("--help")
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).contains("--tls")
                || String::from_utf8_lossy(&o.stderr).contains("--tls")
        })
}

#[tokio::test]
async fn redis_cli_speaks_tls_with_a_client_certificate() {
    assert!(
        redis_cli_has_tls(),
        "this test needs redis-cli built with TLS (Debian's redis-tools: apt-get install redis-tools; scripts/setup.sh)"
    );
    let pki = pki();
    let yaml = format!("resp: {{password: s3cret}}\n{}", pki.tls_yaml(true, ""));
    let srv = start(&yaml).await;
    let port = srv.running.resp.unwrap().port().to_string();
    let cli = |cert: bool| {
        let (ca, c, k) = (
            pki.ca.clone(),
            pki.client_cert.clone(),
            pki.client_key.clone(),
        );
        let port = port.clone();
        tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new("redis-cli");
            cmd.args(["-h", "127.0.0.1", "-p", &port, "--tls", "--cacert"])
                .arg(&ca)
                .args(["--user", "default", "--pass", "s3cret", "--no-auth-warning"]);
            if cert {
                cmd.arg("--cert").arg(&c).arg("--key").arg(&k);
            }
            cmd.args(["CL.THROTTLE", "k", "1", "1", "1"]);
            let o = cmd.output().unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
    };
    let out = cli(true).await.unwrap();
    // not a terminal: one integer a line
    assert_eq!(out, "0\n2\n1\n-1\n1\n");
    let out = cli(false).await.unwrap();
    assert!(
        !out.starts_with("0\n2\n"),
        "without a client certificate: {out}"
    );
    eprintln!("redis-cli without a client certificate: {out}");
    srv.stop().await;
}

fn curl(args: &[&str]) -> (bool, String) {
    let o = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "5"])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

#[tokio::test]
async fn http_over_mutual_tls_with_curl() {
    let pki = pki();
    let srv = start(&format!(
        "policies: {{api: {{rate: 2/m}}}}\n{}",
        pki.tls_yaml(true, "  doors: [http]\n")
    ))
    .await;
    let url = format!("https://127.0.0.1:{}", srv.running.http.unwrap().port());
    let (ca, c, k) = (
        pki.ca.to_str().unwrap(),
        pki.client_cert.to_str().unwrap(),
        pki.client_key.to_str().unwrap(),
    );
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            curl(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
    };
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (ok, out) = run(s(&[
        "--cacert",
        ca,
        "--cert",
        c,
        "--key",
        k,
        "-H",
        "content-type: application/json",
        "-d",
        r#"{"policy": "api", "key": "u1"}"#,
        &format!("{url}/v1/check"),
    ]))
    .await
    .unwrap();
    assert!(ok && out.contains("\"allowed\":true"), "{out}");
    let (ok, out) = run(s(&["--cacert", ca, &format!("{url}/healthz")]))
        .await
        .unwrap();
    assert!(!ok, "no client certificate: {out}");
    let (ok, out) = run(s(&[
        "--cacert",
        ca,
        "--cert",
        pki.stranger_cert.to_str().unwrap(),
        "--key",
        pki.stranger_key.to_str().unwrap(),
        &format!("{url}/healthz"),
    ]))
    .await
    .unwrap();
    assert!(!ok, "another CA's certificate: {out}");
    let (ok, out) = run(s(&[&format!(
        "http://127.0.0.1:{}/healthz",
        srv.running.http.unwrap().port()
    )]))
    .await
    .unwrap();
    assert!(!ok || !out.contains("ok"), "cleartext: {out}");
    let metrics = srv.running.engine.metrics().clone();
    assert!(
        eventually(5, || tls_failures(&metrics, "http") == 3).await,
        "counted {}",
        tls_failures(&metrics, "http")
    );
    // TLS only: the certificate alone, no client certificate asked
    srv.stop().await;
    let srv = start(&pki.tls_yaml(false, "  doors: [http]\n")).await;
    let url = format!(
        "https://127.0.0.1:{}/healthz",
        srv.running.http.unwrap().port()
    );
    let (ok, out) = run(s(&["--cacert", ca, &url])).await.unwrap();
    assert!(ok, "{out}");
    srv.stop().await;
}

const RULES: &str = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";

/// One `ShouldRateLimit` over HTTP/2 over `tls`: the decoded answer.
async fn grpc_call(tls: TlsStream<TcpStream>) -> Result<RateLimitResponse, String> {
    let (send, conn) = h2::client::handshake(tls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = send.ready().await.map_err(|e| e.to_string())?;
    let request = http::Request::builder()
        .method("POST")
        .uri("https://localhost/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut stream) = send
        .send_request(request, false)
        .map_err(|e| e.to_string())?;
    let body = req("edge", vec![desc(&[("user", "u1")])], 1).encode_to_vec();
    stream
        .send_data(framed(&body), true)
        .map_err(|e| e.to_string())?;
    let resp = resp.await.map_err(|e| e.to_string())?;
    let mut body = resp.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    if data.len() < 5 {
        return Err(format!("no message: {data:?}"));
    }
    RateLimitResponse::decode(&data[5..]).map_err(|e| e.to_string())
}

#[tokio::test]
async fn grpc_over_mutual_tls_with_h2() {
    let pki = pki();
    let srv = start(&format!(
        "{RULES}{}",
        pki.tls_yaml(true, "  doors: [grpc]\n")
    ))
    .await;
    let addr = srv.running.grpc.unwrap();
    let tls = tls_connect(addr, &pki.client(pki.mine(), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let r = grpc_call(tls).await.unwrap();
    assert_eq!(r.overall_code, 1, "OK: {r:?}");
    // then over the limit, on a second connection
    let tls = tls_connect(addr, &pki.client(pki.mine(), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(grpc_call(tls).await.unwrap().overall_code, 2);
    let refused = match tls_connect(addr, &pki.client(None, &[b"h2"])).await {
        Err(_) => true,
        Ok(tls) => grpc_call(tls).await.is_err(),
    };
    assert!(refused, "a client without a certificate is answered");
    // a cleartext gRPC client is not answered either
    let mut c = tokio::time::timeout(
        Duration::from_secs(5),
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(format!("http://{addr}")),
    )
    .await
    .unwrap()
    .unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        call(&mut c, req("edge", vec![desc(&[("user", "u2")])], 1)),
    )
    .await
    .unwrap();
    assert!(r.is_err(), "cleartext: {r:?}");
    let metrics = srv.running.engine.metrics().clone();
    assert!(eventually(5, || tls_failures(&metrics, "grpc") >= 2).await);
    srv.stop().await;
}

#[test]
fn bad_tls_files_name_the_field_and_the_file() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let truncated = dir.path().join("truncated.pem");
    let cert = std::fs::read_to_string(&pki.server_cert).unwrap();
    std::fs::write(&truncated, &cert[..cert.len() / 2]).unwrap();
    let missing = dir.path().join("missing.pem");
    let err = |cert: &Path, key: &Path, ca: Option<&Path>, extra: &str| {
        let mut yaml = format!(
            "tls:\n  cert_file: {:?}\n  key_file: {:?}\n",
            cert.display(),
            key.display()
        );
        if let Some(ca) = ca {
            yaml += &format!("  client_ca_file: {:?}\n", ca.display());
        }
        yaml += extra;
        floodgate_server::config::parse(Path::new("limits.yaml"), &yaml)
            .unwrap_err()
            .to_string()
    };
    let (sc, sk) = (&pki.server_cert, &pki.server_key);
    let e = err(&missing, sk, None, "");
    assert!(
        e.starts_with(&format!(
            "limits.yaml: tls: cert_file: cannot read {}: ",
            missing.display()
        )),
        "{e}"
    );
    let e = err(sc, &missing, None, "");
    assert!(
        e.starts_with(&format!(
            "limits.yaml: tls: key_file: cannot read {}: ",
            missing.display()
        )),
        "{e}"
    );
    let e = err(&garbage, sk, None, "");
    assert_eq!(
        e,
        format!(
            "limits.yaml: tls: cert_file: {}: holds no PEM certificate (BEGIN CERTIFICATE)",
            garbage.display()
        )
    );
    let e = err(&truncated, sk, None, "");
    assert!(
        e.starts_with(&format!(
            "limits.yaml: tls: cert_file: {}: not a PEM certificate file: ",
            truncated.display()
        )),
        "{e}"
    );
    let e = err(sc, &garbage, None, "");
    assert!(
        e.starts_with(&format!(
            "limits.yaml: tls: key_file: {}: holds no usable PEM private key",
            garbage.display()
        )),
        "{e}"
    );
    // a key of another certificate
    let e = err(sc, &pki.client_key, None, "");
    assert!(
        e.starts_with(&format!(
            "limits.yaml: tls: key_file: {}: does not go with the certificate in {}",
            pki.client_key.display(),
            sc.display()
        )),
        "{e}"
    );
    let e = err(sc, sk, Some(&garbage), "");
    assert_eq!(
        e,
        format!(
            "limits.yaml: tls: client_ca_file: {}: holds no PEM certificate (BEGIN CERTIFICATE)",
            garbage.display()
        )
    );
    let e = err(sc, sk, Some(&missing), "");
    assert!(
        e.starts_with(&format!(
            "limits.yaml: tls: client_ca_file: cannot read {}: ",
            missing.display()
        )),
        "{e}"
    );
    let e = err(sc, sk, None, "  doors: [grpc, smtp]\n");
    assert_eq!(
        e,
        "limits.yaml: tls: doors: unknown door \"smtp\" (expected grpc, http or resp)"
    );
    let e = floodgate_server::config::parse(Path::new("limits.yaml"), "tls: {key_file: x}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cert_file"), "{e}");
}
