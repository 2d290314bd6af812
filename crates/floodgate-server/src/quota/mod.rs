//! Quotas: the server side of Envoy's Rate Limit Quota Service
//! (`envoy.service.rate_limit_quota.v3`). Clients enforce each bucket locally by an
//! assignment; they report each bucket's usage every interval, and the server divides the
//! bucket's global limit among the clients reporting for it by their demand.
//!
//! * [`share`]: the division (pure, clocked): max-min fair, a floor for idle clients,
//!   silent clients dropped after their time to live;
//! * what a client is told (a strategy and its time to live), apart from the protocol,
//!   and its Envoy messages: [`floodgate_engine::quota`], shared with the client (the
//!   proxy's `quota` fleet strategy);
//! * [`book`]: where reports are kept: in process, or in Redis shared by every replica;
//! * [`view`]: per bucket, each client's demand and share, for metrics and the admin API.
//!
//! The gRPC service is [`crate::grpc::quota`]; the rules are the file's `quota:` section
//! ([`crate::config::QuotaRules`]).

pub mod book;
pub mod share;
pub mod view;

pub use book::{BookError, DemandBook, Recorded, Report};
pub use floodgate_engine::quota::{
    Assignment, ClientFallback, QuotaStrategy, StrategyKind, Unit as QuotaUnit, strategy_for,
};
pub use share::{ClientDemand, Division, ShareError, demand_of};
pub use view::{BucketView, ClientView, QuotaCollector, QuotaView};
