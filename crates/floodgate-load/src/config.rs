//! [`LoadConfig`]: what to send, how fast, for how long, and how to read the results.
//!
//! Units: rates in requests per second (total across all connections), durations as
//! [`Duration`]. [`LoadConfig::validate`] checks every field against [`caps`] and the
//! others, and returns a clear [`LoadError`] naming the offending setting.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use floodgate_client::{Polite, PoliteConfig};
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use crate::arrivals::Arrivals;
use crate::classes::ClassMix;
use crate::error::{LoadError, caps};

/// What bounds a run: a number of requests (`-n`) or a duration (`-z`). One is required.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// Send exactly this many requests.
    Count(u64),
    /// Send for this long: in open loop, requests whose intended send time falls inside the
    /// duration; in closed loop, requests started before it ends.
    Duration(Duration),
}

/// How requests are paced and how latency is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Requests are scheduled at fixed intended times `i / rate` and latency is measured
    /// from the intended time, so a stalled server shows up in the latencies of every
    /// request it delayed (no coordinated omission). Needs a rate.
    OpenLoop,
    /// Each connection sends its next request only after the previous response; with a
    /// rate, each connection is paced at `rate / concurrency` and slots missed while
    /// waiting are dropped (as hey does). Latency is measured from the actual send time,
    /// so it hides server stalls (coordinated omission).
    ClosedLoop,
}

/// Everything a run needs. Build it with [`LoadConfig::new`] and adjust the fields; call
/// [`LoadConfig::validate`] (done by [`crate::run()`]) before use.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `http://host[:port]/path?query`.
    pub url: String,
    /// Hosts the user named explicitly that may be contacted although they are not on the
    /// loopback interface. Loopback addresses are always allowed; nothing else ever is.
    pub allow_hosts: Vec<String>,
    /// HTTP method.
    pub method: Method,
    /// Extra request headers (a `Host` here overrides the URL's authority).
    pub headers: HeaderMap,
    /// Request body (empty for none).
    pub body: Bytes,
    /// Connections, each with one request in flight at a time.
    pub concurrency: usize,
    /// Count or duration.
    pub bound: Bound,
    /// Total requests per second across all connections; `None`: as fast as possible
    /// (closed loop).
    pub rate: Option<f64>,
    /// Open or closed loop; open loop needs a rate.
    pub mode: Mode,
    /// Per-request timeout, connecting included.
    pub timeout: Duration,
    /// Width of a timeline bucket.
    pub bucket: Duration,
    /// Rate-limit window whose boundaries are marked and judged; boundaries are at
    /// `k x window + window_offset` on the Unix-epoch wall clock.
    pub window: Option<Duration>,
    /// Offset of window boundaries from multiples of the window (wall clock).
    pub window_offset: Duration,
    /// Distance from a boundary within which a request counts as "near" it.
    pub near: Duration,
    /// Status codes that mean "denied by the limiter" (default: 429).
    pub deny_statuses: Vec<u16>,
    /// Open loop on an explicit schedule: request `i` is due `schedule[i]` after the
    /// start (non-decreasing offsets; bursts are repeated offsets). Replaces `i / rate`;
    /// the bound must be `Count(schedule.len())`. Set with [`LoadConfig::scheduled`].
    pub schedule: Option<Arc<[Duration]>>,
    /// Wall-clock instant of the start (offset 0), e.g. to aim a burst just before a
    /// window boundary; `None`: as soon as the target answers. Must not be in the past
    /// when the run starts.
    pub start_at: Option<SystemTime>,
    /// `Some`: every worker sends like one polite client built from floodgate-client
    /// (one [`Polite`] engine shared by all connections): it paces from the advertised
    /// `RateLimit` / `X-RateLimit-*` headers, honours `Retry-After` with jitter, retries
    /// 429/502/503/504 and transport errors with backoff within the retry budget, and only
    /// retries idempotent requests unless `retry_non_idempotent`. Latency then runs from
    /// the intended (open loop) or start (closed loop) time of the request to the end of
    /// its last attempt: waits and retries included. `None` (default): naive, one attempt
    /// per request, no waits.
    pub polite: Option<PoliteConfig>,
    /// How open-loop send times are spaced: evenly (`i / rate`) or as a Poisson process
    /// of the same mean rate. Poisson needs a rate and no explicit schedule.
    pub arrivals: Arrivals,
    /// Traffic classes: each request carries the mix's header with a class drawn from
    /// it, and the report's goodput section has a row per class. `None`: one class.
    pub classes: Option<ClassMix>,
    /// Seed of the Poisson gaps and of the class draws: the same seed, the same traffic.
    pub seed: u64,
    /// Open loop: each request's timeout runs from its intended send time, as the
    /// deadline of the client it stands for, not from when the generator got to send it
    /// (a request already past its deadline counts as a timeout and is not sent). Then
    /// a generator short of connections cannot turn a server's backlog into successes
    /// that no real client would have waited for. Not with `polite`.
    pub timeout_from_intended: bool,
}

impl LoadConfig {
    /// Defaults in the habits of hey and oha: GET, 50 connections, 20 s timeout, 1 s
    /// buckets, 500 ms "near", 429 as the denial status; as fast as possible (closed loop).
    pub fn new(url: impl Into<String>, bound: Bound) -> LoadConfig {
        LoadConfig {
            url: url.into(),
            allow_hosts: Vec::new(),
            method: Method::GET,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            concurrency: 50,
            bound,
            rate: None,
            mode: Mode::ClosedLoop,
            timeout: Duration::from_secs(20),
            bucket: Duration::from_secs(1),
            window: None,
            window_offset: Duration::ZERO,
            near: Duration::from_millis(500),
            deny_statuses: vec![429],
            schedule: None,
            start_at: None,
            polite: None,
            arrivals: Arrivals::Uniform,
            classes: None,
            seed: 1,
            timeout_from_intended: false,
        }
    }

    /// Send like a polite client with the settings `polite` (see [`LoadConfig::polite`]).
    pub fn polite(mut self, polite: PoliteConfig) -> LoadConfig {
        self.polite = Some(polite);
        self
    }

    /// Open loop on an explicit schedule: one request due at each offset (from the start)
    /// of `offsets`, which must be non-decreasing. Sets the bound to their count.
    ///
    /// ```
    /// use std::time::Duration;
    /// // five requests at once at 1 s, then one at 2 s
    /// let mut at = vec![Duration::from_secs(1); 5];
    /// at.push(Duration::from_secs(2));
    /// let cfg = floodgate_load::LoadConfig::scheduled("http://127.0.0.1:8080/", at);
    /// assert!(cfg.validate().is_ok());
    /// ```
    pub fn scheduled(url: impl Into<String>, offsets: Vec<Duration>) -> LoadConfig {
        let mut cfg = LoadConfig::new(url, Bound::Count(offsets.len() as u64));
        cfg.mode = Mode::OpenLoop;
        cfg.schedule = Some(offsets.into());
        cfg
    }

    /// Set an open-loop rate (requests per second, total).
    pub fn open_loop(mut self, rate: f64) -> LoadConfig {
        self.rate = Some(rate);
        self.mode = Mode::OpenLoop;
        self
    }

    /// Check every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), LoadError> {
        let range = |what: &'static str, reason: String| LoadError::OutOfRange { what, reason };
        match self.bound {
            Bound::Count(0) => return Err(range("count (-n)", "must be at least 1".into())),
            Bound::Count(n) if n > caps::MAX_COUNT => {
                return Err(range(
                    "count (-n)",
                    format!("{n} is above the cap of {}", caps::MAX_COUNT),
                ));
            }
            Bound::Duration(d) if d.is_zero() => {
                return Err(range("duration (-z)", "must be longer than 0".into()));
            }
            Bound::Duration(d) if d > caps::MAX_DURATION => {
                return Err(range(
                    "duration (-z)",
                    format!(
                        "{:.0}s is above the cap of {}s",
                        d.as_secs_f64(),
                        caps::MAX_DURATION.as_secs()
                    ),
                ));
            }
            _ => {}
        }
        if self.concurrency == 0 {
            return Err(range("concurrency (-c)", "must be at least 1".into()));
        }
        if self.concurrency > caps::MAX_CONCURRENCY {
            return Err(range(
                "concurrency (-c)",
                format!(
                    "{} is above the cap of {}",
                    self.concurrency,
                    caps::MAX_CONCURRENCY
                ),
            ));
        }
        if let Some(q) = self.rate
            && !(q.is_finite() && q > 0.0 && q <= caps::MAX_RATE)
        {
            return Err(range(
                "rate (-q)",
                format!(
                    "{q} requests per second; expected a number above 0 and at most {}",
                    caps::MAX_RATE
                ),
            ));
        }
        if let Some(sch) = &self.schedule {
            if self.mode != Mode::OpenLoop {
                return Err(LoadError::Conflict(
                    "a schedule is open loop: requests go at their offsets".into(),
                ));
            }
            if self.bound != Bound::Count(sch.len() as u64) {
                return Err(LoadError::Conflict(format!(
                    "a schedule of {} requests needs the bound Count({})",
                    sch.len(),
                    sch.len()
                )));
            }
            if sch.windows(2).any(|w| w[1] < w[0]) {
                return Err(range("schedule", "offsets must be non-decreasing".into()));
            }
            if sch.last().is_some_and(|&t| t > caps::MAX_DURATION) {
                return Err(range(
                    "schedule",
                    format!(
                        "the last offset is past the cap of {}s",
                        caps::MAX_DURATION.as_secs()
                    ),
                ));
            }
        } else if self.mode == Mode::OpenLoop && self.rate.is_none() {
            return Err(LoadError::Conflict(
                "open loop needs a rate (-q): requests are scheduled at i / rate".into(),
            ));
        }
        if self.timeout < caps::MIN_TICK || self.timeout > caps::MAX_TIMEOUT {
            return Err(range(
                "timeout (-t)",
                format!(
                    "{:?}; expected between {:?} and {:?}",
                    self.timeout,
                    caps::MIN_TICK,
                    caps::MAX_TIMEOUT
                ),
            ));
        }
        if self.bucket < caps::MIN_TICK || self.bucket > caps::MAX_DURATION {
            return Err(range(
                "bucket (--bucket)",
                format!("{:?}; expected between 1ms and 1h", self.bucket),
            ));
        }
        if let Some(w) = self.window {
            if w < caps::MIN_TICK {
                return Err(range(
                    "window (--window)",
                    format!("{w:?}; expected at least 1ms"),
                ));
            }
            if self.near.is_zero() || self.near.saturating_mul(2) > w {
                return Err(range(
                    "near (--near)",
                    format!(
                        "{:?} with a window of {w:?}; expected above 0 and at most half the window",
                        self.near
                    ),
                ));
            }
            if self.window_offset >= w {
                return Err(range(
                    "window offset (--window-offset)",
                    format!(
                        "{:?}; expected less than the window ({w:?})",
                        self.window_offset
                    ),
                ));
            }
        } else if !self.window_offset.is_zero() {
            return Err(LoadError::Conflict("--window-offset needs --window".into()));
        }
        if self.deny_statuses.iter().any(|s| !(100..=599).contains(s)) {
            return Err(range(
                "denial status (--deny-status)",
                format!("{:?}; expected codes 100 to 599", self.deny_statuses),
            ));
        }
        if self.arrivals == Arrivals::Poisson
            && (self.mode != Mode::OpenLoop || self.schedule.is_some())
        {
            return Err(LoadError::Conflict(
                "Poisson arrivals are open loop at a rate (-q): not with --closed-loop or a schedule"
                    .into(),
            ));
        }
        if self.timeout_from_intended && (self.mode != Mode::OpenLoop || self.polite.is_some()) {
            return Err(LoadError::Conflict(
                "a timeout from the intended send time is open loop and naive: not with --closed-loop or --polite"
                    .into(),
            ));
        }
        if let Some(p) = &self.polite {
            validate_polite(p)?;
        }
        Ok(())
    }
}

/// The polite settings the CLI exposes, checked with the flag names; anything else
/// floodgate-client rejects comes back as [`LoadError::Polite`].
fn validate_polite(p: &PoliteConfig) -> Result<(), LoadError> {
    let range = |what: &'static str, reason: String| LoadError::OutOfRange { what, reason };
    if p.max_attempts == 0 {
        return Err(range(
            "max attempts (--max-attempts)",
            "must be at least 1 (the first attempt counts)".into(),
        ));
    }
    let b = p.budget.percent_can_retry;
    if !(0.0..=1.0).contains(&b) {
        return Err(range(
            "retry budget (--retry-budget)",
            format!("{b}; expected a fraction of requests from 0 to 1"),
        ));
    }
    if p.max_wait < caps::MIN_TICK || p.max_wait > caps::MAX_TIMEOUT {
        return Err(range(
            "max wait (--max-wait)",
            format!(
                "{:?}; expected between {:?} and {:?}",
                p.max_wait,
                caps::MIN_TICK,
                caps::MAX_TIMEOUT
            ),
        ));
    }
    if p.backoff.cap < p.backoff.base || p.backoff.cap > p.max_wait {
        return Err(range(
            "backoff cap (--backoff-cap)",
            format!(
                "{:?}; expected at least the backoff base ({:?}) and at most the max wait ({:?})",
                p.backoff.cap, p.backoff.base, p.max_wait
            ),
        ));
    }
    Polite::new(p.clone())?;
    Ok(())
}

/// Parse a `-H "Name: value"` header.
///
/// ```
/// let (n, v) = floodgate_load::parse_header("X-Api-Key: abc").unwrap();
/// assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-api-key", "abc"));
/// assert!(floodgate_load::parse_header("no colon").is_err());
/// ```
pub fn parse_header(s: &str) -> Result<(HeaderName, HeaderValue), LoadError> {
    let bad = |reason: &str| LoadError::InvalidHeader {
        header: s.to_string(),
        reason: reason.to_string(),
    };
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| bad("expected \"Name: value\""))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| bad("the name is not a valid header name"))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| bad("the value has characters not allowed in a header"))?;
    Ok((name, value))
}

/// Parse a `-m` method (case-insensitive for the standard ones).
///
/// ```
/// assert_eq!(floodgate_load::parse_method("post").unwrap(), http::Method::POST);
/// assert!(floodgate_load::parse_method("GE T").is_err());
/// ```
pub fn parse_method(s: &str) -> Result<Method, LoadError> {
    let upper = s.trim().to_ascii_uppercase();
    if upper.is_empty() {
        return Err(LoadError::InvalidMethod(s.to_string()));
    }
    Method::from_bytes(upper.as_bytes()).map_err(|_| LoadError::InvalidMethod(s.to_string()))
}
