//! The layer in a tonic gRPC server over loopback HTTP/2 (tonic-health's service, tonic's
//! client): admitted calls carry the RateLimit fields as metadata; a denied call gets
//! the gRPC status RESOURCE_EXHAUSTED with Retry-After and grpc-retry-pushback-ms, not
//! an HTTP 429 the client would read as UNAVAILABLE. And `floodgate proxy` (h2c to the
//! upstream) in front of a tonic server: the same statuses, and a dead upstream as
//! UNAVAILABLE with the proxy's own message.

mod common;

use common::RunningProxy;
use floodgate_core::{Kind, Spec};
use floodgate_http::{Policy, RateLimiter};
use tonic::Code;
use tonic::transport::server::TcpConnectInfo;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_calls_are_limited_with_a_grpc_status() {
    // two calls per minute per client IP, no burst beyond them
    let mut spec = Spec::new(Kind::Gcra, "2/min".parse().unwrap());
    spec.capacity = Some(2);
    let limiter = RateLimiter::builder()
        .policy(Policy::new("per-ip", spec))
        // tonic puts the peer address in TcpConnectInfo
        .peer(|ext| {
            ext.get::<TcpConnectInfo>()
                .and_then(|c| c.remote_addr())
                .map(|a| a.ip())
        })
        .build()
        .unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .layer(limiter.layer())
            .add_service(health)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut client = health_client(addr).await;
    // over the next minute at 2/min: 2 after the first call, 1 after the second (which
    // puts the key one ahead of a steady client)
    for left in ["2", "1"] {
        let resp = client.check(health_check()).await.unwrap();
        let md = resp.metadata();
        let rl = md.get("ratelimit").unwrap().to_str().unwrap();
        assert!(rl.starts_with(&format!("\"per-ip\";r={left};")), "{rl}");
        assert!(md.get("ratelimit-policy").is_some());
    }
    let status = client.check(health_check()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("rate limited by policy \"per-ip\""),
        "{status:?}"
    );
    let md = status.metadata();
    let retry: u64 = md
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((30..=31).contains(&retry), "retry after {retry}");
    let pushback: u64 = md
        .get("grpc-retry-pushback-ms")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(pushback, retry * 1000);
    assert!(md.get("ratelimit").is_some());
    server.abort();
}

async fn health_client(addr: std::net::SocketAddr) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn health_check() -> HealthCheckRequest {
    HealthCheckRequest {
        service: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_through_the_proxy_gets_grpc_statuses() {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let cfg = "upstream_http2 = true\n[[policy]]\nname = \"per-ip\"\nrate = \"2/min\"\nburst = 1\nnodelay = true\n";
    let p = RunningProxy::start(cfg, backend).await;
    let mut client = health_client(p.addr).await;
    for _ in 0..2 {
        let resp = client.check(health_check()).await.unwrap();
        assert!(resp.metadata().get("ratelimit").is_some());
    }
    let status = client.check(health_check()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.metadata().get("retry-after").is_some());
    // the upstream goes away: UNAVAILABLE, with the proxy's message
    server.abort();
    let _ = server.await;
    let p2 = RunningProxy::start(
        "upstream_http2 = true\n[[policy]]\nname = \"p\"\nrate = \"100/s\"\n",
        backend,
    )
    .await;
    let mut client = health_client(p2.addr).await;
    let status = client.check(health_check()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), "upstream unavailable", "{status:?}");
}
