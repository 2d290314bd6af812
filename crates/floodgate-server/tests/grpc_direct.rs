//! The gRPC door's direct `ShouldRateLimit` path (hyper and prost, `src/grpc/serve.rs`)
//! against tonic's own service, the crate it stands in for: the same calls sent to two
//! servers with the same rules, one taking the direct path and one made to go through
//! tonic (a `grpc-encoding: identity` header sends a call to tonic's routes unchanged),
//! give the same HTTP status, content type, gRPC status and message, and the same
//! decoded response (time left to reset within a second: the two servers started apart).

mod common;

use bytes::Bytes;
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use http_body_util::BodyExt;
use prost::Message;
use tonic::transport::Channel;
use tower_service::Service;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// What a caller sees of one unary call.
#[derive(Debug, PartialEq)]
struct Seen {
    http_status: u16,
    content_type: Option<String>,
    grpc_status: Option<String>,
    grpc_message: Option<String>,
    response: Option<RateLimitResponse>,
}

/// One call as raw HTTP/2 over `channel`: `body` is the length-prefixed message as sent.
async fn send(channel: &Channel, body: Bytes, via_tonic: bool) -> Seen {
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://floodgate{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if via_tonic {
        req = req.header("grpc-encoding", "identity");
    }
    let req = req
        .body(tonic::body::Body::new(http_body_util::Full::new(body)))
        .unwrap();
    let mut channel = channel.clone();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .expect("the channel is ready");
    let resp = channel
        .call(req)
        .await
        .expect("the call reaches the server");
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.expect("the reply body reads");
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let data = collected.to_bytes();
    let field = |name: &str| {
        parts
            .headers
            .get(name)
            .or_else(|| trailers.get(name))
            .map(|v| v.to_str().unwrap().to_string())
    };
    let response = (data.len() >= 5).then(|| {
        assert_eq!(data[0], 0, "the reply is not compressed");
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        assert_eq!(data.len(), 5 + len, "one message in the reply");
        let mut r = RateLimitResponse::decode(&data[5..]).expect("the reply decodes");
        for s in &mut r.statuses {
            // the two servers started a few milliseconds apart: a whole-second
            // rendering may differ by one; checked apart below
            if let Some(d) = s.duration_until_reset.as_mut() {
                d.seconds = d.seconds.div_euclid(2) * 2;
                d.nanos = 0;
            }
        }
        r
    });
    Seen {
        http_status: parts.status.as_u16(),
        content_type: parts
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string()),
        grpc_status: field("grpc-status"),
        grpc_message: field("grpc-message"),
        response,
    }
}

#[tokio::test]
async fn the_direct_path_answers_as_tonic_does() {
    let direct = start(EDGE_RULES).await;
    let tonic_side = start(EDGE_RULES).await;
    let a = Channel::from_shared(direct.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let b = Channel::from_shared(tonic_side.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();

    let mut calls: Vec<Bytes> = Vec::new();
    let mut push = |r: RateLimitRequest| calls.push(framed(&r.encode_to_vec()));
    for i in 0..5 {
        push(req(
            "edge",
            vec![desc(&[("remote_address", "10.0.0.1")])],
            0,
        ));
        push(req("edge", vec![desc(&[("path", "/api/users")])], i % 3));
        push(req(
            "edge",
            vec![desc(&[("tenant", "t1"), ("user", "u1")])],
            1,
        ));
        push(req(
            "edge",
            vec![desc(&[("plan", "free")]), desc(&[("shadow", "x")])],
            0,
        ));
        push(req(
            "edge",
            vec![desc(&[("vip", "v")]), desc(&[("blocked", "b")])],
            0,
        ));
        push(req("edge", vec![desc(&[("nothing", "matches")])], 0));
    }
    // refused calls: no domain, an unknown domain, no descriptors, an empty entry key
    push(req("", vec![desc(&[("remote_address", "10.0.0.1")])], 0));
    push(req(
        "nowhere",
        vec![desc(&[("remote_address", "10.0.0.1")])],
        0,
    ));
    push(req("edge", vec![], 0));
    push(req("edge", vec![desc(&[("", "v")])], 0));
    // bytes that are not a RateLimitRequest, and a frame shorter than its length says
    calls.push(framed(&[0xff, 0xff, 0xff]));
    calls.push(Bytes::from_static(&[0, 0, 0, 0, 9, 1, 2]));

    let mut over_limit = 0;
    for (i, body) in calls.iter().enumerate() {
        let x = send(&a, body.clone(), false).await;
        let y = send(&b, body.clone(), true).await;
        assert_eq!(x, y, "call {i}: direct path vs tonic");
        if x.response.as_ref().is_some_and(|r| r.overall_code == 2) {
            over_limit += 1;
        }
    }
    // the sequence exercised both answers and the refusals
    assert!(over_limit >= 10, "{over_limit} over-limit answers");
    direct.stop().await;
    tonic_side.stop().await;
}
