#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod body;
mod client_conn;
mod client_io;
pub mod config;
pub mod forward;
mod head_timeout;
mod hyper_conn;
pub mod proxy;
mod settings;
pub mod sticky;
pub mod target;
pub mod upstream;
pub mod wire;

pub use forward::Forward;
pub use proxy::{Proxy, ProxyError, ProxySettings};
