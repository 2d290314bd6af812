//! Adaptive concurrency limits in the style of Netflix concurrency-limits.
//!
//! The algorithms ([`Aimd`], [`Vegas`], [`Gradient2`], optionally wrapped in [`Windowed`])
//! live in [`floodgate_core::concurrency`], pure state machines fed [`Sample`]s
//! `(rtt, inflight, dropped)` that return the new limit; they are re-exported here. The
//! [`AdaptiveLimiter`] hands out [`Permit`]s (at most `limit` at once), times each one on
//! an injected [`floodgate_core::Clock`], and feeds the algorithm when the permit is
//! released. [`LoadShedLayer`] puts one in front of a server handler, answering 503 when
//! no permit is free.

mod limiter;
mod shed;

pub use floodgate_core::concurrency::{
    Aimd, AimdConfig, ExpAvg, Gradient2, Gradient2Config, LimitAlgorithm, Sample, Vegas,
    VegasConfig, Windowed, WindowedConfig, log10_root,
};
pub use limiter::{AdaptiveLimiter, Outcome, Permit};
pub use shed::{LoadShed, LoadShedLayer};
