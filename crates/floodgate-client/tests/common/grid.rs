//! The pacing grid's cells, the sustained rate each allows, a reader of the four RateLimit
//! numbers, and the verdict on one run: shared by the `pacing_grid` test (virtual time)
//! and the `pacing_grid` example (real time).
#![allow(dead_code)]

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use floodgate_client::{Polite, PoliteConfig, PoliteLayer, TokioElapsedClock};
use floodgate_core::{Kind, Rate, Spec, WallClock};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use crate::common::FloodgateProxy;

/// The rates of the grid.
pub const RATES: [&str; 5] = ["1/s", "10/s", "100/s", "1000/s", "30/min"];
/// The bursts of the grid (excess over one request: capacity = burst + 1).
pub const BURSTS: [u64; 3] = [0, 5, 100];

/// One algorithm at one rate and burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub kind: Kind,
    pub rate: Rate,
    pub burst: u64,
}

impl Cell {
    /// The policy: `rate` by `kind`, capacity `burst + 1` (ignored by windowed algorithms).
    pub fn spec(&self) -> Spec {
        let mut spec = Spec::new(self.kind, self.rate);
        spec.capacity = Some(self.burst + 1);
        spec
    }
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let period = self.rate.period();
        let unit = if period == Duration::from_secs(60) {
            "min".to_string()
        } else if period == Duration::from_secs(1) {
            "s".to_string()
        } else {
            format!("{period:?}")
        };
        write!(
            f,
            "{} {}/{} burst {}",
            self.kind,
            self.rate.count(),
            unit,
            self.burst
        )
    }
}

/// Every cell: 7 algorithms x 5 rates x 3 bursts.
pub fn cells() -> Vec<Cell> {
    let mut out = Vec::new();
    for kind in Kind::ALL {
        for rate in RATES {
            for burst in BURSTS {
                out.push(Cell {
                    kind,
                    rate: rate.parse().expect("grid rate"),
                    burst,
                });
            }
        }
    }
    out
}

/// The sustained rate `spec` allows a steady stream, as `(count, period)`: the rate's count
/// per period, except the sliding counter, whose estimate weighs the previous window as if
/// its requests were spread evenly: a stream at exactly `L` per window always finds it one
/// request short, so it sustains `L - 1` per window (and `1` per two windows at `L = 1`).
pub fn sustained_per_period(spec: &Spec) -> (u64, Duration) {
    let (count, period) = (spec.rate.count(), spec.rate.period());
    match spec.kind {
        Kind::SlidingCounter if count == 1 => (1, period * 2),
        Kind::SlidingCounter => (count - 1, period),
        _ => (count, period),
    }
}

/// The four numbers a plain pacer reads: `q`, `w` of the policy named `default` in
/// `RateLimit-Policy`, `r`, `t` of its member in `RateLimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    pub q: u64,
    pub w: u64,
    pub r: u64,
    pub t: u64,
}

impl Fields {
    /// The numbers in `headers`, `None` if either field or a number is missing.
    pub fn read(headers: &HeaderMap) -> Option<Fields> {
        let policy = member(headers.get("ratelimit-policy")?.as_bytes())?;
        let state = member(headers.get("ratelimit")?.as_bytes())?;
        Some(Fields {
            q: int(&policy, "q")?,
            w: int(&policy, "w")?,
            r: int(&state, "r")?,
            t: int(&state, "t")?,
        })
    }

    /// How long after a send the next one goes: `max(w / q, t / r)`, rounded up to the
    /// nanosecond; `None` when `r = 0` (wait `t` instead).
    pub fn spacing(&self) -> Option<Duration> {
        if self.r == 0 {
            return None;
        }
        let per =
            |secs: u64, n: u64| (u128::from(secs) * 1_000_000_000).div_ceil(u128::from(n.max(1)));
        let ns = per(self.w, self.q).max(per(self.t, self.r));
        Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }
}

fn member(value: &[u8]) -> Option<sfv::Parameters> {
    let list = sfv::Parser::new(value).parse::<sfv::List>().ok()?;
    list.into_iter().find_map(|e| match e {
        sfv::ListEntry::Item(i)
            if i.bare_item
                .as_string()
                .is_some_and(|s| s.as_str() == "default") =>
        {
            Some(i.params)
        }
        _ => None,
    })
}

fn int(params: &sfv::Parameters, key: &str) -> Option<u64> {
    let v = params.get(key)?.as_integer()?;
    u64::try_from(i64::from(v)).ok()
}

/// What one client got.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// When each admitted request was answered, from the start of the run.
    pub admitted: Vec<Duration>,
    /// Requests sent (retries included).
    pub attempts: u64,
    /// Of which answered 429.
    pub throttled: u64,
    /// Answers neither 200 nor 429.
    pub other: u64,
}

impl Outcome {
    /// One attempt answered `status` at `at`.
    pub fn record(&mut self, status: StatusCode, at: Duration) {
        self.attempts += 1;
        if status == StatusCode::TOO_MANY_REQUESTS {
            self.throttled += 1;
        }
        self.record_final(status, at);
    }

    /// A request's final answer (attempts and 429s counted elsewhere).
    pub fn record_final(&mut self, status: StatusCode, at: Duration) {
        match status {
            StatusCode::OK => self.admitted.push(at),
            StatusCode::TOO_MANY_REQUESTS => {}
            _ => self.other += 1,
        }
    }

    /// Add another worker's outcome.
    pub fn merge(&mut self, o: Outcome) {
        self.admitted.extend(o.admitted);
        self.attempts += o.attempts;
        self.throttled += o.throttled;
        self.other += o.other;
    }
}

/// The most admissions in any rolling span of `span`.
pub fn max_in_span(admitted: &[Duration], span: Duration) -> usize {
    let mut at = admitted.to_vec();
    at.sort();
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..at.len() {
        while at[hi] - at[lo] >= span {
            lo += 1;
        }
        best = best.max(hi + 1 - lo);
    }
    best
}

/// How one client did in one cell.
#[derive(Debug, Clone, Copy)]
pub struct Verdict {
    /// Admitted within the run.
    pub admitted: usize,
    /// What the sustained rate allows over the run.
    pub expected: f64,
    /// Attempts sent and of them answered 429.
    pub attempts: u64,
    pub throttled: u64,
    /// The most admitted in a rolling period (by the instants the client sent them), and
    /// the sustained count per period.
    pub most: usize,
    pub count: u64,
    /// At least 90 % of the sustained rate, at most 1 % 429s, no other status, and no
    /// more than the sustained count + 1 in any rolling period.
    pub ok: bool,
}

impl Verdict {
    /// Judge `o`, a run of `run` on `cell` on `timer`: its admitted requests by the
    /// instants they were sent. On the real clock a stall of the machine shifts the sends
    /// planned in it into the next period: the rolling check then allows what the rate
    /// fits in [`STALL`] more (0 at 10/s and slower, 5 at 100/s, 50 at 1000/s: a boundary
    /// burst is the whole count again).
    pub fn of(cell: &Cell, o: &Outcome, run: Duration, timer: Timer) -> Verdict {
        let (count, period) = sustained_per_period(&cell.spec());
        let expected = run.as_secs_f64() * count as f64 / period.as_secs_f64();
        let admitted = o.admitted.iter().filter(|a| **a < run).count();
        let most = max_in_span(&o.admitted, period);
        let mut v = Verdict {
            admitted,
            expected,
            attempts: o.attempts,
            throttled: o.throttled,
            most,
            count,
            ok: false,
        };
        let slack = match timer {
            Timer::Virtual => 0,
            Timer::Real => {
                (STALL.as_secs_f64() * count as f64 / period.as_secs_f64()).floor() as u64
            }
        };
        v.ok = v.rate() >= 0.9
            && v.share_429() <= 0.01
            && o.other == 0
            && most as u64 <= count + 1 + slack;
        v
    }

    /// Admitted over what the sustained rate allows.
    pub fn rate(&self) -> f64 {
        self.admitted as f64 / self.expected
    }

    /// 429s over attempts.
    pub fn share_429(&self) -> f64 {
        self.throttled as f64 / self.attempts.max(1) as f64
    }

    /// One line for `who` in `cell`, ending in `PASS` or `FAIL`.
    pub fn line(&self, cell: &Cell, who: &str) -> String {
        format!(
            "{:<34} {who:<6} admitted {:>6} of {:>7.0} sustained ({:>5.1} %), 429s {:>4} of {:>6} attempts ({:>5.2} %), most in a period {}/{}  {}\n",
            cell.to_string(),
            self.admitted,
            self.expected,
            self.rate() * 100.0,
            self.throttled,
            self.attempts,
            self.share_429() * 100.0,
            self.most,
            self.count,
            if self.ok { "PASS" } else { "FAIL" }
        )
    }
}

type Hyper = Client<HttpConnector, Full<bytes::Bytes>>;

/// A keep-alive client that drops connections idle for 20 s, before the proxy closes them
/// at 30 s (a slow pacer's connections are idle that long).
fn hyper_client() -> Hyper {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(20))
        .pool_timer(TokioTimer::new())
        .build_http()
}

async fn send(client: &Hyper, url: &str) -> http::Response<hyper::body::Incoming> {
    let req = Request::get(url)
        .body(Full::new(bytes::Bytes::new()))
        .expect("request");
    client.request(req).await.expect("response")
}

/// On the real clock, the stall of the machine the rolling-period check allows for.
pub const STALL: Duration = Duration::from_millis(50);

/// The plain pacer's headroom: every spacing 2 % longer than the fields say.
pub const PLAIN_HEADROOM: f64 = 0.02;
/// The resolution of the timer the pacers sleep on (tokio's).
pub const TIMER_TICK: Duration = Duration::from_millis(1);
/// Sends the plain pacer keeps the timer tick of margin for after a 429 with `r > 0`.
pub const STRICT_FOR: u32 = 500;
/// The most sends the plain pacer makes up at once when its timer fired late (a bucket
/// refilled meanwhile; a window counts them within its quota).
pub const CATCH_UP: u32 = 3;
/// Requests the plain pacer has in flight at most (it sends on its schedule, not on
/// answers: a queue that holds requests, or a slow answer, does not slow it down).
const PLAIN_IN_FLIGHT: usize = 64;

/// What the plain pacer has learnt from the answers so far.
#[derive(Debug, Default)]
struct PlainState {
    /// The latest fields read.
    fields: Option<Fields>,
    /// Nothing before this (an `r = 0` answer said so).
    hold: Option<Instant>,
    /// A 429 came to a paced send with `r > 0`: the limit tolerates no early send, so
    /// sends go at least one timer tick above the interval, for STRICT_FOR sends (then it
    /// tries without again: a bucket with a small burst also answers a rare 429 to the
    /// noise of a busy machine).
    strict: bool,
    /// Sends left before a strict pacer tries without the tick again.
    strict_left: u32,
    /// Sends since the last 429 counted (`u64::MAX`: none yet): a 429 within 100 sends
    /// of the previous one (more than 1 %) makes the pacer strict; a rarer one is noise.
    since_429: u64,
    /// Each further such 429 widens the spacing by 0.02 more (at most 0.5).
    widen: f64,
    /// The latest send planned when it last adapted: 429s to sends planned no later than
    /// this were already in flight and are not counted again.
    adapted_for: Option<Instant>,
    /// The latest send planned.
    planned: Option<Instant>,
    out: Outcome,
}

impl PlainState {
    /// Read one answer, to a send planned for `planned`.
    fn read(
        &mut self,
        status: StatusCode,
        fields: Option<Fields>,
        planned: Instant,
        sent: Duration,
    ) {
        self.out.record(status, sent);
        let Some(f) = fields else { return };
        self.fields = Some(f);
        if f.r == 0 {
            let until = Instant::now() + Duration::from_secs(f.t);
            self.hold = Some(self.hold.map_or(until, |h| h.max(until)));
        } else if status == StatusCode::TOO_MANY_REQUESTS
            && self.adapted_for.is_none_or(|a| planned > a)
        {
            self.adapted_for = self.planned;
            let frequent = self.since_429 < 100;
            self.since_429 = 0;
            if !frequent {
                return;
            }
            if self.strict {
                self.widen = (self.widen + 0.02).min(0.5);
            }
            self.strict = true;
            self.strict_left = STRICT_FOR;
        }
    }

    /// The spacing after a send: `max(w / q, t / r)` with the headroom, the timer tick of a
    /// strict limit and the widening; `None` before any fields.
    fn spacing(&self) -> Option<Duration> {
        let gap = self.fields.and_then(|f| f.spacing())?;
        let mut g = gap.mul_f64(1.0 + PLAIN_HEADROOM);
        if self.strict {
            g = g.max(gap + TIMER_TICK);
        }
        Some(g.mul_f64(1.0 + self.widen))
    }
}

/// The plain pacer: reads only `q`, `w`, `r`, `t` (and knows its own timer's tick). The
/// first request goes alone; then sends go on an absolute schedule, each planned
/// `max(w / q, t / r)` (2 % headroom) after the one planned before it, without waiting
/// for answers: a timer firing late does not slow it down. No catch-up burst: behind the
/// schedule by more than [`CATCH_UP`] sends it drops the rest of the backlog (and once the
/// limit is known to be strict, each send goes a full spacing less a timer tick after the
/// last one went).
/// After an answer with `r = 0` nothing goes before its `t` has passed. A 429 with
/// `r > 0` says the send came early for a limit with no tolerance: from then on sends go at
/// least a timer tick above the interval (and each further one widens the spacing), when
/// such 429s come to more than 1 % of its sends.
pub async fn plain_pacer(url: String, run: Duration) -> Outcome {
    let client = hyper_client();
    let start = Instant::now();
    let end = start + run;
    let state = Arc::new(parking_lot::Mutex::new(PlainState {
        since_429: u64::MAX,
        ..PlainState::default()
    }));
    // the first request alone: nothing is known yet
    let resp = send(&client, &url).await;
    let (status, fields) = (resp.status(), Fields::read(resp.headers()));
    let _ = resp.into_body().collect().await;
    state.lock().read(status, fields, start, Duration::ZERO);
    // the schedule starts when the answer is read: the first request may have waited for
    // a connection, and a send planned from its departure could reach the server too soon
    // after it
    let slots = Arc::new(tokio::sync::Semaphore::new(PLAIN_IN_FLIGHT));
    let mut planned = Instant::now();
    let mut sent = planned;
    let mut tasks = Vec::new();
    loop {
        let next = {
            let st = state.lock();
            let gap = st.spacing().unwrap_or(TIMER_TICK);
            let mut next = if st.strict {
                // every send a full interval after the last one that went (less a tick:
                // the timer's rounding)
                (planned + gap).max(sent + gap.saturating_sub(TIMER_TICK))
            } else {
                // on the schedule; when behind it by more than CATCH_UP sends, the rest
                // of the backlog is dropped: at most CATCH_UP + 1 sends back to back (a
                // timer firing on whole ticks cannot catch up otherwise at 1000/s)
                (planned + gap).max(sent.checked_sub(gap * CATCH_UP).unwrap_or(sent))
            };
            if let Some(h) = st.hold {
                next = next.max(h);
            }
            next
        };
        if next >= end {
            break;
        }
        planned = next;
        tokio::time::sleep_until(planned).await;
        let permit = slots.clone().acquire_owned().await.expect("semaphore");
        sent = Instant::now();
        {
            let mut st = state.lock();
            st.planned = Some(planned);
            st.since_429 = st.since_429.saturating_add(1);
            if st.strict {
                st.strict_left = st.strict_left.saturating_sub(1);
                st.strict = st.strict_left > 0;
            }
        }
        let (client, url, state) = (client.clone(), url.clone(), state.clone());
        let at = sent - start;
        tasks.push(tokio::spawn(async move {
            let resp = send(&client, &url).await;
            let (status, fields) = (resp.status(), Fields::read(resp.headers()));
            let _ = resp.into_body().collect().await;
            state.lock().read(status, fields, planned, at);
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.expect("plain pacer send");
    }
    std::mem::take(&mut state.lock().out)
}

/// Tasks of the polite client sharing one engine: enough that one waiting on a slow answer
/// (a leaky queue holds requests to their slot) does not leave the pace unused.
pub const POLITE_WORKERS: usize = 8;

/// Which clock a grid runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// tokio's paused clock: every timer fires at its exact (millisecond) instant, and the
    /// proxy reads the same clock, so there is no noise for the timer guard to absorb:
    /// the polite client runs with `timer_resolution = 0`.
    Virtual,
    /// The wall clock: tokio's timer fires on whole milliseconds, plus wake-up noise; the
    /// polite client runs with its defaults (a 1 ms timer guard).
    Real,
}

/// The polite client of floodgate-client: its tower layer over hyper, `workers` tasks
/// sharing one engine; returns what they got, and the engine's attempts and 429s.
pub async fn polite(
    url: String,
    run: Duration,
    workers: usize,
    timer: Timer,
) -> (Outcome, u64, u64) {
    let timer_resolution = match timer {
        Timer::Virtual => Duration::ZERO,
        Timer::Real => PoliteConfig::default().timer_resolution,
    };
    let engine = Polite::with_clocks(
        PoliteConfig {
            seed: Some(7),
            timer_resolution,
            ..PoliteConfig::default()
        },
        Arc::new(TokioElapsedClock::new()),
        Arc::new(WallClock),
    )
    .expect("engine");
    let start = Instant::now();
    let end = start + run;
    // under the polite layer, each attempt's send instant, kept when it was admitted: the
    // client's own view of what it got into each period (its answers' times would add the
    // noise of the way back)
    let admitted: Arc<parking_lot::Mutex<Vec<Duration>>> = Arc::default();
    let inner = {
        let (client, admitted) = (hyper_client(), admitted.clone());
        tower::service_fn(move |req: Request<Full<bytes::Bytes>>| {
            let (client, admitted) = (client.clone(), admitted.clone());
            async move {
                let at = start.elapsed();
                let resp = client.request(req).await?;
                if resp.status() == StatusCode::OK {
                    admitted.lock().push(at);
                }
                Ok::<_, hyper_util::client::legacy::Error>(resp)
            }
        })
    };
    let svc = PoliteLayer::new(engine.clone()).layer(inner);
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (mut svc, url) = (svc.clone(), url.clone());
            tokio::spawn(async move {
                let mut out = Outcome::default();
                loop {
                    let req = Request::get(&url)
                        .body(Full::new(bytes::Bytes::new()))
                        .expect("request");
                    let call = async {
                        let resp = svc.ready().await?.call(req).await?;
                        let status = resp.status();
                        let _ = resp.into_body().collect().await;
                        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(status)
                    };
                    match tokio::time::timeout_at(end, call).await {
                        Ok(Ok(status)) => out.record_final(status, start.elapsed()),
                        Ok(Err(e)) => panic!("polite request failed: {e}"),
                        Err(_) => break,
                    }
                }
                out
            })
        })
        .collect();
    let mut all = Outcome::default();
    for t in tasks {
        all.merge(t.await.expect("worker"));
    }
    all.admitted = admitted.lock().clone();
    let stats = engine.stats();
    (all, stats.attempts, stats.throttled)
}

/// Both clients on `cell` for `run`, each behind its own proxy: the plain pacer's verdict
/// and the polite client's.
pub async fn run_cell(cell: Cell, run: Duration, timer: Timer) -> (Verdict, Verdict) {
    let spec = cell.spec();
    let plain_proxy = FloodgateProxy::start(spec.clone()).await;
    let polite_proxy = FloodgateProxy::start(spec.clone()).await;
    let (plain, (mut pol, attempts, throttled)) = tokio::join!(
        plain_pacer(plain_proxy.url("/"), run),
        polite(polite_proxy.url("/"), run, POLITE_WORKERS, timer),
    );
    // the polite client's attempts and 429s come from its engine (retries included)
    pol.attempts = attempts;
    pol.throttled = throttled;
    (
        Verdict::of(&cell, &plain, run, timer),
        Verdict::of(&cell, &pol, run, timer),
    )
}
