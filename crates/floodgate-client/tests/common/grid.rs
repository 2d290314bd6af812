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
    /// The most admitted in a rolling period, and the sustained count per period.
    pub most: usize,
    pub count: u64,
    /// At least 90 % of the sustained rate, at most 1 % 429s, no other status, and no
    /// more than the sustained count + 1 in any rolling period.
    pub ok: bool,
}

impl Verdict {
    /// Judge `o`, a run of `run` on `cell`.
    pub fn of(cell: &Cell, o: &Outcome, run: Duration) -> Verdict {
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
        v.ok = v.rate() >= 0.9 && v.share_429() <= 0.01 && o.other == 0 && most as u64 <= count + 1;
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

/// The plain pacer: reads only `q`, `w`, `r`, `t`, one request at a time.
pub async fn plain_pacer(url: String, run: Duration) -> Outcome {
    let client = hyper_client();
    let start = Instant::now();
    let end = start + run;
    let mut out = Outcome::default();
    let mut next = start;
    while next < end {
        // the schedule is kept in exact instants: the timer fires on whole milliseconds,
        // and a pacer that counted from its wake-up would drift late by up to 1 ms a send
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let planned = next;
        let resp = send(&client, &url).await;
        let status = resp.status();
        let fields = Fields::read(resp.headers());
        let _ = resp.into_body().collect().await;
        out.record(status, sent - start);
        let Some(f) = fields else {
            next = sent + Duration::from_millis(1);
            continue;
        };
        next = match f.spacing() {
            Some(gap) => planned + gap,
            None => Instant::now() + Duration::from_secs(f.t),
        };
    }
    out
}

/// The polite client of floodgate-client: its tower layer over hyper, `workers` tasks
/// sharing one engine; returns what they got, and the engine's attempts and 429s.
pub async fn polite(url: String, run: Duration, workers: usize) -> (Outcome, u64, u64) {
    let engine = Polite::with_clocks(
        PoliteConfig {
            seed: Some(7),
            ..PoliteConfig::default()
        },
        Arc::new(TokioElapsedClock::new()),
        Arc::new(WallClock),
    )
    .expect("engine");
    let svc = PoliteLayer::new(engine.clone()).layer(hyper_client());
    let start = Instant::now();
    let end = start + run;
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
    let stats = engine.stats();
    (all, stats.attempts, stats.throttled)
}

/// Both clients on `cell` for `run`, each behind its own proxy: the plain pacer's verdict
/// and the polite client's.
pub async fn run_cell(cell: Cell, run: Duration) -> (Verdict, Verdict) {
    let spec = cell.spec();
    let plain_proxy = FloodgateProxy::start(spec.clone()).await;
    let polite_proxy = FloodgateProxy::start(spec.clone()).await;
    let (plain, (mut pol, attempts, throttled)) = tokio::join!(
        plain_pacer(plain_proxy.url("/"), run),
        polite(polite_proxy.url("/"), run, 4),
    );
    // the polite client's attempts and 429s come from its engine (retries included)
    pol.attempts = attempts;
    pol.throttled = throttled;
    (
        Verdict::of(&cell, &plain, run),
        Verdict::of(&cell, &pol, run),
    )
}
