//! # floodgate-dist
//!
//! A rate limiter on N nodes is a tiny consensus system about how many requests happened,
//! and it pays for the agreement. This crate holds the strategies and prices them:
//!
//! * **sticky** ([`Rendezvous`]): each key is owned by one node (highest random weight
//!   hashing) and counted there exactly; other nodes forward. When a node leaves or
//!   joins, only its keys move, and each moved key gets a fresh burst on its new owner.
//! * **local share** ([`local_share`]): each node enforces `limit / N`, no round trip; a
//!   client on one node gets `1/N`, and quota idles on the others.
//! * **shared**: every decision on one shared counter (the Redis GCRA of `floodgate-redis`),
//!   one round trip, exact; a local cache of denials saves the round trips of a flood.
//! * **hybrid** ([`HybridNode`]): leases of quota spent locally while a key is far from its
//!   limit, every decision shared near it, with a stated error bound.
//!
//! [`sim`] runs them all on the same simulated traffic (`floodgate simulate --nodes N`).
#![warn(missing_docs)]

pub mod hybrid;
pub mod rendezvous;
pub mod share;
pub mod sim;

pub use hybrid::HybridNode;
pub use rendezvous::Rendezvous;
pub use share::local_share;
pub use sim::{Config, Event, Report, Skew, Strategy};
