//! Real processes under test: our own `redis-server` on a free loopback port, and the
//! `floodgate proxy` binary started from a TOML config. Both are killed when dropped.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::mem;

/// Why a process under test could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A process did not become ready in time.
    #[error("{what} not ready within {after:?}{detail}")]
    NotReady {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
        /// Its stderr, when there is some.
        detail: String,
    },
    /// A local file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The floodgate binary was not found.
    #[error(
        "the floodgate binary was not found ({0}); build it (cargo build --release --bin floodgate) or set FLOODGATE_BIN"
    )]
    NoBinary(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}

/// A free TCP port on 127.0.0.1 (bound then released: a tiny race with other programs).
pub fn free_port() -> Result<u16, HarnessError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(io("bind 127.0.0.1:0"))
}

/// A fresh temporary directory for one process under test.
pub fn temp_dir(name: &str) -> Result<PathBuf, HarnessError> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floodgate-rel-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    Ok(dir)
}

/// The `floodgate` binary: `FLOODGATE_BIN`, else `floodgate` next to the running
/// executable (`target/release/floodgate` beside `target/release/floodgate-reliability`).
pub fn find_floodgate_bin() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os("FLOODGATE_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(HarnessError::NoBinary(format!(
                "FLOODGATE_BIN={} is not a file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(io("current_exe"))?;
    let mut dirs = Vec::new();
    if let Some(d) = exe.parent() {
        dirs.push(d.to_path_buf());
        if let Some(up) = d.parent() {
            dirs.push(up.to_path_buf()); // target/debug/deps -> target/debug
        }
    }
    for d in &dirs {
        let p = d.join("floodgate");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(HarnessError::NoBinary(format!(
        "looked in {}",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Our own `redis-server --save "" --appendonly no` on a free loopback port.
#[derive(Debug)]
pub struct RedisServer {
    /// Its port.
    pub port: u16,
    /// The address it binds (127.0.0.1 unless started in a namespace).
    pub host: std::net::IpAddr,
    netns: Option<String>,
    extra: Vec<String>,
    child: Option<Child>,
    dir: PathBuf,
}

impl RedisServer {
    /// Start one and wait until it answers `PING`.
    pub fn start() -> Result<RedisServer, HarnessError> {
        let port = free_port()?;
        RedisServer::start_at(None, [127, 0, 0, 1].into(), port, &[])
    }

    /// Start one inside network namespace `netns` (by name; `None`: this one) bound to
    /// `host:port`, with `extra` arguments (e.g. `--replicaof`).
    pub fn start_at(
        netns: Option<&str>,
        host: std::net::IpAddr,
        port: u16,
        extra: &[&str],
    ) -> Result<RedisServer, HarnessError> {
        let mut s = RedisServer {
            port,
            host,
            netns: netns.map(str::to_owned),
            extra: extra.iter().map(|e| e.to_string()).collect(),
            child: None,
            dir: temp_dir("redis")?,
        };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> Result<(), HarnessError> {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "redis-server"]);
                c
            }
            None => Command::new("redis-server"),
        };
        let child = cmd
            .args(["--port", &self.port.to_string()])
            .args(["--bind", &self.host.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                program: "redis-server".into(),
                source,
            })?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&self) -> Result<(), HarnessError> {
        let after = Duration::from_secs(10);
        let deadline = Instant::now() + after;
        while Instant::now() < deadline {
            if self.cli(&["PING"]) == "PONG" {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(HarnessError::NotReady {
            what: format!("redis-server on port {}", self.port),
            after,
            detail: String::new(),
        })
    }

    /// `redis://HOST:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://{}:{}/", self.host, self.port)
    }

    /// Its process id (0 when it is not running).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the process keeps its sockets but answers nothing.
    pub fn pause(&self) -> bool {
        signal(self.pid(), "-STOP")
    }

    /// SIGCONT.
    pub fn resume(&self) -> bool {
        signal(self.pid(), "-CONT")
    }

    /// Start again on the same port, empty (after [`kill`](Self::kill), or kills first).
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        self.spawn()
    }

    /// Run `redis-cli -p PORT ARGS...`; its trimmed stdout (empty when it failed).
    pub fn cli(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-h", &self.host.to_string(), "-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.resume();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `floodgate proxy --config FILE` process; its stderr goes to a file read by
/// [`stderr`](Self::stderr). Killed on drop.
#[derive(Debug)]
pub struct ProxyProcess {
    child: Child,
    /// Where clients connect.
    pub listen: SocketAddr,
    /// The admin listener (`/metrics`, `/healthz`).
    pub admin: SocketAddr,
    dir: PathBuf,
}

impl ProxyProcess {
    /// Write `config` (a TOML document without `listen`/`admin`, which are chosen here)
    /// to a file and start `bin proxy --config FILE`; wait until `/healthz` answers.
    pub async fn start(bin: &Path, name: &str, config: &str) -> Result<ProxyProcess, HarnessError> {
        let (listen, admin) = (
            SocketAddr::from(([127, 0, 0, 1], free_port()?)),
            SocketAddr::from(([127, 0, 0, 1], free_port()?)),
        );
        ProxyProcess::start_at(bin, name, config, None, listen, admin, &[]).await
    }

    /// As [`start`](Self::start), inside network namespace `netns` (by name; `None`:
    /// this one), listening on `listen` and `admin` (reachable from here), with `env`
    /// added to its environment.
    pub async fn start_at(
        bin: &Path,
        name: &str,
        config: &str,
        netns: Option<&str>,
        listen: SocketAddr,
        admin: SocketAddr,
        env: &[(String, String)],
    ) -> Result<ProxyProcess, HarnessError> {
        let dir = temp_dir(name)?;
        let path = dir.join("floodgate.toml");
        let full = format!("listen = \"{listen}\"\nadmin = \"{admin}\"\n{config}");
        std::fs::write(&path, full).map_err(io(format!("write {}", path.display())))?;
        let err = File::create(dir.join("stderr")).map_err(io("create stderr file"))?;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .args(["proxy", "--threads", "2", "--config"])
            .arg(&path)
            .env("FLOODGATE_LOG", "warn")
            .env("RUST_BACKTRACE", "1")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                program: bin.display().to_string(),
                source,
            })?;
        let mut p = ProxyProcess {
            child,
            listen,
            admin,
            dir,
        };
        let after = Duration::from_secs(20);
        let deadline = Instant::now() + after;
        loop {
            if crate::load::get_text(admin, "/healthz").await.is_some() {
                return Ok(p);
            }
            if Instant::now() > deadline || !p.alive() {
                return Err(HarnessError::NotReady {
                    what: format!("floodgate proxy ({name})"),
                    after,
                    detail: format!(": {}", p.stderr().trim()),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Everything it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// Whether its stderr reports a panic.
    pub fn panicked(&self) -> bool {
        self.stderr().contains("panicked")
    }

    /// Resident memory, KiB.
    pub fn rss_kib(&self) -> u64 {
        mem::rss_kib_of(self.pid())
    }

    /// Open file descriptors.
    pub fn fds(&self) -> u64 {
        mem::open_fds_of(self.pid())
    }

    /// The `/metrics` text (empty when it cannot be read).
    pub async fn metrics(&self) -> String {
        crate::load::get_text(self.admin, "/metrics")
            .await
            .unwrap_or_default()
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // FLOODGATE_REL_KEEP=1 keeps the config and stderr for a post-mortem
        if std::env::var_os("FLOODGATE_REL_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Sum of a Prometheus counter family in `/metrics` text: every sample line of `name`
/// (with any labels) whose labels contain `label` (e.g. `outcome="passed"`, or "" for all).
pub fn metric_sum(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest),
                None => (series, ""),
            };
            (n == name && labels.contains(label)).then(|| value.parse::<f64>().ok())?
        })
        .map(|v| v as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::metric_sum;

    #[test]
    fn sums_a_family_by_label() {
        let text = "# TYPE floodgate_requests counter\n\
            floodgate_requests_total{outcome=\"passed\"} 7\n\
            floodgate_requests_total{outcome=\"rejected\"} 3\n\
            floodgate_requests_totalx 99\n\
            floodgate_store_errors_total 2\n# EOF\n";
        assert_eq!(metric_sum(text, "floodgate_requests_total", ""), 10);
        assert_eq!(
            metric_sum(text, "floodgate_requests_total", "outcome=\"rejected\""),
            3
        );
        assert_eq!(metric_sum(text, "floodgate_store_errors_total", ""), 2);
        assert_eq!(metric_sum(text, "missing", ""), 0);
    }
}
