//! Envoy RLS v3 over real gRPC (tonic client with the envoy-types API) against a server
//! on a free loopback port.

mod common;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::Code as GrpcCode;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const CONFIG: &str = EDGE_RULES;

fn status(r: &RateLimitResponse, i: usize) -> (i32, Option<(u32, i32, String)>, u32) {
    let s = &r.statuses[i];
    (
        s.code,
        s.current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit, l.name.clone())),
        s.limit_remaining,
    )
}

#[tokio::test]
async fn codes_statuses_and_headers_per_value() {
    let srv = start(CONFIG).await;
    let mut c = srv.client().await;
    let one = |ip: &str| req("edge", vec![desc(&[("remote_address", ip)])], 0);
    for remaining in [2, 1, 0] {
        let r = call(&mut c, one("10.0.0.1")).await.unwrap();
        assert_eq!(r.overall_code, OK);
        assert_eq!(
            status(&r, 0),
            (
                OK,
                Some((3, Unit::Minute as i32, "remote_address".into())),
                remaining
            )
        );
        let reset = r.statuses[0].duration_until_reset.unwrap();
        assert!(reset.seconds <= 60 && (reset.seconds > 0 || reset.nanos > 0));
        assert_eq!(
            header(&r, "RateLimit-Policy"),
            Some("\"remote_address\";q=3;w=60;floodgate-capacity=3")
        );
        // over the next minute at 3/min: 3, less how far the calls at once put the key
        // ahead of a steady client (all but the last one sent)
        assert_eq!(
            header(&r, "RateLimit"),
            Some(format!("\"remote_address\";r={};t=60", remaining + 1).as_str())
        );
        assert_eq!(header(&r, "Retry-After"), None);
    }
    let r = call(&mut c, one("10.0.0.1")).await.unwrap();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(status(&r, 0).0, OVER);
    // GCRA 3/min: one request every 20 s; with no jitter configured, exactly ceil(20 s).
    assert_eq!(header(&r, "Retry-After"), Some("20"));
    assert_eq!(
        header(&r, "RateLimit"),
        Some("\"remote_address\";r=0;t=20"),
        "nothing before the retry, as Retry-After says"
    );
    // Each value has its own counter; an exact value rule beats the key-only rule.
    assert_eq!(
        call(&mut c, one("10.0.0.2")).await.unwrap().overall_code,
        OK
    );
    let r = call(&mut c, one("10.9.9.9")).await.unwrap();
    assert_eq!(
        status(&r, 0),
        (OK, Some((1, Unit::Minute as i32, "banned".into())), 0)
    );
    assert_eq!(
        call(&mut c, one("10.9.9.9")).await.unwrap().overall_code,
        OVER
    );
    srv.stop().await;
}

#[tokio::test]
async fn hits_addend_is_the_cost_zero_means_one_and_descriptors_can_override() {
    let srv = start(CONFIG).await;
    let mut c = srv.client().await;
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/x")])], 0))
        .await
        .unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining, 99,
        "hits_addend 0 counts as 1"
    );
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/x")])], 10))
        .await
        .unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 89);
    let mut d = desc(&[("path", "/x")]);
    d.hits_addend = Some(UInt64Value { value: 0 });
    let r = call(&mut c, req("edge", vec![d], 10)).await.unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining, 89,
        "a descriptor's own hits_addend 0 peeks"
    );
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/x")])], 1000))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OVER, "cost above the limit");
    assert_eq!(header(&r, "Retry-After"), None, "it can never succeed");
    srv.stop().await;
}

#[tokio::test]
async fn nested_and_wildcard_matching_follow_envoy() {
    let srv = start(CONFIG).await;
    let mut c = srv.client().await;
    // wildcard beats key-only
    let r = call(
        &mut c,
        req("edge", vec![desc(&[("path", "/api/v1/users")])], 0),
    )
    .await
    .unwrap();
    assert_eq!(status(&r, 0).1.unwrap().2, "api-prefix");
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/api/v2")])], 0))
        .await
        .unwrap();
    assert_eq!(
        status(&r, 0).2,
        1,
        "each value under a wildcard has its own counter"
    );
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/other")])], 0))
        .await
        .unwrap();
    assert_eq!(status(&r, 0).1.unwrap().2, "any-path");
    // nested: tenant > user; the limit is on the full path only
    let nested = desc(&[("tenant", "acme"), ("user", "bob")]);
    let r = call(&mut c, req("edge", vec![nested.clone()], 0))
        .await
        .unwrap();
    assert_eq!(
        status(&r, 0),
        (OK, Some((2, Unit::Minute as i32, "tenant.user".into())), 1)
    );
    let r = call(&mut c, req("edge", vec![desc(&[("tenant", "acme")])], 0))
        .await
        .unwrap();
    assert_eq!(
        status(&r, 0),
        (OK, None, 0),
        "shorter than any rule path: no limit"
    );
    let deeper = desc(&[("tenant", "acme"), ("user", "bob"), ("x", "y")]);
    let r = call(&mut c, req("edge", vec![deeper], 0)).await.unwrap();
    assert_eq!(
        status(&r, 0),
        (OK, None, 0),
        "longer than any rule path: no limit"
    );
    let r = call(&mut c, req("edge", vec![desc(&[("nothing", "here")])], 0))
        .await
        .unwrap();
    assert_eq!((r.overall_code, status(&r, 0)), (OK, (OK, None, 0)));
    assert!(r.response_headers_to_add.is_empty());
    // per tenant+user values
    call(&mut c, req("edge", vec![nested.clone()], 0))
        .await
        .unwrap();
    assert_eq!(
        call(&mut c, req("edge", vec![nested], 0))
            .await
            .unwrap()
            .overall_code,
        OVER
    );
    let other = desc(&[("tenant", "acme"), ("user", "eve")]);
    assert_eq!(
        call(&mut c, req("edge", vec![other], 0))
            .await
            .unwrap()
            .overall_code,
        OK
    );
    srv.stop().await;
}

#[tokio::test]
async fn several_limits_and_descriptors_are_all_or_nothing() {
    let srv = start(CONFIG).await;
    let mut c = srv.client().await;
    let free = || desc(&[("plan", "free")]);
    for _ in 0..2 {
        let r = call(&mut c, req("edge", vec![free()], 0)).await.unwrap();
        assert_eq!(r.overall_code, OK);
    }
    let r = call(&mut c, req("edge", vec![free()], 0)).await.unwrap();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        status(&r, 0).1.unwrap().2,
        "per-30s",
        "the denying limit is reported"
    );
    assert!(
        header(&r, "RateLimit-Policy")
            .unwrap()
            .contains("\"per-minute\";q=10;w=60;floodgate-capacity=10, \"per-30s\";q=2;w=30")
    );
    // two admitted at once put per-minute one ahead of a steady client (9 over the next
    // minute); charged for the denied request too, it would be two ahead (8)
    assert!(
        header(&r, "RateLimit")
            .unwrap()
            .contains("\"per-minute\";r=9;"),
        "per-minute was not charged by the denied request: {:?}",
        header(&r, "RateLimit")
    );
    // Across descriptors: the path limit is not charged when plan=free denies.
    let r = call(
        &mut c,
        req("edge", vec![desc(&[("path", "/q")]), free()], 0),
    )
    .await
    .unwrap();
    assert_eq!(
        (r.overall_code, status(&r, 0).0, status(&r, 1).0),
        (OVER, OK, OVER)
    );
    assert_eq!(status(&r, 0).2, 100, "path /q untouched");
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/q")])], 0))
        .await
        .unwrap();
    assert_eq!(status(&r, 0).2, 99);
    srv.stop().await;
}

#[tokio::test]
async fn shadow_unlimited_block_and_replaces() {
    let srv = start(CONFIG).await;
    let mut c = srv.client().await;
    for _ in 0..3 {
        let r = call(&mut c, req("edge", vec![desc(&[("shadow", "s")])], 0))
            .await
            .unwrap();
        assert_eq!(
            (r.overall_code, status(&r, 0).0),
            (OK, OK),
            "shadow mode never denies"
        );
        assert_eq!(status(&r, 0).2, 0);
    }
    let r = call(&mut c, req("edge", vec![desc(&[("vip", "x")])], 1000))
        .await
        .unwrap();
    assert_eq!((r.overall_code, status(&r, 0)), (OK, (OK, None, 0)));
    let r = call(&mut c, req("edge", vec![desc(&[("blocked", "x")])], 0))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        status(&r, 0),
        (OVER, Some((0, Unit::Second as i32, "blocked".into())), 0)
    );
    assert_eq!(header(&r, "Retry-After"), None);
    // old alone is limited at 1/min; with new in the same request, new-limit replaces it.
    let r = call(&mut c, req("edge", vec![desc(&[("old", "a")])], 0))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OK);
    let r = call(&mut c, req("edge", vec![desc(&[("old", "a")])], 0))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OVER);
    let r = call(
        &mut c,
        req(
            "edge",
            vec![desc(&[("old", "a")]), desc(&[("new", "a")])],
            0,
        ),
    )
    .await
    .unwrap();
    assert_eq!(r.overall_code, OK);
    assert_eq!(status(&r, 0), (OK, None, 0), "old-limit replaced");
    assert_eq!(status(&r, 1).1.unwrap().2, "new-limit");
    let m = srv.running.engine.metrics().render();
    assert!(m.contains("floodgate_descriptor_decisions_total{domain=\"edge\",descriptor=\"shadow\",outcome=\"rejected_dry_run\"} 2"), "{m}");
    assert!(m.contains(
        "floodgate_descriptor_decisions_total{domain=\"edge\",descriptor=\"vip\",outcome=\"unlimited\"} 1"
    ));
    srv.stop().await;
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_the_service_stays_up() {
    let srv = start(CONFIG).await;
    let mut c = srv.client().await;
    let e = call(&mut c, req("nope", vec![desc(&[("a", "b")])], 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), GrpcCode::NotFound);
    assert_eq!(
        e.message(),
        "unknown domain \"nope\"; configured domains: edge"
    );
    let e = call(&mut c, req("", vec![desc(&[("a", "b")])], 0))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (GrpcCode::InvalidArgument, "the domain must not be empty")
    );
    let e = call(&mut c, req("edge", vec![], 0)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            GrpcCode::InvalidArgument,
            "the descriptor list must not be empty"
        )
    );
    let e = call(&mut c, req("edge", vec![desc(&[])], 0))
        .await
        .unwrap_err();
    assert_eq!(e.message(), "descriptor 0 has no entries");
    let many = (0..65).map(|i| desc(&[("path", &i.to_string())])).collect();
    let e = call(&mut c, req("edge", many, 0)).await.unwrap_err();
    assert_eq!(e.code(), GrpcCode::InvalidArgument);
    assert_eq!(
        e.message(),
        "65 descriptors is more than the maximum of 64 (limits.max_descriptors)"
    );
    let long = "v".repeat(2000);
    let e = call(&mut c, req("edge", vec![desc(&[("path", &long)])], 0))
        .await
        .unwrap_err();
    assert!(
        e.message()
            .contains("the value is 2000 bytes, more than the maximum of 1024"),
        "{}",
        e.message()
    );
    let e = call(&mut c, req("edge", vec![desc(&[("", "x")])], 0))
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        "descriptor 0 entry 0: the key must not be empty"
    );
    // A message above the gRPC size cap (1 MiB) is refused by the transport.
    let huge: Vec<_> = (0..3000)
        .map(|_| desc(&[("path", &"x".repeat(500))]))
        .collect();
    let e = call(&mut c, req("edge", huge, 0)).await.unwrap_err();
    assert_eq!(e.code(), GrpcCode::OutOfRange, "{e:?}");
    assert!(e.message().contains("the limit is: 1048576 bytes"), "{e:?}");
    let mut neg = desc(&[("path", "/n")]);
    neg.is_negative_hits = true;
    let e = call(&mut c, req("edge", vec![neg], 0)).await.unwrap_err();
    assert!(e.message().contains("is_negative_hits"), "{}", e.message());
    // Still serving.
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/still")])], 0))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OK);
    let m = srv.running.engine.metrics().render();
    assert!(
        m.contains("floodgate_requests_total{outcome=\"invalid\"}"),
        "{m}"
    );
    assert!(
        m.contains("floodgate_requests_total{outcome=\"unknown_domain\"} 1"),
        "{m}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn malformed_protobuf_is_rejected_and_the_service_stays_up() {
    let srv = start(CONFIG).await;
    let channel = tonic::transport::Channel::from_shared(srv.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = tonic::client::Grpc::new(channel);
    for garbage in [
        vec![0xff, 0xff, 0xff, 0xff],
        vec![0x0a, 0x20, b'a'],
        vec![0x12, 0x05, 0x0a],
    ] {
        raw.ready().await.unwrap();
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        );
        let e = raw
            .unary::<Vec<u8>, RateLimitResponse, _>(tonic::Request::new(garbage), path, RawCodec)
            .await
            .unwrap_err();
        assert_eq!(e.code(), GrpcCode::Internal, "{e:?}");
        assert!(e.message().contains("decode"), "{e:?}");
    }
    let mut c = srv.client().await;
    let r = call(&mut c, req("edge", vec![desc(&[("path", "/ok")])], 0))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OK);
    srv.stop().await;
}

#[tokio::test]
async fn unknown_domains_can_be_allowed_as_envoy_does() {
    let srv = start("unknown_domain: allow\ndomain: d\ndescriptors: []\n").await;
    let mut c = srv.client().await;
    let r = call(
        &mut c,
        req("other", vec![desc(&[("a", "b")]), desc(&[("c", "d")])], 0),
    )
    .await
    .unwrap();
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses.len(), 2);
    assert!(
        r.statuses
            .iter()
            .all(|s| s.code == OK && s.current_limit.is_none())
    );
    srv.stop().await;
}

#[tokio::test]
async fn a_deadline_from_the_client_is_honoured_and_a_met_one_changes_nothing() {
    // Envoy sends grpc-timeout with every call; the server reads it as tonic's does.
    let srv = start("unknown_domain: allow\ndomain: d\ndescriptors: []\n").await;
    let mut c = srv.client().await;
    let mut r = tonic::Request::new(req("other", vec![desc(&[("a", "b")])], 0));
    r.set_timeout(std::time::Duration::from_secs(5));
    assert!(r.metadata().contains_key("grpc-timeout"));
    let r = c.should_rate_limit(r).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses.len(), 1);
    srv.stop().await;
}

#[tokio::test]
async fn health_service_reports_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let srv = start(CONFIG).await;
    let channel = tonic::transport::Channel::from_shared(srv.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = h
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }
    let e = h
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), GrpcCode::NotFound);
    srv.stop().await;
}

/// Sends raw bytes as the request message; decodes the reply as a RateLimitResponse.
#[derive(Debug, Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = RateLimitResponse;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = RateLimitResponse;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<RateLimitResponse>, tonic::Status> {
        use prost::Message;
        RateLimitResponse::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

#[tokio::test]
async fn concurrent_calls_on_one_connection_beside_an_open_stream_are_each_decided_once() {
    // 200 calls in flight at once on one HTTP/2 connection, beside a health watch that
    // stays open, are all answered, and each counter admits exactly its limit.
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    const LIMIT: usize = 15;
    const KEYS: usize = 10;
    const PER_KEY: usize = 20;
    let srv =
        start("domain: fanout\ndescriptors:\n  - key: k\n    rate_limit: {rate: 15/day}\n").await;
    let channel = tonic::transport::Channel::from_shared(srv.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut watch = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    let client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
    let calls = (0..KEYS * PER_KEY).map(|i| {
        let mut c = client.clone();
        async move {
            let value = format!("v{}", i % KEYS);
            let r = c
                .should_rate_limit(req("fanout", vec![desc(&[("k", &value)])], 1))
                .await
                .unwrap()
                .into_inner();
            (i % KEYS, r.overall_code)
        }
    });
    let answers = futures_util::future::join_all(calls).await;
    assert_eq!(answers.len(), KEYS * PER_KEY);
    for key in 0..KEYS {
        let ok = answers
            .iter()
            .filter(|&&(k, c)| k == key && c == OK)
            .count();
        let over = answers
            .iter()
            .filter(|&&(k, c)| k == key && c == OVER)
            .count();
        assert_eq!((ok, over), (LIMIT, PER_KEY - LIMIT), "key v{key}");
    }
    drop(watch);
    srv.stop().await;
}
