//! Quotas, Envoy's Rate Limit Quota Service (`envoy.service.rate_limit_quota.v3`) apart
//! from the server's division: what both ends of the protocol share.
//!
//! * [`assignment`]: what a client is told to enforce for one bucket (a strategy and its
//!   time to live), and how a share is expressed as a strategy; floodgate server writes
//!   these;
//! * [`bucket`]: the local decision a client makes from an assignment (or from its
//!   fallback while it has none), clocked, with the usage it reports;
//! * [`settings`]: a client's settings and the `BucketId` entries it names buckets by;
//! * `envoy` and `client` (feature `quota-client`): the assignments as Envoy's messages,
//!   and `QuotaStore`, the decision store of the `quota` fleet
//!   strategy: one `StreamRateLimitQuotas` stream to the server, usage reports every
//!   interval, every decision local.

pub mod assignment;
pub mod bucket;
#[cfg(feature = "quota-client")]
pub mod client;
#[cfg(feature = "quota-client")]
pub mod envoy;
pub mod settings;

pub use assignment::{Assignment, ClientFallback, QuotaStrategy, StrategyKind, Unit, strategy_for};
pub use bucket::{QuotaBucket, Usage};
#[cfg(feature = "quota-client")]
pub use client::QuotaStore;
pub use settings::{QuotaClientConfig, QuotaClientError, QuotaFallback, bucket_entries, key_bytes};
