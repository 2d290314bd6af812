//! # floodgate-net
//!
//! What floodgate's listeners share: caps on client connections ([`ConnCaps`]) and the
//! open-descriptor limit raised at start ([`raise_nofile`]).
#![warn(missing_docs)]

mod caps;
mod nofile;

pub use caps::{ConnCaps, ConnSlot, Refused};
pub use nofile::{Nofile, NofileError, descriptor_limit, raise_nofile};
