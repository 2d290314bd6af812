//! TLS on `floodgate proxy`, both sides, with the real binary as a process and real
//! clients: curl (HTTP/1.1 and HTTP/2 over TLS, `--resolve` for SNI), Python's `ssl`
//! module (TLS 1.2 and 1.3 handshakes), and https upstreams served here with rustls.
//! Certificates are made here with rcgen (a CA, leaves for names, an expired one) into a
//! temp dir.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

mod common;
use common::{Proc, free_ports, wait_child_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// A test CA and the files it signs, in a temp dir.
struct Pki {
    dir: tempfile::TempDir,
    ca: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "floodgate test CA");
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, p.self_signed(&key).unwrap().pem()).unwrap();
        Pki {
            issuer: Issuer::new(p, key),
            ca,
            dir,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A server certificate for `names` (the first is its CN), valid now (or expired
    /// in 2001), written to `stem.pem` and `stem.key`.
    fn leaf(&self, stem: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
        self.leaf_cn(stem, names[0], names, expired)
    }

    /// As [`leaf`](Self::leaf), with the subject's CN `cn`.
    fn leaf_cn(&self, stem: &str, cn: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        if expired {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.path(&format!("{stem}.pem")),
            self.path(&format!("{stem}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A backend answering `body` to everything; over TLS with `tls` (certificate, key),
/// offering ALPN h2 and http/1.1.
async fn backend(tls: Option<(&Path, &Path)>, body: &'static str) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let acceptor = tls.map(|(c, k)| {
        let certs = floodgate_net::tls::pem::certificates("cert_file", c).unwrap();
        let key = floodgate_net::tls::pem::private_key("key_file", k).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<_>| {
                    let text = format!("{body} {:?}", req.version());
                    async move {
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(text))))
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                match acceptor {
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                    }
                    Some(a) => {
                        if let Ok(s) = a.accept(s).await {
                            let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A running `floodgate proxy --config`, its stderr in a file.
struct Running {
    _proc: Proc,
    listen: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait (at most 10 s) until the log holds `needle`.
    async fn wait_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Start the proxy with `config` (listen and admin lines added), on `pki`'s dir.
async fn start(pki: &Pki, name: &str, config: &str) -> Running {
    let [listen, admin] = free_ports::<2>();
    let path = pki.path(&format!("{name}.toml"));
    std::fs::write(
        &path,
        format!("listen = \"{listen}\"\nadmin = \"{admin}\"\n{config}"),
    )
    .unwrap();
    let log = pki.path(&format!("{name}.log"));
    let child = Command::new(BIN)
        .args(["proxy", "--threads", "1", "--config"])
        .arg(&path)
        .env("FLOODGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    if let Err(e) = wait_child_listening(&mut proc, &[listen, admin]).await {
        panic!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    }
    Running {
        _proc: proc,
        listen,
        admin,
        log,
    }
}

const POLICY: &str =
    "[[policy]]\nname = \"per-ip\"\nalgorithm = \"gcra\"\nrate = \"1000/s\"\nburst = 100\n";

/// curl with `args`; (stdout, stderr). Fails naming curl when it is not installed.
fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl is needed (apt-get install curl; scripts/setup.sh installs it)");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The certificate subject curl -v printed.
fn subject(verbose: &str) -> String {
    verbose
        .lines()
        .find_map(|l| l.split_once("subject: ").map(|(_, s)| s.trim().to_string()))
        .unwrap_or_else(|| panic!("no subject in curl's output:\n{verbose}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_over_tls_http1_and_http2_with_a_certificate_per_name() {
    let pki = Pki::new();
    let (a_cert, a_key) = pki.leaf("a", &["a.test"], false);
    let (b_cert, b_key) = pki.leaf("b", &["b.test", "*.b.test"], false);
    let upstream = backend(None, "plain").await;
    let p = start(
        &pki,
        "sni",
        &format!(
            "upstream = \"http://{upstream}\"\n{POLICY}\n[tls]\n[[tls.certificate]]\ncert_file = {a_cert:?}\nkey_file = {a_key:?}\n[[tls.certificate]]\ncert_file = {b_cert:?}\nkey_file = {b_key:?}\n"
        ),
    )
    .await;
    let port = p.listen.port();
    let ca = pki.ca.to_str().unwrap();
    for (name, http, version) in [
        ("a.test", "--http1.1", "1.1"),
        ("b.test", "--http2", "2"),
        ("www.b.test", "--http2", "2"),
        ("a.test", "--http2", "2"),
    ] {
        let resolve = format!("{name}:{port}:127.0.0.1");
        let url = format!("https://{name}:{port}/hello");
        let (out, err) = curl(&[
            "-v",
            http,
            "--cacert",
            ca,
            "--resolve",
            &resolve,
            "-w",
            " %{http_version} %{http_code}",
            &url,
        ]);
        // the upstream is HTTP/1.1 whatever the client speaks
        assert_eq!(
            out,
            format!("plain HTTP/1.1 {version} 200"),
            "{name}: {err}"
        );
        let cn = if name.ends_with("b.test") {
            "b.test"
        } else {
            "a.test"
        };
        assert_eq!(subject(&err), format!("CN={cn}"), "{name}");
        let alpn = if version == "2" { "h2" } else { "http/1.1" };
        assert!(
            err.contains(&format!("ALPN: server accepted {alpn}")),
            "{err}"
        );
    }
    // a request with a body (hyper's server takes the connection over from the proxy's
    // own HTTP/1 path, with the bytes read so far) and over HTTP/2
    for http in ["--http1.1", "--http2"] {
        let resolve = format!("a.test:{port}:127.0.0.1");
        let (out, err) = curl(&[
            http,
            "--cacert",
            ca,
            "--resolve",
            &resolve,
            "-d",
            "a body",
            "-w",
            " %{http_code}",
            &format!("https://a.test:{port}/post"),
        ]);
        assert_eq!(out, "plain HTTP/1.1 200", "{http}: {err}");
    }
    // a name no certificate covers gets the first one, which curl then refuses
    let resolve = format!("c.test:{port}:127.0.0.1");
    let (out, err) = curl(&[
        "-v",
        "--cacert",
        ca,
        "--resolve",
        &resolve,
        &format!("https://c.test:{port}/"),
    ]);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("CN=a.test") && err.contains("c.test"), "{err}");
}

/// A backend that answers every request at once, before reading anything of its body
/// ("early", `Connection: close`); then it closes the connection (`linger` false), or
/// reads what comes until the end (`linger` true; a close with unread bytes would reset
/// the connection, and the proxy could lose the answer).
async fn early_backend(linger: bool) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 16384];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nearly",
                    )
                    .await;
                let _ = s.shutdown().await;
                let rest = async { while let Ok(1..) = s.read(&mut buf).await {} };
                if linger {
                    let _ = tokio::time::timeout(Duration::from_secs(10), rest).await;
                }
            });
        }
    });
    addr
}

/// POST a body of `size` bytes over HTTP/1.1 on `io` (TLS), sent only once the whole
/// answer has come; then a GET on the same connection. Both answers' status lines.
async fn http1_body_after_the_answer<I>(mut io: I, size: usize) -> String
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!("POST /post HTTP/1.1\r\nhost: a.test\r\ncontent-length: {size}\r\n\r\n");
    io.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // the answer: its head and its 5 bytes
    while !got.ends_with(b"early") {
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let first = String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    if io.write_all(&vec![b'x'; size]).await.is_err()
        || io
            .write_all(b"GET /after HTTP/1.1\r\nhost: a.test\r\n\r\n")
            .await
            .is_err()
    {
        return format!("{first} / the body's sending failed");
    }
    let mut second = Vec::new();
    while !second.ends_with(b"early") {
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => second.extend_from_slice(&buf[..n]),
        }
    }
    let second = String::from_utf8_lossy(&second);
    format!("{first} / {}", second.lines().next().unwrap_or("closed"))
}

/// POST a body of `size` bytes over HTTP/2 on `io` (already past TLS, if any), sent
/// only once the whole answer has come (as a client still sending when the answer ends
/// would); then a GET on the same connection. The answer's status and body, or what
/// failed (a reset of the stream makes the body's sending fail: more than the stream's
/// window is sent, so it cannot all go without the proxy reading it).
async fn h2_body_after_the_answer<I>(io: I, authority: &str, size: usize) -> Result<String, String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, conn) = h2::client::handshake(io)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.map_err(|e| format!("ready: {e}"))?;
    let req = http::Request::post(format!("https://{authority}/post"))
        .body(())
        .unwrap();
    let (resp, mut send) = client
        .send_request(req, false)
        .map_err(|e| format!("request: {e}"))?;
    let resp = resp.await.map_err(|e| format!("answer: {e}"))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| format!("answer's body: {e}"))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    // the answer is complete; now the request body
    let mut left = size;
    while left > 0 {
        send.reserve_capacity(left.min(64 << 10));
        let Some(cap) = std::future::poll_fn(|cx| send.poll_capacity(cx)).await else {
            let reset = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
            return Err(format!("the stream closed while sending: {reset:?}"));
        };
        let cap = cap.map_err(|e| format!("sending the body: {e:?} {:?}", e.reason()))?;
        let n = cap.min(left);
        left -= n;
        send.send_data(Bytes::from(vec![b'x'; n]), left == 0)
            .map_err(|e| format!("sending the body: {e:?} {:?}", e.reason()))?;
    }
    // the connection still serves
    let get = http::Request::get(format!("https://{authority}/after"))
        .body(())
        .unwrap();
    let (resp, _) = client
        .send_request(get, true)
        .map_err(|e| format!("second request: {e}"))?;
    let resp = resp.await.map_err(|e| format!("second answer: {e}"))?;
    Ok(format!(
        "{status} {} {}",
        String::from_utf8_lossy(&got),
        resp.status().as_u16()
    ))
}

/// An upstream that answers before reading the request body: the client, still sending
/// it (2 MiB, more than a stream's window) after the whole answer has come, finishes
/// sending and sees no reset of the stream, over HTTP/2 on TLS and h2c; curl over TLS
/// with HTTP/2 and HTTP/1.1 sees the answer and no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_still_coming_after_an_early_answer_is_read_not_reset() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("a", &["a.test"], false);
    let upstream = early_backend(false).await;
    let tls = start(
        &pki,
        "early-tls",
        &format!(
            "upstream = \"http://{upstream}\"\n{POLICY}\n[tls]\n[[tls.certificate]]\ncert_file = {cert:?}\nkey_file = {key:?}\n"
        ),
    )
    .await;
    let plain = start(
        &pki,
        "early-h2c",
        &format!("upstream = \"http://{upstream}\"\n{POLICY}"),
    )
    .await;
    const SIZE: usize = 2 << 20;

    // HTTP/2 over TLS
    let mut roots = rustls::RootCertStore::empty();
    for c in floodgate_net::tls::pem::certificates("ca", &pki.ca).unwrap() {
        roots.add(c).unwrap();
    }
    let connect = |alpn: &[u8]| {
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        let addr = tls.listen;
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect("a.test".try_into().unwrap(), tcp)
                .await
                .unwrap()
        }
    };
    let got = h2_body_after_the_answer(connect(b"h2").await, "a.test", SIZE).await;
    assert_eq!(got.as_deref(), Ok("200 early 200"), "{}", tls.log());

    // h2c (prior knowledge)
    let tcp = tokio::net::TcpStream::connect(plain.listen).await.unwrap();
    let got = h2_body_after_the_answer(tcp, "a.test", SIZE).await;
    assert_eq!(got.as_deref(), Ok("200 early 200"), "{}", plain.log());

    // HTTP/1.1 over TLS: the body is read, and the connection serves the next request
    let got = http1_body_after_the_answer(connect(b"http/1.1").await, SIZE).await;
    assert_eq!(got, "HTTP/1.1 200 OK / HTTP/1.1 200 OK", "{}", tls.log());

    // curl, its body sent while the answer comes, over HTTP/2 and HTTP/1.1, through
    // an upstream that reads the body after its answer (closing with unread bytes would
    // reset the proxy's connection before it has read the answer)
    let lingering = early_backend(true).await;
    let tls = start(
        &pki,
        "early-curl",
        &format!(
            "upstream = \"http://{lingering}\"\n{POLICY}\n[tls]\n[[tls.certificate]]\ncert_file = {cert:?}\nkey_file = {key:?}\n"
        ),
    )
    .await;
    let file = pki.path("body.bin");
    std::fs::write(&file, vec![b'x'; SIZE]).unwrap();
    let long = format!("@{}", file.display());
    let resolve = format!("a.test:{}:127.0.0.1", tls.listen.port());
    let url = format!("https://a.test:{}/post", tls.listen.port());
    let ca = pki.ca.to_str().unwrap();
    // curl 7.88 stops sending a long body over HTTP/2 once the answer has ended: a
    // short one there
    for (http, data) in [("--http2", "a body"), ("--http1.1", long.as_str())] {
        let (out, err) = curl(&[
            http,
            "--cacert",
            ca,
            "--resolve",
            &resolve,
            "--data-binary",
            data,
            "-w",
            " %{http_code}",
            &url,
        ]);
        assert_eq!((out.as_str(), err.as_str()), ("early 200", ""), "{http}");
    }
}

/// The Python interpreter: the project's virtualenv, else the system's `python3`.
fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python3");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// A GET over TLS `version` ("1.2" or "1.3") from Python's `ssl` module, checking the
/// certificate for a.test against `ca`: "TLSv1.x HTTP/1.1 200 OK", or "refused REASON".
fn python_get(port: u16, ca: &Path, version: &str) -> String {
    const SCRIPT: &str = r#"
import socket, ssl, sys
port, ca, version = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
v = ssl.TLSVersion.TLSv1_2 if version == "1.2" else ssl.TLSVersion.TLSv1_3
ctx.minimum_version = v
ctx.maximum_version = v
ctx.set_alpn_protocols(["http/1.1"])
try:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="a.test") as t:
            t.sendall(b"GET /py HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = t.recv(4096)
                if not chunk:
                    break
                data += chunk
            print(t.version(), data.split(b"\r\n")[0].decode())
except ssl.SSLError as e:
    print("refused", e.reason)
"#;
    let out = Command::new(python())
        .args([
            "-c",
            SCRIPT,
            &port.to_string(),
            ca.to_str().unwrap(),
            version,
        ])
        .output()
        .expect("python3 is needed (scripts/setup.sh makes target/pyenv)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_ssl_handshakes_tls_1_2_and_1_3_and_min_version_refuses_1_2() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("a", &["a.test"], false);
    let upstream = backend(None, "plain").await;
    let tls = format!("[tls]\ncert_file = {cert:?}\nkey_file = {key:?}\n");
    let p = start(
        &pki,
        "both",
        &format!("upstream = \"http://{upstream}\"\n{POLICY}{tls}"),
    )
    .await;
    assert_eq!(
        python_get(p.listen.port(), &pki.ca, "1.2"),
        "TLSv1.2 HTTP/1.1 200 OK"
    );
    assert_eq!(
        python_get(p.listen.port(), &pki.ca, "1.3"),
        "TLSv1.3 HTTP/1.1 200 OK"
    );
    let only13 = start(
        &pki,
        "only13",
        &format!("upstream = \"http://{upstream}\"\n{POLICY}{tls}min_version = \"1.3\"\n"),
    )
    .await;
    let refused = python_get(only13.listen.port(), &pki.ca, "1.2");
    assert!(refused.starts_with("refused"), "{refused}");
    assert_eq!(
        python_get(only13.listen.port(), &pki.ca, "1.3"),
        "TLSv1.3 HTTP/1.1 200 OK"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_serve_tls_and_rate_limiting_answers_429_over_it() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("a", &["a.test"], false);
    let upstream = backend(None, "plain").await;
    let [listen] = free_ports::<1>();
    let log = pki.path("flags.log");
    let child = Command::new(BIN)
        .args(["proxy", "--threads", "1", "--listen", &listen.to_string()])
        .args(["--upstream", &format!("http://{upstream}")])
        .args(["--rate", "1/min", "--nodelay", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    if let Err(e) = wait_child_listening(&mut proc, &[listen]).await {
        panic!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    }
    let resolve = format!("a.test:{}:127.0.0.1", listen.port());
    let url = format!("https://a.test:{}/", listen.port());
    let ca = pki.ca.to_str().unwrap();
    let get = |http: &str| {
        curl(&[
            http,
            "--cacert",
            ca,
            "--resolve",
            &resolve,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            &url,
        ])
        .0
    };
    assert_eq!(get("--http1.1"), "200 1.1");
    assert_eq!(get("--http1.1"), "429 1.1");
    assert_eq!(get("--http2"), "429 2");
    // --tls-cert without --tls-key is refused by the flags' parser
    let out = Command::new(BIN)
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--rate",
            "1/s",
            "--tls-cert",
        ])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `GET /` through the proxy at `listen` (cleartext): status and body.
fn get_plain(listen: SocketAddr) -> String {
    curl(&["-w", " %{http_code}", &format!("http://{listen}/")]).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_verified_with_a_ca_file_and_refused_when_expired_or_for_another_name()
{
    let pki = Pki::new();
    let (cert, key) = pki.leaf("up", &["localhost", "127.0.0.1"], false);
    let (icert, ikey) = pki.leaf("internal", &["internal.test"], false);
    let (xcert, xkey) = pki.leaf("expired", &["localhost"], true);
    let good = backend(Some((&cert, &key)), "tls-up").await;
    let internal = backend(Some((&icert, &ikey)), "internal").await;
    let expired = backend(Some((&xcert, &xkey)), "expired").await;
    let ca = format!("[upstream_tls]\nca_file = {:?}\n", pki.ca);

    // HTTP/1.1 and HTTP/2 (ALPN h2) to the upstream, verified against the CA file
    let p = start(
        &pki,
        "up1",
        &format!(
            "upstream = \"https://localhost:{}\"\n{POLICY}{ca}",
            good.port()
        ),
    )
    .await;
    assert_eq!(get_plain(p.listen), "tls-up HTTP/1.1 200");
    let p2 = start(
        &pki,
        "up2",
        &format!(
            "upstream = \"https://localhost:{}\"\nupstream_http2 = true\n{POLICY}{ca}",
            good.port()
        ),
    )
    .await;
    assert_eq!(get_plain(p2.listen), "tls-up HTTP/2.0 200");

    // a certificate for another name: 502, and the log says why
    let wrong = start(
        &pki,
        "wrong",
        &format!(
            "upstream = \"https://127.0.0.1:{}\"\n{POLICY}{ca}",
            internal.port()
        ),
    )
    .await;
    assert!(get_plain(wrong.listen).ends_with(" 502"));
    let log = wrong.wait_log("upstream failed").await;
    assert!(log.contains("not valid for name"), "{log}");
    // ... unless server_name names the certificate's host
    let named = start(
        &pki,
        "named",
        &format!(
            "upstream = \"https://127.0.0.1:{}\"\n{POLICY}{ca}server_name = \"internal.test\"\n",
            internal.port()
        ),
    )
    .await;
    assert_eq!(get_plain(named.listen), "internal HTTP/1.1 200");

    // an expired certificate: 502, named in the log (HTTP/1.1 and HTTP/2 upstreams)
    for (name, h2) in [("expired1", ""), ("expired2", "upstream_http2 = true\n")] {
        let p = start(
            &pki,
            name,
            &format!(
                "upstream = \"https://localhost:{}\"\n{h2}{POLICY}{ca}",
                expired.port()
            ),
        )
        .await;
        assert!(get_plain(p.listen).ends_with(" 502"));
        let log = p.wait_log("upstream failed").await;
        assert!(log.contains("expired"), "{log}");
    }

    // the system roots (no ca_file) do not know the test CA
    let system = start(
        &pki,
        "system",
        &format!("upstream = \"https://localhost:{}\"\n{POLICY}", good.port()),
    )
    .await;
    assert!(get_plain(system.listen).ends_with(" 502"));
    let log = system.wait_log("upstream failed").await;
    assert!(
        log.contains("UnknownIssuer") || log.contains("unknown issuer"),
        "{log}"
    );

    // the explicit opt-out: served, and a WARN at start
    let insecure = start(
        &pki,
        "insecure",
        &format!("upstream = \"https://localhost:{}\"\n{POLICY}[upstream_tls]\ninsecure_skip_verify = true\n", expired.port()),
    )
    .await;
    assert_eq!(get_plain(insecure.listen), "expired HTTP/1.1 200");
    let log = insecure.log();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("insecure_skip_verify = true")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_replaced_on_disk_is_served_after_the_reload_interval() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf_cn("a", "first", &["a.test"], false);
    let upstream = backend(None, "plain").await;
    let p = start(
        &pki,
        "reload",
        &format!("upstream = \"http://{upstream}\"\n{POLICY}[tls]\ncert_file = {cert:?}\nkey_file = {key:?}\nreload_interval = \"1s\"\n"),
    )
    .await;
    let resolve = format!("a.test:{}:127.0.0.1", p.listen.port());
    let url = format!("https://a.test:{}/", p.listen.port());
    let ca = pki.ca.to_str().unwrap();
    let served = || {
        subject(
            &curl(&[
                "-v",
                "--cacert",
                ca,
                "--resolve",
                &resolve,
                "-o",
                "/dev/null",
                &url,
            ])
            .1,
        )
    };
    assert_eq!(served(), "CN=first");

    // a file that does not load keeps the old certificate, and the error is logged
    std::fs::write(&cert, "not a certificate").unwrap();
    p.wait_log("TLS certificates not reloaded").await;
    assert_eq!(served(), "CN=first");

    // a new certificate and key: served to new connections without a restart
    let (c2, k2) = pki.leaf_cn("a2", "second", &["a.test"], false);
    std::fs::copy(&k2, &key).unwrap();
    std::fs::copy(&c2, &cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while served() != "CN=second" {
        assert!(
            Instant::now() < deadline,
            "still the old certificate:\n{}",
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    p.wait_log("TLS certificates reloaded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caps_hold_during_the_handshake_and_a_client_that_never_handshakes_is_closed() {
    use tokio::io::AsyncReadExt;
    let pki = Pki::new();
    let (cert, key) = pki.leaf("a", &["a.test"], false);
    let upstream = backend(None, "plain").await;
    let p = start(
        &pki,
        "slow",
        &format!("upstream = \"http://{upstream}\"\nmax_connections_per_client = 1\n{POLICY}[tls]\ncert_file = {cert:?}\nkey_file = {key:?}\nhandshake_timeout = \"1s\"\n"),
    )
    .await;
    // the probe connection of `start` (closed at once) has given its place back
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closed_after = |mut s: tokio::net::TcpStream| async move {
        let start = Instant::now();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("not closed within 5 s")
            .unwrap_or(0);
        assert_eq!(n, 0);
        start.elapsed()
    };
    let silent = tokio::net::TcpStream::connect(p.listen).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // the silent connection holds the address's one place: a second is closed at accept
    let second = tokio::net::TcpStream::connect(p.listen).await.unwrap();
    assert!(closed_after(second).await < Duration::from_millis(300));
    let waited = closed_after(silent).await;
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let metrics = curl(&[&format!("http://{}/metrics", p.admin)]).0;
    assert!(
        metrics.contains("floodgate_client_timeouts_total{kind=\"handshake\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("floodgate_client_connections_total{outcome=\"refused_per_client\"} 1"),
        "{metrics}"
    );
    // and once it is gone, a client that handshakes is served
    let resolve = format!("a.test:{}:127.0.0.1", p.listen.port());
    let (out, err) = curl(&[
        "--cacert",
        pki.ca.to_str().unwrap(),
        "--resolve",
        &resolve,
        "-w",
        " %{http_code}",
        &format!("https://a.test:{}/", p.listen.port()),
    ]);
    assert_eq!(out, "plain HTTP/1.1 200", "{err}");
}

/// `floodgate proxy --check-config` on `config` (in `pki`'s dir as `name.toml`): its
/// stderr, the run having failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_an_https_and_an_http_server_serves_both_and_probes_both() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("grp", &["localhost"], false);
    let secure = backend(Some((&cert, &key)), "tls-up").await;
    let plain = backend(None, "plain").await;
    let group = |h2: &str| {
        format!(
            "{h2}[upstreams.mixed]\nservers = [\"https://localhost:{}\", \"http://127.0.0.1:{}\"]\n\
             [upstreams.mixed.probe]\npath = \"/\"\ninterval = \"100ms\"\n\
             {POLICY}[[route]]\nprefix = \"/\"\npolicies = [\"per-ip\"]\nupstream = \"mixed\"\n\
             [upstream_tls]\nca_file = {:?}\n",
            secure.port(),
            plain.port(),
            pki.ca
        )
    };
    for (name, h2, version) in [
        ("mixed1", "", "HTTP/1.1"),
        ("mixed2", "upstream_http2 = true\n", "HTTP/2.0"),
    ] {
        let p = start(&pki, name, &group(h2)).await;
        // round robin over the two: each answers twice, in its own scheme
        let mut answers: Vec<String> = (0..4).map(|_| get_plain(p.listen)).collect();
        answers.sort();
        assert_eq!(
            answers,
            [
                format!("plain {version} 200"),
                format!("plain {version} 200"),
                format!("tls-up {version} 200"),
                format!("tls-up {version} 200"),
            ],
            "{}",
            p.log()
        );
        // the probes (TLS to the https server) pass: both shown up, none failing
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (status, body) = common::http_get(p.admin, "/admin/upstreams").await;
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let servers = v["mixed"]["servers"].as_array().unwrap();
        assert_eq!(servers.len(), 2, "{body}");
        for s in servers {
            assert_eq!(s["up"], true, "{body}\n{}", p.log());
            assert_eq!(s["probe_failing"], false, "{body}\n{}", p.log());
        }
        assert!(!p.log().contains("fails its probe"), "{}", p.log());
    }
    // [upstream_tls] with only http:// servers in the groups is refused
    let e = check_fails(
        &pki,
        "plaingroup",
        &format!(
            "[upstreams.api]\nservers = [\"http://127.0.0.1:9\"]\n{POLICY}[[route]]\nprefix = \"/\"\npolicies = [\"per-ip\"]\nupstream = \"api\"\n[upstream_tls]\nserver_name = \"a.test\"\n"
        ),
    );
    assert!(
        e.contains("[upstream_tls] is set but no upstream server is https://"),
        "{e}"
    );
}

fn check_fails(pki: &Pki, name: &str, config: &str) -> String {
    let path = pki.path(&format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let out = Command::new(BIN)
        .args(["proxy", "--check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{name} passed the check");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_tls_config_is_refused_naming_file_line_and_column() {
    let pki = Pki::new();
    let (cert, _) = pki.leaf("a", &["a.test"], false);
    let (_, other_key) = pki.leaf("b", &["b.test"], false);
    let head = format!("upstream = \"http://127.0.0.1:9\"\n{POLICY}[tls]\n");
    let missing = pki.path("missing.key");
    let e = check_fails(
        &pki,
        "missing",
        &format!("{head}cert_file = {cert:?}\nkey_file = {missing:?}\n"),
    );
    assert!(
        e.contains("missing.toml:9:12: tls: key_file: cannot read") && e.contains("missing.key"),
        "{e}"
    );
    let e = check_fails(
        &pki,
        "mismatch",
        &format!("{head}cert_file = {cert:?}\nkey_file = {other_key:?}\n"),
    );
    assert!(
        e.contains("mismatch.toml:9:12: tls: key_file:")
            && e.contains("does not go with the certificate"),
        "{e}"
    );
    let e = check_fails(&pki, "unknown", &format!("{head}cert = {cert:?}\n"));
    assert!(
        e.contains("unknown.toml:8:1") && e.contains("unknown field `cert`"),
        "{e}"
    );
    let e = check_fails(
        &pki,
        "version",
        &format!("{head}cert_file = {cert:?}\nkey_file = {other_key:?}\nmin_version = \"1.1\"\n"),
    );
    assert!(
        e.contains("version.toml:10:15") && e.contains("unknown TLS version \"1.1\""),
        "{e}"
    );
    let fleet = "[fleet]\nstrategy = \"sticky\"\nnodes = [\"127.0.0.1:8080\", \"127.0.0.1:8081\"]\nself = \"127.0.0.1:8080\"\n";
    let e = check_fails(
        &pki,
        "sticky",
        &format!("{head}cert_file = {cert:?}\nkey_file = {other_key:?}\n{fleet}"),
    );
    assert!(
        e.contains("sticky.toml:7:1: tls: fleet strategy \"sticky\""),
        "{e}"
    );
    let e = check_fails(
        &pki,
        "plainup",
        &format!(
            "upstream = \"http://127.0.0.1:9\"\n{POLICY}[upstream_tls]\nserver_name = \"a.test\"\n"
        ),
    );
    assert!(
        e.contains("[upstream_tls] is set but the upstream http://127.0.0.1:9/ is not https://"),
        "{e}"
    );
    let e = check_fails(
        &pki,
        "cafile",
        &format!(
            "upstream = \"https://127.0.0.1:9\"\n{POLICY}[upstream_tls]\nca_file = {missing:?}\n"
        ),
    );
    assert!(
        e.contains("cafile.toml:8:11: upstream_tls: ca_file: cannot read"),
        "{e}"
    );
}
