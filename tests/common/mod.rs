//! Helpers shared by the tests that run the `floodgate` binary as a process.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::SocketAddr;
use std::process::Child;
use std::time::{Duration, Instant};

/// A free loopback port (bound and released; the caller binds it again right away).
pub fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `N` distinct free loopback ports (all bound at once, then released; the caller binds
/// them again right away). Two calls of [`free_port`] may hand out the same port.
pub fn free_ports<const N: usize>() -> [SocketAddr; N] {
    let held: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap())
}

/// Wait until `p` accepts TCP connections on every one of `addrs` (at most 30 s); an
/// error when the process exits first (e.g. a port taken between choosing and binding)
/// or the time runs out.
pub async fn wait_child_listening(p: &mut Proc, addrs: &[SocketAddr]) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    for addr in addrs {
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if let Some(status) = p.0.try_wait().unwrap() {
                return Err(format!(
                    "the process exited ({status}) before listening on {addr}"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!("nothing listening on {addr} after 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// A child process killed and reaped on drop, so a failing test leaves nothing behind.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `floodgate proxy --config cfg` as a fleet node runs it (one worker thread, warnings
/// only, output discarded), after `--check-config` has accepted the file (its stderr
/// is the assertion's message otherwise). The caller waits for it to listen.
pub fn checked_proxy(cfg: &std::path::Path) -> Proc {
    let bin = env!("CARGO_BIN_EXE_floodgate");
    let check = std::process::Command::new(bin)
        .args(["proxy", "--check-config", "--config"])
        .arg(cfg)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let child = std::process::Command::new(bin)
        .args(["proxy", "--threads", "1", "--config"])
        .arg(cfg)
        .env("FLOODGATE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    Proc(child)
}

/// Wait until something accepts TCP connections on `addr` (at most 30 s).
pub async fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "nothing listening on {addr}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A backend answering `200 ok` to everything, on a free loopback port.
pub async fn ok_backend() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let app = axum::Router::new().fallback(|| async { "ok" });
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    addr
}

/// Send `req` to `addr` over a fresh HTTP/1.1 connection: the status and the body.
pub async fn http_send(
    addr: SocketAddr,
    req: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> (u16, String) {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// `GET http://{addr}{path}`: the status and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let req = http::Request::get(path)
        .header("host", addr.to_string())
        .body(Default::default())
        .unwrap();
    http_send(addr, req).await
}

/// `POST http://{addr}{path}` with a JSON body: the status.
pub async fn http_post_json(addr: SocketAddr, path: &str, body: String) -> u16 {
    let req = http::Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    http_send(addr, req).await.0
}

/// A backend on a free loopback port (HTTP/1 and h2c) answering every request with
/// `handle`'s response; it serves until the test ends.
pub async fn serve<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<http_body_util::Full<bytes::Bytes>>>
        + Send
        + 'static,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let reply = handle(req);
                    async move { Ok::<_, std::convert::Infallible>(reply.await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                .await;
            });
        }
    });
    addr
}

/// Delete every key under `prefix` on the shared Redis (127.0.0.1:6379), with redis-cli.
pub fn delete_redis_keys(prefix: &str) {
    let Ok(keys) = std::process::Command::new("redis-cli")
        .args(["-p", "6379", "--scan", "--pattern"])
        .arg(format!("{prefix}*"))
        .output()
    else {
        return;
    };
    for k in String::from_utf8_lossy(&keys.stdout).lines() {
        let _ = std::process::Command::new("redis-cli")
            .args(["-p", "6379", "del", k])
            .output();
    }
}

/// A redis-server of the test's own on `port` (nothing on disk), killed on drop; ready
/// when returned.
pub fn start_redis(port: u16) -> Proc {
    let child = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-server (Debian package redis-server)");
    let p = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "ping"])
            .output()
            .expect("redis-cli");
        if String::from_utf8_lossy(&out.stdout).trim() == "PONG" {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "redis-server on {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `app` served on a free loopback port from a thread of its own (a current-thread
/// runtime), for as long as the test runs: its address.
pub fn serve_axum(app: axum::Router) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}
