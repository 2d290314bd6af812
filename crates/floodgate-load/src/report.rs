//! [`Report`]: the result of a run, as data (serde, for `--json`) and as text.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::boundary::{self, Verdict, Windows};
use crate::client::ErrorKind;
use crate::config::{Bound, LoadConfig, Mode};
use crate::goodput::GoodputReport;
use crate::stats::{Advertised, AdvertisedHeader, Finals, Percentiles, Stats};
use crate::summary::{Waits, WorkerSummary};
use crate::target::Target;
use crate::timeline::Bucket;

mod text;
use floodgate_client::PoliteStats;
use floodgate_client::backoff::Jitter;

/// Most boundaries listed in a report (the plot and the text need no more).
const MAX_BOUNDARIES: usize = 10_000;
/// Most timeline rows printed as text; longer timelines are shown merged.
const MAX_TEXT_ROWS: usize = 120;

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The URL as given.
    pub url: String,
    /// The address every connection went to.
    pub address: String,
    /// HTTP method.
    pub method: String,
    /// `"open-loop"` or `"closed-loop"`.
    pub mode: &'static str,
    /// Open loop: how send times were spaced, `"uniform"` (`i / rate`) or `"poisson"`.
    pub arrivals: &'static str,
    /// Seed of the Poisson gaps and the class draws.
    pub seed: u64,
    /// Asked rate, requests per second in total (`None`: as fast as possible).
    pub rate: Option<f64>,
    /// Connections.
    pub concurrency: usize,
    /// Asked count (`-n`), if any.
    pub count: Option<u64>,
    /// Asked duration (`-z`) in seconds, if any.
    pub duration_s: Option<f64>,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix_s: f64,
    /// From the start to the last completion, seconds.
    pub elapsed_s: f64,
    /// Attempts sent (responses plus errors): the requests the server saw. Without
    /// `--polite` every request is one attempt; with it, retries are included (see
    /// [`Report::outcome`] for requests counted once).
    pub requests: u64,
    /// Attempts that got an HTTP response.
    pub responses: u64,
    /// `requests / elapsed_s`.
    pub rps: f64,
    /// Requests per second between the first and the last send.
    pub send_rate: f64,
    /// Count per status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Status codes counted as denials.
    pub deny_statuses: Vec<u16>,
    /// Requests without a response, by kind.
    pub errors: Errors,
    /// Latency percentiles.
    pub latency: Latency,
    /// Open loop only: how late requests left relative to their intended time. A large
    /// lag means the generator (or its machine) could not keep up with the asked rate.
    pub send_lag: Option<Percentiles>,
    /// Outcomes per bucket.
    pub timeline: TimelineReport,
    /// The boundary verdict, when a window was given.
    pub boundary: Option<Verdict>,
    /// Rate-limit headers the server sent.
    pub advertised: Vec<AdvertisedHeader>,
    /// The `w` (seconds) of the last `RateLimit-Policy` seen, if any.
    pub advertised_window_s: Option<u64>,
    /// Whether the run was stopped before its plan was done (Ctrl-C or the deadline).
    pub stopped_early: bool,
    /// Each request counted once, after its retries: the numbers to compare naive and
    /// polite runs by.
    pub outcome: OutcomeReport,
    /// The polite client's settings and waits (`None` without `--polite`).
    pub polite: Option<PoliteReport>,
    /// Successful responses per second, latency of the successes, and per class.
    pub goodput: GoodputReport,
}

/// Requests counted once each, by how they finally ended.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OutcomeReport {
    /// Requests started (`succeeded + failed + abandoned`).
    pub requests: u64,
    /// Ended with a 2xx or 3xx that is not a denial status.
    pub succeeded: u64,
    /// Ended with a denial status, another 4xx/5xx, or no response.
    pub failed: u64,
    /// How the failed ones ended.
    pub finals: Finals,
    /// Stopped (deadline or Ctrl-C) while waiting to be sent or retried (polite only).
    pub abandoned: u64,
    /// Attempts sent, retries included (equal to `requests - abandoned` when naive).
    pub attempts: u64,
    /// Attempts that were retries (0 when naive).
    pub retries: u64,
    /// Responses with a denial status the client received, every attempt counted (the
    /// "429s seen").
    pub denied_responses: u64,
}

/// What the polite client was set to and how long it waited.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PoliteReport {
    /// Whether sends were paced from the advertised `RateLimit` headers (`--no-pacing`:
    /// false).
    pub pacing: bool,
    /// Backoff jitter: `"full"`, `"equal"`, `"decorrelated"` or `"none"`.
    pub jitter: &'static str,
    /// First backoff step, seconds.
    pub backoff_base_s: f64,
    /// Longest backoff, seconds.
    pub backoff_cap_s: f64,
    /// Cap on every wait (pacing, `Retry-After`, backoff), seconds.
    pub max_wait_s: f64,
    /// Attempts per request at most, the first included.
    pub max_attempts: u32,
    /// Retry budget: retries may be at most this fraction of requests (over a sliding
    /// window), plus a floor per second.
    pub retry_budget: f64,
    /// The floor of the retry budget, retries per second.
    pub retry_budget_min_per_s: u32,
    /// Whether non-idempotent methods were retried too.
    pub retry_non_idempotent: bool,
    /// Retries the budget refused.
    pub budget_refused: u64,
    /// Time slept before attempts (pacing, hosts blocked by `Retry-After`), summed over
    /// all requests, seconds.
    pub pacing_wait_s: f64,
    /// Time slept between an attempt and its retry, summed over all requests, seconds.
    pub retry_wait_s: f64,
    /// `(pacing_wait_s + retry_wait_s) / requests`, milliseconds.
    pub wait_per_request_ms: f64,
    /// The retry waits the client chose (`Retry-After` plus jitter, or backoff).
    pub retry_wait: Percentiles,
}

fn jitter_name(j: Jitter) -> &'static str {
    match j {
        Jitter::None => "none",
        Jitter::Full => "full",
        Jitter::Equal => "equal",
        Jitter::Decorrelated => "decorrelated",
    }
}

/// Errors by kind.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Errors {
    /// Connection refused.
    pub connect_refused: u64,
    /// No complete response within the timeout.
    pub timeout: u64,
    /// Anything else.
    pub other: u64,
    /// The first message of each kind seen.
    pub examples: Vec<String>,
}

/// Latency, overall and split by status.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// `"intended send time"` (open loop) or `"actual send time"` (closed loop).
    pub measured_from: &'static str,
    /// All responses.
    pub all: Percentiles,
    /// 200 responses.
    pub status_200: Percentiles,
    /// Denial responses (429 unless configured).
    pub denied: Percentiles,
    /// Every other status.
    pub other: Percentiles,
}

/// The timeline.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineReport {
    /// Bucket width, seconds (may be wider than asked for very long runs).
    pub bucket_s: f64,
    /// Buckets in time order.
    pub buckets: Vec<BucketReport>,
    /// Window boundaries within the timeline, seconds since the start of the run.
    pub boundaries_s: Vec<f64>,
}

/// One bucket of the timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BucketReport {
    /// Start, seconds since the start of the run (the first bucket may start a little
    /// before: buckets are aligned to the wall clock).
    pub start_s: f64,
    /// Start, seconds since the Unix epoch.
    pub start_unix_s: f64,
    /// Requests sent.
    pub sent: u64,
    /// Responses that were not denials.
    pub admitted: u64,
    /// Denials.
    pub denied: u64,
    /// Requests without a response.
    pub errors: u64,
    /// Of `sent`, attempts that were retries.
    pub retries: u64,
    /// p99 latency of the responses, ms (0 when none).
    pub p99_ms: f64,
    /// Whether a window boundary falls at the start of this bucket.
    pub boundary_at_start: bool,
    /// Window boundaries strictly inside the bucket.
    pub boundaries_inside: u32,
}

impl Report {
    #[allow(clippy::too_many_arguments)] // one call site, in run.rs
    pub(crate) fn build(
        config: &LoadConfig,
        target: &Target,
        stats: Stats,
        summaries: Vec<WorkerSummary>,
        engine: Option<PoliteStats>,
        wall0: u64,
        elapsed: Duration,
        stopped_early: bool,
    ) -> Report {
        let mut advertised = Advertised::default();
        let mut examples: [Option<String>; 3] = Default::default();
        let mut waits = Waits::default();
        for s in summaries {
            waits.merge(&s.waits);
            advertised.merge(s.advertised);
            for (slot, e) in examples.iter_mut().zip(s.examples) {
                if slot.is_none() {
                    *slot = e;
                }
            }
        }
        let advertised = advertised.headers();
        let advertised_window_s = advertised
            .iter()
            .find(|h| h.header == "ratelimit-policy")
            .and_then(|h| policy_window(&h.last));

        let windows = stats.zones.as_ref().map(|(w, _)| *w);
        let tl = &stats.timeline;
        let t0 = wall0 as f64 / 1e9;
        let tl_start = tl.origin;
        let tl_end = tl.start_of(tl.buckets.len());
        let mut boundaries_s = Vec::new();
        if let Some(w) = windows {
            let mut b = w.next_boundary(tl_start);
            while b < tl_end && boundaries_s.len() < MAX_BOUNDARIES {
                boundaries_s.push((b as f64 - wall0 as f64) / 1e9);
                b = b.saturating_add(w.window_ns);
            }
        }
        let buckets = tl
            .buckets
            .iter()
            .enumerate()
            .map(|(k, b)| {
                let start = tl.start_of(k);
                let (at_start, inside) = match windows {
                    Some(w) => count_boundaries(&w, start, start + tl.width),
                    None => (false, 0),
                };
                bucket_report(b, start, wall0, at_start, inside)
            })
            .collect();

        let boundary = stats.zones.as_ref().map(|(w, zones)| {
            let (a, b) = if stats.count == 0 {
                (wall0, wall0)
            } else {
                (wall0 + stats.first_sent, wall0 + stats.last_sent)
            };
            let crossed = count_in(w, a, b);
            boundary::verdict(w, zones, crossed, w.near_measure(a, b), b - a)
        });

        let requests = stats.count;
        let goodput_window_s = match config.bound {
            Bound::Duration(d) => d.as_secs_f64(),
            Bound::Count(_) if requests == 0 => elapsed.as_secs_f64(),
            Bound::Count(_) => stats.last_done as f64 / 1e9,
        };
        let goodput = stats
            .goodput
            .report(goodput_window_s, config.classes.as_ref());
        let errors_total: u64 = stats.errors.iter().sum();
        let elapsed_s = if requests == 0 {
            elapsed.as_secs_f64()
        } else {
            stats.last_done as f64 / 1e9
        };
        let send_span = stats.last_sent.saturating_sub(stats.first_sent) as f64 / 1e9;
        let denied_responses = config
            .deny_statuses
            .iter()
            .map(|&c| stats.statuses.get(usize::from(c)).copied().unwrap_or(0))
            .sum();
        let f = stats.finals;
        let failed = f.denied + f.other_status + f.errors;
        let logical = f.succeeded + failed + waits.abandoned;
        let outcome = OutcomeReport {
            requests: logical,
            succeeded: f.succeeded,
            failed,
            finals: f,
            abandoned: waits.abandoned,
            attempts: requests,
            retries: stats.retries,
            denied_responses,
        };
        let polite = config.polite.as_ref().map(|p| {
            let e = engine.unwrap_or_default();
            let (paced, retried) = (waits.paced_ns as f64 / 1e9, waits.retry_ns as f64 / 1e9);
            PoliteReport {
                pacing: p.pacing,
                jitter: jitter_name(p.backoff.jitter),
                backoff_base_s: p.backoff.base.as_secs_f64(),
                backoff_cap_s: p.backoff.cap.as_secs_f64(),
                max_wait_s: p.max_wait.as_secs_f64(),
                max_attempts: p.max_attempts,
                retry_budget: p.budget.percent_can_retry,
                retry_budget_min_per_s: p.budget.min_retries_per_sec,
                retry_non_idempotent: p.retry_non_idempotent,
                budget_refused: e.budget_exhausted,
                pacing_wait_s: paced,
                retry_wait_s: retried,
                wait_per_request_ms: if logical > 0 {
                    (paced + retried) * 1e3 / logical as f64
                } else {
                    0.0
                },
                retry_wait: waits.retry_wait(),
            }
        });
        Report {
            url: target.url.clone(),
            address: target.addr.to_string(),
            method: config.method.to_string(),
            mode: match config.mode {
                Mode::OpenLoop => "open-loop",
                Mode::ClosedLoop => "closed-loop",
            },
            arrivals: config.arrivals.name(),
            seed: config.seed,
            rate: config.rate,
            concurrency: config.concurrency,
            count: match config.bound {
                Bound::Count(n) => Some(n),
                Bound::Duration(_) => None,
            },
            duration_s: match config.bound {
                Bound::Duration(d) => Some(d.as_secs_f64()),
                Bound::Count(_) => None,
            },
            started_unix_s: t0,
            elapsed_s,
            requests,
            responses: requests - errors_total,
            rps: if elapsed_s > 0.0 {
                requests as f64 / elapsed_s
            } else {
                0.0
            },
            send_rate: if send_span > 0.0 && requests > 1 {
                (requests - 1) as f64 / send_span
            } else {
                0.0
            },
            statuses: stats.status_counts(),
            deny_statuses: config.deny_statuses.clone(),
            errors: Errors {
                connect_refused: stats.errors[ErrorKind::ConnectRefused.index()],
                timeout: stats.errors[ErrorKind::Timeout.index()],
                other: stats.errors[ErrorKind::Other.index()],
                examples: examples.into_iter().flatten().collect(),
            },
            latency: Latency {
                measured_from: match (config.mode, config.polite.is_some()) {
                    (Mode::OpenLoop, false) => "intended send time",
                    (Mode::ClosedLoop, false) => "actual send time",
                    (Mode::OpenLoop, true) => {
                        "intended send time to the end of the last attempt (waits and retries included)"
                    }
                    (Mode::ClosedLoop, true) => {
                        "start of the request to the end of the last attempt (waits and retries included)"
                    }
                },
                all: Percentiles::of(&stats.latency_all),
                status_200: Percentiles::of(&stats.latency_200),
                denied: Percentiles::of(&stats.latency_denied),
                other: Percentiles::of(&stats.latency_other),
            },
            send_lag: (config.mode == Mode::OpenLoop).then(|| Percentiles::of(&stats.send_lag)),
            timeline: TimelineReport {
                bucket_s: tl.width as f64 / 1e9,
                buckets,
                boundaries_s,
            },
            boundary,
            advertised,
            advertised_window_s,
            stopped_early,
            outcome,
            polite,
            goodput,
        }
    }

    /// Count of responses with `status`.
    pub fn status(&self, status: u16) -> u64 {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    /// Responses with a denial status.
    pub fn denied(&self) -> u64 {
        self.deny_statuses.iter().map(|s| self.status(*s)).sum()
    }

    /// Responses with any other status.
    pub fn admitted(&self) -> u64 {
        self.responses - self.denied()
    }
}

fn bucket_report(b: &Bucket, start: u64, wall0: u64, at_start: bool, inside: u32) -> BucketReport {
    BucketReport {
        start_s: (start as f64 - wall0 as f64) / 1e9,
        start_unix_s: start as f64 / 1e9,
        sent: b.sent,
        admitted: b.admitted,
        denied: b.denied,
        errors: b.errors,
        retries: b.retries,
        p99_ms: if b.latency.is_empty() {
            0.0
        } else {
            b.latency.value_at_quantile(0.99) as f64 / 1000.0
        },
        boundary_at_start: at_start,
        boundaries_inside: inside,
    }
}

/// (whether a boundary is at `a`, boundaries strictly inside `(a, b)`).
fn count_boundaries(w: &Windows, a: u64, b: u64) -> (bool, u32) {
    let at_start = w.phase(a) == 0;
    let n = count_in(w, a, b);
    (
        at_start,
        (n - u64::from(at_start)).min(u64::from(u32::MAX)) as u32,
    )
}

/// Boundaries in `[a, b)`.
fn count_in(w: &Windows, a: u64, b: u64) -> u64 {
    let first = w.next_boundary(a);
    if first >= b {
        0
    } else {
        (b - 1 - first) / w.window_ns + 1
    }
}

/// The `w` parameter of a `RateLimit-Policy` value, if present and an integer.
///
/// ```
/// use floodgate_load::report::policy_window;
/// assert_eq!(policy_window("\"default\";q=20;w=2"), Some(2));
/// assert_eq!(policy_window("\"burst\";q=100;w=60,\"daily\";q=1000;w=86400"), Some(60));
/// assert_eq!(policy_window("\"x\";q=5"), None);
/// ```
pub fn policy_window(value: &str) -> Option<u64> {
    value
        .split(',')
        .next()?
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("w="))
        .find_map(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_counting() {
        let w = Windows {
            window_ns: 10,
            offset_ns: 0,
            near_ns: 2,
        };
        assert_eq!(count_in(&w, 0, 10), 1);
        assert_eq!(count_in(&w, 1, 10), 0);
        assert_eq!(count_in(&w, 1, 31), 3);
        assert_eq!(count_boundaries(&w, 10, 20), (true, 0));
        assert_eq!(count_boundaries(&w, 5, 35), (false, 3));
    }

    #[test]
    fn utc_and_numbers() {}
}
