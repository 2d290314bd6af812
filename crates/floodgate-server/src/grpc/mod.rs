//! Front door 1: Envoy's rate limit service, `envoy.service.ratelimit.v3.RateLimitService/
//! ShouldRateLimit`, over gRPC (types from the `envoy-types` crate), plus the standard gRPC
//! health service.
//!
//! * `hits_addend` is the cost of every descriptor (0 means 1, as in Envoy); a descriptor's
//!   own `hits_addend` overrides it (0 there peeks).
//! * One `DescriptorStatus` per descriptor: `code`, `current_limit` (requests per unit,
//!   unit, name; a window that is not one unit reports `UNKNOWN` and the limit's name),
//!   `limit_remaining`, `duration_until_reset`.
//! * `response_headers_to_add`: the RateLimit fields and, when over limit, `Retry-After`.
//! * Bad requests get `INVALID_ARGUMENT`, unknown domains `NOT_FOUND` (or OK with no
//!   limit under `unknown_domain: allow`), store errors `INTERNAL`.
//!
//! [`serve`] is the listener; [`conn`] serves one connection's HTTP/2 with the `h2`
//! crate, answering `ShouldRateLimit` in the connection's task through [`door`] (the
//! message read in place by [`wire`]) and handing every other stream to tonic
//! ([`tonic_stream`]).

pub mod conn;
pub mod door;
pub mod quota;
pub mod serve;
pub mod tonic_stream;
pub mod wire;

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use floodgate_engine::metrics::RequestOutcome;
use tonic::{Request, Response, Status as GrpcStatus};

use crate::descriptors::{CheckError, DescriptorIn, Engine, Matched, Outcome, Status};

use wire::RequestRef;

/// The gRPC service over a shared [`Engine`].
#[derive(Debug, Clone)]
pub struct RlsService {
    engine: Arc<Engine>,
}

impl RlsService {
    /// The service.
    pub fn new(engine: Arc<Engine>) -> RlsService {
        RlsService { engine }
    }

    /// The tonic server of this service, accepting messages up to `max_bytes`.
    pub fn into_server(self, max_bytes: usize) -> RateLimitServiceServer<RlsService> {
        RateLimitServiceServer::new(self).max_decoding_message_size(max_bytes)
    }
}

pub(crate) use floodgate_engine::quota::envoy::pb_duration;

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// The limit part of one descriptor's status, borrowed from the outcome.
pub(crate) struct LimitView<'a> {
    pub(crate) name: &'a str,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: i32,
    pub(crate) remaining: u32,
    pub(crate) reset: PbDuration,
}

/// One descriptor's `DescriptorStatus`, borrowed from the outcome (what [`response`]
/// and [`wire::write_reply`] both write).
pub(crate) struct StatusView<'a> {
    pub(crate) code: i32,
    pub(crate) limit: Option<LimitView<'a>>,
}

pub(crate) fn status_view(s: &Status) -> StatusView<'_> {
    let code = if s.over_limit {
        Code::OverLimit
    } else {
        Code::Ok
    } as i32;
    let limit = match (s.matched, s.binding()) {
        (Matched::Limited, Some((l, d))) => Some(LimitView {
            name: &l.def.name,
            requests_per_unit: clamp_u32(l.def.requests_per_unit),
            unit: l.def.unit as i32,
            remaining: clamp_u32(d.remaining),
            reset: pb_duration(d.reset_after),
        }),
        _ => None,
    };
    StatusView { code, limit }
}

/// The RLS response for an outcome.
pub fn response(outcome: &Outcome) -> RateLimitResponse {
    let statuses = outcome
        .statuses
        .iter()
        .map(|s| {
            let v = status_view(s);
            match v.limit {
                Some(l) => DescriptorStatus {
                    code: v.code,
                    current_limit: Some(RateLimit {
                        name: l.name.to_string(),
                        requests_per_unit: l.requests_per_unit,
                        unit: l.unit,
                    }),
                    limit_remaining: l.remaining,
                    duration_until_reset: Some(l.reset),
                    quota: None,
                },
                None => DescriptorStatus {
                    code: v.code,
                    ..Default::default()
                },
            }
        })
        .collect();
    RateLimitResponse {
        overall_code: if outcome.over_limit {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        statuses,
        response_headers_to_add: outcome
            .headers
            .iter()
            .map(|(k, v)| HeaderValue {
                key: (*k).to_string(),
                value: v.clone(),
                raw_value: Vec::new(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The gRPC status of a request that could not be checked.
pub fn error_status(e: &CheckError) -> GrpcStatus {
    if e.is_not_found() {
        GrpcStatus::not_found(e.to_string())
    } else if e.is_internal() {
        GrpcStatus::internal(e.to_string())
    } else {
        GrpcStatus::invalid_argument(e.to_string())
    }
}

impl RlsService {
    /// Answer one decoded `ShouldRateLimit` request (the tonic service calls this).
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, GrpcStatus> {
        self.decide_with(RequestRef::of(req), response).await
    }

    /// Answer one request read in place, the reply written by `reply` from the outcome
    /// (the tonic service and the direct path of [`serve`] both come here).
    pub async fn decide_with<R>(
        &self,
        req: RequestRef<'_>,
        reply: impl FnOnce(&Outcome) -> R,
    ) -> Result<R, GrpcStatus> {
        let start = Instant::now();
        let metrics = self.engine.metrics();
        let default_cost = u64::from(req.hits_addend.max(1));
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.is_negative_hits {
                metrics.request("grpc", RequestOutcome::Invalid, start.elapsed());
                return Err(GrpcStatus::invalid_argument(format!(
                    "descriptor {i}: is_negative_hits (refunds) is not supported"
                )));
            }
            if d.limit {
                metrics.request("grpc", RequestOutcome::Invalid, start.elapsed());
                return Err(GrpcStatus::invalid_argument(format!(
                    "descriptor {i}: a limit override in the request is not supported; configure the limit in the server"
                )));
            }
        }
        let descriptors: Vec<DescriptorIn<'_>> = req
            .descriptors
            .into_iter()
            .map(|d| DescriptorIn {
                entries: d.entries,
                cost: d.hits_addend.unwrap_or(default_cost),
            })
            .collect();
        match self
            .engine
            .decide_descriptors(req.domain, &descriptors)
            .await
        {
            Ok(outcome) => {
                let r = reply(&outcome);
                metrics.request("grpc", outcome.request_outcome(), start.elapsed());
                Ok(r)
            }
            Err(e) => {
                metrics.request("grpc", e.request_outcome(), start.elapsed());
                Err(error_status(&e))
            }
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, GrpcStatus> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}
