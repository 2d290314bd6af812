#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod body;
mod client_io;
pub mod config;
mod connection;
pub mod forward;
mod h1;
mod head_timeout;
mod hop_by_hop;
pub mod proxy;
mod settings;
pub mod sticky;
pub mod target;
pub mod upstreams;
pub mod wire;

pub use forward::Forward;
pub use proxy::{Proxy, ProxyError, ProxySettings};
