use std::path::Path;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry as PbEntry, RateLimitOverride,
};
use envoy_types::pb::google::protobuf::UInt64Value;
use floodgate_engine::TokioWallClock;
use prost::Message;

use super::*;
use crate::descriptors::{DescriptorIn, Engine, FaultPolicy, StoreHandle};
use crate::metrics::Metrics;

fn pb_desc(entries: &[(&str, &str)], hits: Option<u64>, negative: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| PbEntry {
                key: (*k).to_string(),
                value: (*v).to_string(),
            })
            .collect(),
        hits_addend: hits.map(|value| UInt64Value { value }),
        is_negative_hits: negative,
        limit: None,
    }
}

/// What prost reads, in the borrowed form.
fn as_ref(r: &RateLimitRequest) -> RequestRef<'_> {
    RequestRef::of(r)
}

fn requests() -> Vec<RateLimitRequest> {
    let long = "v".repeat(300);
    vec![
        RateLimitRequest::default(),
        RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![pb_desc(&[("user", "v1")], None, false)],
            hits_addend: 0,
        },
        RateLimitRequest {
            domain: "édge ✓".into(),
            descriptors: vec![
                pb_desc(&[("tenant", "a"), ("user", &long)], Some(0), false),
                pb_desc(&[], Some(u64::MAX), true),
                pb_desc(&[("", "")], Some(300), false),
            ],
            hits_addend: u32::MAX,
        },
    ]
}

#[test]
fn reads_what_prost_reads() {
    for r in requests() {
        let bytes = r.encode_to_vec();
        assert_eq!(read_request(&bytes), Some(as_ref(&r)), "{r:?}");
    }
}

#[test]
fn skips_unknown_fields_and_merges_as_prost() {
    let r = &requests()[2];
    let mut bytes = r.encode_to_vec();
    // unknown fields of every wire type prost skips: varint, fixed64, bytes, fixed32
    bytes.extend_from_slice(&[9 << 3, 0x96, 0x01]);
    bytes.extend_from_slice(&[(10 << 3) | 1, 1, 2, 3, 4, 5, 6, 7, 8]);
    bytes.extend_from_slice(&[(11 << 3) | 2, 2, b'h', b'i']);
    bytes.extend_from_slice(&[(12 << 3) | 5, 1, 2, 3, 4]);
    // a repeated scalar and string: the last one wins
    bytes.extend_from_slice(&[3 << 3, 7, (1 << 3) | 2, 1, b'z']);
    let prost = RateLimitRequest::decode(&bytes[..]).unwrap();
    assert_eq!(prost.hits_addend, 7);
    assert_eq!(read_request(&bytes), Some(as_ref(&prost)));
}

#[test]
fn leaves_to_prost_what_it_does_not_follow() {
    let mut with_limit = requests()[1].clone();
    with_limit.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 1,
    });
    assert_eq!(read_request(&with_limit.encode_to_vec()), None);
    let good = requests()[1].encode_to_vec();
    let cases: Vec<Vec<u8>> = vec![
        good[..good.len() - 1].to_vec(),                // truncated
        [&good[..], &[(13 << 3) | 3]].concat(),         // a group
        [&good[..], &[(1 << 3) | 2, 1, 0xff]].concat(), // domain not UTF-8
        [&good[..], &[3 << 3, 0x80, 0x80, 0x80, 0x80, 0x10]].concat(), // above u32
        [&good[..], &[1 << 3, 1]].concat(),             // domain as a varint
        vec![0],                                        // tag 0
    ];
    for c in cases {
        assert_eq!(read_request(&c), None, "{c:?}");
    }
    // a known field in the wrong wire type: prost refuses the message, and so does the
    // reader (prost then answers INVALID_ARGUMENT); the first was found by the
    // grpc_request fuzz target
    let wrong_wire: Vec<Vec<u8>> = vec![
        // a descriptor's entries (field 1) as a varint
        vec![(2 << 3) | 2, 2, 1 << 3, 7],
        // an entry's value (field 2) as a varint
        vec![(2 << 3) | 2, 4, (1 << 3) | 2, 2, 2 << 3, 7],
        // hits_addend's UInt64Value with its field 1 length-delimited
        vec![(2 << 3) | 2, 4, (3 << 3) | 2, 2, (1 << 3) | 2, 0],
    ];
    for c in wrong_wire {
        assert_eq!(read_request(&c), None, "{c:?}");
        assert!(
            RateLimitRequest::decode(&c[..]).is_err(),
            "prost reads {c:?}"
        );
    }
}

fn engine() -> Engine {
    let rules = r#"
headers: {retry_after_jitter: 0s, legacy: delta}
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: plan
        value: free
        rate_limits:
          - {requests_per_unit: 10, unit: minute, name: per-minute}
          - {requests_per_unit: 2, window: 30s, algorithm: sliding-log, name: per-30s}
      - key: vip
        rate_limit: {unlimited: true}
      - key: big
        rate_limit: {unit: day, requests_per_unit: 5000000000}
"#;
    let config = crate::config::parse(Path::new("wire.yaml"), rules).unwrap();
    let store = StoreHandle::Memory {
        max_keys: 1000,
        share: 1,
        clock: TokioWallClock::new(),
    };
    Engine::new(
        config.rules,
        store,
        FaultPolicy::default(),
        Arc::new(Metrics::new(None)),
    )
    .unwrap()
}

#[tokio::test]
async fn writes_what_prost_writes() {
    let engine = engine();
    let e = |key, value| Entry { key, value };
    let calls: Vec<Vec<DescriptorIn<'_>>> = vec![
        vec![DescriptorIn {
            entries: vec![e("user", "a")],
            cost: 1,
        }],
        vec![DescriptorIn {
            entries: vec![e("user", "a")],
            cost: 5,
        }],
        vec![
            DescriptorIn {
                entries: vec![e("plan", "free")],
                cost: 1,
            },
            DescriptorIn {
                entries: vec![e("vip", "x")],
                cost: 1,
            },
            DescriptorIn {
                entries: vec![e("nothing", "x")],
                cost: 1,
            },
            DescriptorIn {
                entries: vec![e("big", "x")],
                cost: 0,
            },
        ],
    ];
    let mut over = false;
    for _ in 0..3 {
        for c in &calls {
            let outcome = engine.decide_descriptors("edge", c).await.unwrap();
            over |= outcome.over_limit;
            let prost = super::super::response(&outcome).encode_to_vec();
            let ours = write_reply(&outcome);
            assert_eq!(&ours[5..], &prost[..], "{outcome:?}");
            assert_eq!(ours[0], 0);
            assert_eq!(
                u32::from_be_bytes([ours[1], ours[2], ours[3], ours[4]]) as usize,
                prost.len()
            );
        }
    }
    assert!(over, "some call was over its limit");
}

#[test]
fn varint_lengths() {
    for v in [
        0,
        1,
        127,
        128,
        16_383,
        16_384,
        u64::from(u32::MAX),
        u64::MAX,
    ] {
        let mut b = BytesMut::new();
        put_varint(&mut b, v);
        assert_eq!(b.len(), varint_len(v), "{v}");
        assert_eq!(Reader { buf: &b }.varint(), Some(v));
    }
}
