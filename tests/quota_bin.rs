//! `floodgate server` as a Rate Limit Quota Service, the real binary driven over gRPC by
//! tonic clients of Envoy's `StreamRateLimitQuotas`: one server in process memory, two
//! servers sharing one Redis (127.0.0.1:6379, keys under a prefix of their own), and a
//! server whose Redis (its own, on a free port) goes away.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Proc;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const RULES: &str = "quota:\n  domains:\n    - domain: envoy\n      buckets:\n        - match: {name: api}\n          rate: 100/s\n          report_interval: 1s\n          assignment_ttl: 3s\n";

struct Server {
    proc: Proc,
    grpc: String,
    _dir: tempfile::TempDir,
}

fn spawn(rules: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.yaml");
    std::fs::write(&config, rules).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["server", "--config"])
        .arg(&config)
        .args(["--grpc", "127.0.0.1:0", "--http", "off", "--resp", "off"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grpc = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .unwrap_or_else(|| panic!("no grpc= in {line:?}"))
        .to_string();
    Server {
        proc: Proc(child),
        grpc,
        _dir: dir,
    }
}

/// One client's stream.
struct Stream {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: tonic::Streaming<RateLimitQuotaResponse>,
    first: bool,
}

impl Stream {
    async fn open(grpc: &str) -> Stream {
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        let (tx, reports) = mpsc::channel(4);
        let rx = client
            .stream_rate_limit_quotas(ReceiverStream::new(reports))
            .await
            .unwrap()
            .into_inner();
        Stream {
            tx,
            rx,
            first: true,
        }
    }

    /// Report `allowed` requests of bucket `name` over one second; the answer.
    async fn report(&mut self, name: &str, allowed: u64) -> Action {
        self.report_all(name, allowed).await[0]
    }

    /// Report as [`Stream::report`] does; every action of the answer.
    async fn report_all(&mut self, name: &str, allowed: u64) -> Vec<Action> {
        let msg = RateLimitQuotaUsageReports {
            domain: if self.first {
                "envoy".into()
            } else {
                String::new()
            },
            bucket_quota_usages: vec![BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: HashMap::from([("name".to_string(), name.to_string())]),
                }),
                time_elapsed: Some(PbDuration {
                    seconds: 1,
                    nanos: 0,
                }),
                num_requests_allowed: allowed,
                num_requests_denied: 0,
            }],
        };
        self.first = false;
        self.tx.send(msg).await.unwrap();
        // the answer: the first message naming the bucket, or empty (the server's pushes
        // of other buckets' fresh assignments may come first)
        loop {
            let reply = self.next().await;
            let names = |a: &BucketAction| {
                a.bucket_id
                    .as_ref()
                    .and_then(|id| id.bucket.get("name"))
                    .is_some_and(|n| n == name)
            };
            if reply.bucket_action.is_empty() || reply.bucket_action.iter().any(names) {
                return reply
                    .bucket_action
                    .into_iter()
                    .map(|a| a.bucket_action.unwrap())
                    .collect();
            }
        }
    }

    /// The next message of the stream (at most 10 s away).
    async fn next(&mut self) -> RateLimitQuotaResponse {
        tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a message within 10 s")
            .unwrap()
            .expect("an open stream")
    }
}

/// The rate of an assignment, requests per second.
fn rate(action: Action) -> f64 {
    let Action::QuotaAssignmentAction(a) = action else {
        panic!("{action:?}")
    };
    match a.rate_limit_strategy.unwrap().strategy.unwrap() {
        Strategy::TokenBucket(t) => {
            let fill = t.fill_interval.unwrap();
            f64::from(t.tokens_per_fill.unwrap().value)
                / (fill.seconds as f64 + f64::from(fill.nanos) / 1e9)
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_server_pushes_a_changed_share_without_waiting_for_a_report() {
    let s = spawn(RULES);
    let (mut a, mut b) = (Stream::open(&s.grpc).await, Stream::open(&s.grpc).await);
    // alone, a gets the whole limit
    assert!((rate(a.report("api", 90).await) - 100.0).abs() < 0.5);
    // b comes: b's answer is its share; a hears of its own smaller share from the
    // server's push (the rules' report interval: 1 s), a never reporting again
    let y = rate(b.report("api", 90).await);
    assert!((y - 50.0).abs() < 0.5, "{y}");
    let started = std::time::Instant::now();
    let push = a.next().await;
    let waited = started.elapsed();
    let x = rate(push.bucket_action[0].bucket_action.unwrap());
    assert!((x - 50.0).abs() < 0.5, "{x}");
    assert!(x + y <= 100.0 + 1e-6, "{x} + {y}");
    assert!(waited < Duration::from_secs(3), "pushed after {waited:?}");
    // b goes silent: its report ages out of the division after the assignment's time to
    // live (3 s after it); a reports on (1.2 s apart, so its own report is live when b's
    // has aged out) and is pushed the whole limit again, between its reports
    drop(b);
    assert!((rate(a.report("api", 90).await) - 50.0).abs() < 0.5);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let x = rate(a.report("api", 90).await);
    if (x - 50.0).abs() < 0.5 {
        let push = a.next().await;
        let x = rate(push.bucket_action[0].bucket_action.unwrap());
        assert!((x - 100.0).abs() < 0.5, "{x}");
    } else {
        // a machine slow enough that b's report aged out before a's second report
        assert!((x - 100.0).abs() < 0.5, "{x}");
    }
    drop(s.proc);
}

/// Two report rounds of `a` and `b`; their last shares.
async fn rounds(a: &mut Stream, b: &mut Stream, da: u64, db: u64) -> (f64, f64) {
    let mut last = (0.0, 0.0);
    for _ in 0..2 {
        last = (
            rate(a.report("api", da).await),
            rate(b.report("api", db).await),
        );
    }
    last
}

#[tokio::test]
async fn clients_of_one_server_divide_the_limit_by_demand() {
    let s = spawn(RULES);
    let (mut a, mut b) = (Stream::open(&s.grpc).await, Stream::open(&s.grpc).await);
    let (x, y) = rounds(&mut a, &mut b, 400, 10).await;
    assert!(x + y <= 100.0 + 1e-6, "{x} + {y}");
    assert!((y - 10.0).abs() < 0.5 && (x - 90.0).abs() < 0.5, "{x} {y}");
    // unknown buckets are denied (the default)
    let Action::QuotaAssignmentAction(deny) = a.report("other", 1).await else {
        panic!()
    };
    assert!(matches!(
        deny.rate_limit_strategy.unwrap().strategy,
        Some(Strategy::BlanketRule(1))
    ));
    drop(s.proc);
}

#[tokio::test]
async fn two_servers_on_one_redis_share_the_division() {
    let prefix = format!("fgtest-quota-bin-{}:", fastrand::u32(..));
    let rules = format!("{RULES}store: {{type: redis, redis: {{prefix: '{prefix}'}}}}\n");
    let (one, two) = (spawn(&rules), spawn(&rules));
    let mut a = Stream::open(&one.grpc).await;
    let mut b = Stream::open(&two.grpc).await;
    let (x, y) = rounds(&mut a, &mut b, 400, 400).await;
    assert!(
        (x + y - 100.0).abs() < 0.5,
        "{x} + {y}: the limit, divided once"
    );
    assert!((x - 50.0).abs() < 0.5, "{x} {y}");
    // a client moving to the other replica gets an assignment at its first report
    let mut a2 = Stream::open(&two.grpc).await;
    let z = rate(a2.report("api", 400).await);
    assert!(z > 0.0 && z <= 100.0, "{z}");
    // a, on the first replica, hears of its smaller share by a push (read from Redis)
    let push = a.next().await;
    let x = rate(push.bucket_action[0].bucket_action.unwrap());
    assert!((x - 100.0 / 3.0).abs() < 0.5, "{x}");
    common::delete_redis_keys(&prefix);
}

#[tokio::test]
async fn when_redis_fails_no_assignment_is_sent_and_the_client_keeps_its_own() {
    let port = common::free_port().port();
    let redis = common::start_redis(port);
    let rules =
        format!("{RULES}store: {{type: redis, redis: {{url: 'redis://127.0.0.1:{port}'}}}}\n");
    let s = spawn(&rules);
    let mut a = Stream::open(&s.grpc).await;
    assert!((rate(a.report("api", 10).await) - 100.0).abs() < 1e-6);
    drop(redis);
    // the store fails: the answer carries no action for the bucket, so the client's
    // assignment runs to its time to live (then its expired-assignment behaviour)
    assert!(a.report_all("api", 10).await.is_empty());
    // a bucket that needs no store is still answered (unknown: deny all)
    assert_eq!(a.report_all("other", 1).await.len(), 1);
    drop(s.proc);
}
