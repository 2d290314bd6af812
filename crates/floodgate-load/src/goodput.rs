//! Goodput: what a server under load got done. Successful responses per second over the
//! sending window, the latency of the successes alone, and, with traffic classes
//! ([`crate::ClassMix`]), the success rate and latency per class: the figures an overload
//! policy is judged by (a limiter that sheds well keeps goodput near capacity and the
//! successes fast, and sheds the low classes first).
//!
//! A success is a request whose final outcome is a 2xx or 3xx that is not a denial
//! status. Goodput counts the successes that completed within the sending window
//! (`[0, -z]` of a duration run; the whole run of a count run) divided by its length, so
//! the tail of requests still finishing after the sending stopped does not inflate it.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::classes::ClassMix;
use crate::histogram::{Percentiles, new_histogram};

/// How a request finally ended, as goodput sorts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Final {
    /// 2xx or 3xx, not a denial status.
    Success,
    /// A denial status (429 unless configured).
    Denied,
    /// Any other status.
    OtherStatus,
    /// No response.
    Error,
}

/// One class's (or the whole run's) tally.
#[derive(Debug, Clone)]
struct Tally {
    requests: u64,
    succeeded: u64,
    denied: u64,
    other_status: u64,
    errors: u64,
    /// Latency of the successes, µs.
    latency: Histogram<u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            requests: 0,
            succeeded: 0,
            denied: 0,
            other_status: 0,
            errors: 0,
            latency: new_histogram(3),
        }
    }
}

impl Tally {
    fn add(&mut self, kind: Final, latency_us: u64) {
        self.requests += 1;
        match kind {
            Final::Success => {
                self.succeeded += 1;
                self.latency.saturating_record(latency_us.max(1));
            }
            Final::Denied => self.denied += 1,
            Final::OtherStatus => self.other_status += 1,
            Final::Error => self.errors += 1,
        }
    }

    fn rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.succeeded as f64 / self.requests as f64
        }
    }
}

/// The aggregator's goodput state: fed one final outcome per request.
#[derive(Debug, Clone)]
pub struct GoodputStats {
    /// End of the sending window, ns since the start (`u64::MAX`: no window, count run).
    until_ns: u64,
    in_window: u64,
    all: Tally,
    classes: Vec<Tally>,
}

impl GoodputStats {
    /// Empty, counting toward goodput the successes done by `until_ns` (ns since the
    /// start; `None` for all), with `classes` per-class tallies (0 without a mix).
    pub fn new(until_ns: Option<u64>, classes: usize) -> GoodputStats {
        GoodputStats {
            until_ns: until_ns.unwrap_or(u64::MAX),
            in_window: 0,
            all: Tally::default(),
            classes: vec![Tally::default(); classes],
        }
    }

    /// One request's final outcome: its class, how it ended, when (ns since the start)
    /// and its latency (µs).
    pub fn record(&mut self, class: u8, kind: Final, done_ns: u64, latency_us: u64) {
        self.all.add(kind, latency_us);
        if let Some(t) = self.classes.get_mut(usize::from(class)) {
            t.add(kind, latency_us);
        }
        if kind == Final::Success && done_ns <= self.until_ns {
            self.in_window += 1;
        }
    }

    /// The report part; `window_s` is the length of the sending window (or of the whole
    /// run when there is none).
    pub fn report(&self, window_s: f64, mix: Option<&ClassMix>) -> GoodputReport {
        let classes = match mix {
            None => Vec::new(),
            Some(m) => m
                .classes
                .iter()
                .zip(&self.classes)
                .map(|(c, t)| ClassReport {
                    name: c.name.clone(),
                    share: c.share,
                    requests: t.requests,
                    succeeded: t.succeeded,
                    denied: t.denied,
                    other_status: t.other_status,
                    errors: t.errors,
                    success_rate: t.rate(),
                    success_latency: Percentiles::of(&t.latency),
                })
                .collect(),
        };
        GoodputReport {
            window_s,
            succeeded_in_window: self.in_window,
            goodput_per_s: if window_s > 0.0 {
                self.in_window as f64 / window_s
            } else {
                0.0
            },
            requests: self.all.requests,
            succeeded: self.all.succeeded,
            success_rate: self.all.rate(),
            success_latency: Percentiles::of(&self.all.latency),
            class_header: mix.map(|m| m.header.as_str().to_string()),
            classes,
        }
    }
}

/// Goodput, success rate and latency of successes, overall and per class.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GoodputReport {
    /// The sending window successes are counted in, seconds.
    pub window_s: f64,
    /// Successes that completed within the window.
    pub succeeded_in_window: u64,
    /// `succeeded_in_window / window_s`: successful responses per second.
    pub goodput_per_s: f64,
    /// Requests, each counted once (its final outcome).
    pub requests: u64,
    /// Requests that succeeded, whenever they completed.
    pub succeeded: u64,
    /// `succeeded / requests` (0 when none).
    pub success_rate: f64,
    /// Latency of the successes (from the intended send time in open loop).
    pub success_latency: Percentiles,
    /// The header the classes were sent in, when a mix was given.
    pub class_header: Option<String>,
    /// One row per class, in the order of the mix (empty without one).
    pub classes: Vec<ClassReport>,
}

/// One class's outcome.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassReport {
    /// The class name (the header's value).
    pub name: String,
    /// Its share of the requests in the mix, 0 to 1.
    pub share: f64,
    /// Requests of the class.
    pub requests: u64,
    /// Of them, successes.
    pub succeeded: u64,
    /// Of them, denials (429 unless configured).
    pub denied: u64,
    /// Of them, other statuses (e.g. 503 from a shedding limiter or a full backend).
    pub other_status: u64,
    /// Of them, no response (timeouts included).
    pub errors: u64,
    /// `succeeded / requests` (0 when none).
    pub success_rate: f64,
    /// Latency of the class's successes.
    pub success_latency: Percentiles,
}

impl GoodputReport {
    /// The text section of the report.
    pub fn render_text(&self, o: &mut String) {
        let _ = writeln!(o, "\nGoodput");
        let _ = writeln!(
            o,
            "  goodput       {:.1} successful responses/s ({} completed within the {:.3} s of sending)",
            self.goodput_per_s, self.succeeded_in_window, self.window_s
        );
        let _ = writeln!(
            o,
            "  successes     {} of {} requests ({:.1}%)",
            self.succeeded,
            self.requests,
            self.success_rate * 100.0
        );
        let l = &self.success_latency;
        let _ = writeln!(
            o,
            "  latency       of successes: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            l.p50_ms, l.p99_ms, l.max_ms
        );
        if self.classes.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "  {:<16} {:>6} {:>9} {:>9} {:>8} {:>7} {:>7} {:>9} {:>9}",
            format!("class ({})", self.class_header.as_deref().unwrap_or("")),
            "share",
            "requests",
            "succeeded",
            "success",
            "denied",
            "errors",
            "p50 ms",
            "p99 ms"
        );
        for c in &self.classes {
            let _ = writeln!(
                o,
                "  {:<16} {:>6.2} {:>9} {:>9} {:>7.1}% {:>7} {:>7} {:>9.2} {:>9.2}",
                c.name,
                c.share,
                c.requests,
                c.succeeded,
                c.success_rate * 100.0,
                c.denied + c.other_status,
                c.errors,
                c.success_latency.p50_ms,
                c.success_latency.p99_ms
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_counts_successes_within_the_window_and_classes_apart() {
        let mix = ClassMix::parse("x-priority", "critical=1,sheddable=1").unwrap();
        let mut g = GoodputStats::new(Some(2_000_000_000), 2);
        // critical: 3 successes (one done after the window), sheddable: 1 success, 1
        // denial, 1 other status, 1 timeout
        g.record(0, Final::Success, 100_000_000, 10_000);
        g.record(0, Final::Success, 1_000_000_000, 30_000);
        g.record(0, Final::Success, 2_500_000_000, 50_000);
        g.record(1, Final::Success, 1_500_000_000, 20_000);
        g.record(1, Final::Denied, 1_600_000_000, 1_000);
        g.record(1, Final::OtherStatus, 1_700_000_000, 1_000);
        g.record(1, Final::Error, 1_800_000_000, 0);
        let r = g.report(2.0, Some(&mix));
        assert_eq!((r.succeeded_in_window, r.succeeded, r.requests), (3, 4, 7));
        assert_eq!(r.goodput_per_s, 1.5);
        assert!((r.success_rate - 4.0 / 7.0).abs() < 1e-12);
        // latency of successes only: the 1 ms denials are not in it
        assert_eq!(r.success_latency.count, 4);
        assert!(
            (r.success_latency.p50_ms - 20.0).abs() < 0.1,
            "{:?}",
            r.success_latency
        );
        assert_eq!(r.class_header.as_deref(), Some("x-priority"));
        let (c, s) = (&r.classes[0], &r.classes[1]);
        assert_eq!(
            (c.name.as_str(), c.requests, c.succeeded, c.success_rate),
            ("critical", 3, 3, 1.0)
        );
        assert_eq!(
            (s.requests, s.succeeded, s.denied, s.other_status, s.errors),
            (4, 1, 1, 1, 1)
        );
        assert_eq!(s.success_rate, 0.25);
        assert!((c.success_latency.p99_ms - 50.0).abs() < 0.1);
        let mut text = String::new();
        r.render_text(&mut text);
        for part in [
            "1.5 successful responses/s",
            "4 of 7 requests (57.1%)",
            "class (x-priority)",
            "critical",
            "25.0%",
        ] {
            assert!(text.contains(part), "{part} in\n{text}");
        }
    }

    #[test]
    fn without_a_window_or_classes_every_success_counts_and_no_rows() {
        let mut g = GoodputStats::new(None, 0);
        g.record(0, Final::Success, u64::MAX - 1, 5);
        let r = g.report(0.0, None);
        assert_eq!((r.succeeded_in_window, r.goodput_per_s), (1, 0.0));
        assert!(r.classes.is_empty() && r.class_header.is_none());
        let empty = GoodputStats::new(Some(1), 0).report(1.0, None);
        assert_eq!((empty.success_rate, empty.success_latency.count), (0.0, 0));
    }
}
