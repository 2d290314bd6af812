#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod access_log;
mod body;
mod client_io;
pub mod config;
mod connection;
pub mod drain;
mod error_text;
pub mod forward;
pub mod generation;
mod h1;
mod head_timeout;
mod hop_by_hop;
pub mod nginx;
pub mod proxy;
pub mod reload;
mod settings;
pub mod sticky;
pub mod target;
mod tls_connect;
pub mod upstreams;
pub mod wire;

pub use forward::Forward;
pub use proxy::{Proxy, ProxyError, ProxySettings};
