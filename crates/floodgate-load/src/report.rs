//! [`Report`]: the result of a run, as data (serde, for `--json`) and as text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::boundary::{self, Verdict, Windows};
use crate::client::ErrorKind;
use crate::config::{Bound, LoadConfig, Mode};
use crate::run::{Waits, WorkerSummary};
use crate::stats::{Advertised, AdvertisedHeader, Finals, Percentiles, Stats};
use crate::target::Target;
use crate::timeline::Bucket;
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
                retry_wait: Percentiles::of(&waits.retry_wait),
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

    /// The human-readable report.
    pub fn render_text(&self) -> String {
        let mut o = String::new();
        let deny = self
            .deny_statuses
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join("/");
        let _ = writeln!(
            o,
            "Target:   {} {} ({})",
            self.method, self.url, self.address
        );
        let pace = match (self.mode, self.rate) {
            ("open-loop", Some(q)) => format!("open loop at {} req/s in total", fmt_num(q)),
            (_, Some(q)) => format!(
                "closed loop, each connection paced at {} req/s ({} in total)",
                fmt_num(q / self.concurrency as f64),
                fmt_num(q)
            ),
            _ => "closed loop, as fast as possible".to_string(),
        };
        let bound = match (self.count, self.duration_s) {
            (Some(n), _) => format!("{n} requests"),
            (_, Some(z)) => format!("{}s", fmt_num(z)),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "Plan:     {pace}, {} connections, {bound}; latency from the {}",
            self.concurrency, self.latency.measured_from
        );
        if self.stopped_early {
            let _ = writeln!(o, "          (stopped before the plan was done)");
        }
        let _ = writeln!(o, "\nSummary");
        let _ = writeln!(
            o,
            "  requests      {} ({} responses, {} errors)",
            self.requests,
            self.responses,
            self.requests - self.responses
        );
        let _ = writeln!(o, "  elapsed       {:.3} s", self.elapsed_s);
        let _ = writeln!(
            o,
            "  rps           {:.1} (sending at {:.1}/s)",
            self.rps, self.send_rate
        );
        let codes = self
            .statuses
            .iter()
            .map(|(s, c)| format!("[{s}] {c}"))
            .collect::<Vec<_>>()
            .join("  ");
        let _ = writeln!(
            o,
            "  status codes  {}",
            if codes.is_empty() {
                "none".into()
            } else {
                codes
            }
        );
        let _ = writeln!(
            o,
            "  errors        connect refused {}, timeout {}, other {}",
            self.errors.connect_refused, self.errors.timeout, self.errors.other
        );
        for e in &self.errors.examples {
            let _ = writeln!(o, "                e.g. {e}");
        }
        self.render_outcome(&mut o, &deny);

        let _ = writeln!(o, "\nLatency (ms, from the {})", self.latency.measured_from);
        let _ = writeln!(
            o,
            "  {:<12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "count", "mean", "p50", "p90", "p99", "p99.9", "max"
        );
        let rows: [(&str, &Percentiles); 4] = [
            ("all", &self.latency.all),
            ("200", &self.latency.status_200),
            (&deny, &self.latency.denied),
            ("other", &self.latency.other),
        ];
        for (name, p) in rows {
            let _ = writeln!(o, "  {}", pct_row(name, p));
        }
        if let Some(lag) = &self.send_lag {
            let _ = writeln!(o, "  {}", pct_row("send lag", lag));
            let _ = writeln!(
                o,
                "  (send lag: how late requests left their schedule; large means the generator fell behind)"
            );
        }

        self.render_timeline(&mut o, &deny);

        if let Some(v) = &self.boundary {
            let _ = writeln!(
                o,
                "\nBoundary verdict (window {}s{}, near = within {} ms of a boundary, {} boundaries crossed)",
                fmt_num(v.window_s),
                if v.window_offset_s > 0.0 {
                    format!(" + {}s", fmt_num(v.window_offset_s))
                } else {
                    String::new()
                },
                fmt_num(v.near_s * 1000.0),
                v.boundaries
            );
            let _ = writeln!(
                o,
                "  near boundaries: {:.0}% of the time, {:.0}% of requests sent, {:.0}% of admitted, {:.0}% of {deny}s",
                v.time_share_near * 100.0,
                v.sent_share_near * 100.0,
                v.admitted_share_near * 100.0,
                v.denied_share_near * 100.0
            );
            let _ = writeln!(
                o,
                "  admitted: {:.0}% of requests just before boundaries, {:.0}% just after, {:.0}% elsewhere",
                v.admit_rate_before * 100.0,
                v.admit_rate_after * 100.0,
                v.admit_rate_elsewhere * 100.0
            );
            let _ = writeln!(
                o,
                "  p99: {:.2} ms near boundaries, {:.2} ms elsewhere",
                v.latency_near.p99_ms, v.latency_elsewhere.p99_ms
            );
            let _ = writeln!(o, "  verdict: {}", v.verdict.to_uppercase());
            for r in &v.reasons {
                let _ = writeln!(o, "    - {r}");
            }
        } else if let Some(w) = self.advertised_window_s {
            let _ = writeln!(
                o,
                "\nBoundary verdict: the server advertises a {w}s window (RateLimit-Policy w={w}); \
                 run again with --window {w}s to judge its boundaries"
            );
        }

        let _ = writeln!(o, "\nWhat the server advertised");
        if self.advertised.is_empty() {
            let _ = writeln!(
                o,
                "  no RateLimit-Policy, RateLimit, Retry-After or X-RateLimit-* headers"
            );
        }
        for h in &self.advertised {
            let _ = writeln!(
                o,
                "  {:<22} {:>8} responses   last: {}",
                h.header, h.responses, h.last
            );
        }
        o
    }

    fn render_outcome(&self, o: &mut String, deny: &str) {
        let c = &self.outcome;
        let f = &c.finals;
        let _ = writeln!(o, "\nOutcome (each request once, after its retries)");
        let _ = writeln!(
            o,
            "  requests      {}: succeeded {}, failed {} ({deny} {}, other status {}, no response {}), abandoned {}",
            c.requests, c.succeeded, c.failed, f.denied, f.other_status, f.errors, c.abandoned
        );
        let _ = writeln!(
            o,
            "  {:<13} {} of {} attempts",
            format!("{deny}s seen"),
            c.denied_responses,
            c.attempts
        );
        let Some(p) = &self.polite else {
            let _ = writeln!(
                o,
                "  retries       0 (naive: every request sent once, no waits; --polite to compare)"
            );
            return;
        };
        let _ = writeln!(
            o,
            "  retries       {} ({} refused by the retry budget)",
            c.retries, p.budget_refused
        );
        let _ = writeln!(
            o,
            "  waited        {:.3} s pacing + {:.3} s before retries, summed over requests ({:.1} ms per request)",
            p.pacing_wait_s, p.retry_wait_s, p.wait_per_request_ms
        );
        let _ = writeln!(
            o,
            "  polite client {}, up to {} attempts, {} jitter backoff {}..{} s, retry budget {}% + {}/s, waits capped at {} s{}",
            if p.pacing { "paced" } else { "not paced" },
            p.max_attempts,
            p.jitter,
            fmt_num(p.backoff_base_s),
            fmt_num(p.backoff_cap_s),
            fmt_num(p.retry_budget * 100.0),
            p.retry_budget_min_per_s,
            fmt_num(p.max_wait_s),
            if p.retry_non_idempotent {
                ", every method retried"
            } else {
                ", idempotent methods only"
            }
        );
        if p.retry_wait.count > 0 {
            let _ = writeln!(
                o,
                "  retry waits (ms): mean {:.1}, p50 {:.1}, p90 {:.1}, p99 {:.1}, max {:.1}",
                p.retry_wait.mean_ms,
                p.retry_wait.p50_ms,
                p.retry_wait.p90_ms,
                p.retry_wait.p99_ms,
                p.retry_wait.max_ms
            );
        }
    }

    fn render_timeline(&self, o: &mut String, deny: &str) {
        let all = &self.timeline.buckets;
        if all.is_empty() {
            return;
        }
        let group = all.len().div_ceil(MAX_TEXT_ROWS);
        let rows: Vec<BucketReport> = all.chunks(group).map(merge_rows).collect();
        let width = self.timeline.bucket_s * group as f64;
        let _ = writeln!(
            o,
            "\nTimeline ({}s buckets by send time{}; admitted # and {deny} . per bucket)",
            fmt_num(width),
            if self.boundary.is_some() {
                ", === marks a window boundary"
            } else {
                ""
            }
        );
        let polite = self.polite.is_some();
        let _ = writeln!(
            o,
            "  {:>8}  {:<12} {:>7} {:>8} {:>7} {:>6}{} {:>9}",
            "t",
            "UTC",
            "sent",
            "admitted",
            deny,
            "errors",
            if polite { " retries" } else { "" },
            "p99 ms"
        );
        let peak = rows.iter().map(|r| r.sent).max().unwrap_or(1).max(1);
        for r in &rows {
            if r.boundary_at_start {
                let _ = writeln!(o, "  ===== boundary at {} =====", utc(r.start_unix_s));
            }
            let bar_len = 30usize;
            let a = (r.admitted as f64 / peak as f64 * bar_len as f64).round() as usize;
            let d = (r.denied as f64 / peak as f64 * bar_len as f64).round() as usize;
            let _ = writeln!(
                o,
                "  {:>+8.3}  {:<12} {:>7} {:>8} {:>7} {:>6}{} {:>9.2}  {}{}{}",
                r.start_s,
                utc(r.start_unix_s),
                r.sent,
                r.admitted,
                r.denied,
                r.errors,
                if polite {
                    format!(" {:>7}", r.retries)
                } else {
                    String::new()
                },
                r.p99_ms,
                "#".repeat(a),
                ".".repeat(d),
                if r.boundaries_inside > 0 {
                    format!("  (boundary inside x{})", r.boundaries_inside)
                } else {
                    String::new()
                }
            );
        }
    }
}

fn merge_rows(chunk: &[BucketReport]) -> BucketReport {
    let mut m = chunk[0].clone();
    for r in &chunk[1..] {
        m.sent += r.sent;
        m.admitted += r.admitted;
        m.denied += r.denied;
        m.errors += r.errors;
        m.retries += r.retries;
        m.p99_ms = m.p99_ms.max(r.p99_ms);
        m.boundaries_inside += r.boundaries_inside + u32::from(r.boundary_at_start);
    }
    m
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

fn pct_row(name: &str, p: &Percentiles) -> String {
    if p.count == 0 {
        return format!("{name:<12} {:>8}", 0);
    }
    format!(
        "{name:<12} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        p.count, p.mean_ms, p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms
    )
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// `hh:mm:ss.mmm` (UTC) of a Unix time in seconds.
fn utc(unix_s: f64) -> String {
    let ms = (unix_s * 1000.0).round() as u64;
    let day_ms = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
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
    fn utc_and_numbers() {
        assert_eq!(utc(3661.5), "01:01:01.500");
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(0.25), "0.25");
    }
}
