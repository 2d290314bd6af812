//! The policy engine shared by the tower layer and the reqwest middleware: pacing, backoff,
//! the retry budget, and (optionally) an adaptive concurrency limiter.
//!
//! The integrations drive it per logical request:
//!
//! 1. [`Polite::begin`] once (counts the request into the retry budget);
//! 2. before each attempt [`Polite::pace`] (how long to wait before sending);
//! 3. after each attempt [`Polite::on_response`] or [`Polite::on_error`], which read the
//!    headers into the pacer and say whether (and after how long) to retry.
//!
//! (or, simpler, [`Polite::before_send`] and [`Polite::after_send`] around each attempt,
//! which also remember when the attempt was booked.)
//!
//! A 429 is read in one of two ways. When the same response says, in its `RateLimit`
//! field, that quota remains (every member has `r > 0`) and its `Retry-After`, if any, is
//! no later than the end of the effective window `t` those members cover, the denial was
//! a **pacing miss**: the send came a little early for a limit with little tolerance (a
//! timer tick, a scheduling hiccup), and the server's own fields say that sends at the pace
//! go on being admitted. The retry then takes the next paced slot (no whole-second wait:
//! `t` and `Retry-After` are whole seconds, the pace is the precise moment). Any other 429
//! is an exhaustion: `Retry-After` takes precedence and holds every request to the host.
//! Either way a 429 while pacing counts toward widening the pace when they come to more
//! than 1 % of sends ([`crate::pacing::Pacer::throttled`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_core::{Clock, MonotonicClock, Nanos, WallClock};
use http::{HeaderMap, Method, StatusCode};
use parking_lot::Mutex;

use crate::inflight_cap::{CapPermit, HostCaps, concurrency_denial};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;

use crate::ConfigError;
use crate::backoff::{Backoff, RetryBudget, RetryBudgetConfig, may_retry};
use crate::concurrency::{AdaptiveLimiter, Outcome, Permit};
use crate::headers::{HeaderLimits, Remaining, read_advice};
use crate::pacing::{Pacer, PacerConfig};

/// Settings of a polite client. `Default` is a sensible production setting.
#[derive(Debug, Clone, PartialEq)]
pub struct PoliteConfig {
    /// Cap on every wait: pacing, `Retry-After`, backoff (default 60 s).
    pub max_wait: Duration,
    /// Pace sends from `RateLimit` / `X-RateLimit-*` advice (default true).
    pub pacing: bool,
    /// Jitter on a reset the server announced with `r = 0`, fraction of `t` (default 0.1).
    pub reset_jitter: f64,
    /// Headroom kept below the rate the server advertises, as a fraction (default 0.02:
    /// sends go 2 % further apart than `max(w / q, t / r)`), so that timer granularity and
    /// network jitter do not push a client pacing at exactly the limit over it. In `[0, 1]`.
    /// A 429 while pacing widens this adaptively (`PacerConfig::widen_step`).
    pub pace_headroom: f64,
    /// The resolution of the timer pacing waits are slept on (default 1 ms, tokio's): a
    /// policy with capacity 1 is paced at least this much above its interval (see
    /// `PacerConfig::timer_resolution`). At most `max_wait`.
    pub timer_resolution: Duration,
    /// Exponential backoff when no `Retry-After` is given.
    pub backoff: Backoff,
    /// Attempts per request, the first included (default 4). Must be >= 1.
    pub max_attempts: u32,
    /// The retry budget.
    pub budget: RetryBudgetConfig,
    /// Statuses that are retried (default 429, 502, 503, 504). Transport errors are retried
    /// too.
    pub retry_statuses: Vec<StatusCode>,
    /// `Retry-After` is honoured on these statuses (default 429 and 503), plus jitter.
    pub retry_after_statuses: Vec<StatusCode>,
    /// Jitter added to a `Retry-After` wait: `uniform(0, max(min, fraction x wait))`.
    pub retry_after_jitter: f64,
    /// Floor of the `Retry-After` jitter span (default 250 ms).
    pub retry_after_jitter_min: Duration,
    /// Retry non-idempotent requests too (default false: only GET, HEAD, OPTIONS, PUT,
    /// DELETE, TRACE, or requests carrying an `Idempotency-Key`).
    pub retry_non_idempotent: bool,
    /// Bounds for header parsing (its `max_wait` is overridden by the one above).
    pub header_limits: HeaderLimits,
    /// Seed of the jitter; `None` seeds from the OS.
    pub seed: Option<u64>,
}

impl Default for PoliteConfig {
    fn default() -> Self {
        PoliteConfig {
            max_wait: Duration::from_secs(60),
            pacing: true,
            reset_jitter: 0.1,
            pace_headroom: 0.02,
            timer_resolution: Duration::from_millis(1),
            backoff: Backoff::default(),
            max_attempts: 4,
            budget: RetryBudgetConfig::default(),
            retry_statuses: vec![
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::BAD_GATEWAY,
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::GATEWAY_TIMEOUT,
            ],
            retry_after_statuses: vec![
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::SERVICE_UNAVAILABLE,
            ],
            retry_after_jitter: 0.2,
            retry_after_jitter_min: Duration::from_millis(250),
            retry_non_idempotent: false,
            header_limits: HeaderLimits::default(),
            seed: None,
        }
    }
}

/// Counters, for tests, metrics and the comparison example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoliteStats {
    /// Logical requests begun.
    pub requests: u64,
    /// Attempts sent (requests + retries).
    pub attempts: u64,
    /// Retries sent.
    pub retries: u64,
    /// Responses with status 429.
    pub throttled: u64,
    /// Of those, pacing misses: retried on the next paced slot instead of after
    /// `Retry-After` (see the module docs).
    pub pacing_misses: u64,
    /// Retries refused because the budget was spent.
    pub budget_exhausted: u64,
    /// Total time spent waiting by pacing, ns.
    pub paced_nanos: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    throttled: AtomicU64,
    pacing_misses: AtomicU64,
    budget_exhausted: AtomicU64,
    paced_nanos: AtomicU64,
}

/// How a retry waits.
#[derive(Debug, Clone, Copy)]
enum RetryWait {
    /// `Retry-After`, plus jitter.
    After(Duration),
    /// The next paced slot: no wait here, the pacer books it before the attempt.
    Paced,
    /// Exponential backoff.
    Backoff,
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand this response (or error) to the caller.
    Done,
    /// Retry after this wait.
    RetryAfter(Duration),
}

/// Facts about the request that decide whether it may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// Attempts already sent for this request (1 after the first).
    pub sent: u32,
    /// The method is idempotent, an `Idempotency-Key` is present, or the caller opted in.
    pub retryable: bool,
    /// The body can be sent again (empty or buffered).
    pub replayable: bool,
    /// The previous backoff sleep (for decorrelated jitter), zero at first.
    pub previous_sleep: Duration,
}

impl Attempt {
    /// The first attempt of a request with `method` and `headers`.
    pub fn first(engine: &Polite, method: &Method, headers: &HeaderMap, replayable: bool) -> Self {
        Attempt {
            sent: 0,
            retryable: may_retry(method, headers, engine.cfg.retry_non_idempotent),
            replayable,
            previous_sleep: Duration::ZERO,
        }
    }
}

/// An attempt on its way: pacing waited, concurrency permit held (if any). Made by
/// [`Polite::before_send`], consumed by [`Polite::after_send`]; dropping it unused (a
/// cancelled request) frees the permit without an RTT sample, and lets the requests held
/// behind a first contact go.
#[derive(Debug)]
pub struct Sending {
    permit: Option<Permit>,
    /// A place in the host's concurrency cap (`qu="concurrent-requests"`), if it has one.
    cap: Option<CapPermit>,
    probe: Option<Probe>,
    /// The instant the pacer booked this attempt for (on the engine's clock).
    booked: Option<Nanos>,
}

/// Hosts tracked for first contact at most; past it, new hosts are not held.
const MAX_FIRST_CONTACTS: usize = 10_000;

/// Hosts whose first request is in flight, each with the requests waiting for its answer.
type FirstContacts = Arc<Mutex<HashMap<String, Arc<Notify>>>>;

/// The first request to a host the pacer knows nothing about: until its answer has been
/// read (or it fails, or is dropped), other requests to the host wait, so a client does
/// not open with a burst before it knows the server's limits.
#[derive(Debug)]
struct Probe {
    contacts: FirstContacts,
    host: String,
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(n) = self.contacts.lock().remove(&self.host) {
            n.notify_waiters();
        }
    }
}

/// Whether a status counts as a drop for the concurrency limiter.
fn outcome_of(status: StatusCode) -> Outcome {
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        Outcome::Dropped
    } else {
        Outcome::Success
    }
}

/// The shared engine. Cheap to clone.
#[derive(Clone)]
pub struct Polite {
    cfg: Arc<PoliteConfig>,
    pacer: Arc<Mutex<Pacer>>,
    budget: Arc<Mutex<RetryBudget>>,
    rng: Arc<Mutex<StdRng>>,
    clock: Arc<dyn Clock>,
    wall: Arc<dyn Clock>,
    limiter: Option<AdaptiveLimiter>,
    counters: Arc<Counters>,
    first_contacts: FirstContacts,
    caps: HostCaps,
}

impl std::fmt::Debug for Polite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polite")
            .field("cfg", &self.cfg)
            .field("limiter", &self.limiter)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Polite {
    /// An engine on the monotonic clock (pacing) and the wall clock (HTTP dates).
    pub fn new(cfg: PoliteConfig) -> Result<Self, ConfigError> {
        Self::with_clocks(cfg, Arc::new(MonotonicClock::new()), Arc::new(WallClock))
    }

    /// An engine on the given clocks: `clock` for pacing and budgets (any origin), `wall`
    /// for `Retry-After` dates (ns since the Unix epoch).
    pub fn with_clocks(
        cfg: PoliteConfig,
        clock: Arc<dyn Clock>,
        wall: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        cfg.backoff.validate()?;
        if cfg.max_attempts == 0 {
            return Err(ConfigError::ZeroAttempts);
        }
        if cfg.timer_resolution > cfg.max_wait {
            return Err(ConfigError::TimerResolution(cfg.timer_resolution));
        }
        for f in [cfg.reset_jitter, cfg.retry_after_jitter, cfg.pace_headroom] {
            if !(0.0..=1.0).contains(&f) {
                return Err(ConfigError::BadPercent(f));
            }
        }
        let budget = RetryBudget::new(cfg.budget)?;
        let pacer = Pacer::new(PacerConfig {
            max_wait: cfg.max_wait,
            reset_jitter: cfg.reset_jitter,
            headroom: cfg.pace_headroom,
            timer_resolution: cfg.timer_resolution,
            max_policies: cfg.header_limits.max_members,
            ..PacerConfig::default()
        });
        let rng = match cfg.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Ok(Polite {
            cfg: Arc::new(cfg),
            pacer: Arc::new(Mutex::new(pacer)),
            budget: Arc::new(Mutex::new(budget)),
            rng: Arc::new(Mutex::new(rng)),
            clock,
            wall,
            limiter: None,
            counters: Arc::default(),
            first_contacts: Arc::default(),
            caps: HostCaps::default(),
        })
    }

    /// Also limit concurrency with `limiter` (shared: clone it to watch `limit()`).
    pub fn with_limiter(mut self, limiter: AdaptiveLimiter) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// The settings.
    pub fn config(&self) -> &PoliteConfig {
        &self.cfg
    }

    /// The concurrency cap a server advertised for `host` (`qu="concurrent-requests"`),
    /// if any: at most that many requests are in flight to it.
    pub fn concurrency_cap(&self, host: &str) -> Option<u64> {
        self.caps.cap(host)
    }

    /// The concurrency limiter, if any.
    pub fn limiter(&self) -> Option<&AdaptiveLimiter> {
        self.limiter.as_ref()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoliteStats {
        let c = &self.counters;
        PoliteStats {
            requests: c.requests.load(Ordering::Relaxed),
            attempts: c.attempts.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            throttled: c.throttled.load(Ordering::Relaxed),
            pacing_misses: c.pacing_misses.load(Ordering::Relaxed),
            budget_exhausted: c.budget_exhausted.load(Ordering::Relaxed),
            paced_nanos: c.paced_nanos.load(Ordering::Relaxed),
        }
    }

    /// Count a new logical request (once, before its first attempt).
    pub fn begin(&self) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.budget.lock().deposit(self.clock.now());
    }

    /// Book the next send to `host` and return how long to wait before it (zero when
    /// pacing is off or there is no advice). Call before every attempt.
    pub fn pace(&self, host: &str) -> Duration {
        self.book(host).0
    }

    /// [`Polite::pace`], also returning the instant booked (`None` when not pacing).
    fn book(&self, host: &str) -> (Duration, Option<Nanos>) {
        self.counters.attempts.fetch_add(1, Ordering::Relaxed);
        if !self.cfg.pacing {
            return (Duration::ZERO, None);
        }
        let now = self.clock.now();
        let w = self.pacer.lock().reserve(host, now);
        let wait = floodgate_core::time::duration_to_nanos(w);
        self.counters.paced_nanos.fetch_add(wait, Ordering::Relaxed);
        (w, Some(now.saturating_add(w)))
    }

    fn wall_now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.wall.now().0)
    }

    /// Take in a response from `host`; returns whether to retry it. `attempt.sent` is the
    /// number of attempts sent so far (1 after the first). On a retry verdict the budget
    /// has been charged and `attempt` updated.
    pub fn on_response(
        &self,
        host: &str,
        status: StatusCode,
        headers: &HeaderMap,
        attempt: &mut Attempt,
    ) -> Verdict {
        self.on_reply(host, status, headers, attempt, None)
    }

    /// [`Polite::on_response`] for an attempt booked for `booked` (when known).
    fn on_reply(
        &self,
        host: &str,
        status: StatusCode,
        headers: &HeaderMap,
        attempt: &mut Attempt,
        booked: Option<Nanos>,
    ) -> Verdict {
        let now = self.clock.now();
        let limits = HeaderLimits {
            max_wait: self.cfg.max_wait,
            ..self.cfg.header_limits
        };
        let advice = read_advice(headers, self.wall_now(), &limits);
        if status == StatusCode::TOO_MANY_REQUESTS {
            self.counters.throttled.fetch_add(1, Ordering::Relaxed);
        }
        self.caps.learn(host, &advice.policies);
        // too many in flight, not too fast: the retry waits for a place (with backoff),
        // not for the server's Retry-After (its earliest lease's expiry, an upper bound),
        // and the pace is left alone
        let in_flight_denial = status == StatusCode::TOO_MANY_REQUESTS
            && concurrency_denial(&advice.remaining, &advice.policies);
        let retry_after = advice
            .retry_after
            .filter(|_| self.cfg.retry_after_statuses.contains(&status) && !in_flight_denial);
        let miss = self.cfg.pacing
            && status == StatusCode::TOO_MANY_REQUESTS
            && !in_flight_denial
            && pacing_miss(&advice.remaining, retry_after);
        if miss {
            self.counters.pacing_misses.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut pacer = self.pacer.lock();
            if self.cfg.pacing {
                if status == StatusCode::TOO_MANY_REQUESTS && !in_flight_denial {
                    // the pace was too tight (or the limit is shared): widen it before the
                    // advice rebooks the next send
                    pacer.throttled(host, booked, now);
                }
                let mut rng = self.rng.lock();
                pacer.observe_with_policies(
                    host,
                    &advice.remaining,
                    &advice.policies,
                    now,
                    &mut *rng,
                );
            }
            if let Some(ra) = retry_after.filter(|_| !miss) {
                // Retry-After takes precedence and holds every request to this host.
                pacer.block_host(host, now.saturating_add(ra), now);
            }
        }
        if !self.cfg.retry_statuses.contains(&status) {
            return Verdict::Done;
        }
        let wait = match retry_after {
            _ if miss => RetryWait::Paced,
            Some(ra) => RetryWait::After(ra),
            None => RetryWait::Backoff,
        };
        self.retry(attempt, wait)
    }

    /// Everything an adapter does before an attempt goes out: when pacing, wait for the
    /// answer to the first request to a host it knows nothing about yet (at most
    /// `max_wait`); book the send to `host` and wait out its pacing; then take an
    /// adaptive-concurrency permit (when configured). Pair with [`Polite::after_send`].
    pub async fn before_send(&self, host: &str) -> Sending {
        let probe = self.first_contact(host).await;
        let (wait, booked) = self.book(host);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        if self.cfg.pacing {
            // a policy with no tolerance: not too close after a send that left late
            let extra = self.pacer.lock().confirm(host, self.clock.now());
            if !extra.is_zero() {
                tokio::time::sleep(extra).await;
            }
        }
        // a server's concurrency cap: at most q in flight to the host
        let cap = self.caps.enter(host, self.cfg.max_wait).await;
        let permit = match self.limiter() {
            Some(l) => Some(l.acquire().await),
            None => None,
        };
        Sending {
            permit,
            cap,
            probe,
            booked,
        }
    }

    /// `Some` when this request is the first contact with `host`; `None` once the host is
    /// known, after waiting for another request's first contact to be answered.
    async fn first_contact(&self, host: &str) -> Option<Probe> {
        if !self.cfg.pacing {
            return None;
        }
        let deadline = tokio::time::Instant::now() + self.cfg.max_wait;
        loop {
            if self.pacer.lock().knows(host) {
                return None;
            }
            let notify = {
                let mut contacts = self.first_contacts.lock();
                match contacts.get(host) {
                    Some(n) => n.clone(),
                    None if contacts.len() >= MAX_FIRST_CONTACTS => return None,
                    None => {
                        contacts.insert(host.to_owned(), Arc::new(Notify::new()));
                        return Some(Probe {
                            contacts: self.first_contacts.clone(),
                            host: host.to_owned(),
                        });
                    }
                }
            };
            let answered = notify.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            // the probe removes its entry, then wakes the waiters: if it is still there,
            // this waiter is registered in time; if not, the answer is already in
            let pending = self
                .first_contacts
                .lock()
                .get(host)
                .is_some_and(|n| Arc::ptr_eq(n, &notify));
            if !pending {
                continue;
            }
            if tokio::time::timeout_at(deadline, answered).await.is_err() {
                return None;
            }
        }
    }

    /// Everything an adapter does after an attempt: count it, release the permit (a 429,
    /// a 5xx or a transport error counts as a drop), read the advice, and decide whether
    /// to retry; then, if this was the first contact with `host`, let the requests held
    /// behind it go. `reply` is the status and headers, or `None` for a transport error.
    pub fn after_send(
        &self,
        host: &str,
        sending: Sending,
        reply: Option<(StatusCode, &HeaderMap)>,
        attempt: &mut Attempt,
    ) -> Verdict {
        attempt.sent += 1;
        let Sending {
            permit,
            cap,
            probe,
            booked,
        } = sending;
        drop(cap);
        let verdict = match reply {
            Some((status, headers)) => {
                if let Some(p) = permit {
                    p.release(outcome_of(status));
                }
                self.on_reply(host, status, headers, attempt, booked)
            }
            None => {
                if let Some(p) = permit {
                    p.dropped();
                }
                self.on_error(attempt)
            }
        };
        drop(probe);
        verdict
    }

    /// A transport error (connection refused, reset, timeout): retry with backoff if allowed.
    pub fn on_error(&self, attempt: &mut Attempt) -> Verdict {
        self.retry(attempt, RetryWait::Backoff)
    }

    fn retry(&self, attempt: &mut Attempt, how: RetryWait) -> Verdict {
        if !attempt.retryable || !attempt.replayable || attempt.sent >= self.cfg.max_attempts {
            return Verdict::Done;
        }
        if !self.budget.lock().try_withdraw(self.clock.now()) {
            self.counters
                .budget_exhausted
                .fetch_add(1, Ordering::Relaxed);
            return Verdict::Done;
        }
        let mut rng = self.rng.lock();
        let wait = match how {
            RetryWait::After(ra) => {
                let span = ra
                    .mul_f64(self.cfg.retry_after_jitter)
                    .max(self.cfg.retry_after_jitter_min);
                let extra = rng.random_range(0..=floodgate_core::time::duration_to_nanos(span));
                ra + Duration::from_nanos(extra)
            }
            RetryWait::Paced => Duration::ZERO,
            RetryWait::Backoff => {
                let d = self.cfg.backoff.delay(
                    attempt.sent.saturating_sub(1),
                    attempt.previous_sleep,
                    &mut *rng,
                );
                attempt.previous_sleep = d;
                d
            }
        }
        .min(self.cfg.max_wait);
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
        Verdict::RetryAfter(wait)
    }
}

/// Whether a 429 carrying `remaining` (its `RateLimit` members) and `retry_after` is a
/// pacing miss: every member says quota remains (`r > 0`, with a `t`), and `Retry-After`,
/// if any, is no later than the end of the longest `t` among them (the draft asks a server
/// never to send a `Retry-After` before the end of `t`: one at that end adds nothing to
/// what the fields say). No member, or one with `r = 0`, is an exhaustion.
fn pacing_miss(remaining: &[Remaining], retry_after: Option<Duration>) -> bool {
    let window = remaining.iter().filter_map(|r| r.reset).max();
    !remaining.is_empty()
        && remaining
            .iter()
            .all(|r| r.remaining > 0 && r.reset.is_some())
        && retry_after.is_none_or(|ra| window.is_some_and(|t| ra <= t))
}

/// The pacing key of a URI: its authority (`host:port`), or `""`.
pub fn host_key(uri: &http::Uri) -> String {
    uri.authority()
        .map(|a| a.as_str().to_ascii_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::{ManualClock, Nanos};

    fn engine(cfg: PoliteConfig) -> (Polite, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(Nanos::from_secs(10)));
        let wall = Arc::new(ManualClock::new(Nanos::from_secs(1_700_000_000)));
        let p = Polite::with_clocks(
            PoliteConfig {
                seed: Some(1),
                ..cfg
            },
            clock.clone(),
            wall,
        )
        .unwrap();
        (p, clock)
    }

    #[test]
    fn retry_after_takes_precedence_and_blocks_host() {
        let (p, _) = engine(PoliteConfig::default());
        p.begin();
        let mut a = Attempt::first(&p, &Method::GET, &HeaderMap::new(), true);
        assert_eq!(p.pace("h"), Duration::ZERO);
        a.sent = 1;
        let mut h = HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        h.insert("ratelimit", r#""d";r=0;t=1"#.parse().unwrap());
        let Verdict::RetryAfter(w) = p.on_response("h", StatusCode::TOO_MANY_REQUESTS, &h, &mut a)
        else {
            panic!()
        };
        assert!(
            w >= Duration::from_secs(3) && w <= Duration::from_millis(3600),
            "{w:?}"
        );
        // Every other request to the host waits too.
        assert_eq!(p.pace("h"), Duration::from_secs(3));
        assert_eq!(p.stats().throttled, 1);
    }

    /// An overloaded server (an adaptive policy shedding) answers 503 with `Retry-After`:
    /// the same wait, and the same hold on the host, as a 429 with it.
    #[test]
    fn a_503_with_retry_after_backs_off_as_a_429_does() {
        let mut waits = Vec::new();
        for status in [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
        ] {
            let (p, _) = engine(PoliteConfig::default());
            p.begin();
            let mut a = Attempt::first(&p, &Method::GET, &HeaderMap::new(), true);
            a.sent = 1;
            let mut h = HeaderMap::new();
            h.insert("retry-after", "2".parse().unwrap());
            let Verdict::RetryAfter(w) = p.on_response("h", status, &h, &mut a) else {
                panic!("{status}: not retried")
            };
            assert!(w >= Duration::from_secs(2), "{status}: {w:?}");
            // every other request to the host waits too
            assert_eq!(p.pace("h"), Duration::from_secs(2), "{status}");
            waits.push(w);
        }
        // the same seed, the same jitter: the very same wait
        assert_eq!(waits[0], waits[1]);
    }

    #[test]
    fn a_429_that_leaves_quota_is_retried_on_the_pace_not_after_retry_after() {
        let (p, clock) = engine(PoliteConfig::default());
        let headers = |r: u64, ra: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                "ratelimit-policy",
                r#""d";q=100;w=1;floodgate-capacity=1"#.parse().unwrap(),
            );
            h.insert("ratelimit", format!(r#""d";r={r};t=1"#).parse().unwrap());
            h.insert("retry-after", ra.parse().unwrap());
            h
        };
        p.begin();
        let mut a = Attempt::first(&p, &Method::GET, &HeaderMap::new(), true);
        assert_eq!(p.pace("h"), Duration::ZERO);
        a.sent = 1;
        p.on_response("h", StatusCode::OK, &headers(100, "1"), &mut a);
        // capacity 1 at 100/s: 11 ms apart (the timer tick above 10 ms)
        assert_eq!(p.pace("h"), Duration::from_millis(11));
        clock.advance(Duration::from_millis(11));
        // denied a hair early, r = 99 over t = 1 and Retry-After: 1 (the end of t): a pacing
        // miss, retried at once into the pacer's next slot, 2 % wider
        a.sent = 2;
        let v = p.on_response(
            "h",
            StatusCode::TOO_MANY_REQUESTS,
            &headers(99, "1"),
            &mut a,
        );
        assert_eq!(v, Verdict::RetryAfter(Duration::ZERO));
        let next = p.pace("h");
        assert!(next <= Duration::from_millis(12), "{next:?}");
        assert_eq!((p.stats().throttled, p.stats().pacing_misses), (1, 1));
        // a Retry-After beyond t, or r = 0, is an exhaustion: Retry-After holds the host
        for (r, ra) in [(99, "2"), (0, "1")] {
            a.sent = 1;
            let v = p.on_response("h", StatusCode::TOO_MANY_REQUESTS, &headers(r, ra), &mut a);
            let Verdict::RetryAfter(w) = v else { panic!() };
            assert!(w >= Duration::from_secs(1), "{r} {ra}: {w:?}");
            assert!(p.pace("h") >= Duration::from_secs(1), "{r} {ra}");
        }
        assert_eq!(p.stats().pacing_misses, 1);
    }

    #[tokio::test]
    async fn the_first_contact_with_a_host_goes_alone() {
        let (p, _) = engine(PoliteConfig::default());
        let ok = HeaderMap::new();
        let first = p.before_send("h").await;
        let waiter = |p: &Polite, host: &'static str| {
            let p = p.clone();
            tokio::spawn(async move { p.before_send(host).await })
        };
        let second = waiter(&p, "h");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!second.is_finished(), "held until the first answer is read");
        // another host is not held
        let other = tokio::time::timeout(Duration::from_secs(1), p.before_send("o"))
            .await
            .expect("another host goes at once");
        let mut a = Attempt::first(&p, &Method::GET, &ok, true);
        p.after_send("h", first, Some((StatusCode::OK, &ok)), &mut a);
        let second = tokio::time::timeout(Duration::from_secs(1), second)
            .await
            .expect("released by the answer")
            .expect("task");
        assert!(second.probe.is_none(), "the host is known now");
        // a first contact dropped unanswered (cancelled) releases the others too, and one
        // of them becomes the next first contact
        let held = waiter(&p, "o");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!held.is_finished());
        drop(other);
        let next = tokio::time::timeout(Duration::from_secs(1), held)
            .await
            .expect("released by the drop")
            .expect("task");
        assert!(next.probe.is_some());
        // without pacing nothing is held
        let (p, _) = engine(PoliteConfig {
            pacing: false,
            ..PoliteConfig::default()
        });
        let a = p.before_send("h").await;
        let b = tokio::time::timeout(Duration::from_secs(1), p.before_send("h")).await;
        assert!(a.probe.is_none() && b.is_ok());
    }

    #[test]
    fn non_idempotent_and_unreplayable_are_not_retried() {
        let (p, _) = engine(PoliteConfig::default());
        let mut a = Attempt::first(&p, &Method::POST, &HeaderMap::new(), true);
        a.sent = 1;
        assert_eq!(p.on_error(&mut a), Verdict::Done);
        let mut a = Attempt::first(&p, &Method::GET, &HeaderMap::new(), false);
        a.sent = 1;
        assert_eq!(p.on_error(&mut a), Verdict::Done);
        let mut a = Attempt::first(&p, &Method::GET, &HeaderMap::new(), true);
        a.sent = 1;
        assert!(matches!(p.on_error(&mut a), Verdict::RetryAfter(_)));
    }

    #[test]
    fn attempts_are_capped() {
        let (p, _) = engine(PoliteConfig {
            max_attempts: 3,
            ..Default::default()
        });
        let mut a = Attempt::first(&p, &Method::GET, &HeaderMap::new(), true);
        let mut retries = 0;
        for sent in 1..10 {
            a.sent = sent;
            if p.on_response(
                "h",
                StatusCode::SERVICE_UNAVAILABLE,
                &HeaderMap::new(),
                &mut a,
            ) == Verdict::Done
            {
                break;
            }
            retries += 1;
        }
        assert_eq!(retries, 2);
    }

    #[test]
    fn bad_config_is_rejected() {
        assert_eq!(
            Polite::new(PoliteConfig {
                max_attempts: 0,
                ..Default::default()
            })
            .unwrap_err(),
            ConfigError::ZeroAttempts
        );
        assert!(
            Polite::new(PoliteConfig {
                retry_after_jitter: f64::NAN,
                ..Default::default()
            })
            .is_err()
        );
    }
}
