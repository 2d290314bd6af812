//! # floodgate-net
//!
//! What floodgate's listeners share: caps on client connections ([`ConnCaps`]) and the
//! open-descriptor limit raised at start ([`raise_nofile`]), and TLS ([`tls`]: PEM files,
//! certificates chosen by SNI and reloaded, the handshake with a timeout, upstream
//! verification).
#![warn(missing_docs)]

mod caps;
mod nofile;
pub mod tls;

pub use caps::{ConnCaps, ConnSlot, Refused};
pub use nofile::{Nofile, NofileError, descriptor_limit, raise_nofile};
