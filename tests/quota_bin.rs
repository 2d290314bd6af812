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
        let reply = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("an answer within 10 s")
            .unwrap()
            .expect("an open stream");
        reply
            .bucket_action
            .into_iter()
            .map(|a| a.bucket_action.unwrap())
            .collect()
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
