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

/// A child process killed and reaped on drop, so a failing test leaves nothing behind.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait until something accepts TCP connections on `addr` (at most 30 s).
pub async fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "nothing listening on {addr}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
