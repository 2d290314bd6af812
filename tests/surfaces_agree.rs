//! `floodgate proxy` and `floodgate server`, as real processes on loopback, decide through
//! one engine: with the same policy and the same traffic they write the same `RateLimit`,
//! `RateLimit-Policy` and `Retry-After` fields on every response, and export the same
//! metric names with the same label sets (docs/metrics.md) and the same decision counts,
//! in the format the scraper's `Accept` asks for.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

mod common;
use common::{Proc, free_port, wait_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// Requests sent to each surface, per key: the first 4 admitted (capacity 4), the rest
/// denied with a retry of 15 s (GCRA, 4 per minute).
const CALLS: usize = 7;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

async fn backend() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

/// The three rate-limit fields of a response (absent: `None`), and its status.
type Fields = (u16, [Option<String>; 3]);

async fn send(c: &HttpClient, req: hyper::Request<Full<Bytes>>) -> (Fields, Bytes) {
    let r = c.request(req).await.unwrap();
    let get = |n: &str| r.headers().get(n).map(|v| v.to_str().unwrap().to_string());
    let fields = (
        r.status().as_u16(),
        [
            get("ratelimit-policy"),
            get("ratelimit"),
            get("retry-after"),
        ],
    );
    (fields, r.into_body().collect().await.unwrap().to_bytes())
}

/// `/metrics` at `url` as a scraper with no `Accept` gets it: the Prometheus text 0.0.4,
/// checked by Prometheus' own `promtool check metrics`.
async fn metrics(c: &HttpClient, url: String) -> String {
    let r = c.get(url.parse().unwrap()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8",
        "{url}"
    );
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(body.to_vec()).unwrap();
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed");
    std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{url}: promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `/metrics` at `url` asked for OpenMetrics: its `Content-Type` and body.
async fn openmetrics(c: &HttpClient, url: String) -> (String, String) {
    let req = hyper::Request::get(url)
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let r = c.request(req).await.unwrap();
    let ctype = r.headers()["content-type"].to_str().unwrap().to_string();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (ctype, String::from_utf8(body.to_vec()).unwrap())
}

/// Metric name to the label-key sets of its series.
type LabelSets = BTreeMap<String, BTreeSet<Vec<String>>>;

/// Every series of an exposition: metric name to the label sets seen, and each series'
/// value by its full text (`name{labels}`).
fn series(text: &str) -> (LabelSets, BTreeMap<String, f64>) {
    let mut names = LabelSets::new();
    let mut values = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (key, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match key.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (key, ""),
        };
        let mut label_keys: Vec<String> = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| l.split('=').next().unwrap().to_string())
            .collect();
        label_keys.sort();
        names
            .entry(name.to_string())
            .or_default()
            .insert(label_keys);
        values.insert(key.to_string(), value.parse().unwrap());
    }
    (names, values)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_and_server_render_and_count_alike() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = backend().await;
    let (listen, admin) = (free_port(), free_port());
    let proxy_cfg = dir.path().join("proxy.toml");
    std::fs::write(
        &proxy_cfg,
        format!(
            r#"listen = "{listen}"
upstream = "http://{upstream}"
admin = "{admin}"

[deny]
retry_after_jitter = "0s"

[[policy]]
name = "api"
algorithm = "gcra"
rate = "4/min"
capacity = 4
key = "header:x-user"
"#
        ),
    )
    .unwrap();
    let _proxy = Proc(
        Command::new(BIN)
            .args(["proxy", "--config"])
            .arg(&proxy_cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let http = free_port();
    let server_cfg = dir.path().join("limits.yaml");
    std::fs::write(
        &server_cfg,
        r#"headers: {retry_after_jitter: 0s}
policies:
  api: {rate: 4/min, algorithm: gcra}
domain: edge
descriptors:
  - key: user
    rate_limit: {rate: 4/min, algorithm: gcra, name: api}
"#,
    )
    .unwrap();
    let _server = Proc(
        Command::new(BIN)
            .args(["server", "--config"])
            .arg(&server_cfg)
            .args([
                "--grpc",
                "off",
                "--resp",
                "off",
                "--http",
                &http.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(listen).await;
    wait_listening(admin).await;
    wait_listening(http).await;
    let c: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    // the same traffic: two keys, CALLS requests each; the server is asked once with the
    // HTTP API's policy form, once with Envoy's descriptor form (a limit named "api")
    for (user, server_body) in [
        ("alice", r#"{"policy": "api", "key": "alice"}"#.to_string()),
        (
            "bob",
            r#"{"domain": "edge", "descriptors": [[{"key": "user", "value": "bob"}]]}"#.to_string(),
        ),
    ] {
        for i in 0..CALLS {
            let (from_proxy, _) = send(
                &c,
                hyper::Request::get(format!("http://{listen}/"))
                    .header("x-user", user)
                    .body(Full::default())
                    .unwrap(),
            )
            .await;
            let (from_server, body) = send(
                &c,
                hyper::Request::post(format!("http://{http}/v1/check"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(server_body.clone())))
                    .unwrap(),
            )
            .await;
            assert_eq!(
                from_proxy,
                from_server,
                "{user}, call {i}: proxy (left) and server (right) differ; server said {}",
                String::from_utf8_lossy(&body)
            );
            let denied = i >= 4;
            assert_eq!(from_proxy.0, if denied { 429 } else { 200 }, "{user} {i}");
            assert_eq!(from_proxy.1[2].is_some(), denied, "{user} {i}");
            assert_eq!(
                from_proxy.1[0].as_deref(),
                Some("\"api\";q=4;w=60;floodgate-capacity=4")
            );
        }
    }

    let (p_names, p_values) = series(&metrics(&c, format!("http://{admin}/metrics")).await);
    let (s_names, s_values) = series(&metrics(&c, format!("http://{http}/metrics")).await);
    for at in [admin, http] {
        let (ctype, body) = openmetrics(&c, format!("http://{at}/metrics")).await;
        assert_eq!(
            ctype, "application/openmetrics-text; version=1.0.0; charset=utf-8",
            "{at}"
        );
        assert!(body.ends_with("# EOF\n"), "{at}: {body}");
    }
    let shared: Vec<&String> = p_names
        .keys()
        .filter(|n| s_names.contains_key(*n))
        .collect();
    for name in [
        "floodgate_decisions_total",
        "floodgate_requests_total",
        "floodgate_store_errors_total",
        "floodgate_store_keys",
        "floodgate_store_evicted_total",
    ] {
        assert!(
            shared.iter().any(|n| *n == name),
            "{name} is not exported by both: proxy {:?}, server {:?}",
            p_names.keys(),
            s_names.keys()
        );
    }
    for name in &shared {
        assert_eq!(
            p_names[*name], s_names[*name],
            "{name}: the label sets differ (proxy left, server right)"
        );
    }
    for series in [
        "floodgate_decisions_total{policy=\"api\",outcome=\"passed\"}",
        "floodgate_decisions_total{policy=\"api\",outcome=\"rejected\"}",
        "floodgate_requests_total{outcome=\"passed\"}",
        "floodgate_requests_total{outcome=\"rejected\"}",
        "floodgate_store_keys{policy=\"api\"}",
    ] {
        assert_eq!(
            p_values.get(series),
            s_values.get(series),
            "{series}: proxy (left) and server (right) counted differently"
        );
    }
    assert_eq!(
        p_values["floodgate_decisions_total{policy=\"api\",outcome=\"rejected\"}"],
        (2 * (CALLS - 4)) as f64
    );
}
