//! The real `floodgate proxy` binary, as a process, in front of a real backend.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

mod common;
use common::{Proc, free_port, wait_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

async fn backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let h = h.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| {
                    h.fetch_add(1, Ordering::SeqCst);
                    async {
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                            b"ok",
                        ))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_proxies_limits_and_stops_on_sigterm() {
    let (upstream, hits) = backend().await;
    let (listen, admin) = (free_port(), free_port());
    let child = Command::new(BIN)
        .args(["proxy", "--listen", &listen.to_string(), "--upstream"])
        .arg(format!("http://{upstream}"))
        .args([
            "--admin",
            &admin.to_string(),
            "--rate",
            "10/s",
            "--burst",
            "20",
            "--nodelay",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Proc(child);
    wait_listening(listen).await;
    let c = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let start = Instant::now();
    let handles: Vec<_> = (0..30)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                let r = c
                    .get(format!("http://{listen}/").parse().unwrap())
                    .await
                    .unwrap();
                let st = r.status().as_u16();
                let rl = r.headers().get("ratelimit").cloned();
                let _ = r.into_body().collect().await;
                (st, rl)
            })
        })
        .collect();
    let mut ok = 0;
    for h in handles {
        let (st, rl) = h.await.unwrap();
        assert!(rl.is_some());
        ok += usize::from(st == 200);
    }
    let slack = (start.elapsed().as_millis() / 100) as usize;
    assert!((21..=21 + slack).contains(&ok), "{ok} passed");
    assert_eq!(hits.load(Ordering::SeqCst), ok);
    let m = c
        .get(format!("http://{admin}/metrics").parse().unwrap())
        .await
        .unwrap();
    let text = m.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&text).contains("floodgate_decisions_total"));
    // SIGTERM: drains and exits 0
    let st = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "proxy did not exit on SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
}

/// The capacity `floodgate proxy --check-config` reports for its one policy.
fn checked_capacity(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(["proxy", "--check-config"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, rest) = stdout
        .split_once(" capacity ")
        .unwrap_or_else(|| panic!("{args:?}: no capacity in {stdout:?}"));
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn a_bare_rate_admits_the_same_from_flags_and_from_a_file() {
    let dir = std::env::temp_dir().join(format!("floodgate-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("p.toml");
    for algorithm in ["leaky-queue", "leaky-meter", "token-bucket", "gcra"] {
        for (burst, want) in [(None, "1"), (Some("20"), "21")] {
            let mut flags = vec![
                "--upstream",
                "http://127.0.0.1:9",
                "--rate",
                "10/s",
                "--algorithm",
                algorithm,
            ];
            let mut toml = format!(
                "upstream = \"http://127.0.0.1:9\"\n[[policy]]\nname = \"default\"\nalgorithm = \"{algorithm}\"\nrate = \"10/s\"\n"
            );
            if let Some(b) = burst {
                flags.extend(["--burst", b]);
                toml.push_str(&format!("burst = {b}\n"));
            }
            std::fs::write(&file, &toml).unwrap();
            let from_flags = checked_capacity(&flags);
            let from_file = checked_capacity(&["--config", file.to_str().unwrap()]);
            assert_eq!(from_flags, want, "{algorithm} burst {burst:?} from flags");
            assert_eq!(from_file, want, "{algorithm} burst {burst:?} from a file");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn check_config_reports_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("floodgate-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "upstream = \"http://127.0.0.1:9\"\n[[policy]]\nname = \"default\"\nrate = \"10/s\"\nburst = 20\nnodelay = true\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["proxy", "--check-config", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("configuration OK"));
    // an old spelling works, and the load says what to write instead
    let old = dir.join("old.toml");
    std::fs::write(
        &old,
        "upstream = \"http://127.0.0.1:9\"\nmax_keys = 10\n[[policy]]\nname = \"default\"\nrate = \"10/s\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["proxy", "--check-config", "--config"])
        .arg(&old)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("floodgate: warning: ")
            && err.contains("old.toml: max_keys is renamed: write store.max_keys"),
        "{err}"
    );
    for (src, want) in [
        (
            "[[policy]]\nname = \"a\"\nrate = \"10/q\"\n",
            "bad.toml:3:8: policy[0].rate: invalid rate \"10/q\": unknown unit",
        ),
        (
            "[[policy]]\nname = \"a\"\nrate = \"10/s\"\nwindow = 3\n",
            "bad.toml:4:1: policy[0].window: unknown field `window`",
        ),
        (
            "[[policy]]\nname = \"a\"\nrate = \"10/s\"\nburst = 1\ndelay = 4\n",
            "bad.toml:1:1: policy[0] \"a\": delay=4 is above burst=1",
        ),
    ] {
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, src).unwrap();
        let out = Command::new(BIN)
            .args(["proxy", "--check-config", "--config"])
            .arg(&bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{err}");
    }
    // flags: bad rate, conflicting flags
    let out = Command::new(BIN)
        .args([
            "proxy",
            "--check-config",
            "--upstream",
            "http://127.0.0.1:9",
            "--rate",
            "0/s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate"));
    let out = Command::new(BIN)
        .args(["proxy", "--rate", "1/s", "--nodelay", "--delay", "3"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = Command::new(BIN)
        .args([
            "proxy",
            "--check-config",
            "--upstream",
            "http://127.0.0.1:9",
            "--rate",
            "1/s",
            "--threads",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads 0"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn spawn_proxy(config: &std::path::Path, listen: SocketAddr) -> Proc {
    Proc(
        Command::new(BIN)
            .args(["proxy", "--config"])
            .arg(config)
            .args(["--listen", &listen.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxy_processes_sharing_redis_admit_the_limit_once() {
    let (upstream, hits) = backend().await;
    // a unique prefix on the shared Redis; keys expire by themselves within 10 s
    let prefix = format!(
        "fg-test-{}-{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let dir = std::env::temp_dir().join(format!("floodgate-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("shared.toml");
    std::fs::write(
        &cfg,
        format!(
            "upstream = \"http://{upstream}\"\nstore = \"redis://127.0.0.1:6379/\"\n\
             [redis]\nprefix = \"{prefix}\"\ntimeout = \"500ms\"\n\
             [deny]\nstore_error = \"deny\"\n\
             [[policy]]\nname = \"shared\"\nalgorithm = \"gcra\"\nrate = \"5/10s\"\ncapacity = 5\nkey = \"global\"\n"
        ),
    )
    .unwrap();
    let (a, b) = (free_port(), free_port());
    let _pa = spawn_proxy(&cfg, a);
    let _pb = spawn_proxy(&cfg, b);
    wait_listening(a).await;
    wait_listening(b).await;
    let c = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut ok = [0usize; 2];
    for i in 0..10 {
        let addr = [a, b][i % 2];
        let r = c
            .get(format!("http://{addr}/").parse().unwrap())
            .await
            .unwrap();
        assert!(matches!(r.status().as_u16(), 200 | 429), "{}", r.status());
        ok[i % 2] += usize::from(r.status() == 200);
        let _ = r.into_body().collect().await;
    }
    // 5 in total, not 5 each
    assert_eq!(ok[0] + ok[1], 5, "{ok:?}");
    assert!(ok[0] > 0 && ok[1] > 0, "both proxies admitted some: {ok:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 5);
    // clean up our keys on the shared Redis
    let keys = Command::new("redis-cli")
        .args(["-p", "6379", "--scan", "--pattern", &format!("{prefix}*")])
        .output()
        .unwrap();
    for k in String::from_utf8_lossy(&keys.stdout).lines() {
        let _ = Command::new("redis-cli")
            .args(["-p", "6379", "del", k])
            .output();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET http://addr/path`: status and body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let c = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let r = c
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// With its Redis down, `floodgate proxy` starts (fail open: requests pass, the health
/// endpoint says degraded, `floodgate_store_up` is 0); once a Redis listens there, the
/// limit is kept on it and the health endpoint says ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_starts_while_redis_is_down_and_uses_it_once_it_answers() {
    let (upstream, _hits) = backend().await;
    let redis_port = free_port().port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("late.toml");
    std::fs::write(
        &cfg,
        format!(
            "upstream = \"http://{upstream}\"\n\
             [store]\ntype = \"redis\"\n\
             [store.redis]\nurl = \"redis://127.0.0.1:{redis_port}/\"\nconnect_timeout = \"200ms\"\nbreaker_open_for = \"100ms\"\nfault_policy = \"fail-open\"\n\
             [[policy]]\nname = \"late\"\nalgorithm = \"gcra\"\nrate = \"2/m\"\ncapacity = 2\nkey = \"global\"\n"
        ),
    )
    .unwrap();
    let (listen, admin) = (free_port(), free_port());
    let mut p = Proc(
        Command::new(BIN)
            .args(["proxy", "--config"])
            .arg(&cfg)
            .args([
                "--listen",
                &listen.to_string(),
                "--admin",
                &admin.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_child_listening(&mut p, &[listen, admin])
        .await
        .expect("the proxy starts with its Redis down");
    let (status, health) = get(admin, "/healthz").await;
    assert_eq!(status, 200);
    assert!(health.starts_with("degraded"), "{health}");
    for _ in 0..5 {
        assert_eq!(get(listen, "/").await.0, 200, "fail open");
    }
    let (_, metrics) = get(admin, "/metrics").await;
    assert!(metrics.contains("floodgate_store_up 0"), "{metrics}");

    let _redis = common::start_redis(redis_port);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(admin, "/healthz").await.1 != "ok\n" {
        assert!(Instant::now() < deadline, "the proxy never reached Redis");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(get(listen, "/").await.0);
        }
        v
    };
    assert_eq!(statuses, [200, 200, 429, 429], "2/m kept on Redis");
    let (_, metrics) = get(admin, "/metrics").await;
    assert!(metrics.contains("floodgate_store_up 1"), "{metrics}");
}

#[test]
fn check_config_names_the_clients_that_skip_every_policy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floodgate.toml");
    std::fs::write(
        &path,
        "upstream = \"http://127.0.0.1:9000\"\n[allowlist]\nips = [\"127.0.0.1\", \"192.0.2.0/24\"]\nkeys = [\"a\", \"b\"]\n[[policy]]\nname = \"p\"\nrate = \"10/s\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["proxy", "--check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "skip every policy: clients from 127.0.0.1/32, 192.0.2.0/24 (allowlist.ips)",
            "skip every policy: loopback is allowlisted, so requests sent from this host are never limited and carry no RateLimit fields",
            "skip every policy: requests whose key is one of 2 allowlisted keys (allowlist.keys)",
        ]
    );
}
