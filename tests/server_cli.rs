//! `floodgate server` as a user runs it: a real process, called with curl and redis-cli,
//! reloaded with SIGHUP, stopped with SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Proc {
    child: Child,
    http: String,
    resp_port: String,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
    config: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn field(line: &str, name: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
        .to_string()
}

fn spawn(config_text: &str, extra: &[&str]) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.yaml");
    std::fs::write(&config, config_text).unwrap();
    let stderr = dir.path().join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["server", "--config"])
        .arg(&config)
        .args([
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--resp",
            "127.0.0.1:0",
        ])
        .args(extra)
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
    let resp = field(&line, "resp");
    Proc {
        child,
        http: field(&line, "http"),
        resp_port: resp.rsplit(':').next().unwrap().to_string(),
        stderr,
        _dir: dir,
        config,
    }
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5"])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn check(p: &Proc, body: &str) -> String {
    curl(&[
        "-i",
        "-X",
        "POST",
        &format!("http://{}/v1/check", p.http),
        "-H",
        "content-type: application/json",
        "-d",
        body,
    ])
}

fn redis_cli(p: &Proc, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &p.resp_port])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn signal(p: &Proc, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &p.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

const CONFIG: &str = "headers: {retry_after_jitter: 0s}\ndomain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

#[test]
fn curl_and_redis_cli_against_the_process() {
    let p = spawn(CONFIG, &[]);
    let body = r#"{"domain":"edge","descriptors":[[{"key":"user","value":"ann"}]]}"#;
    let r = check(&p, body);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(
        r.to_ascii_lowercase()
            .contains("ratelimit-policy: \"user\";q=2;w=60"),
        "{r}"
    );
    assert!(r.contains("\"remaining\":1"), "{r}");
    check(&p, body);
    let r = check(&p, body);
    assert!(r.starts_with("HTTP/1.1 429"), "{r}");
    assert!(r.to_ascii_lowercase().contains("retry-after: 30"), "{r}");
    let r = check(&p, "{not json");
    assert!(
        r.starts_with("HTTP/1.1 400") && r.contains("invalid JSON"),
        "{r}"
    );
    assert_eq!(
        redis_cli(&p, &["CL.THROTTLE", "k", "15", "30", "60"]),
        "0\n16\n15\n-1\n2"
    );
    assert_eq!(
        redis_cli(&p, &["CL.THROTTLE", "k", "15", "30", "60"]),
        "0\n16\n14\n-1\n3" // 3.99... s, truncated as redis-cell truncates
    );
    assert_eq!(
        redis_cli(&p, &["CL.THROTTLE", "fresh", "15", "30", "60", "0"]),
        "0\n16\n16\n-1\n0"
    );
    assert_eq!(redis_cli(&p, &["PING"]), "PONG");
    assert!(redis_cli(&p, &["CL.THROTTLE", "k"]).contains("Usage: CL.THROTTLE"));
    let health = curl(&[&format!("http://{}/healthz", p.http)]);
    assert!(health.contains("\"serving\""), "{health}");
    let metrics = curl(&[&format!("http://{}/metrics", p.http)]);
    assert!(metrics.contains("floodgate_descriptor_decisions_total{domain=\"edge\",descriptor=\"user\",outcome=\"rejected\"} 1"), "{metrics}");
}

fn generation(p: &Proc) -> String {
    curl(&[&format!("http://{}/healthz", p.http)])
}

#[test]
fn sighup_reloads_and_a_bad_file_keeps_the_old_config() {
    let p = spawn(CONFIG, &["--no-watch"]);
    let metrics = curl(&[&format!("http://{}/metrics", p.http)]);
    for result in ["ok", "error"] {
        let line = format!("floodgate_config_reloads_total{{result=\"{result}\"}} 0");
        assert!(
            metrics.contains(&line),
            "exported from the start: {metrics}"
        );
    }
    let body = r#"{"descriptors":[[{"key":"user","value":"u"}]]}"#;
    assert!(check(&p, body).contains("\"remaining\":1"));
    std::fs::write(
        &p.config,
        CONFIG.replace("requests_per_unit: 2", "requests_per_unit: 50"),
    )
    .unwrap();
    signal(&p, "HUP");
    assert!(
        wait_for(10, || generation(&p).contains("\"config_generation\":2")),
        "{}",
        generation(&p)
    );
    let r = check(&p, body);
    assert!(r.contains("q=50;w=60"), "{r}");
    std::fs::write(
        &p.config,
        "domain: edge\ndescriptors: [{key: user, rate_limit: {unit: second}}]\n",
    )
    .unwrap();
    signal(&p, "HUP");
    let stderr = || std::fs::read_to_string(&p.stderr).unwrap_or_default();
    assert!(
        wait_for(10, || stderr().contains("config reload rejected")),
        "{}",
        stderr()
    );
    assert!(
        stderr().contains(
            "limits.yaml: domain \"edge\" > user > rate_limit: requests_per_unit is missing"
        ),
        "{}",
        stderr()
    );
    let r = check(&p, body);
    assert!(r.contains("q=50;w=60"), "the old config serves: {r}");
    assert!(generation(&p).contains("\"config_generation\":2"));
    let metrics = curl(&[&format!("http://{}/metrics", p.http)]);
    assert!(
        metrics.contains("floodgate_config_reloads_total{result=\"error\"} 1"),
        "{metrics}"
    );
}

#[test]
fn sigterm_stops_gracefully() {
    let mut p = spawn(CONFIG, &[]);
    signal(&p, "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let err = std::fs::read_to_string(&p.stderr).unwrap();
    assert!(err.contains("shutting down"), "{err}");
}

fn run(args: &[&str], dir: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_flag_and_startup_errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("limits.yaml"), CONFIG).unwrap();
    let (code, out, _) = run(
        &["server", "--config", "limits.yaml", "--check"],
        dir.path(),
    );
    assert_eq!(
        (code, out.trim()),
        (0, "limits.yaml: ok (1 domains, 1 limits, 0 policies)")
    );
    std::fs::write(dir.path().join("bad.toml"), "[[domains]]\ndomain = \"d\"\n[[domains.descriptors]]\nkey = \"k\"\nrate_limit = { unit = \"second\", requests_per_unit = 1, burst = -1 }\n").unwrap();
    let (code, _, err) = run(&["server", "--config", "bad.toml", "--check"], dir.path());
    assert_eq!(code, 2);
    // FILE:LINE:COLUMN: FIELD: MESSAGE, as the proxy's errors
    assert!(
        err.contains("bad.toml:5:") && err.contains("rate_limit.burst: "),
        "{err}"
    );
    // an old spelling works, and the load says what to write instead
    std::fs::write(
        dir.path().join("old.yaml"),
        CONFIG.replace("headers: {", "headers: {x_ratelimit: true, "),
    )
    .unwrap();
    let (code, _, err) = run(&["server", "--config", "old.yaml", "--check"], dir.path());
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("headers.x_ratelimit = true is renamed: write headers.legacy = \"delta\""),
        "{err}"
    );
    let (code, _, err) = run(&["server", "--config", "missing.yaml"], dir.path());
    assert_eq!(code, 2);
    assert!(
        err.contains("missing.yaml: cannot read the config file"),
        "{err}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, _, err) = run(
        &[
            "server",
            "--config",
            "limits.yaml",
            "--grpc",
            "127.0.0.1:0",
            "--resp",
            "off",
            "--http",
            &addr,
        ],
        dir.path(),
    );
    assert_eq!(code, 1, "a runtime failure: {err}");
    assert!(
        err.contains(&format!("cannot listen for http on {addr}")),
        "{err}"
    );
    let (code, _, err) = run(
        &[
            "server",
            "--config",
            "limits.yaml",
            "--resp",
            "127.0.0.1:6379",
        ],
        dir.path(),
    );
    assert_eq!(code, 2);
    assert!(err.contains("6379 is Redis's own port"), "{err}");
}

/// With its Redis down, `floodgate server` starts (fail open: calls are answered OK, the
/// health endpoint says `"store":"degraded"`, `floodgate_store_up` is 0); once a Redis
/// listens there, the limit is kept on it and the health endpoint says `"store":"ok"`.
#[test]
fn the_server_starts_while_redis_is_down_and_uses_it_once_it_answers() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "store:\n  type: redis\n  redis: {{url: \"redis://127.0.0.1:{port}\", connect_timeout: 200ms, breaker_open_for: 100ms, fault_policy: fail-open}}\n{CONFIG}"
    );
    let p = spawn(&config, &["--no-watch"]);
    let health = generation(&p);
    assert!(health.contains("\"store\":\"degraded\""), "{health}");
    let body = r#"{"domain":"edge","descriptors":[[{"key":"user","value":"late"}]]}"#;
    for _ in 0..4 {
        let r = check(&p, body);
        assert!(r.starts_with("HTTP/1.1 200"), "fail open: {r}");
    }
    let metrics = curl(&[&format!("http://{}/metrics", p.http)]);
    assert!(metrics.contains("floodgate_store_up 0"), "{metrics}");

    let mut redis = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !generation(&p).contains("\"store\":\"ok\"") {
        assert!(Instant::now() < deadline, "the server never reached Redis");
        std::thread::sleep(Duration::from_millis(50));
    }
    let answers: Vec<bool> = (0..3)
        .map(|_| check(&p, body).starts_with("HTTP/1.1 200"))
        .collect();
    let _ = redis.kill();
    let _ = redis.wait();
    assert_eq!(answers, [true, true, false], "2/minute kept on Redis");
}

/// A 200 KB file of nested flow collections is refused at once, naming the file, line
/// and column, before the YAML parser (whose cost grows with the square of that nesting)
/// runs; the proxy's TOML parser refuses deep nesting itself.
#[test]
fn deeply_nested_config_files_are_refused_fast() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("deep.yaml", format!("domains: {}\n", "[".repeat(200_000))),
        (
            "deep-map.yaml",
            format!("domains:\n  - {}\n", "{a: ".repeat(50_000)),
        ),
        ("deep.toml", format!("domains = {}\n", "[".repeat(200_000))),
    ];
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).unwrap();
        let t = std::time::Instant::now();
        let (code, _, err) = run(&["server", "--config", name, "--check"], dir.path());
        let took = t.elapsed();
        assert_eq!(code, 2, "{name}: {err}");
        assert!(took < std::time::Duration::from_secs(5), "{name}: {took:?}");
        if name.ends_with(".yaml") {
            let col = if *name == "deep.yaml" {
                "1:74"
            } else {
                "2:261"
            };
            assert!(
                err.contains(&format!("{name}:{col}: flow collections ([...] or {{...}}) nested deeper than 64 levels are refused")),
                "{name}: {err}"
            );
        }
    }
    std::fs::write(
        dir.path().join("deep-proxy.toml"),
        format!(
            "upstream = \"http://127.0.0.1:9\"\nx = {}\n",
            "[".repeat(200_000)
        ),
    )
    .unwrap();
    let t = std::time::Instant::now();
    let (code, _, err) = run(
        &["proxy", "--check-config", "--config", "deep-proxy.toml"],
        dir.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("deep-proxy.toml:2:"), "{err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
}
