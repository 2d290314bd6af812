//! Shared by the module's tests and the workspace's `tests/redis_cell_diff.rs`: the built
//! module, and redis-servers of a test's own on free ports (never the shared 6379).
//! Standard library only, so any test crate can include it with `#[path]`.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A child process killed and reaped on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `target/debug/libfloodgate_redis_module.so`, built first (`cargo build -p
/// floodgate-redis-module`: a no-op when the workspace build made it already) in the
/// target directory this test was built in, so a clean clone's `cargo test` finds it.
/// `FLOODGATE_REDIS_MODULE=path` names a module built already instead (no cargo run:
/// for a machine whose cargo locks are busy with other builds).
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(given) = std::env::var_os("FLOODGATE_REDIS_MODULE") {
            let so = PathBuf::from(given);
            assert!(so.is_file(), "FLOODGATE_REDIS_MODULE={so:?} is not a file");
            return so;
        }
        // this test runs from <target>/<profile>/deps/
        let exe = std::env::current_exe().expect("the test's own path");
        let target = exe
            .ancestors()
            .nth(3)
            .expect("the test runs from <target>/<profile>/deps")
            .to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(&cargo)
            .args(["build", "--quiet", "-p", "floodgate-redis-module"])
            .arg("--target-dir")
            .arg(&target)
            .current_dir(manifest)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
        assert!(
            out.status.success(),
            "cargo build -p floodgate-redis-module failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let so = target.join("debug/libfloodgate_redis_module.so");
        assert!(so.is_file(), "{so:?} is not there after the build");
        so
    })
    .clone()
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Wait until something listens on `port` (20 s at most).
pub fn wait_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} is not listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A redis-server of the test's own on a free port, without persistence, with `module`
/// loaded (if any) and `extra` arguments; its log goes to `dir/redis-PORT.log`.
pub fn start_redis(module: Option<&Path>, dir: &Path, extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--logfile")
        .arg(dir.join(format!("redis-{port}.log")))
        .arg("--dir")
        .arg(dir);
    if let Some(m) = module {
        cmd.arg("--loadmodule").arg(m);
    }
    let child = cmd
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed");
    let proc = Proc(child);
    wait_port(port, "redis-server");
    (proc, port)
}
