#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod client_conn;
pub mod config;
mod head_timeout;
pub mod proxy;
pub mod sticky;
pub mod upstream;

// the layer's modules, under the paths the proxy's modules name them by
use floodgate_http::{
    HybridStore, RateLimiter, RedisDecisionStore, builder, deny, fault, fleet, headers, key, layer,
    limiter, metrics, policy, store,
};

pub use proxy::{Forward, Proxy, ProxyError, ProxySettings};
