//! Per-request records and the aggregator that turns them into counts, HDR histograms,
//! the timeline and the boundary zones.
//!
//! Workers batch [`Record`]s and send them to one aggregator task, so the statistics have a
//! single owner and no locks. All times in a record are nanoseconds since the start of the
//! run (monotonic); the aggregator maps them to the wall clock with the wall time read at
//! the start. Latencies are kept in microseconds, from 1 µs to 1 hour.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use http::HeaderMap;
use serde::Serialize;

use crate::boundary::{Windows, ZoneStats};
use crate::client::ErrorKind;
use crate::config::Mode;
use crate::goodput::{Final, GoodputStats};
use crate::timeline::Timeline;

pub use crate::histogram::{MAX_LATENCY_US, Percentiles, new_histogram};

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An HTTP response with this status.
    Status(u16),
    /// No response.
    Error(ErrorKind),
}

/// One attempt: when its request was meant to go, when the attempt went, when it ended
/// (ns since start). Without `--polite` every request is one attempt (`attempt` 1, `last`).
#[derive(Debug, Clone, Copy)]
pub struct Record {
    /// The instant latency is measured from: open loop, the request's intended send time
    /// `i / rate`; closed loop, when the worker started the request (equal to `sent` of
    /// the first attempt unless a polite client waited before it).
    pub intended: u64,
    /// Actual send time of this attempt.
    pub sent: u64,
    /// When the response was complete or the attempt failed.
    pub done: u64,
    /// The outcome of this attempt.
    pub outcome: Outcome,
    /// 1 for the first attempt of a request, 2 for its first retry, ...
    pub attempt: u32,
    /// Whether this is the request's last attempt (its outcome is the request's).
    pub last: bool,
    /// The request's traffic class (index into the run's [`crate::ClassMix`]; 0 without
    /// one).
    pub class: u8,
}

/// What became of requests, each counted once after its retries.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Finals {
    /// Requests that ended with a 2xx or 3xx status that is not a denial status.
    pub succeeded: u64,
    /// Requests that ended with a denial status (429 unless configured).
    pub denied: u64,
    /// Requests that ended with any other status (4xx, 5xx).
    pub other_status: u64,
    /// Requests that ended without a response (refused, timeout, other).
    pub errors: u64,
}

/// Live counters for a progress display, updated by the aggregator as batches arrive.
#[derive(Debug, Default)]
pub struct Live {
    /// Requests finished (responses and errors).
    pub done: AtomicU64,
    /// Responses with a status that is not a denial status.
    pub admitted: AtomicU64,
    /// Responses with a denial status.
    pub denied: AtomicU64,
    /// Requests without a response.
    pub errors: AtomicU64,
}

/// A snapshot of [`Live`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveSnapshot {
    /// See [`Live::done`].
    pub done: u64,
    /// See [`Live::admitted`].
    pub admitted: u64,
    /// See [`Live::denied`].
    pub denied: u64,
    /// See [`Live::errors`].
    pub errors: u64,
}

impl Live {
    /// Read all counters.
    pub fn snapshot(&self) -> LiveSnapshot {
        LiveSnapshot {
            done: self.done.load(Ordering::Relaxed),
            admitted: self.admitted.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// The rate-limit headers a server sent: per header, how many responses carried it and
/// the last value seen (by completion time).
#[derive(Debug, Clone, Default)]
pub struct Advertised {
    seen: BTreeMap<String, (u64, u64, String)>,
}

/// Header names recorded by [`Advertised`] besides any `x-ratelimit-*`.
pub const ADVERTISED: [&str; 3] = ["ratelimit-policy", "ratelimit", "retry-after"];

/// One advertised header in the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AdvertisedHeader {
    /// Lower-case header name.
    pub header: String,
    /// Responses that carried it.
    pub responses: u64,
    /// The last value seen.
    pub last: String,
}

impl Advertised {
    /// Note the rate-limit headers of a response completed at `done` (ns since start).
    pub fn observe(&mut self, headers: &HeaderMap, done: u64) {
        for (name, value) in headers {
            let n = name.as_str();
            if !(ADVERTISED.contains(&n) || n.starts_with("x-ratelimit-")) {
                continue;
            }
            let v = String::from_utf8_lossy(value.as_bytes());
            match self.seen.get_mut(n) {
                Some((count, at, last)) => {
                    *count += 1;
                    if done >= *at {
                        *at = done;
                        if *last != v {
                            *last = v.into_owned();
                        }
                    }
                }
                None => {
                    self.seen.insert(n.to_string(), (1, done, v.into_owned()));
                }
            }
        }
    }

    /// Merge another worker's observations (the later value wins).
    pub fn merge(&mut self, other: Advertised) {
        for (name, (count, at, last)) in other.seen {
            match self.seen.get_mut(&name) {
                Some(mine) => {
                    mine.0 += count;
                    if at > mine.1 {
                        mine.1 = at;
                        mine.2 = last;
                    }
                }
                None => {
                    self.seen.insert(name, (count, at, last));
                }
            }
        }
    }

    /// The headers, standard ones first.
    pub fn headers(&self) -> Vec<AdvertisedHeader> {
        let rank = |n: &str| {
            ADVERTISED
                .iter()
                .position(|a| *a == n)
                .unwrap_or(ADVERTISED.len())
        };
        let mut v: Vec<AdvertisedHeader> = self
            .seen
            .iter()
            .map(|(n, (count, _, last))| AdvertisedHeader {
                header: n.clone(),
                responses: *count,
                last: last.clone(),
            })
            .collect();
        v.sort_by(|a, b| {
            rank(&a.header)
                .cmp(&rank(&b.header))
                .then(a.header.cmp(&b.header))
        });
        v
    }
}

/// The aggregator's state: everything the report is made of except what workers keep
/// (advertised headers, error messages).
pub struct Stats {
    mode: Mode,
    wall0: u64,
    deny: Vec<bool>,
    /// Count per status code (index = code, 0..=599).
    pub statuses: Vec<u64>,
    /// Errors per [`ErrorKind`].
    pub errors: [u64; 3],
    /// Latency of all responses (µs).
    pub latency_all: Histogram<u64>,
    /// Latency of 200 responses.
    pub latency_200: Histogram<u64>,
    /// Latency of denial responses.
    pub latency_denied: Histogram<u64>,
    /// Latency of other responses.
    pub latency_other: Histogram<u64>,
    /// How late requests left relative to their intended time (µs; open loop only).
    pub send_lag: Histogram<u64>,
    /// Outcomes per bucket.
    pub timeline: Timeline,
    /// Boundary zones, when a window is known.
    pub zones: Option<(Windows, [ZoneStats; 3])>,
    /// Earliest and latest send, and latest completion (ns since start).
    pub first_sent: u64,
    /// See `first_sent`.
    pub last_sent: u64,
    /// See `first_sent`.
    pub last_done: u64,
    /// Attempts recorded (requests plus retries).
    pub count: u64,
    /// Attempts that were retries (attempt > 1).
    pub retries: u64,
    /// Final outcomes of requests (their last attempts).
    pub finals: Finals,
    /// Goodput, overall and per class.
    pub goodput: GoodputStats,
}

impl Stats {
    /// Empty statistics for a run started at wall instant `wall0` (ns since the epoch).
    pub fn new(
        mode: Mode,
        wall0: u64,
        bucket_ns: u64,
        windows: Option<Windows>,
        deny_statuses: &[u16],
    ) -> Stats {
        let mut deny = vec![false; 600];
        for &s in deny_statuses {
            if let Some(d) = deny.get_mut(usize::from(s)) {
                *d = true;
            }
        }
        let phase = windows.map_or(0, |w| w.offset_ns);
        Stats {
            mode,
            wall0,
            deny,
            statuses: vec![0; 600],
            errors: [0; 3],
            latency_all: new_histogram(3),
            latency_200: new_histogram(3),
            latency_denied: new_histogram(3),
            latency_other: new_histogram(3),
            send_lag: new_histogram(3),
            timeline: Timeline::new(wall0, bucket_ns, phase),
            zones: windows.map(|w| (w, Default::default())),
            first_sent: u64::MAX,
            last_sent: 0,
            last_done: 0,
            count: 0,
            retries: 0,
            finals: Finals::default(),
            goodput: GoodputStats::new(None, 0),
        }
    }

    /// Count toward goodput the successes done by `until_ns` (ns since the start; `None`:
    /// all), and keep `classes` per-class tallies (0 without a class mix).
    pub fn with_goodput(mut self, until_ns: Option<u64>, classes: usize) -> Stats {
        self.goodput = GoodputStats::new(until_ns, classes);
        self
    }

    /// Whether `status` counts as a denial.
    pub fn is_denial(&self, status: u16) -> bool {
        self.deny.get(usize::from(status)).copied().unwrap_or(false)
    }

    /// Add one batch and update the live counters.
    pub fn add(&mut self, batch: &[Record], live: &Live) {
        let (mut admitted, mut denied, mut errors) = (0, 0, 0);
        for r in batch {
            match r.outcome {
                Outcome::Status(s) if self.is_denial(s) => denied += 1,
                Outcome::Status(_) => admitted += 1,
                Outcome::Error(_) => errors += 1,
            }
            self.record(r);
        }
        live.admitted.fetch_add(admitted, Ordering::Relaxed);
        live.denied.fetch_add(denied, Ordering::Relaxed);
        live.errors.fetch_add(errors, Ordering::Relaxed);
        live.done
            .fetch_add(admitted + denied + errors, Ordering::Relaxed);
    }

    fn record(&mut self, r: &Record) {
        self.count += 1;
        self.first_sent = self.first_sent.min(r.sent);
        self.last_sent = self.last_sent.max(r.sent);
        self.last_done = self.last_done.max(r.done);
        // Latency is per request: from its intended (or start) time to the end of its
        // last attempt, so earlier attempts of a retried request add none.
        let latency_us = r
            .last
            .then(|| (r.done.saturating_sub(r.intended) / 1000).clamp(1, MAX_LATENCY_US));
        if self.mode == Mode::OpenLoop && r.attempt <= 1 {
            let lag = (r.sent.saturating_sub(r.intended) / 1000).clamp(1, MAX_LATENCY_US);
            self.send_lag.saturating_record(lag);
        }
        let wall_sent = self.wall0.saturating_add(r.sent);
        let bucket = self.timeline.bucket_mut(wall_sent);
        bucket.sent += 1;
        if r.attempt > 1 {
            self.retries += 1;
            bucket.retries += 1;
        }
        let zone = self
            .zones
            .as_mut()
            .map(|(w, z)| &mut z[w.zone(wall_sent) as usize]);
        match r.outcome {
            Outcome::Status(s) => {
                let denied = self.deny.get(usize::from(s)).copied().unwrap_or(false);
                if let Some(c) = self.statuses.get_mut(usize::from(s)) {
                    *c += 1;
                }
                if denied {
                    bucket.denied += 1;
                } else {
                    bucket.admitted += 1;
                }
                if let Some(z) = zone {
                    z.sent += 1;
                    if denied {
                        z.denied += 1;
                    } else {
                        z.admitted += 1;
                    }
                    if let Some(l) = latency_us {
                        z.latency.saturating_record(l);
                    }
                }
                if let Some(l) = latency_us {
                    self.latency_all.saturating_record(l);
                    bucket.latency.saturating_record(l);
                    let kind = if denied {
                        Final::Denied
                    } else if (200..400).contains(&s) {
                        Final::Success
                    } else {
                        Final::OtherStatus
                    };
                    self.goodput.record(r.class, kind, r.done, l);
                    let hist = if denied {
                        self.finals.denied += 1;
                        &mut self.latency_denied
                    } else if s == 200 {
                        self.finals.succeeded += 1;
                        &mut self.latency_200
                    } else {
                        if kind == Final::Success {
                            self.finals.succeeded += 1;
                        } else {
                            self.finals.other_status += 1;
                        }
                        &mut self.latency_other
                    };
                    hist.saturating_record(l);
                }
            }
            Outcome::Error(kind) => {
                self.errors[kind.index()] += 1;
                bucket.errors += 1;
                if r.last {
                    self.finals.errors += 1;
                    self.goodput.record(r.class, Final::Error, r.done, 0);
                }
                if let Some(z) = zone {
                    z.sent += 1;
                    z.errors += 1;
                }
            }
        }
    }

    /// Status codes seen, ascending, with counts.
    pub fn status_counts(&self) -> BTreeMap<u16, u64> {
        self.statuses
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(s, c)| (s as u16, *c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn advertised_keeps_the_latest_value_and_counts() {
        let mut a = Advertised::default();
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_static("\"d\";r=5;t=1"));
        h.insert("x-ratelimit-remaining", HeaderValue::from_static("5"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        a.observe(&h, 10);
        let mut b = Advertised::default();
        h.insert("ratelimit", HeaderValue::from_static("\"d\";r=0;t=1"));
        h.insert("retry-after", HeaderValue::from_static("1"));
        b.observe(&h, 20);
        a.merge(b);
        let v = a.headers();
        let names: Vec<&str> = v.iter().map(|h| h.header.as_str()).collect();
        assert_eq!(names, ["ratelimit", "retry-after", "x-ratelimit-remaining"]);
        assert_eq!((v[0].responses, v[0].last.as_str()), (2, "\"d\";r=0;t=1"));
        assert_eq!(v[1].responses, 1);
    }

    #[test]
    fn open_loop_latency_is_from_the_intended_time() {
        let live = Live::default();
        let mut s = Stats::new(Mode::OpenLoop, 0, 1_000_000_000, None, &[429]);
        let r = Record {
            intended: 0,
            sent: 900_000_000,
            done: 1_000_000_000,
            outcome: Outcome::Status(200),
            attempt: 1,
            last: true,
            class: 0,
        };
        s.add(&[r], &live);
        assert_eq!(s.latency_200.max() / 1000, 1000);
        assert_eq!(s.send_lag.max() / 1000, 900);
        // Closed loop: the worker measures from the actual send (intended = sent).
        let mut c = Stats::new(Mode::ClosedLoop, 0, 1_000_000_000, None, &[429]);
        c.add(
            &[Record {
                intended: r.sent,
                ..r
            }],
            &live,
        );
        assert_eq!(c.latency_200.max() / 1000, 100);
        assert_eq!(live.snapshot().done, 2);
    }

    #[test]
    fn a_retried_request_has_one_latency_from_its_start_and_one_final_outcome() {
        let live = Live::default();
        let mut s = Stats::new(Mode::OpenLoop, 0, 1_000_000_000, None, &[429]);
        let first = Record {
            intended: 0,
            sent: 10_000_000,
            done: 20_000_000,
            outcome: Outcome::Status(429),
            attempt: 1,
            last: false,
            class: 0,
        };
        let retry = Record {
            sent: 1_500_000_000,
            done: 1_510_000_000,
            outcome: Outcome::Status(200),
            attempt: 2,
            last: true,
            ..first
        };
        s.add(&[first, retry], &live);
        assert_eq!((s.count, s.retries, s.status_counts().len()), (2, 1, 2));
        assert_eq!(s.latency_all.len(), 1);
        assert_eq!(s.latency_denied.len(), 0);
        assert_eq!(s.latency_200.max() / 1000, 1510);
        assert_eq!(
            s.finals,
            Finals {
                succeeded: 1,
                ..Finals::default()
            }
        );
        assert_eq!(s.send_lag.len(), 1);
        assert_eq!(s.timeline.buckets.iter().map(|b| b.retries).sum::<u64>(), 1);
    }
}
