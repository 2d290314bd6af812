//! `floodgate proxy`'s access log: the real binary, a real backend, requests over
//! loopback from curl (HTTP/1.1 and HTTP/2 with prior knowledge) and a raw TCP client;
//! the lines read back in nginx's combined format and as JSON, with the status, the
//! limiter's outcome, policy and key (hashed when `[log] keys` says so), a hostile
//! request line escaped, the file reopened on `SIGUSR1` and after a reload (logrotate's
//! rename), and `access_log = "stdout"`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{Proc, free_ports, serve, wait_child_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// A backend answering 503 on `/boom`, `200 hello` elsewhere.
async fn backend() -> SocketAddr {
    serve(|req: hyper::Request<hyper::body::Incoming>| async move {
        let boom = req.uri().path() == "/boom";
        let mut r = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(
            b"hello",
        )));
        if boom {
            *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        }
        r
    })
    .await
}

/// One request per user an hour (policy `one`, keyed by `x-user`), a dry-run policy
/// `shadow` of one an hour on `/shadow`, and `log` as the `[log]` table.
fn config(upstream: SocketAddr, listen: SocketAddr, log: &str) -> String {
    format!(
        r#"listen = "{listen}"
upstream = "http://{upstream}"

[log]
{log}

[[policy]]
name = "one"
algorithm = "token-bucket"
rate = "1/h"
capacity = 1
key = "header:x-user"

[[policy]]
name = "shadow"
algorithm = "token-bucket"
rate = "1/h"
capacity = 1
key = "header:x-user"
dry_run = true

[[route]]
prefix = "/shadow"
policies = ["shadow"]

[[route]]
prefix = "/"
policies = ["one"]
"#
    )
}

/// Start the proxy on `file`; its standard output is collected.
async fn start(file: &Path, listen: SocketAddr) -> (Proc, Arc<Mutex<Vec<u8>>>) {
    let mut child = Command::new(BIN)
        .args(["proxy", "--threads", "1", "--no-watch", "--config"])
        .arg(file)
        .env("FLOODGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let pipe = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(pipe);
        let mut line = Vec::new();
        while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            sink.lock().unwrap().extend_from_slice(&line);
            line.clear();
        }
    });
    let mut proc = Proc(child);
    wait_child_listening(&mut proc, &[listen]).await.unwrap();
    (proc, out)
}

/// `curl` with `args` against `url`: the status.
fn curl(args: &[&str], url: &str) -> u16 {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl is needed by this test (scripts/setup.sh installs it)");
    String::from_utf8_lossy(&out.stdout).parse().unwrap()
}

/// Send `raw` on a fresh connection and read the answer's status.
fn raw_request(listen: SocketAddr, raw: &[u8]) -> u16 {
    let mut s = std::net::TcpStream::connect(listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(raw).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0)
}

/// Lines of `text` once it has `n` of them (at most 5 s).
async fn wait_lines(read: impl Fn() -> String, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = read();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} access lines:\n{text}",
            lines.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn read_file(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// A combined line's parts: `(remote_addr, request, status, bytes, referer,
/// user_agent, floodgate's fields)`.
#[derive(Debug)]
struct Combined {
    remote_addr: String,
    time: String,
    request: String,
    status: u16,
    bytes: u64,
    referer: String,
    user_agent: String,
    rl: String,
    policy: String,
    key: String,
    rt: f64,
}

/// Parse nginx's combined format followed by ` rl=.. policy=.. key=.. rt=..`; quoted
/// fields hold no `"` (escaped as `\x22`), so each ends at the next one.
fn parse_combined(line: &str) -> Combined {
    let (remote_addr, rest) = line.split_once(" - - [").expect(line);
    let (time, rest) = rest.split_once("] \"").expect(line);
    let (request, rest) = rest.split_once("\" ").expect(line);
    let (status_bytes, rest) = rest.split_once(" \"").expect(line);
    let (status, bytes) = status_bytes.split_once(' ').expect(line);
    let (referer, rest) = rest.split_once("\" \"").expect(line);
    let (user_agent, rest) = rest.split_once("\" ").expect(line);
    let field = |name: &str| {
        rest.split(' ')
            .find_map(|f| f.strip_prefix(name))
            .expect(line)
            .to_owned()
    };
    Combined {
        remote_addr: remote_addr.into(),
        time: time.into(),
        request: request.into(),
        status: status.parse().expect(line),
        bytes: bytes.parse().expect(line),
        referer: referer.into(),
        user_agent: user_agent.into(),
        rl: field("rl="),
        policy: field("policy="),
        key: field("key="),
        rt: field("rt=").parse().expect(line),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_lines_over_http1_and_http2_carry_status_outcome_policy_and_key() {
    let upstream = backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    let access = dir.path().join("access.log");
    let log = format!("access_log = {:?}\naccess_format = \"combined\"", access);
    std::fs::write(&file, config(upstream, listen, &log)).unwrap();
    let (_p, _out) = start(&file, listen).await;
    let url = |p: &str| format!("http://{listen}{p}");
    let h1 = [
        "--http1.1",
        "-H",
        "x-user: alice",
        "-e",
        "https://ref.example/",
        "-A",
        "agent/1",
    ];
    assert_eq!(curl(&h1, &url("/a?x=1")), 200);
    assert_eq!(curl(&h1, &url("/a?x=2")), 429);
    let h2 = ["--http2-prior-knowledge", "-H", "x-user: bob"];
    assert_eq!(curl(&h2, &url("/b")), 200);
    assert_eq!(curl(&h2, &url("/b")), 429);
    // the upstream's 5xx is logged with the limiter's outcome
    assert_eq!(curl(&["-H", "x-user: carol"], &url("/boom")), 503);
    // a dry-run policy that would have denied: shadow
    let dry = ["-H", "x-user: dave"];
    assert_eq!(curl(&dry, &url("/shadow")), 200);
    assert_eq!(curl(&dry, &url("/shadow")), 200);
    // no key: the policy denies (400) before any decision
    let lines = wait_lines(|| read_file(&access), 7).await;
    let l: Vec<Combined> = lines.iter().map(|l| parse_combined(l)).collect();
    for c in &l {
        assert_eq!(c.remote_addr, "127.0.0.1");
        assert!(c.time.ends_with(" +0000") && c.time.len() == 26, "{c:?}");
        assert!(c.rt >= 0.0 && c.rt < 5.0, "{c:?}");
    }
    assert_eq!(l[0].request, "GET /a?x=1 HTTP/1.1");
    assert_eq!((l[0].status, l[0].bytes), (200, 5));
    assert_eq!(
        (l[0].referer.as_str(), l[0].user_agent.as_str()),
        ("https://ref.example/", "agent/1")
    );
    assert_eq!(
        (l[0].rl.as_str(), l[0].policy.as_str(), l[0].key.as_str()),
        ("allowed", "one", "alice")
    );
    assert_eq!(l[1].request, "GET /a?x=2 HTTP/1.1");
    assert_eq!(l[1].status, 429);
    assert!(l[1].bytes > 0, "{:?}", l[1]);
    assert_eq!(
        (l[1].rl.as_str(), l[1].policy.as_str(), l[1].key.as_str()),
        ("limited", "one", "alice")
    );
    assert_eq!(l[2].request, "GET /b HTTP/2.0");
    assert_eq!(
        (l[2].status, l[2].rl.as_str(), l[2].key.as_str()),
        (200, "allowed", "bob")
    );
    assert_eq!(l[2].referer, "-");
    assert_eq!(l[3].request, "GET /b HTTP/2.0");
    assert_eq!(
        (l[3].status, l[3].rl.as_str(), l[3].key.as_str()),
        (429, "limited", "bob")
    );
    assert_eq!(
        (l[4].status, l[4].rl.as_str(), l[4].key.as_str()),
        (503, "allowed", "carol")
    );
    assert_eq!(
        (l[5].rl.as_str(), l[5].policy.as_str()),
        ("allowed", "shadow")
    );
    assert_eq!(
        (
            l[6].status,
            l[6].rl.as_str(),
            l[6].policy.as_str(),
            l[6].key.as_str()
        ),
        (200, "shadow", "shadow", "dave")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_request_line_and_user_agent_are_escaped_and_cannot_forge_a_line() {
    let upstream = backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    let access = dir.path().join("access.log");
    std::fs::write(
        &file,
        config(upstream, listen, &format!("access_log = {access:?}")),
    )
    .unwrap();
    let (_p, _out) = start(&file, listen).await;
    // `"` in the target; in the user agent a tab (a control byte), a byte over 0x7f
    // and a forged end of the field with floodgate's fields after it: each must stay
    // inside its field. (A control byte or a byte over 0x7f in the target is refused
    // with a 400 before the proxy's service sees the request.)
    let raw = b"GET /x\"a\"?q=b HTTP/1.1\r\nHost: t\r\nx-user: eve\r\nUser-Agent: a\t\xff\" rl=allowed policy=x key=y rt=0.001 \"b\r\nConnection: close\r\n\r\n";
    let status = raw_request(listen, raw);
    assert_eq!(status, 200);
    let lines = wait_lines(|| read_file(&access), 1).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let c = parse_combined(&lines[0]);
    assert_eq!(c.request, "GET /x\\x22a\\x22?q=b HTTP/1.1");
    assert_eq!(
        c.user_agent,
        "a\\x09\\xFF\\x22 rl=allowed policy=x key=y rt=0.001 \\x22b"
    );
    assert_eq!(c.policy, "one");
    assert_eq!(
        (c.status, c.rl.as_str(), c.key.as_str()),
        (200, "allowed", "eve")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_the_parser_refuses_gets_a_line_with_the_status_it_was_answered() {
    let upstream = backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    let access = dir.path().join("access.log");
    std::fs::write(
        &file,
        config(upstream, listen, &format!("access_log = {access:?}")),
    )
    .unwrap();
    let (_p, _out) = start(&file, listen).await;
    // a field without a colon: 400
    let bad = b"GET /a HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n".to_vec();
    // a target of 70 000 bytes: 414
    let mut long = b"GET /".to_vec();
    long.extend(std::iter::repeat_n(b'a', 70_000));
    long.extend(b" HTTP/1.1\r\nHost: t\r\n\r\n");
    // 120 fields: 431
    let mut many = b"GET /c HTTP/1.1\r\nHost: t\r\n".to_vec();
    for i in 0..120 {
        many.extend(format!("x-f{i}: v\r\n").bytes());
    }
    many.extend(b"\r\n");
    let mut want = Vec::new();
    for (raw, status) in [(bad, 400), (long, 414), (many, 431)] {
        assert_eq!(raw_request(listen, &raw), status);
        want.push(status);
        let lines = wait_lines(|| read_file(&access), want.len()).await;
        let c = parse_combined(lines.last().unwrap());
        assert_eq!(
            (
                c.remote_addr.as_str(),
                c.request.as_str(),
                c.status,
                c.bytes,
                c.referer.as_str(),
                c.user_agent.as_str(),
                c.rl.as_str(),
                c.policy.as_str(),
                c.key.as_str(),
            ),
            ("127.0.0.1", "-", status, 0, "-", "-", "-", "-", "-"),
            "{lines:?}"
        );
        assert!(c.rt >= 0.0 && c.rt < 5.0, "{lines:?}");
    }
    // one line each
    assert_eq!(read_file(&access).lines().count(), 3);
}

/// The JSON lines of `text`.
fn json_lines(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_the_fields_named_and_hashed_keys() {
    let upstream = backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    let access = dir.path().join("access.json");
    let log = format!("keys = \"hashed\"\naccess_log = {access:?}\naccess_format = \"json\"");
    std::fs::write(&file, config(upstream, listen, &log)).unwrap();
    let (_p, _out) = start(&file, listen).await;
    let url = format!("http://{listen}/j?q=1");
    let alice = ["-H", "x-user: alice@example.com", "-A", "agent \"2\""];
    assert_eq!(curl(&alice, &url), 200);
    assert_eq!(
        curl(&[&["--http2-prior-knowledge"][..], &alice].concat(), &url),
        429
    );
    let lines = wait_lines(|| read_file(&access), 2).await;
    let text = lines.join("\n");
    assert!(!text.contains("alice@example.com"), "{text}");
    let j = json_lines(&lines);
    let key = j[0]["key"].as_str().unwrap();
    assert!(
        key.len() == 17 && key.starts_with('#') && key[1..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{key}"
    );
    for (v, status, outcome, protocol) in [
        (&j[0], 200, "allowed", "HTTP/1.1"),
        (&j[1], 429, "limited", "HTTP/2.0"),
    ] {
        assert_eq!(v["status"], status, "{v}");
        assert_eq!(v["outcome"], outcome, "{v}");
        assert_eq!(v["protocol"], protocol, "{v}");
        assert_eq!(v["policy"], "one", "{v}");
        assert_eq!(v["key"], key, "the same key hashes the same: {v}");
        assert_eq!(v["method"], "GET", "{v}");
        assert_eq!(v["path"], "/j?q=1", "{v}");
        assert_eq!(v["remote_addr"], "127.0.0.1", "{v}");
        assert_eq!(v["user_agent"], "agent \"2\"", "{v}");
        assert!(v["referer"].is_null(), "{v}");
        assert!(v["bytes"].as_u64().unwrap() > 0, "{v}");
        assert!(v["request_time_ms"].as_f64().unwrap() >= 0.0, "{v}");
        let time = v["time"].as_str().unwrap();
        // RFC 3339 in UTC: 2026-12-07T11:45:46.123Z
        assert!(
            time.len() == 24 && time.ends_with('Z') && &time[10..11] == "T",
            "{time}"
        );
    }
}

/// `kill -SIG pid`.
fn signal(p: &Proc, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &p.0.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// Wait until `path` exists and holds `n` lines (at most 5 s).
async fn wait_file_lines(path: &Path, n: usize) -> Vec<String> {
    let p: PathBuf = path.to_owned();
    wait_lines(move || read_file(&p), n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_then_sigusr1_or_a_reload_writes_a_new_file() {
    let upstream = backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    let access = dir.path().join("access.log");
    let rotated = dir.path().join("access.log.1");
    let rotated2 = dir.path().join("access.log.2");
    std::fs::write(
        &file,
        config(upstream, listen, &format!("access_log = {access:?}")),
    )
    .unwrap();
    let (p, _out) = start(&file, listen).await;
    let url = |p: &str| format!("http://{listen}{p}");
    let u = |n: &str| format!("x-user: {n}");
    assert_eq!(curl(&["-H", &u("a")], &url("/before")), 200);
    assert_eq!(curl(&["-H", &u("a")], &url("/before")), 429);
    wait_file_lines(&access, 2).await;
    // logrotate: rename, then `postrotate kill -USR1`
    std::fs::rename(&access, &rotated).unwrap();
    signal(&p, "-USR1");
    // the reopen happens before the next line is written
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(curl(&["-H", &u("b")], &url("/after")), 200);
    let new = wait_file_lines(&access, 1).await;
    assert_eq!(new.len(), 1, "{new:?}");
    assert!(new[0].contains("\"GET /after HTTP/1.1\" 200"), "{new:?}");
    let old = read_file(&rotated);
    assert_eq!(old.lines().count(), 2, "{old}");
    assert!(old.lines().all(|l| l.contains("GET /before")), "{old}");
    // a reload (SIGHUP) reopens it too
    std::fs::rename(&access, &rotated2).unwrap();
    signal(&p, "-HUP");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(curl(&["-H", &u("c")], &url("/reloaded")), 200);
    let new = wait_file_lines(&access, 1).await;
    assert!(new[0].contains("GET /reloaded"), "{new:?}");
    assert_eq!(read_file(&rotated2).lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_stdout_writes_lines_to_standard_output() {
    let upstream = backend().await;
    let [listen] = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config(upstream, listen, "access_log = \"stdout\"")).unwrap();
    let (_p, out) = start(&file, listen).await;
    assert_eq!(
        curl(&["-H", "x-user: s"], &format!("http://{listen}/out")),
        200
    );
    let lines = wait_lines(
        || String::from_utf8_lossy(&out.lock().unwrap()).into_owned(),
        1,
    )
    .await;
    let c = parse_combined(&lines[0]);
    assert_eq!(c.request, "GET /out HTTP/1.1");
    assert_eq!(
        (c.status, c.rl.as_str(), c.policy.as_str(), c.key.as_str()),
        (200, "allowed", "one", "s")
    );
}

#[test]
fn an_empty_access_log_is_refused_naming_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.toml");
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:9\"\n[log]\naccess_log = \"\"\n[[policy]]\nname = \"p\"\nrate = \"1/s\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["proxy", "--check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("proxy.toml:3:") && err.contains("access_log is empty"),
        "{err}"
    );
}
