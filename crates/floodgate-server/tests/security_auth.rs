//! The RESP door's authentication, key sizes and policy-only mode, as a table: each row
//! the exact bytes a client sends on a fresh connection, the exact bytes it gets back,
//! and what the server counts for it. Then the config's errors, and the HTTP door's key
//! cap.

mod common;

use common::*;
use floodgate_engine::metrics::OutcomeLabels;
use floodgate_server::metrics::{AuthLabels, Metrics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the server counted for one row (deltas).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counted {
    /// `floodgate_auth_failures_total{front="resp",reason="no_auth"}`
    no_auth: u64,
    /// `floodgate_auth_failures_total{front="resp",reason="wrong_password"}`
    wrong_password: u64,
    /// `floodgate_requests_total{outcome="invalid"}`
    invalid: u64,
    /// `floodgate_requests_total{outcome="passed"}`
    passed: u64,
}

const NOTHING: Counted = Counted {
    no_auth: 0,
    wrong_password: 0,
    invalid: 0,
    passed: 0,
};

fn counted(m: &Metrics) -> Counted {
    let auth = |reason| {
        m.auth_failures
            .get_or_create(&AuthLabels {
                front: "resp",
                reason,
            })
            .get()
    };
    let req = |outcome| m.requests.get_or_create(&OutcomeLabels { outcome }).get();
    Counted {
        no_auth: auth("no_auth"),
        wrong_password: auth("wrong_password"),
        invalid: req("invalid"),
        passed: req("passed"),
    }
}

/// One row: a client's bytes, the server's exact answer, what is counted.
struct Row {
    send: Vec<u8>,
    answer: Vec<u8>,
    counted: Counted,
}

fn row(send: impl AsRef<[u8]>, answer: impl AsRef<[u8]>, counted: Counted) -> Row {
    Row {
        send: send.as_ref().to_vec(),
        answer: answer.as_ref().to_vec(),
        counted,
    }
}

/// `args` as a RESP array of bulk strings.
fn array(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn error(text: &str) -> Vec<u8> {
    format!("-{text}\r\n").into_bytes()
}

/// Send `send` on a fresh connection, read until `want` bytes came (or 2 s passed).
async fn exchange(addr: std::net::SocketAddr, send: &[u8], want: usize) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(send).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while got.len() < want {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    // nothing more than the answer
    if let Ok(Ok(n)) =
        tokio::time::timeout(std::time::Duration::from_millis(50), s.read(&mut buf)).await
    {
        got.extend_from_slice(&buf[..n]);
    }
    got
}

async fn run_table(yaml: &str, rows: &[Row]) {
    let srv = start(yaml).await;
    let addr = srv.running.resp.unwrap();
    let metrics = srv.running.engine.metrics().clone();
    for (i, r) in rows.iter().enumerate() {
        let before = counted(&metrics);
        let got = exchange(addr, &r.send, r.answer.len()).await;
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&r.answer),
            "row {i}: {:?}",
            String::from_utf8_lossy(&r.send[..r.send.len().min(200)])
        );
        let after = counted(&metrics);
        let delta = Counted {
            no_auth: after.no_auth - before.no_auth,
            wrong_password: after.wrong_password - before.wrong_password,
            invalid: after.invalid - before.invalid,
            passed: after.passed - before.passed,
        };
        assert_eq!(delta, r.counted, "row {i} counted");
    }
    srv.stop().await;
}

const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";

fn hello_reply(resp3: bool) -> Vec<u8> {
    let v = env!("CARGO_PKG_VERSION");
    let (head, proto) = if resp3 { ("%7", 3) } else { ("*14", 2) };
    format!(
        "{head}\r\n$6\r\nserver\r\n$9\r\nfloodgate\r\n$7\r\nversion\r\n${}\r\n{v}\r\n$5\r\nproto\r\n:{proto}\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
        v.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_password_is_asked_before_any_command_as_redis_asks_it() {
    let no_auth = Counted {
        no_auth: 1,
        ..NOTHING
    };
    let wrong = Counted {
        wrong_password: 1,
        ..NOTHING
    };
    let passed = Counted {
        passed: 1,
        ..NOTHING
    };
    let throttle = array(&[b"CL.THROTTLE", b"user123", b"1000", b"1", b"86400", b"1000"]);
    let mut auth_then_throttle = array(&[b"AUTH", b"s3cret"]);
    auth_then_throttle.extend_from_slice(&array(&[b"CL.THROTTLE", b"k", b"1", b"1", b"1"]));
    let rows = [
        row("PING\r\n", error(NOAUTH), no_auth),
        // the lock-out of a key for every client, refused before it decides anything
        row(&throttle, error(NOAUTH), no_auth),
        row(
            array(&[b"FG.ACQUIRE", b"gpu", b"1", b"86400000"]),
            error(NOAUTH),
            no_auth,
        ),
        row(
            "CLIENT SETNAME x\r\nSELECT 0\r\n",
            [error(NOAUTH), error(NOAUTH)].concat(),
            Counted {
                no_auth: 2,
                ..NOTHING
            },
        ),
        row("AUTH wrong\r\n", error(WRONGPASS), wrong),
        row("AUTH S3CRET\r\n", error(WRONGPASS), wrong),
        row("AUTH s3cret\r\nPING\r\n", "+OK\r\n+PONG\r\n", NOTHING),
        row(
            [array(&[b"AUTH", b"s3cret"]), array(&[b"PING"])].concat(),
            "+OK\r\n+PONG\r\n",
            NOTHING,
        ),
        row("AUTH default s3cret\r\n", "+OK\r\n", NOTHING),
        row("AUTH admin s3cret\r\n", error(WRONGPASS), wrong),
        row(
            "AUTH\r\n",
            error("ERR wrong number of arguments for 'auth' command"),
            NOTHING,
        ),
        row("AUTH a b c\r\n", error("ERR syntax error"), NOTHING),
        // a failed AUTH leaves the connection as it was
        row(
            "AUTH nope\r\nPING\r\n",
            [error(WRONGPASS), error(NOAUTH)].concat(),
            Counted {
                no_auth: 1,
                wrong_password: 1,
                ..NOTHING
            },
        ),
        row(
            "PING\r\nAUTH s3cret\r\nPING\r\n",
            [error(NOAUTH), b"+OK\r\n+PONG\r\n".to_vec()].concat(),
            no_auth,
        ),
        row("HELLO 3\r\n", error(HELLO_NOAUTH), no_auth),
        row("HELLO\r\n", error(HELLO_NOAUTH), no_auth),
        row(
            "HELLO 3 AUTH default s3cret\r\n",
            hello_reply(true),
            NOTHING,
        ),
        row(
            "HELLO 2 AUTH default s3cret SETNAME app\r\nPING\r\n",
            [hello_reply(false), b"+PONG\r\n".to_vec()].concat(),
            NOTHING,
        ),
        row(
            "HELLO 3 AUTH default nope\r\nPING\r\n",
            [error(WRONGPASS), error(NOAUTH)].concat(),
            Counted {
                no_auth: 1,
                wrong_password: 1,
                ..NOTHING
            },
        ),
        row(
            "HELLO 3 AUTH default\r\n",
            error("ERR Syntax error in HELLO option 'AUTH'"),
            NOTHING,
        ),
        row("QUIT\r\n", "+OK\r\n", NOTHING),
        row(
            &auth_then_throttle,
            "+OK\r\n*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n",
            passed,
        ),
    ];
    run_table("resp: {password: s3cret}\n", &rows).await;
}

#[tokio::test]
async fn the_password_comes_from_a_file_and_the_user_name_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("resp.pass");
    std::fs::write(&file, "from-a-file\n").unwrap();
    let yaml = format!(
        "resp: {{password_file: {:?}, username: app}}\n",
        file.display()
    );
    let wrong = Counted {
        wrong_password: 1,
        ..NOTHING
    };
    let rows = [
        row(
            "AUTH app from-a-file\r\nPING\r\n",
            "+OK\r\n+PONG\r\n",
            NOTHING,
        ),
        // the trailing newline of the file is not part of the password
        row(
            [
                array(&[b"AUTH", b"app", b"from-a-file\n"]),
                array(&[b"PING"]),
            ]
            .concat(),
            [error(WRONGPASS), error(NOAUTH)].concat(),
            Counted {
                no_auth: 1,
                ..wrong
            },
        ),
        // the one-argument form is the default user's, which this server does not have
        row("AUTH from-a-file\r\n", error(WRONGPASS), wrong),
        row("AUTH default from-a-file\r\n", error(WRONGPASS), wrong),
    ];
    run_table(&yaml, &rows).await;
}

#[tokio::test]
async fn without_a_password_auth_answers_as_redis_without_requirepass() {
    let rows = [
        row(
            "AUTH x\r\n",
            error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ),
            NOTHING,
        ),
        row(
            "AUTH default anything\r\nPING\r\n",
            "+OK\r\n+PONG\r\n",
            NOTHING,
        ),
        row(
            "AUTH admin anything\r\n",
            error(WRONGPASS),
            Counted {
                wrong_password: 1,
                ..NOTHING
            },
        ),
        row("HELLO 3\r\n", hello_reply(true), NOTHING),
        row("PING\r\n", "+PONG\r\n", NOTHING),
    ];
    run_table("", &rows).await;
}

#[tokio::test]
async fn keys_longer_than_the_cap_are_refused_on_every_keyed_command() {
    let long = vec![b'k'; 1025];
    let max = vec![b'm'; 1024];
    let too_long =
        error("ERR the key is 1025 bytes, more than the maximum of 1024 (limits.max_value_bytes)");
    let invalid = Counted {
        invalid: 1,
        ..NOTHING
    };
    let rows = [
        row(
            array(&[b"CL.THROTTLE", &long, b"1", b"1", b"1"]),
            &too_long,
            invalid,
        ),
        row(
            array(&[b"FG.ACQUIRE", &long, b"1", b"1000"]),
            &too_long,
            invalid,
        ),
        row(
            array(&[b"FG.RENEW", &long, b"1", b"1000"]),
            &too_long,
            invalid,
        ),
        row(array(&[b"FG.RELEASE", &long, b"1"]), &too_long, invalid),
        row(
            array(&[b"FG.RESERVE", b"api", &long, b"1"]),
            &too_long,
            invalid,
        ),
        row(array(&[b"FG.THROTTLE", b"api", &long]), &too_long, invalid),
        // at the cap: decided
        row(
            array(&[b"CL.THROTTLE", &max, b"1", b"1", b"1"]),
            "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n",
            Counted {
                passed: 1,
                ..NOTHING
            },
        ),
    ];
    run_table("policies: {api: {rate: 2/m}}\n", &rows).await;
    // the cap is the config's
    let rows = [
        row(
            array(&[b"CL.THROTTLE", b"abcdefghi", b"1", b"1", b"1"]),
            error("ERR the key is 9 bytes, more than the maximum of 8 (limits.max_value_bytes)"),
            invalid,
        ),
        row(
            array(&[b"CL.THROTTLE", b"abcdefgh", b"1", b"1", b"1"]),
            "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n",
            Counted {
                passed: 1,
                ..NOTHING
            },
        ),
    ];
    run_table("limits: {max_value_bytes: 8}\n", &rows).await;
}

#[tokio::test]
async fn policies_only_refuses_the_callers_rates_and_decides_on_policies() {
    let invalid = Counted {
        invalid: 1,
        ..NOTHING
    };
    let passed = Counted {
        passed: 1,
        ..NOTHING
    };
    let rows = [
        row(
            "CL.THROTTLE user123 1000 1 86400 1000\r\n",
            error(
                "ERR CL.THROTTLE is disabled: this server decides on its configured policies only (resp.policies_only); use FG.THROTTLE <policy> <key> [<quantity>]",
            ),
            invalid,
        ),
        row(
            "FG.ACQUIRE gpu 1 86400000\r\n",
            error(
                "ERR FG.ACQUIRE is disabled: this server decides on its configured policies only (resp.policies_only); use FG.THROTTLE <policy> <key> [<quantity>]",
            ),
            invalid,
        ),
        // two a minute: 2 at once, then one every 30 s
        row(
            "FG.THROTTLE api user123\r\n",
            "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:30\r\n",
            passed,
        ),
        row(
            "FG.THROTTLE api user123 1\r\nFG.THROTTLE api user123\r\n",
            "*5\r\n:0\r\n:2\r\n:0\r\n:-1\r\n:59\r\n*5\r\n:1\r\n:2\r\n:0\r\n:29\r\n:59\r\n",
            Counted {
                passed: 1,
                ..NOTHING
            },
        ),
        row(
            "FG.THROTTLE nope k\r\n",
            error("ERR unknown policy \"nope\"; configured policies: api"),
            Counted { ..NOTHING },
        ),
        row(
            "FG.THROTTLE api\r\n",
            error("ERR Usage: FG.THROTTLE <policy> <key> [<quantity>]"),
            NOTHING,
        ),
        row(
            "FG.THROTTLE api k x\r\n",
            error("ERR quantity must be a non-negative integer, got \"x\""),
            NOTHING,
        ),
    ];
    run_table(
        "resp: {policies_only: true}\npolicies: {api: {rate: 2/m}}\n",
        &rows,
    )
    .await;
}

#[tokio::test]
async fn the_http_lease_calls_refuse_keys_longer_than_the_cap() {
    let srv = start("limits: {max_value_bytes: 8}\n").await;
    let addr = srv.running.http.unwrap();
    let r = http(
        addr,
        "POST",
        "/v1/acquire",
        br#"{"key": "abcdefghi", "max_in_flight": 1, "ttl_ms": 1000}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["error"],
        "the key is 9 bytes, more than the maximum of 8 (limits.max_value_bytes)"
    );
    let r = http(
        addr,
        "POST",
        "/v1/acquire",
        br#"{"key": "abcdefgh", "max_in_flight": 1, "ttl_ms": 1000}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    srv.stop().await;
}

#[test]
fn bad_password_settings_name_the_field() {
    let err = |yaml: &str| {
        floodgate_server::config::parse(std::path::Path::new("limits.yaml"), yaml)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("resp: {password: \"\"}\n"),
        "limits.yaml: resp.password: the password is empty"
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    assert_eq!(
        err(&format!("resp: {{password_file: {:?}}}\n", empty.display())),
        "limits.yaml: resp.password_file: the password is empty"
    );
    let missing = dir.path().join("missing");
    let e = err(&format!(
        "resp: {{password_file: {:?}}}\n",
        missing.display()
    ));
    assert!(
        e.starts_with(&format!(
            "limits.yaml: resp.password_file: cannot read {}: ",
            missing.display()
        )),
        "{e}"
    );
    assert_eq!(
        err("resp: {password_env: FLOODGATE_TEST_UNSET_VARIABLE}\n"),
        "limits.yaml: resp.password_env: the environment variable FLOODGATE_TEST_UNSET_VARIABLE is not set"
    );
    assert_eq!(
        err("resp: {password: a, password_env: B}\n"),
        "limits.yaml: resp: set one of password, password_file and password_env"
    );
    assert_eq!(
        err("http: {token: \"\"}\n"),
        "limits.yaml: http.token: the token is empty"
    );
    assert_eq!(
        err("http: {token: a, token_file: /x}\n"),
        "limits.yaml: http: set one of token, token_file and token_env"
    );
    assert_eq!(
        err("resp: {username: app}\n"),
        "limits.yaml: resp.username: user \"app\" has no password: set password_file, password_env or password"
    );
    // the password is never shown
    let c = floodgate_server::config::parse(
        std::path::Path::new("limits.yaml"),
        "resp: {password: hunter2}\n",
    )
    .unwrap();
    assert!(!format!("{:?}", c.settings).contains("hunter2"));
}

/// One HTTP/1.1 exchange of exact bytes: the status, the `WWW-Authenticate` field and
/// the body.
async fn http_exchange(addr: std::net::SocketAddr, send: &[u8]) -> (u16, Option<String>, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(send).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let www = head
        .lines()
        .find_map(|l| l.strip_prefix("www-authenticate: "))
        .map(str::to_string);
    (status, www, body.to_string())
}

/// Bytes sent, status, `WWW-Authenticate`, the exact body ("": any), then the
/// `no_auth` and `wrong_password` counts of `front="http"`.
type HttpRow<'a> = (Vec<u8>, u16, Option<String>, &'a str, u64, u64);

fn post(path: &str, auth: Option<&str>, body: &str) -> Vec<u8> {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_bearer_token_guards_the_http_v1_calls() {
    let srv = start("http: {token: t0ken}\npolicies: {api: {rate: 2/m}}\n").await;
    let addr = srv.running.http.unwrap();
    let metrics = srv.running.engine.metrics().clone();
    let check = r#"{"policy": "api", "key": "u1"}"#;
    let www = Some("Bearer realm=\"floodgate\"".to_string());
    let needs = r#"{"error":"this call needs Authorization: Bearer <token> (http.token)"}"#;
    let wrong = r#"{"error":"the bearer token is not this server's"}"#;
    let rows: Vec<HttpRow<'_>> = vec![
        (
            post("/v1/check", None, check),
            401,
            www.clone(),
            needs,
            1,
            0,
        ),
        (
            post("/v1/check", Some("Bearer nope"), check),
            401,
            www.clone(),
            wrong,
            0,
            1,
        ),
        (
            post("/v1/check", Some("Bearer t0ken2"), check),
            401,
            www.clone(),
            wrong,
            0,
            1,
        ),
        (
            post("/v1/check", Some("Basic t0ken"), check),
            401,
            www.clone(),
            needs,
            1,
            0,
        ),
        (
            post(
                "/v1/acquire",
                None,
                r#"{"key": "gpu", "max_in_flight": 1, "ttl_ms": 86400000}"#,
            ),
            401,
            www.clone(),
            needs,
            1,
            0,
        ),
        (
            post("/v1/reserve", None, check),
            401,
            www.clone(),
            needs,
            1,
            0,
        ),
        (
            post("/v1/check", Some("Bearer t0ken"), check),
            200,
            None,
            "",
            0,
            0,
        ),
        (
            post("/v1/check", Some("bearer t0ken"), check),
            200,
            None,
            "",
            0,
            0,
        ),
        // the read-only endpoints take no token
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            200,
            None,
            "",
            0,
            0,
        ),
    ];
    for (i, (send, status, www, body, no_auth, wrong)) in rows.into_iter().enumerate() {
        let count = |reason| {
            metrics
                .auth_failures
                .get_or_create(&AuthLabels {
                    front: "http",
                    reason,
                })
                .get()
        };
        let before = (count("no_auth"), count("wrong_password"));
        let (s, w, b) = http_exchange(addr, &send).await;
        assert_eq!((s, &w), (status, &www), "row {i}: {b}");
        if !body.is_empty() {
            assert_eq!(b, body, "row {i}");
        }
        let after = (count("no_auth"), count("wrong_password"));
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (no_auth, wrong),
            "row {i}"
        );
    }
    srv.stop().await;
}
