#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod hybrid;
pub mod rendezvous;
pub mod share;
pub mod sim;

pub use hybrid::HybridNode;
pub use rendezvous::Rendezvous;
pub use share::local_share;
pub use sim::{Config, Event, Report, Skew, Strategy};
