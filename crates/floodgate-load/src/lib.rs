#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod arrivals;
pub mod boundary;
pub mod classes;
pub mod client;
pub mod config;
pub mod dist;
pub mod error;
pub mod goodput;
pub mod histogram;
pub mod report;
pub mod run;
pub mod stats;
mod summary;
pub mod svg;
pub mod target;
pub mod timeline;

pub use arrivals::Arrivals;
pub use classes::ClassMix;
pub use config::{Bound, LoadConfig, Mode, parse_header, parse_method};
pub use error::LoadError;
pub use floodgate_client::PoliteConfig;
pub use floodgate_client::backoff::{Backoff, Jitter, RetryBudgetConfig};
pub use http;
pub use report::Report;
pub use run::{Stop, run, run_with};
pub use stats::{Live, LiveSnapshot, Percentiles};
