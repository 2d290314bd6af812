//! The gRPC door: any bytes decoded (prost) as Envoy's `RateLimitRequest`, then checked by
//! the server's `ShouldRateLimit` against a fixed config on the in-process store
//! (descriptor matching: exact values, prefixes, nested rules, shadow and unlimited rules,
//! several limits on one rule).
//!
//! The direct path's own reader (`grpc::wire::read_request`) on the same bytes: never a
//! panic, and whatever it reads prost decodes too, to the same request.
//!
//! Never a panic; a decoded request encodes back to itself; a refused request is
//! `INVALID_ARGUMENT`, or `NOT_FOUND` for a domain the config does not name (never
//! `INTERNAL`: the store cannot fail); an answered one has one status per descriptor,
//! an overall code that is `OVER_LIMIT` exactly when a status is, no status over its limit
//! for a shadow, unlimited or unmatched descriptor, and no more remaining than any limit
//! of the config allows.
#![no_main]
use std::path::Path;
use std::sync::{Arc, OnceLock};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use floodgate_engine::TokioWallClock;
use floodgate_server::descriptors::{Engine, FaultPolicy, StoreHandle};
use floodgate_server::grpc::RlsService;
use floodgate_server::metrics::Metrics;
use libfuzzer_sys::fuzz_target;
use prost::Message;

const CONFIG: &str = r#"
store: {type: memory, max_keys: 4096}
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: user
        value: "vip*"
        rate_limit: {unit: minute, requests_per_unit: 100}
      - key: user
        value: banned
        rate_limit: {unit: second, requests_per_unit: 0}
      - key: user
        rate_limit: {unit: second, requests_per_unit: 2, name: per_user}
        descriptors:
          - key: path
            rate_limits:
              - {requests_per_unit: 3, window: 10s, algorithm: sliding-log, name: short}
              - {rate: "50/h", burst: 9, replaces: [{name: per_user}]}
      - key: dry
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: free
        rate_limit: {unlimited: true}
  - domain: api
    descriptors:
      - key: tenant
        value: a
        rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed-window}
"#;

/// Above every limit's capacity in [`CONFIG`].
const MOST_REMAINING: u32 = 100;

mod common;

fn door() -> &'static RlsService {
    static DOOR: OnceLock<RlsService> = OnceLock::new();
    DOOR.get_or_init(|| {
        let config = floodgate_server::config::parse(Path::new("limits.yaml"), CONFIG)
            .expect("the target's config");
        common::runtime().block_on(async {
            let store = StoreHandle::Memory {
                max_keys: 4096,
                share: 1,
                clock: TokioWallClock::new(),
            };
            let metrics = Arc::new(Metrics::new(None));
            let engine = Engine::new(config.rules, store, FaultPolicy::default(), metrics)
                .expect("the target's engine");
            RlsService::new(Arc::new(engine))
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let direct = floodgate_server::grpc::wire::read_request(data);
    let Ok(req) = RateLimitRequest::decode(data) else {
        assert!(direct.is_none(), "read what prost refuses: {direct:?}");
        return;
    };
    if let Some(d) = &direct {
        assert_eq!(d, &floodgate_server::grpc::wire::RequestRef::of(&req));
    }
    assert_eq!(
        RateLimitRequest::decode(&req.encode_to_vec()[..]).as_ref(),
        Ok(&req)
    );
    let request = tonic::Request::new(req.clone());
    let answer = common::runtime().block_on(door().should_rate_limit(request));
    let known = ["edge", "api"].contains(&req.domain.as_str());
    let resp = match answer {
        Ok(r) => r.into_inner(),
        Err(status) => {
            match status.code() {
                tonic::Code::InvalidArgument => {}
                tonic::Code::NotFound => assert!(!known, "{status:?}"),
                _ => panic!("{status:?} for {req:?}"),
            }
            return;
        }
    };
    assert!(known, "an unknown domain is answered: {req:?}");
    assert_eq!(resp.statuses.len(), req.descriptors.len());
    let over = resp
        .statuses
        .iter()
        .any(|s| s.code == Code::OverLimit as i32);
    let overall = if over { Code::OverLimit } else { Code::Ok };
    assert_eq!(resp.overall_code, overall as i32);
    for (s, desc) in resp.statuses.iter().zip(&req.descriptors) {
        assert!(
            s.code == Code::Ok as i32 || s.code == Code::OverLimit as i32,
            "{s:?}"
        );
        assert!(s.limit_remaining <= MOST_REMAINING, "{s:?}");
        let first = desc.entries[0].key.as_str();
        let top_level = req.domain == "api" && first == "tenant"
            || req.domain == "edge" && ["ip", "user", "dry", "free"].contains(&first);
        let plain = !top_level || desc.entries.len() == 1 && ["dry", "free"].contains(&first);
        if plain {
            assert_eq!(s.code, Code::Ok as i32, "{desc:?}: {s:?}");
        }
        if !top_level || first == "free" {
            assert!(s.current_limit.is_none(), "{desc:?}: {s:?}");
        }
    }
});
