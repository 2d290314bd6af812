//! `floodgate server`'s doors against many connections, as a real process: the memory one
//! connection can make the server hold (read from `/proc/<pid>/status`), and the
//! descriptor limit (the server started under `ulimit -n 1024`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

struct Proc {
    child: Child,
    grpc: SocketAddr,
    http: SocketAddr,
    resp: SocketAddr,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// The server's resident set, KiB (`VmRSS`).
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

fn field(line: &str, name: &str) -> SocketAddr {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
        .parse()
        .unwrap()
}

/// `floodgate server` on free loopback ports, started by `sh` after `ulimit <ulimit>`.
fn spawn(config_text: &str, ulimit: &str) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.yaml");
    std::fs::write(&config, config_text).unwrap();
    let stderr = dir.path().join("stderr.log");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit {ulimit} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_floodgate"))
        .env("NO_COLOR", "1")
        .args(["server", "--no-watch", "--config"])
        .arg(&config)
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--resp", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| {
            panic!(
                "no listening line; stderr: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            )
        });
    assert!(line.starts_with("floodgate server listening "), "{line}");
    Proc {
        child,
        grpc: field(&line, "grpc"),
        http: field(&line, "http"),
        resp: field(&line, "resp"),
        stderr,
        _dir: dir,
    }
}

async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(format!("{from}:0").parse().unwrap())?;
    s.connect(to).await
}

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// A gRPC request head for `ShouldRateLimit`.
fn call_head(addr: SocketAddr) -> http::Request<()> {
    http::Request::post(format!("http://{addr}{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// `{domain: "doors", descriptors: [{entries: [{key: "k", value: "v"}]}]}`, framed.
fn rls_message() -> Bytes {
    let msg: &[u8] = &[
        0x0a, 5, b'd', b'o', b'o', b'r', b's', 0x12, 8, 0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v',
    ];
    let mut framed = vec![0, 0, 0, 0, msg.len() as u8];
    framed.extend_from_slice(msg);
    Bytes::from(framed)
}

async fn h2_client(s: TcpStream) -> h2::client::SendRequest<Bytes> {
    let (send, conn) = h2::client::handshake(s).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send.ready().await.unwrap()
}

/// A ShouldRateLimit call from `from`, answered with grpc-status 0.
async fn grpc_call(from: &str, addr: SocketAddr) {
    let mut send = h2_client(connect_from(from, addr).await.unwrap()).await;
    let (resp, mut body) = send.send_request(call_head(addr), false).unwrap();
    body.send_data(rls_message(), true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut recv = resp.into_body();
    while let Some(d) = recv.data().await {
        let n = d.unwrap().len();
        let _ = recv.flow_control().release_capacity(n);
    }
    let trailers = recv.trailers().await.unwrap().unwrap();
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
}

/// Send `send` from `from`; read until the server closes, or (`line`) one line.
async fn exchange(from: &str, addr: SocketAddr, send: &[u8], line: bool) -> String {
    let mut s = connect_from(from, addr).await.unwrap();
    s.write_all(send).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !(line && got.ends_with(b"\r\n")) {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

const RULES: &str = "domains:\n  - domain: doors\n    descriptors:\n      - key: k\n        rate_limit: {rate: 1000000/second}\n";

/// 100 gRPC connections, each with 40 calls whose messages never end (2 MB offered, 16
/// times the connection window), and 100 RESP connections, each sending a 4 MiB command
/// that never ends (63 arguments of 64 KiB, the array naming 64): the server holds at most
/// a connection window (`grpc_connection_window`, 128 KiB here) of each gRPC connection
/// and `max_command_bytes` of each RESP connection, and the RESP client is told and
/// closed. Without those bounds the server held about 2 MB of each gRPC connection (its
/// default window) and 4 MiB of each RESP connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_connections_holding_half_requests_stay_within_a_memory_bound() {
    let _ = floodgate_net::raise_nofile();
    let cfg = format!(
        "{RULES}limits: {{max_request_bytes: 65536}}\nconnections: {{grpc_connection_window: 131072, idle_timeout: 120s, request_timeout: 120s}}\n"
    );
    let p = spawn(&cfg, "-Sn 4096");
    let before = p.rss_kib();
    // gRPC: 40 calls of 50,000 octets of a 60,000-octet message each, per connection
    let mut grpc = Vec::new();
    for _ in 0..100 {
        let mut send = h2_client(TcpStream::connect(p.grpc).await.unwrap()).await;
        let mut calls = Vec::new();
        for _ in 0..40 {
            send = send.ready().await.unwrap();
            let (resp, mut body) = send.send_request(call_head(p.grpc), false).unwrap();
            let mut part = vec![0u8; 50_005];
            part[..5].copy_from_slice(&[0, 0, 0, 0xea, 0x60]);
            body.send_data(Bytes::from(part), false).unwrap();
            calls.push((resp, body));
        }
        grpc.push((send, calls));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_grpc = p.rss_kib();
    // RESP: 4 MiB of a command that never ends, per connection
    let mut command = b"*64\r\n".to_vec();
    for _ in 0..63 {
        command.extend_from_slice(b"$65536\r\n");
        command.extend_from_slice(&[b'x'; 65536]);
        command.extend_from_slice(b"\r\n");
    }
    let command = Bytes::from(command);
    let mut resp = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(p.resp).await.unwrap();
        let c = command.clone();
        resp.push(tokio::spawn(async move {
            // the server may close before all of it is sent
            let _ = s.write_all(&c).await;
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
            (s, answer)
        }));
    }
    let mut answers = Vec::new();
    for t in resp {
        answers.push(t.await.unwrap());
    }
    // what was sent has arrived (the last 100 ms changed the resident set little)
    let mut after = p.rss_kib();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = p.rss_kib();
        let settled = now.abs_diff(after) < 2048;
        after = now;
        if settled {
            break;
        }
    }
    let grown = after.saturating_sub(before);
    eprintln!(
        "resident set: {before} KiB at start, {after_grpc} KiB with the gRPC connections, {after} KiB with all 200 (+{grown} KiB)"
    );
    for (_, answer) in &answers {
        assert_eq!(
            String::from_utf8_lossy(answer),
            "-ERR Protocol error: command of more than 69632 bytes\r\n"
        );
    }
    // 100 connection windows of 128 KiB (twice over: the frames' read buffers), 100 RESP
    // commands of 68 KiB, and 64 MiB for the connections themselves and the allocator
    let bound = 100 * (2 * 128) + 100 * 68 + 64 * 1024;
    assert!(
        grown < bound,
        "the server grew by {grown} KiB holding 200 connections (bound {bound} KiB)"
    );
    drop(grpc);
    drop(answers);
}

/// Under a descriptor limit of 1,024 (the soft limit only, then the hard limit too),
/// 1,100 idle connections from one address spread over the three doors, and a client
/// from another address is answered on every door within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_under_ulimit_1024_leaves_every_door_open() {
    let _ = floodgate_net::raise_nofile();
    for ulimit in ["-Sn 1024", "-n 1024"] {
        let p = spawn(RULES, ulimit);
        let doors = [p.grpc, p.http, p.resp];
        let mut idle = Vec::new();
        for i in 0..1100 {
            let connect = connect_from("127.0.0.1", doors[i % 3]);
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(2), connect).await {
                idle.push(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let probe = async {
            grpc_call("127.0.0.2", p.grpc).await;
            let http = exchange(
                "127.0.0.2",
                p.http,
                b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                false,
            )
            .await;
            assert!(http.starts_with("HTTP/1.1 200 OK\r\n"), "{http}");
            let pong = exchange("127.0.0.2", p.resp, b"PING\r\n", true).await;
            assert_eq!(pong, "+PONG\r\n");
        };
        let t = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(1), probe)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "ulimit {ulimit}: a new client not answered on every door within 1 s; log:\n{}",
                    p.log()
                )
            });
        eprintln!(
            "ulimit {ulimit}: every door answered in {:?} beside {} idle connections",
            t.elapsed(),
            idle.len()
        );
        let log = p.log();
        assert!(log.contains("connection caps of each door"), "{log}");
        if ulimit == "-Sn 1024" {
            assert!(
                log.contains("raised to the hard limit") && log.contains("before=1024"),
                "{log}"
            );
        }
        drop(idle);
    }
}
