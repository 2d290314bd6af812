//! # floodgate-load
//!
//! An HTTP load generator in the habits of hey and oha, built to show what a rate limiter
//! does at its window boundaries.
//!
//! * **Open loop** ([`Mode::OpenLoop`]): request `i` is due at `i / rate` seconds after the
//!   start, whatever happened to the others, and its latency is measured from that
//!   intended time: a server that stalls for a second shows a second of latency on every
//!   request it held up (no coordinated omission). [`Mode::ClosedLoop`] is there too.
//! * One keep-alive HTTP/1.1 connection per worker (hyper 1 over tokio, workers on one
//!   single-threaded runtime per core), re-opened after errors; only the loopback
//!   interface, or a host the user names, is ever contacted.
//! * HDR histograms (µs, 1 µs to 1 h) overall and by status (200, 429, other), a
//!   timeline of outcomes per bucket aligned to the wall clock, window boundaries at
//!   multiples of the window since the Unix epoch, and a [`boundary`] verdict.
//! * The rate-limit headers the server advertised (`RateLimit-Policy`, `RateLimit`,
//!   `Retry-After`, `X-RateLimit-*`), a [`Report`] that serialises to JSON, and an SVG
//!   plot of the timeline ([`svg::plot_timeline`]).
//! * **Naive or polite** ([`LoadConfig::polite`]): by default every request is sent once,
//!   whatever the server says. With a [`PoliteConfig`], the workers behave like one
//!   polite client from floodgate-client (pacing from the advertised headers,
//!   `Retry-After` with jitter, backoff within a retry budget), and the report counts
//!   retries, waits and each request's final outcome, so both can be compared.
//!
//! ```no_run
//! use floodgate_load::{Bound, LoadConfig};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), floodgate_load::LoadError> {
//! let mut cfg = LoadConfig::new("http://127.0.0.1:8080/", Bound::Duration(Duration::from_secs(10)))
//!     .open_loop(200.0);
//! cfg.window = Some(Duration::from_secs(2));
//! let report = floodgate_load::run(&cfg).await?;
//! println!("{}", report.render_text());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod boundary;
pub mod client;
pub mod config;
pub mod error;
pub mod report;
pub mod run;
pub mod stats;
pub mod svg;
pub mod target;
pub mod timeline;

pub use config::{Bound, LoadConfig, Mode, parse_header, parse_method};
pub use error::LoadError;
pub use floodgate_client::PoliteConfig;
pub use floodgate_client::backoff::{Backoff, Jitter, RetryBudgetConfig};
pub use http;
pub use report::Report;
pub use run::{Stop, run, run_with};
pub use stats::{Live, LiveSnapshot, Percentiles};
