//! Network namespaces for the fleet harness: a Redis namespace, one per node and a client
//! namespace, joined by veth pairs to the suite's own (root) namespace, where the
//! fault-injecting relays and the backend run.
//!
//! ```text
//!   client ns ──┐                                  ┌── veth ── redis ns (redis-server)
//!   node ns 0 ──┤ front bridge (backend, root)     │
//!   node ns 1 ──┤                      root ns: relays 0..N ──┘
//!   node ns 2 ──┘        node ns i ── store veth i ──┘
//! ```
//!
//! Every node has two links: its front link (on a bridge with the client and the
//! backend) and its store link (a veth pair to the relay that leads to Redis). Taking a
//! node's store link down partitions it from Redis while clients still reach it. The
//! root namespace forwards nothing (`ip_forward` is left alone): a node reaches Redis only
//! through its relay.
//!
//! Names carry the process id (`fgnf-PID-...`, interfaces `fPID...`) and addresses come
//! from one `10.x.y.0/24` chosen from the pid and checked against the routes in use.
//! Everything is removed on drop (also when a panic unwinds), by [`cleanup_all`] (the
//! binary calls it on Ctrl-C and SIGTERM), and [`sweep_stale`] removes what a killed run
//! of an earlier process left.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Why the harness cannot build its namespaces.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// Namespaces cannot be made here (not root, no `ip`, no kernel support).
    #[error("network namespaces are not available here: {0}")]
    Unavailable(String),
    /// An `ip` command failed.
    #[error("`ip {args}` failed: {stderr}")]
    Ip {
        /// Its arguments.
        args: String,
        /// What it said.
        stderr: String,
    },
    /// Entering a namespace failed.
    #[error("cannot enter namespace {name}: {source}")]
    Enter {
        /// The namespace.
        name: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Run `ip ARGS`; its stdout.
pub fn ip(args: &[&str]) -> Result<String, NetnsError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| NetnsError::Unavailable(format!("cannot run `ip`: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetnsError::Ip {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Whether namespaces can be made here: root, `ip` present, and a throwaway namespace
/// can be added and removed. The error says why not.
pub fn available() -> Result<(), NetnsError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(NetnsError::Unavailable(
            "not root (ip netns needs CAP_SYS_ADMIN and CAP_NET_ADMIN)".into(),
        ));
    }
    let probe = format!("fgnf-{}-probe", std::process::id());
    ip(&["netns", "add", &probe]).map_err(|e| NetnsError::Unavailable(e.to_string()))?;
    let _ = ip(&["netns", "del", &probe]);
    Ok(())
}

/// What was made, so that it can be removed: namespaces and root-namespace links.
static MADE: Mutex<Vec<Made>> = Mutex::new(Vec::new());

#[derive(Debug, Clone, PartialEq, Eq)]
enum Made {
    Ns(String),
    Link(String),
}

fn remember(m: Made) {
    MADE.lock().unwrap_or_else(|e| e.into_inner()).push(m);
}

fn forget_and_remove(m: &Made) {
    MADE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|x| x != m);
    remove(m);
}

fn remove(m: &Made) {
    let _ = match m {
        Made::Ns(n) => {
            kill_inside(n);
            ip(&["netns", "del", n])
        }
        Made::Link(l) => ip(&["link", "del", l]),
    };
}

/// SIGKILL every process in namespace `name` (`ip netns pids`): none may outlive it.
fn kill_inside(name: &str) {
    let Ok(pids) = ip(&["netns", "pids", name]) else {
        return;
    };
    for pid in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill has no memory effects; a pid that is gone gives ESRCH.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Remove every namespace and link this process made and still holds, killing the
/// processes inside first (for a signal handler).
pub fn cleanup_all() {
    let all: Vec<Made> = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
    for m in all.iter().rev() {
        remove(m);
    }
}

/// Whether process `pid` runs (a zombie, killed but not yet reaped, does not).
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // "PID (comm) STATE ...": the state follows the last ')'
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Remove namespaces and links named by this harness whose process is gone (a run
/// killed with SIGKILL). Returns how many were removed.
pub fn sweep_stale() -> usize {
    let mut n = 0;
    if let Ok(list) = ip(&["netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            let Some(pid) = name
                .strip_prefix("fgnf-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !pid_alive(pid) {
                kill_inside(name);
                if ip(&["netns", "del", name]).is_ok() {
                    n += 1;
                }
            }
        }
    }
    if let Ok(list) = ip(&["-o", "link", "show"]) {
        for l in list.lines() {
            // "12: f1234ab@if11: <...>"
            let Some(name) = l.split(':').nth(1).map(|s| s.trim()) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            let Some(pid) = name.strip_prefix('f').and_then(|r| {
                let digits: String = r.chars().take_while(char::is_ascii_digit).collect();
                (r.len() > digits.len() && r.as_bytes()[digits.len()] == b'x')
                    .then(|| digits.parse::<u32>().ok())
                    .flatten()
            }) else {
                continue;
            };
            if !pid_alive(pid) && ip(&["link", "del", name]).is_ok() {
                n += 1;
            }
        }
    }
    n
}

/// Move the calling thread into namespace `name`: sockets it opens from then on belong
/// to it (a thread that serves a runtime for the client side).
pub fn enter(name: &str) -> Result<(), NetnsError> {
    let path = format!("/var/run/netns/{name}");
    let f = std::fs::File::open(&path).map_err(|source| NetnsError::Enter {
        name: name.to_string(),
        source,
    })?;
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor of a namespace file; setns changes only the
    // calling thread's network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(NetnsError::Enter {
            name: name.to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// A namespace this harness made; deleted on drop.
#[derive(Debug)]
pub struct Netns {
    /// Its name (`ip netns exec NAME ...`).
    pub name: String,
}

impl Netns {
    fn add(name: String) -> Result<Netns, NetnsError> {
        ip(&["netns", "add", &name])?;
        remember(Made::Ns(name.clone()));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<String, NetnsError> {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend_from_slice(args);
        ip(&a)
    }

    /// A command run inside the namespace (`ip netns exec NAME program`): `ip` enters
    /// it and execs the program, so the child's pid is the program's.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Move the calling thread into the namespace (see [`enter`]).
    pub fn enter(&self) -> Result<(), NetnsError> {
        enter(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        forget_and_remove(&Made::Ns(self.name.clone()));
    }
}

/// A link in the root namespace (the bridge); deleted on drop.
#[derive(Debug)]
struct RootLink(String);

impl Drop for RootLink {
    fn drop(&mut self) {
        forget_and_remove(&Made::Link(self.0.clone()));
    }
}

/// A veth pair between the root namespace (`host`, with `host_ip`) and a namespace
/// (`inner`, with `inner_ip`), each with a prefix of `prefix` bits.
#[derive(Debug, Clone)]
pub struct Veth {
    /// The root-namespace end.
    pub host: String,
    /// The end inside the namespace.
    pub inner: String,
    /// The root end's address ([`Ipv4Addr::UNSPECIFIED`] on a bridge port).
    pub host_ip: Ipv4Addr,
    /// The inner end's address.
    pub inner_ip: Ipv4Addr,
}

impl Veth {
    /// Take the root end down (packets both ways are dropped) or bring it up again.
    pub fn set_up(&self, up: bool) -> Result<(), NetnsError> {
        ip(&["link", "set", &self.host, if up { "up" } else { "down" }]).map(|_| ())
    }
}

fn veth(
    ns: &Netns,
    host: String,
    inner: String,
    host_ip: Option<(Ipv4Addr, u8)>,
    inner_ip: (Ipv4Addr, u8),
) -> Result<Veth, NetnsError> {
    ip(&[
        "link", "add", &host, "type", "veth", "peer", "name", &inner, "netns", &ns.name,
    ])?;
    // the root end goes with the namespace when it is deleted; remembered for a crash
    // between here and the namespace's deletion
    remember(Made::Link(host.clone()));
    if let Some((a, p)) = host_ip {
        ip(&["addr", "add", &format!("{a}/{p}"), "dev", &host])?;
    }
    ip(&["link", "set", &host, "up"])?;
    ns.ip(&[
        "addr",
        "add",
        &format!("{}/{}", inner_ip.0, inner_ip.1),
        "dev",
        &inner,
    ])?;
    ns.ip(&["link", "set", &inner, "up"])?;
    Ok(Veth {
        host,
        inner,
        host_ip: host_ip.map_or(Ipv4Addr::UNSPECIFIED, |h| h.0),
        inner_ip: inner_ip.0,
    })
}

/// The harness's network: see the module docs. Dropping it removes everything (the
/// processes inside must be gone first: the caller drops them before).
#[derive(Debug)]
pub struct FleetNet {
    /// The `/24` everything lives in (`10.x.y.0`).
    pub base: Ipv4Addr,
    /// The root namespace's address on the front bridge (the backend listens there).
    pub front_host: Ipv4Addr,
    /// The client namespace.
    pub client: Netns,
    /// The Redis namespace and its link (Redis listens on `redis_link.inner_ip`).
    pub redis: Netns,
    /// Redis's link; `host_ip` is where the relays connect from.
    pub redis_link: Veth,
    /// The nodes' namespaces.
    pub nodes: Vec<Netns>,
    /// Each node's front address (clients, admin).
    pub node_front: Vec<Ipv4Addr>,
    /// Each node's store link: the relay listens on `host_ip`, the node is `inner_ip`.
    pub store_links: Vec<Veth>,
    /// The root ends of every veth: deleted first (at once; a deleted namespace's
    /// links go a little later, in the kernel's own time).
    links: Vec<RootLink>,
    bridge: Option<RootLink>,
}

fn octets_free(b: [u8; 2]) -> bool {
    let prefix = format!("10.{}.{}.", b[0], b[1]);
    ip(&["-4", "addr", "show"]).is_ok_and(|a| !a.contains(&prefix))
        && ip(&["-4", "route", "show"]).is_ok_and(|r| !r.contains(&prefix))
}

impl FleetNet {
    /// Build the network for `nodes` nodes. `tag` (a letter) keeps the names of
    /// successive networks in one process apart.
    pub fn build(nodes: usize, tag: char) -> Result<FleetNet, NetnsError> {
        available()?;
        let pid = std::process::id();
        // a /24 in 10.128.0.0/9 from the pid, moved on while its prefix is in use
        let mut b = [128 | ((pid >> 8) & 0x7f) as u8, (pid & 0xff) as u8];
        let mut tries = 0;
        while !octets_free(b) {
            b[1] = b[1].wrapping_add(1);
            tries += 1;
            if tries > 256 {
                return Err(NetnsError::Unavailable("no free 10.x.y.0/24".into()));
            }
        }
        let a = |last: u8| Ipv4Addr::new(10, b[0], b[1], last);
        let ns = |what: &str| Netns::add(format!("fgnf-{pid}-{tag}-{what}"));
        let iface = |what: &str| format!("f{pid}x{tag}{what}");
        // front bridge: .1 root, .2 client, .10+i nodes (a /26)
        let br = iface("b");
        ip(&["link", "add", &br, "type", "bridge"])?;
        remember(Made::Link(br.clone()));
        let bridge = RootLink(br.clone());
        ip(&["addr", "add", &format!("{}/26", a(1)), "dev", &br])?;
        ip(&["link", "set", &br, "up"])?;
        let client = ns("client")?;
        let mut links = Vec::new();
        let mut on_bridge = |ns: &Netns, what: &str, addr: Ipv4Addr| -> Result<(), NetnsError> {
            let v = veth(ns, iface(what), "front".into(), None, (addr, 26))?;
            links.push(RootLink(v.host.clone()));
            ip(&["link", "set", &v.host, "master", &br])?;
            Ok(())
        };
        on_bridge(&client, "c", a(2))?;
        // Redis: .64/30
        let redis = ns("redis")?;
        let redis_link = veth(
            &redis,
            iface("r"),
            "store".into(),
            Some((a(65), 30)),
            (a(66), 30),
        )?;
        let mut node_ns = Vec::new();
        let mut node_front = Vec::new();
        let mut store_links = Vec::new();
        for i in 0..nodes {
            let n = ns(&format!("n{i}"))?;
            on_bridge(&n, &format!("{i}f"), a(10 + i as u8))?;
            node_front.push(a(10 + i as u8));
            // store link i: .(68 + 4i)/30, root .69+4i, node .70+4i
            let base = 68 + 4 * i as u8;
            store_links.push(veth(
                &n,
                iface(&format!("{i}s")),
                "store".into(),
                Some((a(base + 1), 30)),
                (a(base + 2), 30),
            )?);
            node_ns.push(n);
        }
        links.push(RootLink(redis_link.host.clone()));
        links.extend(store_links.iter().map(|l| RootLink(l.host.clone())));
        Ok(FleetNet {
            base: a(0),
            front_host: a(1),
            client,
            redis,
            redis_link,
            nodes: node_ns,
            node_front,
            store_links,
            links,
            bridge: Some(bridge),
        })
    }
}

impl Drop for FleetNet {
    fn drop(&mut self) {
        // the veths, the namespaces, then the bridge
        self.links.clear();
        self.nodes.clear();
        self.bridge.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    /// A listener on `ip` inside namespace `ns` (kept open for the test's length).
    fn listen_in(ns: &str, ip: Ipv4Addr) -> SocketAddr {
        let ns = ns.to_string();
        std::thread::spawn(move || {
            enter(&ns).unwrap();
            let l = TcpListener::bind((ip, 0)).unwrap();
            let a = l.local_addr().unwrap();
            std::mem::forget(l);
            a
        })
        .join()
        .unwrap()
    }

    fn listen_in_root(ip: Ipv4Addr) -> SocketAddr {
        let l = TcpListener::bind((ip, 0)).unwrap();
        let a = l.local_addr().unwrap();
        std::mem::forget(l);
        a
    }

    /// Whether a TCP connection from namespace `ns` to `to` succeeds within 500 ms.
    fn reaches(ns: &str, to: SocketAddr) -> bool {
        reaches_within(ns, to, Duration::from_millis(500))
    }

    fn reaches_within(ns: &str, to: SocketAddr, within: Duration) -> bool {
        let ns = ns.to_string();
        std::thread::spawn(move || {
            enter(&ns).unwrap();
            TcpStream::connect_timeout(&to, within).is_ok()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn builds_a_reachable_network_and_removes_it() {
        if let Err(e) = available() {
            panic!("network namespaces are needed (run as root): {e}");
        }
        let names;
        {
            let net = FleetNet::build(2, 'u').expect("the network");
            names = (
                net.client.name.clone(),
                net.store_links[1].host.clone(),
                net.redis.name.clone(),
            );
            // the client reaches a node's front address, a node reaches its relay's
            // address, and a node does not reach Redis
            let l_front = listen_in(&net.nodes[1].name, net.node_front[1]);
            let l_relay = listen_in_root(net.store_links[0].host_ip);
            let l_redis = listen_in(&net.redis.name, net.redis_link.inner_ip);
            assert!(reaches(&net.client.name, l_front));
            assert!(reaches(&net.nodes[0].name, l_relay));
            assert!(!reaches(&net.nodes[0].name, l_redis));
            assert!(reaches(&net.redis.name, l_redis));
            // a partition: the store link down, then healed
            net.store_links[0].set_up(false).unwrap();
            assert!(!reaches(&net.nodes[0].name, l_relay));
            net.store_links[0].set_up(true).unwrap();
            // (a SYN sent while the link comes up is retransmitted after 1 s)
            assert!(reaches_within(
                &net.nodes[0].name,
                l_relay,
                Duration::from_secs(3)
            ));
        }
        let list = ip(&["netns", "list"]).unwrap();
        assert!(
            !list.contains(&names.0) && !list.contains(&names.2),
            "{list}"
        );
        assert!(ip(&["link", "show", &names.1]).is_err());
    }
}
