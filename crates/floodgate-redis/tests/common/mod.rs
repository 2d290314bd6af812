//! Test helpers: our own redis-server processes on free loopback ports, unique prefixes on
//! the shared Redis (127.0.0.1:6379), and the "every key has a TTL" check.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::algorithms::*;
use floodgate_core::{AnyAlgorithm, Rate};
use floodgate_redis::{RedisStore, StoreConfig};

pub const SHARED: &str = "redis://127.0.0.1:6379";

/// The Redis module's test support: `module_path()` builds and finds the module.
#[path = "../../../floodgate-redis-module/tests/support/mod.rs"]
pub mod module_support;

/// `--loadmodule` and the built module, for [`Server::start_with`].
pub fn load_module_args() -> Vec<String> {
    vec![
        "--loadmodule".into(),
        module_support::module_path().display().to_string(),
    ]
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A prefix no other test run uses.
pub fn unique_prefix(name: &str) -> String {
    format!(
        "fgtest:{name}:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    )
}

/// A redis-server of our own: killed on drop.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
    pub dir: PathBuf,
    extra: Vec<String>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A redis-server with floodgate's module loaded.
    pub fn start_with_module() -> Server {
        let args = load_module_args();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_with(&refs)
    }

    pub fn start_with(extra: &[&str]) -> Server {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("fg-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Server {
            port,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        self.child = Some(child);
        self.wait_ready();
    }

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = Command::new("redis-cli")
                .args(["-p", &self.port.to_string(), "ping"])
                .output()
                .unwrap();
            let reply = String::from_utf8_lossy(&out.stdout);
            if reply.trim() == "PONG" || reply.contains("NOAUTH") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Start again on the same port (after [`kill`](Self::kill)).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A store for simulated time: caller instants far from the server's clock, so keys are
/// kept 10 minutes past full capacity; no deny cache; the module as `module` says.
pub fn sim_config(prefix: &str, module: floodgate_redis::ModuleUse) -> StoreConfig {
    StoreConfig {
        prefix: prefix.to_string(),
        timeout: Duration::from_secs(5),
        expiry_padding: Duration::from_secs(600),
        deny_cache_keys: 0,
        module,
        ..StoreConfig::default()
    }
}

/// A redis-server of the test's own with floodgate's module loaded, and a store on it
/// that uses the module ([`sim_config`]).
pub async fn module_store(prefix: &str) -> (Server, Arc<RedisStore>) {
    let server = Server::start_with_module();
    let config = sim_config(prefix, floodgate_redis::ModuleUse::Always);
    let store = store_with(&server.url(), config).await;
    assert!(store.uses_module());
    (server, store)
}

/// Calls of `command` (lower case) in our own server's `INFO commandstats`.
pub fn calls(server: &Server, command: &str) -> u64 {
    commandstats(server).get(command).copied().unwrap_or(0)
}

pub async fn store(url: &str, prefix: &str) -> Arc<RedisStore> {
    store_with(
        url,
        StoreConfig {
            prefix: prefix.to_string(),
            timeout: Duration::from_secs(2),
            ..StoreConfig::default()
        },
    )
    .await
}

pub async fn store_with(url: &str, config: StoreConfig) -> Arc<RedisStore> {
    Arc::new(RedisStore::connect(url, config).await.expect("connect"))
}

/// All keys under `prefix` (SCAN), with their PTTL.
pub async fn keys_with_pttl(store: &RedisStore, prefix: &str) -> Vec<(Vec<u8>, i64)> {
    let mut cursor = 0u64;
    let mut out = Vec::new();
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = store
            .command(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{prefix}*"))
                    .arg("COUNT")
                    .arg(1000),
            )
            .await
            .unwrap();
        for k in keys {
            let pttl: i64 = store.command(redis::cmd("PTTL").arg(&k)).await.unwrap();
            out.push((k, pttl));
        }
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

/// Every key under `prefix` has a TTL; then delete them all. Returns how many there were.
pub async fn assert_ttls_and_clean(store: &RedisStore, prefix: &str) -> usize {
    let keys = keys_with_pttl(store, prefix).await;
    for (k, pttl) in &keys {
        assert!(
            *pttl > 0,
            "key {:?} has PTTL {pttl}",
            String::from_utf8_lossy(k)
        );
    }
    for (k, _) in &keys {
        let _: i64 = store.command(redis::cmd("DEL").arg(k)).await.unwrap();
    }
    keys.len()
}

/// A plain multiplexed connection (for commands the store does not wrap).
pub async fn raw_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// `INFO commandstats` of our own server as command -> calls.
pub fn commandstats(server: &Server) -> std::collections::HashMap<String, u64> {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_string(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

pub fn rate(count: u64, period_ns: u64) -> Rate {
    Rate::from_nanos(count, period_ns).unwrap()
}

/// Configurations per algorithm: small and simple, odd rates whose products overflow
/// 2^53 (exercising the exact limb arithmetic), and near the 2^50 bounds (GCRA's: near
/// 2^53).
pub fn configs() -> Vec<(AnyAlgorithm, u64)> {
    let s = 1_000_000_000u64;
    let mut v: Vec<(AnyAlgorithm, u64)> = Vec::new();
    for (limit, w) in [
        (5, s),
        (100, 60 * s),
        (7, 13 * s + 1),
        (1000, 3_700_000_001),
        (3, 10_000),
        (1 << 40, 86_400 * 12 * s),
    ] {
        v.push((
            AnyAlgorithm::FixedWindow(FixedWindow::new(limit, Duration::from_nanos(w)).unwrap()),
            w,
        ));
        v.push((
            AnyAlgorithm::SlidingCounter(
                SlidingCounter::new(limit, Duration::from_nanos(w)).unwrap(),
            ),
            w,
        ));
        if limit < 5000 {
            v.push((
                AnyAlgorithm::SlidingLog(SlidingLog::new(limit, Duration::from_nanos(w)).unwrap()),
                w,
            ));
        }
    }
    for (cap, r) in [
        (10, rate(2, s)),
        (100, rate(100, 60 * s)),
        (1000, rate(7, 13 * s + 1)),
        (3, rate(999_983, 1_000_003 * 1000)),
        (1_000_000, rate(1_000_000, 1_000 * s)),
        (5, Rate::per_second_f64(2.5).unwrap()),
    ] {
        let horizon = r.period_nanos().saturating_mul(cap) / r.count();
        v.push((
            AnyAlgorithm::TokenBucket(TokenBucket::new(cap, r).unwrap()),
            horizon.max(1000),
        ));
        v.push((
            AnyAlgorithm::Leaky(LeakyBucket::meter(cap, r).unwrap()),
            horizon.max(1000),
        ));
        v.push((
            AnyAlgorithm::Leaky(LeakyBucket::queue(r, cap - 1, DelayMode::After(0)).unwrap()),
            horizon.max(1000),
        ));
        v.push((
            AnyAlgorithm::Leaky(
                LeakyBucket::queue(r, cap - 1, DelayMode::After((cap - 1) / 2)).unwrap(),
            ),
            horizon.max(1000),
        ));
        v.push((
            AnyAlgorithm::Gcra(Gcra::new(r, cap).unwrap()),
            horizon.max(1000),
        ));
    }
    v.push((
        AnyAlgorithm::Gcra(Gcra::from_cell(15, 30, 60).unwrap()),
        32 * s,
    ));
    // CL.THROTTLE's widest common case: bursts of 100 at 1 per day (tau = 101 days, above
    // 2^50 ns, below GCRA's bound of 2^53 - 2^30); and bursts of 102 (tau = 103 days:
    // with the steps back of up to a day, the lead of the TAT stays below 2^53)
    for burst in [100, 102] {
        v.push((
            AnyAlgorithm::Gcra(Gcra::from_cell(burst, 1, 86_400).unwrap()),
            86_400 * s,
        ));
    }
    v
}
