//! The doors against clients that misbehave, as a table: each [`Row`] is the exact bytes
//! a client sends to one door (after the connections it holds open, from the addresses
//! it names), what the server answers (exact bytes, bytes among the answer, or nothing)
//! and whether it then closes, and the line `/metrics` shows for the outcome. Every row
//! runs against a server of its own (memory store, short timeouts, small caps: [`BASE`]
//! and the row's `config`), over real loopback TCP.
//!
//! To add a row: a [`Row`] in [`rows`]; its `config` adds to [`BASE`] ([`config`]).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// Every row's server: a rule, 300 ms timeouts, 4 connections per door, 2 per address.
const BASE: &str = r#"
domains:
  - domain: sec
    descriptors:
      - key: k
        rate_limit: {rate: 100/second}
"#;

/// The `connections:` fields of [`BASE`].
const BASE_CONNECTIONS: &str = "preface_timeout: 300ms, head_timeout: 300ms, idle_timeout: 300ms, request_timeout: 300ms, max_connections: 4, max_connections_per_client: 2";

/// A door of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    Grpc,
    Http,
    Resp,
}

/// What the server sends back to the row's bytes.
#[derive(Debug, Clone)]
enum Answer {
    /// Nothing: the connection is closed.
    Nothing,
    /// Exactly these bytes.
    Exactly(Vec<u8>),
    /// Some bytes, these among them (HTTP/2: frames the server sends of its own).
    Contains(Vec<u8>),
}

/// One client and what the server does with it.
#[derive(Debug, Clone)]
struct Row {
    /// What the row shows.
    name: &'static str,
    /// YAML added to [`BASE`] ([`config`]).
    config: &'static str,
    door: Door,
    /// Connections opened first and held open (sending nothing), by source address.
    hold: Vec<(&'static str, usize)>,
    /// The source address of the row's own connection.
    from: &'static str,
    /// The bytes it sends.
    send: Vec<u8>,
    answer: Answer,
    /// The server closes the connection after answering.
    closed: bool,
    /// A line `/metrics` shows afterwards.
    metric: &'static str,
}

impl Row {
    fn new(name: &'static str, door: Door, send: impl Into<Vec<u8>>) -> Row {
        Row {
            name,
            config: "",
            door,
            hold: Vec::new(),
            from: "127.0.0.1",
            send: send.into(),
            answer: Answer::Nothing,
            closed: true,
            metric: "",
        }
    }

    fn answer(mut self, answer: Answer) -> Row {
        self.answer = answer;
        self
    }

    fn open(mut self) -> Row {
        self.closed = false;
        self
    }

    fn hold(mut self, from: &'static str, n: usize) -> Row {
        self.hold.push((from, n));
        self
    }

    fn from(mut self, from: &'static str) -> Row {
        self.from = from;
        self
    }

    fn metric(mut self, metric: &'static str) -> Row {
        self.metric = metric;
        self
    }
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// An HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK block of literal fields without indexing (no Huffman coding).
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in fields {
        b.push(0);
        b.push(name.len() as u8);
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    }
    b
}

/// The preface and an empty SETTINGS frame.
fn h2_open() -> Vec<u8> {
    [PREFACE, &frame(4, 0, 0, &[])].concat()
}

/// An open connection, a `ShouldRateLimit` call on stream 1 and 3 octets of its 16-octet
/// message: the rest never comes.
fn h2_call_half_sent() -> Vec<u8> {
    let head = hpack(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", PATH),
        (":authority", "x"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]);
    [
        h2_open(),
        frame(1, 0x4, 1, &head),
        frame(0, 0, 1, &[0, 0, 0, 0, 16, 10, 3, b's']),
    ]
    .concat()
}

/// GOAWAY(NO_ERROR) with the largest stream id: the first of a graceful close.
fn goaway_graceful() -> Vec<u8> {
    frame(7, 0, 0, &[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0])
}

/// The head of the server's SETTINGS frame (24 octets: four settings), which it sends
/// as the connection opens, before the client's preface.
fn server_settings() -> Vec<u8> {
    vec![0, 0, 24, 4, 0, 0, 0, 0, 0]
}

/// RST_STREAM(CANCEL) on stream 1.
fn reset_cancel() -> Vec<u8> {
    frame(3, 0, 1, &[0, 0, 0, 8])
}

const MAX_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

fn rows() -> Vec<Row> {
    use Answer::*;
    use Door::*;
    vec![
        // idle connections
        Row::new("grpc: no preface", Grpc, "")
            .answer(Contains(server_settings()))
            .metric(r#"floodgate_connection_timeouts_total{front="grpc",phase="preface"} 1"#),
        Row::new("grpc: half a preface", Grpc, &PREFACE[..10])
            .answer(Contains(server_settings()))
            .metric(r#"floodgate_connection_timeouts_total{front="grpc",phase="preface"} 1"#),
        Row::new("grpc: open and idle", Grpc, h2_open())
            .answer(Contains(goaway_graceful()))
            .metric(r#"floodgate_connection_timeouts_total{front="grpc",phase="idle"} 1"#),
        Row::new("http: idle", Http, "")
            .metric(r#"floodgate_connection_timeouts_total{front="http",phase="idle"} 1"#),
        Row::new("resp: idle", Resp, "")
            .metric(r#"floodgate_connection_timeouts_total{front="resp",phase="idle"} 1"#),
        // half a head, half a command
        Row::new("http: half a head", Http, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .metric(r#"floodgate_connection_timeouts_total{front="http",phase="head"} 1"#),
        Row::new("resp: half a command", Resp, "*2\r\n$4\r\nPING\r\n$2\r\nh")
            .metric(r#"floodgate_connection_timeouts_total{front="resp",phase="request"} 1"#),
        Row::new("resp: half an inline command", Resp, "PIN")
            .metric(r#"floodgate_connection_timeouts_total{front="resp",phase="request"} 1"#),
        // bodies held open
        Row::new("grpc: a call's message held open", Grpc, h2_call_half_sent())
            .answer(Contains(reset_cancel()))
            .metric(r#"floodgate_connection_timeouts_total{front="grpc",phase="request"} 1"#),
        Row::new(
            "http: a body held open",
            Http,
            "POST /v1/check HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"domain\"",
        )
        .metric(r#"floodgate_connection_timeouts_total{front="http",phase="request"} 1"#),
        // a command past its size cap: refused on the bulk's header
        Row::new(
            "resp: a command past max_command_bytes",
            Resp,
            // a 65,000-octet argument, then the header of one that would end past 69,632
            [
                &b"*3\r\n$4\r\nPING\r\n$65000\r\n"[..],
                &[b'x'; 65_000],
                b"\r\n$5000\r\n",
            ]
            .concat(),
        )
        .answer(Exactly(
            b"-ERR Protocol error: command of more than 69632 bytes\r\n".to_vec(),
        ))
        .metric(r#"floodgate_requests_total{outcome="invalid"} 1"#),
        Row::new(
            "resp: a command past a configured max_command_bytes",
            Resp,
            "*2\r\n$4\r\nPING\r\n$100\r\n",
        )
        .answer(Exactly(
            b"-ERR Protocol error: command of more than 64 bytes\r\n".to_vec(),
        ))
        .metric(r#"floodgate_requests_total{outcome="invalid"} 1"#)
        .with_config("connections: {max_command_bytes: 64}"),
        // connection floods: per client, then in total
        Row::new("resp: past the per-client cap", Resp, "PING\r\n")
            .hold("127.0.0.1", 2)
            .answer(Exactly(MAX_CLIENTS.to_vec()))
            .metric(r#"floodgate_connections_refused_total{front="resp",reason="per_client"} 1"#),
        Row::new("resp: another client beside a full one", Resp, "PING\r\n")
            .hold("127.0.0.1", 2)
            .from("127.0.0.2")
            .answer(Exactly(b"+PONG\r\n".to_vec()))
            .open()
            .with_config("connections: {idle_timeout: 10s}")
            .metric(r#"floodgate_connections_refused_total{front="resp",reason="per_client"} 0"#),
        Row::new("resp: past the total cap", Resp, "PING\r\n")
            .hold("127.0.0.1", 2)
            .hold("127.0.0.2", 2)
            .from("127.0.0.3")
            .answer(Exactly(MAX_CLIENTS.to_vec()))
            .metric(r#"floodgate_connections_refused_total{front="resp",reason="total"} 1"#),
        Row::new("http: past the per-client cap", Http, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .hold("127.0.0.1", 2)
            .metric(r#"floodgate_connections_refused_total{front="http",reason="per_client"} 1"#),
        Row::new("http: past the total cap", Http, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .hold("127.0.0.1", 2)
            .hold("127.0.0.2", 2)
            .from("127.0.0.3")
            .metric(r#"floodgate_connections_refused_total{front="http",reason="total"} 1"#),
        Row::new("grpc: past the per-client cap", Grpc, h2_open())
            .hold("127.0.0.1", 2)
            .metric(r#"floodgate_connections_refused_total{front="grpc",reason="per_client"} 1"#),
        Row::new("grpc: past the total cap", Grpc, h2_open())
            .hold("127.0.0.1", 2)
            .hold("127.0.0.2", 2)
            .from("127.0.0.3")
            .metric(r#"floodgate_connections_refused_total{front="grpc",reason="total"} 1"#),
    ]
}

impl Row {
    fn with_config(mut self, config: &'static str) -> Row {
        self.config = config;
        self
    }
}

/// [`BASE`] and `extra`: a `connections: {...}` line in `extra` sets those fields over
/// [`BASE_CONNECTIONS`]; every other line is added as it is.
fn config(extra: &str) -> String {
    let mut fields: Vec<String> = BASE_CONNECTIONS.split(", ").map(String::from).collect();
    let mut out = BASE.to_string();
    for line in extra.lines() {
        let Some(row) = line.strip_prefix("connections:") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let row = row.trim().trim_start_matches('{').trim_end_matches('}');
        for f in row.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            let key = f.split(':').next().unwrap_or("");
            fields.retain(|b| !b.starts_with(&format!("{key}:")));
            fields.push(f.to_string());
        }
    }
    out.push_str(&format!("connections: {{{}}}\n", fields.join(", ")));
    out
}

async fn connect(from: &str, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(to).await.unwrap()
}

/// What came back: the bytes read, and whether the server closed the connection, within
/// `wait` (`want` bytes read end the wait for a connection that stays open).
async fn read_answer(s: &mut TcpStream, want: usize, wait: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, false),
        }
        if want > 0 && got.len() >= want && want != usize::MAX {
            // an open row: a moment more shows it stays open
            if let Ok(Ok(0)) =
                tokio::time::timeout(Duration::from_millis(400), s.read(&mut buf)).await
            {
                return (got, true);
            }
            return (got, false);
        }
    }
}

async fn run(row: &Row) {
    let srv = start(&config(row.config)).await;
    let r = &srv.running;
    let addr = match row.door {
        Door::Grpc => r.grpc,
        Door::Http => r.http,
        Door::Resp => r.resp,
    }
    .unwrap();
    let mut held = Vec::new();
    for (from, n) in &row.hold {
        for _ in 0..*n {
            held.push(connect(from, addr).await);
        }
    }
    // the held connections are accepted before the row's
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut s = connect(row.from, addr).await;
    let start = Instant::now();
    if !row.send.is_empty() {
        // a connection already closed (refused) may reset the write
        let _ = s.write_all(&row.send).await;
    }
    let want = match (&row.answer, row.closed) {
        (Answer::Exactly(b), false) => b.len(),
        _ => usize::MAX,
    };
    let (got, closed) = read_answer(&mut s, want, Duration::from_secs(5)).await;
    let shown = String::from_utf8_lossy(&got);
    match &row.answer {
        Answer::Nothing => assert!(got.is_empty(), "{}: answered {shown:?}", row.name),
        Answer::Exactly(b) => assert_eq!(
            shown,
            String::from_utf8_lossy(b),
            "{}: the answer",
            row.name
        ),
        Answer::Contains(b) => assert!(
            got.windows(b.len()).any(|w| w == &b[..]),
            "{}: {b:?} not among {got:?}",
            row.name
        ),
    }
    assert_eq!(
        closed,
        row.closed,
        "{}: closed after {:?}",
        row.name,
        start.elapsed()
    );
    drop(held);
    let metrics = r.engine.metrics().render();
    assert!(
        metrics.lines().any(|l| l == row.metric),
        "{}: no line {:?} in\n{}",
        row.name,
        row.metric,
        metrics
            .lines()
            .filter(|l| l.contains("connection") || l.contains("requests_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_door_answers_each_row_and_counts_it() {
    for row in rows() {
        tokio::time::timeout(Duration::from_secs(15), run(&row))
            .await
            .unwrap_or_else(|_| panic!("{}: no end within 15 s", row.name));
    }
}

/// The gRPC door gives a request's octets back to the connection window only when its
/// call is answered: a connection holds at most `connections.grpc_connection_window` of
/// unanswered requests, however many streams it opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_window_comes_back_only_when_a_call_is_answered() {
    let srv = start(&config(
        "limits: {max_request_bytes: 65536}\nconnections: {grpc_connection_window: 100000, idle_timeout: 10s, request_timeout: 10s}",
    ))
    .await;
    let addr = srv.running.grpc.unwrap();
    let (send, conn) = h2::client::handshake(TcpStream::connect(addr).await.unwrap())
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let head = || {
        http::Request::post(format!("http://{addr}{PATH}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap()
    };
    let mut send = send.ready().await.unwrap();
    // call A: 59,005 octets of a 60,005-octet message
    let (answer_a, mut a) = send.send_request(head(), false).unwrap();
    let mut part = vec![0u8; 59_005];
    part[..5].copy_from_slice(&[0, 0, 0, 0xea, 0x60]);
    a.send_data(bytes::Bytes::from(part), false).unwrap();
    // call B asks for 60,000 octets: only what A left of the window comes
    let mut send = send.ready().await.unwrap();
    let (answer_b, mut b) = send.send_request(head(), false).unwrap();
    b.reserve_capacity(60_000);
    let capacity = |b: &mut h2::SendStream<bytes::Bytes>| b.capacity();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = capacity(&mut b);
    assert!(
        held <= 100_000 - 59_005,
        "B was given {held} octets while A's 59,005 are unanswered"
    );
    // A ends (B gives back what it holds, so A's last octets can go) and is answered:
    // its octets come back, and B gets its 60,000
    b.reserve_capacity(0);
    a.send_data(bytes::Bytes::from(vec![0u8; 1000]), true)
        .unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(5), answer_a)
        .await
        .expect("A answered")
        .unwrap();
    assert_eq!(answered.status(), 200);
    b.reserve_capacity(60_000);
    let deadline = Instant::now() + Duration::from_secs(5);
    while capacity(&mut b) < 60_000 {
        assert!(
            Instant::now() < deadline,
            "B has {} octets after A was answered",
            capacity(&mut b)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((a, b, answer_b, send, answered));
    srv.stop().await;
}

/// A RESP client that keeps sending commands, each read ending inside the next command,
/// is making progress: the command timeout runs from the last command answered, so such
/// a client is never cut (here for four times the timeout).
#[tokio::test]
async fn resp_commands_arriving_without_pause_are_not_timed_out() {
    let srv = start(&config("")).await;
    let mut s = connect("127.0.0.1", srv.running.resp.unwrap()).await;
    s.write_all(b"PI").await.unwrap();
    let mut buf = [0u8; 64];
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(b"NG\r\nPI").await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert_eq!(&buf[..n], b"+PONG\r\n");
    }
    srv.stop().await;
}
