//! The fleet harness: Redis and N `floodgate proxy` nodes, each in its own network
//! namespace ([`crate::netns`]), a fault-injecting [`Relay`] between every node and
//! Redis, a backend that records every admitted request with its arrival time, and
//! clients sending from their own namespace.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::load::{Load, Sample, Worker};
use crate::net::Backend;
use crate::netns::{self, FleetNet, NetnsError};
use crate::procs::{HarnessError, ProxyProcess, RedisServer};
use crate::relay::Relay;

/// Why a fleet could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The namespaces.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A process or socket.
    #[error(transparent)]
    Harness(#[from] HarnessError),
}

/// Redis's port in its namespace (the address is the namespace's own).
pub const REDIS_PORT: u16 = 6379;
/// Each node's client port and admin port on its front address.
pub const NODE_PORT: u16 = 8080;
/// Each node's admin port.
pub const ADMIN_PORT: u16 = 9090;
/// The replica's port, beside Redis in its namespace (with `--sentinel`).
pub const REPLICA_PORT: u16 = 6380;
/// Sentinel's port there.
pub const SENTINEL_PORT: u16 = 26379;
/// The name Sentinel monitors the primary under.
pub const SENTINEL_NAME: &str = "fg";

/// A Redis Sentinel (`redis-sentinel`, or `redis-server --sentinel`: the same program)
/// watching the primary with a quorum of 1; killed on drop.
#[derive(Debug)]
pub struct Sentinel {
    child: std::process::Child,
    /// Where it listens.
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Sentinel {
    fn start(ns: &str, host: IpAddr, primary: SocketAddr) -> Result<Sentinel, HarnessError> {
        let dir = crate::procs::temp_dir("sentinel")?;
        let conf = dir.join("sentinel.conf");
        let text = format!(
            "port {SENTINEL_PORT}\nbind {host}\nprotected-mode no\ndir {dir}\n\
             sentinel monitor {SENTINEL_NAME} {ip} {port} 1\n\
             sentinel down-after-milliseconds {SENTINEL_NAME} 500\n\
             sentinel failover-timeout {SENTINEL_NAME} 3000\n",
            dir = dir.display(),
            ip = primary.ip(),
            port = primary.port(),
        );
        std::fs::write(&conf, text).map_err(|source| HarnessError::Io {
            what: format!("write {}", conf.display()),
            source,
        })?;
        let program = if std::process::Command::new("redis-sentinel")
            .arg("--version")
            .output()
            .is_ok()
        {
            "redis-sentinel"
        } else {
            "redis-server"
        };
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", ns, program])
            .arg(&conf)
            .arg("--sentinel")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                program: program.into(),
                source,
            })?;
        let s = Sentinel {
            child,
            addr: SocketAddr::new(host, SENTINEL_PORT),
            dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while s.primary().is_none() {
            if std::time::Instant::now() > deadline {
                return Err(HarnessError::NotReady {
                    what: "redis sentinel".into(),
                    after: Duration::from_secs(10),
                    detail: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(s)
    }

    /// The primary it names now (`SENTINEL get-master-addr-by-name`).
    pub fn primary(&self) -> Option<SocketAddr> {
        let out = std::process::Command::new("redis-cli")
            .args(["-h", &self.addr.ip().to_string()])
            .args(["-p", &self.addr.port().to_string()])
            .args(["SENTINEL", "get-master-addr-by-name", SENTINEL_NAME])
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut l = text.lines();
        let ip: IpAddr = l.next()?.trim().parse().ok()?;
        let port: u16 = l.next()?.trim().parse().ok()?;
        Some(SocketAddr::new(ip, port))
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How the nodes are configured.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// `fleet.strategy`: `shared` or `hybrid` (on Redis), `local` or `sticky` (in
    /// process: no `[store]` section, the relays idle).
    pub strategy: &'static str,
    /// `store.redis.fault_policy`: `fail-open` or `fail-closed` (unused in process).
    pub fault_policy: &'static str,
    /// `store.redis.timeout`.
    pub store_timeout: Duration,
    /// `fleet.lease` (hybrid).
    pub lease: u64,
    /// The policy's TOML `rate` (`20/s`).
    pub rate: String,
    /// The policy's `burst` (capacity `burst + 1`).
    pub burst: u64,
    /// A key prefix unique to the run.
    pub prefix: String,
    /// `store.redis.time`: `redis` or `caller`.
    pub time: &'static str,
    /// Run node 0 under libfaketime, its clock steppable ([`Fleet::clock`]).
    pub fake_clock: bool,
}

/// A running fleet. Dropping it stops every process, then removes the namespaces.
#[derive(Debug)]
pub struct Fleet {
    /// The `floodgate` binary.
    pub bin: PathBuf,
    /// The node configuration.
    pub cfg: NodeConfig,
    /// Every node's process (`None` while killed).
    pub nodes: Vec<Option<ProxyProcess>>,
    /// The relays, node i's at index i.
    pub relays: Vec<Relay>,
    /// The backend, on the front bridge.
    pub backend: Backend,
    /// Node 0's clock, when [`NodeConfig::fake_clock`] asked for it.
    pub clock: Option<crate::netclock::FakeClock>,
    /// Sentinel, when the fleet has a replica.
    pub sentinel: Option<Sentinel>,
    /// The replica (of `redis`), when asked for.
    pub replica: Option<RedisServer>,
    /// Redis, in its namespace (the primary).
    pub redis: RedisServer,
    /// The network (last: removed after the processes are gone).
    pub net: FleetNet,
}

impl Fleet {
    /// Build the network and start everything for `n` nodes; with `sentinel`, a replica
    /// and a Sentinel beside Redis.
    pub async fn start(
        bin: PathBuf,
        n: usize,
        cfg: NodeConfig,
        tag: char,
        sentinel: bool,
    ) -> Result<Fleet, FleetError> {
        let net = tokio::task::block_in_place(|| FleetNet::build(n, tag))?;
        let redis = tokio::task::block_in_place(|| {
            RedisServer::start_at(
                Some(&net.redis.name),
                IpAddr::V4(net.redis_link.inner_ip),
                REDIS_PORT,
                &["--protected-mode", "no"],
            )
        })?;
        let host = IpAddr::V4(net.redis_link.inner_ip);
        let target = SocketAddr::new(host, REDIS_PORT);
        let (replica, sentinel) = if sentinel {
            tokio::task::block_in_place(|| -> Result<_, HarnessError> {
                let replica = RedisServer::start_at(
                    Some(&net.redis.name),
                    host,
                    REPLICA_PORT,
                    &[
                        "--protected-mode",
                        "no",
                        "--replicaof",
                        &host.to_string(),
                        &REDIS_PORT.to_string(),
                    ],
                )?;
                let s = Sentinel::start(&net.redis.name, host, target)?;
                Ok((Some(replica), Some(s)))
            })?
        } else {
            (None, None)
        };
        let backend = Backend::start_on(SocketAddr::from((net.front_host, 0))).await?;
        let mut relays = Vec::new();
        for l in &net.store_links {
            relays.push(Relay::start(SocketAddr::from((l.host_ip, REDIS_PORT)), target).await?);
        }
        let clock = if cfg.fake_clock {
            let c = crate::netclock::FakeClock::new()?;
            Some(c.ok_or_else(|| HarnessError::Spawn {
                program: "libfaketime".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not installed (Debian package faketime)",
                ),
            })?)
        } else {
            None
        };
        let mut fleet = Fleet {
            clock,
            bin,
            cfg,
            nodes: (0..n).map(|_| None).collect(),
            relays,
            backend,
            sentinel,
            replica,
            redis,
            net,
        };
        for i in 0..n {
            fleet.start_node(i).await?;
        }
        Ok(fleet)
    }

    /// Node i's client address.
    pub fn node_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((self.net.node_front[i], NODE_PORT))
    }

    /// Node i's configuration file (without `listen` and `admin`).
    pub fn config(&self, i: usize) -> String {
        let c = &self.cfg;
        let nodes = (0..self.net.nodes.len())
            .map(|j| format!("\"{}\"", self.node_addr(j)))
            .collect::<Vec<_>>()
            .join(", ");
        let lease = if c.strategy == "hybrid" {
            format!("lease = {}\nlease_ttl = \"1s\"\n", c.lease)
        } else {
            String::new()
        };
        let store = if matches!(c.strategy, "shared" | "hybrid") {
            format!(
                "[store]\ntype = \"redis\"\n\n[store.redis]\nurl = \"redis://{relay}/\"\n\
                 prefix = \"{prefix}\"\ntimeout = \"{timeout}ms\"\nfault_policy = \"{policy}\"\ntime = \"{time}\"\n",
                relay = self.relays[i].addr,
                prefix = c.prefix,
                timeout = c.store_timeout.as_millis(),
                policy = c.fault_policy,
                time = c.time,
            )
        } else {
            String::new()
        };
        format!(
            r#"upstream = "http://{upstream}"
upstream_timeout = "5s"
connect_timeout = "1s"
shutdown_grace = "1s"

{store}
[fleet]
strategy = "{strategy}"
nodes = [{nodes}]
self = "{me}"
{lease}
[headers]
retry_after_jitter = "0s"

[[policy]]
name = "api"
algorithm = "gcra"
rate = "{rate}"
burst = {burst}
key = "header:x-client"
"#,
            upstream = self.backend.addr,
            strategy = c.strategy,
            me = self.node_addr(i),
            rate = c.rate,
            burst = c.burst,
        )
    }

    /// Start node i (again, after [`kill_node`](Self::kill_node)).
    pub async fn start_node(&mut self, i: usize) -> Result<(), FleetError> {
        let cfg = self.config(i);
        let env = match (&self.clock, i) {
            (Some(c), 0) => c.env(),
            _ => Vec::new(),
        };
        let p = ProxyProcess::start_at(
            &self.bin,
            &format!("node{i}"),
            &cfg,
            Some(&self.net.nodes[i].name),
            self.node_addr(i),
            SocketAddr::from((self.net.node_front[i], ADMIN_PORT)),
            &env,
        )
        .await?;
        self.nodes[i] = Some(p);
        Ok(())
    }

    /// SIGKILL node i.
    pub fn kill_node(&mut self, i: usize) {
        self.nodes[i] = None;
    }

    /// Stop the processes (before the network goes).
    pub fn stop(&mut self) {
        for n in &mut self.nodes {
            *n = None;
        }
        self.sentinel = None;
        self.replica = None;
        self.redis.kill();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the clients return: every sample and the workers that panicked.
type ClientsResult = Result<(Vec<Sample>, u64), NetnsError>;

/// Clients running in the client namespace, on their own thread and runtime (every
/// socket they open belongs to that namespace).
#[derive(Debug)]
pub struct Clients {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<ClientsResult>>,
}

impl Clients {
    /// Start `workers` from namespace `ns`; `hang` bounds every request.
    pub fn start(ns: &str, workers: Vec<Worker>, hang: Duration) -> Clients {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let ns = ns.to_string();
        let thread = std::thread::spawn(move || {
            netns::enter(&ns)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| NetnsError::Enter {
                    name: ns.clone(),
                    source,
                })?;
            Ok(rt.block_on(async move {
                let load = Load::start(workers, hang);
                let _ = rx.await;
                load.stop().await
            }))
        });
        Clients {
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// Stop and collect every sample (sorted by send time) and the workers that panicked.
    pub async fn stop(mut self) -> ClientsResult {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let t = self.thread.take();
        tokio::task::spawn_blocking(move || match t.map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Ok((Vec::new(), 1)),
        })
        .await
        .unwrap_or(Ok((Vec::new(), 1)))
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
