//! # floodgate-server
//!
//! A central rate limit service: one limiter, three front doors.
//!
//! * [`grpc`]: Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService/
//!   ShouldRateLimit`) and the gRPC health service, so Envoy, Istio, Contour or Emissary
//!   can point at floodgate instead of Envoy's ratelimit service; served on the crate's
//!   own HTTP/2 (cleartext, prior knowledge, as tonic's server), tonic answering what the
//!   direct path does not take.
//! * [`resp`]: redis-cell's `CL.THROTTLE` over the Redis protocol, for any Redis client,
//!   and in-flight leases (`FG.ACQUIRE`, `FG.RENEW`, `FG.RELEASE`: [`leases`]).
//! * [`http`]: `POST /v1/check` with JSON, plus `/metrics` and `/healthz`.
//!
//! Each door can be guarded ([`tls`]: TLS with client certificates on any door; `AUTH` on
//! RESP with `resp.password_file`; a bearer token on HTTP's `/v1` calls with
//! `http.token_file`); `resp.policies_only` refuses the RESP commands whose rate the
//! caller chooses.
//!
//! The rules ([`config`]) take Envoy ratelimit's file shape (domains, nested descriptors,
//! `rate_limit: {unit, requests_per_unit}`, `shadow_mode`, `unlimited`, `replaces`) in
//! YAML or TOML and extend it: an algorithm per limit (GCRA by default), any window, a
//! burst, several limits on one descriptor. The [`descriptors`] module matches descriptors as Envoy's
//! service does and decides every limit of a request all-or-nothing (in process) or in
//! Redis with its fault policy. Config changes are picked up on SIGHUP and on file change
//! ([`reload`]) without resetting the counters of unchanged rules.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::path::PathBuf;
//! use std::time::Duration;
//! use floodgate_server::{config, server};
//!
//! let path = PathBuf::from("limits.yaml");
//! let cfg = config::load(&path)?;
//! let settings = cfg.settings.clone();
//! let running = server::start(cfg, settings, server::Options {
//!     path, watch: true, sighup: true, debounce: Duration::from_millis(200),
//! }).await?;
//! println!("gRPC on {:?}", running.grpc);
//! running.shutdown(Duration::from_secs(10)).await;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod adaptive;
pub mod config;
pub mod descriptors;
pub mod file;
pub mod gate;
pub mod grpc;
pub mod headers;
pub mod http;
pub mod http_leases;
pub mod leases;
pub mod metrics;
pub mod quota;
pub mod reload;
pub mod resp;
pub mod server;
pub mod tls;

pub use config::{Config, ConfigFileError};
pub use descriptors::{CheckError, Engine};
pub use server::{Options, Running, StartError, start};
