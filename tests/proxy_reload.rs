//! `floodgate proxy --config` reloads its file on SIGHUP and when the file changes: the
//! real binary, a real backend, HTTP over loopback.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

mod common;
use common::{Proc, free_ports, http_get, ok_backend, wait_child_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// Two policies, each on its own route, counted per route for everyone (`global`): a
/// token bucket refilling one token an hour holds what was spent for the whole test.
fn config(upstream: SocketAddr, listen: SocketAddr, admin: SocketAddr, changed: u64) -> String {
    format!(
        r#"listen = "{listen}"
upstream = "http://{upstream}"
admin = "{admin}"

[[policy]]
name = "kept"
algorithm = "token-bucket"
rate = "1/h"
capacity = 5
key = "global"

[[policy]]
name = "changed"
algorithm = "token-bucket"
rate = "1/h"
capacity = {changed}
key = "global"

[[route]]
prefix = "/kept"
policies = ["kept"]

[[route]]
prefix = "/changed"
policies = ["changed"]
"#
    )
}

/// A running proxy with its standard error collected line by line.
struct Running {
    proc: Proc,
    stderr: Arc<Mutex<String>>,
    listen: SocketAddr,
    admin: SocketAddr,
}

impl Running {
    async fn start(path: &Path, listen: SocketAddr, admin: SocketAddr, extra: &[&str]) -> Running {
        let mut child = Command::new(BIN)
            .args(["proxy", "--threads", "2", "--config"])
            .arg(path)
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("FLOODGATE_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = out.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut proc = Proc(child);
        wait_child_listening(&mut proc, &[listen, admin])
            .await
            .unwrap();
        Running {
            proc,
            stderr,
            listen,
            admin,
        }
    }

    fn hup(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.proc.0.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -HUP failed");
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Wait (at most `within`) until the log holds `needle`.
    async fn wait_log(&self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log within {within:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn metrics(&self) -> String {
        http_get(self.admin, "/metrics").await.1
    }

    async fn get(&self, path: &str) -> u16 {
        http_get(self.listen, path).await.0
    }
}

/// One HTTP/1.1 connection kept open across requests.
struct KeepAlive(hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl KeepAlive {
    async fn open(addr: SocketAddr) -> KeepAlive {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        KeepAlive(send)
    }

    async fn get(&mut self, path: &str) -> u16 {
        self.0
            .ready()
            .await
            .expect("the kept connection was closed");
        let req = http::Request::get(path)
            .header("host", "proxy.test")
            .body(Full::default())
            .unwrap();
        self.0
            .send_request(req)
            .await
            .expect("the kept connection failed")
            .status()
            .as_u16()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_new_limit_keeps_counters_and_open_connections() {
    let upstream = ok_backend().await;
    let [listen, admin] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(upstream, listen, admin, 2)).unwrap();
    let p = Running::start(&path, listen, admin, &["--no-watch"]).await;
    let m = p.metrics().await;
    for result in ["ok", "error"] {
        let line = format!("floodgate_config_reloads_total{{result=\"{result}\"}} 0");
        assert!(m.contains(&line), "{line} missing before any reload:\n{m}");
    }
    // 3 of "kept"'s 5 spent; "changed" spent on a connection kept open
    for _ in 0..3 {
        assert_eq!(p.get("/kept").await, 200);
    }
    let mut conn = KeepAlive::open(listen).await;
    assert_eq!(conn.get("/changed").await, 200);
    assert_eq!(conn.get("/changed").await, 200);
    assert_eq!(conn.get("/changed").await, 429, "the old limit is 2");

    std::fs::write(&path, config(upstream, listen, admin, 50)).unwrap();
    let sent = Instant::now();
    p.hup();
    // the new limit applies within 1 s, on the connection opened before the reload
    loop {
        let status = conn.get("/changed").await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 429);
        assert!(
            sent.elapsed() < Duration::from_secs(1),
            "the new limit did not apply within 1 s:\n{}",
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..5 {
        assert_eq!(conn.get("/changed").await, 200, "the new limit is 50");
    }
    // the unchanged policy kept its count: 2 of 5 left
    assert_eq!(p.get("/kept").await, 200);
    assert_eq!(p.get("/kept").await, 200);
    assert_eq!(
        p.get("/kept").await,
        429,
        "the unchanged policy's count was kept"
    );

    p.wait_log("config reloaded", Duration::from_secs(5)).await;
    let m = p.metrics().await;
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"ok\"} 1"),
        "{m}"
    );
    // the decision counters went on counting across the reload
    assert!(
        m.contains("floodgate_decisions_total{policy=\"kept\",outcome=\"passed\"} 5"),
        "{m}"
    );
    let (status, overview) = http_get(admin, "/admin/api/overview").await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&overview).unwrap();
    let reloads = v["reloads"].as_array().unwrap();
    let last = reloads.last().unwrap();
    assert_eq!(last["generation"], 2, "{overview}");
    assert_eq!(last["ok"], true, "{overview}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_is_refused_with_its_place_and_the_old_config_keeps_serving() {
    let upstream = ok_backend().await;
    let [listen, admin] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(upstream, listen, admin, 2)).unwrap();
    let p = Running::start(&path, listen, admin, &["--no-watch"]).await;
    assert_eq!(p.get("/changed").await, 200);
    let bad = config(upstream, listen, admin, 50).replace("rate = \"1/h\"", "rate = \"10/q\"");
    std::fs::write(&path, bad).unwrap();
    p.hup();
    p.wait_log("config reload refused", Duration::from_secs(5))
        .await;
    // line 8, column 8: the first policy's rate value
    let place = format!("{}:8:8", path.display());
    assert!(p.log().contains(&place), "no {place} in:\n{}", p.log());
    // the old limit (2) still applies
    assert_eq!(p.get("/changed").await, 200);
    assert_eq!(p.get("/changed").await, 429);
    let m = p.metrics().await;
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"error\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"ok\"} 0"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_edit_reloads_without_a_signal() {
    let upstream = ok_backend().await;
    let [listen, admin] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(upstream, listen, admin, 1)).unwrap();
    let p = Running::start(&path, listen, admin, &[]).await;
    assert_eq!(p.get("/changed").await, 200);
    assert_eq!(p.get("/changed").await, 429);
    // a new file renamed over the old one, as editors and config managers do
    let next = dir.path().join("proxy.toml.new");
    std::fs::write(&next, config(upstream, listen, admin, 50)).unwrap();
    std::fs::rename(&next, &path).unwrap();
    p.wait_log("config reloaded", Duration::from_secs(5)).await;
    assert_eq!(p.get("/changed").await, 200);
    let m = p.metrics().await;
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"ok\"} 1"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_only_change_is_named_in_the_log() {
    let upstream = ok_backend().await;
    let [listen, admin] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(upstream, listen, admin, 2)).unwrap();
    let p = Running::start(&path, listen, admin, &["--no-watch"]).await;
    // a top-level key, before the tables
    let changed = config(upstream, listen, admin, 2).replacen(
        "admin = ",
        "max_connections = 10\nadmin = ",
        1,
    );
    std::fs::write(&path, changed).unwrap();
    p.hup();
    p.wait_log("needs_restart=max_connections", Duration::from_secs(5))
        .await;
    assert_eq!(p.get("/kept").await, 200, "still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_does_not_end_a_proxy_started_from_flags() {
    let upstream = ok_backend().await;
    let [listen] = free_ports();
    let child = Command::new(BIN)
        .args(["proxy", "--listen", &listen.to_string(), "--upstream"])
        .arg(format!("http://{upstream}"))
        .args(["--rate", "10/s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    wait_child_listening(&mut proc, &[listen]).await.unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &proc.0.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        proc.0.try_wait().unwrap().is_none(),
        "SIGHUP ended the proxy"
    );
    assert_eq!(http_get(listen, "/").await.0, 200);
}

/// A backend answering `name` to everything.
async fn named_backend(name: &'static str) -> SocketAddr {
    common::serve(move |_req| async move {
        hyper::Response::new(Full::new(Bytes::from_static(name.as_bytes())))
    })
    .await
}

/// Groups `a` and `b` (one server each) and the default; the route `/x` sends to
/// `x_upstream`; `extra` is appended (more groups).
fn groups_config(
    [a, b, d]: [SocketAddr; 3],
    listen: SocketAddr,
    admin: SocketAddr,
    x_upstream: &str,
    extra: &str,
) -> String {
    format!(
        r#"listen = "{listen}"
upstream = "http://{d}"
admin = "{admin}"

[upstreams.a]
servers = ["http://{a}"]

[upstreams.b]
servers = ["http://{b}"]
{extra}
[[policy]]
name = "all"
algorithm = "gcra"
rate = "1000/s"
burst = 100

[[route]]
prefix = "/x"
policies = ["all"]
upstream = "{x_upstream}"

[[route]]
prefix = "/"
policies = ["all"]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_sends_a_route_to_its_new_group_and_refuses_a_group_added_by_the_file() {
    let servers = [
        named_backend("a").await,
        named_backend("b").await,
        named_backend("d").await,
    ];
    let [listen, admin] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, groups_config(servers, listen, admin, "a", "")).unwrap();
    let p = Running::start(&path, listen, admin, &["--no-watch"]).await;
    assert_eq!(http_get(listen, "/x").await, (200, "a".to_string()));
    assert_eq!(http_get(listen, "/y").await, (200, "d".to_string()));
    // on a connection opened before the reload too (each worker builds the routing anew)
    let mut conn = KeepAlive::open(listen).await;
    assert_eq!(conn.get("/x").await, 200);

    std::fs::write(&path, groups_config(servers, listen, admin, "b", "")).unwrap();
    p.hup();
    p.wait_log("config reloaded", Duration::from_secs(5)).await;
    for _ in 0..4 {
        // every worker: fresh connections are dealt to both
        assert_eq!(http_get(listen, "/x").await, (200, "b".to_string()));
    }
    assert_eq!(http_get(listen, "/y").await, (200, "d".to_string()));
    assert_eq!(conn.get("/x").await, 200);

    // a group the running proxy does not have: refused at the route's name, the
    // previous routing kept
    let added = format!("\n[upstreams.c]\nservers = [\"http://{}\"]\n", servers[0]);
    std::fs::write(&path, groups_config(servers, listen, admin, "c", &added)).unwrap();
    p.hup();
    p.wait_log("config reload refused", Duration::from_secs(5))
        .await;
    let log = p.log();
    assert!(
        log.contains("upstream \"c\" is not one of the running proxy's (default, a, b)"),
        "{log}"
    );
    // line 23, column 12: the route's upstream value
    let place = format!("{}:23:12", path.display());
    assert!(log.contains(&place), "no {place} in:\n{log}");
    assert_eq!(http_get(listen, "/x").await, (200, "b".to_string()));

    // a group added but named by no route: applied, the group named as needing a restart
    std::fs::write(&path, groups_config(servers, listen, admin, "a", &added)).unwrap();
    p.hup();
    p.wait_log("needs_restart=upstreams", Duration::from_secs(5))
        .await;
    assert_eq!(http_get(listen, "/x").await, (200, "a".to_string()));
    let m = p.metrics().await;
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"ok\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"error\"} 1"),
        "{m}"
    );
}

/// Start with a capacity of 5 and spend one, reload with the section `section(listen,
/// other)` appended (a section read at startup only), and check that the log names
/// `needs_restart=NEEDS` and the proxy goes on as before with its count kept: 4 left,
/// then 429.
async fn a_startup_only_section_is_kept(
    section: impl Fn(SocketAddr, SocketAddr) -> String,
    needs: &str,
) {
    let upstream = ok_backend().await;
    let [listen, admin, other] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(upstream, listen, admin, 2)).unwrap();
    let p = Running::start(&path, listen, admin, &["--no-watch"]).await;
    assert_eq!(p.get("/kept").await, 200);
    let changed = format!(
        "{}\n{}",
        config(upstream, listen, admin, 2),
        section(listen, other)
    );
    std::fs::write(&path, changed).unwrap();
    p.hup();
    p.wait_log(&format!("needs_restart={needs}"), Duration::from_secs(5))
        .await;
    for _ in 0..4 {
        assert_eq!(p.get("/kept").await, 200);
    }
    assert_eq!(p.get("/kept").await, 429);
}

/// `store` is read at startup only: a reload that moves it to Redis (here one that never
/// answers, failing closed) is named as needing a restart, and decisions stay in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_store_opened_at_startup() {
    a_startup_only_section_is_kept(
        |_, nowhere| {
            format!("[store]\ntype = \"redis\"\n[store.redis]\nurl = \"redis://{nowhere}\"\nconnect_timeout = \"100ms\"\nfault_policy = \"fail-closed\"\n")
        },
        "store",
    )
    .await;
}

/// `[fleet]` is read at startup only: a reload that adds one (here `local` over four
/// nodes, which would divide each limit by four) is named as needing a restart, and the
/// proxy goes on enforcing the whole limit (not a quarter of it), its count kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_fleet_running_since_startup() {
    a_startup_only_section_is_kept(
        |listen, _| {
            format!("[fleet]\nstrategy = \"local\"\nnodes = [\"{listen}\", \"127.0.0.1:1\", \"127.0.0.1:2\", \"127.0.0.1:3\"]\nself = \"{listen}\"\n")
        },
        "fleet",
    )
    .await;
}
