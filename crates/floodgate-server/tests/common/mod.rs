//! Shared helpers: a server on free loopback ports from a config text, a gRPC client,
//! and a tiny HTTP/1.1 client over a real TCP connection.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use floodgate_server::{config, server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

/// A running server and its config file.
pub struct Srv {
    pub running: server::Running,
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Srv {
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.running.grpc.unwrap())
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(self.grpc_url())
            .await
            .unwrap()
    }

    pub async fn stop(self) {
        self.running.shutdown(Duration::from_secs(5)).await;
    }
}

/// Start a server from `yaml` (listen addresses are replaced by free loopback ports).
pub async fn start(yaml: &str) -> Srv {
    start_with(yaml, "limits.yaml", false).await
}

/// Start from `text` saved as `name` (extension picks the format), optionally watching.
pub async fn start_with(text: &str, name: &str, watch: bool) -> Srv {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let cfg = config::load(&path).unwrap();
    let mut settings = cfg.settings.clone();
    let any = Some("127.0.0.1:0".parse().unwrap());
    settings.grpc = any;
    settings.http = any;
    settings.resp = any;
    let running = server::start(
        cfg,
        settings,
        server::Options {
            path: path.clone(),
            watch,
            sighup: false,
            debounce: Duration::from_millis(30),
        },
    )
    .await
    .unwrap();
    Srv { running, dir, path }
}

/// A descriptor from `(key, value)` pairs.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: hits,
    }
}

pub async fn call(
    c: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    c.should_rate_limit(r).await.map(|r| r.into_inner())
}

/// `message` as one uncompressed gRPC message: a zero flag byte, the length (4 bytes,
/// big-endian), the message.
pub fn framed(message: &[u8]) -> bytes::Bytes {
    use bytes::BufMut;
    let mut b = bytes::BytesMut::with_capacity(5 + message.len());
    b.put_u8(0);
    b.put_u32(message.len() as u32);
    b.put_slice(message);
    b.freeze()
}

pub fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// A reply of the tiny HTTP client.
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.1 request over a fresh connection (`Connection: close`).
pub async fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &[u8]) -> HttpReply {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    HttpReply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// Poll `cond` every 10 ms for up to `secs` seconds.
pub async fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// A `redis` crate connection to the server's RESP door.
pub async fn resp_client(srv: &Srv) -> redis::aio::MultiplexedConnection {
    let url = format!("redis://{}/", srv.running.resp.unwrap());
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The rules of the gRPC tests: one domain with a rule of each kind (per value, exact
/// value, prefix, nested, two limits, shadow, unlimited, zero, replaces).
pub const EDGE_RULES: &str = r#"
headers: {retry_after_jitter: 0s}
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: remote_address
        value: 10.9.9.9
        rate_limit: {unit: minute, requests_per_unit: 1, name: banned}
      - key: path
        value: /api/*
        rate_limit: {unit: hour, requests_per_unit: 2, name: api-prefix}
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 100, name: any-path}
      - key: tenant
        descriptors:
          - key: user
            rate_limit: {unit: minute, requests_per_unit: 2}
      - key: plan
        value: free
        rate_limits:
          - {requests_per_unit: 10, unit: minute, name: per-minute}
          - {requests_per_unit: 2, window: 30s, algorithm: sliding-log, name: per-30s}
      - key: shadow
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: vip
        rate_limit: {unlimited: true}
      - key: blocked
        rate_limit: {unit: second, requests_per_unit: 0}
      - key: old
        rate_limit: {unit: minute, requests_per_unit: 1, name: old-limit}
      - key: new
        rate_limit: {unit: minute, requests_per_unit: 5, name: new-limit, replaces: [{name: old-limit}]}
"#;
